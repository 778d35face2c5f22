"""Cut images into patches and put them back: the tokens of a vision transformer.

Legend for the patterns below (einops allows axis names of several letters):
b batch, c channels, gh / gw patch-grid rows / columns (patches down / across the image),
ph / pw row / column inside a patch (each ``patch_size`` long).
``height = gh * ph`` and ``width = gw * pw``. Patches come in row-major order (patch
``k`` sits in grid row ``k // gw``, grid column ``k % gw``), and each patch is flattened
as (row in patch, column in patch, channel), channel varying fastest.
"""

import torch
from einops import rearrange

from mhsa.core._checks import check_positive_int

PATCHIFY = "b c (gh ph) (gw pw) -> b (gh gw) (ph pw c)"
UNPATCHIFY = "b (gh gw) (ph pw c) -> b c (gh ph) (gw pw)"  # the same pattern, reversed


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Cut ``[batch, channels, height, width]`` images into flattened square patches.

    One einops rearrange, ``"b c (gh ph) (gw pw) -> b (gh gw) (ph pw c)"``: a pure
    reordering of the entries, so any dtype works (integers included) and nothing is
    computed. Patch ``k`` covers rows ``(k // gw) * patch_size`` onwards and columns
    ``(k % gw) * patch_size`` onwards; its entries are listed row by row within the patch,
    and at each pixel all channels in order.

    Args:
        images: ``[batch, channels, height, width]`` tensor, any dtype.
        patch_size: side ``p`` of each square patch, in pixels; a positive int dividing
            both ``height`` and ``width``.

    Returns:
        ``[batch, n_patches, p * p * channels]`` with
        ``n_patches = (height // p) * (width // p)``.

    Raises:
        TypeError: ``images`` is not a torch.Tensor.
        ValueError: ``images`` is not 4-D; ``patch_size`` is below 1 (not an int:
            ``TypeError``); ``height`` or ``width`` is not a multiple of ``patch_size``.

    Source: Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words: Transformers for
    Image Recognition at Scale" (ViT), section 3.1: the image is reshaped into a sequence
    of ``N = HW / P^2`` flattened patches of size ``P^2 * C``.
    """
    _check_rank("images", images, "batch, channels, height, width")
    check_positive_int("patch_size", patch_size)
    _check_sides(images.shape[2], images.shape[3], patch_size)
    return rearrange(images, PATCHIFY, ph=patch_size, pw=patch_size)


def unpatchify(patches: torch.Tensor, patch_size: int, height: int, width: int) -> torch.Tensor:
    """Put flattened patches back into images: the exact inverse of :func:`patchify`.

    One einops rearrange, ``"b (gh gw) (ph pw c) -> b c (gh ph) (gw pw)"`` (the
    :func:`patchify` pattern reversed), so ``unpatchify(patchify(x, p), p, H, W)`` equals
    ``x`` exactly, entry for entry.

    Args:
        patches: ``[batch, n_patches, p * p * channels]`` tensor, any dtype, patches in
            row-major order, each flattened as (row in patch, column in patch, channel).
        patch_size: side ``p`` of each square patch, in pixels.
        height, width: size of the images to rebuild, in pixels; multiples of ``p``.

    Returns:
        ``[batch, channels, height, width]``.

    Raises:
        TypeError: ``patches`` is not a torch.Tensor.
        ValueError: ``patches`` is not 3-D; ``patch_size``, ``height`` or ``width`` is not a
            positive int; ``height`` or ``width`` is not a multiple of ``patch_size``;
            ``n_patches`` differs from ``(height // p) * (width // p)``; the last dimension
            is not a multiple of ``p * p``.

    Source: Dosovitskiy et al. 2021 (ViT), section 3.1 (the inverse of its reshape).
    """
    _check_rank("patches", patches, "batch, n_patches, patch_size * patch_size * channels")
    for name, n in (("patch_size", patch_size), ("height", height), ("width", width)):
        check_positive_int(name, n)
    _check_sides(height, width, patch_size)
    grid_h, grid_w = height // patch_size, width // patch_size
    if patches.shape[1] != grid_h * grid_w:
        raise ValueError(
            f"`patches` has {patches.shape[1]} patches but a {height}x{width} image cut into "
            f"{patch_size}x{patch_size} patches has {grid_h} * {grid_w} = {grid_h * grid_w}"
        )
    if patches.shape[2] % (patch_size * patch_size):
        raise ValueError(
            f"`patches` last dimension ({patches.shape[2]}) must be a multiple of "
            f"patch_size * patch_size ({patch_size * patch_size}): one value per pixel and channel"
        )
    return rearrange(patches, UNPATCHIFY, gh=grid_h, ph=patch_size, pw=patch_size)


def _check_rank(name: str, x, layout: str) -> None:
    """Raise unless ``x`` is a tensor with one dimension per comma-separated name in ``layout``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor, got {type(x).__name__}")
    rank = layout.count(",") + 1
    if x.dim() != rank:
        raise ValueError(f"`{name}` must be {rank}-D [{layout}], got shape {tuple(x.shape)}")


def _check_sides(height: int, width: int, patch_size: int) -> None:
    """Raise ``ValueError`` unless ``patch_size`` divides both image sides."""
    if height % patch_size or width % patch_size:
        raise ValueError(
            f"image sides must be multiples of `patch_size` ({patch_size}), "
            f"got height {height} and width {width}"
        )
