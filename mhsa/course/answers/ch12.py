"""Answers to the exercises of chapter 12, the cache diet. Try them first."""

import torch

from mhsa.attention.latent import LatentCache
from mhsa.core.cache import KVCache
from mhsa.core.quantized_cache import QuantizedKVCache


def _deepseek_v2_kib_per_token() -> float:
    """12.1: KiB of DeepSeek-V2's 16-bit MLA cache per token: 60 layers, d_c 512, d_h^R 64."""
    cache = LatentCache(capacity=1)  # one token of one layer: nbytes counts that position
    cache.update(torch.zeros(1, 1, 512, dtype=torch.bfloat16),
                 torch.zeros(1, 1, 64, dtype=torch.bfloat16))
    return 60 * cache.nbytes / 2**10


def _deepseek_v2_mha_kib_per_token() -> float:
    """12.1's comparison: the same model with multi-head attention, 128 heads of 128."""
    cache, keys = KVCache(capacity=1), torch.zeros(1, 128, 1, 128, dtype=torch.bfloat16)
    cache.update(keys, keys.clone())
    return 60 * cache.nbytes / 2**10


def _gqa_groups_like_mla() -> float:
    """12.2: key/value heads whose cache equals MLA's with d_c = 4 d_h and d_h^R = d_h / 2."""
    head_dim = 128  # any: the ratio does not depend on it
    return (4 * head_dim + head_dim / 2) / (2 * head_dim)


def _llama2_70b_int8_kib_per_token() -> float:
    """12.3: KiB per token of Llama 2 70B's cache in int8, group_size 32, float32 scales."""
    cache = QuantizedKVCache(group_size=32, capacity=32)  # one full group: nothing waits
    keys = torch.zeros(1, 8, 32, 128, dtype=torch.float16)
    cache.update(keys, keys.clone())
    return 80 * cache.nbytes / 32 / 2**10


ANSWERS = {
    "12.1": _deepseek_v2_kib_per_token,
    "12.2": _gqa_groups_like_mla,
    "12.3": _llama2_70b_int8_kib_per_token,
}

# common wrong answers, with the hint the self-check prints for each
HINTS = {
    "12.1": [(2 * (512 + 64) * 2 * 60 / 2**10, "The latent is one vector from which both the keys "
                                               "and the values are made: it is cached once."),
             (512 * 2 * 60 / 2**10, "The shared rotary key is cached too, next to the latent.")],
    "12.3": [(2 * 8 * 128 * 80 / 2**10, "The scales are stored too: one float32 per channel and "
                                        "group of 32 keys, one per token for the values.")],
}
