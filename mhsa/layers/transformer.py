"""Transformer layers: the heads inside residual sublayers, with LayerNorm and a feed-forward net.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim, i query positions, j key
positions. Masks are boolean, **True = may attend** (``torch.nn.Transformer*Layer`` uses the
opposite, True = ignore; convert with :func:`mhsa.mask_from_torch_mha`).

Each sublayer ``f`` (self-attention, cross-attention, feed-forward) is wrapped the same way:

- post-norm (Vaswani et al. 2017, section 3.1): ``x = norm(x + dropout(f(x)))``
- pre-norm (Xiong et al. 2020, ``norm_first=True``): ``x = x + dropout(f(norm(x)))``

The residual add is outside the heads: the heads' merged, projected output is added to ``x``.

To read every layer's attention weights without changing what ``forward`` returns, wrap the
calls in :func:`mhsa.record_attention` (it works on any module holding an attention module).
"""

import torch
import torch.nn.functional as F
from torch import nn

from mhsa.attention.multihead import MultiHeadAttention
from mhsa.core._checks import check_bool_mask, check_positive_int, check_probability, check_shape
from mhsa.interop.torch_nn import layer_from_torch

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def dropout_module(p: float) -> nn.Module:
    """``nn.Dropout(p)``, or ``nn.Identity()`` when ``p == 0``: a dropout of nothing costs a
    call per sublayer per decoding step and changes nothing."""
    return nn.Dropout(p) if p > 0 else nn.Identity()


class FeedForward(nn.Module):
    """Position-wise feed-forward network: ``linear2(dropout(activation(linear1(x))))``.

    The same two-layer network is applied to every token on its own; no information moves
    between tokens here (that is attention's job).

    Args:
        embed_dim: width ``e`` of the input and output.
        ff_dim: width of the hidden layer (the paper uses ``4 * e``: 2048 for ``e = 512``).
        dropout: probability of zeroing a hidden unit in training mode, in ``[0, 1)``.
        activation: ``"relu"`` (the paper) or ``"gelu"`` (exact, as ``torch.nn.GELU()``).
        device, dtype: where and in which floating dtype to create the parameters.

    Shape:
        ``[..., e] -> [..., e]``.

    Raises:
        TypeError: a size that is not an int, or ``dropout`` that is not a number.
        ValueError: a size below 1, ``dropout`` outside ``[0, 1)``, or an unknown
            ``activation``.

    Source: Vaswani et al. 2017, "Attention Is All You Need", section 3.3.
    """

    def __init__(self, embed_dim, ff_dim, *, dropout=0.1, activation="relu", device=None,
                 dtype=None):
        super().__init__()
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("ff_dim", ff_dim)
        check_probability("dropout", dropout)
        self.activation_name = _check_activation(activation)
        self.activation = _ACTIVATIONS[activation]
        kw = {"device": device, "dtype": dtype}
        self.linear1 = nn.Linear(embed_dim, ff_dim, **kw)  # e -> ff_dim
        self.dropout = dropout_module(dropout)
        self.linear2 = nn.Linear(ff_dim, embed_dim, **kw)  # ff_dim -> e

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def extra_repr(self) -> str:
        return f"activation={self.activation_name!r}"


class EncoderLayer(nn.Module):
    """Transformer encoder layer: self-attention, then feed-forward, each a residual sublayer.

    Post-norm (``norm_first=False``, the paper)::

        x = norm1(x + dropout1(self_attn(x)))
        x = norm2(x + dropout2(feed_forward(x)))

    Pre-norm (``norm_first=True``, Xiong et al. 2020)::

        x = x + dropout1(self_attn(norm1(x)))
        x = x + dropout2(feed_forward(norm2(x)))

    Args:
        embed_dim: width ``e`` of the tokens.
        num_heads: number of heads ``h``; must divide ``embed_dim``.
        ff_dim: hidden width of the feed-forward network.
        dropout: probability used by every dropout (attention weights, feed-forward hidden
            units, each sublayer's output), in ``[0, 1)``; training mode only.
        activation: ``"relu"`` or ``"gelu"``.
        norm_first: pre-norm when True, post-norm when False.
        layer_norm_eps: ``eps`` of the LayerNorms.
        device, dtype: where and in which floating dtype to create the parameters.

    Attributes:
        self_attn: the :class:`mhsa.MultiHeadAttention`.
        feed_forward: the :class:`FeedForward` network.
        norm1, norm2: ``nn.LayerNorm`` of each sublayer (of its input when pre-norm).
        dropout1, dropout2: ``nn.Dropout`` of each sublayer's update (``nn.Identity``
            when ``dropout`` is 0).
        norm_first: True for pre-norm.

    Shape:
        ``x``: ``[b, n, e]`` -> ``[b, n, e]``.

    Raises:
        TypeError: at construction, a size that is not an int.
        ValueError: at construction, a size below 1, ``embed_dim`` not divisible by
            ``num_heads``, ``dropout`` outside ``[0, 1)``, or an unknown ``activation``.

    Source: Vaswani et al. 2017, "Attention Is All You Need", sections 3.1 (encoder stack,
    residual connections, layer normalization) and 3.3 (feed-forward); Xiong et al. 2020,
    "On Layer Normalization in the Transformer Architecture" (pre-norm).
    """

    def __init__(self, embed_dim, num_heads, ff_dim, *, dropout=0.1, activation="relu",
                 norm_first=False, layer_norm_eps=1e-5, device=None, dtype=None):
        super().__init__()
        _check_layer_args(embed_dim, num_heads, dropout, activation)
        self.embed_dim, self.num_heads, self.norm_first = embed_dim, num_heads, norm_first
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiHeadAttention(embed_dim, num_heads, dropout=dropout, **kw)
        self.feed_forward = FeedForward(embed_dim, ff_dim, dropout=dropout,
                                        activation=activation, **kw)
        self.norm1 = nn.LayerNorm(embed_dim, eps=layer_norm_eps, **kw)
        self.dropout1 = dropout_module(dropout)
        self.norm2 = nn.LayerNorm(embed_dim, eps=layer_norm_eps, **kw)
        self.dropout2 = dropout_module(dropout)

    def forward(self, x: torch.Tensor, *, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Contextualize every token of ``x``.

        Args:
            x: ``[batch, n, embed_dim]``, floating, the layer's dtype.
            attn_mask: optional torch.bool mask broadcastable to
                ``[batch, num_heads, n, n]``, **True = may attend**; typically a padding
                mask ``[batch, 1, 1, n]`` from :func:`mhsa.padding_mask`.

        Returns:
            ``[batch, n, embed_dim]``.

        Raises:
            TypeError: ``x`` is not a floating tensor of the layer's dtype, or ``attn_mask``
                is not torch.bool.
            ValueError: ``x`` is not ``[batch, n, embed_dim]``, or ``attn_mask`` does not
                broadcast to ``[batch, num_heads, n, n]``.
        """
        check_shape("x", x, ("batch", "n", "embed_dim"), self.embed_dim)
        b, n = x.shape[:2]
        if attn_mask is not None:
            check_bool_mask("attn_mask", attn_mask, (b, self.num_heads, n, n))
        if self.norm_first:  # pre-norm: the residual stream itself is never normed
            x = x + self.dropout1(self.self_attn(self.norm1(x), attn_mask=attn_mask)[0])
            x = x + self.dropout2(self.feed_forward(self.norm2(x)))
        else:  # post-norm, as in the paper
            x = self.norm1(x + self.dropout1(self.self_attn(x, attn_mask=attn_mask)[0]))
            x = self.norm2(x + self.dropout2(self.feed_forward(x)))
        return x

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> "EncoderLayer":
        """A copy of a ``torch.nn.TransformerEncoderLayer(batch_first=True)``, same weights.

        In eval mode the copy's output equals torch's within float32 rounding (1e-5) for a
        mask converted with :func:`mhsa.mask_from_torch_mha`.

        Raises:
            TypeError: ``layer`` is not a ``torch.nn.TransformerEncoderLayer``.
            ValueError: it has ``batch_first=False``, LayerNorms or linears without bias,
                or an activation other than relu/gelu.
        """
        return layer_from_torch(cls, layer, nn.TransformerEncoderLayer)


class DecoderLayer(nn.Module):
    """Transformer decoder layer: causal self-attention, cross-attention, feed-forward.

    Post-norm (``norm_first=False``, the paper)::

        x = norm1(x + dropout1(self_attn(x, causal)))
        x = norm2(x + dropout2(cross_attn(query=x, key=value=memory)))
        x = norm3(x + dropout3(feed_forward(x)))

    Pre-norm (``norm_first=True``) normalizes each sublayer's input instead, as in
    :class:`EncoderLayer`. The self-attention is always causal (token ``i`` sees tokens
    ``j <= i``); in the cross-attention the ``n_tgt`` decoder tokens are the queries and the
    ``n_src`` encoder outputs (``memory``) the keys and values, so its weights are
    ``[batch, num_heads, n_tgt, n_src]``.

    The arguments are those of :class:`EncoderLayer`; ``memory`` must have width ``embed_dim``.

    Attributes:
        self_attn: the causal self-attention, a :class:`mhsa.MultiHeadAttention`.
        cross_attn: the cross-attention (torch calls it ``multihead_attn``).
        feed_forward: the :class:`FeedForward` network.
        norm1, norm2, norm3: ``nn.LayerNorm`` of each sublayer.
        dropout1, dropout2, dropout3: ``nn.Dropout`` of each sublayer's update
            (``nn.Identity`` when ``dropout`` is 0).

    Shape:
        ``x``: ``[b, n_tgt, e]``, ``memory``: ``[b, n_src, e]``
        -> ``[b, n_tgt, e]``.

    Raises:
        ValueError: at construction, as :class:`EncoderLayer`.

    Source: Vaswani et al. 2017, sections 3.1 (decoder stack) and 3.2.3 (masked
    self-attention; encoder-decoder attention); Xiong et al. 2020 (pre-norm).
    """

    def __init__(self, embed_dim, num_heads, ff_dim, *, dropout=0.1, activation="relu",
                 norm_first=False, layer_norm_eps=1e-5, device=None, dtype=None):
        super().__init__()
        _check_layer_args(embed_dim, num_heads, dropout, activation)
        self.embed_dim, self.num_heads, self.norm_first = embed_dim, num_heads, norm_first
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiHeadAttention(embed_dim, num_heads, dropout=dropout, **kw)
        self.cross_attn = MultiHeadAttention(embed_dim, num_heads, dropout=dropout, **kw)
        self.feed_forward = FeedForward(embed_dim, ff_dim, dropout=dropout,
                                        activation=activation, **kw)
        self.norm1 = nn.LayerNorm(embed_dim, eps=layer_norm_eps, **kw)
        self.dropout1 = dropout_module(dropout)
        self.norm2 = nn.LayerNorm(embed_dim, eps=layer_norm_eps, **kw)
        self.dropout2 = dropout_module(dropout)
        self.norm3 = nn.LayerNorm(embed_dim, eps=layer_norm_eps, **kw)
        self.dropout3 = dropout_module(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, *,
                self_attn_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, cache=None) -> torch.Tensor:
        """Update the target tokens ``x`` from their past and from the encoder's ``memory``.

        Args:
            x: ``[batch, n_tgt, embed_dim]``, floating, the layer's dtype.
            memory: encoder output ``[batch, n_src, embed_dim]``, same dtype.
            self_attn_mask: optional torch.bool mask broadcastable to
                ``[batch, num_heads, n_tgt, n_tgt]``, **True = may attend**, ANDed with the
                causal mask (e.g. a target padding mask ``[batch, 1, 1, n_tgt]``).
            memory_mask: optional torch.bool mask broadcastable to
                ``[batch, num_heads, n_tgt, n_src]``, **True = may attend**; typically the
                source padding mask ``[batch, 1, 1, n_src]``.
            cache: optional :class:`mhsa.KVCache` of this layer's self-attention, to decode
                step by step: ``x`` holds only the tokens after the ``len(cache)`` already
                read, and ``self_attn_mask`` broadcasts to
                ``[batch, num_heads, n_tgt, len(cache) + n_tgt]``. The cross-attention
                projects ``memory`` again at each call: for short sources a small share of a
                step (chapter 9 measures it).

        Returns:
            ``[batch, n_tgt, embed_dim]``.

        Raises:
            TypeError: ``x`` or ``memory`` is not a floating tensor of the layer's dtype, or a
                mask is not torch.bool.
            ValueError: ``x`` or ``memory`` is not ``[batch, *, embed_dim]``, their batch
                sizes differ, a mask does not broadcast to its attention's scores, or
                ``cache`` holds keys of another batch (see :meth:`mhsa.KVCache.update`).
        """
        check_shape("x", x, ("batch", "n_tgt", "embed_dim"), self.embed_dim)
        check_shape("memory", memory, ("batch", "n_src", "embed_dim"), self.embed_dim)
        (b, n_tgt), n_src = x.shape[:2], memory.shape[1]
        if memory.shape[0] != b:
            raise ValueError(f"`x` and `memory` must have the same batch size, got shapes "
                             f"{tuple(x.shape)} and {tuple(memory.shape)}")
        h = self.num_heads
        if self_attn_mask is not None:
            n_keys = n_tgt + (0 if cache is None else len(cache))
            check_bool_mask("self_attn_mask", self_attn_mask, (b, h, n_tgt, n_keys))
        if memory_mask is not None:
            check_bool_mask("memory_mask", memory_mask, (b, h, n_tgt, n_src))
        if self.norm_first:  # pre-norm
            x = x + self.dropout1(self.self_attn(self.norm1(x), attn_mask=self_attn_mask,
                                                 is_causal=True, cache=cache)[0])
            x = x + self.dropout2(self.cross_attn(self.norm2(x), memory,
                                                  attn_mask=memory_mask)[0])
            x = x + self.dropout3(self.feed_forward(self.norm3(x)))
        else:  # post-norm, as in the paper
            x = self.norm1(x + self.dropout1(self.self_attn(x, attn_mask=self_attn_mask,
                                                            is_causal=True, cache=cache)[0]))
            x = self.norm2(x + self.dropout2(self.cross_attn(x, memory,
                                                             attn_mask=memory_mask)[0]))
            x = self.norm3(x + self.dropout3(self.feed_forward(x)))
        return x

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> "DecoderLayer":
        """A copy of a ``torch.nn.TransformerDecoderLayer(batch_first=True)``, same weights.

        In eval mode the copy's output equals torch's within float32 rounding (1e-5) when
        torch gets ``tgt_mask`` = the causal mask in its convention (True = ignore; our layer
        is always causal; ``tgt_is_causal=True`` is only torch's hint that the mask is causal),
        and masks converted with
        :func:`mhsa.mask_to_torch_mha` (``key_padding=True`` for padding masks).

        Raises:
            TypeError: ``layer`` is not a ``torch.nn.TransformerDecoderLayer``.
            ValueError: as :meth:`EncoderLayer.from_torch`.
        """
        return layer_from_torch(cls, layer, nn.TransformerDecoderLayer)


def _check_layer_args(embed_dim, num_heads, dropout, activation) -> None:
    check_positive_int("embed_dim", embed_dim)
    check_positive_int("num_heads", num_heads)
    check_probability("dropout", dropout)
    _check_activation(activation)


def _check_activation(activation) -> str:
    if activation not in _ACTIVATIONS:
        raise ValueError(f"`activation` must be 'relu' or 'gelu', got {activation!r}")
    return activation
