"""mhsa.attention_from_hf: one mhsa module per transformers attention module, same outputs.

Oracles: transformers' Llama, Mistral, Qwen3, DeepSeek-V3, gpt-oss and Gemma 2 models on tiny
random configurations (test oracles only: mhsa never imports transformers). A forward hook
records what each layer's attention module receives and returns inside the model's own
forward pass (its rotary angles, its causal or sliding-window mask), and the mhsa copy reads
the same hidden states at the same positions. Tolerance: float32 within 1e-5, as the issue
states it.
"""

import pytest
import torch

import mhsa

from references import spread_weights_

TOL = {"atol": 1e-5, "rtol": 1e-5}
N, WINDOW = 10, 4  # the sequences run past the window
COMMON = {"vocab_size": 61, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
          "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
          "attn_implementation": "eager"}


def build(kind, rope=None, **config):
    """A tiny random model of ``kind``; ``rope`` replaces the default ``rope_parameters`` of
    the kinds that read them, ``config`` adds settings."""
    import transformers as tf

    rope = rope or {"rope_type": "default", "rope_theta": 1000.0}
    configs = {
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM, {"rope_parameters": rope}),
        "mistral": (tf.MistralConfig, tf.MistralForCausalLM,
                    {"rope_parameters": rope, "sliding_window": WINDOW}),
        "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM,
                  {"rope_parameters": rope, "use_sliding_window": True,
                   "sliding_window": WINDOW, "max_window_layers": 1}),
        "deepseek_v3": (tf.DeepseekV3Config, tf.DeepseekV3ForCausalLM,
                        {"rope_parameters": rope, "num_key_value_heads": 4, "q_lora_rank": 16,
                         "kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 6,
                         "v_head_dim": 10, "first_k_dense_replace": 2, "n_routed_experts": 4,
                         "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
                         "moe_intermediate_size": 16}),
        "gpt_oss": (tf.GptOssConfig, tf.GptOssForCausalLM,
                    {"sliding_window": WINDOW, "num_local_experts": 4,
                     "num_experts_per_tok": 2,
                     "layer_types": ["sliding_attention", "full_attention"],
                     "rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                         "rope_theta": 1000.0, "beta_fast": 32.0,
                                         "beta_slow": 1.0, "truncate": False,
                                         "original_max_position_embeddings": 4}}),
        "gemma2": (tf.Gemma2Config, tf.Gemma2ForCausalLM,
                   {"rope_parameters": rope, "sliding_window": WINDOW,
                    "attn_logit_softcapping": 2.0, "query_pre_attn_scalar": 16}),
    }
    config_cls, model_cls, extra = configs[kind]
    torch.manual_seed(0)
    settings = {**COMMON, **extra, **config}
    if kind == "deepseek_v3":
        del settings["head_dim"]  # its config sets head_dim = qk_rope_head_dim
    model = spread_weights_(model_cls(config_cls(**settings)).eval())
    with torch.no_grad():  # gpt-oss: sinks and biases start empty or at zero
        for layer in model.model.layers:
            attn = layer.self_attn
            if getattr(attn, "sinks", None) is not None:
                attn.sinks.normal_()
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                bias = getattr(getattr(attn, proj, None), "bias", None)
                if bias is not None:
                    bias.normal_()
    return model


def recorded_attention(model, ids):
    """``[(module, hidden states in, output)]`` of every layer's attention in one forward."""
    records = []

    def hook(module, args, kwargs, output):
        x = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        records.append((module, x, output[0]))

    handles = [layer.self_attn.register_forward_hook(hook, with_kwargs=True)
               for layer in model.model.layers]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return records


EXPECTED = {  # kind: (mhsa class name, window of layer 0, of layer 1)
    "llama": ("GroupedQueryAttention", None, None),
    "mistral": ("GroupedQueryAttention", WINDOW, WINDOW),
    "qwen3": ("QKNormAttention", None, WINDOW),
    "deepseek_v3": ("MultiHeadLatentAttention", None, None),
    "gpt_oss": ("SinkAttention", WINDOW, None),
    "gemma2": ("SoftCappedAttention", WINDOW, None),
}


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_outputs_equal_the_modules_inside_their_model(kind):
    model = build(kind)
    ids = torch.randint(61, (2, N), generator=torch.Generator().manual_seed(1))
    records = recorded_attention(model, ids)
    assert len(records) == 2
    name, *windows = EXPECTED[kind]
    for (theirs, x, expected), window in zip(records, windows):
        ours = mhsa.attention_from_hf(theirs)
        assert type(ours).__name__ == name and not ours.training
        assert getattr(ours, "window", None) == window
        with torch.no_grad():
            torch.testing.assert_close(ours(x)[0], expected, **TOL)
            cache = ours.new_cache()  # and decoding: the prompt, then one token at a time
            steps = [ours(x[:, :6], cache=cache)[0]]
            steps += [ours(x[:, t:t + 1], cache=cache)[0] for t in range(6, N)]
        torch.testing.assert_close(torch.cat(steps, dim=1), expected, **TOL)


YARN = {"rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0, "beta_fast": 32.0,
        "beta_slow": 1.0, "original_max_position_embeddings": 16}
LONG = 24  # past original_max_position_embeddings


@pytest.mark.parametrize("mscales", [(1.0, 1.0), (1.0, 0.5)], ids=["deepseek_v3", "differ"])
def test_deepseek_v3_yarn_equals_the_module_inside_its_model(mscales):
    """DeepSeek-V3's YaRN (its released config has mscale = mscale_all_dim = 1.0, which
    leaves the angles' attention factor at 1 and scales the softmax; the second case moves
    the factor too), past the training length: full, cached and absorbed."""
    rope = {**YARN, "mscale": mscales[0], "mscale_all_dim": mscales[1]}
    model = build("deepseek_v3", rope, max_position_embeddings=64)
    ids = torch.randint(61, (2, LONG), generator=torch.Generator().manual_seed(1))
    records = recorded_attention(model, ids)
    for theirs, x, expected in records:
        ours = mhsa.attention_from_hf(theirs)
        assert ours.rope_scaling["mscale_all_dim"] == mscales[1]
        with torch.no_grad():
            for form in ("plain", "absorbed"):
                ours.pack_projections(form == "absorbed")
                torch.testing.assert_close(ours(x)[0], expected, **TOL)
                cache = ours.new_cache()
                steps = [ours(x[:, :18], cache=cache)[0]]
                steps += [ours(x[:, t:t + 1], cache=cache)[0] for t in range(18, LONG)]
                torch.testing.assert_close(torch.cat(steps, dim=1), expected, **TOL)


def test_other_modules_are_refused():
    with pytest.raises(TypeError, match="must be a transformers LlamaAttention, "
                                        "MistralAttention, Qwen3Attention, "
                                        "DeepseekV3Attention, GptOssAttention, "
                                        "Gemma2Attention; got MultiheadAttention"):
        mhsa.attention_from_hf(torch.nn.MultiheadAttention(8, 2))


def test_llama_attention_with_dropout_is_refused():
    model = build("llama")
    model.config.attention_dropout = 0.1
    with pytest.raises(ValueError, match="attention_dropout=0.1"):
        mhsa.attention_from_hf(model.model.layers[0].self_attn)
