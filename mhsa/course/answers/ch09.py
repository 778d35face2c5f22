"""Answers to the exercises of chapter 9, making attention fast. Try them first."""

import torch

from mhsa.core.cache import KVCache
from mhsa.course.measure import attention_flops


def _scores_gib() -> float:
    """09.1: GiB of float16 scores for batch 4, 12 heads, 4096 tokens."""
    scores = torch.empty(0, dtype=torch.float16).element_size() * 4 * 12 * 4096 * 4096
    return scores / 2**30


def _crossover_length() -> float:
    """09.2: shortest n whose attention FLOPs (4 n^2 e) reach the projections' (8 n e^2), e=768."""
    e = 768
    for n in range(1, 10 * e):
        projections = 8 * n * e**2
        if attention_flops(n, e) - projections >= projections:  # the rest is attention
            return float(n)
    raise AssertionError("no crossover below 10 e")  # internal invariant: it is 2 e


def _kv_cache_mib() -> float:
    """09.3: MiB of a float16 KV cache, 12 layers of 12 heads x 64, 1024 tokens, batch 1."""
    cache = KVCache(capacity=1024)  # room for exactly the 1024 tokens: nbytes is what is stored
    keys = torch.zeros(1, 12, 1024, 64, dtype=torch.float16)
    cache.update(keys, keys.clone())
    return 12 * cache.nbytes / 2**20  # one layer's keys and values, 12 layers


def memory_projection_flops(n_src: int, e: int) -> int:
    """FLOPs of projecting ``n_src`` memory tokens to keys and values again: two ``[n_src, e] @ [e, e]``."""
    return 2 * (2 * n_src * e * e)


def rest_of_decoder_step_flops(n_src: int, e: int, ff_dim: int, t: int) -> int:
    """FLOPs of everything else one decoder layer computes for one new token in a cached step.

    Self-attention's four projections (``8 e^2``), cross-attention's query and output projections
    (``4 e^2``), the feed-forward network (``4 e ff_dim``), and one query's scores and weighted values
    against ``t`` cached keys and ``n_src`` memory keys (``4 (t + n_src) e``).
    """
    return 12 * e * e + 4 * e * ff_dim + 4 * (t + n_src) * e


EXERCISE_4 = {"n_src": 1000, "e": 512, "ff_dim": 2048, "t": 100}  # the summarizer of exercise 9.4


def _memory_projection_gflop() -> float:
    """09.4: GFLOP per decoder layer and step to project 1000 memory tokens to keys and values."""
    return memory_projection_flops(EXERCISE_4["n_src"], EXERCISE_4["e"]) / 1e9


ANSWERS = {
    "09.1": _scores_gib,
    "09.2": _crossover_length,
    "09.3": _kv_cache_mib,
    "09.4": _memory_projection_gflop,
}
