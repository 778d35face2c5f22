"""Answers to chapter 2's exercises (the attention table), computed with torch."""

import math

import torch

# The pencil exercise's two tokens, Hello and world, with d_k = 2: row i is token i's vector.
PENCIL_QUERY = torch.tensor([[1.0, 2.0], [3.0, -1.0]])
PENCIL_KEY = torch.tensor([[2.0, 0.0], [1.0, 2.0]])

# Source A's invented score table: rows are the queries of Hello, world, !; columns their keys.
INVENTED_SCORES = torch.tensor([[11.0, 16.0, 19.0], [14.0, 17.0, 20.0], [15.0, 18.0, 21.0]])


def pencil_scores() -> torch.Tensor:
    """02.1's table of scores ``[2, 2]``: row i, column j is query i dotted with key j."""
    return PENCIL_QUERY @ PENCIL_KEY.T


def pencil_world_to_hello() -> float:
    """02.1: the score in row world (its query), column Hello (its key)."""
    return pencil_scores()[1, 0].item()


def weight_hello_to_bang_at_d64() -> float:
    """02.2: weight of query Hello on key ! after scaling by 1/sqrt(64) and softmax."""
    weights = torch.softmax(INVENTED_SCORES / math.sqrt(64), dim=-1)
    return weights[0, 2].item()


def score_for_source_world_row() -> float:
    """02.3: common score s of world and ! giving weights (0.9, 0.05, 0.05) when Hello's is 0."""
    target = torch.tensor([0.9, 0.05, 0.05], dtype=torch.float64)
    scores = target.log() - target.log()[0]  # softmax fixes scores up to a constant
    assert torch.allclose(torch.softmax(scores, dim=-1), target)  # internal invariant
    return scores[1].item()


def std_with_wrong_divisor() -> float:
    """02.4: std of 32-dim unit-variance dot products divided by sqrt(256) instead of sqrt(32)."""
    head_dim, embed_dim = 32, 256
    return math.sqrt(head_dim) / math.sqrt(embed_dim)


ANSWERS = {
    "02.1": pencil_world_to_hello,
    "02.2": weight_hello_to_bang_at_d64,
    "02.3": score_for_source_world_row,
    "02.4": std_with_wrong_divisor,
}

# common wrong answers, with the hint the self-check prints for each
HINTS = {
    "02.1": [(pencil_scores()[0, 1].item(),  # the transposed cell, keys taken as rows
              "that is the cell (Hello, world). Queries are on the rows, keys on the columns: "
              "the cell (world, Hello) is world's query with Hello's key")],
}
