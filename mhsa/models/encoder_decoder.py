"""Stacks of layers and the encoder-decoder transformer, with embeddings and positions.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim, i query positions, j key
positions. Masks are boolean, **True = may attend**. Token ids are integer tensors
``[batch, n]``; ``pad_id`` marks padding.
"""

import math

import torch
from torch import nn

from mhsa.core._checks import check_int, check_int_tensor, check_positive_int, check_rank
from mhsa.core.masks import padding_mask_from_ids
from mhsa.layers.transformer import DecoderLayer, EncoderLayer, dropout_module
from mhsa.models import generation


def sinusoidal_positional_encoding(n_tokens: int, embed_dim: int, *, base: float = 10000.0,
                                   device=None, dtype=torch.float32) -> torch.Tensor:
    r"""The fixed sinusoidal positional encoding ``[n_tokens, embed_dim]``.

    Position ``pos`` and column pair ``(2k, 2k+1)`` get::

        PE[pos, 2k]   = sin(pos / base^(2k / embed_dim))
        PE[pos, 2k+1] = cos(pos / base^(2k / embed_dim))

    so each column pair is a clock with its own wavelength, from ``2*pi`` (``k = 0``) to
    nearly ``2*pi*base``. It is added to the token embeddings, which otherwise carry no
    order: attention without it is permutation-equivariant.

    Args:
        n_tokens: number of positions ``n``, ``int >= 1``.
        embed_dim: width ``e``, a positive even int.
        base: the wavelength base (10000 in the paper).
        device, dtype: device and floating dtype of the result.

    Returns:
        tensor ``[n_tokens, embed_dim]`` with values in ``[-1, 1]``.

    Raises:
        ValueError: ``n_tokens`` or ``embed_dim`` is below 1 (not an int: ``TypeError``), or
            ``embed_dim`` is odd.

    Source: Vaswani et al. 2017, "Attention Is All You Need", section 3.5.
    """
    check_positive_int("n_tokens", n_tokens)
    check_positive_int("embed_dim", embed_dim)
    if embed_dim % 2:
        raise ValueError(f"`embed_dim` must be even (sin and cos columns pair up), "
                         f"got {embed_dim}")
    pos = torch.arange(n_tokens, device=device, dtype=torch.float64)[:, None]  # [n, 1]
    two_k = torch.arange(0, embed_dim, 2, device=device, dtype=torch.float64)  # [e/2]
    angle = pos / base ** (two_k / embed_dim)  # [n, e/2]
    pe = torch.stack([angle.sin(), angle.cos()], dim=-1)  # [n, e/2, 2]
    return pe.flatten(-2).to(dtype)  # [n, e]: sin, cos, sin, cos, ...


class TokenEmbedding(nn.Module):
    """Token ids to vectors, scaled by ``sqrt(embed_dim)``.

    The table is initialized with standard deviation ``embed_dim ** -0.5`` (as fairseq
    does), so after the scaling each entry has unit variance: the same scale as the
    positional encoding added next, whose entries lie in ``[-1, 1]``. (With
    ``nn.Embedding``'s default N(0, 1) start, the scaled tokens would be ``sqrt(embed_dim)``
    times larger and drown the positions.)

    Args:
        vocab_size: number of token ids.
        embed_dim: width ``e``.
        pad_id: optional id whose vector is kept at zero (``nn.Embedding(padding_idx=...)``).
        device, dtype: where and in which floating dtype to create the table.

    Shape:
        ``[b, n]`` integer ids -> ``[b, n, e]``.

    Raises:
        ValueError: a size below 1 (a size that is not an int raises ``TypeError``).
        TypeError: (forward) ids that are not an integer tensor.

    Source: Vaswani et al. 2017, section 3.4.
    """

    def __init__(self, vocab_size, embed_dim, *, pad_id=None, device=None, dtype=None):
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("embed_dim", embed_dim)
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id,
                                      device=device, dtype=dtype)
        self.scale = math.sqrt(embed_dim)
        with torch.no_grad():
            self.embedding.weight.normal_(0.0, embed_dim ** -0.5)
            if pad_id is not None:
                self.embedding.weight[pad_id].zero_()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        _check_ids("ids", ids)
        return self.embedding(ids) * self.scale


class _Stack(nn.Module):
    """``num_layers`` copies of ``layer_class``, and a final LayerNorm when pre-norm."""

    layer_class: type

    def __init__(self, embed_dim, num_heads, ff_dim, num_layers, *, dropout=0.1,
                 activation="relu", norm_first=False, layer_norm_eps=1e-5, device=None,
                 dtype=None):
        super().__init__()
        check_positive_int("num_layers", num_layers)
        kw = {"dropout": dropout, "activation": activation, "norm_first": norm_first,
              "layer_norm_eps": layer_norm_eps, "device": device, "dtype": dtype}
        self.layers = nn.ModuleList(
            self.layer_class(embed_dim, num_heads, ff_dim, **kw) for _ in range(num_layers))
        self.norm = _final_norm(norm_first, embed_dim, layer_norm_eps, device, dtype)


class Encoder(_Stack):
    """``num_layers`` :class:`mhsa.EncoderLayer` in a row, with a final LayerNorm if pre-norm.

    Args:
        embed_dim, num_heads, ff_dim: as in :class:`mhsa.EncoderLayer`.
        num_layers: number of layers, ``int >= 1``.
        dropout, activation, norm_first, layer_norm_eps, device, dtype: passed to each layer.

    Attributes:
        layers: ``nn.ModuleList`` of the layers.
        norm: ``nn.LayerNorm`` when ``norm_first``, else None. Pre-norm layers leave the
            residual stream un-normalized; post-norm layers end with a LayerNorm already.
            (``torch.nn.Transformer`` adds a final norm in both cases.)

    Shape:
        ``x``: ``[b, n, e]`` -> ``[b, n, e]``; ``attn_mask`` as in
        :meth:`mhsa.EncoderLayer.forward` (True = may attend), shared by every layer.

    Source: Vaswani et al. 2017, section 3.1; Xiong et al. 2020 (final norm with pre-norm).
    """

    layer_class = EncoderLayer

    def forward(self, x: torch.Tensor, *, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, attn_mask=attn_mask)
        return x if self.norm is None else self.norm(x)


class Decoder(_Stack):
    """``num_layers`` :class:`mhsa.DecoderLayer` in a row, with a final LayerNorm if pre-norm.

    The arguments are those of :class:`Encoder`.

    Attributes:
        layers: ``nn.ModuleList`` of the layers.
        norm: ``nn.LayerNorm`` when ``norm_first``, else None.

    Shape:
        ``x``: ``[b, n_tgt, e]``, ``memory``: ``[b, n_src, e]`` ->
        ``[b, n_tgt, e]``; masks as in :meth:`mhsa.DecoderLayer.forward`
        (True = may attend), shared by every layer. Every layer attends to the same
        ``memory``, the encoder's last output. ``caches``: optional list of one
        :class:`mhsa.KVCache` per layer, for decoding step by step (``x`` then holds only
        the new tokens); a list of another length raises ``ValueError``.

    Source: Vaswani et al. 2017, section 3.1; Xiong et al. 2020 (final norm with pre-norm).
    """

    layer_class = DecoderLayer

    def forward(self, x: torch.Tensor, memory: torch.Tensor, *,
                self_attn_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, caches=None) -> torch.Tensor:
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"`caches` must hold one KVCache per layer ({len(self.layers)}), "
                             f"got {len(caches)}")
        for layer, cache in zip(self.layers, caches or [None] * len(self.layers)):
            x = layer(x, memory, self_attn_mask=self_attn_mask, memory_mask=memory_mask,
                      cache=cache)
        return x if self.norm is None else self.norm(x)

    def new_cache(self, *, capacity: int | None = None) -> list:
        """One empty cache per layer, from each self-attention's ``new_cache``, for ``caches``."""
        return [layer.self_attn.new_cache(capacity=capacity) for layer in self.layers]

    def pack_projections(self, packed: bool = True) -> None:
        """Stack the projections of every self- and cross-attention, or drop the stacks.

        See :meth:`mhsa.MultiHeadAttention.pack_projections`; inference only.
        """
        for layer in self.layers:
            layer.self_attn.pack_projections(packed)
            layer.cross_attn.pack_projections(packed)


class EncoderDecoder(nn.Module):
    """The encoder-decoder transformer: source ids in, next-token logits for the target out.

    ``src`` goes through :class:`TokenEmbedding` + sinusoidal positions + dropout and the
    :class:`Encoder`, giving ``memory``; ``tgt`` (the target shifted right, starting with a
    begin-of-sequence id) goes through its own embedding, positions, dropout and the
    :class:`Decoder`, which attends to ``memory``; a linear ``lm_head`` maps each target
    position to logits over the target vocabulary. Padding (``pad_id``) is masked in the
    encoder self-attention, the cross-attention and the decoder self-attention.

    Args:
        src_vocab, tgt_vocab: number of source and of target token ids.
        embed_dim, num_heads, ff_dim, num_layers: as in :class:`Encoder` (same for both stacks).
        dropout: every dropout probability (embeddings, attention, sublayers, feed-forward).
        pad_id: padding id, shared by source and target.
        activation, norm_first, layer_norm_eps: passed to every layer.
        max_positions: rows of the sinusoidal position table kept in a buffer (longer
            sequences compute their rows on each call).
        device, dtype: where and in which floating dtype to create the parameters.

    Attributes:
        src_embed, tgt_embed: the :class:`TokenEmbedding` of each side.
        encoder: the :class:`Encoder`.
        decoder: the :class:`Decoder`.
        lm_head: ``nn.Linear(embed_dim, tgt_vocab)``, from decoder outputs to logits
            (the "generator" of some implementations).
        position_table: the sinusoidal table ``[max_positions, embed_dim]``, a
            non-persistent buffer (it follows ``.to()`` but is not in the state dict).
        pad_id: the padding id.

    Shape:
        ``src``: ``[b, n_src]``, ``tgt``: ``[b, n_tgt]`` (integer ids) ->
        logits ``[b, n_tgt, tgt_vocab]``.

    Raises:
        TypeError: a size or ``pad_id`` that is not an int.
        ValueError: a size below 1, or ``pad_id`` outside a vocabulary.

    Source: Vaswani et al. 2017, sections 3.1 (architecture), 3.4 (embeddings and
    softmax), 3.5 (positional encoding), 5.4 (dropout on embeddings plus positions).
    """

    def __init__(self, src_vocab, tgt_vocab, embed_dim, num_heads, ff_dim, num_layers, *,
                 dropout=0.1, pad_id=0, activation="relu", norm_first=False,
                 layer_norm_eps=1e-5, max_positions=1024, device=None, dtype=None):
        super().__init__()
        check_int("pad_id", pad_id, minimum=0)
        for name, vocab in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab)):
            check_positive_int(name, vocab)
            if pad_id >= vocab:
                raise ValueError(f"`pad_id` must be an int in [0, {name}={vocab}), got {pad_id!r}")
        self.pad_id = pad_id
        kw = {"device": device, "dtype": dtype}
        self.src_embed = TokenEmbedding(src_vocab, embed_dim, pad_id=pad_id, **kw)
        self.tgt_embed = TokenEmbedding(tgt_vocab, embed_dim, pad_id=pad_id, **kw)
        self.dropout = dropout_module(dropout)
        stack = {"dropout": dropout, "activation": activation, "norm_first": norm_first,
                 "layer_norm_eps": layer_norm_eps, **kw}
        self.encoder = Encoder(embed_dim, num_heads, ff_dim, num_layers, **stack)
        self.decoder = Decoder(embed_dim, num_heads, ff_dim, num_layers, **stack)
        self.lm_head = nn.Linear(embed_dim, tgt_vocab, **kw)
        table = sinusoidal_positional_encoding(
            check_positive_int("max_positions", max_positions), embed_dim, device=device,
            dtype=torch.get_default_dtype() if dtype is None else dtype)
        self.register_buffer("position_table", table, persistent=False)  # computed once

    def _embed(self, embed: TokenEmbedding, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Token embeddings plus the positions ``start, start + 1, ...``, then dropout."""
        x = embed(ids)  # [b, n, e]
        end, table = start + ids.shape[1], self.position_table
        if end > len(table):  # longer than the buffer: compute the rows, keep nothing
            table = sinusoidal_positional_encoding(end, x.shape[-1], device=x.device,
                                                   dtype=x.dtype)
        return self.dropout(x + table[start:end])

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the encoder.

        Args:
            src: source ids ``[batch, n_src]``.

        Returns:
            ``(memory, src_mask)``: ``memory`` ``[batch, n_src, embed_dim]``; ``src_mask``
            the source padding mask ``[batch, 1, 1, n_src]`` (True = real token, may attend).

        Raises:
            TypeError: ``src`` is not an integer tensor.
            ValueError: ``src`` is not 2-D.
        """
        _check_ids("src", src)
        src_mask = padding_mask_from_ids(src, self.pad_id)  # [b, 1, 1, n_src]
        return self.encoder(self._embed(self.src_embed, src), attn_mask=src_mask), src_mask

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor,
               src_mask: torch.Tensor | None = None, *, caches=None,
               tgt_mask: torch.Tensor | None | str = "from_ids") -> torch.Tensor:
        """Run the decoder and the ``lm_head``: logits ``[batch, n_tgt, tgt_vocab]``.

        Args:
            tgt: target ids so far ``[batch, n_tgt]``, starting with the begin id.
            memory: ``[batch, n_src, embed_dim]`` from :meth:`encode`.
            src_mask: the source padding mask from :meth:`encode` (True = may attend).
            caches: optional list of one :class:`mhsa.KVCache` per decoder layer, holding the
                first ``n_cached`` positions of ``tgt`` from earlier calls (empty at first):
                only the new positions ``n_cached`` to ``n_tgt - 1`` are run, and the logits
                are ``[batch, n_tgt - n_cached, tgt_vocab]``, equal to the last rows without
                a cache.
            tgt_mask: the target padding mask ``[batch, 1, 1, n_tgt]`` (True = real token),
                ANDed with the causal mask. ``"from_ids"`` (default) computes it from
                ``tgt`` and ``pad_id``; None says there is no padding (a decoding loop that
                keeps its own mask passes it or None, and saves the work).

        Raises:
            TypeError: ``tgt`` is not an integer tensor.
            ValueError: ``tgt`` is not 2-D; ``caches`` has not one cache per layer, or holds
                ``n_tgt`` positions or more already.
        """
        _check_ids("tgt", tgt)
        if isinstance(tgt_mask, str):
            if tgt_mask != "from_ids":
                raise ValueError(f"`tgt_mask` must be a mask, None or 'from_ids', got {tgt_mask!r}")
            tgt_mask = padding_mask_from_ids(tgt, self.pad_id)  # [b, 1, 1, n_tgt], ANDed w/ causal
        start = 0 if not caches else len(caches[0])  # positions the caches hold already
        if start >= tgt.shape[1]:
            raise ValueError(f"`caches` hold {start} positions; `tgt` ({tgt.shape[1]} ids) "
                             "has no new one to decode")
        x = self.decoder(self._embed(self.tgt_embed, tgt[:, start:], start), memory,
                         self_attn_mask=tgt_mask, memory_mask=src_mask, caches=caches)
        return self.lm_head(x)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, n_tgt, tgt_vocab]``: position ``i`` predicts target token ``i+1``.

        Args:
            src: source ids ``[batch, n_src]``.
            tgt: decoder input ids ``[batch, n_tgt]`` (the target shifted right).

        Raises:
            TypeError: ids that are not integer tensors.
            ValueError: ids that are not 2-D, or batch sizes that differ.
        """
        _check_ids("src", src)
        _check_ids("tgt", tgt)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"`src` and `tgt` must have the same batch size, got shapes "
                             f"{tuple(src.shape)} and {tuple(tgt.shape)}")
        memory, src_mask = self.encode(src)
        return self.decode(tgt, memory, src_mask)

    def greedy_decode(self, src: torch.Tensor, *, bos_id: int, eos_id: int,
                      max_len: int, use_cache: bool = False) -> torch.Tensor:
        """Generate target ids one at a time, always taking the most likely next token.

        The source is encoded once; at each step the decoder reads ``[bos, y_1, ..., y_t]``
        and the last position's arg-max becomes ``y_{t+1}``. A sequence that has produced
        ``eos_id`` is finished: the rest of its row is ``pad_id``. Decoding stops when every
        sequence is finished or after ``max_len`` tokens. Call ``model.eval()`` first, or
        dropout makes the choices random. Runs without gradients (in inference mode),
        with the decoder's attention weights stacked once for the call
        (:meth:`mhsa.MultiHeadAttention.pack_projections`): faster, equal up to float
        rounding.

        With ``use_cache`` each decoder layer keeps the keys and values of the tokens
        already read in a :class:`mhsa.KVCache` (allocated once, for ``max_len``
        positions), and each step runs the decoder on the newest token only: faster
        (chapter 9 measures it), and the same logits up to float rounding, so the same
        tokens unless two top logits are closer than that rounding (about 1e-5 in
        float32; in bfloat16 or float16 the tokens can diverge, see
        :meth:`mhsa.CausalLM.generate`). Inside :func:`mhsa.record_attention` the decoder's
        weights then have one query row.

        Args:
            src: source ids ``[batch, n_src]``.
            bos_id: begin-of-sequence id fed first (not returned).
            eos_id: end-of-sequence id (returned, then padding).
            max_len: most tokens to generate per sequence, ``eos`` included, ``int >= 1``.
            use_cache: decode with one :class:`mhsa.KVCache` per decoder layer.

        Returns:
            integer tensor ``[batch, n_out]``, ``n_out <= max_len``, without ``bos``.

        Raises:
            TypeError: ``src`` is not an integer tensor; an id that is not an int.
            ValueError: ``src`` is not 2-D; ``max_len`` is below 1 (not an int: ``TypeError``).
        """
        return generation.greedy_decode(self, src, bos_id=bos_id, eos_id=eos_id,
                                        max_len=max_len, use_cache=use_cache)


def _final_norm(norm_first, embed_dim, eps, device, dtype):
    return nn.LayerNorm(embed_dim, eps=eps, device=device, dtype=dtype) if norm_first else None


def _check_ids(name: str, ids) -> None:
    check_int_tensor(name, ids, "an integer tensor of token ids")
    check_rank(name, ids, rank=2, layout="[batch, n] token ids")
