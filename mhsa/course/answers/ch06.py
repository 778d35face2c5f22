"""Answers to the exercises of chapter 6, the decoder and cross-attention. Try them first."""

import torch

from mhsa.attention.multihead import MultiHeadAttention
from mhsa.attention.recording import record_attention
from mhsa.core.masks import causal_mask
from mhsa.layers.transformer import DecoderLayer


def _cross_attention_entries() -> float:
    layer = DecoderLayer(32, 4, 64).eval()
    with torch.no_grad(), record_attention(layer) as weights:
        layer(torch.zeros(2, 5, 32), torch.zeros(2, 7, 32))
    return float(weights["cross_attn"].numel())


def _causal_pairs() -> float:
    return float(causal_mask(6).sum())


def _cross_attention_parameters() -> float:
    return float(sum(p.numel() for p in MultiHeadAttention(32, 4).parameters()))


def _cross_attention_parameters_8_heads() -> float:
    return float(sum(p.numel() for p in MultiHeadAttention(32, 8).parameters()))


ANSWERS = {
    "06.1": _cross_attention_entries,
    "06.2": _causal_pairs,
    "06.3": _cross_attention_parameters,
    "06.3b": _cross_attention_parameters_8_heads,  # the second question of exercise 6.3
}
