"""Input checks shared by the attention function and modules.

Each check raises before any computation, naming the argument, what it got and what it
expected. ``assert`` is never used for user input (it vanishes under ``python -O``).
"""

import torch

MASK_CONVENTION = "boolean, True = may attend"


def kind_of(x) -> str:
    """What an argument is, for error messages: a tensor's dtype, else its type's name."""
    return str(x.dtype) if isinstance(x, torch.Tensor) else type(x).__name__


def check_tensor(name: str, x, *, min_rank: int = 0) -> None:
    """Raise ``TypeError`` unless ``x`` is a floating tensor of rank >= ``min_rank``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"`{name}` must be a floating-point tensor, got {x.dtype}")
    if x.dim() < min_rank:
        raise ValueError(
            f"`{name}` must have at least {min_rank} dimensions, got shape {tuple(x.shape)}"
        )


def check_bool_mask(name: str, mask, target_shape: tuple) -> None:
    """Raise unless ``mask`` is a bool tensor that broadcasts to ``target_shape``.

    Broadcasting may only add or stretch size-1 dimensions of the mask; the mask may not
    make the result larger than ``target_shape`` (no silent broadcast of the data).
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"`{name}` must be a torch.Tensor of dtype torch.bool ({MASK_CONVENTION}), "
            f"got {type(mask).__name__}"
        )
    if mask.dtype != torch.bool:
        raise TypeError(
            f"`{name}` must be torch.bool ({MASK_CONVENTION}), got {mask.dtype}. "
            "Convert an additive float mask (0 = keep, -inf = block) with "
            "`mhsa.mask_from_additive(mask)`, or a torch.nn.MultiheadAttention mask "
            "(True = ignore) with `mhsa.mask_from_torch_mha(mask)`"
        )
    target = tuple(target_shape)
    # right-aligned, each mask dimension is 1 or equal to the target's (plain Python: cheap)
    ok = mask.dim() <= len(target) and all(
        m in (1, t) for m, t in zip(reversed(mask.shape), reversed(target))
    )
    if not ok:
        raise ValueError(
            f"`{name}` of shape {tuple(mask.shape)} does not broadcast to the attention "
            f"scores' shape {target} ([..., n_q, n_k])"
        )


def check_positive_int(name: str, n) -> None:
    """Raise ``ValueError`` unless ``n`` is an ``int >= 1`` (``bool`` is refused)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"`{name}` must be a positive int, got {n!r}")


def check_divisible(name: str, n: int, divisor_name: str, divisor: int) -> None:
    """Raise ``ValueError`` unless ``divisor`` divides ``n`` (e.g. a width into heads)."""
    if n % divisor:
        raise ValueError(f"`{name}` ({n}) must be divisible by `{divisor_name}` ({divisor})")


def check_shape(name: str, x, layout: tuple, last: int) -> None:
    """Raise unless ``x`` is a floating tensor with ``len(layout)`` dims and last dim ``last``.

    ``layout`` names the dimensions for the message, e.g. ``("batch", "n_q", "embed_dim")``.
    """
    check_tensor(name, x)
    if x.dim() != len(layout) or x.shape[-1] != last:
        expected = f"{len(layout)}-D [{', '.join(layout)}]"
        if x.dim() == len(layout):
            expected += f" with {layout[-1]}={last}"
        raise ValueError(f"`{name}` must be {expected}, got shape {tuple(x.shape)}")
