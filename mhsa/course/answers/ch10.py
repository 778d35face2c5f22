"""Answers to the exercises of chapter 10, attention in today's language models. Try them first."""

import math

import torch

from mhsa.core.cache import KVCache


def _perplexity_from_loss() -> float:
    """10.1: perplexity of a mean next-token loss of 3.2 nats."""
    return math.exp(3.2)


def _llama2_70b_kib_per_token() -> float:
    """10.2: KiB of float16 KV cache per token, 80 layers of 8 key/value heads of 128."""
    # one layer, one token: capacity=1 allocates that one position (nbytes counts the buffers)
    cache, keys = KVCache(capacity=1), torch.zeros(1, 8, 1, 128, dtype=torch.float16)
    cache.update(keys, keys.clone())
    return 80 * cache.nbytes / 2**10


def _unseen_pair_loss() -> float:
    """10.3: -log p(b | a) of an unseen pair under add-0.01 smoothing, V = 512, count(a) = 99."""
    k, vocab_size, count_a = 0.01, 512, 99
    return -math.log(k / (count_a + k * vocab_size))


ANSWERS = {
    "10.1": _perplexity_from_loss,
    "10.2": _llama2_70b_kib_per_token,
    "10.3": _unseen_pair_loss,
}
TOLERANCES = {"10.1": 0.05, "10.3": 0.005}  # "to one decimal", "to two decimals"
