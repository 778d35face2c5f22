"""mhsa: multi-head self-attention, from the attention table to the transformer.

Legend for every einops pattern and docstring: b batch, n tokens, h heads, d head_dim,
e embed_dim, i query positions, j key positions; h * d is qkv_dim (embed_dim by default);
g key/value heads (num_kv_heads) and r = h / g query heads per key/value head.
One mask convention across the package: boolean, True = may attend.

The package in layers, each importing only the ones below it (import-linter checks it):

- ``mhsa.course``: the chapters' helpers (figures, measurements, self-checks, answers);
- ``mhsa.models``: encoder-decoder, causal LM, vision transformer, BERT-style encoder,
  and decoding (``mhsa.models.generation``);
- ``mhsa.layers``: attention inside residual sublayers with norms and feed-forward nets;
- ``mhsa.attention``: the attention modules, one file per variant, behind one contract;
- ``mhsa.interop``: weights to and from torch and transformers (name mappings);
- ``mhsa.core``: the attention function, masks, rotary positions, the KV cache, checks.

This page's names are the ones the chapters teach. A name imported as itself
(``import X as X``) is importable as ``mhsa.X`` before a chapter teaches it, off ``__all__``.
"""

from mhsa.attention import Attention, GroupedQueryAttention, MultiHeadAttention, record_attention
from mhsa.attention.from_hf import attention_from_hf as attention_from_hf
from mhsa.attention.latent import LatentCache, MultiHeadLatentAttention
from mhsa.attention.qk_norm import QKNormAttention
from mhsa.attention.sinks import SinkAttention
from mhsa.attention.soft_capped import SoftCappedAttention
from mhsa.core.cache import KVCache
from mhsa.core.device import default_device
from mhsa.core.flash import FlashAttention2, flash_attention
from mhsa.core.functional import scaled_dot_product_attention
from mhsa.core.masks import (
    causal_mask,
    mask_from_additive,
    mask_from_torch_mha,
    mask_to_additive,
    mask_to_torch_mha,
    padding_mask,
    padding_mask_from_ids,
    sliding_window_mask,
)
from mhsa.core.patches import patchify, unpatchify
from mhsa.core.quantized_cache import QuantizedKVCache, quantize_symmetric
from mhsa.core.rotary import apply_rotary
from mhsa.core.sink_cache import SinkKVCache
from mhsa.layers import DecoderLayer, EncoderLayer, FeedForward, SwiGLU
from mhsa.models.causal_lm import CausalLM
from mhsa.models.encoder_decoder import (
    Decoder,
    Encoder,
    EncoderDecoder,
    TokenEmbedding,
    sinusoidal_positional_encoding,
)
from mhsa.models.vision import VisionTransformer

__all__ = [
    "Attention",
    "CausalLM",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderDecoder",
    "EncoderLayer",
    "FlashAttention2",
    "FeedForward",
    "GroupedQueryAttention",
    "KVCache",
    "LatentCache",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "QKNormAttention",
    "QuantizedKVCache",
    "SinkAttention",
    "SinkKVCache",
    "SoftCappedAttention",
    "SwiGLU",
    "TokenEmbedding",
    "VisionTransformer",
    "apply_rotary",
    "causal_mask",
    "default_device",
    "flash_attention",
    "mask_from_additive",
    "mask_from_torch_mha",
    "mask_to_additive",
    "mask_to_torch_mha",
    "padding_mask",
    "padding_mask_from_ids",
    "patchify",
    "quantize_symmetric",
    "record_attention",
    "scaled_dot_product_attention",
    "sinusoidal_positional_encoding",
    "sliding_window_mask",
    "unpatchify",
]
__version__ = "0.1.0"
