"""Attention masks, in one convention: boolean, ``True`` = may attend.

A mask broadcasts to the attention scores, ``[batch, heads, n_q, n_k]``: rows are
queries (i), columns are keys (j). ``torch.nn.functional.scaled_dot_product_attention``
uses the same polarity; ``torch.nn.MultiheadAttention`` uses the opposite one
(True = ignore), and additive float masks use 0 / -inf. The converters below translate.
"""

import torch

from ._checks import MASK_CONVENTION


def causal_mask(n_q: int, n_k: int | None = None, *, device=None) -> torch.Tensor:
    """Boolean causal mask ``[n_q, n_k]``, True = may attend, aligned bottom-right.

    Query ``i`` may attend to key ``j`` when ``j <= i + (n_k - n_q)``: the last query
    sees every key. This is what decoding with cached keys needs (one new query against
    all earlier keys). ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``
    aligns top-left instead (``j <= i``); the two agree when ``n_q == n_k``::

        n_q=2, n_k=4     bottom-right (mhsa)      top-left (torch is_causal)
        query 0          1 1 1 0                  1 0 0 0
        query 1          1 1 1 1                  1 1 0 0

    When ``n_q > n_k`` the first ``n_q - n_k`` queries see no key; attention then gives
    them zero weights and a zero output (see ``scaled_dot_product_attention``).

    Args:
        n_q: number of queries (rows), ``int >= 1``.
        n_k: number of keys (columns), ``int >= 1``; defaults to ``n_q``.
        device: where to build the mask.

    Returns:
        torch.bool tensor ``[n_q, n_k]``.

    Raises:
        ValueError: ``n_q`` or ``n_k`` is not a positive integer.

    Source: Vaswani et al. 2017, "Attention Is All You Need", section 3.2.3.
    """
    n_k = n_q if n_k is None else n_k
    for name, n in (("n_q", n_q), ("n_k", n_k)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"`{name}` must be a positive int, got {n!r}")
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    return j <= i + (n_k - n_q)


def padding_mask(lengths, n_tokens: int) -> torch.Tensor:
    """Boolean padding mask ``[batch, 1, 1, n_tokens]``, True at real tokens.

    It masks keys, not queries: every query may attend to the real tokens of its own
    sequence. Padded queries still get an output (nobody should read it).

    Args:
        lengths: real length of each sequence, a 1-D integer tensor or list ``[batch]``,
            each between 0 and ``n_tokens``.
        n_tokens: padded length of the batch.

    Returns:
        torch.bool tensor ``[batch, 1, 1, n_tokens]`` on the device of ``lengths``.

    Raises:
        TypeError: ``lengths`` is not integer.
        ValueError: ``lengths`` is not 1-D, or a length is outside ``[0, n_tokens]``.

    Source: Vaswani et al. 2017, section 3.2.3 (masking); padding is standard batching.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"`lengths` must hold integers, got {lengths.dtype}")
    if lengths.dim() != 1:
        raise ValueError(f"`lengths` must be 1-D [batch], got shape {tuple(lengths.shape)}")
    if len(lengths) and (lengths.min() < 0 or lengths.max() > n_tokens):
        raise ValueError(
            f"`lengths` must lie in [0, n_tokens={n_tokens}], got {lengths.tolist()}"
        )
    positions = torch.arange(n_tokens, device=lengths.device)
    return (positions[None, :] < lengths[:, None])[:, None, None, :]


def padding_mask_from_ids(token_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Boolean padding mask ``[batch, 1, 1, n_tokens]`` from token ids, True where ``!= pad_id``.

    Args:
        token_ids: integer tensor ``[batch, n_tokens]``.
        pad_id: the id of the padding token.

    Raises:
        ValueError: ``token_ids`` is not 2-D.
    """
    if token_ids.dim() != 2:
        raise ValueError(
            f"`token_ids` must be [batch, n_tokens], got shape {tuple(token_ids.shape)}"
        )
    return (token_ids != pad_id)[:, None, None, :]


def mask_from_torch_mha(mask: torch.Tensor) -> torch.Tensor:
    """Convert a ``torch.nn.MultiheadAttention`` mask to ours (True = may attend).

    torch's module takes a bool mask with True = *ignore*, or an additive float mask.
    A bool mask is inverted; a float mask goes through :func:`mask_from_additive`.
    """
    if mask.dtype == torch.bool:
        return ~mask
    return mask_from_additive(mask)


def mask_to_torch_mha(mask: torch.Tensor) -> torch.Tensor:
    """Convert our mask (True = may attend) to torch's MultiheadAttention one (True = ignore)."""
    _require_bool(mask)
    return ~mask


def mask_from_additive(mask: torch.Tensor) -> torch.Tensor:
    """Convert an additive float mask (0 = keep, -inf or a large negative = block) to ours.

    Raises:
        TypeError: ``mask`` is not floating point.
        ValueError: it holds values other than 0 and large negatives (<= -1e4): that is
            a bias added to the scores, not a mask.
    """
    if not mask.is_floating_point():
        raise TypeError(f"`mask` must be an additive float mask, got {mask.dtype}")
    keep = mask == 0
    block = mask <= -1e4
    if not bool((keep | block).all()):
        raise ValueError(
            "`mask` holds values other than 0 and large negatives (<= -1e4); "
            "that is a score bias, not a mask"
        )
    return keep


def mask_to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Convert our mask (True = may attend) to an additive one: 0 where True, -inf where False."""
    _require_bool(mask)
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


def _require_bool(mask) -> None:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"`mask` must be torch.bool ({MASK_CONVENTION}), got {got}")
