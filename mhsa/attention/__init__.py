"""Attention modules: one contract (:class:`Attention`), one file per variant.

- ``base.py``: the contract that layers, recording, caches and decoding rely on;
- ``multihead.py``: :class:`MultiHeadAttention`, the module of chapters 3-9;
- ``grouped_query.py``: :class:`GroupedQueryAttention`, causal self-attention of
  decoder-only models (chapters 10-11);
- ``qk_norm.py``: :class:`QKNormAttention`, with an RMSNorm of each head's queries and keys
  (Qwen3, OLMo 2, Gemma 3);
- ``recording.py``: :func:`record_attention`, the weights of every head, for any variant.

A new variant is a new file here with a subclass of :class:`Attention`, its test file in
``tests/attention/``, and one line in :data:`CAUSAL_ATTENTION` when
:class:`mhsa.CausalLM` should be able to build it. It touches no other variant.
"""

from mhsa.attention.base import Attention
from mhsa.attention.grouped_query import GroupedQueryAttention
from mhsa.attention.multihead import MultiHeadAttention
from mhsa.attention.qk_norm import QKNormAttention
from mhsa.attention.recording import record_attention

# The selector: the causal self-attention variants that mhsa.CausalLM(attention=name) builds,
# each called as cls(embed_dim, num_heads, num_kv_heads, head_dim=..., rope_base=...,
# window=..., bias=False, device=..., dtype=...), plus rope_scaling=... (a dict, see
# mhsa.core.rotary.check_rope_scaling) when the model scales its rotary positions, with
# GroupedQueryAttention's forward and a rotary_angles(positions, start=, n=) method (None
# without positions).
CAUSAL_ATTENTION = {
    "grouped_query": GroupedQueryAttention,
    "qk_norm": QKNormAttention,
}

__all__ = ["CAUSAL_ATTENTION", "Attention", "GroupedQueryAttention", "MultiHeadAttention",
           "QKNormAttention", "record_attention"]
