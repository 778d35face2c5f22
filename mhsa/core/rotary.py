"""Rotary position embedding: positions as rotations of query and key pairs.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim, i query positions, j key
positions. Masks are boolean, True = may attend.
"""

import functools
from typing import NamedTuple

import torch

from mhsa.core._checks import check_tensor


def apply_rotary(x: torch.Tensor, positions: torch.Tensor, *, base: float = 10000.0) -> torch.Tensor:
    r"""Rotate each pair of ``x``'s last dimension by an angle proportional to its position.

    Pair ``k`` (dimensions ``k`` and ``k + d/2``) of the vector at position ``m`` turns by
    ``m * theta_k`` with ``theta_k = base ** (-2k / d)``::

        x1, x2 = x[..., :d/2], x[..., d/2:]
        out = cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin])   # angles m * theta_k

    Rotating queries and keys this way makes their dot product depend on the offset
    ``m - n`` between positions, not on ``m`` and ``n`` themselves.

    This is the half-split convention of transformers' Llama and GPT-NeoX. The other one in
    use, GPT-J's (and the RoFormer paper's), interleaves the pairs: dimension ``2k`` pairs
    with ``2k + 1``. The two give the same scores up to a fixed permutation of the
    projection's columns, but weights trained for one do not work with the other.

    Args:
        x: ``[..., n, d]``, floating, ``d`` even (queries or keys of one or more heads).
        positions: integer tensor ``[n]``: the position of each of the ``n`` vectors.
        base: the wavelength base ``theta`` (``rope_theta`` in transformers), ``> 0``.

    Returns:
        A new tensor with the shape, dtype and device of ``x``; the angles are computed in
        float32 (float64 for float64 input). On the CPU, the angles of up to 16 positions
        are kept between calls, keyed by the positions' values: a decoder asks for the same
        ones for queries and keys of every layer at each step.

    Raises:
        TypeError: ``x`` is not a floating tensor, ``positions`` is not an integer tensor,
            or ``base`` is not a number.
        ValueError: ``x`` has rank below 2 or an odd last dimension; ``positions`` is not
            ``[n]`` with ``n = x.shape[-2]``, or is on another device; ``base <= 0``.

    Source: Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position
    Embedding", section 3.4.2 (equations 34 and 35).
    """
    check_tensor("x", x, min_rank=2)
    n, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"`x` must have an even last dimension d, got shape {tuple(x.shape)}")
    check_positions(positions, n, x.device)
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"`base` must be a number, got {type(base).__name__}")
    if base <= 0:
        raise ValueError(f"`base` must be > 0, got {base}")
    return rotate(x, *kept_angles(positions, d, float(base), x.dtype))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotation of :func:`apply_rotary` with its angles given: ``[..., n, d]`` -> same.

    ``cos`` and ``sin`` are ``[n, d]`` from :func:`rotary_angles` (half-split layout),
    usually in ``x``'s dtype. A decoder computes them once per step and rotates the queries
    and keys of every layer with them. The result has ``x``'s dtype: under ``torch.autocast``
    the projections give bfloat16 ``x`` while the angles stay float32, and keys promoted to
    float32 would no longer match the unrotated bfloat16 values. No checks.
    """
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)  # (x1, x2) turned 90 degrees
    return (x * cos + rotated * sin).to(x.dtype)  # a no-op when the dtypes agree


class RotaryAngles(NamedTuple):
    """The ``cos`` and ``sin`` of some positions' rotary angles, computed once and shared.

    ``[n, d]`` each for positions ``[n]``; ``[b, 1, n, d]`` for positions ``[b, n]`` (one row
    of positions per sequence, broadcast over the heads). A model computes them once per
    call with :meth:`mhsa.GroupedQueryAttention.rotary_angles` and hands them to every
    layer as ``positions``.
    """

    cos: torch.Tensor
    sin: torch.Tensor


def check_positions(positions, n: int, device, *, batch: int | None = None) -> None:
    """``TypeError``/``ValueError`` unless ``positions`` is an integer tensor ``[n]`` on
    ``device`` (or ``[batch, n]`` when ``batch`` is given)."""
    layout = "[n]" if batch is None else "[n] or [batch, n]"
    if not isinstance(positions, torch.Tensor) or positions.is_floating_point() \
            or positions.is_complex() or positions.dtype == torch.bool:
        got = positions.dtype if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise TypeError(f"`positions` must be an integer tensor {layout}, got {got}")
    if positions.shape != (n,) and (batch is None or positions.shape != (batch, n)):
        expected = f"n = x.shape[-2] = {n}" if batch is None else f"batch = {batch}, n = {n}"
        raise ValueError(f"`positions` must be {layout} with {expected}, got shape "
                         f"{tuple(positions.shape)}")
    if positions.device != device:
        raise ValueError(f"`positions` is on {positions.device} but `x` is on {device}")


def rotary_angles(positions: torch.Tensor, d: int, *, base: float = 10000.0,
                  dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of the rotary angles, ``[..., n, d]`` each, half-split layout.

    Column ``k`` and column ``k + d/2`` hold the angle ``position * base ** (-2k / d)``.
    Computed in float32 (float64 when ``dtype`` is float64), returned in ``dtype``. No
    checks: :func:`apply_rotary` checks its arguments before calling this.
    """
    work = torch.float64 if dtype == torch.float64 else torch.float32
    frequencies = _inverse_frequencies if torch.compiler.is_compiling() else _kept_frequencies
    inv_freq = frequencies(d, float(base), work, positions.device)  # [d/2]
    angles = positions.to(work)[..., None] * inv_freq  # [..., n, d/2]
    angles = torch.cat([angles, angles], dim=-1)  # [..., n, d]: the halves repeat
    return angles.cos().to(dtype), angles.sin().to(dtype)


# Decoding asks for the same few positions over and over: twice per layer (queries, keys)
# and once per layer at each step. Their angles are kept for short position lists on the CPU,
# where reading the positions' values costs nothing (on a GPU it would wait for the device).
_KEEP_UP_TO = 16  # positions per call


def kept_angles(positions: torch.Tensor, d: int, base: float, dtype: torch.dtype):
    """:func:`rotary_angles`, kept between calls for up to ``_KEEP_UP_TO`` CPU positions."""
    # first: traced (torch.compile; torch.export, strict or not, sets is_compiling too), there
    # are no values to read, and a Python test of the length would pin a symbolic length
    if torch.compiler.is_compiling() or positions.device.type != "cpu" \
            or positions.dim() != 1 or positions.shape[0] > _KEEP_UP_TO:
        return rotary_angles(positions, d, base=base, dtype=dtype)
    return _kept_angles(tuple(positions.tolist()), d, base, dtype)


@functools.lru_cache(maxsize=256)
def _kept_angles(positions: tuple, d: int, base: float, dtype: torch.dtype):
    """The angles of these position values (normal tensors, never handed to a caller)."""
    with torch.inference_mode(False):
        return rotary_angles(torch.tensor(positions, dtype=torch.long), d, base=base,
                             dtype=dtype)


def _inverse_frequencies(d: int, base: float, work: torch.dtype, device) -> torch.Tensor:
    """``theta_k = base ** (-2k / d)`` for ``k < d/2``, as transformers computes it."""
    k = torch.arange(0, d, 2, device=device, dtype=work)
    return 1.0 / base ** (k / d)


@functools.lru_cache(maxsize=64)
def _kept_frequencies(d: int, base: float, work: torch.dtype, device) -> torch.Tensor:
    """:func:`_inverse_frequencies` kept per (d, base, dtype, device); never modified.

    A normal tensor, also when first made in inference mode, so autograd may save it.
    """
    with torch.inference_mode(False):
        return _inverse_frequencies(d, base, work, device)
