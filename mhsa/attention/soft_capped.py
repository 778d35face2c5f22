"""Soft-capped attention scores: Gemma 2's ``softcap * tanh(scores / softcap)``.

Legend: b batch, n tokens, h query heads, g key/value heads, r = h / g, d head_dim,
i query positions, j key positions. Masks are boolean, True = may attend.
"""

import math

import torch
import torch.nn.functional as F
from einops import einsum

from mhsa.attention.grouped_query import GroupedQueryAttention
from mhsa.core.functional import softmax_safe
from mhsa.core.heads import repeat_kv_heads
from mhsa.core.masks import causal_mask
from mhsa.interop.hf_attention_modules import (
    config_from_hf_gemma2_attention,
    copy_hf_attention_weights,
)


class SoftCappedAttention(GroupedQueryAttention):
    r"""Grouped-query attention whose scores pass through ``softcap * tanh(scores / softcap)``.

    A score far from zero can dominate a softmax row and grow without bound during
    training; Gemma 2 squashes every score into ``(-softcap, softcap)`` before the mask and
    the softmax, and leaves small scores almost unchanged (``tanh(s) ~ s`` near 0)::

        scores = q k^T * scale                      # [b, h, i, j]
        scores = softcap * tanh(scores / softcap)   # |scores| < softcap
        head = softmax(scores + causal) v

    Everything else is :class:`mhsa.GroupedQueryAttention`'s (projections, rotary
    positions, cache, sliding window); only :meth:`attend` changes. torch's fused kernel
    cannot cap the scores, so every call takes the explicit path.

    Args:
        embed_dim, num_heads, num_kv_heads: as in :class:`mhsa.GroupedQueryAttention`.
        softcap: the cap, a number ``> 0`` (Gemma 2: 50.0, its config's
            ``attn_logit_softcapping``).
        scale: factor of the scores before the cap, ``> 0``; default ``1 / sqrt(head_dim)``.
            Gemma 2 uses ``query_pre_attn_scalar ** -0.5`` (for the 27B model
            ``(embed_dim / num_heads) ** -0.5``, not ``head_dim ** -0.5``).
        **kwargs: ``head_dim``, ``rope_base``, ``window``, ``bias``, ``dropout``,
            ``device``, ``dtype`` of :class:`mhsa.GroupedQueryAttention`.

    Attributes:
        softcap, scale: as above (floats).

    Raises:
        TypeError: ``softcap`` or ``scale`` not a number; the parent's errors.
        ValueError: ``softcap <= 0`` or ``scale <= 0``; the parent's errors.

    Shape: as :meth:`mhsa.GroupedQueryAttention.forward`: ``x`` ``[b, n, embed_dim]`` to
    ``[b, n, embed_dim]``, weights ``[b, num_heads, n, n_kept]`` (each row sums to 1).

    Source: Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical
    Size", section 2 ("Logit soft-capping"); Bello et al. 2016, "Neural Combinatorial
    Optimization with Reinforcement Learning", appendix A (the tanh cap of logits).
    """

    def __init__(self, embed_dim, num_heads, num_kv_heads, *, softcap=50.0, scale=None,
                 **kwargs):
        super().__init__(embed_dim, num_heads, num_kv_heads, **kwargs)
        self.softcap = check_positive_number("softcap", softcap)
        self.scale = 1.0 / math.sqrt(self.head_dim) if scale is None else \
            check_positive_number("scale", scale)

    def attend(self, q, k, v, mask, *, is_causal, dropout_p, need_weights):
        """Capped scores, mask, softmax, weighted values: the explicit path, always.

        Arguments and returns as :meth:`mhsa.GroupedQueryAttention.attend`; the weights'
        rows sum to 1 (0 for a query with nothing to attend to).
        """
        r = self.num_heads // self.num_kv_heads
        k, v = repeat_kv_heads(k, r), repeat_kv_heads(v, r)  # [b, h, j, d]
        scores = einsum(q, k, "b h i d, b h j d -> b h i j") * self.scale
        scores = self.softcap * torch.tanh(scores / self.softcap)  # in (-softcap, softcap)
        if is_causal:
            mask = causal_mask(q.shape[2], k.shape[2], device=q.device)
        if mask is not None:
            scores = scores.masked_fill(~softmax_safe(mask), float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights.masked_fill(~mask, 0.0)  # masked keys and empty rows: exactly 0
        dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
        out = einsum(dropped, v, "b h i j, b h j d -> b h i d")
        return out, (weights if need_weights else None)

    @classmethod
    def from_hf_gemma2(cls, module) -> "SoftCappedAttention":
        """The attention of one transformers ``Gemma2Attention`` layer, its weights copied.

        A sliding layer (``module.sliding_window`` set) becomes a windowed module, a full
        layer an unwindowed one. The same outputs as ``module`` on the same hidden states,
        the rotary positions of its model and its causal (or windowed) mask (float32:
        within 1e-5). transformers is not imported: the module's attributes are read.

        Args:
            module: a transformers ``Gemma2Attention`` (e.g. ``model.layers[0].self_attn``).

        Returns:
            A :class:`SoftCappedAttention` on the module's device and dtype, eval mode.

        Raises:
            TypeError: ``module`` is not a ``Gemma2Attention``.
            ValueError: a setting it cannot represent: a rope type mhsa does not scale, no soft-capping,
                bidirectional attention.
        """
        config = config_from_hf_gemma2_attention(module)
        ours = cls(**config, device=module.q_proj.weight.device,
                   dtype=module.q_proj.weight.dtype)
        copy_hf_attention_weights(ours, module)
        return ours.eval()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, softcap={self.softcap}, scale={self.scale:.4g}"


def check_positive_number(name: str, x) -> float:
    """Return ``x`` as a float; ``TypeError`` unless a real number, ``ValueError`` unless > 0."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"`{name}` must be a number > 0, got {type(x).__name__} {x!r}")
    if not x > 0 or math.isinf(x):
        raise ValueError(f"`{name}` must be a finite number > 0, got {x}")
    return float(x)
