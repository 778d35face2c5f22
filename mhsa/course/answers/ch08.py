"""Answers to chapter 8's exercises (a real model), computed with the pretrained encoder.

The model is loaded once, on the CPU, so the answers do not depend on the reader's device.
"""

from functools import lru_cache

import torch


@lru_cache(maxsize=1)
def _minilm():
    from mhsa.models.pretrained import load_minilm

    return load_minilm(device="cpu")


def banks_to_money() -> float:
    """08.1: largest weight any head puts on "money" when the query is "banks"."""
    sentence = "She borrowed money from two banks to buy the house."
    tokens = _minilm().tokenize(sentence)
    weights = _minilm().attention(sentence)  # [layers, heads, n, n]
    return weights[:, :, tokens.index("banks"), tokens.index("money")].max().item()


def stoned_sentence_similarity() -> float:
    """08.2: cosine similarity of the two "stoned" sentences' sentence embeddings."""
    a, b = _minilm().encode(["They stoned the witch.", "This guy got completely stoned."])
    return torch.dot(a, b).item()  # unit vectors: the dot product is the cosine


def word_table_fraction() -> float:
    """08.3: share of the model's parameters held by the word-embedding table."""
    model = _minilm().model
    total = sum(p.numel() for p in model.parameters())
    return model.embeddings.word_embeddings.weight.numel() / total


ANSWERS = {
    "08.1": banks_to_money,
    "08.2": stoned_sentence_similarity,
    "08.3": word_table_fraction,
}
TOLERANCES = {
    "08.1": 6e-3,  # "give it to 2 decimals": 0.22, not 0.23
    "08.2": 6e-4,  # "to 3 decimals": 0.486, not 0.49
}
