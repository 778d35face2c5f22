"""Chapter 10's data and training loop, for the chapters that build on it (Part VII).

Chapter 10 writes each step in its cells: the text (Python's own manual, ``pydoc_data.topics``,
which installs with Python), a byte-pair-encoding tokenizer trained on its training topics, the
next-token training loop and the held-out perplexity. Later chapters import them from here, and
chapter 10 asserts that its cells and these functions give the same results.

Legend: b batch, n tokens (``context``), V vocabulary.
"""

import pydoc_data.topics
import re
from typing import NamedTuple

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from mhsa.core._checks import check_int, check_int_tensor, check_rank


class ManualSplit(NamedTuple):
    """The topics of Python's manual, cleaned and split (see :func:`python_manual`)."""

    train_texts: list[str]
    test_texts: list[str]
    held_out_names: list[str]


def clean(text: str) -> str:
    """``text`` without heading underlines, every run of whitespace one space."""
    text = re.sub(r"^[*=-]+$", "", text, flags=re.MULTILINE)
    return " ".join(text.split())


def python_manual() -> ManualSplit:
    """The topics of ``pydoc_data.topics`` (sorted by name), cleaned; every 8th held out.

    Topic names sorted; ``names[5::8]`` are held out (chapter 10, "Real text"). The text is
    part of the Python documentation (Python Software Foundation License, version 2) and
    installs with Python: nothing is downloaded. Its length depends on the Python version.

    Returns:
        :class:`ManualSplit` ``(train_texts, test_texts, held_out_names)``.
    """
    topics = pydoc_data.topics.topics
    names = sorted(topics)
    held_out = names[5::8]
    kept = set(held_out)
    return ManualSplit([clean(topics[n]) for n in names if n not in kept],
                       [clean(topics[n]) for n in held_out], held_out)


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """A byte-pair-encoding tokenizer (Hugging Face ``tokenizers``) trained on ``texts``.

    ``Metaspace`` pre-tokenization marks the start of each word with "▁" as SentencePiece
    does, and decoding puts the spaces back. Training is deterministic: the same texts give
    the same vocabulary and merges.

    Args:
        texts: training texts.
        vocab_size: entries of the vocabulary, ``int >= 1``.

    Raises:
        TypeError: ``vocab_size`` is not an int.
        ValueError: ``vocab_size < 1``.

    Source: Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword
    Units", section 3.2 (byte-pair encoding); Kudo & Richardson 2018, "SentencePiece".
    """
    check_int("vocab_size", vocab_size)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def encode(tokenizer: Tokenizer, texts: list[str]) -> torch.Tensor:
    """One stream of token ids ``[n]`` (int64): the texts one after the other."""
    return torch.tensor([i for enc in tokenizer.encode_batch(texts) for i in enc.ids])


def train_language_model(model: torch.nn.Module, train_ids: torch.Tensor, *, steps: int,
                         context: int = 32, batch_size: int = 32, lr: float = 5e-3,
                         seed: int = 1, progress=None) -> torch.nn.Module:
    """Chapter 10's training loop: next-token loss on random windows of ``train_ids``.

    AdamW (weight decay 0.1, betas (0.9, 0.95)) under a one-cycle schedule (``OneCycleLR``) with
    10% warm-up to the peak ``lr``, gradients clipped to norm 1. ``OneCycleLR`` also cycles
    AdamW's beta1 against the learning rate, between 0.95 and 0.85 (its default
    ``cycle_momentum``): it sets beta1 to 0.95 as it is built, so the 0.9 given is never used;
    beta2 stays 0.95. The windows come from a generator seeded with ``seed``, so
    every model trained with the same arguments reads the same windows.

    Args:
        model: maps ids ``[batch, context]`` to logits ``[batch, context, V]`` (a
            :class:`mhsa.CausalLM`); trained in place on its own device.
        train_ids: the training stream ``[n]``, an integer tensor, ``n > context + 1``.
        steps, context, batch_size: optimizer steps, window length, windows per step.
        lr: peak learning rate.
        seed: seed of the windows' generator.
        progress: wraps ``range(steps)``, such as ``functools.partial(tqdm, desc=...)``;
            it may have ``set_postfix`` (tqdm's). None: no progress display.

    Returns:
        ``model``, in eval mode.

    Raises:
        TypeError: ``train_ids`` is not an integer tensor or a size is not an int.
        ValueError: ``train_ids`` is not 1-D or shorter than ``context + 2``; a size below 1.

    Source: Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization" (AdamW);
    Smith & Topin 2019, "Super-Convergence" (one-cycle schedule).
    """
    check_int_tensor("train_ids", train_ids, "an integer tensor [n] of token ids")
    check_rank("train_ids", train_ids, rank=1, layout="[n]")
    for name, n in (("steps", steps), ("context", context), ("batch_size", batch_size)):
        check_int(name, n)
    if len(train_ids) < context + 2:
        raise ValueError(f"`train_ids` must hold more than context + 1 = {context + 1} ids, "
                         f"got {len(train_ids)}")
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1,
                                  betas=(0.9, 0.95), foreach=True)  # same numbers, faster
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps,
                                                   pct_start=0.1)
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.arange(context + 1)
    model.train()
    loop = range(steps) if progress is None else progress(range(steps))
    for step in loop:
        starts = torch.randint(len(train_ids) - context - 1, (batch_size,), generator=generator)
        window = train_ids[starts[:, None] + offsets].to(device)  # [b, context + 1]
        logits = model(window[:, :-1])  # [b, context, V]
        loss = F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 50 == 0 and hasattr(loop, "set_postfix"):
            loop.set_postfix(loss=f"{loss.item():.2f}", refresh=False)
    return model.eval()


def bigram_perplexity(train_ids: torch.Tensor, ids: torch.Tensor, *, vocab_size: int,
                      alpha: float = 0.1) -> float:
    """Held-out perplexity of chapter 10's baseline: a bigram model with add-alpha smoothing.

    ``p(b | a) = (count(a, b) + alpha) / (count(a) + alpha * V)``, the counts taken from the
    pairs of consecutive ids in ``train_ids``; the perplexity is ``exp`` of the mean
    ``-log p(b | a)`` over the pairs of ``ids``.

    Args:
        train_ids: the training stream ``[n]``, integer ids below ``vocab_size``.
        ids: the stream to score ``[m]``, ``m >= 2``, integer ids below ``vocab_size``.
        vocab_size: V, ``int >= 1``.
        alpha: the count added to every pair, a float ``> 0`` (chapter 10 picks 0.1).

    Returns:
        the perplexity, a float ``>= 1``.

    Raises:
        TypeError: ``train_ids`` or ``ids`` is not an integer tensor, ``vocab_size`` not an
            int.
        ValueError: ``train_ids`` or ``ids`` is not 1-D, ``alpha`` is not above 0.

    Source: additive (Laplace/Lidstone) smoothing, Jurafsky and Martin, "Speech and Language
    Processing", chapter 3 (n-gram language models).
    """
    for name, stream in (("train_ids", train_ids), ("ids", ids)):
        check_int_tensor(name, stream, "an integer tensor [n] of token ids")
        check_rank(name, stream, rank=1, layout="[n]")
    check_int("vocab_size", vocab_size)
    if not alpha > 0:
        raise ValueError(f"`alpha` must be above 0, got {alpha!r}")
    counts = torch.zeros(vocab_size, vocab_size)  # counts[a, b]: how often b follows a
    counts.index_put_((train_ids[:-1], train_ids[1:]), torch.ones(len(train_ids) - 1),
                      accumulate=True)
    probs = (counts + alpha) / (counts + alpha).sum(dim=1, keepdim=True)  # rows sum to 1
    return probs[ids[:-1], ids[1:]].log().mean().neg().exp().item()


@torch.inference_mode()
def perplexity(model: torch.nn.Module, ids: torch.Tensor, *, context: int = 32) -> float:
    """``exp`` of the mean next-token loss over ``ids``, read in windows of ``context`` tokens.

    The stream is cut into ``(len(ids) - 1) // context`` windows; each predicts its next
    tokens from the window's own earlier tokens only (a model that reads more context would
    do better).

    Args:
        model: maps ids ``[batch, context]`` to logits ``[batch, context, V]``.
        ids: a token stream ``[n]``, integer, ``n > context``.
        context: window length, ``int >= 1``.

    Returns:
        the perplexity, a float ``>= 1``.

    Raises:
        TypeError: ``ids`` is not an integer tensor, ``context`` not an int.
        ValueError: ``ids`` is not 1-D or holds ``context`` ids or fewer.
    """
    check_int_tensor("ids", ids, "an integer tensor [n] of token ids")
    check_rank("ids", ids, rank=1, layout="[n]")
    check_int("context", context)
    if len(ids) <= context:
        raise ValueError(f"`ids` must hold more than context = {context} ids, got {len(ids)}")
    device = next(model.parameters()).device
    n = (len(ids) - 1) // context * context
    inputs, targets = ids[:n].view(-1, context), ids[1:n + 1].view(-1, context)
    logits = model(inputs.to(device))
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten().to(device)).exp().item()
