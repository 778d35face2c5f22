"""Attention masks, in one convention: boolean, ``True`` = may attend.

A mask broadcasts to the attention scores, ``[batch, heads, n_q, n_k]``: rows are
queries (i), columns are keys (j). ``torch.nn.functional.scaled_dot_product_attention``
uses the same polarity; ``torch.nn.MultiheadAttention`` uses the opposite one
(True = ignore), and additive float masks use 0 / -inf. The converters below translate.
"""

import torch
import torch.compiler

from mhsa.core._checks import MASK_CONVENTION, check_int, check_int_tensor, check_rank, kind_of


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
        n_q: number of queries (rows), ``int >= 0``.
        n_k: number of keys (columns), ``int >= 0``; defaults to ``n_q``.
        device: where to build the mask.

    Returns:
        torch.bool tensor ``[n_q, n_k]``.

    Raises:
        TypeError: ``n_q`` or ``n_k`` is not an integer.
        ValueError: ``n_q`` or ``n_k`` is negative.

    Source: Vaswani et al. 2017, "Attention Is All You Need", section 3.2.3.
    """
    n_q = check_int("n_q", n_q, minimum=0)
    n_k = n_q if n_k is None else check_int("n_k", n_k, minimum=0)
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    return j <= i + (n_k - n_q)


def sliding_window_mask(n_q: int, n_k: int | None = None, *, window: int,
                        device=None) -> torch.Tensor:
    """Boolean sliding-window causal mask ``[n_q, n_k]``, True = may attend, bottom-right.

    Like :func:`causal_mask`, query ``i`` sits at key position ``p = i + (n_k - n_q)``,
    and it may attend to the ``window`` keys ending there: itself and the ``window - 1``
    before it, ``p - window < j <= p``. This is ``sliding_window`` in transformers'
    Mistral. With ``window >= n_k`` it equals :func:`causal_mask`. Combine it with a
    padding mask by logical AND, like every other mask::

        n_q=n_k=5, window=3
        1 0 0 0 0
        1 1 0 0 0
        1 1 1 0 0
        0 1 1 1 0
        0 0 1 1 1

    Stacked layers widen what a position can reach by ``window - 1`` per layer.

    Args:
        n_q: number of queries (rows), ``int >= 0``.
        n_k: number of keys (columns), ``int >= 0``; defaults to ``n_q``.
        window: how many keys each query sees at most, ``int >= 1``.
        device: where to build the mask.

    Returns:
        torch.bool tensor ``[n_q, n_k]``.

    Raises:
        TypeError: ``n_q``, ``n_k`` or ``window`` is not an integer.
        ValueError: ``n_q`` or ``n_k`` is negative, or ``window`` is below 1.

    Source: Beltagy et al. 2020, "Longformer", section 3.1 (sliding window); Jiang et al.
    2023, "Mistral 7B", section 2 (sliding window attention).
    """
    n_q = check_int("n_q", n_q, minimum=0)
    n_k = n_q if n_k is None else check_int("n_k", n_k, minimum=0)
    window = check_int("window", window)
    i = torch.arange(n_q, device=device)[:, None] + (n_k - n_q)  # each query's key position
    j = torch.arange(n_k, device=device)[None, :]
    return (j <= i) & (j > i - window)


def padding_mask(lengths, n_tokens: int) -> torch.Tensor:
    """Boolean padding mask ``[batch, 1, 1, n_tokens]``, True at real tokens.

    It masks keys, not queries: every query may attend to the real tokens of its own
    sequence. Padded queries still get an output (nobody should read it). A sequence of
    length 0 has no key at all: attention gives its queries zero weights and zero output.

    Args:
        lengths: real length of each sequence, a 1-D integer tensor or list ``[batch]``,
            each between 0 and ``n_tokens``.
        n_tokens: padded length of the batch, ``int >= 0``.

    Returns:
        torch.bool tensor ``[batch, 1, 1, n_tokens]`` on the device of ``lengths``.

    Raises:
        TypeError: ``lengths`` is not integer, or ``n_tokens`` is not an int.
        ValueError: ``lengths`` is not 1-D, a length is outside ``[0, n_tokens]``, or
            ``n_tokens`` is negative. The lengths' values are checked only where they can
            be read: not on ``meta`` tensors and not while ``torch.compile`` traces (a
            value check would synchronize with the device and break the graph).

    Source: Vaswani et al. 2017, section 3.2.3 (masking); padding is standard batching.
    """
    n_tokens = check_int("n_tokens", n_tokens, minimum=0)
    if not isinstance(lengths, torch.Tensor):
        lengths = torch.as_tensor(lengths, dtype=torch.long if len(lengths) == 0 else None)
    check_int_tensor("lengths", lengths, "an integer tensor [batch]")
    check_rank("lengths", lengths, rank=1, layout="[batch]")
    if _values_readable(lengths) and len(lengths) \
            and (lengths.min() < 0 or lengths.max() > n_tokens):
        raise ValueError(
            f"`lengths` must lie in [0, n_tokens={n_tokens}], got {lengths.tolist()}"
        )
    positions = torch.arange(n_tokens, device=lengths.device)
    return (positions[None, :] < lengths[:, None])[:, None, None, :]


def document_mask(document_ids) -> torch.Tensor:
    """Boolean packed-document mask, True = may attend: a query sees only its own document.

    Several documents packed into one row (no padding between them) must not read each
    other: query ``i`` may attend to key ``j`` when ``document_ids[i] == document_ids[j]``.
    The mask is not causal by itself; AND it with :func:`causal_mask` for a decoder::

        document_ids = [0, 0, 1, 1, 1]      & causal_mask(5)
        1 1 0 0 0                           1 0 0 0 0
        1 1 0 0 0                           1 1 0 0 0
        0 0 1 1 1                           0 0 1 0 0
        0 0 1 1 1                           0 0 1 1 0
        0 0 1 1 1                           0 0 1 1 1

    Args:
        document_ids: the document of each token, an integer tensor or list ``[n]`` (one
            packed row) or ``[batch, n]``. Any integers; equal ids mean the same document.

    Returns:
        torch.bool tensor ``[n, n]`` for ``[n]`` ids, ``[batch, 1, n, n]`` for
        ``[batch, n]`` ids (one mask for every head), on the device of ``document_ids``.

    Raises:
        TypeError: ``document_ids`` is not integer.
        ValueError: ``document_ids`` is neither 1-D nor 2-D.

    Source: Krell et al. 2021, "Efficient Sequence Packing without Cross-contamination"
    (packed sequences kept apart by the attention mask); Dong et al. 2024, "Flex
    Attention: A Programming Model for Generating Optimized Attention Kernels" (its
    document mask).
    """
    if not isinstance(document_ids, torch.Tensor):
        document_ids = torch.as_tensor(
            document_ids, dtype=torch.long if len(document_ids) == 0 else None)
    check_int_tensor("document_ids", document_ids, "an integer tensor [n] or [batch, n]")
    if document_ids.dim() not in (1, 2):
        raise ValueError("`document_ids` must be 1-D [n] or 2-D [batch, n], got shape "
                         f"{tuple(document_ids.shape)}")
    same = document_ids[..., :, None] == document_ids[..., None, :]  # [..., i, j]
    return same if document_ids.dim() == 1 else same[:, None]


def prefix_lm_mask(prefix_lengths, n: int) -> torch.Tensor:
    """Boolean prefix-LM mask ``[batch, 1, n, n]``, True = may attend.

    The first ``prefix_lengths[b]`` tokens of sequence ``b`` (the prompt, the input) see
    each other in both directions; every later token is causal. Query ``i`` may attend to
    key ``j`` when ``j <= i`` or ``j < prefix_lengths[b]``. A prefix of 0 gives
    :func:`causal_mask`, a prefix of ``n`` a full (encoder) mask::

        n=5, prefix_length=2
        1 1 0 0 0
        1 1 0 0 0
        1 1 1 0 0
        1 1 1 1 0
        1 1 1 1 1

    Args:
        prefix_lengths: the prefix length of each sequence, a 1-D integer tensor or list
            ``[batch]``, each between 0 and ``n``.
        n: number of tokens (queries and keys), ``int >= 0``.

    Returns:
        torch.bool tensor ``[batch, 1, n, n]`` on the device of ``prefix_lengths``.

    Raises:
        TypeError: ``prefix_lengths`` is not integer, or ``n`` is not an int.
        ValueError: ``prefix_lengths`` is not 1-D, a length is outside ``[0, n]`` (checked
            where values can be read, as in :func:`padding_mask`), or ``n`` is negative.

    Source: Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
    Text-to-Text Transformer" (T5), section 3.2.1 (prefix LM); Dong et al. 2024, "Flex
    Attention" (its prefix-LM mask).
    """
    n = check_int("n", n, minimum=0)
    if not isinstance(prefix_lengths, torch.Tensor):
        prefix_lengths = torch.as_tensor(
            prefix_lengths, dtype=torch.long if len(prefix_lengths) == 0 else None)
    check_int_tensor("prefix_lengths", prefix_lengths, "an integer tensor [batch]")
    check_rank("prefix_lengths", prefix_lengths, rank=1, layout="[batch]")
    if _values_readable(prefix_lengths) and len(prefix_lengths) \
            and (prefix_lengths.min() < 0 or prefix_lengths.max() > n):
        raise ValueError(
            f"`prefix_lengths` must lie in [0, n={n}], got {prefix_lengths.tolist()}"
        )
    positions = torch.arange(n, device=prefix_lengths.device)
    i, j = positions[:, None], positions[None, :]
    in_prefix = j[None] < prefix_lengths[:, None, None]  # [b, 1, j]
    return ((j <= i)[None] | in_prefix)[:, None]  # [b, 1, i, j]


def padding_mask_from_ids(token_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Boolean padding mask ``[batch, 1, 1, n_tokens]`` from token ids, True where ``!= pad_id``.

    Args:
        token_ids: integer tensor ``[batch, n_tokens]``.
        pad_id: the id of the padding token, an int.

    Returns:
        torch.bool tensor ``[batch, 1, 1, n_tokens]`` on the device of ``token_ids``.

    Raises:
        TypeError: ``token_ids`` is not an integer tensor, or ``pad_id`` is not an int.
        ValueError: ``token_ids`` is not 2-D.
    """
    check_int_tensor("token_ids", token_ids, "an integer tensor [batch, n_tokens]")
    if isinstance(pad_id, bool) or not isinstance(pad_id, int):
        raise TypeError(f"`pad_id` must be an int, got {type(pad_id).__name__}")
    check_rank("token_ids", token_ids, rank=2, layout="[batch, n_tokens]")
    return (token_ids != pad_id)[:, None, None, :]


def mask_from_torch_mha(mask: torch.Tensor, *, key_padding: bool = False) -> torch.Tensor:
    """Convert a ``torch.nn.MultiheadAttention`` mask to ours (True = may attend).

    torch's module takes a bool mask with True = *ignore*, or an additive float mask.
    A bool mask is inverted; a float mask goes through :func:`mask_from_additive`.

    Shapes: torch's ``attn_mask`` ``[n_q, n_k]`` converts as it is. Its
    ``key_padding_mask`` ``[batch, n_k]`` must be converted with ``key_padding=True``,
    which returns ``[batch, 1, 1, n_k]``: passed as ``[batch, n_k]`` it would be read as
    ``[n_q, n_k]``. Its 3-D ``attn_mask`` ``[batch * heads, n_q, n_k]`` converts, then
    needs ``einops.rearrange(m, "(b h) i j -> b h i j", h=num_heads)``.

    Args:
        mask: torch.bool (True = ignore) or floating (additive) tensor.
        key_padding: ``mask`` is a ``key_padding_mask`` ``[batch, n_k]``.

    Returns:
        torch.bool tensor, True = may attend; ``[batch, 1, 1, n_k]`` when ``key_padding``,
        otherwise the shape of ``mask``.

    Raises:
        TypeError: ``mask`` is neither a bool nor a floating tensor.
        ValueError: ``key_padding`` and ``mask`` is not 2-D; a float mask holds values
            that are not a mask (see :func:`mask_from_additive`).
    """
    if not isinstance(mask, torch.Tensor) or not (
        mask.dtype == torch.bool or mask.is_floating_point()
    ):
        got = kind_of(mask)
        raise TypeError(
            "`mask` must be a torch.nn.MultiheadAttention mask: torch.bool (True = ignore) "
            f"or an additive float mask, got {got}"
        )
    if key_padding and mask.dim() != 2:
        raise ValueError(
            f"a `key_padding_mask` must be [batch, n_k], got shape {tuple(mask.shape)}"
        )
    allowed = ~mask if mask.dtype == torch.bool else mask_from_additive(mask)
    return allowed[:, None, None, :] if key_padding else allowed


def mask_to_torch_mha(mask: torch.Tensor, *, key_padding: bool = False) -> torch.Tensor:
    """Convert our mask (True = may attend) to torch's MultiheadAttention one (True = ignore).

    Args:
        mask: torch.bool tensor, True = may attend. With ``key_padding``, a padding mask
            ``[batch, 1, 1, n_k]`` (as :func:`padding_mask` returns) or ``[batch, n_k]``.
        key_padding: return a ``key_padding_mask`` ``[batch, n_k]``.

    Returns:
        torch.bool tensor, True = ignore: the shape of ``mask``, or ``[batch, n_k]``.

    Raises:
        TypeError: ``mask`` is not torch.bool.
        ValueError: ``key_padding`` and ``mask`` is not ``[batch, 1, 1, n_k]`` or
            ``[batch, n_k]``.
    """
    _require_bool(mask)
    if key_padding:
        if mask.dim() == 4 and mask.shape[1:3] == (1, 1):
            mask = mask[:, 0, 0, :]
        if mask.dim() != 2:
            raise ValueError(
                "with `key_padding=True`, `mask` must be [batch, 1, 1, n_k] or [batch, n_k], "
                f"got shape {tuple(mask.shape)}"
            )
    return ~mask


def mask_from_additive(mask: torch.Tensor) -> torch.Tensor:
    """Convert an additive float mask (0 = keep, -inf or a large negative = block) to ours.

    Large negatives (<= -1e4) cover the common stand-ins for -inf: minus one billion,
    ``torch.finfo(dtype).min``, -65504 in float16.

    Args:
        mask: floating tensor of any shape.

    Returns:
        torch.bool tensor of the same shape, True = may attend (where ``mask == 0``).

    Raises:
        TypeError: ``mask`` is not a floating tensor.
        ValueError: it holds values other than 0 and large negatives (<= -1e4): that is
            a bias added to the scores, not a mask (checked where values can be read: not
            on ``meta`` tensors, not while ``torch.compile`` traces).
    """
    if not isinstance(mask, torch.Tensor) or not mask.is_floating_point():
        got = kind_of(mask)
        raise TypeError(
            "`mask` must be an additive float mask (0 = keep, -inf or a large negative number, "
            f"<= -1e4, = block), got {got}"
        )
    keep = mask == 0
    block = mask <= -1e4
    if _values_readable(mask) and not bool((keep | block).all()):
        raise ValueError(
            "`mask` holds values other than 0 and large negatives (<= -1e4); "
            "that is a score bias, not a mask"
        )
    return keep


def mask_to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Convert our mask (True = may attend) to an additive one: 0 where True, -inf where False.

    Pass ``dtype=query.dtype`` for torch's SDPA, which wants the mask in the query's dtype.
    A row that is all -inf is a fully masked query: torch's SDPA gives it zeros, but
    ``torch.nn.MultiheadAttention`` with ``need_weights=True`` gives NaN.

    Args:
        mask: torch.bool tensor, True = may attend.
        dtype: floating dtype of the result.

    Returns:
        tensor of ``dtype`` and the shape of ``mask``: 0.0 where True, -inf where False.

    Raises:
        TypeError: ``mask`` is not torch.bool, or ``dtype`` is not floating point.
    """
    _require_bool(mask)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"`dtype` must be a floating-point torch.dtype, got {dtype}")
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


def _values_readable(x: torch.Tensor) -> bool:
    """Whether a check may read ``x``'s values: not on ``meta``, not while compiling."""
    return x.device.type != "meta" and not torch.compiler.is_compiling()


def _require_bool(mask) -> None:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = kind_of(mask)
        raise TypeError(f"`mask` must be torch.bool ({MASK_CONVENTION}), got {got}")
