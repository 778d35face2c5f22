"""The course's masks as FlexAttention ``mask_mod`` functions, and soft-capping as a ``score_mod``.

FlexAttention (``torch.nn.attention.flex_attention``) asks for a mask as a function of four
indices, ``mask_mod(b, h, q_idx, kv_idx) -> bool``, with the course's polarity: **True = may
attend**. ``create_block_mask`` evaluates it once per sequence and records which blocks of the
score matrix hold any allowed entry; a compiled kernel then skips the empty blocks. A
``score_mod(score, b, h, q_idx, kv_idx)`` changes each score before the softmax.

Each factory below returns the function for one mask of :mod:`mhsa.core.masks`; the dense
mask that ``create_mask`` makes from it equals that mask entry for entry. Combine them with
torch's ``and_masks`` (logical AND, as the course combines masks)::

    from torch.nn.attention.flex_attention import and_masks
    mask_mod = and_masks(causal_mask_mod(), padding_mask_mod(lengths))
    out = flex_attention_with_mask(q, k, v, mask_mod)   # [b, h, n_q, d]

Legend: b batch, n tokens, h heads, d head_dim, i query positions (``q_idx``), j key
positions (``kv_idx``). Masks are boolean, True = may attend.

Source: Dong et al. 2024, "Flex Attention: A Programming Model for Generating Optimized
Attention Kernels"; torch's ``torch.nn.attention.flex_attention`` documentation.
"""

import math
import warnings

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from mhsa.core._checks import check_int, check_int_tensor, check_rank, check_tensor

_compiled_flex_attention = None  # torch.compile(flex_attention), made at the first CUDA call


def causal_mask_mod(offset: int = 0):
    """``mask_mod`` of :func:`mhsa.causal_mask`: query ``i`` sees key ``j`` when ``j <= i + offset``.

    Args:
        offset: where the first query sits among the keys, an int. ``0`` aligns top-left
            (FlexAttention's usual causal mask, equal to ``causal_mask(n)`` for square
            scores); ``n_k - n_q`` gives ``causal_mask(n_q, n_k)``'s bottom-right alignment
            (new queries after cached keys).

    Returns:
        ``mask_mod(b, h, q_idx, kv_idx)``, True = may attend.

    Raises:
        TypeError: ``offset`` is not an int.

    Source: Vaswani et al. 2017, section 3.2.3; Dong et al. 2024, "Flex Attention".
    """
    offset = check_int("offset", offset, minimum=-(2**62))

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    return causal


def sliding_window_mask_mod(window: int, offset: int = 0):
    """``mask_mod`` of :func:`mhsa.sliding_window_mask`: itself and ``window - 1`` keys before.

    Query ``i`` sits at key position ``p = i + offset`` and sees ``p - window < j <= p``.

    Args:
        window: how many keys each query sees at most, ``int >= 1``.
        offset: as in :func:`causal_mask_mod`; ``n_k - n_q`` matches
            ``sliding_window_mask(n_q, n_k, window=window)``.

    Returns:
        ``mask_mod(b, h, q_idx, kv_idx)``, True = may attend.

    Raises:
        TypeError: ``window`` or ``offset`` is not an int.
        ValueError: ``window`` is below 1.

    Source: Beltagy et al. 2020, "Longformer", section 3.1; Jiang et al. 2023, "Mistral 7B",
    section 2.
    """
    window = check_int("window", window)
    offset = check_int("offset", offset, minimum=-(2**62))

    def sliding_window(b, h, q_idx, kv_idx):
        position = q_idx + offset
        return (kv_idx <= position) & (kv_idx > position - window)

    return sliding_window


def padding_mask_mod(lengths: torch.Tensor):
    """``mask_mod`` of :func:`mhsa.padding_mask`: key ``j`` of sequence ``b`` is real when ``j < lengths[b]``.

    It masks keys, not queries, like :func:`mhsa.padding_mask`. Build the block mask with
    ``B = batch`` (not None): the function reads ``b``.

    Args:
        lengths: real length of each sequence, an integer tensor ``[batch]`` on the device of
            the attention inputs, each ``>= 0``.

    Returns:
        ``mask_mod(b, h, q_idx, kv_idx)``, True = may attend.

    Raises:
        TypeError: ``lengths`` is not an integer tensor.
        ValueError: ``lengths`` is not 1-D.

    Source: Vaswani et al. 2017, section 3.2.3; Dong et al. 2024, "Flex Attention".
    """
    check_int_tensor("lengths", lengths, "an integer tensor [batch]")
    check_rank("lengths", lengths, rank=1, layout="[batch]")

    def padding(b, h, q_idx, kv_idx):
        return kv_idx < lengths[b]

    return padding


def document_mask_mod(document_ids: torch.Tensor):
    """``mask_mod`` of :func:`mhsa.core.masks.document_mask`: a query sees only its own document.

    Not causal by itself: ``and_masks(causal_mask_mod(), document_mask_mod(ids))`` is the
    mask of a decoder trained on packed documents.

    Args:
        document_ids: the document of each token, an integer tensor ``[n]`` (one packed row,
            the same for every sequence of the batch) or ``[batch, n]`` (then build the block
            mask with ``B = batch``).

    Returns:
        ``mask_mod(b, h, q_idx, kv_idx)``, True = may attend.

    Raises:
        TypeError: ``document_ids`` is not an integer tensor.
        ValueError: ``document_ids`` is neither 1-D nor 2-D.

    Source: Dong et al. 2024, "Flex Attention" (document masking).
    """
    check_int_tensor("document_ids", document_ids, "an integer tensor [n] or [batch, n]")
    if document_ids.dim() not in (1, 2):
        raise ValueError("`document_ids` must be 1-D [n] or 2-D [batch, n], got shape "
                         f"{tuple(document_ids.shape)}")
    if document_ids.dim() == 1:
        def same_document(b, h, q_idx, kv_idx):
            return document_ids[q_idx] == document_ids[kv_idx]
    else:
        def same_document(b, h, q_idx, kv_idx):
            return document_ids[b, q_idx] == document_ids[b, kv_idx]
    return same_document


def prefix_lm_mask_mod(prefix_lengths: torch.Tensor):
    """``mask_mod`` of :func:`mhsa.core.masks.prefix_lm_mask`: ``j <= i`` or ``j < prefix_lengths[b]``.

    Build the block mask with ``B = batch``: the function reads ``b``.

    Args:
        prefix_lengths: the prefix length of each sequence, an integer tensor ``[batch]``.

    Returns:
        ``mask_mod(b, h, q_idx, kv_idx)``, True = may attend.

    Raises:
        TypeError: ``prefix_lengths`` is not an integer tensor.
        ValueError: ``prefix_lengths`` is not 1-D.

    Source: Raffel et al. 2020 (T5), section 3.2.1; Dong et al. 2024, "Flex Attention".
    """
    check_int_tensor("prefix_lengths", prefix_lengths, "an integer tensor [batch]")
    check_rank("prefix_lengths", prefix_lengths, rank=1, layout="[batch]")

    def prefix_lm(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) | (kv_idx < prefix_lengths[b])

    return prefix_lm


def softcap_score_mod(cap: float):
    """``score_mod`` of Gemma 2's soft-capping: ``cap * tanh(score / cap)``.

    Scores near 0 pass almost unchanged (``tanh(x) ~ x``); large ones are squashed smoothly
    into ``(-cap, cap)``, so no single logit can dominate the softmax. The score it receives
    is already scaled (``query @ key^T * scale``).

    Args:
        cap: the bound, a real number ``> 0`` (Gemma 2 uses 50.0 for attention scores).

    Returns:
        ``score_mod(score, b, h, q_idx, kv_idx)``.

    Raises:
        TypeError: ``cap`` is not a real number.
        ValueError: ``cap`` is not finite and positive.

    Source: Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size"
    (logit soft-capping); Dong et al. 2024, "Flex Attention".
    """
    if isinstance(cap, bool) or not isinstance(cap, (int, float)):
        raise TypeError(f"`cap` must be a real number, got {type(cap).__name__} {cap!r}")
    if not (math.isfinite(cap) and cap > 0):
        raise ValueError(f"`cap` must be a finite number > 0, got {cap}")
    cap = float(cap)

    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return softcap


def flex_attention_with_mask(query, key, value, mask_mod=None, *, score_mod=None,
                             scale=None) -> torch.Tensor:
    """FlexAttention over a course mask: ``softmax(score_mod(q @ k^T * scale) | mask) @ v``.

    Builds the block mask of ``mask_mod`` for this batch (``create_block_mask`` with
    ``B = batch``, one mask for every head) and runs ``flex_attention``: compiled on CUDA,
    where the fused kernel skips empty blocks (the first call compiles, about a minute);
    eager elsewhere, where torch computes the full score matrix (right, but not fast; its
    warning about that is silenced here). A query with no key to attend to gets a zero
    output, as with :func:`mhsa.scaled_dot_product_attention`. Equivalent to::

        mask = create_mask(mask_mod, b, 1, n_q, n_k)                      # True = may attend
        mhsa.scaled_dot_product_attention(q, k, v, mask)[0]               # score_mod=None

    Args:
        query: ``[b, h, n_q, d]``, floating.
        key: ``[b, g, n_k, d]``, the dtype and device of ``query``; ``g`` divides ``h``
            (grouped-query attention: each key/value head serves ``h / g`` query heads).
        value: ``[b, g, n_k, d_v]``.
        mask_mod: ``mask_mod(b, h, q_idx, kv_idx) -> bool``, True = may attend (one of this
            module's factories, or several joined by ``and_masks``), or None for no mask.
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx)`` such as :func:`softcap_score_mod`.
        scale: the scores' factor, default ``1 / sqrt(d)``.

    Returns:
        the attention output ``[b, h, n_q, d_v]``, in ``query``'s dtype.

    Raises:
        TypeError: ``query``, ``key`` or ``value`` is not a floating tensor, or their
            dtypes differ; ``mask_mod`` or ``score_mod`` is not callable.
        ValueError: they are not 4-D, their batch sizes, lengths or head_dims do not match,
            ``g`` does not divide ``h``, or they lie on different devices.

    Source: Dong et al. 2024, "Flex Attention: A Programming Model for Generating Optimized
    Attention Kernels".
    """
    _check_inputs(query, key, value, mask_mod, score_mod)
    b, h, n_q, _ = query.shape
    block_mask = None if mask_mod is None else create_block_mask(
        mask_mod, b, None, n_q, key.shape[2], device=query.device)
    kwargs = {"score_mod": score_mod, "block_mask": block_mask, "scale": scale,
              "enable_gqa": key.shape[1] != h}
    if query.device.type == "cuda":
        global _compiled_flex_attention
        if _compiled_flex_attention is None:
            _compiled_flex_attention = torch.compile(flex_attention)
        return _compiled_flex_attention(query, key, value, **kwargs)
    with warnings.catch_warnings():  # eager is the point here: right, not fast
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(query, key, value, **kwargs)


def _check_inputs(query, key, value, mask_mod, score_mod) -> None:
    for name, x in (("query", query), ("key", key), ("value", value)):
        check_tensor(name, x)
        check_rank(name, x, rank=4, layout="[batch, heads, n, head_dim]")
        if x.dtype != query.dtype:
            raise TypeError(f"`{name}` must have `query`'s dtype {query.dtype}, got {x.dtype}")
        if x.device != query.device:
            raise ValueError(f"`{name}` is on {x.device} but `query` is on {query.device}")
    if not query.shape[0] == key.shape[0] == value.shape[0]:
        raise ValueError("`query`, `key` and `value` must have the same batch size, got shapes "
                         f"{tuple(query.shape)}, {tuple(key.shape)} and {tuple(value.shape)}")
    if key.shape[1:3] != value.shape[1:3]:
        raise ValueError(f"`key` {tuple(key.shape)} and `value` {tuple(value.shape)} must have "
                         "the same heads and length n_k")
    if key.shape[3] != query.shape[3]:
        raise ValueError(f"`key`'s head_dim ({key.shape[3]}) must equal `query`'s "
                         f"({query.shape[3]})")
    if query.shape[1] % key.shape[1]:
        raise ValueError(f"`query`'s heads ({query.shape[1]}) must be divisible by `key`'s "
                         f"({key.shape[1]})")
    for name, f in (("mask_mod", mask_mod), ("score_mod", score_mod)):
        if f is not None and not callable(f):
            raise TypeError(f"`{name}` must be a function or None, got {type(f).__name__}")
