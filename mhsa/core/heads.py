"""Splitting a projection into heads and merging the heads back, with einops.

Legend: b batch, n tokens, h heads, d head_dim, g key/value heads, r query heads per
key/value head (``h = g * r``).
"""

import torch
from einops import rearrange, repeat


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``[b, n, h*d] -> [b, h, n, d]``: head ``h`` gets columns ``h*d`` to ``(h+1)*d - 1``.

    Args:
        x: ``[batch, n, num_heads * head_dim]``, any dtype.
        num_heads: ``h``, dividing ``x.shape[-1]``.

    einops raises its ``EinopsError`` when ``num_heads`` does not divide the last dimension.

    Source: Vaswani et al. 2017, "Attention Is All You Need", section 3.2.2.
    """
    return rearrange(x, "b n (h d) -> b h n d", h=num_heads)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``[b, h, n, d] -> [b, n, h*d]``: the exact inverse of :func:`split_heads`.

    Source: Vaswani et al. 2017, section 3.2.2 (the concatenation of the heads).
    """
    return rearrange(x, "b h n d -> b n (h d)")


def repeat_kv_heads(x: torch.Tensor, queries_per_kv_head: int) -> torch.Tensor:
    """``[b, g, n, d] -> [b, g*r, n, d]``: query head ``h`` gets key/value head ``h // r``.

    The grouping of ``F.scaled_dot_product_attention(..., enable_gqa=True)``, written out
    (a copy); the fused path hands it to the kernel instead.

    Source: Ainslie et al. 2023, "GQA", section 2.
    """
    return repeat(x, "b g n d -> b (g r) n d", r=queries_per_kv_head)
