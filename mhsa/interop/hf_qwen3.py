"""Reading a transformers Qwen3 attention module: its configuration and its weights.

transformers is never imported here: the functions read the module they are given (its
``config``, sizes and submodules).
"""

from mhsa.interop.hf_llama import attention_config
from mhsa.interop.weights import copy_weights


def qk_norm_config_from_hf_qwen3(module) -> dict:
    """Keyword arguments of ``mhsa.attention.qk_norm.QKNormAttention`` for a Qwen3 module.

    Args:
        module: a transformers ``Qwen3Attention`` (``model.model.layers[k].self_attn``).

    Returns:
        ``{"embed_dim", "num_heads", "num_kv_heads", "head_dim", "rope_base",
        "rope_scaling", "window", "bias", "norm_eps"}``: ``window`` is the module's
        ``sliding_window`` (None on full-attention layers), ``norm_eps`` the
        ``rms_norm_eps`` of its ``q_norm`` and ``k_norm``.

    Raises:
        TypeError: ``module`` is not a ``Qwen3Attention``.
        ValueError: a rope type or partial rotation that mhsa cannot represent
            (``mhsa.interop.hf_llama.rope_from_hf``), or attention dropout.
    """
    config = getattr(module, "config", None)
    if type(module).__name__ != "Qwen3Attention" or config is None:
        raise TypeError(f"`module` must be a transformers Qwen3Attention, got "
                        f"{type(module).__name__}")
    if getattr(config, "attention_dropout", 0.0):
        raise ValueError(f"`module` has attention_dropout={config.attention_dropout} (no "
                         "dropout): mhsa cannot represent it")
    return {**attention_config(module, window=module.sliding_window),
            "norm_eps": module.q_norm.variance_epsilon}


def copy_hf_qwen3_attention_weights(ours, module) -> None:
    """Copy a ``Qwen3Attention``'s weights into ``ours`` (in place): ``{q,k,v}_proj`` by name,
    ``o_proj -> out_proj``, ``q_norm`` and ``k_norm`` by name (biases when they exist)."""
    names = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "out_proj": "o_proj"}
    pairs = [(f"{mine}.{p}", getattr(module.get_submodule(theirs), p))
             for mine, theirs in names.items() for p in ("weight", "bias")
             if getattr(module.get_submodule(theirs), p) is not None]
    pairs += [("q_norm.weight", module.q_norm.weight), ("k_norm.weight", module.k_norm.weight)]
    copy_weights(ours, pairs, source=type(module).__name__)
