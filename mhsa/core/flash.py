"""FlashAttention-2 in plain PyTorch loops: tiles of queries, keys and values, never the table.

Legend: b batch, h heads, i query positions, j key positions, d head_dim (as everywhere in the
package). Masks are boolean, True = may attend.

This file teaches the algorithm of Dao 2023, "FlashAttention-2: Faster Attention with Better
Parallelism and Work Partitioning", section 3.1: Algorithm 1 (the forward pass, query tiles in
the outer loop) and Algorithm 2 (the backward pass, key and value tiles in the outer loop). It
is slow: a real kernel runs each tile's loop body on the chip's fast memory in parallel, where
these loops run one tile after the other in Python. Its outputs and gradients equal
``torch.nn.functional.scaled_dot_product_attention``'s (``tests/core/test_flash.py``).
"""

import math

import torch
from einops import einsum

from mhsa.core._checks import check_positive_int
from mhsa.core.functional import prepare_mask


class FlashAttention2(torch.autograd.Function):
    """FlashAttention-2 as a ``torch.autograd.Function``: tiled forward, recomputing backward.

    Call it through :func:`mhsa.flash_attention`, which checks the arguments; ``apply`` takes them
    already checked, positionally: ``FlashAttention2.apply(query, key, value, mask, is_causal,
    scale, block_q, block_k)`` returns ``(output, lse)``.

    What the forward pass saves for the backward pass is the inputs, the output and one number
    per query row, the log-sum-exp of its scaled scores, ``lse = log sum_j exp(s_ij)``: O(n)
    memory besides ``query``, ``key``, ``value`` and the output (plus the caller's mask, when
    one is given). The backward pass recomputes each tile of attention weights from it,
    ``p_ij = exp(s_ij - lse_i)``, instead of storing the ``[n_q, n_k]`` table.

    Source: Dao 2023, "FlashAttention-2", section 3.1.1 (forward, Algorithm 1) and 3.1.2
    (backward, Algorithm 2).
    """

    @staticmethod
    def forward(ctx, query, key, value, mask, is_causal, scale, block_q, block_k):
        """Algorithm 1: for each query tile, stream the key and value tiles past it.

        Args:
            ctx: autograd's context; receives the tensors the backward pass needs.
            query (torch.Tensor): ``[..., n_q, d]``.
            key (torch.Tensor): ``[..., n_k, d]``.
            value (torch.Tensor): ``[..., n_k, d_v]``.
            mask (torch.Tensor | None): torch.bool, ``[..., n_q, n_k]`` after broadcasting,
                True = may attend; or None.
            is_causal (bool): also apply the bottom-right causal mask (query ``i`` sees key
                ``j`` when ``j <= i + n_k - n_q``); key tiles wholly above it are skipped.
            scale (float): factor applied to the scores.
            block_q (int): rows per query tile, the paper's ``B_r``.
            block_k (int): rows per key and value tile, the paper's ``B_c``.

        Returns:
            ``(output, lse)``: ``output`` ``[..., n_q, d_v]`` in the inputs' dtype; ``lse``
            ``[..., n_q]``, the log-sum-exp of each query row's scaled scores, in float32 or
            float64 (``-inf`` for a query with no key to attend to, whose output is zero).
        """
        n_q, n_k, d_v = query.shape[-2], key.shape[-2], value.shape[-1]
        shift = n_k - n_q  # causal: query i sees key j when j <= i + shift
        acc = torch.promote_types(query.dtype, torch.float32)  # statistics: float32 or more
        lead, device = query.shape[:-2], query.device
        if mask is not None:
            mask = mask.expand(*lead, n_q, n_k)  # a view: no [n_q, n_k] copy per batch
        output = query.new_empty(*lead, n_q, d_v)
        lse = torch.empty(*lead, n_q, dtype=acc, device=device)
        for i0 in range(0, n_q, block_q):  # line 3: one query tile Q_i at a time
            i1 = min(i0 + block_q, n_q)
            q = query[..., i0:i1, :].to(acc)
            m = torch.full((*lead, i1 - i0), -math.inf, dtype=acc, device=device)
            ell = torch.zeros_like(m)  # running sum of exp(s - m)
            o = torch.zeros(*lead, i1 - i0, d_v, dtype=acc, device=device)
            last = min(n_k, i1 + shift) if is_causal else n_k  # later keys: all masked
            for j0 in range(0, last, block_k):  # line 6: stream K_j and V_j past Q_i
                j1 = min(j0 + block_k, n_k)
                k, v = key[..., j0:j1, :].to(acc), value[..., j0:j1, :].to(acc)
                s = einsum(q, k, "... i d, ... j d -> ... i j") * scale  # line 8
                allowed = _tile_mask(mask, is_causal, i0, i1, j0, j1, shift, device)
                if allowed is not None:
                    s = s.masked_fill(~allowed, -math.inf)
                m_new = torch.maximum(m, s.amax(dim=-1))  # line 9: running max
                m_safe = m_new.masked_fill(m_new == -math.inf, 0.0)  # rows with no key yet
                p = torch.exp(s - m_safe[..., None])  # the tile's unnormalised weights
                rescale = torch.exp(m - m_safe)  # earlier terms, relative to the new max
                ell = rescale * ell + p.sum(dim=-1)  # running sum
                pv = einsum(p, v, "... i j, ... j d -> ... i d")
                o = rescale[..., None] * o + pv  # line 10: the output accumulator
                m = m_new
            ell_safe = ell.masked_fill(ell == 0, 1.0)  # no key to attend to: output 0
            output[..., i0:i1, :] = (o / ell_safe[..., None]).to(query.dtype)  # line 12
            lse[..., i0:i1] = m + torch.log(ell)  # line 13: L_i = m_i + log(l_i), or -inf
        ctx.save_for_backward(query, key, value, output, lse)  # O and L: nothing n^2
        ctx.mask, ctx.is_causal, ctx.scale = mask, is_causal, scale
        ctx.block_q, ctx.block_k = block_q, block_k
        ctx.mark_non_differentiable(lse)
        return output, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output, grad_lse):
        """Algorithm 2: for each key and value tile, revisit the query tiles and recompute.

        Args:
            ctx: autograd's context, holding what :meth:`mhsa.FlashAttention2.forward` saved.
            grad_output (torch.Tensor): ``[..., n_q, d_v]``, the gradient of the output.
            grad_lse (torch.Tensor | None): ignored (``lse`` is not differentiable).

        Returns:
            ``(grad_query, grad_key, grad_value)`` shaped like the inputs, then ``None`` for
            the five arguments that are not tensors to differentiate.
        """
        query, key, value, output, lse = ctx.saved_tensors
        mask, is_causal, scale = ctx.mask, ctx.is_causal, ctx.scale
        n_q, n_k = query.shape[-2], key.shape[-2]
        shift, acc, device = n_k - n_q, lse.dtype, query.device
        d_out = grad_output.to(acc)
        delta = (d_out * output.to(acc)).sum(dim=-1)  # line 4: D = rowsum(dO * O)
        lse_safe = lse.masked_fill(lse == -math.inf, 0.0)  # rows with no key: p = 0
        grad_q = torch.zeros_like(query, dtype=acc)
        grad_k, grad_v = torch.empty_like(key, dtype=acc), torch.empty_like(value, dtype=acc)
        for j0 in range(0, n_k, ctx.block_k):  # line 5: one key and value tile at a time
            j1 = min(j0 + ctx.block_k, n_k)
            k, v = key[..., j0:j1, :].to(acc), value[..., j0:j1, :].to(acc)
            dk, dv = torch.zeros_like(k), torch.zeros_like(v)  # line 7: kept on chip
            first = 0 if not is_causal else max(0, j0 - shift)  # earlier queries see none
            for i0 in range(first - first % ctx.block_q, n_q, ctx.block_q):  # line 8
                i1 = min(i0 + ctx.block_q, n_q)
                q = query[..., i0:i1, :].to(acc)
                s = einsum(q, k, "... i d, ... j d -> ... i j") * scale  # line 10, recomputed
                allowed = _tile_mask(mask, is_causal, i0, i1, j0, j1, shift, device)
                if allowed is not None:
                    s = s.masked_fill(~allowed, -math.inf)
                p = torch.exp(s - lse_safe[..., i0:i1, None])  # line 11: the weights again
                do = d_out[..., i0:i1, :]
                dv += einsum(p, do, "... i j, ... i d -> ... j d")  # line 12
                dp = einsum(do, v, "... i d, ... j d -> ... i j")  # line 13
                ds = p * (dp - delta[..., i0:i1, None])  # line 14: softmax's backward
                grad_q[..., i0:i1, :] += einsum(ds, k, "... i j, ... j d -> ... i d") * scale  # 15
                dk += einsum(ds, q, "... i j, ... i d -> ... j d") * scale  # line 16
            grad_k[..., j0:j1, :], grad_v[..., j0:j1, :] = dk, dv  # line 18: written once
        return (grad_q.to(query.dtype), grad_k.to(key.dtype), grad_v.to(value.dtype),
                None, None, None, None, None)


def _tile_mask(mask, is_causal, i0, i1, j0, j1, shift, device):
    """The tile ``[..., i0:i1, j0:j1]`` of ``mask`` AND the causal mask; None: all allowed."""
    allowed = None if mask is None else mask[..., i0:i1, j0:j1]
    if is_causal and j1 - 1 > i0 + shift:  # some key of the tile lies after some query
        i = torch.arange(i0, i1, device=device)[:, None] + shift
        causal = torch.arange(j0, j1, device=device)[None, :] <= i
        allowed = causal if allowed is None else allowed & causal
    return allowed


def flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    block_q: int = 64,
    block_k: int = 64,
) -> torch.Tensor:
    r"""Attention computed tile by tile, as FlashAttention-2 does: no ``[n_q, n_k]`` table.

    The same output as :func:`mhsa.scaled_dot_product_attention` and as
    ``torch.nn.functional.scaled_dot_product_attention``, and the same gradients: the forward
    pass visits the queries ``block_q`` rows at a time and, for each such tile, streams the
    keys and values past it ``block_k`` rows at a time with a running maximum, a running sum
    and an output accumulator per query row (the online softmax). It stores the output and
    each row's log-sum-exp; the backward pass recomputes every tile of weights from them
    (:class:`mhsa.FlashAttention2`). In plain PyTorch loops: it teaches the algorithm, it is not
    fast. Equivalent to::

        weights = softmax(query @ key^T * scale, masked where not allowed)
        output = weights @ value

    Args:
        query: ``[..., n_q, d]``, floating point (``[batch, heads, n_q, head_dim]`` in a
            multi-head layer).
        key: ``[..., n_k, d]``, same dtype and leading dimensions as ``query``.
        value: ``[..., n_k, d_v]``, same dtype and leading dimensions as ``query``.
        attn_mask: optional torch.bool mask broadcastable to ``[..., n_q, n_k]``;
            **True = may attend** (``torch.nn.MultiheadAttention`` uses the opposite).
        is_causal: apply the causal mask aligned bottom-right, query ``i`` sees key ``j``
            when ``j <= i + n_k - n_q`` (as :func:`mhsa.causal_mask`; torch aligns it
            top-left when ``n_q != n_k``); key tiles wholly after a query tile are skipped.
            Combined with ``attn_mask`` by logical AND.
        scale: factor applied to the scores; defaults to ``1 / sqrt(d)``.
        block_q: rows per query tile (the paper's ``B_r``), ``int >= 1``.
        block_k: rows per key and value tile (the paper's ``B_c``), ``int >= 1``.

    Returns:
        ``[..., n_q, d_v]``, in the inputs' dtype. A query with no key to attend to gets a
        zero output and zero gradients, never NaN. Float16 and bfloat16 inputs are computed
        in float32 tile by tile, as the paper's kernel keeps its statistics on chip in
        float32.

    Raises:
        TypeError: an input is not a floating tensor, dtypes differ, the mask is not
            torch.bool, or a block size is not an int.
        ValueError: an input has rank below 2; ``query`` and ``key`` last dimensions
            differ; ``key`` and ``value`` lengths differ; leading dimensions differ; the
            mask does not broadcast to ``[..., n_q, n_k]`` or is on another device than
            ``query``; a block size is below 1.

    Source: Dao 2023, "FlashAttention-2", section 3.1, Algorithm 1 (forward) and
    Algorithm 2 (backward); the online softmax of Milakov and Gimelshein 2018.
    """
    mask = prepare_mask(query, key, value, attn_mask)  # checks; causal is applied per tile
    block_q = check_positive_int("block_q", block_q)
    block_k = check_positive_int("block_k", block_k)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    output, _ = FlashAttention2.apply(query, key, value, mask, bool(is_causal), float(scale),
                                      block_q, block_k)
    return output
