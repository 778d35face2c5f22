"""One mhsa attention module from one transformers attention module, by its class.

transformers is never imported: the module's class name picks the converter, which reads the
module's config and weights (``mhsa.interop``).
"""

from mhsa.attention.base import Attention
from mhsa.attention.grouped_query import GroupedQueryAttention
from mhsa.attention.latent import MultiHeadLatentAttention
from mhsa.attention.qk_norm import QKNormAttention
from mhsa.attention.sinks import SinkAttention
from mhsa.attention.soft_capped import SoftCappedAttention
from mhsa.interop.hf_attention_modules import copy_hf_attention_weights
from mhsa.interop.hf_llama import config_from_hf_llama_attention


def _grouped_query_from_hf(module) -> GroupedQueryAttention:
    weight = module.q_proj.weight
    ours = GroupedQueryAttention(**config_from_hf_llama_attention(module), device=weight.device,
                                 dtype=weight.dtype)
    copy_hf_attention_weights(ours, module)
    return ours.eval()


CONVERTERS = {
    "LlamaAttention": _grouped_query_from_hf,
    "MistralAttention": _grouped_query_from_hf,
    "Qwen3Attention": QKNormAttention.from_hf_qwen3,
    "DeepseekV3Attention": MultiHeadLatentAttention.from_hf,
    "GptOssAttention": SinkAttention.from_hf_gpt_oss,
    "Gemma2Attention": SoftCappedAttention.from_hf_gemma2,
}


def attention_from_hf(module) -> Attention:
    """The mhsa module that computes what a transformers attention module computes.

    ==========================  ===============================================
    transformers                mhsa
    ==========================  ===============================================
    ``LlamaAttention``          :class:`mhsa.GroupedQueryAttention`
    ``MistralAttention``        :class:`mhsa.GroupedQueryAttention`, its window
    ``Qwen3Attention``          ``mhsa.QKNormAttention`` (query/key norms)
    ``DeepseekV3Attention``     ``mhsa.MultiHeadLatentAttention``
    ``GptOssAttention``         ``mhsa.SinkAttention`` (learned sink logits)
    ``Gemma2Attention``         ``mhsa.SoftCappedAttention`` (capped scores)
    ==========================  ===============================================

    A sliding layer (``module.sliding_window`` set, or Mistral's config) gives a windowed
    module. The copy has the module's device and dtype, is in eval mode, and gives the
    same output on the same hidden states ``[batch, n, embed_dim]``, positions and causal
    (or windowed) mask (float32: within 1e-5, tested), with or without a cache from its
    ``new_cache()``.

    Args:
        module: one of the transformers classes above (``model.model.layers[k].self_attn``).

    Returns:
        the mhsa module, a subclass of :class:`mhsa.Attention`.

    Raises:
        TypeError: ``module`` is none of those classes.
        ValueError: a setting the mhsa module cannot represent (each converter's: a rope
            type mhsa does not scale, attention dropout, ...).

    Source: the modeling files of transformers (Llama, Mistral, Qwen3, DeepSeek-V3, gpt-oss,
    Gemma 2), read to match them; the papers in each module's docstring.
    """
    name = type(module).__name__
    if name not in CONVERTERS:
        raise TypeError(f"`module` must be a transformers {', '.join(CONVERTERS)}; got {name}")
    return CONVERTERS[name](module)
