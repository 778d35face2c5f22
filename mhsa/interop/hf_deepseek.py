"""Reading transformers' DeepSeek-V3 attention (multi-head latent attention): sizes and weights.

transformers is never imported here: the functions read the module object they are given
(its ``config`` and submodules). :meth:`mhsa.MultiHeadLatentAttention.from_hf` builds the
copy with them (this layer may not import the attention modules).

Legend: h heads, d head_dim (of the part named), c kv_lora_rank, f the query projection's
input width.
"""

import torch

from mhsa.interop.hf_llama import _rope_parameters, rope_from_hf
from mhsa.interop.weights import copy_weights

SUPPORTED = ("DeepseekV3Attention",)


def config_from_hf_deepseek_attention(module) -> dict:
    """Keyword arguments of :class:`mhsa.MultiHeadLatentAttention` for a ``DeepseekV3Attention``.

    Args:
        module: a transformers ``DeepseekV3Attention`` (read through ``module.config``).

    Returns:
        ``{"embed_dim", "num_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
        "qk_rope_head_dim", "v_head_dim", "rope_base", "rope_scaling"}``. ``rope_scaling``
        is None for the ``"default"`` rope type, else the scaling of
        ``mhsa.interop.hf_llama.rope_from_hf`` (DeepSeek-V3's checkpoints: YaRN with
        ``factor``, ``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``,
        ``mscale`` and ``mscale_all_dim``).

    Raises:
        TypeError: ``module`` is not a ``DeepseekV3Attention``.
        ValueError: a setting the module cannot represent: a rope type mhsa does not scale
            (``rope_from_hf``: longrope, a ``partial_rotary_factor`` below 1), an
            ``mscale_all_dim`` with a rope type other than ``"yarn"`` (transformers would
            scale the softmax by it, mhsa reads it for YaRN only), ``attention_bias=True``,
            attention dropout, or ``num_key_value_heads`` other than
            ``num_attention_heads``.
    """
    name = type(module).__name__
    config = getattr(module, "config", None)
    if name not in SUPPORTED or config is None:
        raise TypeError(f"`module` must be a transformers DeepseekV3Attention, got {name}")
    try:  # refuses the rope types mhsa does not scale
        rope_base, rope_scaling = rope_from_hf(config)
    except ValueError as error:  # said of `model`: here the argument is `module`
        raise ValueError(str(error).replace("`model`", "`module`", 1)) from None
    rope = _rope_parameters(config)
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    problems = [
        (rope_type not in ("default", "yarn") and bool(rope.get("mscale_all_dim")),
         f"rope type {rope_type!r} with mscale_all_dim={rope.get('mscale_all_dim')} "
         "(DeepSeek's softmax temperature is read with 'yarn' only)"),
        (bool(getattr(config, "attention_bias", False)), "attention_bias=True (no biases)"),
        (bool(getattr(config, "attention_dropout", 0.0)),
         f"attention_dropout={getattr(config, 'attention_dropout', None)} (no dropout)"),
        (kv_heads != config.num_attention_heads,
         f"num_key_value_heads={kv_heads} (MLA decompresses keys and values for every one "
         f"of the {config.num_attention_heads} heads)"),
    ]
    for bad, what in problems:
        if bad:
            raise ValueError(f"`module` has {what}: mhsa.MultiHeadLatentAttention cannot "
                             "represent it")
    return {
        "embed_dim": config.hidden_size,
        "num_heads": config.num_attention_heads,
        "q_lora_rank": config.q_lora_rank,
        "kv_lora_rank": config.kv_lora_rank,
        "qk_nope_head_dim": config.qk_nope_head_dim,
        "qk_rope_head_dim": config.qk_rope_head_dim,
        "v_head_dim": config.v_head_dim,
        "rope_base": rope_base,
        "rope_scaling": rope_scaling,
    }


def copy_hf_deepseek_attention(ours, module) -> None:
    """Copy a ``DeepseekV3Attention``'s weights and its norms' epsilon into ``ours``, in place.

    ``ours`` is a :class:`mhsa.MultiHeadLatentAttention` built with
    :func:`config_from_hf_deepseek_attention`'s arguments; the names map one to one
    (:func:`hf_deepseek_attention_pairs`).

    Raises:
        ValueError: a shape that differs (``ours`` built for another configuration).
    """
    ours.kv_a_norm.eps = module.kv_a_layernorm.variance_epsilon
    if ours.q_a_norm is not None:
        ours.q_a_norm.eps = module.q_a_layernorm.variance_epsilon
    copy_weights(ours, hf_deepseek_attention_pairs(module), source=type(module).__name__)


def hf_deepseek_attention_pairs(module, prefix: str = "") -> list:
    """``(our name, their tensor, their name)`` pairs, our names after ``prefix``.

    ``q_proj``, ``q_a_proj``, ``q_b_proj`` and ``kv_b_proj`` keep their names;
    ``q_a_layernorm -> q_a_norm``, ``kv_a_proj_with_mqa -> kv_a_proj``,
    ``kv_a_layernorm -> kv_a_norm``, ``o_proj -> out_proj``. With ``config.rope_interleave``
    (DeepSeek's checkpoints; transformers' default) the rotary rows of the query and
    ``kv_a_proj_with_mqa`` weights are permuted, evens first then odds: their rotation of the
    interleaved pairs ``(2k, 2k + 1)`` becomes :func:`mhsa.apply_rotary`'s of the pairs
    ``(k, k + d/2)``, exactly (a permutation; the queries' and keys' dot products do not
    change, the cached rotary key comes out in the half layout). The pairs hold copies then.
    """
    config = module.config
    h, dn, dr = config.num_attention_heads, config.qk_nope_head_dim, config.qk_rope_head_dim
    c = config.kv_lora_rank
    interleaved = bool(getattr(config, "rope_interleave", True))
    half = torch.cat([torch.arange(0, dr, 2), torch.arange(1, dr, 2)])  # evens, then odds

    def queries(weight):  # [h * (dn + dr), f]: each head's rotary rows permuted
        if not interleaved:
            return weight
        rows = torch.cat([torch.arange(dn), dn + half])
        rows = (torch.arange(h)[:, None] * (dn + dr) + rows).flatten()
        return weight[rows.to(weight.device)]

    def latent_and_key(weight):  # [c + dr, e]: the rotary key's rows permuted
        if not interleaved:
            return weight
        return weight[torch.cat([torch.arange(c), c + half]).to(weight.device)]

    pairs = [("kv_a_proj.weight", latent_and_key(module.kv_a_proj_with_mqa.weight),
              "kv_a_proj_with_mqa.weight"),
             ("kv_a_norm.weight", module.kv_a_layernorm.weight, "kv_a_layernorm.weight"),
             ("kv_b_proj.weight", module.kv_b_proj.weight, "kv_b_proj.weight"),
             ("out_proj.weight", module.o_proj.weight, "o_proj.weight")]
    if config.q_lora_rank is None:
        pairs.append(("q_proj.weight", queries(module.q_proj.weight), "q_proj.weight"))
    else:
        pairs += [("q_a_proj.weight", module.q_a_proj.weight, "q_a_proj.weight"),
                  ("q_a_norm.weight", module.q_a_layernorm.weight, "q_a_layernorm.weight"),
                  ("q_b_proj.weight", queries(module.q_b_proj.weight), "q_b_proj.weight")]
    return [(prefix + ours, theirs, name) for ours, theirs, name in pairs]
