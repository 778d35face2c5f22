"""Multi-head attention as an ``nn.Module``: project, split into heads, attend, merge, project.

Legend (used in every einops pattern of the package): b batch, n tokens, h heads,
d head_dim, e embed_dim, i query positions, j key positions. ``qkv_dim = h * d``.
Heads are split with ``"b n (h d) -> b h n d"`` and merged with its reverse,
``"b h n d -> b n (h d)"``. Masks are boolean, True = may attend.
"""

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ._checks import check_bool_mask, check_divisible, check_positive_int, check_shape
from .attention import prepare_mask, scaled_dot_product_attention, softmax_safe


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``[b, n, h*d] -> [b, h, n, d]``: head ``h`` gets columns ``h*d`` to ``(h+1)*d - 1``."""
    return rearrange(x, "b n (h d) -> b h n d", h=num_heads)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``[b, h, n, d] -> [b, n, h*d]``: the exact inverse of :func:`split_heads`."""
    return rearrange(x, "b h n d -> b n (h d)")


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention, batch first: ``out_proj(concat(head_1, ..., head_h))``.

    Each head attends with its own slice of the projected queries, keys and values::

        head_h = softmax(Q_h K_h^T / sqrt(head_dim)) V_h,   Q = query @ W_q^T + b_q, ...

    The steps of the tensor recipe, with ``d = head_dim = qkv_dim // num_heads``:
    project ``[b, n, e] -> [b, n, h*d]``, split ``"b n (h d) -> b h n d"``, attend per
    head ``[b, h, n_q, d]``, merge ``"b h n d -> b n (h d)"``, project back to ``e``.

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
        q_proj, k_proj, v_proj: ``nn.Linear`` from ``embed_dim``/``kdim``/``vdim`` to ``qkv_dim``.
        out_proj: ``nn.Linear`` from ``qkv_dim`` to ``embed_dim``.
        embed_dim, num_heads, qkv_dim, head_dim, kdim, vdim, dropout: as above.

    Shape:
        - query: ``[batch, n_q, embed_dim]``; key: ``[batch, n_k, kdim]``;
          value: ``[batch, n_k, vdim]``.
        - attn_mask: torch.bool, broadcastable to ``[batch, num_heads, n_q, n_k]``,
          True = may attend (``torch.nn.MultiheadAttention``: True = ignore).
        - output: ``[batch, n_q, embed_dim]``; weights: ``[batch, num_heads, n_q, n_k]``.

    Raises:
        ValueError: at construction, a size that is not a positive int, ``qkv_dim`` not
            divisible by ``num_heads`` (e.g. "`qkv_dim` (30) must be divisible by
            `num_heads` (4)"), or ``dropout`` outside ``[0, 1)``.

    Example::

        >>> mha = MultiHeadAttention(256, 8)  # 8 heads of head_dim 32
        >>> x = torch.randn(2, 10, 256)
        >>> out, weights = mha(x, need_weights=True)
        >>> tuple(out.shape), tuple(weights.shape)
        ((2, 10, 256), (2, 8, 10, 10))

    Source: Vaswani et al. 2017, "Attention Is All You Need", section 3.2.2
    (multi-head attention).
    """

    def __init__(self, embed_dim, num_heads, *, qkv_dim=None, dropout=0.0, bias=True,
                 kdim=None, vdim=None, device=None, dtype=None):
        super().__init__()
        qkv_dim = embed_dim if qkv_dim is None else qkv_dim
        kdim = embed_dim if kdim is None else kdim
        vdim = embed_dim if vdim is None else vdim
        for name, n in [("embed_dim", embed_dim), ("num_heads", num_heads),
                        ("qkv_dim", qkv_dim), ("kdim", kdim), ("vdim", vdim)]:
            check_positive_int(name, n)
        width_name = "embed_dim" if qkv_dim == embed_dim else "qkv_dim"
        check_divisible(width_name, qkv_dim, "num_heads", num_heads)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1), got {dropout}")
        self.embed_dim, self.num_heads, self.qkv_dim = embed_dim, num_heads, qkv_dim
        self.head_dim = qkv_dim // num_heads
        self.kdim, self.vdim, self.dropout = kdim, vdim, dropout
        kw = {"bias": bias, "device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, qkv_dim, **kw)  # e -> h*d
        self.k_proj = nn.Linear(kdim, qkv_dim, **kw)  # kdim -> h*d
        self.v_proj = nn.Linear(vdim, qkv_dim, **kw)  # vdim -> h*d
        self.out_proj = nn.Linear(qkv_dim, embed_dim, **kw)  # h*d -> e

    def forward(self, query, key=None, value=None, *, attn_mask=None, is_causal=False,
                need_weights=False, cache=None):
        r"""Attend from ``query`` to ``key``/``value``; self-attention when ``key`` is None.

        Args:
            query: ``[batch, n_q, embed_dim]``, floating, the module's dtype.
            key: ``[batch, n_k, kdim]``; ``None`` means self-attention (key = value = query).
            value: ``[batch, n_k, vdim]``; ``None`` means ``value = key``.
            attn_mask: optional torch.bool mask broadcastable to
                ``[batch, num_heads, n_q, n_k]``; **True = may attend** (as in
                ``torch.nn.functional.scaled_dot_product_attention``;
                ``torch.nn.MultiheadAttention`` uses the opposite, True = ignore; convert
                with :func:`mhsa.mask_from_torch_mha`). A padding mask is ``[batch, 1, 1, n_k]``.
            is_causal: also apply the causal mask aligned bottom-right (query ``i`` sees key
                ``j`` when ``j <= i + n_k - n_q``, see :func:`mhsa.causal_mask`), combined
                with ``attn_mask`` by logical AND.
            need_weights: return the per-head attention weights. ``False`` runs torch's fused
                ``scaled_dot_product_attention``; ``True`` runs the explicit
                :func:`mhsa.scaled_dot_product_attention`. Same output (float32, 1e-5).
            cache: a :class:`mhsa.KVCache`, to decode step by step (self-attention only):
                the keys and values of ``query`` are appended to it, and the ``n_q`` new
                queries attend over all ``n_k = n_cached + n_q`` cached keys, causally
                aligned bottom-right whatever ``is_causal`` says. ``attn_mask`` then
                broadcasts to ``[batch, num_heads, n_q, n_k]``.

        Returns:
            ``(output, weights)``: ``output`` ``[batch, n_q, embed_dim]``; ``weights``
            ``[batch, num_heads, n_q, n_k]`` (per head, never averaged; before dropout)
            when ``need_weights`` else ``None``. A query that may attend to no key gets
            zero weights and a zero attention output, so its ``output`` row is
            ``out_proj.bias`` (zero without bias); no NaN, finite gradients.

        Raises:
            TypeError: an input is not a floating tensor of the module's dtype, or
                ``attn_mask`` is not torch.bool.
            ValueError: an input is not 3-D or has the wrong last dimension (``query``:
                embed_dim, ``key``: kdim, ``value``: vdim); batch sizes differ; ``key`` and
                ``value`` lengths differ; ``attn_mask`` does not broadcast to
                ``[batch, num_heads, n_q, n_k]``; ``cache`` given with ``key`` or ``value``,
                or holding keys of another batch size, head count or head_dim (see
                :meth:`mhsa.KVCache.update`).
        """
        if cache is not None and (key is not None or value is not None):
            raise ValueError("`cache` serves self-attention: call with key=None and value=None "
                             "(cross-attention keys come from a memory that does not grow)")
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value)
        h, p = self.num_heads, (self.dropout if self.training else 0.0)
        q = split_heads(self.q_proj(query), h)  # [b, h, n_q, d]
        k = split_heads(self.k_proj(key), h)  # [b, h, n_k, d]
        v = split_heads(self.v_proj(value), h)  # [b, h, n_k, d]
        if cache is not None:  # decoding: the new queries see every key so far, causally
            _check_cached_mask(attn_mask, q, len(cache))  # before the cache grows
            k, v = cache.update(k, v)  # [b, h, n_cached + n_q, d]
            is_causal = True
        if need_weights:  # explicit: weights [b, h, n_q, n_k]
            out, weights = scaled_dot_product_attention(
                q, k, v, attn_mask, is_causal=is_causal, dropout_p=p)
        else:  # fused kernel, same maths
            out, weights = _fused_attention(q, k, v, attn_mask, is_causal, p), None
        return self.out_proj(merge_heads(out)), weights  # [b, n_q, e]

    def _check_inputs(self, query, key, value) -> None:
        check_shape("query", query, ("batch", "n_q", "embed_dim"), self.embed_dim)
        check_shape("key", key, ("batch", "n_k", "kdim"), self.kdim)
        check_shape("value", value, ("batch", "n_k", "vdim"), self.vdim)
        dtype = self.q_proj.weight.dtype
        for name, x in (("query", query), ("key", key), ("value", value)):
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

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> "MultiHeadAttention":
        """A copy of a ``torch.nn.MultiheadAttention(batch_first=True)``, same weights.

        Raises:
            TypeError: ``module`` is not a ``torch.nn.MultiheadAttention``.
            ValueError: it has ``batch_first=False``, ``add_bias_kv`` or ``add_zero_attn``.
        """
        _check_torch_mha(module)
        weight = module.out_proj.weight
        ours = cls(module.embed_dim, module.num_heads, dropout=module.dropout,
                   bias=module.in_proj_bias is not None, kdim=module.kdim, vdim=module.vdim,
                   device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            for mine, theirs in _param_pairs(ours, module):
                mine.copy_(theirs)
        return ours.train(module.training)

    def to_torch(self) -> nn.MultiheadAttention:
        """A ``torch.nn.MultiheadAttention(batch_first=True)`` with this module's weights.

        Raises:
            ValueError: ``qkv_dim != embed_dim`` (torch's module projects to ``embed_dim``).
        """
        if self.qkv_dim != self.embed_dim:
            raise ValueError(
                f"torch.nn.MultiheadAttention needs `qkv_dim` ({self.qkv_dim}) equal to "
                f"`embed_dim` ({self.embed_dim})")
        weight = self.out_proj.weight
        theirs = nn.MultiheadAttention(
            self.embed_dim, self.num_heads, dropout=self.dropout,
            bias=self.out_proj.bias is not None, kdim=self.kdim, vdim=self.vdim,
            batch_first=True, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            for mine, their in _param_pairs(self, theirs):
                their.copy_(mine)
        return theirs.train(self.training)

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"qkv_dim={self.qkv_dim}, head_dim={self.head_dim}, dropout={self.dropout}")


# torch's CPU flash kernel reads every key block once per block of queries. From about 1024
# queries and keys on, copying the heads to contiguous memory first makes it 3-6% faster;
# below, the copies cost more than they save (measured: benchmarks/README.md).
_CONTIGUOUS_FROM = 1024


def _fused_attention(q, k, v, attn_mask, is_causal, dropout_p):
    """torch's fused kernel under our rules: bool mask, bottom-right causal, empty rows 0.

    No ``[n_q, n_k]`` tensor is built when nothing is masked or when the only mask is
    causal with ``n_q == 1`` (one query sees every key) or ``n_q == n_k`` (torch's
    ``is_causal``, aligned top-left, is then the same mask): torch's flash kernel then
    works through the keys block by block.
    """
    n_q, n_k = q.shape[-2], k.shape[-2]
    if q.device.type == "cpu" and min(n_q, n_k) >= _CONTIGUOUS_FROM:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    is_causal = is_causal and n_q > 1  # a single query, aligned bottom-right, sees every key
    if attn_mask is None and not is_causal:  # nothing to mask: no mask work at all
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    if attn_mask is None and n_q == n_k:  # square causal: torch's is_causal, same mask
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    mask = prepare_mask(q, k, v, attn_mask, is_causal=is_causal)  # bool [.., n_q, n_k]
    out = F.scaled_dot_product_attention(  # empty rows opened: no NaN, even in gradients
        q, k, v, attn_mask=softmax_safe(mask), dropout_p=dropout_p)
    return out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # rows with no key: 0


def _check_cached_mask(attn_mask, q, n_cached) -> None:
    """Check ``attn_mask`` against the scores of a cached call, ``[b, h, n_q, n_cached + n_q]``."""
    if attn_mask is not None:
        b, h, n_q, _ = q.shape
        check_bool_mask("attn_mask", attn_mask, (b, h, n_q, n_cached + n_q))


def _check_torch_mha(module) -> None:
    if not isinstance(module, nn.MultiheadAttention):
        raise TypeError(
            f"`module` must be a torch.nn.MultiheadAttention, got {type(module).__name__}")
    for flag, bad in [("batch_first=False", not module.batch_first),
                      ("add_bias_kv=True", module.bias_k is not None),
                      ("add_zero_attn=True", module.add_zero_attn)]:
        if bad:
            raise ValueError(f"`module` has {flag}; MultiHeadAttention supports "
                             "batch_first=True without add_bias_kv or add_zero_attn")


def _param_pairs(ours, mha):
    """(our parameter, torch's parameter or view) pairs; torch packs q, k, v in that order."""
    if mha._qkv_same_embed_dim:
        w_q, w_k, w_v = mha.in_proj_weight.chunk(3)
    else:
        w_q, w_k, w_v = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
    pairs = [(ours.q_proj.weight, w_q), (ours.k_proj.weight, w_k),
             (ours.v_proj.weight, w_v), (ours.out_proj.weight, mha.out_proj.weight)]
    if mha.in_proj_bias is not None:
        b_q, b_k, b_v = mha.in_proj_bias.chunk(3)
        pairs += [(ours.q_proj.bias, b_q), (ours.k_proj.bias, b_k),
                  (ours.v_proj.bias, b_v), (ours.out_proj.bias, mha.out_proj.bias)]
    return pairs
