"""Answers to chapter 4's exercises (masking), computed with torch and mhsa."""

import torch

from mhsa.core.masks import causal_mask, padding_mask


def allowed_pairs_padding_and_causal() -> float:
    """04.1: True entries of padding mask AND causal mask, n = 6, lengths (6, 4, 1)."""
    return (padding_mask([6, 4, 1], 6) & causal_mask(6)).sum().item()


def pairs_top_left_wrongly_blocks() -> float:
    """04.2: pairs the bottom-right causal mask allows and the top-left one blocks, n_q=3, n_k=7."""
    bottom_right = causal_mask(3, 7)
    top_left = torch.ones(3, 7, dtype=torch.bool).tril()
    return (bottom_right & ~top_left).sum().item()


def smallest_score_that_overflows_finfo_min() -> float:
    """04.3: smallest integer c > 0 with float16 finfo.min - c == -inf."""
    blocked = torch.tensor(torch.finfo(torch.float16).min, dtype=torch.float16)
    return next(c for c in range(1, 1000) if torch.isinf(blocked - c))


ANSWERS = {
    "04.1": allowed_pairs_padding_and_causal,
    "04.2": pairs_top_left_wrongly_blocks,
    "04.3": smallest_score_that_overflows_finfo_min,
}
