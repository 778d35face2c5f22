"""Scaled dot-product attention, written out step by step.

Legend (used in every einops pattern of the package): b batch, n tokens, h heads,
d head_dim, e embed_dim, i query positions, j key positions; h * d is qkv_dim (embed_dim by default).
Masks are boolean, True = may attend.
"""

import math

import torch
import torch.nn.functional as F
from einops import einsum

from mhsa.core._checks import (
    check_bool_mask,
    check_probability,
    check_same_device,
    check_tensor,
)
from mhsa.core.masks import causal_mask, sliding_window_mask


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention with its weights: ``softmax(query @ key^T * scale) @ value``.

    The readable algorithm, one line per step of the attention table: scores (one dot
    product per query row and key column), scaling, masking, row softmax (the attention
    weights), weighted sum of the values. Equivalent to::

        scores = query @ key.transpose(-2, -1) * scale       # [..., n_q, n_k]
        scores = scores.masked_fill(~mask, -inf)             # mask: True = may attend
        weights = scores.softmax(dim=-1)                     # rows sum to 1
        output = weights @ value                             # [..., n_q, d_v]

    plus one rule for queries that may attend to nothing (an all-False mask row): their
    weights are all zero and their output is zero, with finite gradients. A naive
    implementation returns NaN there.

    Args:
        query: ``[..., n_q, d_k]``, floating point.
        key: ``[..., n_k, d_k]``, same dtype and leading dimensions as ``query``.
        value: ``[..., n_k, d_v]``, same dtype and leading dimensions as ``query``.
        attn_mask: optional torch.bool mask broadcastable to ``[..., n_q, n_k]``;
            **True = may attend** (as in ``torch.nn.functional.scaled_dot_product_attention``;
            ``torch.nn.MultiheadAttention`` uses the opposite, True = ignore).
        is_causal: apply the causal mask aligned bottom-right, query ``i`` sees key ``j``
            when ``j <= i + n_k - n_q`` (see :func:`mhsa.causal_mask`; torch aligns it
            top-left when ``n_q != n_k``). Combined with ``attn_mask`` by logical AND.
        dropout_p: probability of zeroing a weight before it multiplies the values, in
            ``[0, 1)``. Applied whenever ``> 0`` (modules pass 0 in eval mode).
        scale: factor applied to the scores; defaults to ``1 / sqrt(d_k)``, the per-head
            dimension.

    Returns:
        ``(output, weights)``: ``output`` is ``[..., n_q, d_v]``; ``weights`` is
        ``[..., n_q, n_k]``, the attention weights before dropout (each row sums to 1,
        or is all zero for a query with nothing to attend to).

    Raises:
        TypeError: an input is not a floating tensor, dtypes differ, or the mask is not
            torch.bool.
        ValueError: an input has rank below 2; ``query`` and ``key`` last dimensions
            differ; ``key`` and ``value`` lengths differ; leading dimensions differ; the
            mask does not broadcast to ``[..., n_q, n_k]`` or is on another device than
            ``query``; ``dropout_p`` outside [0, 1).

    Source: Vaswani et al. 2017, "Attention Is All You Need", section 3.2.1
    (scaled dot-product attention) and 3.2.3 (masking).
    """
    mask = prepare_mask(query, key, value, attn_mask, is_causal=is_causal)
    check_probability("dropout_p", dropout_p)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])

    scores = einsum(query, key, "... i d, ... j d -> ... i j") * scale
    if mask is not None:
        scores = scores.masked_fill(~softmax_safe(mask), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # masked keys and empty rows: exactly 0
    dropped = torch.nn.functional.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    output = einsum(dropped, value, "... i j, ... j d -> ... i d")
    return output, weights


def prepare_mask(query, key, value, attn_mask=None, *, is_causal=False):
    """Check ``query``, ``key``, ``value`` and ``attn_mask``; return the combined mask.

    Returns ``None`` when nothing is masked, else a torch.bool tensor (True = may attend)
    broadcastable to ``[..., n_q, n_k]``: ``attn_mask`` AND the bottom-right causal mask.
    Raises the errors listed in :func:`scaled_dot_product_attention`.
    """
    for name, x in (("query", query), ("key", key), ("value", value)):
        check_tensor(name, x, min_rank=2)
    if not query.dtype == key.dtype == value.dtype:
        raise TypeError(
            "`query`, `key` and `value` must share one dtype, got "
            f"{query.dtype}, {key.dtype} and {value.dtype}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"`query` and `key` must have the same last dimension d_k, got "
            f"{query.shape[-1]} (query {tuple(query.shape)}) and {key.shape[-1]} "
            f"(key {tuple(key.shape)})"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"`key` and `value` must have the same length n_k, got {key.shape[-2]} "
            f"(key {tuple(key.shape)}) and {value.shape[-2]} (value {tuple(value.shape)})"
        )
    if not query.shape[:-2] == key.shape[:-2] == value.shape[:-2]:
        raise ValueError(
            "`query`, `key` and `value` must have the same leading dimensions, got "
            f"{tuple(query.shape[:-2])}, {tuple(key.shape[:-2])} and {tuple(value.shape[:-2])}"
        )
    n_q, n_k = query.shape[-2], key.shape[-2]
    if attn_mask is not None:
        check_bool_mask("attn_mask", attn_mask, (*query.shape[:-2], n_q, n_k))
        check_same_device("attn_mask", attn_mask, query)
    mask, square = combine_masks(attn_mask, n_q, n_k, is_causal=is_causal, device=query.device)
    return causal_mask(n_q, n_k, device=query.device) if square else mask


def combine_masks(attn_mask, n_q: int, n_k: int, *, is_causal: bool = False,
                  window: int | None = None, device=None):
    """``attn_mask`` AND the causal (or sliding-window) mask, built only when it masks something.

    Returns ``(mask, square_causal)``. ``mask`` is None when nothing is masked, else a
    torch.bool tensor of rank >= 2 (a rank-0 or rank-1 ``attn_mask`` gets leading 1s, so
    every path reads it the same way) broadcastable to ``[..., n_q, n_k]``.
    ``square_causal`` is True when the only mask is causal with ``n_q == n_k``: then
    ``mask`` is None and the caller passes ``is_causal=True`` to torch's kernel, whose
    top-left alignment equals ours there, and no ``[n_q, n_k]`` tensor is built.

    No mask is built either when one query sees every key: causal with ``n_q == 1``, or a
    window with ``n_q == 1`` and ``n_k <= window`` (a decoding step). While traced
    (``torch.compile``, ``torch.export``) a window always builds its mask, so that no Python
    comparison pins a symbolic ``n_k``. No checks: callers check ``attn_mask`` first.
    """
    if attn_mask is not None and attn_mask.dim() < 2:
        attn_mask = attn_mask.reshape((1,) * (2 - attn_mask.dim()) + tuple(attn_mask.shape))
    if not is_causal or (n_q == 1 and (window is None or n_k <= window)):
        return attn_mask, False
    # traced: no Python test of a symbolic n_k (the window mask is causal for window >= n_k)
    if window is None or (not torch.compiler.is_compiling() and window >= n_k):
        if attn_mask is None and n_q == n_k:
            return None, True
        structural = causal_mask(n_q, n_k, device=device)
    else:
        structural = sliding_window_mask(n_q, n_k, window=window, device=device)
    return (structural if attn_mask is None else attn_mask & structural), False


def softmax_safe(mask: torch.Tensor) -> torch.Tensor:
    """Open fully masked rows so softmax never sees a row of -inf (which gives NaN).

    Rows with at least one True are unchanged; all-False rows become all-True. The
    caller then zeroes those rows' weights or outputs, so they contribute nothing.
    """
    return mask | ~mask.any(dim=-1, keepdim=True)


# torch's CPU flash kernel reads every key block once per block of queries. From about 1024
# queries and keys on, copying the heads to contiguous memory first makes it 3-6% faster;
# below, the copies cost more than they save (measured: benchmarks/README.md).
_CONTIGUOUS_FROM = 1024


def fused_attention(query, key, value, mask=None, *, is_causal=False, dropout_p=0.0,
                    enable_gqa=False):
    """torch's fused ``F.scaled_dot_product_attention`` under mhsa's mask rules. No checks.

    The fast twin of :func:`scaled_dot_product_attention`: the same output for the same
    inputs, without the weights. ``mask`` comes from :func:`combine_masks` (torch.bool,
    True = may attend, rank >= 2, or None); ``is_causal`` only for its ``square_causal``
    case. ``enable_gqa``: ``key`` and ``value`` have fewer heads than ``query``, and query
    head ``h`` reads key/value head ``h // (h_q // h_kv)``; the kernel handles the grouping
    without copying keys.

    A query with no key to attend to (an all-False mask row, or ``n_k = 0``) gets a zero
    output: torch's CPU kernels do this themselves since torch 2.5 (tested in
    ``tests/attention/test_paths.py``); on other devices its row is opened for softmax and then
    zeroed, as in the explicit path.

    Shapes: ``query`` ``[b, h, n_q, d]``, ``key``/``value`` ``[b, h_kv, n_k, d]`` -> ``[b, h, n_q, d]``.
    """
    on_cpu = query.is_cpu  # a bool attribute: cheaper than comparing device.type
    if on_cpu and not torch.compiler.is_compiling() \
            and min(query.shape[-2], key.shape[-2]) >= _CONTIGUOUS_FROM:  # traced: symbolic
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
    if mask is None or on_cpu or query.is_meta:
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask,
                                              dropout_p=dropout_p, is_causal=is_causal,
                                              enable_gqa=enable_gqa)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=softmax_safe(mask),
                                         dropout_p=dropout_p, enable_gqa=enable_gqa)
    return out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
