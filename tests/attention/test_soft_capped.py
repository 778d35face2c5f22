"""SoftCappedAttention: Gemma 2's capped scores, equal to transformers' ``Gemma2Attention``.

Oracle: ``Gemma2Attention`` (eager) of a tiny random ``Gemma2Config`` with spread-out weights,
a small cap (2.0, so that the cap changes the scores) and ``query_pre_attn_scalar=16`` (so the
scale is not ``1/sqrt(head_dim)``), both its sliding and its full layer, fed the same hidden
states, its own rotary cos/sin and the causal (or windowed) mask as an additive mask. Masks:
boolean, True = may attend. Tolerances: ``from_hf_gemma2`` promises float32 within 1e-5
(``DOCUMENTED_FLOAT32``); the other comparisons are chains of sums (projection over 32, scores
over 8, weighted values over at most 9 keys, output projection over 32).
"""

import pytest
import torch

import mhsa
from mhsa import GroupedQueryAttention, SoftCappedAttention

from references import decode_in_chunks, run_hf_attention, spread_weights_
from tolerances import DOCUMENTED_FLOAT32, worst_case

TOL32 = worst_case(torch.float32, 32 + 8 + 9 + 32)
EMBED, HEADS, KV_HEADS, HEAD_DIM, WINDOW, N = 32, 4, 2, 8, 3, 9


def gemma2_config(**kw):
    from transformers import Gemma2Config

    settings = {"vocab_size": 97, "hidden_size": EMBED, "intermediate_size": 48,
                "num_hidden_layers": 2, "num_attention_heads": HEADS,
                "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
                "sliding_window": WINDOW, "query_pre_attn_scalar": 16,
                "attn_logit_softcapping": 2.0, "attn_implementation": "eager",
                "layer_types": ["sliding_attention", "full_attention"], **kw}
    return Gemma2Config(**settings)


def gemma2_attention(layer_idx, seed=0, **kw):
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention

    torch.manual_seed(seed)
    return spread_weights_(Gemma2Attention(gemma2_config(**kw), layer_idx).eval())


def run_gemma2(module, x):
    """Their forward on ``x`` (see :func:`references.run_hf_attention`)."""
    from transformers.models.gemma2.modeling_gemma2 import Gemma2RotaryEmbedding

    return run_hf_attention(module, x, Gemma2RotaryEmbedding)


@pytest.mark.parametrize("layer_idx", [0, 1], ids=["sliding", "full"])
def test_from_hf_gemma2_equals_gemma2_attention(layer_idx):
    theirs = gemma2_attention(layer_idx)
    ours = SoftCappedAttention.from_hf_gemma2(theirs)
    assert (ours.window, ours.softcap, ours.scale) == (
        WINDOW if layer_idx == 0 else None, 2.0, 0.25)
    x = torch.randn(2, N, EMBED, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, expected_weights = run_gemma2(theirs, x)
        out, weights = ours(x, need_weights=True)
        without_weights, _ = ours(x)
        steps, _ = decode_in_chunks(ours, x, [4, 1, 1, 3])  # cache decoding
    torch.testing.assert_close(out, expected, **DOCUMENTED_FLOAT32)
    torch.testing.assert_close(weights, expected_weights, **DOCUMENTED_FLOAT32)
    torch.testing.assert_close(without_weights, out, rtol=0, atol=0)  # one path only
    torch.testing.assert_close(steps, out, **DOCUMENTED_FLOAT32)


def test_the_cap_changes_the_output():
    """The same weights without the cap (a cap of 1e6) give another output: the oracle
    comparison above checks the cap, not only the projections."""
    theirs = gemma2_attention(1)
    capped = SoftCappedAttention.from_hf_gemma2(theirs)
    loose = SoftCappedAttention(EMBED, HEADS, KV_HEADS, head_dim=HEAD_DIM, rope_base=10000.0,
                                softcap=1e6, scale=capped.scale)
    loose.load_state_dict(capped.state_dict())
    x = torch.randn(1, N, EMBED, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert not torch.allclose(capped(x)[0], loose.eval()(x)[0], atol=1e-2)


@pytest.mark.parametrize("window", [None, 3], ids=["full", "window3"])
def test_a_loose_cap_is_grouped_query_attention(window):
    """``softcap * tanh(s / softcap)`` is ``s`` up to ``s**3 / (3 softcap**2)``: with a cap of
    1e4 and the default scale the module equals its parent on the same weights."""
    torch.manual_seed(3)
    capped = SoftCappedAttention(EMBED, HEADS, KV_HEADS, softcap=1e4, rope_base=500.0,
                                 window=window, bias=True).eval()
    plain = GroupedQueryAttention(EMBED, HEADS, KV_HEADS, rope_base=500.0, window=window,
                                  bias=True).eval()
    plain.load_state_dict(capped.state_dict())
    assert capped.scale == pytest.approx(HEAD_DIM ** -0.5, rel=1e-15)
    x = torch.randn(2, 7, EMBED, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out, weights = capped(x, need_weights=True)
        expected, expected_weights = plain(x, need_weights=True)
    torch.testing.assert_close(out, expected, **TOL32)
    torch.testing.assert_close(weights, expected_weights, **TOL32)


def test_scores_stay_under_the_cap_and_rows_sum_to_one():
    """Huge queries: every capped score is within (-softcap, softcap), so no weight exceeds
    ``1 / (1 + (n_k - 1) exp(-2 softcap))``; rows still sum to 1."""
    torch.manual_seed(4)
    attn = SoftCappedAttention(EMBED, HEADS, KV_HEADS, softcap=1.0).eval()
    x = 100 * torch.randn(1, 6, EMBED, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        _, weights = attn(x, need_weights=True)
    n_k = torch.arange(1, 7, dtype=torch.float32)[:, None]  # keys seen by each query
    bound = 1 / (1 + (n_k - 1) * torch.exp(torch.tensor(-2.0)))
    assert (weights <= bound + TOL32["atol"]).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, HEADS, 6), **TOL32)


def test_a_query_with_nothing_to_attend_to_gets_zeros():
    torch.manual_seed(5)
    attn = SoftCappedAttention(EMBED, HEADS, KV_HEADS, bias=True).eval()
    x = torch.randn(2, 4, EMBED, generator=torch.Generator().manual_seed(5))
    padding = torch.tensor([[False, True, True, True], [True] * 4])[:, None, None]
    with torch.no_grad():
        out, weights = attn(x, attn_mask=padding, need_weights=True)
    assert not out.isnan().any() and (weights[0, :, 0] == 0).all()
    torch.testing.assert_close(out[0, 0], attn.out_proj.bias, rtol=0, atol=0)


def test_constructor_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"`softcap` must be a finite number > 0, got 0"):
        SoftCappedAttention(EMBED, HEADS, KV_HEADS, softcap=0)
    with pytest.raises(TypeError, match="`softcap` must be a number > 0, got str"):
        SoftCappedAttention(EMBED, HEADS, KV_HEADS, softcap="50")
    with pytest.raises(ValueError, match=r"`scale` must be a finite number > 0, got -1\.0"):
        SoftCappedAttention(EMBED, HEADS, KV_HEADS, scale=-1.0)
    with pytest.raises(TypeError, match="`scale` must be a number > 0, got bool"):
        SoftCappedAttention(EMBED, HEADS, KV_HEADS, scale=True)


def test_from_hf_gemma2_refuses_what_it_cannot_represent():
    with pytest.raises(TypeError, match="must be a transformers Gemma2Attention, got Linear"):
        SoftCappedAttention.from_hf_gemma2(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="attn_logit_softcapping=None"):
        SoftCappedAttention.from_hf_gemma2(gemma2_attention(0, attn_logit_softcapping=None))
    longrope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 4,
                "long_factor": [2.0] * 4, "original_max_position_embeddings": 4}
    with pytest.raises(ValueError, match="rope type 'longrope'"):
        SoftCappedAttention.from_hf_gemma2(gemma2_attention(0, rope_parameters=longrope,
                                                            max_position_embeddings=16))
    linear = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    assert SoftCappedAttention.from_hf_gemma2(
        gemma2_attention(0, rope_parameters=linear)).rope_scaling["factor"] == 2.0


def test_causal_lm_builds_it_and_its_cache_decodes_the_same():
    model = mhsa.CausalLM(31, EMBED, HEADS, 48, 2, num_kv_heads=KV_HEADS,
                          attention="soft_capped").eval()
    assert all(type(layer.attn) is SoftCappedAttention for layer in model.layers)
    ids = torch.randint(0, 31, (2, 9), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache()
        steps = torch.cat([model(ids[:, t:t + 1], cache=cache) for t in range(9)], dim=1)
    torch.testing.assert_close(steps, full, **DOCUMENTED_FLOAT32)
