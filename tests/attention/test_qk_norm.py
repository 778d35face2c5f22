"""QKNormAttention: an RMSNorm of each head's queries and keys, equal to transformers' Qwen3.

Oracle: transformers' ``Qwen3Attention`` (a test oracle only; mhsa does not import
transformers) inside a tiny random ``Qwen3ForCausalLM`` with one full and one sliding-window
layer: each layer's attention module is fed the hidden states, positions and causal (or
windowed) mask of the model's own forward pass, recorded with a forward hook, and its
output compared with ours on the same hidden states. Masks: boolean, True = may attend.

Tolerances: the documented float32 bound of ``from_hf_qwen3`` (1e-5, DOCUMENTED_FLOAT32);
cached decoding against the full pass the same (GroupedQueryAttention's promise).
"""

import pytest
import torch

import mhsa
from mhsa import CausalLM, GroupedQueryAttention
from mhsa.attention import CAUSAL_ATTENTION
from mhsa.attention.qk_norm import QKNormAttention

from references import decode_in_chunks
from tolerances import DOCUMENTED_FLOAT32

EMBED, HEADS, KV_HEADS, HEAD_DIM = 32, 4, 2, 16


def qwen3(seed=0, **changes):
    """A random transformers Qwen3ForCausalLM, eval mode, sdpa: layer 0 full attention,
    layer 1 a sliding window of 3; norms' gains spread in [0.5, 1.5] (not the identity)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(**{
        "vocab_size": 50, "hidden_size": EMBED, "intermediate_size": 48,
        "num_hidden_layers": 2, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "rms_norm_eps": 1e-6,
        "use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1,
        "attn_implementation": "sdpa", "bos_token_id": None, "eos_token_id": None,
        "pad_token_id": None, **changes})
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            elif "bias" in name:
                p.normal_()
    return model


def attention_calls(model, ids):
    """``[(Qwen3Attention, hidden states in, output)]`` of each layer in ``model(ids)``."""
    calls = []

    def record(module, args, kwargs, output):
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        calls.append((module, hidden.detach(), output[0].detach()))

    hooks = [layer.self_attn.register_forward_hook(record, with_kwargs=True)
             for layer in model.model.layers]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for hook in hooks:
            hook.remove()
    return calls


CASES = {  # name: Qwen3Config changes
    "qwen3": {},
    "attention bias": {"attention_bias": True},
    "multi-query, eps 1e-5": {"num_key_value_heads": 1, "rms_norm_eps": 1e-5},
    "yarn scaling": {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 100.0,
                                         "original_max_position_embeddings": 4},
                     "max_position_embeddings": 16},
}


@pytest.mark.parametrize("case", list(CASES))
def test_equals_transformers_qwen3_attention_full_and_sliding(case):
    model = qwen3(**CASES[case])
    ids = torch.randint(50, (2, 11), generator=torch.Generator().manual_seed(1))
    calls = attention_calls(model, ids)
    assert [module.sliding_window for module, _, _ in calls] == [None, 3]
    for module, hidden, expected in calls:
        ours = QKNormAttention.from_hf_qwen3(module)
        assert ours.window == module.sliding_window and not ours.training
        with torch.no_grad():
            got, _ = ours(hidden)
            explicit, _ = ours(hidden, need_weights=True)
        torch.testing.assert_close(got, expected, **DOCUMENTED_FLOAT32)
        torch.testing.assert_close(explicit, expected, **DOCUMENTED_FLOAT32)


def test_the_norms_matter_for_the_comparison():
    """The test above can fail: without its norms (GroupedQueryAttention, same projections)
    the output is another one."""
    module, hidden, expected = attention_calls(qwen3(), torch.arange(9)[None])[0]
    ours = QKNormAttention.from_hf_qwen3(module)
    plain = GroupedQueryAttention(EMBED, HEADS, KV_HEADS, head_dim=HEAD_DIM,
                                  rope_base=ours.rope_base).eval()
    plain.load_state_dict(ours.state_dict(), strict=False)
    with torch.no_grad():
        assert not torch.allclose(plain(hidden)[0], expected, atol=1e-3)


def test_configuration_is_read_from_the_module():
    model = qwen3(attention_bias=True, rms_norm_eps=1e-5,
                  rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    module = model.model.layers[1].self_attn
    config = mhsa.interop.hf_qwen3.qk_norm_config_from_hf_qwen3(module)
    assert config == {"embed_dim": EMBED, "num_heads": HEADS, "num_kv_heads": KV_HEADS,
                      "head_dim": HEAD_DIM, "rope_base": 500.0, "rope_scaling": None,
                      "window": 3, "bias": True, "norm_eps": 1e-5}
    ours = QKNormAttention.from_hf_qwen3(module)
    assert torch.equal(ours.q_norm.weight, module.q_norm.weight)
    assert torch.equal(ours.k_norm.weight, module.k_norm.weight)
    assert torch.equal(ours.out_proj.bias, module.o_proj.bias)


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_cached_decoding_equals_the_full_pass(window, need_weights):
    torch.manual_seed(2)
    attn = QKNormAttention(EMBED, HEADS, KV_HEADS, rope_base=100.0, window=window).eval()
    with torch.no_grad():
        attn.q_norm.weight.uniform_(0.5, 1.5)
        attn.k_norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 10, EMBED, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full, _ = attn(x, need_weights=need_weights)
        steps, _ = decode_in_chunks(attn, x, [4, 1, 2, 3], need_weights=need_weights)
    torch.testing.assert_close(steps, full, **DOCUMENTED_FLOAT32)


def test_scores_do_not_grow_with_the_input():
    """What the norms are for: scaling the input by 100 leaves the attention weights as they
    were (each head's queries and keys are normed), while without the norms the scores grow
    10^4-fold and the softmax saturates to one key per query."""
    torch.manual_seed(3)
    normed = QKNormAttention(EMBED, HEADS, KV_HEADS, rope_base=100.0).eval()
    plain = GroupedQueryAttention(EMBED, HEADS, KV_HEADS, rope_base=100.0).eval()
    plain.load_state_dict(normed.state_dict(), strict=False)
    x = torch.randn(1, 12, EMBED, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        weights = {scale: normed(scale * x, need_weights=True)[1] for scale in (1.0, 100.0)}
        saturated = plain(100.0 * x, need_weights=True)[1]
    torch.testing.assert_close(weights[100.0], weights[1.0], **DOCUMENTED_FLOAT32)
    last_rows = (slice(None), slice(None), slice(4, None))  # queries that see 5+ keys
    assert weights[1.0][last_rows].amax(-1).mean() < 0.9  # spread over several keys
    assert saturated[last_rows].amax(-1).mean() > 0.99  # one key per query


def test_only_the_extension_point_is_overridden():
    assert QKNormAttention.forward is GroupedQueryAttention.forward
    assert QKNormAttention.rotary_angles is GroupedQueryAttention.rotary_angles
    assert QKNormAttention.new_cache is GroupedQueryAttention.new_cache
    assert QKNormAttention.adjust_queries_and_keys is not \
        GroupedQueryAttention.adjust_queries_and_keys


def test_causal_lm_builds_it_by_name_and_decodes_with_the_cache():
    assert CAUSAL_ATTENTION["qk_norm"] is QKNormAttention
    assert mhsa.QKNormAttention is QKNormAttention and "QKNormAttention" in mhsa.__all__
    torch.manual_seed(4)
    model = CausalLM(50, 32, 4, 48, 2, num_kv_heads=2, rope_base=100.0,
                     attention="qk_norm").eval()
    assert all(isinstance(layer.attn, QKNormAttention) for layer in model.layers)
    assert model.layers[0].attn.q_norm.weight.shape == (8,)
    ids = torch.randint(50, (2, 5), generator=torch.Generator().manual_seed(4))
    assert torch.equal(model.generate(ids, 10), model.generate(ids, 10, use_cache=False))


@pytest.mark.parametrize("norm_eps, error, match", [
    (0.0, ValueError, "`norm_eps` must be > 0, got 0.0"),
    ("1e-6", TypeError, "`norm_eps` must be a number, got str"),
    (True, TypeError, "`norm_eps` must be a number, got bool"),
])
def test_rejects_a_bad_norm_eps(norm_eps, error, match):
    with pytest.raises(error, match=match):
        QKNormAttention(EMBED, HEADS, KV_HEADS, norm_eps=norm_eps)


def test_from_hf_qwen3_refuses_other_modules_and_dropout():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention

    llama = LlamaAttention(LlamaConfig(hidden_size=32, num_attention_heads=4), layer_idx=0)
    with pytest.raises(TypeError, match="`module` must be a transformers Qwen3Attention, got "
                                        "LlamaAttention"):
        QKNormAttention.from_hf_qwen3(llama)
    module = qwen3(attention_dropout=0.1).model.layers[0].self_attn
    with pytest.raises(ValueError, match="attention_dropout=0.1 .*mhsa cannot represent it"):
        QKNormAttention.from_hf_qwen3(module)
