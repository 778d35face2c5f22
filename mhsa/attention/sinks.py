"""A learned sink logit per head: gpt-oss's extra softmax column that carries no value.

Legend: b batch, n tokens, h query heads, g key/value heads, r = h / g, d head_dim,
i query positions, j key positions. Masks are boolean, True = may attend.
StreamingLLM's other kind of sink, the first tokens kept in a windowed cache, is
:class:`mhsa.core.sink_cache.SinkKVCache`.
"""

import math

import torch
import torch.nn.functional as F
from einops import einsum, repeat
from torch import nn

from mhsa.attention.grouped_query import GroupedQueryAttention
from mhsa.core.heads import repeat_kv_heads
from mhsa.core.masks import causal_mask
from mhsa.interop.hf_attention_modules import (
    config_from_hf_gpt_oss_attention,
    copy_hf_attention_weights,
)


class SinkAttention(GroupedQueryAttention):
    r"""Grouped-query attention with one learned sink logit per head in every softmax row.

    Softmax makes each query spread a total weight of 1 over its keys, even when no key is
    relevant; trained models then park weight on some token (often the first) that acts as
    a sink. gpt-oss learns the sink instead: head ``h`` appends one logit ``sinks[h]`` to
    each row of its scores, softmaxes the row with it and drops it, so the sink takes a
    share of the weight and adds nothing to the output::

        scores = q k^T / sqrt(head_dim) + causal    # [b, h, i, j]
        p = softmax([scores, sinks[h]])             # [b, h, i, j + 1]
        head = p[..., :-1] v                        # the sink column carries no value

    The returned weights are ``p[..., :-1]``: each row sums to
    ``1 - exp(sinks[h]) / (exp(sinks[h]) + sum_j exp(scores_j))``, one minus the sink's
    share, not to 1 (and a query with nothing to attend to gets zero weights and a zero
    output, never NaN). Everything else is :class:`mhsa.GroupedQueryAttention`'s;
    only :meth:`attend` changes, always on the explicit path (torch's fused kernel has no
    sink column).

    Args:
        embed_dim, num_heads, num_kv_heads: as in :class:`mhsa.GroupedQueryAttention`.
        **kwargs: ``head_dim``, ``rope_base``, ``window``, ``bias`` (gpt-oss: True),
            ``dropout``, ``device``, ``dtype`` of :class:`mhsa.GroupedQueryAttention`.

    Attributes:
        sinks: ``nn.Parameter`` ``[num_heads]``, the sink logits, initialised to 0 (each
            sink then weighs as much as a key with score 0).

    Raises:
        TypeError, ValueError: the parent's.

    Shape: as :meth:`mhsa.GroupedQueryAttention.forward`: ``x`` ``[b, n, embed_dim]`` to
    ``[b, n, embed_dim]``, weights ``[b, num_heads, n, n_kept]``.

    Source: OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", architecture section (
    a learned bias in the softmax denominator of each head); Xiao et al. 2023, "Efficient
    Streaming Language Models with Attention Sinks", section 3.3 (a learnable sink),
    and Miller 2023, "Attention Is Off By One" (softmax plus one).
    """

    def __init__(self, embed_dim, num_heads, num_kv_heads, **kwargs):
        super().__init__(embed_dim, num_heads, num_kv_heads, **kwargs)
        factory = {"device": kwargs.get("device"), "dtype": kwargs.get("dtype")}
        self.sinks = nn.Parameter(torch.zeros(num_heads, **factory))  # [h]

    def attend(self, q, k, v, mask, *, is_causal, dropout_p, need_weights):
        """Scores, mask, softmax with the sink column, weighted values: the explicit path.

        Arguments and returns as :meth:`mhsa.GroupedQueryAttention.attend`; the weights'
        rows sum to one minus the sink's share.
        """
        r = self.num_heads // self.num_kv_heads
        k, v = repeat_kv_heads(k, r), repeat_kv_heads(v, r)  # [b, h, j, d]
        scores = einsum(q, k, "b h i d, b h j d -> b h i j") / math.sqrt(self.head_dim)
        if is_causal:
            mask = causal_mask(q.shape[2], k.shape[2], device=q.device)
        if mask is not None:  # the sink column is finite: no row is all -inf
            scores = scores.masked_fill(~mask, float("-inf"))
        b, _, n, _ = scores.shape
        sink = repeat(self.sinks.to(scores.dtype), "h -> b h i 1", b=b, i=n)
        weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
        dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
        out = einsum(dropped, v, "b h i j, b h j d -> b h i d")
        return out, (weights if need_weights else None)

    @classmethod
    def from_hf_gpt_oss(cls, module) -> "SinkAttention":
        """The attention of one transformers ``GptOssAttention`` layer, its weights copied.

        A sliding layer (``module.sliding_window`` set) becomes a windowed module, a full
        layer an unwindowed one; the projections keep their biases and ``sinks`` is
        copied. The same outputs as ``module`` on the same hidden states, the rotary
        positions of its model and its causal (or windowed) mask (float32: within 1e-5).
        transformers is not imported: the module's attributes are read.

        Args:
            module: a transformers ``GptOssAttention`` (``model.layers[k].self_attn``).

        Returns:
            A :class:`SinkAttention` on the module's device and dtype, eval mode.

        Raises:
            TypeError: ``module`` is not a ``GptOssAttention``.
            ValueError: a rope type mhsa does not scale (gpt-oss's own YaRN it does:
                ``rope_scaling`` is copied).
        """
        config = config_from_hf_gpt_oss_attention(module)
        ours = cls(**config, device=module.q_proj.weight.device,
                   dtype=module.q_proj.weight.dtype)
        copy_hf_attention_weights(ours, module)
        return ours.eval()
