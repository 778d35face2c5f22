"""Multi-head latent attention: the keys and values of every head from one cached latent.

Legend: b batch, n tokens, h heads, d head_dim (of the part named), e embed_dim, i query
positions, j key positions; c kv_lora_rank (the latent's width), f the query projection's
input width (q_lora_rank, or embed_dim without query compression). Masks are boolean,
True = may attend.
"""

import math

import torch
import torch.nn.functional as F
from einops import einsum, rearrange
from torch import nn

from mhsa.attention.base import Attention
from mhsa.core._checks import (
    check_bool_mask,
    check_int,
    check_positive_int,
    check_same_device,
    check_same_dtype_and_device,
    check_shape,
    check_tensor,
    kind_of,
)
from mhsa.core._packing import matvec_layout
from mhsa.core.functional import combine_masks, fused_attention, scaled_dot_product_attention
from mhsa.core.heads import merge_heads, repeat_kv_heads, split_heads
from mhsa.core.rotary import (
    RotaryAngles,
    check_positions,
    check_rope_scaling,
    kept_angles,
    rotary_angles,
    rotate,
    yarn_mscale,
)
from mhsa.interop.hf_deepseek import config_from_hf_deepseek_attention, copy_hf_deepseek_attention


class MultiHeadLatentAttention(Attention):
    r"""Causal self-attention whose keys and values are decompressed from a small latent (MLA).

    Each token is compressed to a latent ``c_t = RMSNorm(W_DKV x_t)`` of width
    ``kv_lora_rank`` and one rotary key ``k^R_t = RoPE(W_KR x_t)`` of width
    ``qk_rope_head_dim`` shared by all heads. Head ``h`` reads::

        k_h = [W_UK,h c ; k^R]         v_h = W_UV,h c         q_h = [q^C_h ; RoPE(q^R_h)]
        head_h = softmax(q_h k_h^T / sqrt(qk_nope_head_dim + qk_rope_head_dim) + causal) v_h

    where the queries come from ``x`` (``q_lora_rank=None``) or from their own latent
    ``RMSNorm(W_DQ x)``. The cache (:meth:`new_cache`, a :class:`LatentCache`) keeps only
    ``c`` and ``k^R``: ``kv_lora_rank + qk_rope_head_dim`` numbers per token, instead of
    ``2 * num_heads * head_dim`` for a :class:`mhsa.KVCache` of as many heads.

    Two forms, equal up to float rounding. The plain one (default) decompresses every
    head's keys and values. The absorbed one (:meth:`pack_projections`, what inference
    engines run to decode) folds ``W_UK`` into the queries and ``W_UV`` into the output
    projection, so the queries meet the latent directly, as multi-query attention with one
    key/value head: ``q_h k_h^T = (W_UK,h^T q^C_h)^T c + q^R_h k^R`` and
    ``W_O [W_UV,h (weights c)] = (W_O,h W_UV,h) (weights c)``.

    Long context (``rope_scaling``, DeepSeek-V2 and V3's YaRN): only the rotary parts
    change, as in DeepSeek's code and transformers'. Their angles use the scaled inverse
    frequencies of ``mhsa.core.rotary.rotary_frequencies`` and their ``cos`` and ``sin``
    are multiplied by its attention factor (the ratio ``yarn_mscale(s, mscale) /
    yarn_mscale(s, mscale_all_dim)``, 1 in DeepSeek-V3's released config), so the rotary
    part of each score scales by its square; and with ``mscale_all_dim`` set the softmax
    scale of every score is multiplied by ``yarn_mscale(s, mscale_all_dim) ** 2``
    (``mhsa.core.rotary.yarn_mscale``: ``0.1 * mscale_all_dim * ln(s) + 1``). The cache
    keeps the rotary keys rotated with those angles; the absorbed form folds the softmax
    scale into its query matrix as before.

    Args:
        embed_dim: width ``e`` of the input and of the output.
        num_heads: heads ``h``.
        q_lora_rank: width of the query latent, or None for one query projection from
            ``x`` (DeepSeek-V2-Lite).
        kv_lora_rank: width ``c`` of the cached latent.
        qk_nope_head_dim: width of each head's query/key part without positions.
        qk_rope_head_dim: width of the rotary part (queries per head, one shared key); even.
        v_head_dim: width of each head's values.
        rope_base: rotary base ``theta`` (transformers' ``rope_theta``), ``> 0`` (``> 1``
            with YaRN).
        rope_scaling: None, or how to scale the rotary positions for sequences longer than
            the training length: a dict with transformers' keys (``rope_parameters``
            without ``rope_theta``), e.g. DeepSeek-V3's ``{"rope_type": "yarn", "factor":
            40, "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
            "mscale": 1.0, "mscale_all_dim": 1.0}``; the types and keys of
            ``mhsa.core.rotary.check_rope_scaling`` (linear, dynamic, yarn, llama3), as
            :class:`mhsa.GroupedQueryAttention` reads them (dynamic NTK: each call's
            length, so cached and full passes differ past the training length).
        device, dtype: where and in which floating dtype to create the parameters.

    Attributes:
        q_proj: ``nn.Linear(e, h * (qk_nope_head_dim + qk_rope_head_dim))`` without
            query compression, else None.
        q_a_proj: ``nn.Linear(e, q_lora_rank)`` (``W_DQ``) with query compression, else None.
        q_a_norm: ``nn.RMSNorm(q_lora_rank, eps=1e-6)`` of the query latent, or None.
        q_b_proj: ``nn.Linear(q_lora_rank, h * (qk_nope_head_dim + qk_rope_head_dim))``
            (``W_UQ`` and ``W_QR``, per head: the part without positions first), or None.
        kv_a_proj: ``nn.Linear(e, kv_lora_rank + qk_rope_head_dim)`` (``W_DKV`` then ``W_KR``).
        kv_a_norm: ``nn.RMSNorm(kv_lora_rank, eps=1e-6)`` of the latent; set its ``eps`` to
            match a checkpoint.
        kv_b_proj: ``nn.Linear(kv_lora_rank, h * (qk_nope_head_dim + v_head_dim))``
            (``W_UK`` and ``W_UV``, per head: the keys first).
        out_proj: ``nn.Linear(h * v_head_dim, e)``.
        scale: the softmax scale ``(qk_nope_head_dim + qk_rope_head_dim) ** -0.5``, times
            ``yarn_mscale(factor, mscale_all_dim) ** 2`` with a YaRN ``rope_scaling`` that
            sets ``mscale_all_dim``.
        rope_scaling: the checked scaling dict (yarn's defaults filled in), or None.

    No projection has a bias (DeepSeek-V2 and V3 have none).

    Raises:
        TypeError: a size that is not an int (``q_lora_rank`` may be None), ``rope_base``
            not a number, a ``rope_scaling`` that is not a dict or holds a value of the
            wrong type.
        ValueError: a size below 1, an odd ``qk_rope_head_dim``, ``rope_base <= 0`` (or
            ``<= 1`` with YaRN), or a ``rope_scaling`` that
            ``mhsa.core.rotary.check_rope_scaling`` refuses (an unknown type or key, a
            missing key, a value out of range).

    Example::

        >>> attn = MultiHeadLatentAttention(64, 4, q_lora_rank=32, kv_lora_rank=16,
        ...                                 qk_nope_head_dim=16, qk_rope_head_dim=8,
        ...                                 v_head_dim=16)
        >>> cache = attn.new_cache()
        >>> out, _ = attn(torch.randn(2, 5, 64), cache=cache)
        >>> tuple(out.shape), tuple(cache.latent.shape), tuple(cache.rope_key.shape)
        ((2, 5, 64), (2, 5, 16), (2, 5, 8))

    Source: DeepSeek-AI 2024, "DeepSeek-V2", section 2.1 (equations 9-19: low-rank
    key-value compression, decoupled rotary positions, the absorption of ``W_UK`` and
    ``W_UV``), section 3.1.4 (YaRN on the decoupled rotary key only) and appendix C (the
    full formulas of MLA); DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", section 2.1.1
    (the norms of both latents, as in its released code) and section 4.3 (YaRN, ``sqrt(t)
    = 0.1 ln(s) + 1``); Peng et al. 2023, "YaRN", sections 3.2 and 3.4 (the scaled
    frequencies and the temperature).
    """

    def __init__(self, embed_dim, num_heads, *, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
                 qk_rope_head_dim, v_head_dim, rope_base=10000.0, rope_scaling=None,
                 device=None, dtype=None):
        super().__init__()
        sizes = {"embed_dim": embed_dim, "num_heads": num_heads, "kv_lora_rank": kv_lora_rank,
                 "qk_nope_head_dim": qk_nope_head_dim, "qk_rope_head_dim": qk_rope_head_dim,
                 "v_head_dim": v_head_dim}
        if q_lora_rank is not None:
            sizes["q_lora_rank"] = q_lora_rank
        for name, n in sizes.items():
            check_positive_int(name, n)
        if qk_rope_head_dim % 2:
            raise ValueError(f"rotary positions pair dimensions: `qk_rope_head_dim` "
                             f"({qk_rope_head_dim}) must be even")
        if isinstance(rope_base, bool) or not isinstance(rope_base, (int, float)):
            raise TypeError(f"`rope_base` must be a number, got {kind_of(rope_base)}")
        if rope_base <= 0:
            raise ValueError(f"`rope_base` must be > 0, got {rope_base}")
        self.rope_scaling = check_rope_scaling(rope_scaling, qk_rope_head_dim)
        yarn = self.rope_scaling is not None and self.rope_scaling["rope_type"] == "yarn"
        if yarn and rope_base <= 1:
            raise ValueError(f"YaRN finds its ramp with ln(rope_base): `rope_base` must be > 1 "
                             f"with rope_type 'yarn', got {rope_base}")
        # the scaling as a hashable key of the kept angles (None: the unscaled fast path)
        self._scaling_key = None if self.rope_scaling is None else \
            tuple(sorted(self.rope_scaling.items()))
        self.embed_dim, self.num_heads, self.rope_base = embed_dim, num_heads, float(rope_base)
        self.q_lora_rank, self.kv_lora_rank, self.v_head_dim = q_lora_rank, kv_lora_rank, v_head_dim
        self.qk_nope_head_dim, self.qk_rope_head_dim = qk_nope_head_dim, qk_rope_head_dim
        self.scale = (qk_nope_head_dim + qk_rope_head_dim) ** -0.5
        if yarn and self.rope_scaling.get("mscale_all_dim"):  # DeepSeek's softmax temperature
            self.scale *= yarn_mscale(self.rope_scaling["factor"],
                                      self.rope_scaling["mscale_all_dim"]) ** 2
        kw = {"bias": False, "device": device, "dtype": dtype}
        norm_kw = {"eps": 1e-6, "device": device, "dtype": dtype}
        q_width = num_heads * (qk_nope_head_dim + qk_rope_head_dim)
        compress = q_lora_rank is not None  # queries from their own latent
        self.q_proj = None if compress else nn.Linear(embed_dim, q_width, **kw)
        self.q_a_proj = nn.Linear(embed_dim, q_lora_rank, **kw) if compress else None
        self.q_a_norm = nn.RMSNorm(q_lora_rank, **norm_kw) if compress else None
        self.q_b_proj = nn.Linear(q_lora_rank, q_width, **kw) if compress else None
        self.kv_a_proj = nn.Linear(embed_dim, kv_lora_rank + qk_rope_head_dim, **kw)
        self.kv_a_norm = nn.RMSNorm(kv_lora_rank, **norm_kw)
        self.kv_b_proj = nn.Linear(kv_lora_rank, num_heads * (qk_nope_head_dim + v_head_dim),
                                   **kw)
        self.out_proj = nn.Linear(num_heads * v_head_dim, embed_dim, **kw)
        self._packed = None  # (absorbed query weight, absorbed output weight) while packed

    def forward(self, x, *, attn_mask=None, cache=None, positions=None, need_weights=False):
        """Causal self-attention of ``x``, continuing ``cache`` when one is given.

        Args:
            x: ``[b, n, embed_dim]``, floating, the module's dtype.
            attn_mask: optional torch.bool mask, **True = may attend**, broadcastable to
                ``[b, h, n, n_k]`` with ``n_k = len(cache) + n`` (every position so far),
                ANDed with the causal mask; e.g. a padding mask ``[b, 1, 1, n_k]``.
            cache: a :class:`LatentCache` from :meth:`new_cache` holding the earlier
                positions; the latents and rotary keys of ``x`` are appended.
            positions: the rotary positions of the ``n`` tokens: an integer tensor ``[n]`` or
                ``[b, n]`` (one row per sequence), or their ``mhsa.core.rotary.RotaryAngles``
                from :meth:`rotary_angles`. Default ``len(cache) + arange(n)``.
            need_weights: return the per-head weights (explicit path) instead of running
                torch's fused kernel. Same output (float32, 1e-5).

        Returns:
            ``(output, weights)``: ``output`` ``[b, n, embed_dim]``; ``weights``
            ``[b, num_heads, n, n_k]`` or None. A query with no key to attend to gets a zero
            attention output (no NaN).

        Raises:
            TypeError: ``x`` is not a floating tensor of the module's dtype, ``attn_mask``
                is not torch.bool, ``positions`` is not an integer tensor, or ``cache`` is
                not a :class:`LatentCache`.
            ValueError: ``x`` is not ``[b, n, embed_dim]``; ``attn_mask`` does not broadcast
                or is on another device; ``positions`` of the wrong shape or device; a
                ``cache`` of another batch size or width.
        """
        n_cached = 0 if cache is None else len(cache)
        self._check(x, attn_mask, cache, positions, n_cached)
        h, dr, packed = self.num_heads, self.qk_rope_head_dim, self._packed
        latent, k_rope = self.kv_a_proj(x).split([self.kv_lora_rank, dr], dim=-1)
        latent = self.kv_a_norm(latent)  # [b, n, c]: all that is cached, with k_rope
        queries_from = x if self.q_a_proj is None else self.q_a_norm(self.q_a_proj(x))
        q_weight = packed[0] if packed else self._query_projection().weight
        q = split_heads(F.linear(queries_from, q_weight), h)  # [b, h, n, d + dr]
        q_rest, q_rope = q.split([q.shape[-1] - dr, dr], dim=-1)
        cos, sin = (positions if isinstance(positions, RotaryAngles) else
                    self.rotary_angles(positions, start=n_cached, n=x.shape[1]))
        q_rope = rotate(q_rope, cos, sin)  # the rotary key: one head, shared by all
        k_rope = rotate(rearrange(k_rope, "b n d -> b 1 n d"), cos, sin)
        if cache is not None:
            latent, k_rope = cache.update(latent, k_rope[:, 0])  # [b, j, c], [b, j, dr]
            k_rope = rearrange(k_rope, "b j d -> b 1 j d")
        mask, square = combine_masks(attn_mask, x.shape[1], latent.shape[1], is_causal=True,
                                     device=x.device)
        q = torch.cat([q_rest, q_rope], dim=-1)
        if packed is None and self.scale != q.shape[-1] ** -0.5:  # YaRN's softmax temperature
            q = q * (self.scale * math.sqrt(q.shape[-1]))  # the kernels divide by sqrt(d)
        if packed is None:  # plain: decompress every head's keys and values from the latent
            k_nope, v = split_heads(self.kv_b_proj(latent), h).split(
                [self.qk_nope_head_dim, self.v_head_dim], dim=-1)  # [b, h, j, d] each
            k = torch.cat([k_nope, k_rope.expand(-1, h, -1, -1)], dim=-1)
        else:  # absorbed: the queries meet the latent, one key/value head for all
            k = torch.cat([rearrange(latent, "b j c -> b 1 j c"), k_rope], dim=-1)
            v = rearrange(latent, "b j c -> b 1 j c")
        if need_weights:
            r = h // k.shape[1]
            out, weights = scaled_dot_product_attention(
                q, repeat_kv_heads(k, r), repeat_kv_heads(v, r), mask, is_causal=square)
        else:
            out = fused_attention(q, k, v, mask, is_causal=square, enable_gqa=k.shape[1] != h)
            weights = None
        out_weight = self.out_proj.weight if packed is None else packed[1]
        return F.linear(merge_heads(out), out_weight), weights

    @property
    def absorbed(self) -> bool:
        """True while :meth:`pack_projections` holds the absorbed weights (the forward uses them)."""
        return self._packed is not None

    def pack_projections(self, packed: bool = True) -> None:
        """Switch to the absorbed form (``packed=True``) or back to the plain one (False).

        The absorbed form precomputes two matrices and drops the decompression of keys and
        values: per head, ``W_UK,h^T W_UQ,h`` maps the query input straight to the latent's
        width ``c`` (the rotary rows stay), and ``W_O,h W_UV,h`` maps the attention output
        over the latent to ``embed_dim``. The softmax scale stays ``self.scale`` (YaRN's
        temperature included): it is folded into the query matrix, since the kernel
        divides by ``sqrt(c + dr)``. The output equals the plain form's up to float
        rounding (tested: float64 tight, float32 within the chain's tolerance), with and
        without a cache.

        Inference only: copies without autograd that do not follow later changes of the
        projections (call again after loading weights). ``mhsa.core._packing``'s
        ``packed_projections`` calls this around a decoding loop; copies and pickles never
        inherit the packed matrices.

        Args:
            packed: True to precompute and use the absorbed form, False to drop it.
        """
        if not packed:
            self._packed = None
            return
        h, dn, dr = self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim
        c = self.kv_lora_rank
        with torch.no_grad():
            w_uk, w_uv = rearrange(self.kv_b_proj.weight, "(h d) c -> h d c", h=h).split(
                [dn, self.v_head_dim], dim=1)  # [h, dn, c], [h, dv, c]
            w_q = rearrange(self._query_projection().weight, "(h d) f -> h d f", h=h)
            w_q_nope, w_q_rope = w_q.split([dn, dr], dim=1)  # [h, dn, f], [h, dr, f]
            w_q_latent = einsum(w_uk, w_q_nope, "h d c, h d f -> h c f")
            fold = self.scale * math.sqrt(c + dr)  # the kernel's 1/sqrt(c + dr) -> scale
            q_absorbed = rearrange(torch.cat([w_q_latent, w_q_rope], dim=1) * fold,
                                   "h d f -> (h d) f")  # [h * (c + dr), f]
            w_o = rearrange(self.out_proj.weight, "e (h d) -> e h d", h=h)
            out_absorbed = rearrange(einsum(w_o, w_uv, "e h d, h d c -> e h c"),
                                     "e h c -> e (h c)")  # [e, h * c]
            self._packed = (matvec_layout(q_absorbed), matvec_layout(out_absorbed))

    def rotary_angles(self, positions=None, *, start: int = 0, n: int | None = None):
        """The ``mhsa.core.rotary.RotaryAngles`` of ``positions``, to pass as ``positions``.

        As :meth:`mhsa.GroupedQueryAttention.rotary_angles`, for the ``qk_rope_head_dim``
        rotary part; with ``rope_scaling``, the scaled angles times YaRN's attention factor.

        Args:
            positions: integer tensor ``[n]`` or ``[b, n]``; default ``start + arange(n)``.
            start, n: the default's first position and length.

        Returns:
            ``RotaryAngles(cos, sin)`` in the module's dtype: ``[n, qk_rope_head_dim]``
            each, or ``[b, 1, n, qk_rope_head_dim]`` for ``[b, n]`` positions.
        """
        weight, d, scaling = self.kv_a_proj.weight, self.qk_rope_head_dim, self._scaling_key
        if positions is None:
            positions = torch.arange(start, start + n, device=weight.device)
        if positions.dim() == 1:
            return RotaryAngles(*kept_angles(positions, d, self.rope_base, weight.dtype,
                                             scaling))
        cos, sin = rotary_angles(positions, d, base=self.rope_base, dtype=weight.dtype,
                                 scaling=scaling)
        return RotaryAngles(cos[:, None], sin[:, None])  # [b, 1, n, d]: the same for every head

    def new_cache(self, *, capacity: int | None = None) -> "LatentCache":
        """An empty :class:`LatentCache`: the latents and rotary keys, nothing per head.

        Args:
            capacity: positions to allocate at the first write, ``int >= 1``, or None to
                grow as needed.

        Raises:
            TypeError, ValueError: a ``capacity`` that :class:`LatentCache` refuses.
        """
        return LatentCache(capacity=capacity)

    @classmethod
    def from_hf(cls, module) -> "MultiHeadLatentAttention":
        """A copy of a transformers ``DeepseekV3Attention``: same outputs on the same inputs.

        Reads the sizes, the rope theta and scaling (DeepSeek-V3's YaRN: ``rope_parameters``
        with ``factor``, ``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``,
        ``mscale`` and ``mscale_all_dim``, see ``rope_scaling``) and both norms' epsilon
        (``mhsa.interop.hf_deepseek.config_from_hf_deepseek_attention``) and copies the
        weights, permuting the rotary rows of DeepSeek's interleaved layout into the half
        layout of :func:`mhsa.apply_rotary` (exact). transformers is not imported. The copy
        has the module's device and dtype, in eval mode.

        Args:
            module: a transformers ``DeepseekV3Attention`` (or an object with its attributes).

        Returns:
            a :class:`MultiHeadLatentAttention` whose output equals the module's on the same
            hidden states, positions and causal mask (float32: within 1e-5).

        Raises:
            TypeError: ``module`` is not a ``DeepseekV3Attention``.
            ValueError: a configuration this class cannot represent (a rope type other
                than default, linear, dynamic, yarn and llama3, partial rotation, biases,
                attention dropout, fewer key/value heads than heads).
        """
        config = config_from_hf_deepseek_attention(module)
        weight = module.kv_a_proj_with_mqa.weight
        ours = cls(**config, device=weight.device, dtype=weight.dtype)
        copy_hf_deepseek_attention(ours, module)
        return ours.eval()

    def _query_projection(self) -> nn.Linear:
        """The projection that makes every head's queries: ``q_proj`` or ``q_b_proj``."""
        return self.q_proj if self.q_proj is not None else self.q_b_proj

    def __getstate__(self):
        """Copies and pickles never inherit the matrices of :meth:`pack_projections`."""
        return {**self.__dict__, "_packed": None}

    def _check(self, x, attn_mask, cache, positions, n_cached) -> None:
        check_shape("x", x, ("batch", "n", "embed_dim"), self.embed_dim)
        dtype = self.kv_a_proj.weight.dtype
        if x.dtype != dtype:
            raise TypeError(f"`x` must have the module's dtype {dtype}, got {x.dtype}")
        b, n = x.shape[:2]
        if cache is not None and not isinstance(cache, LatentCache):
            raise TypeError("`cache` must be the LatentCache of this module's new_cache(), got "
                            f"{type(cache).__name__}")
        if attn_mask is not None:
            check_bool_mask("attn_mask", attn_mask, (b, self.num_heads, n, n_cached + n))
            check_same_device("attn_mask", attn_mask, x, "x")
        if positions is not None and not isinstance(positions, RotaryAngles):
            check_positions(positions, n, x.device, batch=b)

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"q_lora_rank={self.q_lora_rank}, kv_lora_rank={self.kv_lora_rank}, "
                f"qk_nope_head_dim={self.qk_nope_head_dim}, "
                f"qk_rope_head_dim={self.qk_rope_head_dim}, v_head_dim={self.v_head_dim}, "
                f"rope_base={self.rope_base}" +
                ("" if self.rope_scaling is None else f", rope_scaling={self.rope_scaling}"))


class LatentCache:
    """What :class:`MultiHeadLatentAttention` caches: each token's latent and rotary key.

    ``kv_lora_rank + qk_rope_head_dim`` numbers per token and sequence, whatever the number
    of heads, where a :class:`mhsa.KVCache` of ``h`` heads of width ``d`` holds
    ``2 * h * d``. Both live in one buffer ``[b, allocated, c + dr]`` written in place;
    it grows as :class:`mhsa.KVCache`'s buffers do (``capacity`` at the first update when
    it fits, else twice what is needed, at least 16), out of place with ``torch.cat`` under
    autograd. No sliding window.

    Args:
        capacity: positions to allocate at the first update, ``int >= 1``, or None.

    Attributes:
        latent: the cached latents ``[b, n_cached, kv_lora_rank]`` (a view), None while empty.
        rope_key: the cached rotary keys, already rotated, ``[b, n_cached, qk_rope_head_dim]``
            (a view), None while empty.

    Raises:
        TypeError: ``capacity`` is not an int.
        ValueError: ``capacity`` is below 1.

    Source: DeepSeek-AI 2024, "DeepSeek-V2", section 2.1.2 (only ``c^KV_t`` and ``k^R_t``
    are cached) and its table 1 (the cache per token of each attention variant).
    """

    def __init__(self, *, capacity: int | None = None):
        self._capacity = None if capacity is None else check_int("capacity", capacity)
        self._buffer: torch.Tensor | None = None  # [b, allocated, c + dr]
        self._width = 0  # c, the latent's part of the buffer's last dimension
        self._seen = 0

    def __len__(self) -> int:
        """Number of token positions written so far (0 while empty)."""
        return self._seen

    @property
    def latent(self) -> torch.Tensor | None:
        if self._buffer is None:
            return None
        return self._buffer[:, :self._seen, :self._width]

    @property
    def rope_key(self) -> torch.Tensor | None:
        if self._buffer is None:
            return None
        return self._buffer[:, :self._seen, self._width:]

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer, spare positions included, ``b * allocated * (c + dr) * element_size``.

        With the exact ``capacity`` it will need, ``batch * positions * (kv_lora_rank +
        qk_rope_head_dim) * element_size``. 0 while empty.
        """
        return 0 if self._buffer is None else self._buffer.nbytes

    def update(self, latent: torch.Tensor,
               rope_key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new tokens' latents and rotary keys after the cached ones.

        Args:
            latent: ``[b, n_new, kv_lora_rank]``, floating.
            rope_key: ``[b, n_new, qk_rope_head_dim]``, same batch, length, dtype and device.

        Returns:
            ``(latent, rope_key)`` of every position so far, ``[b, n_cached + n_new, ...]``:
            views of the buffer, valid until the next update.

        Raises:
            TypeError: an input is not a floating tensor, or the dtypes differ from each
                other or from the cached ones.
            ValueError: an input is not 3-D, their batch or length differ, or batch, widths
                or device differ from what is cached (one cache per module and batch;
                :meth:`reset` it first).
        """
        self._check(latent, rope_key)
        new = torch.cat([latent, rope_key], dim=-1)  # [b, n_new, c + dr]
        n_new, end = new.shape[1], self._seen
        if torch.is_grad_enabled() and (new.requires_grad or (
                self._buffer is not None and self._buffer.requires_grad)):
            self._buffer = new if self._buffer is None else torch.cat([self._filled(), new], 1)
        else:
            self._make_room(new, end + n_new)
            self._buffer[:, end:end + n_new] = new
        self._width, self._seen = latent.shape[-1], end + n_new
        return self.latent, self.rope_key

    def reset(self) -> None:
        """Empty the cache (and free its buffer), to decode other sequences; ``capacity`` stays."""
        self.__init__(capacity=self._capacity)

    def __repr__(self) -> str:
        shape = None if self._buffer is None else tuple(self.latent.shape)
        return f"LatentCache(n_cached={len(self)}, latent shape={shape})"

    def _filled(self) -> torch.Tensor:
        return self._buffer[:, :self._seen]

    def _make_room(self, like: torch.Tensor, needed: int) -> None:
        buffer = self._buffer
        # an inference tensor (made under torch.inference_mode) is read-only outside it
        writable = buffer is not None and (torch.is_inference_mode_enabled()
                                           or not buffer.is_inference())
        if writable and needed <= buffer.shape[1]:
            return
        first = buffer is None and self._capacity is not None and needed <= self._capacity
        allocated = self._capacity if first else max(2 * needed, 16)
        fresh = like.new_empty(like.shape[0], allocated, like.shape[2])
        if buffer is not None:
            fresh[:, :self._seen] = self._filled()
        self._buffer = fresh

    def _check(self, latent, rope_key) -> None:
        for name, x in (("latent", latent), ("rope_key", rope_key)):
            check_tensor(name, x)
            if x.dim() != 3:
                raise ValueError(f"`{name}` must be 3-D [batch, n_new, width], got shape "
                                 f"{tuple(x.shape)}")
        if latent.shape[:2] != rope_key.shape[:2]:
            raise ValueError(f"`latent` {tuple(latent.shape)} and `rope_key` "
                             f"{tuple(rope_key.shape)} must share batch and n_new")
        check_same_dtype_and_device("latent", latent, "rope_key", rope_key)
        if self._buffer is None:
            return
        b, _, width = self._buffer.shape
        if (latent.shape[0], latent.shape[2], latent.shape[2] + rope_key.shape[2]) != (
                b, self._width, width):
            raise ValueError(
                f"new latents {tuple(latent.shape)} and rotary keys {tuple(rope_key.shape)} "
                f"do not continue the cache's [{b}, n_cached={len(self)}, {self._width}] and "
                f"[{b}, n_cached={len(self)}, {width - self._width}]: batch and widths must "
                "match (one cache per attention module and batch; call reset() to start over)")
        if latent.dtype != self._buffer.dtype:
            raise TypeError(f"new latents are {latent.dtype}, the cache holds "
                            f"{self._buffer.dtype}")
        if latent.device != self._buffer.device:
            raise ValueError(f"new latents are on {latent.device}, the cache is on "
                             f"{self._buffer.device}")
