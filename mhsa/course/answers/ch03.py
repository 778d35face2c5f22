"""Answers to chapter 3's exercises (many heads), computed with torch and mhsa."""

import math

import torch

from mhsa.attention.multihead import MultiHeadAttention


def params_with_smaller_qkv_dim() -> float:
    """03.1: parameters of MultiHeadAttention(256, 8, qkv_dim=128), biases included."""
    return sum(p.numel() for p in MultiHeadAttention(256, 8, qkv_dim=128).parameters())


def bert_base_score_divisor() -> float:
    """03.2: sqrt(head_dim) for embed_dim 768 split into 12 heads."""
    return math.sqrt(MultiHeadAttention(768, 12).head_dim)


def row_of_head_2_token_0() -> float:
    """03.3: row of out.reshape(b, n, h*d) that receives head 2's output for token 0; h=4, n=6, d=5."""
    h, n, d = 4, 6, 5
    labels = torch.arange(h * n).reshape(1, h, n, 1).expand(1, h, n, d)  # n * head + token
    buggy = labels.reshape(1, n, h * d)
    return float((buggy[0] == 2 * n + 0).any(dim=-1).nonzero().item())


ANSWERS = {
    "03.1": params_with_smaller_qkv_dim,
    "03.2": bert_base_score_divisor,
    "03.3": row_of_head_2_token_0,
}
