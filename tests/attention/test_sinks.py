"""SinkAttention: gpt-oss's learned sink logit, equal to transformers' ``GptOssAttention``.

Oracle: ``GptOssAttention`` (eager) of a tiny random ``GptOssConfig`` (projections with
biases, plain rotary positions) with spread-out weights and sink logits drawn from N(0, 1),
both its sliding and its full layer, fed the same hidden states, its own rotary cos/sin and
the causal (or windowed) mask as an additive mask. Masks: boolean, True = may attend.
Tolerances: ``from_hf_gpt_oss`` promises float32 within 1e-5 (``DOCUMENTED_FLOAT32``); the
other comparisons are chains of sums (projection over 32, scores over 8, weighted values over
at most 9 keys, output projection over 32).
"""

import pytest
import torch

import mhsa
from mhsa import GroupedQueryAttention, SinkAttention

from references import decode_in_chunks, plain_explicit_attention, run_hf_attention, spread_weights_
from tolerances import DOCUMENTED_FLOAT32, worst_case

TOL32 = worst_case(torch.float32, 32 + 8 + 9 + 32)
EMBED, HEADS, KV_HEADS, HEAD_DIM, WINDOW, N = 32, 4, 2, 8, 3, 9


def gpt_oss_attention(layer_idx, seed=0, **kw):
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    settings = {"vocab_size": 97, "hidden_size": EMBED, "intermediate_size": 48,
                "num_hidden_layers": 2, "num_attention_heads": HEADS,
                "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
                "sliding_window": WINDOW, "attn_implementation": "eager",
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
                "layer_types": ["sliding_attention", "full_attention"], **kw}
    torch.manual_seed(seed)
    module = spread_weights_(GptOssAttention(GptOssConfig(**settings), layer_idx).eval())
    with torch.no_grad():  # torch.empty and zero biases at first: make them count
        module.sinks.normal_()
        for proj in (module.q_proj, module.k_proj, module.v_proj, module.o_proj):
            proj.bias.normal_()
    return module


def run_gpt_oss(module, x):
    """Their forward on ``x`` (see :func:`references.run_hf_attention`)."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

    return run_hf_attention(module, x, GptOssRotaryEmbedding)


@pytest.mark.parametrize("layer_idx", [0, 1], ids=["sliding", "full"])
def test_from_hf_gpt_oss_equals_gpt_oss_attention(layer_idx):
    theirs = gpt_oss_attention(layer_idx)
    ours = SinkAttention.from_hf_gpt_oss(theirs)
    assert ours.window == (WINDOW if layer_idx == 0 else None)
    assert ours.q_proj.bias is not None and torch.equal(ours.sinks, theirs.sinks)
    x = torch.randn(2, N, EMBED, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, expected_weights = run_gpt_oss(theirs, x)
        out, weights = ours(x, need_weights=True)
        without_weights, _ = ours(x)
        steps, _ = decode_in_chunks(ours, x, [4, 1, 1, 3])  # cache decoding
    torch.testing.assert_close(out, expected, **DOCUMENTED_FLOAT32)
    torch.testing.assert_close(weights, expected_weights, **DOCUMENTED_FLOAT32)
    torch.testing.assert_close(without_weights, out, rtol=0, atol=0)  # one path only
    torch.testing.assert_close(steps, out, **DOCUMENTED_FLOAT32)


def test_weights_are_the_plain_weights_less_the_sinks_share():
    """The sink column takes a share of each row and carries no value: the weights are the
    plain softmax weights times ``1 - share``, rows sum to ``1 - share < 1``, and a larger
    sink logit takes a larger share."""
    torch.manual_seed(2)
    attn = SinkAttention(EMBED, HEADS, HEADS, bias=True).eval()  # plain: equal heads
    with torch.no_grad():
        attn.sinks.copy_(torch.tensor([-1.0, 0.0, 1.0, 2.0]))
    x = torch.randn(2, 6, EMBED, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out, weights = attn(x, need_weights=True)
        _, plain = plain_explicit_attention(attn, x, attn_mask=mhsa.causal_mask(6))
    kept = weights.sum(-1, keepdim=True)  # [b, h, i, 1]: 1 - the sink's share
    assert (kept < 1).all() and (kept > 0).all()
    assert (kept[:, :-1] > kept[:, 1:]).all()  # larger sink logit, smaller rows
    torch.testing.assert_close(weights, plain * kept, **TOL32)
    v = attn.v_proj(x).unflatten(-1, (HEADS, HEAD_DIM)).transpose(1, 2)  # [b, h, j, d]
    expected = attn.out_proj((weights @ v).transpose(1, 2).flatten(2))
    torch.testing.assert_close(out, expected, **TOL32)


@pytest.mark.parametrize("window", [None, 3], ids=["full", "window3"])
def test_a_sink_of_minus_100_is_grouped_query_attention(window):
    """``exp(-100)`` is below float32's resolution next to 1: no share, the parent's output."""
    torch.manual_seed(3)
    attn = SinkAttention(EMBED, HEADS, KV_HEADS, rope_base=500.0, window=window,
                         bias=True).eval()
    with torch.no_grad():
        attn.sinks.fill_(-100.0)
    plain = GroupedQueryAttention(EMBED, HEADS, KV_HEADS, rope_base=500.0, window=window,
                                  bias=True).eval()
    plain.load_state_dict(attn.state_dict(), strict=False)
    x = torch.randn(2, 7, EMBED, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out, weights = attn(x, need_weights=True)
        expected, expected_weights = plain(x, need_weights=True)
    torch.testing.assert_close(out, expected, **TOL32)
    torch.testing.assert_close(weights, expected_weights, **TOL32)


def test_a_query_with_nothing_to_attend_to_gets_zeros():
    """Only the sink is left: zero weights, zero attention output, no NaN."""
    torch.manual_seed(5)
    attn = SinkAttention(EMBED, HEADS, KV_HEADS, bias=True).eval()
    x = torch.randn(2, 4, EMBED, generator=torch.Generator().manual_seed(5))
    padding = torch.tensor([[False, True, True, True], [True] * 4])[:, None, None]
    with torch.no_grad():
        out, weights = attn(x, attn_mask=padding, need_weights=True)
    assert not out.isnan().any() and (weights[0, :, 0] == 0).all()
    torch.testing.assert_close(out[0, 0], attn.out_proj.bias, rtol=0, atol=0)


def test_sinks_learn():
    attn = SinkAttention(EMBED, HEADS, KV_HEADS)
    assert attn.sinks.shape == (HEADS,) and (attn.sinks == 0).all()
    attn(torch.randn(1, 3, EMBED))[0].sum().backward()
    assert attn.sinks.grad is not None and attn.sinks.grad.abs().sum() > 0


def test_from_hf_gpt_oss_refuses_what_it_cannot_represent():
    with pytest.raises(TypeError, match="must be a transformers GptOssAttention, got Linear"):
        SinkAttention.from_hf_gpt_oss(torch.nn.Linear(2, 2))
    longrope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 4,
                "long_factor": [2.0] * 4, "original_max_position_embeddings": 4}
    with pytest.raises(ValueError, match="rope type 'longrope'"):
        SinkAttention.from_hf_gpt_oss(gpt_oss_attention(0, rope_parameters=longrope,
                                                        max_position_embeddings=16))


@pytest.mark.parametrize("layer_idx", [0, 1], ids=["sliding", "full"])
def test_from_hf_gpt_oss_copies_its_yarn_scaling(layer_idx):
    """gpt-oss ships YaRN (factor 32 over 4096 positions, truncate False); here factor 4 over
    4 positions, so that the 9 tokens run past the training length."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0, "beta_fast": 32.0,
            "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4}
    theirs = gpt_oss_attention(layer_idx, rope_parameters=yarn, max_position_embeddings=16)
    ours = SinkAttention.from_hf_gpt_oss(theirs)
    assert ours.rope_scaling["rope_type"] == "yarn"
    x = torch.randn(2, N, EMBED, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(x)[0], run_gpt_oss(theirs, x)[0], **DOCUMENTED_FLOAT32)


def test_causal_lm_builds_it_and_its_cache_decodes_the_same():
    model = mhsa.CausalLM(31, EMBED, HEADS, 48, 2, num_kv_heads=KV_HEADS, window=4,
                          attention="sinks").eval()
    assert all(type(layer.attn) is SinkAttention for layer in model.layers)
    ids = torch.randint(0, 31, (2, 9), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache()
        steps = torch.cat([model(ids[:, t:t + 1], cache=cache) for t in range(9)], dim=1)
    torch.testing.assert_close(steps, full, **DOCUMENTED_FLOAT32)


def test_record_attention_reads_the_weights_less_the_sink():
    """Recording goes through the contract: the recorded weights are the explicit path's."""
    attn = SinkAttention.from_hf_gpt_oss(gpt_oss_attention(1))
    x = torch.randn(1, 5, EMBED, generator=torch.Generator().manual_seed(7))
    with torch.no_grad(), mhsa.record_attention(attn) as recorded:
        attn(x)
    with torch.no_grad():
        _, weights = attn(x, need_weights=True)
    torch.testing.assert_close(recorded[""], weights, rtol=0, atol=0)
    assert (recorded[""].sum(-1) < 1).all()  # not the "rows sum to 1" of plain attention
