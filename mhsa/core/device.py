"""Pick the device every chapter and test runs on."""

import torch


def default_device() -> torch.device:
    """Return the best available device: ``cuda``, else ``mps``, else ``cpu``.

    Every notebook moves its tensors and modules here, so the same code runs on a laptop
    CPU, an Apple GPU and a Colab GPU.

    Returns:
        torch.device: ``cuda`` when ``torch.cuda.is_available()``, ``mps`` when the
        Metal backend is available, otherwise ``cpu``.
    """
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
