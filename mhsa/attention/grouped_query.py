"""Grouped-query attention: the causal self-attention of decoder-only models (chapters 10-11).

Legend: b batch, n tokens, h query heads, g key/value heads, r = h / g query heads per
key/value head, d head_dim, e embed_dim, i query positions, j key positions. Masks are
boolean, True = may attend.
"""

import torch
import torch.nn.functional as F
from torch import nn

from mhsa.attention.base import Attention
from mhsa.core._checks import (
    check_bool_mask,
    check_divisible,
    check_int,
    check_positive_int,
    check_probability,
    check_same_device,
    check_shape,
)
from mhsa.core._packing import matvec_layout, stacked
from mhsa.core.cache import KVCache
from mhsa.core.functional import combine_masks, fused_attention, scaled_dot_product_attention
from mhsa.core.heads import merge_heads, repeat_kv_heads, split_heads
from mhsa.core.rotary import (
    RotaryAngles,
    check_positions,
    check_rope_scaling,
    kept_angles,
    rotary_angles,
    rotate,
)


class GroupedQueryAttention(Attention):
    r"""Causal self-attention with ``num_kv_heads`` shared key/value heads, as in Llama and Mistral.

    Keys and values have ``g = num_kv_heads`` heads, each shared by ``r = num_heads // g``
    consecutive query heads::

        head_h = softmax(Q_h K_g^T / sqrt(head_dim) + causal) V_g,   g = h // r

    ``g = num_heads`` is multi-head attention, ``1 < g < num_heads`` grouped-query, ``g = 1``
    multi-query. The key/value projections and the :class:`mhsa.KVCache` shrink by ``h / g``;
    the queries keep every head. Optional rotary positions rotate queries and keys after the
    head split (before the cache stores the keys), and an optional sliding window limits each
    query to itself and the ``window - 1`` keys before it; the cache then keeps only those.
    Always causal, always self-attention: its sibling :class:`mhsa.MultiHeadAttention` does
    cross-attention and non-causal attention.

    Args:
        embed_dim: width ``e`` of the input and of the output.
        num_heads: query heads ``h``.
        num_kv_heads: key/value heads ``g``; must divide ``num_heads``.
        head_dim: width ``d`` of each head (default ``embed_dim // num_heads``, which must
            then divide evenly); queries are ``h * d`` wide, keys and values ``g * d``.
        rope_base: rotary base ``theta`` (transformers' ``rope_theta``; 10000.0 in RoFormer
            and Llama 2), or None for no positions; ``head_dim`` must be even with it.
        rope_scaling: None, or how to scale the rotary positions for sequences longer than
            the training length: a dict with transformers' keys (``rope_parameters``
            without ``rope_theta``): ``{"rope_type": "linear" | "dynamic" | "yarn" |
            "llama3", "factor": ..., "original_max_position_embeddings": ..., ...}``, see
            ``mhsa.core.rotary.rotary_frequencies``. An option of the rotary positions,
            as in the reference code, not a variant. YaRN's attention factor multiplies
            ``cos`` and ``sin`` (the scores by its square). Dynamic NTK reads the length of
            each call, ``max(positions) + 1``: a decoding step rotates its new keys with the
            frequencies of its own length and keeps the cached ones as they were, as
            transformers' cached decoding does (a full pass rotates every key with the
            frequencies of the full length, so cached and full passes differ beyond the
            training length, in transformers too).
        window: sliding window, ``int >= 1`` (each query sees itself and the
            ``window - 1`` keys before it, :func:`mhsa.sliding_window_mask`), or None.
        bias: add a learnable bias to the four projections (Llama: False).
        dropout: probability of zeroing an attention weight, in ``[0, 1)``; training only.
        device, dtype: where and in which floating dtype to create the parameters.

    Attributes:
        q_proj: ``nn.Linear(embed_dim, h * d)``, applied with ``F.linear`` (stacked with the
            keys' and values' for one matrix product), so forward hooks on it do not run.
        k_proj, v_proj: ``nn.Linear(embed_dim, g * d)``, applied the same way.
        out_proj: ``nn.Linear(h * d, embed_dim)``.
        embed_dim, num_heads, num_kv_heads, head_dim, rope_base, window, dropout: as above.
        rope_scaling: the checked scaling dict (yarn's defaults filled in), or None.

    Raises:
        TypeError: a size that is not an int, ``dropout`` or ``rope_base`` not a number.
        ValueError: a size below 1, ``num_heads`` not divisible by ``num_kv_heads``,
            ``embed_dim`` not divisible by ``num_heads`` without ``head_dim``, ``dropout``
            outside ``[0, 1)``, ``rope_base <= 0`` or an odd ``head_dim`` with ``rope_base``,
            ``rope_scaling`` without ``rope_base``, or a scaling that
            ``mhsa.core.rotary.check_rope_scaling`` refuses (which raises TypeError for
            a scaling that is not a dict).

    Example::

        >>> attn = GroupedQueryAttention(256, 8, 2, rope_base=10000.0)  # 8 query heads, 2 kv
        >>> out, weights = attn(torch.randn(1, 10, 256), need_weights=True)
        >>> tuple(out.shape), tuple(weights.shape), attn.k_proj.out_features
        ((1, 10, 256), (1, 8, 10, 10), 64)

    Source: Ainslie et al. 2023, "GQA", section 2 (grouped-query); Shazeer 2019, "Fast
    Transformer Decoding: One Write-Head is All You Need" (multi-query); Su et al. 2021,
    "RoFormer", section 3.4 (rotary positions); Beltagy et al. 2020, "Longformer", section
    3.1, and Jiang et al. 2023, "Mistral 7B", section 2 (sliding window); for
    ``rope_scaling``, the sources of ``mhsa.core.rotary.rotary_frequencies`` (Chen et
    al. 2023, position interpolation; Peng et al. 2023, "YaRN"; Llama 3.1).
    """

    def __init__(self, embed_dim, num_heads, num_kv_heads, *, head_dim=None, rope_base=None,
                 rope_scaling=None, window=None, bias=False, dropout=0.0, device=None,
                 dtype=None):
        super().__init__()
        for name, n in [("embed_dim", embed_dim), ("num_heads", num_heads),
                        ("num_kv_heads", num_kv_heads)]:
            check_positive_int(name, n)
        check_divisible("num_heads", num_heads, "num_kv_heads", num_kv_heads)
        if head_dim is None:
            check_divisible("embed_dim", embed_dim, "num_heads", num_heads)
            head_dim = embed_dim // num_heads
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.rope_base = _check_rope_base(rope_base, head_dim)
        self.rope_scaling = check_rope_scaling(rope_scaling, head_dim)
        if self.rope_scaling is not None and self.rope_base is None:
            raise ValueError("`rope_scaling` scales rotary positions: pass a `rope_base` with it")
        # the scaling as a hashable key of the kept angles (None: the unscaled fast path)
        self._scaling_key = None if self.rope_scaling is None else \
            tuple(sorted(self.rope_scaling.items()))
        self.window = None if window is None else check_int("window", window)
        self.dropout = check_probability("dropout", dropout)
        kw = {"bias": bias, "device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, num_heads * head_dim, **kw)  # e -> h*d
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, **kw)  # e -> g*d
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, **kw)  # e -> g*d
        self.out_proj = nn.Linear(num_heads * head_dim, embed_dim, **kw)  # h*d -> e
        self._packed = None  # (q/k/v weight, bias, out weight) while packed

    def forward(self, x, *, attn_mask=None, cache=None, positions=None, need_weights=False):
        """Causal self-attention of ``x``, continuing ``cache`` when one is given.

        Args:
            x: ``[b, n, embed_dim]``, floating, the module's dtype.
            attn_mask: optional torch.bool mask, **True = may attend**, broadcastable to
                ``[b, h, n, n_k]`` with ``n_k = len(cache) + n`` (every position so far),
                ANDed with the causal (or sliding-window) mask; e.g. a padding mask
                ``[b, 1, 1, n_k]``. With a window, only its last kept columns are read
                (with a :class:`mhsa.SinkKVCache`, the kept positions' columns).
            cache: a cache from :meth:`new_cache` holding the earlier positions; the keys
                and values of ``x`` are appended (with a window, only the last
                ``window - 1`` are kept).
            positions: with ``rope_base``, the positions of the ``n`` tokens: an integer
                tensor ``[n]`` or ``[b, n]`` (one row per sequence, e.g. after left
                padding), or their ``mhsa.core.rotary.RotaryAngles`` from
                :meth:`rotary_angles` (a model computes them once for all its layers).
                Default ``len(cache) + arange(n)``. Without ``rope_base`` it must be None.
            need_weights: return the per-head weights (explicit path) instead of running
                torch's fused kernel. Same output (float32, 1e-5).

        Returns:
            ``(output, weights)``: ``output`` ``[b, n, embed_dim]``; ``weights``
            ``[b, num_heads, n, n_kept]`` or None. A query with no key to attend to gets a
            zero attention output (no NaN).

        Raises:
            TypeError: ``x`` is not a floating tensor of the module's dtype, ``attn_mask``
                is not torch.bool, or ``positions`` is not an integer tensor.
            ValueError: ``x`` is not ``[b, n, embed_dim]``; ``attn_mask`` does not broadcast
                or is on another device; ``positions`` without ``rope_base`` or of the
                wrong shape; a ``cache`` of another batch size, head count or head_dim.
        """
        n_cached = 0 if cache is None else len(cache)
        self._check(x, attn_mask, positions, n_cached)
        h, g, packed = self.num_heads, self.num_kv_heads, self._packed
        # project once for all h + 2g heads and split them: [b, h+2g, n, d]
        weight, bias = packed[:2] if packed else stacked(self.q_proj, self.k_proj, self.v_proj)
        q_and_k, v = split_heads(F.linear(x, weight, bias), h + 2 * g).split([h + g, g], dim=1)
        q, k = q_and_k.split([h, g], dim=1)  # [b, h, n, d], [b, g, n, d]
        adjusted = self.adjust_queries_and_keys(q, k)  # a variant's step; here none
        unchanged = adjusted[0] is q and adjusted[1] is k
        if self.rope_base is not None:  # rotary positions, before the cache stores the keys
            cos, sin = (positions if isinstance(positions, RotaryAngles) else
                        self.rotary_angles(positions, start=n_cached, n=x.shape[1]))
            if unchanged:  # both in one call: half the work
                q, k = rotate(q_and_k, cos, sin).split([h, g], dim=1)
            else:
                q, k = rotate(adjusted[0], cos, sin), rotate(adjusted[1], cos, sin)
        elif not unchanged:
            q, k = adjusted
        if cache is not None:
            k, v = cache.update(k, v, window=self.window)  # [b, g, n_kept + n, d]
        if attn_mask is not None and attn_mask.dim() and attn_mask.shape[-1] > k.shape[2]:
            kept = getattr(cache, "kept_positions", None)  # a cache that keeps first tokens
            attn_mask = (attn_mask.index_select(-1, kept()) if kept is not None else
                         attn_mask[..., attn_mask.shape[-1] - k.shape[2]:])  # the window's
        mask, square = combine_masks(attn_mask, q.shape[2], k.shape[2], is_causal=True,
                                     window=self.window, device=x.device)
        out, weights = self.attend(q, k, v, mask, is_causal=square, need_weights=need_weights,
                                   dropout_p=self.dropout if self.training else 0.0)
        out_weight = self.out_proj.weight if packed is None else packed[2]
        return F.linear(merge_heads(out), out_weight, self.out_proj.bias), weights

    def adjust_queries_and_keys(self, q: torch.Tensor, k: torch.Tensor):
        """A variant's step on the split heads, before rotary positions; here they pass unchanged.

        The first extension point of the causal variants: a subclass overrides this one
        method to change what the scores see, and keeps everything else (packing, positions,
        cache, window, both kernels); one that changes the softmax instead overrides
        :meth:`attend`. Dividing each head's queries by its own temperature divides
        its scores; an RMSNorm of each head's queries and keys is Qwen3's query/key norm.

        Args:
            q: queries ``[b, num_heads, n, head_dim]``; k: keys ``[b, num_kv_heads, n, head_dim]``.

        Returns:
            ``(q, k)``, the same shapes and dtype. Returning the same objects is free: the
            forward then rotates both in one call.
        """
        return q, k

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, *,
               is_causal: bool, dropout_p: float, need_weights: bool):
        """A variant's step from the split heads to the per-head outputs; here softmax attention.

        The second extension point of the causal variants, next to
        :meth:`adjust_queries_and_keys`: a subclass that changes the softmax itself (caps the
        scores, adds a column to each row) overrides this one method and keeps the
        projections, positions, cache and window of :meth:`forward`, which calls it after
        rotary positions and the cache. Here: with ``need_weights`` the explicit path
        (:func:`mhsa.scaled_dot_product_attention` after repeating each key/value head for
        its ``r = h / g`` query heads), else torch's fused kernel, which groups the heads
        itself.

        Args:
            q: queries ``[b, num_heads, n, head_dim]``, rotated.
            k, v: keys and values ``[b, num_kv_heads, n_k, head_dim]``: the kept cached
                positions first, then the ``n`` new ones.
            mask: torch.bool, **True = may attend**, broadcastable to ``[b, h, n, n_k]`` (the
                caller's ``attn_mask`` AND the causal or sliding-window mask), or None.
            is_causal: with ``mask`` None, the only mask is causal and ``n == n_k``; a
                variant that writes the scores out builds it with :func:`mhsa.causal_mask`.
            dropout_p: probability of zeroing a weight, in ``[0, 1)`` (0 in eval mode).
            need_weights: return the weights too.

        Returns:
            ``(out, weights)``: ``out`` ``[b, num_heads, n, head_dim]``; ``weights``
            ``[b, num_heads, n, n_k]`` (before dropout) with ``need_weights``, else None.
            A query with nothing to attend to gets zero weights and a zero output.
        """
        h, g = self.num_heads, self.num_kv_heads
        if need_weights:  # explicit: every query head reads its group's key/value head
            k, v = repeat_kv_heads(k, h // g), repeat_kv_heads(v, h // g)
            return scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal,
                                                dropout_p=dropout_p)
        # fused: the kernel groups the heads without copying keys
        return fused_attention(q, k, v, mask, is_causal=is_causal, dropout_p=dropout_p,
                               enable_gqa=g != h), None

    def rotary_angles(self, positions=None, *, start: int = 0, n: int | None = None):
        """The ``mhsa.core.rotary.RotaryAngles`` of ``positions``, to pass as ``positions``.

        Args:
            positions: integer tensor ``[n]`` or ``[b, n]``; default ``start + arange(n)``.
            start, n: the default's first position and length.

        Returns:
            ``RotaryAngles(cos, sin)`` in the module's dtype: ``[n, d]`` each, or
            ``[b, 1, n, d]`` for ``[b, n]`` positions; None without ``rope_base``. With
            ``rope_scaling``, the scaled angles (times YaRN's attention factor); for dynamic
            NTK, those of the length ``max(positions) + 1``, so the angles of a position
            depend on the others asked for with it.
        """
        if self.rope_base is None:
            return None
        dtype, scaling = self.q_proj.weight.dtype, self._scaling_key
        if positions is None:
            positions = torch.arange(start, start + n, device=self.q_proj.weight.device)
        if positions.dim() == 1:
            return RotaryAngles(*kept_angles(positions, self.head_dim, self.rope_base, dtype,
                                             scaling))
        cos, sin = rotary_angles(positions, self.head_dim, base=self.rope_base, dtype=dtype,
                                 scaling=scaling)
        return RotaryAngles(cos[:, None], sin[:, None])  # [b, 1, n, d]: the same for every head

    def new_cache(self, *, capacity: int | None = None) -> KVCache:
        """An empty :class:`mhsa.KVCache`; with a window, at most ``2 * window`` positions.

        A windowed cache keeps ``window - 1`` positions and moves them to the front of its
        buffers when the end is reached, so twice the window is all it ever allocates
        (a first write longer than that allocates once for it).
        """
        if capacity is not None and self.window is not None:
            capacity = min(check_int("capacity", capacity), 2 * self.window)
        return KVCache(capacity=capacity)

    def pack_projections(self, packed: bool = True) -> None:
        """Keep the stacked q/k/v weights and ``out_proj``'s in the decoding layout, or drop them.

        Inference only: copies without autograd that do not follow later changes of the
        projections (see :meth:`mhsa.MultiHeadAttention.pack_projections`).
        """
        if not packed:
            self._packed = None
            return
        with torch.no_grad():
            weight, bias = stacked(self.q_proj, self.k_proj, self.v_proj)
            self._packed = (matvec_layout(weight), bias, matvec_layout(self.out_proj.weight))

    def __getstate__(self):
        """Copies and pickles never inherit a stack of :meth:`pack_projections`."""
        return {**self.__dict__, "_packed": None}

    def _check(self, x, attn_mask, positions, n_cached) -> None:
        check_shape("x", x, ("batch", "n", "embed_dim"), self.embed_dim)
        dtype = self.q_proj.weight.dtype
        if x.dtype != dtype:
            raise TypeError(f"`x` must have the module's dtype {dtype}, got {x.dtype}")
        b, n = x.shape[:2]
        if attn_mask is not None:
            check_bool_mask("attn_mask", attn_mask, (b, self.num_heads, n, n_cached + n))
            check_same_device("attn_mask", attn_mask, x, "x")
        if positions is None or isinstance(positions, RotaryAngles):
            return
        if self.rope_base is None:
            raise ValueError("`positions` are the rotary positions: this module has no "
                             "`rope_base`, so pass positions=None")
        check_positions(positions, n, x.device, batch=b)

    def extra_repr(self) -> str:
        extra = "" if self.rope_base is None else f", rope_base={self.rope_base}"
        extra += "" if self.rope_scaling is None else f", rope_scaling={self.rope_scaling}"
        extra += "" if self.window is None else f", window={self.window}"
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}{extra}")


def _check_rope_base(rope_base, head_dim):
    if rope_base is None:
        return None
    if isinstance(rope_base, bool) or not isinstance(rope_base, (int, float)):
        raise TypeError(f"`rope_base` must be a number or None, got {type(rope_base).__name__}")
    if rope_base <= 0:
        raise ValueError(f"`rope_base` must be > 0, got {rope_base}")
    if head_dim % 2:
        raise ValueError(f"rotary positions pair dimensions: `head_dim` ({head_dim}) must be "
                         "even with `rope_base`")
    return float(rope_base)
