"""Rotary position embedding: positions as rotations of query and key pairs.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim, i query positions, j key
positions. Masks are boolean, True = may attend.
"""

import functools
import math
from collections.abc import Mapping
from typing import NamedTuple

import torch

from mhsa.core._checks import check_int, check_tensor, kind_of


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
                  dtype: torch.dtype = torch.float32,
                  scaling=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of the rotary angles, ``[..., n, d]`` each, half-split layout.

    Column ``k`` and column ``k + d/2`` hold the angle ``position * base ** (-2k / d)``, or
    ``position * inv_freq[k]`` with the ``rotary_frequencies`` of ``scaling`` (a dict
    checked by ``check_rope_scaling``, or its items as a tuple), whose attention factor
    then multiplies ``cos`` and ``sin``. Dynamic NTK reads the length from the positions:
    ``max(positions) + 1``. Computed in float32 (float64 when ``dtype`` is float64),
    returned in ``dtype``. No checks: :func:`apply_rotary` checks its arguments before
    calling this.
    """
    work = torch.float64 if dtype == torch.float64 else torch.float32
    if scaling is None:
        frequencies = _inverse_frequencies if torch.compiler.is_compiling() else _kept_frequencies
        inv_freq, factor = frequencies(d, float(base), work, positions.device), 1.0  # [d/2]
    else:
        inv_freq, factor = _call_frequencies(positions, d, float(base), scaling, work)
    angles = positions.to(work)[..., None] * inv_freq  # [..., n, d/2]
    angles = torch.cat([angles, angles], dim=-1)  # [..., n, d]: the halves repeat
    if factor == 1.0:
        return angles.cos().to(dtype), angles.sin().to(dtype)
    return (angles.cos() * factor).to(dtype), (angles.sin() * factor).to(dtype)


# Decoding asks for the same few positions over and over: twice per layer (queries, keys)
# and once per layer at each step. Their angles are kept for short position lists on the CPU,
# where reading the positions' values costs nothing (on a GPU it would wait for the device).
_KEEP_UP_TO = 16  # positions per call


def kept_angles(positions: torch.Tensor, d: int, base: float, dtype: torch.dtype,
                scaling: tuple | None = None):
    """:func:`rotary_angles`, kept between calls for up to ``_KEEP_UP_TO`` CPU positions.

    ``scaling``: None, or a checked scaling's items as a tuple (hashable, part of the key).
    """
    # first: traced (torch.compile; torch.export, strict or not, sets is_compiling too), there
    # are no values to read, and a Python test of the length would pin a symbolic length
    if torch.compiler.is_compiling() or positions.device.type != "cpu" \
            or positions.dim() != 1 or positions.shape[0] > _KEEP_UP_TO:
        return rotary_angles(positions, d, base=base, dtype=dtype, scaling=scaling)
    return _kept_angles(tuple(positions.tolist()), d, base, dtype, scaling)


@functools.lru_cache(maxsize=256)
def _kept_angles(positions: tuple, d: int, base: float, dtype: torch.dtype, scaling=None):
    """The angles of these position values (normal tensors, never handed to a caller)."""
    with torch.inference_mode(False):
        return rotary_angles(torch.tensor(positions, dtype=torch.long), d, base=base,
                             dtype=dtype, scaling=scaling)


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


# -- scaled rotary positions for long context -------------------------------------------------
#
# A model trained on sequences of up to L positions has only seen angles m * theta_k with
# m < L. Each scaling below changes the inverse frequencies theta_k (never the rotation) so
# that longer sequences turn the pairs by angles the model knows; YaRN also rescales the
# scores. The dict that describes a scaling uses transformers' keys (``rope_parameters`` of
# a config, without ``rope_theta``, which is the module's ``rope_base``).

# rope_type: (the keys it requires, the keys it may carry), besides "rope_type"
ROPE_SCALING_KEYS = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor", "original_max_position_embeddings"), ()),
    "yarn": (("factor", "original_max_position_embeddings"),
             ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
              "truncate")),
    "llama3": (("factor", "original_max_position_embeddings", "low_freq_factor",
                "high_freq_factor"), ()),
}
_YARN_DEFAULTS = {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}  # YaRN's Llama values


def check_rope_scaling(scaling, head_dim: int | None = None) -> dict | None:
    """A rotary scaling dict, checked and completed, or None for no scaling.

    Args:
        scaling: None, or a mapping with transformers' keys: ``"rope_type"`` (one of
            ``"default"``, ``"linear"``, ``"dynamic"``, ``"yarn"``, ``"llama3"``) and
            the keys that type reads (``ROPE_SCALING_KEYS``): ``factor`` (``> 0``) for
            all but ``"default"``; ``original_max_position_embeddings`` (the training
            length ``L``, ``int >= 1``) for dynamic, yarn and llama3; ``low_freq_factor``
            and ``high_freq_factor`` (``0 < low < high``) for llama3; optional for yarn:
            ``attention_factor`` (``> 0``), ``beta_fast`` and ``beta_slow`` (``> 0``,
            default 32 and 1), ``mscale``, ``mscale_all_dim`` (numbers), ``truncate``
            (bool, default True). An optional key set to None counts as absent.
        head_dim: the rotated width ``d``, when known: dynamic NTK needs ``d > 2``.

    Returns:
        None for None or ``{"rope_type": "default"}``; otherwise a new dict with
        ``rope_type``, the given keys (numbers as float, lengths as int) and yarn's defaults.

    Raises:
        TypeError: ``scaling`` is not a mapping, or a value is not a number (an int for
            ``original_max_position_embeddings``, a bool for ``truncate``).
        ValueError: an unknown ``rope_type``, a missing or unknown key, a value out of range,
            or dynamic NTK with ``head_dim <= 2``.

    Source: transformers' ``rope_parameters`` (``modeling_rope_utils.RopeParameters``), the
    names this course keeps.
    """
    if scaling is None:
        return None
    if not isinstance(scaling, Mapping):
        raise TypeError(f"`rope_scaling` must be a dict with a 'rope_type' or None, got "
                        f"{type(scaling).__name__}")
    kind = scaling.get("rope_type")
    if kind not in ROPE_SCALING_KEYS:
        raise ValueError(f"`rope_scaling['rope_type']` must be one of "
                         f"{sorted(ROPE_SCALING_KEYS)}, got {kind!r}")
    required, optional = ROPE_SCALING_KEYS[kind]
    given = {key: value for key, value in scaling.items()
             if key != "rope_type" and not (value is None and key in optional)}
    for key in required:
        if key not in given:
            raise ValueError(f"`rope_scaling` of rope_type {kind!r} needs the key {key!r}, "
                             f"got keys {sorted(scaling)}")
    unknown = sorted(set(given) - set(required) - set(optional))
    if unknown:
        raise ValueError(f"`rope_scaling` of rope_type {kind!r} reads {list(required + optional)},"
                         f" not {unknown}" + (" (the base is `rope_base`)"
                                              if "rope_theta" in unknown else ""))
    if kind == "default":
        return None
    checked = {"rope_type": kind}
    if kind == "yarn":
        checked.update(_YARN_DEFAULTS)
    for key, value in given.items():
        checked[key] = _check_scaling_value(key, value)
    if kind == "llama3" and checked["high_freq_factor"] <= checked["low_freq_factor"]:
        raise ValueError(f"`rope_scaling['high_freq_factor']` ({checked['high_freq_factor']}) "
                         f"must be > `low_freq_factor` ({checked['low_freq_factor']})")
    if kind == "dynamic" and head_dim is not None and head_dim <= 2:
        raise ValueError(f"dynamic NTK scales the base by a power d / (d - 2): `head_dim` "
                         f"({head_dim}) must be > 2")
    return checked


def _check_scaling_value(key: str, value):
    """One value of a scaling dict, as float (int, bool): ``TypeError``/``ValueError`` naming it."""
    name = f"rope_scaling['{key}']"
    if key == "original_max_position_embeddings":
        return check_int(name, value)
    if key == "truncate":
        if not isinstance(value, bool):
            raise TypeError(f"`{name}` must be a bool, got {kind_of(value)}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` must be a number, got {kind_of(value)} {value!r}")
    if key not in ("mscale", "mscale_all_dim") and not value > 0:
        raise ValueError(f"`{name}` must be > 0, got {value}")
    return float(value)


def rotary_frequencies(head_dim: int, *, base: float = 10000.0, scaling=None,
                       seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    r"""The inverse frequencies ``theta_k`` of rotary positions, scaled for long context.

    Pair ``k < d/2`` of a query or key at position ``m`` turns by ``m * theta_k``; without
    scaling ``theta_k = base ** (-2k / d)`` (wavelength ``2 pi / theta_k`` positions). With
    ``s = factor`` and ``L = original_max_position_embeddings``, the training length:

    - ``"linear"``, position interpolation: ``theta_k / s``: positions ``0 .. sL`` are
      squeezed into the angles of ``0 .. L``.
    - ``"dynamic"``, dynamic NTK: the base grows with the length ``n = max(seq_len, L)``
      seen so far, ``base' = base * (s n / L - (s - 1)) ** (d / (d - 2))``, then
      ``theta_k = base' ** (-2k / d)``: unchanged up to ``L``; the fastest pair keeps its
      frequency and the slowest is interpolated the most ("NTK-aware").
    - ``"yarn"``: NTK-by-parts: pairs with more than ``beta_fast`` turns over ``L`` keep
      ``theta_k``, pairs with fewer than ``beta_slow`` get ``theta_k / s``, a linear ramp
      in between; the ramp runs over the pair index ``k`` between the indices where a
      pair turns ``beta_fast`` and ``beta_slow`` times over ``L``, rounded outward unless
      ``truncate`` is False (as the YaRN authors' code computes it). Attention factor
      ``0.1 ln(s) + 1`` (``1`` for ``s <= 1``), or
      ``(0.1 mscale ln(s) + 1) / (0.1 mscale_all_dim ln(s) + 1)`` when both are set, or
      the given ``attention_factor``.
    - ``"llama3"``: wavelengths below ``L / high_freq_factor`` keep ``theta_k``, above
      ``L / low_freq_factor`` get ``theta_k / s``; in between, with
      ``smooth = (L / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)``,
      ``(1 - smooth) * theta_k / s + smooth * theta_k``.

    The attention factor multiplies ``cos`` and ``sin`` of the angles (so the scores, a
    product of a rotated query and a rotated key, scale by its square); it is 1 except for
    yarn. The same numbers as transformers' ``ROPE_INIT_FUNCTIONS[rope_type](config,
    device, seq_len=seq_len)`` (float32 rounding), with ``L`` of dynamic NTK being
    transformers' ``config.max_position_embeddings``.

    Args:
        head_dim: the rotated width ``d``, even, ``>= 2``.
        base: the wavelength base ``theta`` (``rope_theta``), ``> 0`` (``> 1`` for yarn).
        scaling: None or a dict of ``check_rope_scaling``.
        seq_len: dynamic NTK only: the length so far (``max(position) + 1``), ``int >= 1``;
            None means ``L`` (no scaling yet). Ignored by the other types.

    Returns:
        ``(inverse_frequencies, attention_factor)``: float32 ``[head_dim // 2]`` and a float.

    Raises:
        TypeError: ``head_dim`` or ``seq_len`` not an int, ``base`` not a number, or what
            ``check_rope_scaling`` raises.
        ValueError: an odd or non-positive ``head_dim``, ``base <= 0`` (``<= 1`` for
            yarn), ``seq_len < 1``, or what ``check_rope_scaling`` raises.

    Source: Chen et al. 2023, "Extending Context Window of Large Language Models via
    Positional Interpolation", section 2.3 (linear); bloc97 2023, "NTK-Aware Scaled RoPE"
    (r/LocalLLaMA), and Peng et al. 2023, "YaRN", sections 3.1 (NTK-aware), 3.2
    (NTK-by-parts), 3.3 (dynamic scaling) and 3.4 (the attention temperature
    ``sqrt(1/t) = 0.1 ln(s) + 1``); Llama 3.1's scaling as Meta's reference code computes it
    (``apply_scaling`` in the ``llama-models`` repository).
    """
    check_int("head_dim", head_dim)
    if head_dim % 2:
        raise ValueError(f"rotary positions pair dimensions: `head_dim` ({head_dim}) must be "
                         "even")
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"`base` must be a number, got {kind_of(base)}")
    scaling = check_rope_scaling(scaling, head_dim)
    minimum = 1 if scaling is not None and scaling["rope_type"] == "yarn" else 0
    if not base > minimum:
        raise ValueError(f"`base` must be > {minimum}, got {base}")
    if seq_len is not None:
        seq_len = check_int("seq_len", seq_len)
    return _scaled_frequencies(head_dim, float(base), scaling, seq_len, torch.float32, None)


def _call_frequencies(positions, d, base, scaling, work):
    """The frequencies of one call's positions: dynamic NTK reads ``max(positions) + 1``."""
    scaling = dict(scaling)  # a checked dict, or its items as a tuple
    if scaling["rope_type"] == "dynamic":  # a tensor: no wait for the device's values
        seq_len = positions.amax() + 1 if positions.numel() else None
        return _scaled_frequencies(d, base, scaling, seq_len, work, positions.device)
    if torch.compiler.is_compiling():  # traced inline, nothing kept
        return _scaled_frequencies(d, base, scaling, None, work, positions.device)
    return _kept_scaled_frequencies(d, base, tuple(sorted(scaling.items())), work,
                                    positions.device)


@functools.lru_cache(maxsize=64)
def _kept_scaled_frequencies(d, base, scaling: tuple, work, device):
    """``_scaled_frequencies`` of the types that ignore the length, kept; never modified."""
    with torch.inference_mode(False):
        return _scaled_frequencies(d, base, dict(scaling), None, work, device)


def _scaled_frequencies(d: int, base: float, scaling: dict | None, seq_len, work, device):
    """``(theta [d/2], attention factor)``: the math of ``rotary_frequencies``, no checks.

    ``seq_len``: None, an int, or a 0-d integer tensor (the length of a call, unread).
    """
    if scaling is None:
        return _inverse_frequencies(d, base, work, device), 1.0
    kind, s = scaling["rope_type"], scaling["factor"]
    if kind == "dynamic":  # NTK-aware: a larger base for the length so far (YaRN 3.1, 3.3)
        trained = scaling["original_max_position_embeddings"]
        if isinstance(seq_len, torch.Tensor):
            n = seq_len.to(work).clamp(min=trained)
        else:
            n = max(seq_len or trained, trained)
        return _inverse_frequencies(d, base * (s * n / trained - (s - 1)) ** (d / (d - 2)),
                                    work, device), 1.0
    theta = _inverse_frequencies(d, base, work, device)  # [d/2]
    if kind == "linear":  # position interpolation: m * theta / s = (m / s) * theta
        return theta / s, 1.0
    trained = scaling["original_max_position_embeddings"]
    if kind == "llama3":  # long wavelengths interpolated, short ones kept, a ramp between
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        wavelength = 2 * math.pi / theta
        smooth = ((trained / wavelength - low) / (high - low)).clamp(0.0, 1.0)
        return (1 - smooth) * theta / s + smooth * theta, 1.0
    # yarn: NTK-by-parts (YaRN 3.2) over the pair index, and the temperature (YaRN 3.4)
    fast, slow, truncate = (scaling.get(key, _YARN_DEFAULTS[key]) for key in _YARN_DEFAULTS)
    low, high = (yarn_ramp_pair(turns, head_dim=d, base=base, original_length=trained)
                 for turns in (fast, slow))
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # a step, not a division by zero
    k = torch.arange(d // 2, dtype=work, device=device)
    interpolated = ((k - low) / (high - low)).clamp(0.0, 1.0)  # 0: keep theta, 1: theta / s
    theta = interpolated * theta / s + (1 - interpolated) * theta
    return theta, _yarn_attention_factor(scaling)


def _yarn_attention_factor(scaling: dict) -> float:
    """YaRN's ``sqrt(1/t) = 0.1 ln(s) + 1`` (DeepSeek's ratio with ``mscale``), or the given one."""
    if "attention_factor" in scaling:
        return scaling["attention_factor"]
    s = scaling["factor"]
    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return yarn_mscale(s, scaling["mscale"]) / yarn_mscale(s, scaling["mscale_all_dim"])
    return yarn_mscale(s)


def yarn_ramp_pair(turns: float, *, head_dim: int, base: float, original_length: int) -> float:
    r"""The pair index ``k`` at which pair ``k`` turns ``turns`` times over ``original_length``.

    Pair ``k`` rotates by ``theta_k = base ** (-2k / head_dim)`` per position, so it turns
    ``original_length * theta_k / (2 pi)`` times over the training length; solved for ``k``:
    ``k = head_dim / 2 * ln(original_length / (2 pi turns)) / ln(base)``, a fraction in
    general. YaRN's ramp runs between the pairs that turn ``beta_fast`` and ``beta_slow``
    times (transformers' ``find_correction_dim``); :func:`rotary_frequencies` rounds them
    outward and clamps them to the pairs that exist. No checks.

    Args:
        turns: number of full turns, a positive number.
        head_dim: the rotated width ``d`` (an even int).
        base: the rotary base, a positive number.
        original_length: the training length ``L`` in positions, a positive int.

    Returns:
        a float (unrounded, unclamped).

    Source: Peng et al. 2023, "YaRN", section 3.2 (NTK-by-parts).
    """
    return head_dim * math.log(original_length / (turns * 2 * math.pi)) / (2 * math.log(base))


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    r"""YaRN's temperature ``sqrt(1/t) = 0.1 * mscale * ln(factor) + 1``; 1 for ``factor <= 1``.

    ``mscale = 1`` is the paper's value. DeepSeek-V2 and V3 set ``mscale`` and
    ``mscale_all_dim`` in their ``rope_scaling``: their rotary angles' attention factor
    (``rotary_frequencies``) is the ratio of the two temperatures, and their softmax scale
    is multiplied by ``yarn_mscale(factor, mscale_all_dim) ** 2``
    (:class:`mhsa.MultiHeadLatentAttention`). Transformers calls it ``yarn_get_mscale``.
    No checks.

    Args:
        factor: YaRN's scale ``s`` (``rope_scaling["factor"]``), a number.
        mscale: the multiplier of ``ln(factor)``, a number.

    Returns:
        a float.

    Source: Peng et al. 2023, "YaRN", section 3.4; DeepSeek-AI 2024, "DeepSeek-V2",
    section 3.1.4 (YaRN on the decoupled rotary key, ``sqrt(t) = 0.0707 ln(s) + 1``).
    """
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def depends_on_length(scaling) -> bool:
    """Whether a scaling's frequencies change with the length of a call (dynamic NTK): a table
    of angles computed once for positions ``0, 1, ...`` would then be wrong."""
    return scaling is not None and dict(scaling)["rope_type"] == "dynamic"
