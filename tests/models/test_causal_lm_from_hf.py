"""mhsa.CausalLM.from_hf: Llama, Mistral, Qwen3 and dense DeepSeek-V3 models of transformers.

Oracles: transformers' ``*ForCausalLM`` on tiny random configurations (test oracles only; mhsa
never imports transformers), with spread-out weights (:func:`references.spread_weights_`).
Tolerances as the issue states them: logits in float32 within 1e-4; greedy tokens exactly
equal, with and without the cache.
"""

import pytest
import torch

import mhsa
from mhsa import CausalLM

from references import hf_llama, spread_weights_

TOL = {"atol": 1e-4, "rtol": 1e-4}
VOCAB = 97


def hf_qwen3(*, tie=False, seed=0, **config):
    """A random transformers ``Qwen3ForCausalLM``: 2 layers, 4 query and 2 key/value heads of 8."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    kw = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 8, "rms_norm_eps": 1e-5, "tie_word_embeddings": tie,
          "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0},
          "bos_token_id": None, "eos_token_id": None, "pad_token_id": None, **config}
    torch.manual_seed(seed)
    return spread_weights_(Qwen3ForCausalLM(Qwen3Config(**kw)).eval())


def hf_deepseek(*, q_lora_rank=16, interleave=True, seed=0, **config):
    """A random transformers ``DeepseekV3ForCausalLM`` whose 2 layers are dense."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    kw = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48,
          "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 4, "q_lora_rank": q_lora_rank, "kv_lora_rank": 12,
          "qk_nope_head_dim": 8, "qk_rope_head_dim": 6, "v_head_dim": 10,
          "rope_interleave": interleave, "first_k_dense_replace": 2, "n_routed_experts": 4,
          "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "rms_norm_eps": 1e-5,
          "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0},
          "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": None,
          "pad_token_id": None, **config}
    torch.manual_seed(seed)
    return spread_weights_(DeepseekV3ForCausalLM(DeepseekV3Config(**kw)).eval())


def yarn(mscale_all_dim):
    """DeepSeek-V3's YaRN (mscale = mscale_all_dim = 1.0 in its released config) over 8 trained
    positions: the tests' 12-token prompts and 18-token generations run past them."""
    return {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0,
                                "original_max_position_embeddings": 8, "beta_fast": 32.0,
                                "beta_slow": 1.0, "mscale": 1.0,
                                "mscale_all_dim": mscale_all_dim},
            "max_position_embeddings": 32}


MODELS = {
    "llama": lambda: hf_llama("llama", vocab=VOCAB),
    "mistral": lambda: hf_llama("mistral", vocab=VOCAB, window=5),
    "qwen3": hf_qwen3,
    "qwen3-tied": lambda: hf_qwen3(tie=True),
    "deepseek_v3": hf_deepseek,
    "deepseek_v3-no-q-lora": lambda: hf_deepseek(q_lora_rank=None, interleave=False),
    "deepseek_v3-yarn": lambda: hf_deepseek(**yarn(1.0)),
    "deepseek_v3-yarn-mscales-differ": lambda: hf_deepseek(q_lora_rank=None, **yarn(0.5)),
}
ATTENTION = {"llama": mhsa.GroupedQueryAttention, "mistral": mhsa.GroupedQueryAttention,
             "qwen3": mhsa.QKNormAttention, "qwen3-tied": mhsa.QKNormAttention,
             "deepseek_v3": mhsa.MultiHeadLatentAttention,
             "deepseek_v3-no-q-lora": mhsa.MultiHeadLatentAttention,
             "deepseek_v3-yarn": mhsa.MultiHeadLatentAttention,
             "deepseek_v3-yarn-mscales-differ": mhsa.MultiHeadLatentAttention}


@pytest.fixture(scope="module", params=list(MODELS))
def pair(request):
    theirs = MODELS[request.param]()
    return request.param, CausalLM.from_hf(theirs), theirs


def test_logits_equal_transformers(pair):
    name, ours, theirs = pair
    assert type(ours.layers[0].attn) is ATTENTION[name] and not ours.training
    ids = torch.randint(VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), theirs(ids).logits, **TOL)


@pytest.mark.parametrize("absorbed", [False, True], ids=["plain", "absorbed"])
def test_cached_logits_equal_transformers(pair, absorbed):
    """Absorbed: the packed projections a decoding loop uses (the latent attention's
    absorbed form; the other variants' packed matrices)."""
    _, ours, theirs = pair
    ids = torch.randint(VOCAB, (2, 12), generator=torch.Generator().manual_seed(2))
    cache = ours.new_cache()
    with torch.no_grad():
        ours.pack_projections(absorbed)
        try:
            steps = [ours(ids[:, :7], cache=cache)] + [ours(ids[:, t:t + 1], cache=cache)
                                                       for t in range(7, 12)]
        finally:
            ours.pack_projections(False)
        torch.testing.assert_close(torch.cat(steps, dim=1), theirs(ids).logits, **TOL)


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_tokens_equal_transformers_generate(pair, use_cache):
    _, ours, theirs = pair
    ids = torch.randint(VOCAB, (2, 6), generator=torch.Generator().manual_seed(3))
    expected = theirs.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=12, min_new_tokens=12, use_cache=use_cache)
    got = ours.generate(ids, 12, use_cache=use_cache)
    assert torch.equal(got, expected)
    assert len(set(got[:, 6:].flatten().tolist())) > 1  # not one token repeated: can fail


def test_qwen3_norm_epsilon_is_copied():
    ours = CausalLM.from_hf(hf_qwen3(rms_norm_eps=1e-3))
    assert ours.layers[1].attn.q_norm.eps == ours.layers[1].attn.k_norm.eps == 1e-3


def test_query_key_norms_take_the_models_epsilon():
    ours = CausalLM(50, 16, 4, 32, 2, attention="qk_norm", norm_eps=1e-3)
    assert ours.layers[1].attn.q_norm.eps == ours.layers[1].attn.k_norm.eps == 1e-3


def test_mixture_of_experts_layers_are_refused():
    with pytest.raises(ValueError, match=r"mixture-of-experts layers \(1 of 2, from "
                                         r"first_k_dense_replace=1\)"):
        CausalLM.from_hf(hf_deepseek(first_k_dense_replace=1))


@pytest.mark.parametrize("make, match", [
    (lambda: hf_qwen3(attention_bias=True), "attention_bias=True"),
    (lambda: hf_qwen3(use_sliding_window=True, sliding_window=4, max_window_layers=1),
     "sliding-window layers among full-attention layers"),
    (lambda: hf_deepseek(rope_parameters={"rope_type": "longrope", "rope_theta": 1000.0,
                                          "short_factor": [1.0], "long_factor": [1.0]}),
     "rope type 'longrope'"),
])
def test_what_cannot_be_represented_is_refused(make, match):
    with pytest.raises(ValueError, match=match):
        CausalLM.from_hf(make())


def test_deepseek_v3_yarn_scales_the_softmax_of_every_layer():
    theirs = hf_deepseek(**yarn(0.5))
    ours = CausalLM.from_hf(theirs)
    for layer, mine in zip(theirs.model.layers, ours.layers):
        assert mine.attn.scale == pytest.approx(layer.self_attn.scaling, rel=1e-12)
        assert mine.attn.rope_scaling["mscale_all_dim"] == 0.5


def test_deepseek_v3_dynamic_ntk_logits_equal_transformers():
    """Dynamic NTK past max_position_embeddings (8): the angles of each call's length, not
    those of a table kept for all positions."""
    theirs = hf_deepseek(rope_parameters={"rope_type": "dynamic", "rope_theta": 1000.0,
                                          "factor": 2.0}, max_position_embeddings=8)
    ours = CausalLM.from_hf(theirs)
    assert ours.layers[0].attn.rope_scaling["rope_type"] == "dynamic"
    ids = torch.randint(VOCAB, (2, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), theirs(ids).logits, **TOL)


def test_other_models_are_refused():
    with pytest.raises(TypeError, match="must be a transformers LlamaForCausalLM, "
                                        "MistralForCausalLM, Qwen3ForCausalLM, "
                                        "DeepseekV3ForCausalLM; got Linear"):
        CausalLM.from_hf(torch.nn.Linear(2, 2))
