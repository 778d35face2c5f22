"""The shared references of tests/references.py hold against torch's own modules.

The tests and benchmarks compare mhsa with these references, so a reference that drifted would
let a wrong result pass: each is checked here against an oracle that is not mhsa.
"""

import pytest
import torch

import mhsa
from mhsa import KVCache

from references import (
    encoder_decoder,
    plain_attention,
    plain_explicit_attention,
    spread_weights_,
    torch_mha,
)
from tolerances import worst_case

E, H = 16, 4  # embed_dim, num_heads; head_dim 4
# projection over 16, scores over head_dim 4, weighted values over <= 7 keys, projection over 16
TOL = worst_case(torch.float32, 16 + 4 + 7 + 16)


@pytest.mark.parametrize("n_k", [None, 7], ids=["self", "cross"])
@pytest.mark.parametrize("masked", [False, True])
def test_plain_attention_equals_torch_multihead_attention(n_k, masked):
    theirs = torch_mha(E, H, seed=1)
    assert theirs.in_proj_bias.abs().min() > 0 and not theirs.training  # biases that count
    ours = mhsa.MultiHeadAttention.from_torch(theirs)
    g = torch.Generator().manual_seed(2)
    query = torch.randn(2, 5, E, generator=g)
    key = query if n_k is None else torch.randn(2, n_k, E, generator=g)
    n = key.shape[1]
    keep = blocked = None  # mhsa's polarity, True = may attend; torch's, True = blocked
    if masked:  # key 0 stays allowed: no query is left without keys
        keep = (torch.rand(2, 1, 5, n, generator=g) < 0.7) | (torch.arange(n) == 0)
        blocked = ~keep.expand(2, H, 5, n).flatten(0, 1)  # torch: [b * h, n_q, n_k]
    with torch.no_grad():
        expected, weights = theirs(query, key, key, attn_mask=blocked, average_attn_weights=False)
        got = plain_attention(ours, query, key, attn_mask=keep)
        got_explicit, got_weights = plain_explicit_attention(ours, query, key, attn_mask=keep)
    torch.testing.assert_close(got, expected, **TOL)
    torch.testing.assert_close(got_explicit, expected, **TOL)
    torch.testing.assert_close(got_weights, weights, **TOL)


@pytest.mark.parametrize("use_cache", [False, True])
def test_kv_caches_made_by_sees_every_cache_a_module_makes(kv_caches_made_by, use_cache):
    made = kv_caches_made_by(mhsa.attention.base)  # where MultiHeadAttention.new_cache makes them
    model = encoder_decoder(num_layers=2)
    src = torch.randint(3, 13, (2, 5), generator=torch.Generator().manual_seed(3))
    model.greedy_decode(src, bos_id=1, eos_id=2, max_len=4, use_cache=use_cache)
    assert len(made) == (2 if use_cache else 0)  # one self-attention cache per decoder layer
    assert all(isinstance(cache, KVCache) and len(cache) > 0 for cache in made)


def test_spread_weights_leaves_no_norm_the_identity_and_spreads_matrices():
    torch.manual_seed(4)  # parameters are told apart by name, as in transformers' models
    model = spread_weights_(torch.nn.ModuleDict({"norm": torch.nn.RMSNorm(64),
                                                 "embed": torch.nn.Embedding(512, 64),
                                                 "proj": torch.nn.Linear(256, 64, bias=False)}))
    norm = model["norm"].weight
    assert 0.5 <= norm.min() and norm.max() <= 1.5 and norm.std() > 0.2
    assert 0.9 < model["embed"].weight.std() < 1.1  # N(0, 1)
    assert 0.9 < model["proj"].weight.std() * 256 ** 0.5 < 1.1  # N(0, 1 / fan_in)
