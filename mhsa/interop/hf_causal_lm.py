"""Reading a transformers causal LM of the Llama family: Llama, Mistral, Qwen3, DeepSeek-V3.

transformers is never imported here: the functions read the model object they are given
(its class name, ``config`` and submodules), so ``mhsa`` does not depend on transformers.
The four families share one layout (token embedding, pre-norm layers of attention and a
SwiGLU network, final norm, ``lm_head``); they differ in the attention module:

- Llama, Mistral: grouped-query attention (Mistral with a sliding window);
- Qwen3: grouped-query attention with an RMSNorm of each head's queries and keys;
- DeepSeek-V3: multi-head latent attention (only the dense layers; mixture-of-experts layers
  are refused).
"""

from mhsa.interop.hf_deepseek import config_from_hf_deepseek_attention, hf_deepseek_attention_pairs
from mhsa.interop.hf_llama import _check_representable, config_from_hf_llama, rope_from_hf
from mhsa.interop.weights import copy_weights

FAMILIES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
            "Qwen3ForCausalLM": "qwen3", "DeepseekV3ForCausalLM": "deepseek_v3"}


def family_of(model) -> str:
    """``"llama"``, ``"mistral"``, ``"qwen3"`` or ``"deepseek_v3"``: ``model``'s family.

    Raises:
        TypeError: ``model`` is none of ``LlamaForCausalLM``, ``MistralForCausalLM``,
            ``Qwen3ForCausalLM``, ``DeepseekV3ForCausalLM``.
    """
    name = type(model).__name__
    family = FAMILIES.get(name)
    if family is None or getattr(getattr(model, "config", None), "model_type", None) != family:
        raise TypeError(f"`model` must be a transformers {', '.join(FAMILIES)}; got {name}")
    return family


def config_from_hf(model) -> dict:
    """Keyword arguments of :class:`mhsa.CausalLM` for ``model``, and what its attention needs.

    Returns:
        ``config_from_hf_llama``'s keys for Llama and Mistral; for Qwen3 the same with
        ``attention="qk_norm"``; for DeepSeek-V3 the sizes, ``norm_eps`` and
        ``tie_embeddings``, with ``"latent"`` holding the keyword arguments of
        :class:`mhsa.MultiHeadLatentAttention` (the model builds one per layer).

    Raises:
        TypeError: as :func:`family_of`.
        ValueError: a setting :class:`mhsa.CausalLM` cannot represent: attention or MLP
            biases, an activation other than SiLU, attention dropout, a rope type mhsa
            does not scale (``mhsa.interop.hf_llama.rope_from_hf``), Qwen3 with sliding
            layers among full ones, DeepSeek-V3 with mixture-of-experts layers (its rope
            scaling as :func:`mhsa.interop.hf_deepseek.config_from_hf_deepseek_attention`
            reads it).
    """
    family = family_of(model)
    if family in ("llama", "mistral"):
        return config_from_hf_llama(model)
    config = model.config
    common = {"vocab_size": config.vocab_size, "embed_dim": config.hidden_size,
              "num_heads": config.num_attention_heads, "ff_dim": config.intermediate_size,
              "num_layers": config.num_hidden_layers, "norm_eps": config.rms_norm_eps,
              "tie_embeddings": bool(config.tie_word_embeddings)}
    if family == "qwen3":
        _check_representable(config)
        layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
        if len(layer_types) > 1:
            raise ValueError("`model` has sliding-window layers among full-attention layers "
                             f"({sorted(layer_types)}): mhsa.CausalLM uses one window for every "
                             "layer")
        head_dim = getattr(config, "head_dim", None) or \
            config.hidden_size // config.num_attention_heads
        rope_base, rope_scaling = rope_from_hf(config)
        return {**common, "num_kv_heads": config.num_key_value_heads,
                "qkv_dim": config.num_attention_heads * head_dim, "rope_base": rope_base,
                "rope_scaling": rope_scaling, "attention": "qk_norm",
                "window": config.sliding_window if layer_types == {"sliding_attention"}
                else None}
    moe = [k for k in range(config.num_hidden_layers) if k >= config.first_k_dense_replace]
    if moe and getattr(config, "n_routed_experts", None):
        raise ValueError(f"`model` has mixture-of-experts layers ({len(moe)} of "
                         f"{config.num_hidden_layers}, from first_k_dense_replace="
                         f"{config.first_k_dense_replace}): mhsa.CausalLM copies dense layers "
                         "only")
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        raise ValueError("`model` has an MLP other than SwiGLU without biases: "
                         "mhsa.CausalLM cannot represent it")
    latent = config_from_hf_deepseek_attention(model.model.layers[0].self_attn)
    return {**common, "latent": latent}


def copy_hf_weights(ours, model) -> None:
    """Copy every weight of ``model`` into ``ours``, a :class:`mhsa.CausalLM` built from
    :func:`config_from_hf`; the norms' epsilons of Qwen3's and DeepSeek's attention too.

    Raises:
        ValueError: a name or a shape that differs (``ours`` built for another model).
    """
    family = family_of(model)
    theirs = model.model
    pairs = [("embed.weight", theirs.embed_tokens.weight), ("norm.weight", theirs.norm.weight)]
    if not ours.tie_embeddings:
        pairs.append(("lm_head.weight", model.lm_head.weight))
    if len(theirs.layers) != len(ours.layers):
        raise ValueError(f"{type(model).__name__} has {len(theirs.layers)} layers, the copy "
                         f"{len(ours.layers)}")
    names = {"norm1": "input_layernorm", "norm2": "post_attention_layernorm",
             "feed_forward.gate_proj": "mlp.gate_proj", "feed_forward.up_proj": "mlp.up_proj",
             "feed_forward.down_proj": "mlp.down_proj"}
    if family != "deepseek_v3":
        names |= {"attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
                  "attn.v_proj": "self_attn.v_proj", "attn.out_proj": "self_attn.o_proj"}
    if family == "qwen3":
        names |= {"attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm"}
    for k, (layer, mine) in enumerate(zip(theirs.layers, ours.layers)):
        pairs += [(f"layers.{k}.{ours_name}.weight", layer.get_submodule(their).weight)
                  for ours_name, their in names.items()]
        if family == "qwen3":
            mine.attn.q_norm.eps = layer.self_attn.q_norm.variance_epsilon
            mine.attn.k_norm.eps = layer.self_attn.k_norm.variance_epsilon
        if family == "deepseek_v3":
            pairs += hf_deepseek_attention_pairs(layer.self_attn, prefix=f"layers.{k}.attn.")
            mine.attn.kv_a_norm.eps = layer.self_attn.kv_a_layernorm.variance_epsilon
            if mine.attn.q_a_norm is not None:
                mine.attn.q_a_norm.eps = layer.self_attn.q_a_layernorm.variance_epsilon
    copy_weights(ours, pairs, source=type(model).__name__)
