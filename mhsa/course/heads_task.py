"""A task for two heads: at every position, name the first token and the previous token.

Chapter 3 trains :class:`TinyAttentionModel` on :func:`first_and_previous` with 1, 2 and 4
heads, at the same ``embed_dim`` (so with the same parameters), and compares the accuracies.
Every position ``i >= 2`` of a sequence of distinct letters must name two tokens at once: the
first token of the sequence (position 0) and the token just before it (position ``i - 1``).
Two places, two jobs: two heads can take one each; one head returns one weighted average per
position and, at the chapter's width and number of steps, learns only one of the two (with
other seeds or much longer training it sometimes finds a partial workaround, splitting its
weight between the two places).

Legend: b batch, n tokens, e embed_dim, h heads, V symbols (the vocabulary).
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from mhsa.attention.multihead import MultiHeadAttention
from mhsa.core._checks import check_int, check_positive_int

SYMBOLS = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")  # the task's tokens: V = 26 letters
IGNORE = -100  # a target that F.cross_entropy (ignore_index=-100) and accuracy() skip
JOBS = ("first token", "previous token")  # what each of the two predictions names


def first_and_previous(batch: int, n_tokens: int, generator: torch.Generator, *,
                       n_symbols: int = len(SYMBOLS)) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sequences of distinct symbols and, per position, the two tokens it must name.

    Each row draws ``n_tokens`` different symbols out of ``n_symbols`` (no repeats, so the
    first and the previous token of a position ``i >= 2`` are always two different tokens).

    Args:
        batch: number of sequences ``b``, ``int >= 1``.
        n_tokens: length ``n``, ``int >= 3`` and at most ``n_symbols``.
        generator: the ``torch.Generator`` that draws the symbols (the only random source).
        n_symbols: size of the vocabulary ``V``, ``int >= 3``; symbol ``s`` is
            ``SYMBOLS[s]`` when ``V <= 26``.

    Returns:
        ``(ids, targets)``: ``ids`` ``[b, n]`` int64 in ``[0, V)``; ``targets`` ``[b, n, 2]``
        int64, where ``targets[:, i, 0]`` is the first token ``ids[:, 0]`` and
        ``targets[:, i, 1]`` the previous token ``ids[:, i - 1]`` for ``i >= 2``. Positions 0
        and 1 hold ``IGNORE`` (-100): position 0 has no previous token, and at position 1
        the two are the same token.

    Raises:
        TypeError: ``batch``, ``n_tokens`` or ``n_symbols`` is not an int.
        ValueError: ``batch < 1``, ``n_symbols < 3``, ``n_tokens < 3`` or
            ``n_tokens > n_symbols``.

    Source: the two patterns are those of a previous-token head and of heads that attend to
    the first token, both found in trained transformers (Olsson et al. 2022, "In-context
    Learning and Induction Heads"; Xiao et al. 2023, "Efficient Streaming Language Models
    with Attention Sinks"); the task that needs both at once is this course's.
    """
    check_positive_int("batch", batch)
    check_int("n_symbols", n_symbols, minimum=3)
    check_int("n_tokens", n_tokens, minimum=3)
    if n_tokens > n_symbols:
        raise ValueError(f"`n_tokens` ({n_tokens}) distinct symbols need `n_symbols` >= "
                         f"{n_tokens}, got {n_symbols}")
    ids = torch.rand(batch, n_symbols, generator=generator).argsort(dim=-1)[:, :n_tokens]  # [b, n]
    targets = torch.full((batch, n_tokens, 2), IGNORE, dtype=torch.int64)
    targets[:, 2:, 0] = ids[:, :1]  # the first token, for every position i >= 2
    targets[:, 2:, 1] = ids[:, 1:-1]  # the previous token: ids[:, i - 1]
    return ids, targets


class TinyAttentionModel(nn.Module):
    """Token and position embeddings, one causal multi-head attention layer, a linear readout.

    ``logits = readout(attention(embedding(ids) + positions))``: no residual, no feed-forward
    layer, so everything a position knows about other tokens comes through the attention
    heads. The readout gives two predictions per position (``JOBS``), ``V`` logits each.
    The parameter count does not depend on ``num_heads``.

    Args:
        n_symbols: vocabulary size ``V``, ``int >= 1``.
        n_tokens: longest sequence ``n`` (rows of the position table), ``int >= 1``.
        embed_dim: width ``e`` of every vector, ``int >= 1``.
        num_heads: heads of the attention layer; must divide ``embed_dim``.

    Attributes:
        embedding: ``nn.Embedding``, ``[V, e]``, one row per symbol.
        positions: ``nn.Embedding``, ``[n, e]``, one row per position, added to the tokens.
        attention: a :class:`mhsa.MultiHeadAttention` ``(embed_dim, num_heads)``, called with
            ``is_causal=True``.
        readout: ``nn.Linear``, ``e -> 2 * V``.
        n_symbols: ``V``.

    Raises:
        TypeError: a size is not an int.
        ValueError: a size below 1, or ``embed_dim`` not divisible by ``num_heads``.
    """

    def __init__(self, n_symbols: int, n_tokens: int, embed_dim: int, num_heads: int):
        super().__init__()
        for name, size in (("n_symbols", n_symbols), ("n_tokens", n_tokens)):
            check_positive_int(name, size)
        self.n_symbols = n_symbols
        self.embedding = nn.Embedding(n_symbols, embed_dim)
        self.positions = nn.Embedding(n_tokens, embed_dim)
        self.attention = MultiHeadAttention(embed_dim, num_heads)
        self.readout = nn.Linear(embed_dim, 2 * n_symbols)

    def forward(self, ids: torch.Tensor, need_weights: bool = False):
        """``ids`` ``[b, n]`` (int64, ``n`` at most the model's ``n_tokens``) to logits.

        Returns:
            ``(logits, weights)``: ``logits`` ``[b, n, 2, V]``, float32 (``[..., 0, :]``
            names the first token, ``[..., 1, :]`` the previous one); ``weights``
            ``[b, h, n, n]``, the causal attention weights of every head, when
            ``need_weights``, else None.
        """
        x = self.embedding(ids) + self.positions.weight[:ids.shape[1]]  # [b, n, e]
        out, weights = self.attention(x, is_causal=True, need_weights=need_weights)
        return self.readout(out).unflatten(-1, (2, self.n_symbols)), weights


def train(model: TinyAttentionModel, steps: int, generator: torch.Generator, *,
          batch: int = 64, lr: float = 1e-2, progress=None) -> list[float]:
    """Train ``model`` on fresh :func:`first_and_previous` batches with Adam; the losses.

    The loss is the cross-entropy of both predictions at every position ``i >= 2``. Gradients
    are switched on inside (the chapters turn them off globally), and the model is left in
    evaluation mode. The data come from ``generator``; the model's initial weights are the
    caller's (seed torch before building the model).

    Args:
        model: the model to train, on any device (batches follow its parameters).
        steps: optimizer steps, ``int >= 1``; one new batch each.
        generator: draws the batches (on the CPU).
        batch: sequences per step, ``int >= 1``.
        lr: Adam's learning rate.
        progress: wraps the range of steps, such as ``functools.partial(tqdm, desc="1 head")``;
            it may have ``set_postfix`` (tqdm's). None: no progress display.

    Returns:
        The loss of every step, a list of ``steps`` Python floats.

    Raises:
        TypeError: ``steps`` or ``batch`` is not an int.
        ValueError: ``steps`` or ``batch`` below 1.
    """
    check_positive_int("steps", steps)
    check_positive_int("batch", batch)
    device = next(model.parameters()).device
    n_tokens = model.positions.num_embeddings
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    model.train()
    bar = range(steps) if progress is None else progress(range(steps))
    with torch.enable_grad():
        for step in bar:
            ids, targets = first_and_previous(batch, n_tokens, generator,
                                              n_symbols=model.n_symbols)
            logits, _ = model(ids.to(device))
            loss = F.cross_entropy(logits.flatten(0, 2), targets.to(device).flatten(),
                                   ignore_index=IGNORE)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if step % 50 == 0 and hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    model.eval()
    return losses


class Accuracy(NamedTuple):
    """Shares of the scored positions (targets not ``IGNORE``), as Python floats in [0, 1]."""

    both: float  # both tokens named right
    first: float  # the first token named right
    previous: float  # the previous token named right


def accuracy(logits: torch.Tensor, targets: torch.Tensor):
    """How often the most likely symbol is the target, over positions that have targets.

    Args:
        logits: ``[b, n, 2, V]``, as returned by :class:`TinyAttentionModel`.
        targets: ``[b, n, 2]`` int64, as returned by :func:`first_and_previous`.

    Returns:
        An ``Accuracy``, a named tuple of three Python floats: ``both``, ``first`` and
        ``previous``.

    Raises:
        ValueError: the shapes do not match, or no position has targets.
    """
    if logits.dim() != 4 or tuple(logits.shape[:3]) != tuple(targets.shape):
        raise ValueError(f"`logits` [b, n, 2, V] must match `targets` [b, n, 2], got shapes "
                         f"{tuple(logits.shape)} and {tuple(targets.shape)}")
    scored = (targets != IGNORE).all(dim=-1)  # [b, n]
    if not scored.any():
        raise ValueError("no position has targets (all are IGNORE)")
    right = logits.argmax(dim=-1).cpu() == targets.cpu()  # [b, n, 2]
    right = right[scored.cpu()]  # [positions, 2], bool
    return Accuracy(both=right.all(dim=-1).float().mean().item(),
                    first=right[:, 0].float().mean().item(),
                    previous=right[:, 1].float().mean().item())


def weight_on_places(weights: torch.Tensor) -> torch.Tensor:
    """Mean attention weight each head puts on the first token and on the previous token.

    Averaged over the batch and the query positions ``i >= 2``.

    Args:
        weights: ``[b, h, n, n]`` attention weights (rows sum to 1), ``n >= 3``.

    Returns:
        ``[h, 2]`` float tensor on the CPU: column 0 the weight on key 0 (the first token),
        column 1 the weight on key ``i - 1`` (the previous token).

    Raises:
        ValueError: ``weights`` is not ``[b, h, n, n]`` with ``n >= 3``.
    """
    if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2] or weights.shape[-1] < 3:
        raise ValueError(f"`weights` must be [b, h, n, n] with n >= 3, got shape "
                         f"{tuple(weights.shape)}")
    queries = torch.arange(2, weights.shape[-1], device=weights.device)
    first = weights[:, :, 2:, 0].mean(dim=(0, 2))  # [h]
    previous = weights[:, :, queries, queries - 1].mean(dim=(0, 2))  # [h]
    return torch.stack([first, previous], dim=-1).cpu()
