"""mhsa: multi-head self-attention, from the attention table to the transformer.

Legend for every einops pattern and docstring: b batch, n tokens, h heads, d head_dim,
e embed_dim, i query positions, j key positions; h * d is qkv_dim (embed_dim by default);
g key/value heads (num_kv_heads) and r = h / g query heads per key/value head.
One mask convention across the package: boolean, True = may attend.
"""

from . import teaching  # exercise self-checks: mhsa.teaching.check
from .attention import scaled_dot_product_attention
from .cache import KVCache
from .causal_lm import CausalLM
from .device import default_device
from .layers import DecoderLayer, EncoderLayer, FeedForward
from .masks import (
    causal_mask,
    mask_from_additive,
    mask_from_torch_mha,
    mask_to_additive,
    mask_to_torch_mha,
    padding_mask,
    padding_mask_from_ids,
    sliding_window_mask,
)
from .models import (
    Decoder,
    Encoder,
    EncoderDecoder,
    TokenEmbedding,
    sinusoidal_positional_encoding,
)
from .multihead import MultiHeadAttention
from .patches import patchify, unpatchify
from .recording import record_attention
from .rotary import apply_rotary
from .swiglu import SwiGLU
from .vision import VisionTransformer

__all__ = [
    "CausalLM",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderDecoder",
    "EncoderLayer",
    "FeedForward",
    "KVCache",
    "MultiHeadAttention",
    "SwiGLU",
    "TokenEmbedding",
    "VisionTransformer",
    "apply_rotary",
    "causal_mask",
    "default_device",
    "mask_from_additive",
    "mask_from_torch_mha",
    "mask_to_additive",
    "mask_to_torch_mha",
    "padding_mask",
    "padding_mask_from_ids",
    "patchify",
    "record_attention",
    "scaled_dot_product_attention",
    "sinusoidal_positional_encoding",
    "sliding_window_mask",
    "teaching",
    "unpatchify",
]
__version__ = "0.1.0"
