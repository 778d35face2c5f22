"""mhsa: multi-head self-attention, from the attention table to the transformer.

Legend for every einops pattern and docstring: b batch, n tokens, h heads, d head_dim,
e embed_dim = h * d, i query positions, j key positions.
One mask convention across the package: boolean, True = may attend.
"""

from .attention import scaled_dot_product_attention
from .device import default_device
from .masks import (
    causal_mask,
    mask_from_additive,
    mask_from_torch_mha,
    mask_to_additive,
    mask_to_torch_mha,
    padding_mask,
    padding_mask_from_ids,
)

__all__ = [
    "causal_mask",
    "default_device",
    "mask_from_additive",
    "mask_from_torch_mha",
    "mask_to_additive",
    "mask_to_torch_mha",
    "padding_mask",
    "padding_mask_from_ids",
    "scaled_dot_product_attention",
]
__version__ = "0.1.0"
