"""Multi-head attention as an ``nn.Module``: project, split into heads, attend, merge, project.

Legend (used in every einops pattern of the package): b batch, n tokens, h heads,
d head_dim, e embed_dim, i query positions, j key positions; g key/value heads
(``num_kv_heads``) and r query heads per key/value head (``h = g * r``). ``qkv_dim = h * d``.
Heads are split with ``"b n (h d) -> b h n d"`` and merged with its reverse,
``"b h n d -> b n (h d)"``. Masks are boolean, True = may attend.
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import nn

from mhsa.core._checks import (
    check_bool_mask,
    check_divisible,
    check_int,
    check_positive_int,
    check_probability,
    check_shape,
)
from mhsa.core._packing import matvec_layout
from mhsa.core.functional import (
    check_same_device,
    combine_masks,
    fused_attention,
    scaled_dot_product_attention,
)
from mhsa.core.rotary import check_positions, kept_angles, rotate
from mhsa.interop.torch_nn import mha_from_torch, mha_to_torch


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``[b, n, h*d] -> [b, h, n, d]``: head ``h`` gets columns ``h*d`` to ``(h+1)*d - 1``."""
    return rearrange(x, "b n (h d) -> b h n d", h=num_heads)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``[b, h, n, d] -> [b, n, h*d]``: the exact inverse of :func:`split_heads`."""
    return rearrange(x, "b h n d -> b n (h d)")


def repeat_kv_heads(x: torch.Tensor, queries_per_kv_head: int) -> torch.Tensor:
    """``[b, g, n, d] -> [b, g*r, n, d]``: query head ``h`` gets key/value head ``h // r``.

    The grouping of ``F.scaled_dot_product_attention(..., enable_gqa=True)``, written out
    (a copy); the fused path hands it to the kernel instead.
    """
    return repeat(x, "b g n d -> b (g r) n d", r=queries_per_kv_head)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention, batch first: ``out_proj(concat(head_1, ..., head_h))``.

    Each head attends with its own slice of the projected queries, keys and values::

        head_h = softmax(Q_h K_g^T / sqrt(head_dim)) V_g,   g = h // (num_heads // num_kv_heads)

    The steps of the tensor recipe (chapter 3), with ``d = head_dim = qkv_dim // num_heads``:
    project ``[b, n, e] -> [b, n, h*d]``, split ``"b n (h d) -> b h n d"``, attend per
    head ``[b, h, n_q, d]``, merge ``"b h n d -> b n (h d)"``, project back to ``e``.

    Key/value heads: with ``num_kv_heads = g < num_heads``, keys and values have only ``g``
    heads, each shared by ``r = num_heads // g`` consecutive query heads: grouped-query
    attention (``1 < g < h``), multi-query attention (``g = 1``). The projections and the
    :class:`mhsa.KVCache` shrink by ``h / g``; the queries keep every head.

    Args:
        embed_dim: width ``e`` of the query and of the output.
        num_heads: number of query heads ``h``; must divide ``qkv_dim``.
        num_kv_heads: number of key/value heads ``g``; must divide ``num_heads``. Default
            ``num_heads`` (multi-head), 1 is multi-query, in between grouped-query.
        qkv_dim: width ``h * d`` of the projected queries
            (default ``embed_dim``, as in ``torch.nn.MultiheadAttention``); keys and values
            are ``g * d`` wide.
        dropout: probability of zeroing an attention weight, in ``[0, 1)``; training mode
            only (``eval()`` is deterministic).
        bias: add a learnable bias to the four projections.
        kdim: width of ``key`` (default ``embed_dim``).
        vdim: width of ``value`` (default ``embed_dim``).
        rope_base: rotary position embeddings with this base ``theta`` (transformers'
            ``rope_theta``; 10000.0 in RoFormer and Llama 2), or None for none. Queries and
            keys are rotated with :func:`mhsa.apply_rotary` after the head split and before
            the cache stores the keys. Self-attention only: a call with ``key`` raises
            ``ValueError`` (a query and a key from different sequences have no common
            position origin). ``head_dim`` must be even.
        window: sliding-window causal attention, ``int >= 1``: each query sees itself and
            the ``window - 1`` keys before it (:func:`mhsa.sliding_window_mask`), or None
            for plain causal attention. It applies whenever attention is causal
            (``is_causal=True`` or a ``cache``); a call that is neither raises
            ``ValueError``, since a window without causality is not what the module was
            built for. A cache then keeps only the last ``window - 1`` positions.
        device, dtype: where and in which floating dtype to create the parameters.

    Attributes:
        q_proj: ``nn.Linear`` from ``embed_dim`` to ``qkv_dim = h * d``. ``forward`` applies
            the four projections' weights with ``F.linear``, as ``torch.nn.MultiheadAttention``
            does with its ``out_proj``: forward hooks registered on them do not run.
        k_proj, v_proj: ``nn.Linear`` from ``kdim``/``vdim`` to ``g * d``.
        out_proj: ``nn.Linear`` from ``qkv_dim`` to ``embed_dim``.
        embed_dim, num_heads, num_kv_heads, qkv_dim, head_dim: as above.
        kdim, vdim, dropout, rope_base, window: as above.

    Projections that read one tensor share one matrix product: when ``query``, ``key`` and
    ``value`` are one tensor, ``forward`` stacks the q, k and v weights by rows (torch's
    ``in_proj_weight``), projects once and splits all ``h + 2g`` heads with one einops call;
    when only ``key`` and ``value`` are one tensor (a memory), it does so for k and v. The
    numbers are those of three products up to float rounding, and gradients reach each of
    the three layers through the stack (:meth:`pack_projections` keeps a stack between calls).

    Shape:
        - query: ``[b, n_q, e]``; key: ``[b, n_k, kdim]``; value: ``[b, n_k, vdim]``.
        - attn_mask: torch.bool, broadcastable to ``[b, h, n_q, n_k]``,
          True = may attend (``torch.nn.MultiheadAttention``: True = ignore).
        - output: ``[b, n_q, e]``; weights: ``[b, h, n_q, n_k]`` (per query head).

    Raises:
        TypeError: at construction, a size that is not an int (``16.0`` included),
            ``dropout`` or ``rope_base`` not a number.
        ValueError: at construction, a size below 1, ``qkv_dim`` not divisible by
            ``num_heads`` (e.g. "`qkv_dim` (30) must be divisible by `num_heads` (4)"),
            ``num_heads`` not divisible by ``num_kv_heads``, ``dropout`` outside
            ``[0, 1)``, ``rope_base <= 0`` or an odd ``head_dim`` with ``rope_base``.

    Example::

        >>> mha = MultiHeadAttention(256, 8, num_kv_heads=2)  # 8 query heads, 2 key/value
        >>> x = torch.randn(2, 10, 256)
        >>> out, weights = mha(x, need_weights=True)
        >>> tuple(out.shape), tuple(weights.shape), mha.k_proj.out_features
        ((2, 10, 256), (2, 8, 10, 10), 64)

    Source: Vaswani et al. 2017, "Attention Is All You Need", section 3.2.2 (multi-head
    attention); Shazeer 2019, "Fast Transformer Decoding: One Write-Head is All You Need"
    (multi-query); Ainslie et al. 2023, "GQA", section 2 (grouped-query); Su et al. 2021,
    "RoFormer" (rotary positions); Beltagy et al. 2020, "Longformer", section 3.1, and
    Jiang et al. 2023, "Mistral 7B", section 2 (sliding window).
    """

    def __init__(self, embed_dim, num_heads, *, num_kv_heads=None, qkv_dim=None, dropout=0.0,
                 bias=True, kdim=None, vdim=None, rope_base=None, window=None, device=None,
                 dtype=None):
        super().__init__()
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("num_heads", num_heads)
        qkv_dim = embed_dim if qkv_dim is None else qkv_dim
        kdim = embed_dim if kdim is None else kdim
        vdim = embed_dim if vdim is None else vdim
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        for name, n in [("qkv_dim", qkv_dim), ("kdim", kdim), ("vdim", vdim),
                        ("num_kv_heads", num_kv_heads)]:
            check_positive_int(name, n)
        width_name = "embed_dim" if qkv_dim == embed_dim else "qkv_dim"
        check_divisible(width_name, qkv_dim, "num_heads", num_heads)
        check_divisible("num_heads", num_heads, "num_kv_heads", num_kv_heads)
        self.dropout = check_probability("dropout", dropout)
        self.embed_dim, self.num_heads, self.qkv_dim = embed_dim, num_heads, qkv_dim
        self.num_kv_heads, self.head_dim = num_kv_heads, qkv_dim // num_heads
        self.kdim, self.vdim = kdim, vdim
        self.rope_base = _check_rope_base(rope_base, self.head_dim)
        self.window = None if window is None else check_int("window", window)
        kv_dim = num_kv_heads * self.head_dim
        kw = {"bias": bias, "device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, qkv_dim, **kw)  # e -> h*d
        self.k_proj = nn.Linear(kdim, kv_dim, **kw)  # kdim -> g*d
        self.v_proj = nn.Linear(vdim, kv_dim, **kw)  # vdim -> g*d
        self.out_proj = nn.Linear(qkv_dim, embed_dim, **kw)  # h*d -> e
        self._record = None  # (dict, name) while inside mhsa.record_attention
        self._packed = None  # a _Packed while packed, see pack_projections

    def pack_projections(self, packed: bool = True) -> None:
        """Keep the stacked q/k/v weights between calls, or drop them.

        ``forward`` projects with stacked weights (q/k/v, or k/v for one memory); unpacked,
        it stacks them on every call. Packed, the q/k/v stack is built once (its query rows
        and its key/value rows serve cross-attention), and it and ``out_proj``'s weight are
        held in the layout of ``mhsa.core._packing.matvec_layout`` (faster for a few tokens; equal
        up to float rounding). The copies are made without autograd: they do not follow
        later changes of the projections, and gradients do not reach the layers through
        them, so pack for inference only. :meth:`mhsa.CausalLM.generate` and
        :meth:`mhsa.EncoderDecoder.greedy_decode` pack for the length of one call, under
        ``torch.inference_mode``.

        Raises:
            ValueError: ``kdim`` or ``vdim`` differs from ``embed_dim``.
        """
        if not packed:
            self._packed = None
            return
        if not self.kdim == self.vdim == self.embed_dim:
            raise ValueError(f"packing needs kdim == vdim == embed_dim, got {self.kdim}, "
                             f"{self.vdim} and {self.embed_dim}")
        with torch.no_grad():  # copies outside autograd, also when called in training
            weight, bias = _stack(self.q_proj, self.k_proj, self.v_proj)
            weight = matvec_layout(weight)
            out_weight = matvec_layout(self.out_proj.weight)

        def rows(part: slice):  # a view of some rows: the queries', or the keys' and values'
            return weight[part], None if bias is None else bias[part]

        q_rows, kv_rows = slice(None, self.qkv_dim), slice(self.qkv_dim, None)
        self._packed = _Packed(qkv=(weight, bias), q=rows(q_rows), kv=rows(kv_rows),
                               out=out_weight)

    def forward(self, query, key=None, value=None, *, attn_mask=None, is_causal=False,
                need_weights=False, cache=None, positions=None):
        r"""Attend from ``query`` to ``key``/``value``; self-attention when ``key`` is None.

        Args:
            query: ``[b, n_q, e]``, floating, the module's dtype.
            key: ``[b, n_k, kdim]``; ``None`` means self-attention (key = value = query).
            value: ``[b, n_k, vdim]``; ``None`` means ``value = key``.
            attn_mask: optional torch.bool mask broadcastable to ``[b, h, n_q, n_k]``;
                **True = may attend** (as in
                ``torch.nn.functional.scaled_dot_product_attention``;
                ``torch.nn.MultiheadAttention`` uses the opposite, True = ignore; convert
                with :func:`mhsa.mask_from_torch_mha`). A padding mask is ``[b, 1, 1, n_k]``.
                Any rank from 0 to 4 broadcasts, aligned right.
            is_causal: also apply the causal mask aligned bottom-right (query ``i`` sees key
                ``j`` when ``j <= i + n_k - n_q``, see :func:`mhsa.causal_mask`), or the
                sliding window when the module has one, combined with ``attn_mask`` by
                logical AND.
            need_weights: return the per-head attention weights. ``False`` runs torch's fused
                ``scaled_dot_product_attention``; ``True`` runs the explicit
                :func:`mhsa.scaled_dot_product_attention`. Same output (float32, 1e-5).
            cache: a :class:`mhsa.KVCache`, to decode step by step (self-attention only):
                the keys and values of ``query`` are written to it, and the ``n_q`` new
                queries attend over the ``n_k`` cached keys, causally aligned bottom-right
                whatever ``is_causal`` says. ``attn_mask`` then broadcasts to
                ``[b, h, n_q, len(cache) + n_q]`` (every position so far; with a window
                only its last ``n_k`` columns are used).
            positions: with ``rope_base``, the positions of the ``n_q`` queries (and of
                their keys), an integer tensor ``[n_q]``; default ``len(cache) + arange(n_q)``
                (``arange(n_q)`` without a cache). Without ``rope_base`` it must be None.

        Returns:
            ``(output, weights)``: ``output`` ``[b, n_q, e]``; ``weights``
            ``[b, h, n_q, n_k]`` (per query head, never averaged; before dropout) when
            ``need_weights`` else ``None``. A query that may attend to no key (``n_k = 0``
            included) gets zero weights and a zero attention output, so its ``output`` row
            is ``out_proj.bias`` (zero without bias); no NaN, finite gradients. An empty
            input (``b = 0`` or ``n_q = 0``) gives an empty output.

        Raises:
            TypeError: an input is not a floating tensor of the module's dtype,
                ``attn_mask`` is not torch.bool, or ``positions`` is not an integer tensor.
            ValueError: an input is not 3-D or has the wrong last dimension (``query``:
                embed_dim, ``key``: kdim, ``value``: vdim); batch sizes differ; ``key`` and
                ``value`` lengths differ; ``attn_mask`` does not broadcast to
                ``[b, h, n_q, n_k]`` or is on another device; ``cache`` given with ``key``
                or ``value``, or holding keys of another batch size, head count or head_dim
                (see :meth:`mhsa.KVCache.update`); ``key`` given with ``rope_base``;
                ``positions`` given without ``rope_base`` or not ``[n_q]``; a ``window``
                with neither ``is_causal`` nor ``cache``.
        """
        self_attention = key is None and value is None
        if cache is not None and not self_attention:
            raise ValueError("`cache` serves self-attention: call with key=None and value=None "
                             "(cross-attention keys come from a memory that does not grow)")
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value, self_attention, is_causal or cache is not None,
                           positions)
        n_cached = 0 if cache is None else len(cache)
        b, n_q = query.shape[:2]
        if attn_mask is not None:
            n_k = n_cached + key.shape[1]
            check_bool_mask("attn_mask", attn_mask, (b, self.num_heads, n_q, n_k))
            check_same_device("attn_mask", attn_mask, query)
        angles = None
        if self.rope_base is not None:
            if positions is None:
                positions = torch.arange(n_cached, n_cached + n_q, device=query.device)
            check_positions(positions, n_q, query.device)
            angles = kept_angles(positions, self.head_dim, self.rope_base, query.dtype)
        return self._attend(query, key, value, attn_mask=attn_mask, is_causal=is_causal,
                            need_weights=need_weights, cache=cache, angles=angles)

    def _attend(self, query, key, value, *, attn_mask, is_causal, need_weights, cache, angles):
        """:meth:`forward` after its checks; ``angles``: the rotary ``(cos, sin)`` ``[n_q, d]``.

        :class:`mhsa.CausalLM` calls this directly: its edge checked the inputs, and it
        computes the rotary angles once for all layers (``generate``: once per call).
        """
        record = self._record  # inside mhsa.record_attention: (dict, name)
        packed = self._packed  # stacked weights kept between calls, see pack_projections
        h, g = self.num_heads, self.num_kv_heads
        # step 2 of the recipe: project every token, [b, n, e] -> [b, n, h*d] for the queries
        # (g*d for the keys and for the values); steps 3-4: split the heads, "b n (h d) ->
        # b h n d". Projections that read the same tensor are stacked into one matrix, as in
        # torch.nn.MultiheadAttention's in_proj_weight: one matrix product, [b, n, (h+2g)*d]
        # for query = key = value, and one einops split for all their heads
        if key is query and value is query:  # one tensor: queries, keys and values at once
            weight, bias = packed.qkv if packed is not None else _stack(
                self.q_proj, self.k_proj, self.v_proj)
            # [b, h+2g, n, d]: heads 0..h-1 are the queries, the next g keys, the last g values
            heads = split_heads(F.linear(query, weight, bias), h + 2 * g)
            q_and_k, v = heads.split_with_sizes([h + g, g], dim=1)
            if angles is not None:  # rotary positions, before the cache stores the keys
                q_and_k = rotate(q_and_k, *angles)
            q, k = q_and_k.split_with_sizes([h, g], dim=1)  # [b, h, n_q, d], [b, g, n_k, d]
        else:  # e.g. cross-attention (no rotary positions: forward refuses them with a key)
            q_weight, q_bias = (packed.q if packed is not None
                                else (self.q_proj.weight, self.q_proj.bias))
            q = split_heads(F.linear(query, q_weight, q_bias), h)  # [b, h, n_q, d]
            if value is key:  # one memory: g key and g value heads at once
                kv_weight, kv_bias = (packed.kv if packed is not None
                                      else _stack(self.k_proj, self.v_proj))
                kv = split_heads(F.linear(key, kv_weight, kv_bias), 2 * g)  # [b, 2g, n_k, d]
                k, v = kv.split_with_sizes([g, g], dim=1)  # [b, g, n_k, d] each
            else:
                k = split_heads(F.linear(key, self.k_proj.weight, self.k_proj.bias), g)
                v = split_heads(F.linear(value, self.v_proj.weight, self.v_proj.bias), g)
        # beyond the recipe: rotary positions (above), the KV cache and the sliding window
        # (chapters 9-11)
        if cache is not None:  # decoding: the new queries see the cached keys, causally
            k, v = cache.update(k, v, window=self.window)  # [b, g, n_kept + n_q, d]
            is_causal = True
        if attn_mask is not None and attn_mask.dim() and attn_mask.shape[-1] > k.shape[2]:
            # the cache kept only the window's last keys: keep the mask's columns for them
            attn_mask = attn_mask[..., attn_mask.shape[-1] - k.shape[2]:]
        mask, square_causal = combine_masks(attn_mask, q.shape[2], k.shape[2], is_causal=is_causal,
                                            window=self.window, device=query.device)
        p = self.dropout if self.training else 0.0
        if need_weights or record is not None:  # steps 5-7, explicit: scores, softmax, weighted sum of values
            r = self.num_heads // self.num_kv_heads  # query heads per key/value head
            if r > 1:  # "b g n d -> b (g r) n d": query head h reads key/value head h // r
                k, v = repeat_kv_heads(k, r), repeat_kv_heads(v, r)
            out, weights = scaled_dot_product_attention(
                q, k, v, mask, is_causal=square_causal, dropout_p=p)  # weights [b, h, n_q, n_k]
            if record is not None:
                record[0][record[1]] = weights.detach()
        else:  # steps 5-7, fused kernel, same maths; key/value heads grouped by the kernel
            out, weights = fused_attention(q, k, v, mask, is_causal=square_causal, dropout_p=p,
                                           enable_gqa=self.num_kv_heads != self.num_heads), None
        # steps 8-9: merge the heads, "b h n d -> b n (h d)"; step 10: project back to e
        out_proj = self.out_proj
        out_weight = out_proj.weight if packed is None else packed.out
        out = F.linear(merge_heads(out), out_weight, out_proj.bias)  # [b, n_q, e]
        return out, (weights if need_weights else None)

    def __getstate__(self):
        """Copies and pickles never inherit a running :func:`mhsa.record_attention`."""
        state = dict(self.__dict__)
        state["_record"] = None
        state["_packed"] = None
        return state

    def _check_inputs(self, query, key, value, self_attention, causal, positions) -> None:
        dtype = self.q_proj.weight.dtype
        inputs = [("query", query, "n_q", "embed_dim", self.embed_dim)]
        if self_attention and not self.kdim == self.vdim == self.embed_dim:
            raise ValueError(f"self-attention (key=None) reads `query` as key and value: it needs "
                             f"kdim == vdim == embed_dim, got {self.kdim}, {self.vdim} and "
                             f"{self.embed_dim}; pass `key` and `value`")
        if not self_attention:  # key and value are query itself otherwise: checked once
            inputs += [("key", key, "n_k", "kdim", self.kdim),
                       ("value", value, "n_k", "vdim", self.vdim)]
        for name, x, n, width, size in inputs:
            check_shape(name, x, ("batch", n, width), size)
            if x.dtype != dtype:
                raise TypeError(f"`{name}` must have the module's dtype {dtype}, got {x.dtype}")
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                "`query`, `key` and `value` must have the same batch size, got shapes "
                f"{tuple(query.shape)}, {tuple(key.shape)} and {tuple(value.shape)}")
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"`key` and `value` must have the same length n_k, got {key.shape[1]} "
                f"(key {tuple(key.shape)}) and {value.shape[1]} (value {tuple(value.shape)})")
        if self.rope_base is not None and not self_attention:
            raise ValueError("`rope_base` serves self-attention: call with key=None and "
                             "value=None (a query and a key from different sequences have no "
                             "common position origin)")
        if positions is not None and self.rope_base is None:
            raise ValueError("`positions` are the rotary positions: this module has no "
                             "`rope_base`, so pass positions=None")
        if self.window is not None and not causal:
            raise ValueError(f"`window` ({self.window}) is a causal sliding window: call with "
                             "is_causal=True or a cache")

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> "MultiHeadAttention":
        """A copy of a ``torch.nn.MultiheadAttention(batch_first=True)``, same weights.

        See :func:`mhsa.interop.torch_nn.mha_from_torch`.
        """
        return mha_from_torch(module, cls)

    def to_torch(self) -> nn.MultiheadAttention:
        """A ``torch.nn.MultiheadAttention(batch_first=True)`` with this module's weights.

        See :func:`mhsa.interop.torch_nn.mha_to_torch`.
        """
        return mha_to_torch(self)

    def extra_repr(self) -> str:
        extra = "" if self.num_kv_heads == self.num_heads else f"num_kv_heads={self.num_kv_heads}, "
        extra += "" if self.rope_base is None else f"rope_base={self.rope_base}, "
        extra += "" if self.window is None else f"window={self.window}, "
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, {extra}"
                f"qkv_dim={self.qkv_dim}, head_dim={self.head_dim}, dropout={self.dropout}")


class _Packed(NamedTuple):
    """:meth:`MultiHeadAttention.pack_projections`' weights: ``(weight, bias)`` for ``F.linear``."""

    qkv: tuple  # q, k and v stacked by rows, [(h + 2g) * d, e], in matvec_layout
    q: tuple  # its query rows: [h * d, e]
    kv: tuple  # its key and value rows: [2g * d, e]
    out: torch.Tensor  # out_proj's weight, in the same layout


def _stack(*projections: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weights and biases of ``projections`` stacked by rows: one ``F.linear`` for all."""
    weight = torch.cat([p.weight for p in projections])
    bias = None if projections[0].bias is None else torch.cat([p.bias for p in projections])
    return weight, bias


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
