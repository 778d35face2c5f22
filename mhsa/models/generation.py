"""Decoding, in one place: the loops of :meth:`mhsa.CausalLM.generate` and
:meth:`mhsa.EncoderDecoder.greedy_decode`, and the filters of sampling.

The loops use only the models' public methods (``forward``/``decode``, ``new_cache``,
``pack_projections``) and the caches the attention modules hand out, so they work with
any attention variant that keeps the contract of :class:`mhsa.attention.base.Attention`.

Legend: b batch, n tokens, v vocabulary. Masks are boolean, True = may attend (for an
``attention_mask`` ``[b, n]``: True or 1 = a token, False or 0 = padding).
"""

import torch

from mhsa.core._checks import check_int, check_int_tensor, check_positive_int, check_rank
from mhsa.core._packing import packed_projections
from mhsa.core.masks import padding_mask_from_ids


def top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the ``top_k`` largest logits of each row; the others become ``-inf``.

    Ties with the ``top_k``-th largest are kept (as transformers' ``TopKLogitsWarper``).

    Args:
        logits: ``[..., v]``, floating.
        top_k: ``int >= 1``; at least ``v`` keeps everything.

    Returns:
        a new tensor like ``logits``.

    Source: Fan et al. 2018, "Hierarchical Neural Story Generation", section 5.4 (top-k
    sampling).
    """
    kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]  # [..., 1]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose probabilities sum to ``top_p``.

    Tokens are sorted by probability; a token is dropped (its logit set to ``-inf``) when
    the tokens less likely than it and it together hold at most ``1 - top_p``. The most
    likely token is always kept. The same rule as transformers' ``TopPLogitsWarper``.

    Args:
        logits: ``[..., v]``, floating.
        top_p: in ``(0, 1]``; 1 keeps everything.

    Returns:
        a new tensor like ``logits``.

    Source: Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration", section
    3.1 (nucleus sampling).
    """
    ascending, order = logits.sort(dim=-1)
    tail = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p  # mass of the tail so far
    tail[..., -1] = False  # the most likely token stays
    return logits.masked_fill(tail.scatter(-1, order, tail), float("-inf"))


def next_tokens(logits: torch.Tensor, *, temperature: float = 0.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None):
    """One token per row from the last position's logits ``[b, v]``: greedy or sampled.

    ``temperature == 0`` takes the arg-max (greedy). Otherwise the logits are divided by
    ``temperature``, filtered by :func:`top_k_filter` then :func:`top_p_filter` (the order
    of transformers' logits processors), and a token is drawn from their softmax with
    ``generator``.

    Returns:
        int64 ``[b]``.
    """
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probabilities = logits.float().softmax(dim=-1)
    return torch.multinomial(probabilities, 1, generator=generator)[:, 0]


def generate(model, ids: torch.Tensor, max_new_tokens: int, *, attention_mask=None,
             eos_token_id: int | None = None, temperature: float = 0.0,
             top_k: int | None = None, top_p: float | None = None,
             generator: torch.Generator | None = None, use_cache: bool = True) -> torch.Tensor:
    """The loop of :meth:`mhsa.CausalLM.generate` (documented there), for ``model``.

    ``model``: a :class:`mhsa.CausalLM`, or anything with its ``forward`` (``cache``,
    ``positions``, ``attn_mask``, ``last_only``), ``new_cache`` and ``pack_projections``.
    """
    _check_generate_args(ids, max_new_tokens, attention_mask, eos_token_id, temperature,
                         top_k, top_p, generator, use_cache)
    with torch.inference_mode():  # no autograd bookkeeping at all (faster than no_grad)
        out = _generate(model, ids, max_new_tokens, attention_mask, eos_token_id, temperature,
                        top_k, top_p, generator, use_cache)
    return out.clone()  # a normal tensor again (not an inference tensor): callers may write


def _generate(model, ids, max_new_tokens, attention_mask, eos_token_id, temperature, top_k,
              top_p, generator, use_cache):
    """The loop of :func:`generate`, arguments checked, in inference mode."""
    b, n = ids.shape
    out = ids.new_empty(b, n + max_new_tokens)  # written in place
    out[:, :n] = ids
    keep = positions = None  # keys that are tokens, [b, 1, 1, n_all]; positions [b, n_all]
    if attention_mask is not None and not bool(attention_mask.all()):
        keep = torch.ones(b, n + max_new_tokens, dtype=torch.bool, device=ids.device)
        keep[:, :n] = attention_mask.bool()
        positions = (keep.long().cumsum(dim=-1) - 1).clamp(min=0)
        keep = keep[:, None, None, :]
    caches = model.new_cache(capacity=max(n + max_new_tokens - 1, 1)) if use_cache else None
    finished = torch.zeros(b, dtype=torch.bool, device=ids.device)
    with packed_projections([model]):  # q/k/v and gate/up: one matrix product each
        for t in range(n, n + max_new_tokens):
            start = len(caches[0]) if use_cache else 0  # cached: only the tokens not yet read
            logits = model(out[:, start:t], cache=caches, last_only=True,
                           attn_mask=None if keep is None else keep[..., :t],
                           positions=None if positions is None else positions[:, start:t])
            token = next_tokens(logits[:, -1], temperature=temperature, top_k=top_k,
                                top_p=top_p, generator=generator)
            if eos_token_id is None:
                out[:, t] = token
                continue
            out[:, t] = token.masked_fill(finished, eos_token_id)
            finished |= token == eos_token_id
            if bool(finished.all()):
                return out[:, :t + 1]
    return out


def greedy_decode(model, src: torch.Tensor, *, bos_id: int, eos_id: int, max_len: int,
                  use_cache: bool = False) -> torch.Tensor:
    """Greedy decoding with an encoder-decoder: see :meth:`mhsa.EncoderDecoder.greedy_decode`.

    The source is encoded once; each step runs ``model.decode`` on the target so far (with
    caches, on the newest token only) and appends the last position's arg-max. A sequence
    that has produced ``eos_id`` is finished: the rest of its row is ``model.pad_id``.

    Raises:
        TypeError: ``src`` is not an integer tensor; an id that is not an int.
        ValueError: ``src`` is not 2-D; ``max_len`` is below 1 (not an int: ``TypeError``).
    """
    check_int_tensor("src", src, "an integer tensor of token ids")
    check_rank("src", src, rank=2, layout="[batch, n] token ids")
    check_positive_int("max_len", max_len)
    for name, token in (("bos_id", bos_id), ("eos_id", eos_id)):
        if isinstance(token, bool) or not isinstance(token, int):
            raise TypeError(f"`{name}` must be an int, got {type(token).__name__}")
    with torch.inference_mode():  # no autograd bookkeeping at all (faster than no_grad)
        out = _greedy_decode(model, src, bos_id, eos_id, max_len, use_cache)
    return out.clone()  # a normal tensor again: callers may write into it


def _greedy_decode(model, src, bos_id, eos_id, max_len, use_cache):
    """The loop of :func:`greedy_decode`, arguments checked, in inference mode."""
    with packed_projections([model.decoder]):  # the decoder's weights stacked once per call
        memory, src_mask = model.encode(src)
        if bool(src_mask.all()):  # one check per sequence, outside every forward
            src_mask = None  # no source padding: the same attention, without mask work
        out = torch.full((src.shape[0], max_len + 1), model.pad_id, dtype=torch.long,
                         device=src.device)
        out[:, 0] = bos_id
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        caches = model.decoder.new_cache(capacity=max_len) if use_cache else None
        keep = padding_mask_from_ids(out, model.pad_id)  # [b, 1, 1, max_len + 1], built once
        padded = False  # has a pad id been written? Until then no target mask is needed
        for t in range(max_len):  # reads out[:, :t + 1], writes out[:, t + 1]
            logits = model.decode(out[:, :t + 1], memory, src_mask, caches=caches,
                                  tgt_mask=keep[..., :t + 1] if padded else None)
            next_id = logits[:, -1].argmax(dim=-1).masked_fill(finished, model.pad_id)  # [b]
            out[:, t + 1] = next_id
            keep[:, 0, 0, t + 1] = next_id != model.pad_id
            finished |= next_id == eos_id
            if bool(finished.all()):  # the loop's checks, once per step, outside every forward
                return out[:, 1:t + 2]
            padded = padded or not bool(keep[:, 0, 0, t + 1].all())
    return out[:, 1:]


def _check_generate_args(ids, max_new_tokens, attention_mask, eos_token_id, temperature,
                         top_k, top_p, generator, use_cache) -> None:
    check_int_tensor("ids", ids, "an integer tensor [batch, n] of token ids")
    check_rank("ids", ids, rank=2, layout="[batch, n]")
    if ids.shape[1] == 0:
        raise ValueError(f"`ids` must hold at least one token, got shape {tuple(ids.shape)}")
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    if not isinstance(use_cache, bool):
        raise TypeError(f"`use_cache` must be a bool, got {type(use_cache).__name__}")
    if attention_mask is not None:
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.is_floating_point() \
                or attention_mask.is_complex():
            got = getattr(attention_mask, "dtype", type(attention_mask).__name__)
            raise TypeError(f"`attention_mask` must be a torch.bool or integer tensor "
                            f"[batch, n] (True or 1 = token, False or 0 = padding), got {got}")
        if attention_mask.shape != ids.shape:
            raise ValueError(f"`attention_mask` must be [batch, n] = {tuple(ids.shape)} like "
                             f"`ids`, got shape {tuple(attention_mask.shape)}")
        if attention_mask.device != ids.device:
            raise ValueError(f"`attention_mask` is on {attention_mask.device} but `ids` is on "
                             f"{ids.device}")
    if eos_token_id is not None:
        check_int("eos_token_id", eos_token_id, minimum=0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"`temperature` must be a number, got {type(temperature).__name__}")
    if not temperature >= 0:
        raise ValueError(f"`temperature` must be >= 0 (0 = greedy), got {temperature}")
    if top_k is not None:
        check_int("top_k", top_k, minimum=1)
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
            raise TypeError(f"`top_p` must be a number, got {type(top_p).__name__}")
        if not 0 < top_p <= 1:
            raise ValueError(f"`top_p` must be in (0, 1], got {top_p}")
    if temperature == 0 and (top_k is not None or top_p is not None):
        raise ValueError("`top_k` and `top_p` filter what sampling draws from: pass a "
                         "temperature > 0 with them (temperature=0 is greedy)")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"`generator` must be a torch.Generator, got {type(generator).__name__}")
