"""Query/key norms: an RMSNorm of each head's queries and keys before rotary positions.

Legend: b batch, n tokens, h query heads, g key/value heads, d head_dim, e embed_dim, i query
positions, j key positions. Masks are boolean, True = may attend.
"""

import torch
from torch import nn

from mhsa.attention.grouped_query import GroupedQueryAttention
from mhsa.interop.hf_qwen3 import copy_hf_qwen3_attention_weights, qk_norm_config_from_hf_qwen3


class QKNormAttention(GroupedQueryAttention):
    r""":class:`mhsa.GroupedQueryAttention` with an RMSNorm of every head's queries and keys.

    Each query and key vector (one head, one position, ``d`` wide) is divided by its root
    mean square and multiplied by a learned gain shared by all heads, before rotary
    positions::

        q = q_norm(q)    # [b, h, n, d], over d: q / sqrt(mean(q**2) + eps) * q_norm.weight
        k = k_norm(k)    # [b, g, n, d]
        scores = rotate(q) rotate(k)^T / sqrt(d)

    A score is then at most ``d * max|gain_q| * max|gain_k| / sqrt(d)`` in size, whatever
    the size of the input: growing activations cannot push the softmax into one-hot
    saturation, which keeps training at large learning rates stable. The values are not
    normed. Everything else (grouped heads, rotary positions and their scaling, cache,
    window, both kernels) is the parent's; this class overrides only
    :meth:`adjust_queries_and_keys`.

    Args:
        embed_dim, num_heads, num_kv_heads: as :class:`mhsa.GroupedQueryAttention`.
        norm_eps: epsilon of both norms, ``> 0`` (Qwen3's ``rms_norm_eps``, default 1e-6).
        head_dim, rope_base, rope_scaling, window, bias, dropout, device, dtype: as
            :class:`mhsa.GroupedQueryAttention` (keyword-only).

    Attributes:
        q_norm: ``nn.RMSNorm(head_dim, eps=norm_eps)``, applied to each query head.
        k_norm: ``nn.RMSNorm(head_dim, eps=norm_eps)``, applied to each key head.
        q_proj, k_proj, v_proj, out_proj: as :class:`mhsa.GroupedQueryAttention`.

    Raises:
        TypeError: as :class:`mhsa.GroupedQueryAttention`; ``norm_eps`` not a number.
        ValueError: as :class:`mhsa.GroupedQueryAttention`; ``norm_eps <= 0``.

    Example::

        >>> attn = QKNormAttention(64, 4, 2, rope_base=10000.0)
        >>> x = torch.randn(1, 6, 64)
        >>> w1, w2 = attn(x, need_weights=True)[1], attn(100 * x, need_weights=True)[1]
        >>> torch.allclose(w1, w2, atol=1e-5)  # the scores do not grow with the input
        True

    Source: Henry et al. 2020, "Query-Key Normalization for Transformers" (normed queries
    and keys); Dehghani et al. 2023, "Scaling Vision Transformers to 22 Billion Parameters"
    (LayerNorm of queries and keys for stable training); Qwen Team 2025, "Qwen3 Technical
    Report", section 2 (RMSNorm of each head's queries and keys, in place of Qwen2's
    query/key/value biases); Gemma Team 2025, "Gemma 3 Technical Report" (query/key norms
    in place of Gemma 2's soft-capping). OLMo et al. 2024, "2 OLMo 2 Furious", norm all
    heads' queries (and keys) together, over ``num_heads * head_dim`` before the head split:
    not this per-head form.
    """

    def __init__(self, embed_dim, num_heads, num_kv_heads, *, norm_eps=1e-6, **kwargs):
        super().__init__(embed_dim, num_heads, num_kv_heads, **kwargs)
        if isinstance(norm_eps, bool) or not isinstance(norm_eps, (int, float)):
            raise TypeError(f"`norm_eps` must be a number, got {type(norm_eps).__name__}")
        if not norm_eps > 0:
            raise ValueError(f"`norm_eps` must be > 0, got {norm_eps}")
        kw = {"device": self.q_proj.weight.device, "dtype": self.q_proj.weight.dtype}
        self.q_norm = nn.RMSNorm(self.head_dim, eps=float(norm_eps), **kw)
        self.k_norm = nn.RMSNorm(self.head_dim, eps=float(norm_eps), **kw)

    def adjust_queries_and_keys(self, q: torch.Tensor, k: torch.Tensor):
        """RMSNorm of each head's queries ``[b, h, n, d]`` and keys ``[b, g, n, d]``, over ``d``."""
        return self.q_norm(q), self.k_norm(k)

    @classmethod
    def from_hf_qwen3(cls, module) -> "QKNormAttention":
        """A copy of a transformers ``Qwen3Attention`` (one layer's ``self_attn``), same weights.

        Reads the module's sizes, ``sliding_window`` (set on the sliding layers only) and its
        ``config``'s rope theta and scaling, ``attention_bias`` and ``rms_norm_eps``
        (``mhsa.interop.hf_qwen3.qk_norm_config_from_hf_qwen3``); copies the four
        projections and both norms. transformers is not imported.

        Args:
            module: a transformers ``Qwen3Attention``.

        Returns:
            a :class:`QKNormAttention` with the module's device and dtype, in eval mode,
            whose output on the same hidden states, positions and causal (or sliding)
            mask equals the module's (float32: within 1e-5).

        Raises:
            TypeError: ``module`` is not a ``Qwen3Attention``.
            ValueError: what ``mhsa.interop.hf_llama.rope_from_hf`` refuses, or
                attention dropout.
        """
        config = qk_norm_config_from_hf_qwen3(module)
        weight = module.q_proj.weight
        ours = cls(**config, device=weight.device, dtype=weight.dtype)
        copy_hf_qwen3_attention_weights(ours, module)
        return ours.eval()
