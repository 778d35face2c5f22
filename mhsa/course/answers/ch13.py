"""Answers to the exercises of chapter 13, long context and stable scores. Try them first."""

import math

import torch

from mhsa.attention.qk_norm import QKNormAttention
from mhsa.core.rotary import rotary_frequencies, yarn_ramp_pair


def _qk_norm_largest_score() -> float:
    """13.1: the largest score of unit-gain query/key norms with head_dim 128."""
    attn = QKNormAttention(256, 2, 2)  # head_dim 128; the norms' gains start at 1
    q = torch.randn(1, 2, 1, 128, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        q, k = attn.adjust_queries_and_keys(q, q.clone())  # one direction: the largest score
    return (q @ k.transpose(-2, -1) / 128**0.5).max().item()


def _capped_score() -> float:
    """13.2: what Gemma 2's cap of 50 makes of a score of 100."""
    return (50 * torch.tanh(torch.tensor(100.0, dtype=torch.float64) / 50)).item()


def _ntk_pair_slowdown() -> float:
    """13.3: by how much NTK-aware scaling (s = 4) divides pair 4's frequency, head_dim 16."""
    ntk = {"rope_type": "dynamic", "factor": 1.0, "original_max_position_embeddings": 32}
    theta, _ = rotary_frequencies(16, base=10000.0)
    scaled, _ = rotary_frequencies(16, base=10000.0, scaling=ntk, seq_len=128)  # s = 128 / 32
    return (theta[4] / scaled[4]).item()


def _yarn_pair_slowdowns() -> list[float]:
    """13.3's plot: by how much YaRN (s = 4, L = 32) divides each pair's frequency, head_dim 16."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    theta, _ = rotary_frequencies(16, base=10000.0)
    scaled, _ = rotary_frequencies(16, base=10000.0, scaling=yarn, seq_len=128)
    return (theta / scaled).tolist()


def _pair_turns() -> list[float]:
    """13.3: how many full turns each pair (head_dim 16, base 10000) makes over L = 32 positions."""
    theta, _ = rotary_frequencies(16, base=10000.0)
    return (theta * 32 / (2 * math.pi)).tolist()


def _yarn_ramp_ends() -> tuple[float, float]:
    """13.3: the pair indices (head_dim 16, base 10000, L = 32) where YaRN's ramp ends fall.

    The first is where a pair would turn ``beta_fast`` = 32 times over ``L`` (rounded down,
    then clamped to pair 0), the second where it would turn ``beta_slow`` = 1 time (rounded
    up): the formula of transformers' ``_compute_yarn_parameters`` (YaRN, Peng et al. 2023,
    section 3.2), unrounded.
    """
    return tuple(yarn_ramp_pair(turns, head_dim=16, base=10000.0, original_length=32)
                 for turns in (32, 1))


def _streamingllm_cache_mib() -> float:
    """13.4: MiB of Llama 2 7B's float16 keys and values for 4 sinks and a window of 1020."""
    bytes_per_token = 2 * 32 * 32 * 128 * torch.empty(0, dtype=torch.float16).element_size()
    return bytes_per_token * (4 + 1020) / 2**20


ANSWERS = {
    "13.1": _qk_norm_largest_score,
    "13.2": _capped_score,
    "13.3": _ntk_pair_slowdown,
    "13.4": _streamingllm_cache_mib,
}
TOLERANCES = {"13.1": 0.005, "13.2": 0.05, "13.3": 0.005}  # "to two decimals", "to one"

# common wrong answers, with the hint the self-check prints for each
HINTS = {
    "13.1": [(128.0, "that is the dot product of the two normed vectors: the score divides it by "
                     "sqrt(head_dim)")],
    "13.3": [(2.0, "that is s^(2p/d) = 4^(8/16): the base is multiplied by s^(d/(d-2)), so "
                   "pair p is divided by s^(2p/(d-2))"),
             (4.0, "that is what linear interpolation does to every pair; NTK-aware scaling "
                   "divides pair p by s^(2p/(d-2)), less for the faster pairs")],
}
