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

import functools

import torch
import torch.nn.functional as F
from torch import nn

from mhsa.attention.latent import MultiHeadLatentAttention
from mhsa.core._checks import (
    check_bool_mask,
    check_divisible,
    check_int,
    check_int_tensor,
    check_rank,
    check_same_device,
)
from mhsa.core._packing import matvec_layout
from mhsa.core.rotary import RotaryAngles, check_positions, depends_on_length
from mhsa.interop.hf_causal_lm import config_from_hf, copy_hf_weights
from mhsa.interop.hf_llama import config_from_hf_llama, copy_hf_llama_weights
from mhsa.layers.decoder_only import CausalLMLayer
from mhsa.models import generation


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
        num_layers: number of ``mhsa.layers.CausalLMLayer``, ``int >= 1``.
        num_kv_heads: key/value heads; must divide ``num_heads`` (default ``num_heads``).
        qkv_dim: ``num_heads * head_dim`` (default ``embed_dim``).
        rope_base: rotary base ``theta`` (``rope_theta``), ``> 0``.
        rope_scaling: None, or the scaling of the rotary positions for sequences longer
            than the training length (linear, dynamic NTK, YaRN, Llama 3.1): a dict with
            transformers' keys, see :class:`mhsa.GroupedQueryAttention` and
            ``mhsa.core.rotary.rotary_frequencies``.
        window: sliding-window length (each query sees itself and ``window - 1`` keys
            before it), or ``None`` for full causal attention.
        norm_eps: epsilon of every RMSNorm, ``> 0``.
        tie_embeddings: ``lm_head`` shares its weight with the token embedding.
        attention: the causal attention variant of every layer, a name in
            ``mhsa.attention.CAUSAL_ATTENTION`` (default ``"grouped_query"``:
            :class:`mhsa.GroupedQueryAttention`), or a callable with no arguments that
            returns a new attention module of width ``embed_dim`` for each layer, e.g.
            ``lambda: mhsa.MultiHeadLatentAttention(embed_dim, num_heads, ...)``; then
            ``num_kv_heads``, ``qkv_dim``, ``window`` and ``rope_scaling`` stay None (the
            callable decides) and ``rope_base`` is not read.
        device, dtype: where and in which floating dtype to create the parameters.

    Attributes:
        embed: ``nn.Embedding(vocab_size, embed_dim)``.
        layers: ``nn.ModuleList`` of ``mhsa.layers.CausalLMLayer``.
        norm: ``nn.RMSNorm``.
        lm_head: ``nn.Linear(embed_dim, vocab_size, bias=False)``.

    Raises:
        TypeError: a size that is not an int, ``norm_eps`` not a number, or
            ``tie_embeddings`` not a bool.
        ValueError: a size below 1, ``norm_eps <= 0``, ``qkv_dim`` not divisible by
            ``num_heads``, an ``attention`` name that is not registered, or what
            :class:`mhsa.GroupedQueryAttention` refuses (``num_kv_heads`` not dividing
            ``num_heads``, a bad ``window``, ``rope_base`` or ``rope_scaling``); a callable
            ``attention`` with ``num_kv_heads``, ``qkv_dim``, ``window`` or ``rope_scaling``,
            or one that returns no attention module of width ``embed_dim`` (``TypeError``).

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
                 num_kv_heads=None, qkv_dim=None, rope_base=10000.0, rope_scaling=None,
                 window=None, norm_eps=1e-6, tie_embeddings=False, attention="grouped_query",
                 device=None, dtype=None):
        super().__init__()
        for name, n in (("vocab_size", vocab_size), ("embed_dim", embed_dim),
                        ("num_heads", num_heads), ("num_layers", num_layers)):
            check_int(name, n)
        if isinstance(norm_eps, bool) or not isinstance(norm_eps, (int, float)):
            raise TypeError(f"`norm_eps` must be a number, got {type(norm_eps).__name__}")
        if norm_eps <= 0:
            raise ValueError(f"`norm_eps` must be > 0, got {norm_eps}")
        if not isinstance(tie_embeddings, bool):
            raise TypeError(f"`tie_embeddings` must be a bool, got "
                            f"{type(tie_embeddings).__name__}")
        head_dim = None
        if qkv_dim is not None:
            check_int("qkv_dim", qkv_dim)
            check_divisible("qkv_dim", qkv_dim, "num_heads", num_heads)
            head_dim = qkv_dim // num_heads
        kw = {"device": device, "dtype": dtype}
        self.vocab_size, self.tie_embeddings = vocab_size, tie_embeddings
        self.embed = nn.Embedding(vocab_size, embed_dim, **kw)
        self.layers = nn.ModuleList(
            CausalLMLayer(embed_dim, num_heads, ff_dim, num_kv_heads=num_kv_heads,
                          head_dim=head_dim, rope_base=rope_base, rope_scaling=rope_scaling,
                          window=window, norm_eps=norm_eps, attention=attention, **kw)
            for _ in range(num_layers))
        self.norm = nn.RMSNorm(embed_dim, eps=norm_eps, **kw)
        self.lm_head = nn.Linear(embed_dim, vocab_size, bias=False, **kw)
        if tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self._packed_lm_head = None  # lm_head's weight in matvec layout, see pack_projections
        self._angle_table = None  # RotaryAngles of positions 0, 1, ..., see _rotary_angles
        # dynamic NTK: a position's angles depend on the call's length, so no table
        self._table_of_angles = not depends_on_length(rope_scaling)  # checked by the layers

    def forward(self, ids: torch.Tensor, *, attn_mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None, cache: list | None = None,
                last_only: bool = False) -> torch.Tensor:
        """Next-token logits at every position: position ``t`` reads tokens ``0..t``.

        The model's one checked edge: it checks its inputs here, computes the rotary angles
        once, and hands them to every layer through public arguments.

        Args:
            ids: token ids ``[batch, n]``, an integer tensor (int64 as from a tokenizer),
                each in ``[0, vocab_size)``.
            attn_mask: optional torch.bool mask broadcastable to
                ``[batch, num_heads, n, n_k]`` (``n_k = n`` plus the positions the
                ``cache`` holds), **True = may attend**, combined with the causal (or
                sliding-window) mask by logical AND; e.g. ``mhsa.padding_mask(lengths, n)``
                ``[batch, 1, 1, n]``.
            positions: the positions of the ``n`` tokens, integer ``[n]`` or
                ``[batch, n]`` (left-padded rows start later); default
                ``len(cache[0]) + arange(n)``, or ``arange(n)`` without a cache.
            cache: optional list from :meth:`new_cache`, one cache per layer, holding the
                positions before ``ids``; the new keys and values are appended.
            last_only: compute the logits of the last position only (decoding).

        Returns:
            logits ``[batch, n, vocab_size]`` (``[batch, 1, vocab_size]`` with
            ``last_only``) in the model's dtype.

        Raises:
            TypeError: ``ids`` or ``positions`` is not an integer tensor; ``attn_mask`` is
                not torch.bool.
            ValueError: ``ids`` is not 2-D or has no token; ``attn_mask`` does not
                broadcast; ``positions`` is not ``[n]`` or ``[batch, n]``; ``cache`` is not
                a list of one cache per layer. (An id outside the vocabulary raises
                ``IndexError`` in ``nn.Embedding``; no check reads tensor values.)
        """
        _check_ids(ids)
        b, n = ids.shape
        if cache is not None and (not isinstance(cache, list) or len(cache) != len(self.layers)):
            raise ValueError(f"`cache` must be a list of {len(self.layers)} caches (one per "
                             f"layer, from new_cache()), got {type(cache).__name__}"
                             + (f" of {len(cache)}" if isinstance(cache, list) else ""))
        n_cached = 0 if cache is None else len(cache[0])
        if attn_mask is not None:
            heads = self.layers[0].attn.num_heads
            check_bool_mask("attn_mask", attn_mask, (b, heads, n, n_cached + n))
            check_same_device("attn_mask", attn_mask, ids, "ids")
        if positions is not None:
            check_positions(positions, n, ids.device, batch=b)
        angles = self._rotary_angles(positions, n_cached, n)  # once, for every layer
        x = self.embed(ids)  # [b, n, e]
        for k, layer in enumerate(self.layers):
            x = layer(x, attn_mask=attn_mask, positions=angles,
                      cache=None if cache is None else cache[k])
        if last_only:
            x = x[:, -1:]  # decoding reads only the last position's logits
        if self._packed_lm_head is not None:
            return F.linear(self.norm(x), self._packed_lm_head)  # [b, n, vocab_size]
        return self.lm_head(self.norm(x))  # [b, n, vocab_size]

    def _rotary_angles(self, positions, start: int, n: int):
        """The layers' rotary angles for ``positions`` (default ``start .. start + n - 1``).

        The default positions are read from a table of every position so far, kept between
        calls and doubled when outgrown: a decoding step slices one row of it instead of
        computing angles. Not with dynamic NTK scaling, whose angles depend on the length of
        the call. None without rotary positions.
        """
        attn = self.layers[0].attn
        if positions is not None or torch.compiler.is_compiling() or not self._table_of_angles:
            return attn.rotary_angles(positions, start=start, n=n)
        table, weight = self._angle_table, self.embed.weight
        if table is None or len(table.cos) < start + n or table.cos.dtype != weight.dtype \
                or table.cos.device != weight.device:
            with torch.inference_mode(False), torch.no_grad():  # a normal tensor: autograd may
                table = attn.rotary_angles(start=0, n=max(2 * (start + n), 64))  # save it
            if table is None:
                return None
            self._angle_table = table
        return RotaryAngles(table.cos[start:start + n], table.sin[start:start + n])

    def new_cache(self, *, capacity: int | None = None) -> list:
        """One empty cache per layer, from each attention module's ``new_cache``.

        Args:
            capacity: positions to allocate at the first write (see :class:`mhsa.KVCache`).

        Returns:
            a list of ``num_layers`` caches, for :meth:`forward`'s ``cache``.
        """
        return [layer.attn.new_cache(capacity=capacity) for layer in self.layers]

    def pack_projections(self, packed: bool = True) -> None:
        """Stack every layer's projections and lay ``lm_head`` out for decoding, or undo it.

        Calls ``pack_projections`` of every attention and feed-forward module (see
        :meth:`mhsa.GroupedQueryAttention.pack_projections`). Inference only; the decoding
        loop of :meth:`generate` packs for the length of a call.
        """
        for layer in self.layers:
            layer.attn.pack_projections(packed)
            layer.feed_forward.pack_projections(packed)
        with torch.no_grad():
            self._packed_lm_head = matvec_layout(self.lm_head.weight) if packed else None

    def __getstate__(self):
        """Copies and pickles never inherit a packed ``lm_head`` or the table of angles."""
        return {**self.__dict__, "_packed_lm_head": None, "_angle_table": None}

    def generate(self, ids: torch.Tensor, max_new_tokens: int, *, attention_mask=None,
                 eos_token_id: int | None = None, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None,
                 generator: torch.Generator | None = None,
                 use_cache: bool = True) -> torch.Tensor:
        """Append up to ``max_new_tokens`` tokens to each row of ``ids``.

        With the cache (:meth:`new_cache`, one per layer) the prompt is read once and each
        step reads only the newest token; without it, each step reads the whole sequence
        again. The caches are allocated once, for the ``n + max_new_tokens - 1`` positions read
        (the last new token is never read; a windowed cache keeps at most twice its window).
        For the length of the call the model's projections are packed
        (:meth:`pack_projections`): faster, equal up to float rounding. The loop lives in
        ``mhsa.models.generation``, decoding's one home, with that of
        :meth:`mhsa.EncoderDecoder.greedy_decode`.

        A left-padded batch with its ``attention_mask`` gives each row the tokens it gets
        alone: padding is masked out as keys, and positions follow the mask (a row's first
        token is at position 0), as transformers' ``generate`` computes them. Without the mask
        every token is a real token.

        Cached and uncached decoding compute the same logits with matrices of other shapes,
        so they are equal up to float rounding: in float32 within 1e-5 (measured: at most
        5e-6, for logits up to 5 in size, on the 4-layer, 256-wide model of
        ``benchmarks/bench_generate.py``). Greedy tokens are then the same unless the two
        largest logits of a step are closer than that. In bfloat16 or float16 the rounding is
        about 1e-2 (bfloat16) or 1e-3 (float16), and the tokens can and do diverge (those of
        transformers' cached and uncached generation too). With dynamic NTK scaling
        (``rope_scaling``) the two differ past the training length by design: each step
        rotates with the frequencies of its own length, and the cached keys keep theirs.

        Args:
            ids: prompt ``[batch, n]``, integer tensor, ``n >= 1``.
            max_new_tokens: most tokens to append, ``int >= 0``.
            attention_mask: optional ``[batch, n]``, torch.bool or integer 0/1: True (1) for a
                token, False (0) for padding (the course's polarity: True = may attend).
            eos_token_id: a row that produces it is finished: its later tokens are this id.
                Decoding stops early when every row is finished. None: never.
            temperature: 0 (default) is greedy, the arg-max at each step; ``> 0`` samples from
                ``softmax(logits / temperature)``.
            top_k: sample only among the ``top_k`` most likely tokens
                (``mhsa.models.generation.top_k_filter``).
            top_p: sample only among the most likely tokens that hold ``top_p`` of the
                probability (``mhsa.models.generation.top_p_filter``).
            generator: the ``torch.Generator`` that sampling draws from: seeded, the same
                tokens every run.
            use_cache: decode with key-value caches (fast) or recompute (slow).

        Returns:
            ``[batch, n + m]``, ``ids``'s dtype, ``m <= max_new_tokens``: the prompt, then the new
            tokens (``m < max_new_tokens`` only when every row reached ``eos_token_id``).

        Raises:
            TypeError: ``ids`` is not an integer tensor; ``max_new_tokens``, ``top_k`` or
                ``eos_token_id`` not an int; ``temperature`` or ``top_p`` not a number;
                ``use_cache`` not a bool; ``attention_mask`` not a bool or integer tensor;
                ``generator`` not a ``torch.Generator``.
            ValueError: ``ids`` is not 2-D or has no token; ``max_new_tokens < 0``;
                ``temperature < 0``; ``top_k < 1``; ``top_p`` outside ``(0, 1]``;
                ``attention_mask`` not ``[batch, n]``; ``top_k``/``top_p`` with
                ``temperature == 0`` (greedy ignores them: say what you mean).

        Source: Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"
        (autoregressive decoding); Holtzman et al. 2020 (top-p); Fan et al. 2018 (top-k);
        transformers' ``GenerationMixin`` (positions of left-padded rows).
        """
        return generation.generate(
            self, ids, max_new_tokens, attention_mask=attention_mask,
            eos_token_id=eos_token_id, temperature=temperature, top_k=top_k, top_p=top_p,
            generator=generator, use_cache=use_cache)

    @classmethod
    def from_hf(cls, model) -> "CausalLM":
        """A copy of a transformers Llama, Mistral, Qwen3 or DeepSeek-V3 causal LM, same weights.

        Llama and Mistral as :meth:`from_hf_llama`; Qwen3 with
        :class:`mhsa.QKNormAttention` in every layer (``attention="qk_norm"``, the norms'
        epsilon copied); DeepSeek-V3 with :class:`mhsa.MultiHeadLatentAttention` in every
        layer (built by a callable ``attention``). Rope scaling as :meth:`from_hf_llama`
        (DeepSeek-V3: none). transformers is not imported: any object with that class name,
        config and submodules works. The copy has the model's device and dtype and is in
        eval mode.

        Args:
            model: a ``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen3ForCausalLM`` or
                ``DeepseekV3ForCausalLM`` whose layers are all dense.

        Returns:
            a :class:`CausalLM` whose logits equal the model's (float32: within 1e-4), with
            and without the cache.

        Raises:
            TypeError: ``model`` is none of those classes.
            ValueError: what ``mhsa.interop.hf_causal_lm.config_from_hf`` refuses:
                mixture-of-experts layers (DeepSeek-V3 past ``first_k_dense_replace``),
                biases, an activation other than SiLU, attention dropout, a rope type
                mhsa does not scale, Qwen3 with sliding layers among full ones.
        """
        config = config_from_hf(model)
        latent = config.pop("latent", None)
        weight = model.lm_head.weight
        kw = {"device": weight.device, "dtype": weight.dtype}
        if latent is not None:
            config["attention"] = functools.partial(MultiHeadLatentAttention, **latent, **kw)
        ours = cls(**config, **kw)
        copy_hf_weights(ours, model)
        return ours.eval()

    @classmethod
    def from_hf_llama(cls, model) -> "CausalLM":
        """A copy of a transformers ``LlamaForCausalLM`` or ``MistralForCausalLM``, same weights.

        Reads from ``model.config``: sizes, ``num_key_value_heads``, ``head_dim`` (mapped
        onto ``qkv_dim = num_heads * head_dim``), the rope theta and scaling
        (``rope_parameters`` in transformers 5.x: rope types default, linear, dynamic, yarn
        and llama3, see ``mhsa.interop.hf_llama.rope_from_hf``), ``rms_norm_eps``,
        ``sliding_window`` (Mistral only, whose config defaults to 4096; a Llama config may
        carry the key, but transformers' Llama ignores it, and so does this copy) and
        ``tie_word_embeddings``. transformers is not imported: any object with that config
        and those submodules works. The copy has the model's device and dtype, and is in
        eval mode.

        Dynamic NTK: transformers' rotary module keeps the frequencies of the longest call so
        far until a call shorter than ``max_position_embeddings`` resets them; this copy
        keeps nothing and computes each call's frequencies from that call's longest
        position. The two agree call by call when the model is fresh (or was reset) and
        calls do not get shorter beyond ``max_position_embeddings``, as in ``generate``
        with or without the cache. Cached and uncached decoding differ from each other
        beyond that length, in both (the cached keys keep the frequencies they were rotated
        with).

        Args:
            model: a ``LlamaForCausalLM`` or ``MistralForCausalLM``.

        Returns:
            a :class:`CausalLM` whose logits equal the model's (float32: within 1e-4).

        Raises:
            TypeError: ``model`` is not a transformers Llama or Mistral causal LM.
            ValueError: an architecture this class cannot represent: a rope type other
                than default, linear, dynamic, yarn and llama3 (longrope, say), a
                ``partial_rotary_factor`` below 1, attention or MLP biases, an activation
                other than SiLU, or attention dropout.
        """
        config = config_from_hf_llama(model)
        weight = model.lm_head.weight
        ours = cls(**config, device=weight.device, dtype=weight.dtype)
        copy_hf_llama_weights(ours, model)
        return ours.eval()


def _check_ids(ids) -> None:
    check_int_tensor("ids", ids, "an integer tensor [batch, n] of token ids")
    check_rank("ids", ids, rank=2, layout="[batch, n]")
    if ids.shape[1] == 0:
        raise ValueError(f"`ids` must hold at least one token, got shape {tuple(ids.shape)}")
