"""A decoder-only language model in the Llama and Mistral shape, built from mhsa's modules.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim, i query positions, j key
positions. Masks are boolean, True = may attend.

Each layer is two pre-norm residual sublayers, and the whole model is a straight line::

    x = embed(ids)                                        # [b, n, e]
    for layer in layers:
        x = x + attn(norm1(x), causal, rotary positions)  # num_kv_heads shared key/value heads
        x = x + feed_forward(norm2(x))                    # SwiGLU
    logits = lm_head(norm(x))                             # [b, n, vocab_size]
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from mhsa.attention.multihead import MultiHeadAttention
from mhsa.core._checks import check_bool_mask, check_int, check_int_tensor, check_rank
from mhsa.core._packing import matvec_layout, packed_projections
from mhsa.core.cache import KVCache
from mhsa.core.functional import check_same_device
from mhsa.core.rotary import kept_angles
from mhsa.interop.hf_llama import config_from_hf_llama, copy_hf_llama_weights
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
        qkv_dim: ``num_heads * head_dim`` (default ``embed_dim``).
        rope_base: rotary base ``theta``.
        window: sliding window (``None``: full causal).
        norm_eps: epsilon of both RMSNorms.
        device, dtype: where and in which floating dtype to create the parameters.

    Shape:
        ``x`` ``[batch, n, embed_dim]`` -> ``[batch, n, embed_dim]``.

    Raises:
        TypeError: as :class:`mhsa.MultiHeadAttention` and :class:`mhsa.SwiGLU`.
        ValueError: as :class:`mhsa.MultiHeadAttention` and :class:`mhsa.SwiGLU`.

    Source: Touvron et al. 2023, "LLaMA", section 2.2 (pre-normalization with RMSNorm,
    SwiGLU, rotary embeddings); Zhang & Sennrich 2019, "Root Mean Square Layer
    Normalization"; Jiang et al. 2023, "Mistral 7B", section 2 (sliding window).
    """

    def __init__(self, embed_dim, num_heads, ff_dim, *, num_kv_heads=None, qkv_dim=None,
                 rope_base=10000.0, window=None, norm_eps=1e-6, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.norm1 = nn.RMSNorm(embed_dim, eps=norm_eps, **kw)
        self.attn = MultiHeadAttention(embed_dim, num_heads, num_kv_heads=num_kv_heads,
                                       qkv_dim=qkv_dim, bias=False, rope_base=rope_base,
                                       window=window, **kw)
        self.norm2 = nn.RMSNorm(embed_dim, eps=norm_eps, **kw)
        self.feed_forward = SwiGLU(embed_dim, ff_dim, **kw)

    def forward(self, x, *, attn_mask=None, cache=None, positions=None):
        """``[batch, n, embed_dim] -> [batch, n, embed_dim]``; arguments as in
        :meth:`mhsa.MultiHeadAttention.forward` (always causal)."""
        x = x + self.attn(self.norm1(x), attn_mask=attn_mask, is_causal=True, cache=cache,
                          positions=positions)[0]
        return x + self.feed_forward(self.norm2(x))

    def _forward(self, x, *, attn_mask, cache, angles):
        """:meth:`forward` without checks, rotary angles ``(cos, sin)`` given (from CausalLM)."""
        h = self.norm1(x)
        x = x + self.attn._attend(h, h, h, attn_mask=attn_mask, is_causal=True,
                                  need_weights=False, cache=cache, angles=angles)[0]
        return x + self.feed_forward(self.norm2(x))


class CausalLM(nn.Module):
    r"""Decoder-only language model: token embedding, pre-norm layers, final norm, ``lm_head``.

    The architecture of Llama (and Mistral, with ``window``): RMSNorm before each sublayer,
    causal self-attention with ``num_kv_heads`` key/value heads (multi-head when equal to
    ``num_heads``, grouped-query between, multi-query at 1) and rotary positions, a SwiGLU
    feed-forward network, no biases. :meth:`from_hf_llama` copies a transformers model.

    Args:
        vocab_size: number of token ids, ``int >= 1``.
        embed_dim: width ``e`` of the residual stream.
        num_heads: query heads ``h``.
        ff_dim: hidden width of the SwiGLU network.
        num_layers: number of :class:`mhsa.models.causal_lm.CausalLMLayer`, ``int >= 1``.
        num_kv_heads: key/value heads; must divide ``num_heads`` (default ``num_heads``).
        qkv_dim: ``num_heads * head_dim`` (default ``embed_dim``).
        rope_base: rotary base ``theta`` (``rope_theta``), ``> 0``.
        window: sliding-window length (each query sees itself and ``window - 1`` keys
            before it), or ``None`` for full causal attention.
        norm_eps: epsilon of every RMSNorm, ``> 0``.
        tie_embeddings: ``lm_head`` shares its weight with the token embedding.
        device, dtype: where and in which floating dtype to create the parameters.

    Attributes:
        embed: ``nn.Embedding(vocab_size, embed_dim)``.
        layers: ``nn.ModuleList`` of :class:`mhsa.models.causal_lm.CausalLMLayer`.
        norm: ``nn.RMSNorm``.
        lm_head: ``nn.Linear(embed_dim, vocab_size, bias=False)``.

    Raises:
        TypeError: a size that is not an int, ``norm_eps`` not a number, or
            ``tie_embeddings`` not a bool.
        ValueError: a size below 1, ``norm_eps <= 0``, or what
            :class:`mhsa.MultiHeadAttention` refuses (``num_kv_heads`` not dividing
            ``num_heads``, a bad ``window`` or ``rope_base``).

    Example::

        >>> model = CausalLM(1000, 256, 8, 688, 4, num_kv_heads=2)
        >>> ids = torch.randint(1000, (1, 16))
        >>> model(ids).shape, model.generate(ids, 8).shape
        (torch.Size([1, 16, 1000]), torch.Size([1, 24]))

    Source: Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models",
    section 2.2; Jiang et al. 2023, "Mistral 7B", section 2; Ainslie et al. 2023, "GQA"
    (grouped-query attention); Shazeer 2019, "Fast Transformer Decoding" (multi-query).
    """

    def __init__(self, vocab_size, embed_dim, num_heads, ff_dim, num_layers, *,
                 num_kv_heads=None, qkv_dim=None, rope_base=10000.0, window=None,
                 norm_eps=1e-6, tie_embeddings=False, device=None, dtype=None):
        super().__init__()
        for name, n in (("vocab_size", vocab_size), ("embed_dim", embed_dim),
                        ("num_layers", num_layers)):
            check_int(name, n)
        if isinstance(norm_eps, bool) or not isinstance(norm_eps, (int, float)):
            raise TypeError(f"`norm_eps` must be a number, got {type(norm_eps).__name__}")
        if norm_eps <= 0:
            raise ValueError(f"`norm_eps` must be > 0, got {norm_eps}")
        if not isinstance(tie_embeddings, bool):
            raise TypeError(f"`tie_embeddings` must be a bool, got "
                            f"{type(tie_embeddings).__name__}")
        kw = {"device": device, "dtype": dtype}
        self.vocab_size, self.tie_embeddings = vocab_size, tie_embeddings
        self.embed = nn.Embedding(vocab_size, embed_dim, **kw)
        self.layers = nn.ModuleList(
            CausalLMLayer(embed_dim, num_heads, ff_dim, num_kv_heads=num_kv_heads,
                          qkv_dim=qkv_dim, rope_base=rope_base, window=window,
                          norm_eps=norm_eps, **kw)
            for _ in range(num_layers))
        self.norm = nn.RMSNorm(embed_dim, eps=norm_eps, **kw)
        self.lm_head = nn.Linear(embed_dim, vocab_size, bias=False, **kw)
        if tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self._packed_lm_head = None  # lm_head's weight in matvec layout, inside generate

    def forward(self, ids: torch.Tensor, *, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Next-token logits at every position: position ``t`` reads tokens ``0..t``.

        Args:
            ids: token ids ``[batch, n]``, an integer tensor (int64 as from a tokenizer),
                each in ``[0, vocab_size)``. Positions are ``0 .. n-1``: pad on the right.
            attn_mask: optional torch.bool mask broadcastable to
                ``[batch, num_heads, n, n]``, **True = may attend**, combined with the causal
                (or sliding-window) mask by logical AND; e.g. ``mhsa.padding_mask(lengths, n)``
                ``[batch, 1, 1, n]``.

        Returns:
            logits ``[batch, n, vocab_size]`` in the model's dtype.

        Raises:
            TypeError: ``ids`` is not an integer tensor; ``attn_mask`` is not torch.bool.
            ValueError: ``ids`` is not 2-D or has no token; ``attn_mask`` does not
                broadcast to ``[batch, num_heads, n, n]``. (An id outside the vocabulary
                raises ``IndexError`` in ``nn.Embedding``; no check reads tensor values.)
        """
        _check_ids(ids)
        if attn_mask is not None:  # checked here once; the layers do not check again
            n = ids.shape[1]
            heads = self.layers[0].attn.num_heads
            check_bool_mask("attn_mask", attn_mask, (ids.shape[0], heads, n, n))
            check_same_device("attn_mask", attn_mask, ids)
        return self._logits(ids, attn_mask=attn_mask)

    def _logits(self, ids, *, attn_mask=None, caches=None, last_only=False, angles=None):
        """Logits of ``ids`` [b, n]; with ``caches`` (one per layer), ``ids`` continue them.

        ``angles``: the rotary ``(cos, sin)`` ``[n, head_dim]`` of the positions of ``ids``,
        shared by every layer; computed here when not given.
        """
        if angles is None:
            start = 0 if caches is None else len(caches[0])
            angles = self._rotary_angles(start, start + ids.shape[1], ids.device)
        x = self.embed(ids)  # [b, n, e]
        for k, layer in enumerate(self.layers):
            x = layer._forward(x, attn_mask=attn_mask, angles=angles,
                               cache=None if caches is None else caches[k])
        if last_only:
            x = x[:, -1:]  # generation reads only the last position's logits
        if self._packed_lm_head is not None:
            return F.linear(self.norm(x), self._packed_lm_head)  # [b, n, vocab_size]
        return self.lm_head(self.norm(x))  # [b, n, vocab_size]

    def _rotary_angles(self, start, stop, device):
        """The rotary ``(cos, sin)`` ``[stop - start, head_dim]`` of positions ``start..stop-1``
        (every layer rotates the same way), or None without rotary positions."""
        attn = self.layers[0].attn
        if attn.rope_base is None:
            return None
        positions = torch.arange(start, stop, device=device)
        return kept_angles(positions, attn.head_dim, attn.rope_base, self.embed.weight.dtype)

    @torch.inference_mode()
    def generate(self, ids: torch.Tensor, max_new_tokens: int, *,
                 use_cache: bool = True) -> torch.Tensor:
        """Greedy decoding: append the most likely next token ``max_new_tokens`` times.

        With the cache (one :class:`mhsa.KVCache` per layer), the prompt is read once and
        each step reads only the newest token; without it, each step reads the whole
        sequence again. The caches are allocated once, for the ``n + max_new_tokens - 1``
        positions read (the last new token is never read); with a ``window``, for at most
        ``max(n, 2 * window)`` positions, which the window's cache reuses. No
        end-of-sequence handling: exactly ``max_new_tokens`` are produced. For the length
        of the call, the rotary angles of every position are computed once and the
        projections are packed (:meth:`mhsa.MultiHeadAttention.pack_projections`,
        :meth:`mhsa.SwiGLU.pack_projections`): faster, equal up to float rounding.

        Cached and uncached decoding compute the same logits with matrices of other
        shapes, so they are equal up to float rounding: in float32 within 1e-5 (measured:
        at most 5e-6, for logits up to 5 in size, on the 4-layer, 256-wide model of
        ``benchmarks/bench_generate.py``). The tokens are then the same unless the two
        largest logits of a step are closer than that. In bfloat16 or float16 the
        rounding is about 1e-2 (bfloat16) or 1e-3 (float16), and the tokens can and do
        diverge (those of transformers' cached and uncached generation too).

        Args:
            ids: prompt ``[batch, n]``, integer tensor, ``n >= 1``.
            max_new_tokens: how many tokens to append, ``int >= 0``.
            use_cache: decode with key-value caches (fast) or recompute (slow).

        Returns:
            ``[batch, n + max_new_tokens]``, ``ids``'s dtype: the prompt, then the new tokens.

        Raises:
            TypeError: ``ids`` is not an integer tensor, ``max_new_tokens`` not an int, or
                ``use_cache`` not a bool.
            ValueError: ``ids`` is not 2-D or has no token; ``max_new_tokens < 0``.
        """
        _check_ids(ids)
        max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=0)
        if not isinstance(use_cache, bool):
            raise TypeError(f"`use_cache` must be a bool, got {type(use_cache).__name__}")
        n = ids.shape[1]
        out = ids.new_empty(ids.shape[0], n + max_new_tokens)  # written in place
        out[:, :n] = ids
        read, window = n + max_new_tokens - 1, self.layers[0].attn.window  # the last is not read
        if window is not None:  # its kept part moves to the buffers' front: bounded, allocated once
            read = min(read, max(n, 2 * window))
        caches = [KVCache(capacity=max(read, 1)) for _ in self.layers] if use_cache else None
        table = self._rotary_angles(0, n + max_new_tokens, ids.device)  # built once per call
        with _packed_projections(self):  # q/k/v and gate/up: one matrix product each
            for t in range(n, n + max_new_tokens):
                start = len(caches[0]) if use_cache else 0  # cached: only the tokens not yet read
                angles = None if table is None else (table[0][start:t], table[1][start:t])
                logits = self._logits(out[:, start:t], caches=caches, last_only=True,
                                      angles=angles)
                out[:, t] = logits[:, -1].argmax(dim=-1)
        return out

    @classmethod
    def from_hf_llama(cls, model) -> "CausalLM":
        """A copy of a transformers ``LlamaForCausalLM`` or ``MistralForCausalLM``, same weights.

        Reads from ``model.config``: sizes, ``num_key_value_heads``, ``head_dim`` (mapped
        onto ``qkv_dim = num_heads * head_dim``), the rope theta (``rope_parameters`` in
        transformers 5.x), ``rms_norm_eps``, ``sliding_window`` (Mistral only, whose config
        defaults to 4096; a Llama config may carry the key, but transformers' Llama ignores
        it, and so does this copy) and ``tie_word_embeddings``. transformers is not imported: any
        object with that config and those submodules works. The copy has the model's
        device and dtype, and is in eval mode.

        Args:
            model: a ``LlamaForCausalLM`` or ``MistralForCausalLM``.

        Returns:
            a :class:`CausalLM` whose logits equal the model's (float32: within 1e-4).

        Raises:
            TypeError: ``model`` is not a transformers Llama or Mistral causal LM.
            ValueError: an architecture this class cannot represent: a rope type other
                than ``"default"``, attention or MLP biases, an activation other than SiLU, or
                attention dropout.
        """
        config = config_from_hf_llama(model)
        weight = model.lm_head.weight
        ours = cls(**config, device=weight.device, dtype=weight.dtype)
        copy_hf_llama_weights(ours, model)
        return ours.eval()


@contextlib.contextmanager
def _packed_projections(model):
    """Within: every layer's q/k/v and gate/up weights stacked, and the weights in
    ``mhsa.core._packing.matvec_layout``; built once, dropped after."""
    modules = [m for layer in model.layers for m in (layer.attn, layer.feed_forward)]
    try:
        with packed_projections(modules):
            model._packed_lm_head = matvec_layout(model.lm_head.weight)
            yield
    finally:
        model._packed_lm_head = None


def _check_ids(ids) -> None:
    check_int_tensor("ids", ids, "an integer tensor [batch, n] of token ids")
    check_rank("ids", ids, rank=2, layout="[batch, n]")
    if ids.shape[1] == 0:
        raise ValueError(f"`ids` must hold at least one token, got shape {tuple(ids.shape)}")
