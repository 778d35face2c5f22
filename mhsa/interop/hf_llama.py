"""Reading a transformers Llama or Mistral causal LM: its configuration and its weights.

transformers is never imported here: the functions read the model object they are given
(its ``config`` and submodules), so ``mhsa`` does not depend on transformers.
"""


from mhsa.core.rotary import ROPE_SCALING_KEYS
from mhsa.interop.weights import copy_weights

SUPPORTED = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral"}
WINDOWED = {"mistral"}  # model types whose attention reads ``config.sliding_window``


def config_from_hf_llama(model) -> dict:
    """Keyword arguments of :class:`mhsa.CausalLM` for a transformers Llama or Mistral model.

    Args:
        model: a transformers ``LlamaForCausalLM`` or ``MistralForCausalLM``.

    Returns:
        ``{"vocab_size", "embed_dim", "num_heads", "ff_dim", "num_layers", "num_kv_heads",
        "qkv_dim", "rope_base", "rope_scaling", "window", "norm_eps", "tie_embeddings"}``.
        ``rope_scaling`` is None or the scaling of ``rope_from_hf``. ``window`` is
        Mistral's ``sliding_window`` (None when that is None); for Llama it is always None,
        even when its config carries a ``sliding_window`` key, which transformers' Llama
        ignores.

    Raises:
        TypeError: ``model`` is not one of those two classes.
        ValueError: a configuration :class:`mhsa.CausalLM` cannot represent (see
            :meth:`mhsa.CausalLM.from_hf_llama`).
    """
    name = type(model).__name__
    config = getattr(model, "config", None)
    if name not in SUPPORTED or getattr(config, "model_type", None) != SUPPORTED[name]:
        raise TypeError("`model` must be a transformers LlamaForCausalLM or "
                        f"MistralForCausalLM, got {name}")
    _check_representable(config)
    rope_base, rope_scaling = rope_from_hf(config)
    head_dim = getattr(config, "head_dim", None) or \
        config.hidden_size // config.num_attention_heads
    return {
        "vocab_size": config.vocab_size,
        "embed_dim": config.hidden_size,
        "num_heads": config.num_attention_heads,
        "ff_dim": config.intermediate_size,
        "num_layers": config.num_hidden_layers,
        "num_kv_heads": config.num_key_value_heads or config.num_attention_heads,
        "qkv_dim": config.num_attention_heads * head_dim,
        "rope_base": rope_base,
        "rope_scaling": rope_scaling,
        "window": getattr(config, "sliding_window", None) if config.model_type in WINDOWED
        else None,  # Llama ignores a sliding_window key in its config
        "norm_eps": config.rms_norm_eps,
        "tie_embeddings": bool(config.tie_word_embeddings),
    }


def _rope_parameters(config) -> dict:
    """transformers 5.x: ``config.rope_parameters``; 4.x: ``rope_theta`` and ``rope_scaling``."""
    params = getattr(config, "rope_parameters", None)
    if params is None:
        params = dict(getattr(config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    return params


def rope_from_hf(config) -> tuple:
    """``(rope_base, rope_scaling)`` of a transformers config, for mhsa's attention modules.

    ``rope_scaling`` is None for the ``"default"`` rope type; otherwise the keys of
    ``rope_parameters`` that its type reads (``mhsa.core.rotary.ROPE_SCALING_KEYS``), with
    what transformers supplies when they are absent: dynamic NTK's training length is
    ``config.max_position_embeddings`` (transformers' dynamic NTK reads no other), yarn's
    ``factor`` is ``max_position_embeddings / original_max_position_embeddings`` when
    None, and yarn's and llama3's ``original_max_position_embeddings`` defaults to
    ``max_position_embeddings``.

    Args:
        config: a transformers config with ``rope_parameters`` (5.x) or ``rope_theta`` and
            ``rope_scaling`` (4.x).

    Raises:
        ValueError: a rope type other than default, linear, dynamic, yarn and llama3
            (longrope, for instance), or ``partial_rotary_factor`` below 1.
    """
    rope = _rope_parameters(config)
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ROPE_SCALING_KEYS:
        raise ValueError(f"`model` has rope type {kind!r} (mhsa scales rotary positions with "
                         f"{sorted(ROPE_SCALING_KEYS)}): mhsa cannot represent it")
    if rope.get("partial_rotary_factor") not in (None, 1, 1.0):
        raise ValueError(f"`model` has partial_rotary_factor="
                         f"{rope['partial_rotary_factor']} (rotary positions on every "
                         "dimension only): mhsa cannot represent it")
    base = float(rope.get("rope_theta", 10000.0))
    if kind == "default":
        return base, None
    required, optional = ROPE_SCALING_KEYS[kind]
    scaling = {"rope_type": kind, **{key: rope[key] for key in required + optional
                                     if rope.get(key) is not None}}
    longest = getattr(config, "max_position_embeddings", None)
    if kind == "dynamic":
        scaling["original_max_position_embeddings"] = longest
    elif kind in ("yarn", "llama3"):
        scaling.setdefault("original_max_position_embeddings", longest)
    if kind == "yarn" and "factor" not in scaling:
        scaling["factor"] = longest / scaling["original_max_position_embeddings"]
    return base, scaling


def _check_representable(config) -> None:
    """``ValueError`` naming the first setting that :class:`mhsa.CausalLM` cannot represent."""
    rope_from_hf(config)  # a rope type or partial rotation that mhsa cannot represent
    problems = [
        (bool(getattr(config, "attention_bias", False)), "attention_bias=True (no biases)"),
        (bool(getattr(config, "mlp_bias", False)), "mlp_bias=True (no biases)"),
        (getattr(config, "hidden_act", "silu") != "silu",
         f"hidden_act={getattr(config, 'hidden_act', None)!r} (SwiGLU uses 'silu')"),
        (bool(getattr(config, "attention_dropout", 0.0)),
         f"attention_dropout={getattr(config, 'attention_dropout', None)} (no dropout)"),
    ]
    for bad, what in problems:
        if bad:
            raise ValueError(f"`model` has {what}: mhsa.CausalLM cannot represent it")


def copy_hf_llama_weights(ours, model) -> None:
    """Copy every weight of a transformers Llama/Mistral causal LM into ``ours`` (in place).

    ``ours`` is a :class:`mhsa.CausalLM` built with :func:`config_from_hf_llama`'s
    arguments; the names map one to one (:func:`hf_llama_pairs`).
    """
    copy_weights(ours, hf_llama_pairs(model, len(ours.layers), ours.tie_embeddings),
                 source=type(model).__name__)


def hf_llama_pairs(model, num_layers: int, tie_embeddings: bool) -> list:
    """``(our name, their tensor)`` pairs: ``embed_tokens -> embed``,
    ``input_layernorm -> norm1``, ``self_attn.{q,k,v}_proj -> attn.{q,k,v}_proj``,
    ``o_proj -> attn.out_proj``, ``post_attention_layernorm -> norm2``,
    ``mlp -> feed_forward`` (same ``gate/up/down_proj`` names), ``norm``, ``lm_head``."""
    theirs = model.model
    pairs = [("embed.weight", theirs.embed_tokens.weight), ("norm.weight", theirs.norm.weight)]
    if not tie_embeddings:
        pairs.append(("lm_head.weight", model.lm_head.weight))
    if len(theirs.layers) != num_layers:
        raise ValueError(f"{type(model).__name__} has {len(theirs.layers)} layers, the copy "
                         f"{num_layers}")
    names = {"norm1": "input_layernorm", "attn.q_proj": "self_attn.q_proj",
             "attn.k_proj": "self_attn.k_proj", "attn.v_proj": "self_attn.v_proj",
             "attn.out_proj": "self_attn.o_proj", "norm2": "post_attention_layernorm",
             "feed_forward.gate_proj": "mlp.gate_proj", "feed_forward.up_proj": "mlp.up_proj",
             "feed_forward.down_proj": "mlp.down_proj"}
    for k, layer in enumerate(theirs.layers):
        pairs += [(f"layers.{k}.{mine}.weight", layer.get_submodule(their).weight)
                  for mine, their in names.items()]
    return pairs


ATTENTION_MODULES = {"LlamaAttention": "llama", "MistralAttention": "mistral"}


def config_from_hf_llama_attention(module) -> dict:
    """Keyword arguments of :class:`mhsa.GroupedQueryAttention` for one Llama/Mistral layer.

    Args:
        module: a transformers ``LlamaAttention`` or ``MistralAttention``
            (``model.model.layers[k].self_attn``).

    Returns:
        ``{"embed_dim", "num_heads", "num_kv_heads", "head_dim", "rope_base",
        "rope_scaling", "window", "bias"}``; ``window`` is Mistral's ``sliding_window``
        (None for Llama).

    Raises:
        TypeError: ``module`` is neither class.
        ValueError: attention dropout, or a rope type mhsa does not scale
            (:func:`rope_from_hf`).
    """
    name = type(module).__name__
    config = getattr(module, "config", None)
    if getattr(config, "model_type", None) != ATTENTION_MODULES.get(name, ""):
        raise TypeError(f"`module` must be a transformers LlamaAttention or MistralAttention, "
                        f"got {name}")
    if getattr(config, "attention_dropout", 0.0):
        raise ValueError(f"`module` has attention_dropout={config.attention_dropout} (no "
                         "dropout): mhsa cannot represent it")
    window = getattr(config, "sliding_window", None) if config.model_type in WINDOWED else None
    return attention_config(module, window=window)


def attention_config(module, *, window) -> dict:
    """The keyword arguments of :class:`mhsa.GroupedQueryAttention` that every transformers
    attention module of the Llama family carries: ``{"embed_dim", "num_heads",
    "num_kv_heads", "head_dim", "rope_base", "rope_scaling", "window", "bias"}``, read from
    ``module.config``, ``module.head_dim`` and ``module.q_proj``; ``window`` as given.

    Raises:
        ValueError: a rope type mhsa does not scale (:func:`rope_from_hf`).
    """
    config = module.config
    rope_base, rope_scaling = rope_from_hf(config)
    return {
        "embed_dim": config.hidden_size,
        "num_heads": config.num_attention_heads,
        "num_kv_heads": config.num_key_value_heads or config.num_attention_heads,
        "head_dim": module.head_dim,
        "rope_base": rope_base,
        "rope_scaling": rope_scaling,
        "window": window,
        "bias": module.q_proj.bias is not None,
    }
