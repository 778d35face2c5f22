"""Attention modules: one contract (:class:`Attention`), one file per variant.

- ``base.py``: the contract that layers, recording, caches and decoding rely on;
- ``multihead.py``: :class:`MultiHeadAttention`, the module of chapters 3-9;
- ``grouped_query.py``: :class:`GroupedQueryAttention`, causal self-attention of
  decoder-only models (chapters 10-11);
- ``latent.py``: :class:`MultiHeadLatentAttention`, DeepSeek's latent attention, and its
  cache of latents;
- ``soft_capped.py``: :class:`SoftCappedAttention`, Gemma 2's capped scores;
- ``sinks.py``: :class:`SinkAttention`, gpt-oss's learned sink logit per head;
- ``qk_norm.py``: :class:`QKNormAttention`, with an RMSNorm of each head's queries and keys
  (Qwen3, Gemma 3);
- ``recording.py``: :func:`record_attention`, the weights of every head, for any variant.

A new variant is a new file here with a subclass of :class:`Attention`, its test file in
``tests/attention/``, and one line in :data:`CAUSAL_ATTENTION` when
:class:`mhsa.CausalLM` should be able to build it. It touches no other variant.
"""

from mhsa.attention.base import Attention
from mhsa.attention.grouped_query import GroupedQueryAttention
from mhsa.attention.latent import MultiHeadLatentAttention
from mhsa.attention.multihead import MultiHeadAttention
from mhsa.attention.qk_norm import QKNormAttention
from mhsa.attention.recording import record_attention
from mhsa.attention.sinks import SinkAttention
from mhsa.attention.soft_capped import SoftCappedAttention

# The selector: the causal self-attention variants that mhsa.CausalLM(attention=name) builds,
# each called as cls(embed_dim, num_heads, num_kv_heads, head_dim=..., rope_base=...,
# window=..., bias=False, device=..., dtype=...), plus rope_scaling=... (a dict, see
# mhsa.core.rotary.check_rope_scaling) when the model scales its rotary positions, with
# GroupedQueryAttention's forward and a rotary_angles(positions, start=, n=) method (None
# without positions).
CAUSAL_ATTENTION = {
    "grouped_query": GroupedQueryAttention,
    "soft_capped": SoftCappedAttention,  # softcap=50.0, scale=1/sqrt(head_dim)
    "sinks": SinkAttention,  # sink logits start at 0
    "qk_norm": QKNormAttention,
}

__all__ = ["CAUSAL_ATTENTION", "Attention", "GroupedQueryAttention", "MultiHeadAttention",
           "MultiHeadLatentAttention", "QKNormAttention", "SinkAttention",
           "SoftCappedAttention", "record_attention"]
