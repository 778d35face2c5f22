"""Layers: attention inside residual sublayers with norms and a feed-forward network.

- ``transformer.py``: :class:`EncoderLayer`, :class:`DecoderLayer` and :class:`FeedForward`
  of the original transformer (chapters 5-6), post-norm or pre-norm;
- ``swiglu.py``: :class:`SwiGLU`, the gated feed-forward network of Llama;
- ``decoder_only.py``: :class:`CausalLMLayer`, the pre-norm layer of decoder-only models.
"""

from mhsa.layers.decoder_only import CausalLMLayer
from mhsa.layers.swiglu import SwiGLU
from mhsa.layers.transformer import DecoderLayer, EncoderLayer, FeedForward

__all__ = ["CausalLMLayer", "DecoderLayer", "EncoderLayer", "FeedForward", "SwiGLU"]
