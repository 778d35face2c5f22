"""Reading one transformers attention module (Gemma 2's, gpt-oss's): its settings and weights.

transformers is never imported here: the functions read the module they are given (its
``config``, ``sliding_window`` and projections). The attention classes build themselves
from what these return (``mhsa.attention.soft_capped``, ``mhsa.attention.sinks``).
"""

from mhsa.interop.hf_llama import attention_config, rope_from_hf
from mhsa.interop.weights import copy_weights

_PROJECTIONS = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj",
                "out_proj": "o_proj"}  # ours: theirs


def config_from_hf_gemma2_attention(module) -> dict:
    """Keyword arguments of :class:`mhsa.attention.soft_capped.SoftCappedAttention` for a
    transformers ``Gemma2Attention``.

    Returns:
        ``{"embed_dim", "num_heads", "num_kv_heads", "head_dim", "rope_base",
        "rope_scaling", "window", "bias", "dropout", "softcap", "scale"}``: ``window`` is the module's
        ``sliding_window`` (None on a full layer), ``softcap`` its config's
        ``attn_logit_softcapping``, ``scale`` its ``query_pre_attn_scalar ** -0.5``.

    Raises:
        TypeError: ``module`` is not a ``Gemma2Attention``.
        ValueError: a rope type mhsa does not scale
            (``mhsa.interop.hf_llama.rope_from_hf``), ``attn_logit_softcapping=None`` or bidirectional
            attention (``use_bidirectional_attention=True``).
    """
    config = _config_of(module, "Gemma2Attention", "gemma2")
    _refuse(config, [
        (config.attn_logit_softcapping is None,
         "attn_logit_softcapping=None (no cap: use mhsa.GroupedQueryAttention)"),
        (bool(getattr(config, "use_bidirectional_attention", False)),
         "use_bidirectional_attention=True (the module is causal)"),
    ])
    return {**_common(module, config), "softcap": float(config.attn_logit_softcapping),
            "scale": float(module.scaling)}


def config_from_hf_gpt_oss_attention(module) -> dict:
    """Keyword arguments of :class:`mhsa.attention.sinks.SinkAttention` for a transformers
    ``GptOssAttention``.

    Returns:
        ``{"embed_dim", "num_heads", "num_kv_heads", "head_dim", "rope_base",
        "rope_scaling", "window", "bias", "dropout"}``: ``window`` is the module's ``sliding_window`` (None on a full
        layer); gpt-oss's projections have biases (``attention_bias=True``).

    Raises:
        TypeError: ``module`` is not a ``GptOssAttention``.
        ValueError: a rope type mhsa does not scale (``mhsa.interop.hf_llama.rope_from_hf``;
            gpt-oss ships YaRN, which it does).
    """
    config = _config_of(module, "GptOssAttention", "gpt_oss")
    _refuse(config, [])
    return _common(module, config)


def copy_hf_attention_weights(ours, module) -> None:
    """Copy ``module``'s ``{q,k,v,o}_proj`` weights (and biases) into ``ours``, in place;
    its ``sinks`` too when it has them. ``o_proj`` is our ``out_proj``.

    Raises:
        ValueError: a shape that differs, or a bias on one side only.
    """
    pairs = []
    for mine, theirs in _PROJECTIONS.items():
        proj = getattr(module, theirs)
        pairs.append((f"{mine}.weight", proj.weight, f"{theirs}.weight"))
        if proj.bias is not None:
            pairs.append((f"{mine}.bias", proj.bias, f"{theirs}.bias"))
    if getattr(module, "sinks", None) is not None:
        pairs.append(("sinks", module.sinks, "sinks"))
    if (ours.q_proj.bias is None) != (module.q_proj.bias is None):
        raise ValueError(f"{type(module).__name__} has bias={module.q_proj.bias is not None}, "
                         f"the copy bias={ours.q_proj.bias is not None}")
    copy_weights(ours, pairs, source=type(module).__name__)


def _config_of(module, class_name: str, model_type: str):
    config = getattr(module, "config", None)
    if type(module).__name__ != class_name or getattr(config, "model_type", None) != model_type:
        raise TypeError(f"`module` must be a transformers {class_name}, got "
                        f"{type(module).__name__}")
    return config


def _refuse(config, problems: list) -> None:
    rope_from_hf(config)  # a rope type or partial rotation that mhsa cannot represent
    for bad, what in problems:
        if bad:
            raise ValueError(f"`module` has {what}: the mhsa attention cannot represent it")


def _common(module, config) -> dict:
    return {**attention_config(module, window=module.sliding_window),
            "dropout": float(config.attention_dropout or 0.0)}
