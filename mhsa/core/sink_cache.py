"""StreamingLLM's cache: a sliding window of keys and values that keeps the first tokens too.

Legend: b batch, n tokens, g key/value heads, d head_dim, e embed_dim. Masks are boolean,
True = may attend.
"""

import torch

from mhsa.core._checks import check_int, check_tensor
from mhsa.core.rotary import rotate


class SinkKVCache:
    """A windowed key-value cache that also keeps the first ``num_sink_tokens`` positions.

    A model trained with full attention and decoded with a plain sliding window breaks as
    soon as the first tokens leave the window: its heads park much of their weight on those
    tokens (attention sinks), and without them the weight spreads over the others. Keeping
    the keys and values of the first few tokens next to the window restores it, at a fixed
    memory cost however long the text. Before each update the cache drops all but the
    first ``num_sink_tokens`` and the last ``window - 1`` positions, then appends the new
    ones; a decoding step (one new token) thus attends to ``num_sink_tokens + window``
    keys, itself included. The queries of a longer chunk see everything kept before it and
    the chunk's keys up to their own (causal, as a prompt is read).

    Positions (section 3.2 of the paper): the keys get their places *in the cache*, not in
    the text: sink ``s`` at position ``s``, the window's keys right after the sinks with no
    gap, and a query its place after them. With rotary positions only the distance between
    a query and a key counts, so this is computed without rotating the window again: the
    window's keys keep the rotation the module gave them at their text positions (as do the
    queries), and the sinks' keys are rotated forward by the ``evicted`` positions that left the
    cache between them and the window (:attr:`evicted`), from copies kept as written. Every
    query-key distance is then the paper's. The module's ``rotary_angles`` does that turn
    (rotary angles linear in the position, as plain, linear and NTK-by-parts scaling are).

    Use it in place of :meth:`mhsa.GroupedQueryAttention.new_cache`'s cache, with a module
    built without ``window``, one cache per layer::

        cache = SinkKVCache(4, 252, rotary_angles=attn.rotary_angles)
        for t in range(n):
            out = attn(x[:, t:t + 1], cache=cache)[0]

    ``len(cache)`` counts the tokens written (the position of the next one in the text,
    as for :class:`mhsa.KVCache`, so decoding loops work unchanged). An ``attn_mask`` (a
    padding mask) keeps its columns for text positions ``[0, len(cache) + n_new)``; the
    module reads the kept ones' columns through :meth:`kept_positions`.

    Memory: :attr:`nbytes` is ``2 * b * g * (num_sink_tokens + window) * d * element_size``
    after a decoding step (the buffers grow for a longer chunk and shrink back at the next
    step), plus ``b * g * num_sink_tokens * d * element_size`` for the sinks' keys as
    written when ``rotary_angles`` is given. Decoding only: keys that require grad under
    grad mode are refused.

    Args:
        num_sink_tokens: first positions to keep, ``int >= 0`` (0: a plain window; the
            paper keeps 4).
        window: positions a decoding step sees after the sinks, itself included,
            ``int >= 1``.
        rotary_angles: the module's :meth:`mhsa.GroupedQueryAttention.rotary_angles`
            (``rotary_angles(start=, n=)`` returning the ``(cos, sin)`` of those positions,
            or None for a module without rotary positions), or None.

    Attributes:
        num_sink_tokens, window: as above.
        evicted: positions dropped so far between the sinks and the window.

    Raises:
        TypeError: ``num_sink_tokens`` or ``window`` not an int; ``rotary_angles`` not
            callable.
        ValueError: ``num_sink_tokens`` below 0, ``window`` below 1.

    Source: Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks",
    sections 3.1 (attention sinks) and 3.2 (rolling cache with kept first tokens; positions
    within the cache).
    """

    def __init__(self, num_sink_tokens: int, window: int, *, rotary_angles=None):
        self.num_sink_tokens = check_int("num_sink_tokens", num_sink_tokens, minimum=0)
        self.window = check_int("window", window)
        if rotary_angles is not None and not callable(rotary_angles):
            raise TypeError("`rotary_angles` must be a module's rotary_angles method or None, "
                            f"got {type(rotary_angles).__name__}")
        self.rotary_angles = rotary_angles
        self._key = self._value = None  # buffers [b, g, capacity, d]: sinks, then the window
        self._sink_key = None  # the sinks' keys as written [b, g, num_sink_tokens, d]
        self._n_sinks = self._n_recent = 0  # filled sink and window positions
        self._seen = 0  # positions written so far
        self.evicted = 0
        self._turned_by = 0  # the shift the sinks' keys in the buffer carry

    def __len__(self) -> int:
        """Number of token positions written so far (the text position of the next token)."""
        return self._seen

    @property
    def key(self) -> torch.Tensor | None:
        """The kept keys ``[b, g, n_kept, d]``, sinks first (a view), or None while empty."""
        return None if self._key is None else self._key[:, :, :self._n_sinks + self._n_recent]

    @property
    def value(self) -> torch.Tensor | None:
        """The kept values ``[b, g, n_kept, d]``, sinks first (a view), or None while empty."""
        return None if self._value is None else \
            self._value[:, :, :self._n_sinks + self._n_recent]

    def kept_positions(self) -> torch.Tensor | None:
        """Text positions of the kept keys, in their order: ``int64 [n_kept]`` (sinks first,
        then the window), on the cache's device; None while empty."""
        if self._key is None:
            return None
        device = self._key.device
        return torch.cat([torch.arange(self._n_sinks, device=device),
                          torch.arange(self._seen - self._n_recent, self._seen, device=device)])

    @property
    def nbytes(self) -> int:
        """Bytes that the buffers occupy, spare positions and the sinks' copies included."""
        held = [x for x in (self._key, self._value, self._sink_key) if x is not None]
        return sum(x.nbytes for x in held)

    def update(self, key: torch.Tensor, value: torch.Tensor, *,
               window: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Evict what falls out, write the new keys and values; return what is kept.

        Args:
            key: keys of the new tokens ``[b, g, n_new, d]``, floating, rotated at their text
                positions (as :meth:`mhsa.GroupedQueryAttention.forward` passes them).
            value: their values, same shape, dtype and device.
            window: must be None: this cache keeps its own window (a module's ``window``
                mask would hide the sinks).

        Returns:
            ``(keys, values)``, each ``[b, g, n_kept + n_new, d]``: the sinks (their keys
            turned to their cache positions), the window's last ``window - 1`` earlier
            positions, the new ones. Views of the buffers, valid until the next update.

        Raises:
            TypeError: ``key`` or ``value`` not a floating tensor; dtypes that differ from
                each other or from the cached ones.
            ValueError: a ``window``; ``key`` not 4-D, ``value`` of another shape, batch,
                heads, head_dim or device other than the cached ones; keys that require
                grad under grad mode.
        """
        if window is not None:
            raise ValueError(f"SinkKVCache keeps its own window ({self.window}); use it with "
                             f"a module built without `window`, got window={window}")
        self._check(key, value)
        n, sinks = key.shape[2], self.num_sink_tokens
        to_sinks = min(sinks - self._n_sinks, n)  # the first tokens fill the sinks
        kept = min(self._n_recent, self.window - 1)  # the window's part the chunk still sees
        dropped = self._n_recent - kept
        needed = self._n_sinks + to_sinks + kept + n - to_sinks
        self._make_room(key, needed, dropped, kept)
        for buffer, new in ((self._key, key), (self._value, value)):
            buffer[:, :, self._n_sinks:self._n_sinks + to_sinks] = new[:, :, :to_sinks]
            buffer[:, :, sinks + kept:sinks + kept + n - to_sinks] = new[:, :, to_sinks:]
        if self._sink_key is not None and to_sinks:
            self._sink_key[:, :, self._n_sinks:self._n_sinks + to_sinks] = key[:, :, :to_sinks]
        self._n_sinks += to_sinks
        self._n_recent = kept + n - to_sinks
        self._seen += n
        self.evicted += dropped
        if self._sink_key is not None and self.evicted != self._turned_by:
            cos, sin = self.rotary_angles(start=self.evicted, n=1)  # [1, d]: one shift for all
            self._key[:, :, :self._n_sinks] = rotate(self._sink_key[:, :, :self._n_sinks],
                                                     cos, sin)
            self._turned_by = self.evicted
        return self.key, self.value

    def reset(self) -> None:
        """Empty the cache and free its buffers, to decode other sequences."""
        self.__init__(self.num_sink_tokens, self.window, rotary_angles=self.rotary_angles)

    def __repr__(self) -> str:
        shape = None if self._key is None else tuple(self.key.shape)
        return (f"SinkKVCache(num_sink_tokens={self.num_sink_tokens}, window={self.window}, "
                f"n_cached={len(self)}, evicted={self.evicted}, key shape={shape})")

    def _make_room(self, like: torch.Tensor, needed: int, dropped: int, kept: int) -> None:
        """Buffers of ``needed`` positions at least (``sinks + window`` when that is enough),
        with the window's ``kept`` last positions moved right after the sinks."""
        sinks, start = self.num_sink_tokens, self.num_sink_tokens + dropped
        fits = max(needed, sinks + self.window)
        if self._key is not None and needed <= self._key.shape[2] <= fits:
            if dropped and kept:  # move left over an overlapping range: copy out first
                for x in (self._key, self._value):
                    x[:, :, sinks:sinks + kept] = x[:, :, start:start + kept].clone()
            return
        b, g, _, d = like.shape
        fresh = [like.new_empty(b, g, fits, d) for _ in range(2)]
        if self._key is not None:
            for new, old in zip(fresh, (self._key, self._value)):
                new[:, :, :self._n_sinks] = old[:, :, :self._n_sinks]
                new[:, :, sinks:sinks + kept] = old[:, :, start:start + kept]
        elif sinks and self.rotary_angles is not None \
                and self.rotary_angles(start=0, n=1) is not None:  # None: no positions
            self._sink_key = like.new_empty(b, g, sinks, d)
        self._key, self._value = fresh

    def _check(self, key, value) -> None:
        for name, x in (("key", key), ("value", value)):
            check_tensor(name, x)
        if key.dim() != 4 or value.shape != key.shape:
            raise ValueError("`key` and `value` must be 4-D [batch, num_kv_heads, n_new, "
                             f"head_dim] of one shape, got {tuple(key.shape)} and "
                             f"{tuple(value.shape)}")
        if value.dtype != key.dtype:
            raise TypeError(f"`key` and `value` must share one dtype, got {key.dtype} and "
                            f"{value.dtype}")
        if torch.is_grad_enabled() and (key.requires_grad or value.requires_grad):
            raise ValueError("SinkKVCache is for decoding: the keys require grad; call the "
                             "module under torch.no_grad() or torch.inference_mode()")
        if self._key is None:
            return
        b, g, _, d = self._key.shape
        if (key.shape[0], key.shape[1], key.shape[3]) != (b, g, d) \
                or key.device != self._key.device:
            raise ValueError(
                f"new keys {tuple(key.shape)} on {key.device} do not continue the cache's "
                f"[{b}, {g}, n_kept, {d}] on {self._key.device}: one cache per attention "
                "module and batch (call reset() to start over)")
        if key.dtype != self._key.dtype:
            raise TypeError(f"new keys are {key.dtype}, the cache holds {self._key.dtype}")
