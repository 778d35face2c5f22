"""Multi-head attention as an ``nn.Module``: project, split into heads, attend, merge, project.

The module of chapters 3-9. Legend (used in every einops pattern of the package): b batch,
n tokens, h heads, d head_dim, e embed_dim, i query positions, j key positions;
``qkv_dim = h * d``. Heads are split with ``"b n (h d) -> b h n d"`` and merged with its
reverse, ``"b h n d -> b n (h d)"``. Masks are boolean, True = may attend.
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from mhsa.attention.base import Attention
from mhsa.core._checks import (
    check_attention_inputs,
    check_divisible,
    check_positive_int,
    check_probability,
)
from mhsa.core._packing import matvec_layout, stacked
from mhsa.core.functional import combine_masks, fused_attention, scaled_dot_product_attention
from mhsa.core.heads import merge_heads, split_heads
from mhsa.interop.torch_nn import mha_from_torch, mha_to_torch


class MultiHeadAttention(Attention):
    r"""Multi-head attention, batch first: ``out_proj(concat(head_1, ..., head_h))``.

    Each head attends with its own slice of the projected queries, keys and values::

        head_h = softmax(Q_h K_h^T / sqrt(head_dim)) V_h

    The steps of the tensor recipe (chapter 3), with ``d = head_dim = qkv_dim // num_heads``:
    project ``[b, n, e] -> [b, n, h*d]``, split ``"b n (h d) -> b h n d"``, attend per
    head ``[b, h, n_q, d]``, merge ``"b h n d -> b n (h d)"``, project back to ``e``.
    Self-attention and cross-attention (``key``/``value`` from a ``memory``), masks, the
    attention weights on request, dropout on the weights and the KV cache of chapter 9.
    The attention of decoder-only models (shared key/value heads, rotary positions,
    sliding windows) is its sibling :class:`mhsa.GroupedQueryAttention`.

    Args:
        embed_dim: width ``e`` of the query and of the output.
        num_heads: number of heads ``h``; must divide ``qkv_dim``.
        qkv_dim: width ``h * d`` of the projected queries, keys and values
            (default ``embed_dim``, as in ``torch.nn.MultiheadAttention``).
        dropout: probability of zeroing an attention weight, in ``[0, 1)``; training mode
            only (``eval()`` is deterministic).
        bias: add a learnable bias to the four projections.
        kdim: width of ``key`` (default ``embed_dim``).
        vdim: width of ``value`` (default ``embed_dim``).
        device, dtype: where and in which floating dtype to create the parameters.

    Attributes:
        q_proj: ``nn.Linear`` from ``embed_dim`` to ``qkv_dim = h * d``. ``forward`` applies
            the four projections' weights with ``F.linear``, as ``torch.nn.MultiheadAttention``
            does with its ``out_proj``: forward hooks registered on them do not run.
        k_proj, v_proj: ``nn.Linear`` from ``kdim``/``vdim`` to ``qkv_dim``.
        out_proj: ``nn.Linear`` from ``qkv_dim`` to ``embed_dim``.
        embed_dim, num_heads, qkv_dim, head_dim, kdim, vdim, dropout: as above.

    Projections that read one tensor share one matrix product: when ``query``, ``key`` and
    ``value`` are one tensor, ``forward`` stacks the q, k and v weights by rows (torch's
    ``in_proj_weight``), projects once and splits all ``3h`` heads with one einops call;
    when only ``key`` and ``value`` are one tensor (a memory), it does so for k and v. The
    numbers are those of three products up to float rounding, and gradients reach each of
    the three layers through the stack (:meth:`pack_projections` keeps a stack between calls).

    Shape:
        - query: ``[b, n_q, e]``; key: ``[b, n_k, kdim]``; value: ``[b, n_k, vdim]``.
        - attn_mask: torch.bool, broadcastable to ``[b, h, n_q, n_k]``,
          True = may attend (``torch.nn.MultiheadAttention``: True = ignore).
        - output: ``[b, n_q, e]``; weights: ``[b, h, n_q, n_k]`` (per head).

    Raises:
        TypeError: at construction, a size that is not an int (``16.0`` included) or
            ``dropout`` not a number.
        ValueError: at construction, a size below 1, ``qkv_dim`` not divisible by
            ``num_heads`` (e.g. "`qkv_dim` (30) must be divisible by `num_heads` (4)") or
            ``dropout`` outside ``[0, 1)``.

    Example::

        >>> mha = MultiHeadAttention(256, 8)  # 256 columns into 8 heads of 32
        >>> x = torch.randn(2, 10, 256)
        >>> out, weights = mha(x, need_weights=True)
        >>> tuple(out.shape), tuple(weights.shape), mha.head_dim
        ((2, 10, 256), (2, 8, 10, 10), 32)

    Source: Vaswani et al. 2017, "Attention Is All You Need", section 3.2.2 (multi-head
    attention); Pope et al. 2022, "Efficiently Scaling Transformer Inference", section 3.1
    (the KV cache).
    """

    def __init__(self, embed_dim, num_heads, *, qkv_dim=None, dropout=0.0, bias=True,
                 kdim=None, vdim=None, device=None, dtype=None):
        super().__init__()
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("num_heads", num_heads)
        qkv_dim = embed_dim if qkv_dim is None else qkv_dim
        kdim = embed_dim if kdim is None else kdim
        vdim = embed_dim if vdim is None else vdim
        for name, n in [("qkv_dim", qkv_dim), ("kdim", kdim), ("vdim", vdim)]:
            check_positive_int(name, n)
        check_divisible("embed_dim" if qkv_dim == embed_dim else "qkv_dim", qkv_dim,
                        "num_heads", num_heads)
        self.dropout = check_probability("dropout", dropout)
        self.embed_dim, self.num_heads, self.qkv_dim = embed_dim, num_heads, qkv_dim
        self.head_dim, self.kdim, self.vdim = qkv_dim // num_heads, kdim, vdim
        kw = {"bias": bias, "device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, qkv_dim, **kw)  # e -> h*d
        self.k_proj = nn.Linear(kdim, qkv_dim, **kw)  # kdim -> h*d
        self.v_proj = nn.Linear(vdim, qkv_dim, **kw)  # vdim -> h*d
        self.out_proj = nn.Linear(qkv_dim, embed_dim, **kw)  # h*d -> e
        self._packed = None  # a _Packed while packed, see pack_projections

    def forward(self, query, key=None, value=None, *, attn_mask=None, is_causal=False,
                need_weights=False, cache=None):
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
                ``j`` when ``j <= i + n_k - n_q``, see :func:`mhsa.causal_mask`), combined
                with ``attn_mask`` by logical AND.
            need_weights: return the per-head attention weights. ``False`` runs torch's fused
                ``scaled_dot_product_attention``; ``True`` runs the explicit
                :func:`mhsa.scaled_dot_product_attention`. Same output (float32, 1e-5).
            cache: a :class:`mhsa.KVCache` (from :meth:`new_cache`), to decode step by step
                (self-attention only): the keys and values of ``query`` are written to it,
                and the ``n_q`` new queries attend over the ``n_k`` cached keys, causally
                aligned bottom-right whatever ``is_causal`` says. ``attn_mask`` then
                broadcasts to ``[b, h, n_q, len(cache) + n_q]``.

        Returns:
            ``(output, weights)``: ``output`` ``[b, n_q, e]``; ``weights``
            ``[b, h, n_q, n_k]`` (per head, never averaged; before dropout) when
            ``need_weights`` else ``None``. A query that may attend to no key (``n_k = 0``
            included) gets zero weights and a zero attention output, so its ``output`` row
            is ``out_proj.bias`` (zero without bias); no NaN, finite gradients. An empty
            input (``b = 0`` or ``n_q = 0``) gives an empty output.

        Raises:
            TypeError: an input is not a floating tensor of the module's dtype, or
                ``attn_mask`` is not torch.bool.
            ValueError: an input is not 3-D or has the wrong last dimension (``query``:
                embed_dim, ``key``: kdim, ``value``: vdim); batch sizes differ; ``key`` and
                ``value`` lengths differ; ``attn_mask`` does not broadcast to
                ``[b, h, n_q, n_k]`` or is on another device; ``cache`` given with ``key``
                or ``value``, or holding keys of another batch size, head count or head_dim
                (see :meth:`mhsa.KVCache.update`).
        """
        if cache is not None and (key is not None or value is not None):
            raise ValueError("`cache` serves self-attention: call with key=None and value=None "
                             "(cross-attention keys come from a memory that does not grow)")
        key = query if key is None else key
        value = key if value is None else value
        out_proj, packed = self.out_proj, self._packed  # each submodule read once a call
        out_weight = out_proj.weight if packed is None else packed.out
        n_cached = 0 if cache is None else len(cache)
        check_attention_inputs(query, key, value, attn_mask, num_heads=self.num_heads,
                               widths=(self.embed_dim, self.kdim, self.vdim),
                               dtype=out_weight.dtype, n_cached=n_cached)
        q, k, v = self._project(query, key, value)  # steps 2-4: [b, h, n, d] each
        if cache is not None:  # decoding: the new queries see every cached key, causally
            k, v = cache.update(k, v)  # [b, h, n_cached + n_q, d]
            is_causal = True
        mask, square_causal = combine_masks(attn_mask, q.shape[2], k.shape[2],
                                            is_causal=is_causal, device=query.device)
        p = self.dropout if self.training else 0.0
        if need_weights:  # steps 5-7, explicit: scores, softmax, weighted sum of the values
            out, weights = scaled_dot_product_attention(q, k, v, mask, is_causal=square_causal,
                                                        dropout_p=p)  # weights [b, h, n_q, n_k]
        else:  # steps 5-7 in torch's fused kernel: the same maths, no weights
            out = fused_attention(q, k, v, mask, is_causal=square_causal, dropout_p=p)
            weights = None
        # steps 8-9: merge the heads, "b h n d -> b n (h d)"; step 10: project back to e
        return F.linear(merge_heads(out), out_weight, out_proj.bias), weights

    def _project(self, query, key, value):
        """Steps 2-4: project to ``h*d`` and split the heads: q, k, v ``[b, h, n, d]``.

        Projections that read the same tensor are stacked into one matrix product, as in
        ``torch.nn.MultiheadAttention``'s ``in_proj_weight``, and split with one einops call.
        """
        h, packed = self.num_heads, self._packed
        if key is query and value is query:  # one tensor: queries, keys and values at once
            weight, bias = packed.qkv if packed else stacked(self.q_proj, self.k_proj, self.v_proj)
            return split_heads(F.linear(query, weight, bias), 3 * h).chunk(3, dim=1)
        weight, bias = packed.q if packed else (self.q_proj.weight, self.q_proj.bias)
        q = split_heads(F.linear(query, weight, bias), h)  # [b, h, n_q, d]
        if value is key:  # one memory: keys and values at once
            weight, bias = packed.kv if packed else stacked(self.k_proj, self.v_proj)
            return q, *split_heads(F.linear(key, weight, bias), 2 * h).chunk(2, dim=1)
        k = split_heads(F.linear(key, self.k_proj.weight, self.k_proj.bias), h)
        return q, k, split_heads(F.linear(value, self.v_proj.weight, self.v_proj.bias), h)

    def pack_projections(self, packed: bool = True) -> None:
        """Keep the stacked q/k/v weights between calls, or drop them.

        ``forward`` projects with stacked weights (q/k/v, or k/v for one memory); unpacked,
        it stacks them on every call. Packed, the q/k/v stack is built once (its query rows
        and its key/value rows serve cross-attention), and it and ``out_proj``'s weight are
        held in the layout of ``mhsa.core._packing.matvec_layout`` (faster for a few
        tokens; equal up to float rounding). The copies are made without autograd: they do
        not follow later changes of the projections, and gradients do not reach the layers
        through them, so pack for inference only. The decoding loops of
        ``mhsa.models.generation`` pack for the length of one call.

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
            weight, bias = stacked(self.q_proj, self.k_proj, self.v_proj)
            weight = matvec_layout(weight)
            out_weight = matvec_layout(self.out_proj.weight)

        def rows(part: slice):  # a view of some rows: the queries', or the keys' and values'
            return weight[part], None if bias is None else bias[part]

        q_rows, kv_rows = slice(None, self.qkv_dim), slice(self.qkv_dim, None)
        self._packed = _Packed(qkv=(weight, bias), q=rows(q_rows), kv=rows(kv_rows),
                               out=out_weight)

    def __getstate__(self):
        """Copies and pickles never inherit a stack of :meth:`pack_projections`."""
        return {**self.__dict__, "_packed": None}

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> "MultiHeadAttention":
        """A copy of a ``torch.nn.MultiheadAttention(batch_first=True)``, same weights.

        See ``mhsa.interop.torch_nn.mha_from_torch``.
        """
        return mha_from_torch(module, cls)

    def to_torch(self) -> nn.MultiheadAttention:
        """A ``torch.nn.MultiheadAttention(batch_first=True)`` with this module's weights.

        See ``mhsa.interop.torch_nn.mha_to_torch``.
        """
        return mha_to_torch(self)

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"qkv_dim={self.qkv_dim}, head_dim={self.head_dim}, dropout={self.dropout}")


class _Packed(NamedTuple):
    """:meth:`MultiHeadAttention.pack_projections`' weights: ``(weight, bias)`` for ``F.linear``."""

    qkv: tuple  # q, k and v stacked by rows, [3 * h * d, e], in matvec_layout
    q: tuple  # its query rows: [h * d, e]
    kv: tuple  # its key and value rows: [2 * h * d, e]
    out: torch.Tensor  # out_proj's weight, in the same layout
