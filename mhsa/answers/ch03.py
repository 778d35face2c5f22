"""Answers to chapter 3's exercises (many heads), computed with torch and mhsa."""

import math

import torch

from ..multihead import MultiHeadAttention


def params_with_smaller_qkv_dim() -> float:
    """03.1: parameters of MultiHeadAttention(256, 8, qkv_dim=128), biases included."""
    return sum(p.numel() for p in MultiHeadAttention(256, 8, qkv_dim=128).parameters())


def bert_base_score_divisor() -> float:
    """03.2: sqrt(head_dim) for embed_dim 768 split into 12 heads."""
    return math.sqrt(MultiHeadAttention(768, 12).head_dim)


def tokens_in_buggy_row() -> float:
    """03.3: token positions feeding row 0 of out.reshape(b, n, h*d), h=4, n=6, d=5."""
    h, n, d = 4, 6, 5
    labels = torch.arange(h * n).reshape(1, h, n, 1).expand(1, h, n, d)  # n * head + token
    row0 = labels.reshape(1, n, h * d)[0, 0]
    return len({v % n for v in row0.tolist()})


ANSWERS = {
    "03.1": params_with_smaller_qkv_dim,
    "03.2": bert_base_score_divisor,
    "03.3": tokens_in_buggy_row,
}
