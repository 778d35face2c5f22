"""The key-value cache: keys and values of the tokens a decoder has already read.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim, i query positions, j key
positions. Masks are boolean, True = may attend.
"""

import torch

from mhsa.core._checks import check_int, check_same_dtype_and_device, check_tensor


class KVCache:
    """Keys and values that a causal self-attention has computed so far, per key/value head.

    A decoder writes one token per step, and under the causal mask a token never sees
    later ones, so the keys and values of earlier tokens never change. Without a cache
    every step projects the whole prefix again: writing ``n`` tokens projects
    ``1 + 2 + ... + n`` of them. With one, each step projects only its new tokens,
    writes their keys and values here, and attends over all of them.

    Use one cache per self-attention module and per batch of sequences::

        cache = mhsa.KVCache(capacity=x.shape[1])  # room for every position, allocated once
        steps = [attn(x[:, t:t + 1], cache=cache)[0] for t in range(x.shape[1])]
        torch.cat(steps, dim=1)  # equals attn(x, is_causal=True)[0]

    :meth:`mhsa.MultiHeadAttention.forward` calls :meth:`update`; call :meth:`reset` (or
    make a new cache) to start other sequences.

    Memory: a module with ``num_kv_heads`` key/value heads stores only those, so the cache
    needs ``2 * batch * num_kv_heads * head_dim`` numbers per token: grouped-query and
    multi-query attention shrink it by ``num_heads / num_kv_heads``. Keys and values live
    in two buffers allocated ahead and written in place. The first update allocates
    ``capacity`` positions when given and its tokens fit, else twice what it writes, at
    least 16; when a buffer is full it is replaced by one twice the size needed (amortized
    O(1) per token, no ``torch.cat`` per step). :attr:`nbytes` counts what the two buffers
    occupy, spare positions included, so a cache made with the exact ``capacity`` it will
    need holds ``2 * batch * num_kv_heads * capacity * head_dim * element_size`` bytes.
    With a sliding ``window``, only the last ``window - 1`` positions plus the new chunk
    are kept, so the memory stays bounded however long the text; with a ``capacity`` of at
    least the first update's length and at least ``2 * (window - 1 + n_new)`` for the later
    ones, the buffers are never replaced (the kept part moves to their front when their
    end is reached).

    Under autograd (new keys that require grad, grad mode on) the cache grows out of place
    with ``torch.cat`` instead, so that gradients flow through every step (no spare
    positions then: ``capacity`` is not used).

    Args:
        capacity: positions to allocate at the first update, ``int >= 1``, or None for
            the default growth. A caller that knows the length (prompt plus new tokens)
            allocates exactly what it needs; more positions than ``capacity`` still fit,
            the buffers then grow by doubling.

    Attributes:
        key: cached keys ``[batch, num_kv_heads, n_kept, head_dim]`` (a view of the filled
            part of the buffer), or None while empty. ``n_kept == len(self)`` without a
            window; with one, ``n_kept <= window - 1 + n_new``.
        value: cached values, same shape, or None while empty.

    Raises:
        TypeError: ``capacity`` is not an int (``16.0`` and ``True`` included).
        ValueError: ``capacity`` is below 1.

    Source: the decoder of Vaswani et al. 2017, "Attention Is All You Need", section 3.2.3
    (a position attends to the positions up to and including itself), run incrementally;
    Pope et al. 2022, "Efficiently Scaling Transformer Inference", for the cache's costs;
    Shazeer 2019, "Fast Transformer Decoding" and Ainslie et al. 2023, "GQA", section 2,
    for fewer key/value heads; Beltagy et al. 2020 and Jiang et al. 2023, section 2
    ("rolling buffer cache") for the window.
    """

    def __init__(self, *, capacity: int | None = None):
        self._capacity = None if capacity is None else check_int("capacity", capacity)
        self._key: torch.Tensor | None = None  # buffers [b, h_kv, allocated positions, d]
        self._value: torch.Tensor | None = None
        self._start = self._end = 0  # the filled part is buffer[:, :, start:end]
        self._seen = 0  # positions written so far

    def __len__(self) -> int:
        """Number of token positions written so far, ``n_cached`` (0 while empty).

        It is the position of the next token, also with a window (which keeps fewer).
        """
        return self._seen

    @property
    def key(self) -> torch.Tensor | None:
        return None if self._key is None else self._key[:, :, self._start:self._end]

    @property
    def value(self) -> torch.Tensor | None:
        return None if self._value is None else self._value[:, :, self._start:self._end]

    @property
    def nbytes(self) -> int:
        """Bytes that the key and value buffers occupy in memory, spare positions included.

        Every allocated position counts, filled or not: ``2 * batch * num_kv_heads *
        allocated * head_dim * element_size``, with ``allocated`` the buffers' positions
        (``capacity`` after a first update that fits in it; 16 after a first update of one
        token without ``capacity``). 0 while empty. The filled part alone is
        ``key.nbytes + value.nbytes``.
        """
        if self._key is None:
            return 0
        return self._key.nbytes + self._value.nbytes

    def update(self, key: torch.Tensor, value: torch.Tensor, *,
               window: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Write new keys and values after the cached ones; return the filled part.

        Args:
            key: keys of the new tokens ``[batch, num_kv_heads, n_new, head_dim]``, floating.
            value: their values, same shape, dtype and device as ``key``.
            window: a sliding window, ``int >= 1``: first drop every cached position but
                the last ``window - 1`` (queries of the new chunk never see them), so the
                cache stays bounded. None keeps everything.

        Returns:
            ``(keys, values)``, each ``[batch, num_kv_heads, n_kept + n_new, head_dim]``: the
            kept earlier tokens first, the new ones last. Views of the cache's buffers:
            valid until the next update.

        Raises:
            TypeError: ``key`` or ``value`` is not a floating tensor, their dtypes differ,
                or differ from the cached ones; ``window`` is not an int.
            ValueError: ``key`` is not 4-D, ``value`` has another shape, or batch, heads,
                head_dim or device differ from what is cached (a cache serves one
                attention module and one batch of sequences; :meth:`reset` it first);
                ``window`` below 1.
        """
        buffer = self._key
        if buffer is None or not (  # the usual step, checked in one expression
                type(key) is type(value) is torch.Tensor and value.shape == key.shape
                and key.dim() == 4 and key.shape[:2] == buffer.shape[:2]
                and key.shape[3] == buffer.shape[3] and key.dtype == value.dtype == buffer.dtype
                and key.device == value.device == buffer.device):
            self._check(key, value)  # the first update, or a mistake: say which
        if window is not None:
            window = check_int("window", window)
            self._start = max(self._start, self._end - (window - 1))
        n_new = key.shape[-2]
        if torch.is_grad_enabled() and (key.requires_grad or value.requires_grad or (
                self._key is not None and self._key.requires_grad)):
            self._grow_out_of_place(key, value)  # autograd needs every step's tensors intact
        else:
            self._make_room(key, n_new)
            end = self._end  # write in place: buffer[:, :, end:end + n_new] = key
            self._key.narrow(2, end, n_new).copy_(key)
            self._value.narrow(2, end, n_new).copy_(value)
            self._end = end + n_new
        self._seen += n_new
        kept = self._end - self._start  # the filled part, as views (narrow: one cheap call)
        return self._key.narrow(2, self._start, kept), self._value.narrow(2, self._start, kept)

    def reset(self) -> None:
        """Empty the cache (and free its buffers), to decode other sequences; ``capacity`` stays."""
        self.__init__(capacity=self._capacity)

    def __repr__(self) -> str:
        shape = None if self._key is None else tuple(self.key.shape)
        return f"KVCache(n_cached={len(self)}, key shape={shape})"

    def _make_room(self, like: torch.Tensor, n_new: int) -> None:
        """Make room for ``n_new`` positions after the filled part, in place when possible."""
        kept, buffer = self._end - self._start, self._key
        if buffer is not None and self._end + n_new <= buffer.shape[2] and (
                torch.is_inference_mode_enabled() or not buffer.is_inference()):
            return  # the usual step: room after the filled part, and writable
        # an inference tensor (made under torch.inference_mode) is read-only outside it
        writable = buffer is not None and not (
            buffer.is_inference() and not torch.is_inference_mode_enabled())
        if writable and self._end + n_new <= buffer.shape[2]:
            return
        needed = kept + n_new
        if writable and 2 * needed <= buffer.shape[2]:
            # a window left room at the front: move the kept part there (start >= kept, so
            # source and destination do not overlap)
            for x in (self._key, self._value):
                x[:, :, :kept] = x[:, :, self._start:self._end]
        else:  # allocate the capacity asked for at first, else twice what is needed
            b, h, _, d = like.shape
            first = buffer is None and self._capacity is not None and needed <= self._capacity
            capacity = self._capacity if first else max(2 * needed, 16)
            fresh = [like.new_empty(b, h, capacity, d) for _ in range(2)]
            if buffer is not None:
                for new, old in zip(fresh, (self._key, self._value)):
                    new[:, :, :kept] = old[:, :, self._start:self._end]
            self._key, self._value = fresh
        self._start, self._end = 0, kept

    def _grow_out_of_place(self, key, value) -> None:
        if self._key is not None:
            key = torch.cat([self.key, key], dim=-2)  # [b, h_kv, n_kept + n_new, d]
            value = torch.cat([self.value, value], dim=-2)
        self._key, self._value = key, value
        self._start, self._end = 0, key.shape[-2]

    def _check(self, key, value) -> None:
        check_new_keys_and_values(key, value)
        if self._key is None:
            return
        b, h, _, d = self._key.shape
        if (key.shape[0], key.shape[1], key.shape[3]) != (b, h, d):
            raise ValueError(
                f"new keys {tuple(key.shape)} do not continue the cache's [{b}, {h}, "
                f"n_cached={len(self)}, {d}]: batch, num_kv_heads and head_dim must match "
                "(one cache per attention module and batch; call reset() to start over)")
        if key.dtype != self._key.dtype:
            raise TypeError(f"new keys are {key.dtype}, the cache holds {self._key.dtype}")
        if key.device != self._key.device:
            raise ValueError(f"new keys are on {key.device}, the cache is on {self._key.device}")


def check_new_keys_and_values(key, value) -> None:
    """``TypeError``/``ValueError`` unless ``key`` and ``value`` are tensors of one shape
    ``[batch, num_kv_heads, n_new, head_dim]``, one dtype and one device: what a key-value
    cache's ``update`` accepts (:class:`KVCache`, ``mhsa.core.quantized_cache.QuantizedKVCache``)."""
    for name, x in (("key", key), ("value", value)):
        check_tensor(name, x)
    if key.dim() != 4:
        raise ValueError("`key` must be 4-D [batch, num_kv_heads, n_new, head_dim], got "
                         f"shape {tuple(key.shape)}")
    if value.shape != key.shape:
        raise ValueError(f"`value` must have the shape of `key` {tuple(key.shape)}, got "
                         f"{tuple(value.shape)}")
    check_same_dtype_and_device("key", key, "value", value)
