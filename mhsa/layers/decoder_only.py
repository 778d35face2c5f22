"""The layer of decoder-only language models (Llama, Mistral): pre-norm attention, then SwiGLU.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim, i query positions, j key
positions. Masks are boolean, True = may attend.
"""

import torch
from torch import nn

from mhsa.attention import CAUSAL_ATTENTION, Attention
from mhsa.layers.swiglu import SwiGLU


class CausalLMLayer(nn.Module):
    """One pre-norm decoder layer of Llama/Mistral: causal self-attention, then SwiGLU::

        x = x + attn(norm1(x))           # causal, rotary positions, optional sliding window
        x = x + feed_forward(norm2(x))

    Args:
        embed_dim: width ``e``.
        num_heads: query heads ``h``.
        ff_dim: SwiGLU hidden width.
        num_kv_heads: key/value heads, dividing ``num_heads`` (default ``num_heads``).
        head_dim: width of each head (default ``embed_dim // num_heads``).
        rope_base: rotary base ``theta``, or None.
        rope_scaling: None, or the scaling of the rotary positions for long context (see
            :class:`mhsa.GroupedQueryAttention`); passed to the attention only when given.
        window: sliding window (``None``: full causal).
        norm_eps: epsilon of both RMSNorms, and of the query and key norms of
            ``attention="qk_norm"``.
        attention: the name of the attention variant in
            ``mhsa.attention.CAUSAL_ATTENTION`` (default ``"grouped_query"``), or a callable
            with no arguments that returns a new :class:`mhsa.Attention` of width
            ``embed_dim`` (a variant whose constructor takes other arguments, such as
            :class:`mhsa.MultiHeadLatentAttention`); ``num_kv_heads``, ``head_dim``,
            ``window`` and ``rope_scaling`` must then be None: the callable decides.
        device, dtype: where and in which floating dtype to create the parameters.

    Attributes:
        norm1, norm2: ``nn.RMSNorm(embed_dim)``.
        attn: the attention module (a :class:`mhsa.GroupedQueryAttention` by default).
        feed_forward: :class:`mhsa.SwiGLU`.

    Shape:
        ``x`` ``[batch, n, embed_dim]`` -> ``[batch, n, embed_dim]``.

    Raises:
        TypeError: as :class:`mhsa.GroupedQueryAttention` and :class:`mhsa.SwiGLU`.
        ValueError: as :class:`mhsa.GroupedQueryAttention` and :class:`mhsa.SwiGLU`; an
            ``attention`` name that is not registered; a callable ``attention`` with
            ``num_kv_heads``, ``head_dim``, ``window`` or ``rope_scaling``.
        TypeError: a callable ``attention`` that returns no :class:`mhsa.Attention` of width
            ``embed_dim``.

    Source: Touvron et al. 2023, "LLaMA", section 2.2 (pre-normalization with RMSNorm,
    SwiGLU, rotary embeddings); Zhang & Sennrich 2019, "Root Mean Square Layer
    Normalization"; Jiang et al. 2023, "Mistral 7B", section 2 (sliding window).
    """

    def __init__(self, embed_dim, num_heads, ff_dim, *, num_kv_heads=None, head_dim=None,
                 rope_base=10000.0, rope_scaling=None, window=None, norm_eps=1e-6,
                 attention="grouped_query", device=None, dtype=None):
        super().__init__()
        if not callable(attention) and attention not in CAUSAL_ATTENTION:
            raise ValueError(f"`attention` must be one of {sorted(CAUSAL_ATTENTION)} or a "
                             f"callable, got {attention!r}")
        kw = {"device": device, "dtype": dtype}
        self.norm1 = nn.RMSNorm(embed_dim, eps=norm_eps, **kw)
        if callable(attention):
            self.attn = _built(attention, embed_dim, num_kv_heads=num_kv_heads,
                               head_dim=head_dim, window=window, rope_scaling=rope_scaling)
        else:
            scaling = {} if rope_scaling is None else {"rope_scaling": rope_scaling}
            if attention == "qk_norm":  # its query and key norms take the layer's epsilon
                scaling["norm_eps"] = norm_eps
            num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
            self.attn = CAUSAL_ATTENTION[attention](
                embed_dim, num_heads, num_kv_heads, head_dim=head_dim, rope_base=rope_base,
                window=window, bias=False, **scaling, **kw)
        self.norm2 = nn.RMSNorm(embed_dim, eps=norm_eps, **kw)
        self.feed_forward = SwiGLU(embed_dim, ff_dim, **kw)

    def forward(self, x: torch.Tensor, *, attn_mask=None, cache=None,
                positions=None) -> torch.Tensor:
        """``[batch, n, embed_dim] -> [batch, n, embed_dim]``; ``attn_mask``, ``cache`` and
        ``positions`` as in :meth:`mhsa.GroupedQueryAttention.forward` (always causal)."""
        x = x + self.attn(self.norm1(x), attn_mask=attn_mask, cache=cache,
                          positions=positions)[0]
        return x + self.feed_forward(self.norm2(x))


def _built(make, embed_dim: int, **must_be_none) -> Attention:
    """The module that ``make()`` returns, checked: an :class:`Attention` of ``embed_dim``."""
    given = [name for name, value in must_be_none.items() if value is not None]
    if given:
        raise ValueError(f"a callable `attention` builds the module itself: leave "
                         f"{', '.join(f'`{g}`' for g in given)} at None")
    attn = make()
    if not isinstance(attn, Attention) or attn.embed_dim != embed_dim:
        got = (f"{type(attn).__name__} of embed_dim {attn.embed_dim}"
               if isinstance(attn, Attention) else type(attn).__name__)
        raise TypeError(f"`attention()` must return a new mhsa.Attention of embed_dim "
                        f"{embed_dim}, got {got}")
    return attn
