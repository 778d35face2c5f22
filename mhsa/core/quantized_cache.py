"""A key-value cache in int8: KIVI's layout (keys per channel, values per token) at 8 bits.

Legend: b batch, n tokens, h heads, g key/value heads (num_kv_heads), d head_dim, i query
positions, j key positions. Masks are boolean, True = may attend.
"""

import torch

from mhsa.core._checks import check_int, check_tensor
from mhsa.core.cache import check_new_keys_and_values

_LEVELS = 127  # symmetric int8 codes: -127 ... 127 (-128 unused, so the grid is symmetric)


def quantize_symmetric(x: torch.Tensor, dim) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 quantization of ``x``, one scale per slice along ``dim``.

    ``scale = max |x| / 127`` over ``dim`` (kept as a size-1 dimension), ``codes =
    round(x / scale)`` in ``[-127, 127]``; ``codes * scale`` gives ``x`` back to within half
    a step, ``scale / 2``, per element. A slice of zeros gets scale 0 and codes 0.

    Args:
        x: floating tensor of any shape.
        dim: the dimension (an int) or dimensions (a tuple) that share one scale.

    Returns:
        ``(codes, scale)``: torch.int8 codes of ``x``'s shape, and float32 scales of ``x``'s
        shape with ``dim`` reduced to size 1.

    Raises:
        TypeError: ``x`` is not a floating tensor.

    Source: Jacob et al. 2018, "Quantization and Training of Neural Networks for Efficient
    Integer-Arithmetic-Only Inference", section 2.1 (affine quantization; symmetric: zero
    point 0).
    """
    check_tensor("x", x)
    x = x.float()
    scale = x.abs().amax(dim=dim, keepdim=True) / _LEVELS
    codes = (x / torch.where(scale > 0, scale, 1.0)).round().clamp(-_LEVELS, _LEVELS)
    return codes.to(torch.int8), scale


class QuantizedKVCache:
    """A drop-in :class:`mhsa.KVCache` that stores keys and values as int8 codes and scales.

    Keys carry a few channels with large magnitudes (the same channels at every token), so
    keys get one scale per channel, shared by a group of ``group_size`` tokens; values have
    no such channels and get one scale per token (over its ``head_dim`` channels). That is
    KIVI's layout (Liu et al. 2024, sections 3-4), here at 8 bits instead of 2. The
    quantization is symmetric (no zero points): codes in ``[-127, 127]``, ``scale = max |x|
    / 127`` (:func:`quantize_symmetric`), stored in float32.

    A per-channel scale needs its whole group of tokens, so tokens wait in full precision
    until ``group_size`` of them have arrived (KIVI's residual; transformers'
    ``QuantizedCache`` keeps one too, ``residual_length``), then their keys and values are
    quantized together and the residual empties: it never holds more than
    ``group_size - 1`` tokens after an update. Both keys and values wait, so one residual
    serves both. Attention at each step reads the cached tokens dequantized
    (``codes * scale``) and this step's tokens and the residual in full precision, as
    transformers' quantized cache does; KIVI's fused kernels multiply by the codes
    directly, this cache dequantizes everything at every update (memory saved, compute
    spent).

    Memory: per quantized token, ``2 * g * d`` bytes of codes, ``g * d / group_size``
    key scales and ``g`` value scales of 4 bytes, against ``2 * g * d * element_size``
    for :class:`mhsa.KVCache`. :attr:`nbytes` counts every allocated position of the
    code and scale buffers plus the residual's full-precision tokens.

    It keeps :class:`mhsa.KVCache`'s interface: ``update(key, value, window=None)``,
    ``len()``, :attr:`nbytes`, ``capacity``, :meth:`reset`; pass one per attention module
    as ``cache=`` (a list of them to :meth:`mhsa.CausalLM.forward`). Inference only: what
    it stores is detached (rounding has no useful gradient).

    Args:
        group_size: tokens per group of keys sharing their per-channel scales, and the
            most tokens held in full precision, ``int >= 1``. KIVI uses 32 to 128.
        capacity: positions to allocate at the first quantization (rounded up to whole
            groups), ``int >= 1``, or None to grow by doubling from 16.

    Raises:
        TypeError: ``group_size`` or ``capacity`` is not an int.
        ValueError: ``group_size`` or ``capacity`` is below 1.

    Source: Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV
    Cache", sections 3-4 (per-channel keys, per-token values, a full-precision residual);
    transformers' ``QuantizedCache``.
    """

    def __init__(self, *, group_size: int = 32, capacity: int | None = None):
        self.group_size = check_int("group_size", group_size)
        self.capacity = None if capacity is None else check_int("capacity", capacity)
        self._codes = None  # (key codes, value codes), int8 [b, g, allocated, d]
        self._key_scales = None  # float32 [b, g, allocated / group_size, 1, d]
        self._value_scales = None  # float32 [b, g, allocated, 1]
        self._start = self._end = 0  # quantized tokens: buffer[:, :, start:end], whole groups
        self._residual = None  # (keys, values) [b, g, < group_size, d], full precision
        self._seen = 0

    def __len__(self) -> int:
        """Number of token positions written so far (also with a window, which keeps fewer)."""
        return self._seen

    @property
    def n_quantized(self) -> int:
        """How many kept positions are stored as int8 codes (whole groups, the oldest ones)."""
        return self._end - self._start

    @property
    def key_scales(self) -> torch.Tensor | None:
        """Float32 scales of the quantized keys, ``[b, g, n_quantized / group_size, 1, d]``.

        One per channel and group: a group's keys are ``codes * scale``, each within
        ``scale / 2`` of the key written. None before the first group is full.
        """
        if self._codes is None:
            return None
        size = self.group_size
        return self._key_scales[:, :, self._start // size:self._end // size]

    @property
    def value_scales(self) -> torch.Tensor | None:
        """Float32 scales of the quantized values, one per token, ``[b, g, n_quantized, 1]``."""
        return None if self._codes is None else self._value_scales[:, :, self._start:self._end]

    @property
    def nbytes(self) -> int:
        """Bytes held by the codes and scales of every allocated position, plus the residual.

        ``2 * b * g * allocated * d`` (int8 codes) ``+ 4 * b * g * allocated * d /
        group_size`` (key scales) ``+ 4 * b * g * allocated`` (value scales) ``+ 2 * b * g
        * r * d * element_size`` (the ``r < group_size`` residual tokens). 0 while empty.
        """
        held = 0 if self._residual is None else sum(x.nbytes for x in self._residual)
        if self._codes is not None:
            held += sum(x.nbytes for x in self._codes)
            held += self._key_scales.nbytes + self._value_scales.nbytes
        return held

    def update(self, key: torch.Tensor, value: torch.Tensor, *,
               window: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Write new keys and values; return every kept position's keys and values.

        Args:
            key: keys of the new tokens ``[b, g, n_new, d]``, floating.
            value: their values, the same shape, dtype and device.
            window: a sliding window, ``int >= 1``: return only the last ``window - 1 +
                n_new`` positions, and drop every group of quantized tokens before them.

        Returns:
            ``(keys, values)``, each ``[b, g, n_kept + n_new, d]`` in ``key``'s dtype: the
            quantized tokens dequantized, then the residual and the new tokens as given.

        Raises:
            TypeError: ``key`` or ``value`` is not a floating tensor, their dtypes differ or
                differ from the cached ones; ``window`` is not an int.
            ValueError: ``key`` is not 4-D, ``value`` has another shape, or batch, heads,
                head_dim or device differ from what is cached; ``window`` below 1.
        """
        self._check(key, value)
        window = None if window is None else check_int("window", window)
        key, value, n_new = key.detach(), value.detach(), key.shape[2]
        if self._residual is not None:
            key = torch.cat([self._residual[0], key], dim=2)  # [b, g, r + n_new, d]
            value = torch.cat([self._residual[1], value], dim=2)
        if window is not None:  # drop the groups that lie wholly before the window
            keep = window - 1 + n_new
            before = (self._end - self._start) + key.shape[2] - keep
            self._start += max(0, min(before, self._end - self._start)) // self.group_size \
                * self.group_size
        keys, values = self._dequantized(key.dtype)
        if keys is not None:  # quantized past, then the residual and the new tokens
            keys, values = torch.cat([keys, key], dim=2), torch.cat([values, value], dim=2)
        else:
            keys, values = key, value
        n_full = key.shape[2] // self.group_size * self.group_size
        if n_full:
            self._quantize_groups(key[:, :, :n_full], value[:, :, :n_full])
        self._residual = (key[:, :, n_full:].clone(), value[:, :, n_full:].clone())
        self._seen += n_new
        if window is not None:
            keys, values = keys[:, :, -keep:], values[:, :, -keep:]
        return keys, values

    def reset(self) -> None:
        """Empty the cache (and free its buffers); ``group_size`` and ``capacity`` stay."""
        self.__init__(group_size=self.group_size, capacity=self.capacity)

    def __repr__(self) -> str:
        return (f"QuantizedKVCache(n_cached={len(self)}, group_size={self.group_size}, "
                f"quantized={self._end - self._start})")

    def _dequantized(self, dtype):
        """The quantized tokens as ``(keys, values)`` ``[b, g, end - start, d]``, or Nones."""
        if self._end == self._start:
            return None, None
        g0, g1 = self._start // self.group_size, self._end // self.group_size
        key_codes, value_codes = (x[:, :, self._start:self._end] for x in self._codes)
        b, h, n, d = key_codes.shape
        grouped = key_codes.view(b, h, g1 - g0, self.group_size, d)  # per channel, per group
        keys = (grouped * self._key_scales[:, :, g0:g1]).view(b, h, n, d)
        values = value_codes * self._value_scales[:, :, self._start:self._end]
        return keys.to(dtype), values.to(dtype)

    def _quantize_groups(self, key, value) -> None:
        """Quantize ``n`` new tokens (a multiple of group_size) after the quantized ones."""
        b, h, n, d = key.shape
        groups = key.reshape(b, h, n // self.group_size, self.group_size, d)
        key_codes, key_scales = quantize_symmetric(groups, dim=3)  # over a group's tokens
        value_codes, value_scales = quantize_symmetric(value, dim=3)  # over a token's channels
        self._make_room(key, n)
        end, g_end = self._end, self._end // self.group_size
        self._codes[0][:, :, end:end + n] = key_codes.view(b, h, n, d)
        self._codes[1][:, :, end:end + n] = value_codes
        self._key_scales[:, :, g_end:g_end + n // self.group_size] = key_scales
        self._value_scales[:, :, end:end + n] = value_scales
        self._end = end + n

    def _make_room(self, like: torch.Tensor, n_new: int) -> None:
        """Room for ``n_new`` quantized positions after ``end``: in place, moved, or new buffers."""
        kept, size = self._end - self._start, self.group_size
        allocated = 0 if self._codes is None else self._codes[0].shape[2]
        if self._end + n_new <= allocated:
            return
        needed = kept + n_new
        if 2 * needed <= allocated:  # a window left room at the front: move the kept groups
            old = (*self._codes, self._value_scales)
        else:
            first = self._codes is None and self.capacity is not None and needed <= self.capacity
            allocated = -(-(self.capacity if first else max(2 * needed, 16)) // size) * size
            b, h, _, d = like.shape
            old = None if self._codes is None else (*self._codes, self._value_scales,
                                                    self._key_scales)
            new_codes = [like.new_empty(b, h, allocated, d, dtype=torch.int8) for _ in range(2)]
            new_key_scales = like.new_empty(b, h, allocated // size, 1, d, dtype=torch.float32)
            new_value_scales = like.new_empty(b, h, allocated, 1, dtype=torch.float32)
            if old is not None:
                for new, x in zip((*new_codes, new_value_scales), old[:3]):
                    new[:, :, :kept] = x[:, :, self._start:self._end]
                new_key_scales[:, :, :kept // size] = \
                    old[3][:, :, self._start // size:self._end // size]
            self._codes, self._key_scales = tuple(new_codes), new_key_scales
            self._value_scales = new_value_scales
            self._start, self._end = 0, kept
            return
        for x in old:  # start >= kept: source and destination do not overlap
            x[:, :, :kept] = x[:, :, self._start:self._end]
        self._key_scales[:, :, :kept // size] = \
            self._key_scales[:, :, self._start // size:self._end // size].clone()
        self._start, self._end = 0, kept

    def _check(self, key, value) -> None:
        check_new_keys_and_values(key, value)
        if self._residual is None:
            return
        cached = self._residual[0]
        b, h, _, d = cached.shape
        if (key.shape[0], key.shape[1], key.shape[3]) != (b, h, d):
            raise ValueError(
                f"new keys {tuple(key.shape)} do not continue the cache's [{b}, {h}, "
                f"n_cached={len(self)}, {d}]: batch, num_kv_heads and head_dim must match "
                "(one cache per attention module and batch; call reset() to start over)")
        if key.dtype != cached.dtype:
            raise TypeError(f"new keys are {key.dtype}, the cache holds {cached.dtype}")
        if key.device != cached.device:
            raise ValueError(f"new keys are on {key.device}, the cache is on {cached.device}")
