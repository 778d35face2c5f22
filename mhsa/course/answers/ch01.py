"""Answers to chapter 1's exercises (why context matters), computed with the package.

Each answer is a property of the operations, not of one random draw, so the functions
build their own seeded inputs rather than copying the chapter's.
"""

import torch
import torch.nn.functional as F

import mhsa

_SENTENCE = ["They", "stoned", "the", "witch", "."]
_EMBED_DIM = 8


def _setup(seed: int = 0):
    """A seeded embedding of the first sentence and random query, key, value matrices."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(len(_SENTENCE), _EMBED_DIM, generator=generator)
    w_query, w_key, w_value = (
        torch.randn(_EMBED_DIM, _EMBED_DIM, generator=generator) / _EMBED_DIM**0.5
        for _ in range(3)
    )
    return x, w_query, w_key, w_value


def per_token_mlp_cosine() -> float:
    """01.1: cosine between a per-token MLP's outputs for two equal input vectors."""
    with torch.random.fork_rng(devices=[]):  # seed locally: the reader's random stream is untouched
        torch.manual_seed(0)
        mlp = torch.nn.Sequential(
            torch.nn.Linear(_EMBED_DIM, 32), torch.nn.ReLU(), torch.nn.Linear(32, _EMBED_DIM)
        )
        x, *_ = _setup()
        stoned = x[1]
        other_sentence = torch.cat([torch.randn(3, _EMBED_DIM), stoned[None]])  # same vector, new context
    with torch.no_grad():
        return F.cosine_similarity(mlp(x)[1], mlp(other_sentence)[3], dim=0).item()


def zero_query_weight() -> float:
    """01.2: the weight 'stoned' gives each token when every query is zero."""
    x, w_query, w_key, w_value = _setup()
    _, weights = mhsa.scaled_dot_product_attention(
        x @ torch.zeros_like(w_query), x @ w_key, x @ w_value
    )
    return weights[1, 0].item()


def shuffled_cosine() -> float:
    """01.3: cosine between 'stoned' updated in the sentence and in a shuffled copy."""
    x, w_query, w_key, w_value = _setup()
    order = [_SENTENCE.index(t) for t in ["witch", "the", "They", "stoned", "."]]

    def attend(rows: torch.Tensor) -> torch.Tensor:
        output, _ = mhsa.scaled_dot_product_attention(rows @ w_query, rows @ w_key, rows @ w_value)
        return rows + output

    return F.cosine_similarity(attend(x)[1], attend(x[order])[3], dim=0).item()


# Exercise 01.4: two sentences per sense of "stoned"; the first two are the chapter's.
SENSE_SENTENCES = {
    "throwing": [["They", "stoned", "the", "witch", "."],
                 ["The", "crowd", "stoned", "the", "thief", "."]],
    "intoxicated": [["This", "guy", "got", "completely", "stoned", "."],
                    ["She", "was", "totally", "stoned", "."]],
}
# The control: the second throwing sentence reworded so that it shares no "the" with the first.
SENSE_SENTENCES_NO_SHARED_WORD = {
    "throwing": [["They", "stoned", "the", "witch", "."],
                 ["A", "crowd", "stoned", "a", "thief", "."]],
    "intoxicated": SENSE_SENTENCES["intoxicated"],
}


def random_layer_sense_scores(
    n_layers: int = 2000, seed: int = 0, sentences: dict | None = None
) -> dict:
    """01.4: how often an untrained attention layer looks as if it resolved "stoned".

    Draws ``n_layers`` random layers at once from one seeded generator, each a random embedding
    table (``embed_dim`` 8) with random query, key and value matrices as in the chapter; runs one
    pass of attention plus the residual over each of the four sentences of ``sentences``
    (``SENSE_SENTENCES`` by default; ``SENSE_SENTENCES_NO_SHARED_WORD`` is the control whose
    throwing sentences share no "the"); and compares the cosines between the four updated "stoned" vectors. Two scores of "right":

    - ``"average"``: the mean cosine of the two same-sense pairs exceeds the mean of the four
      different-sense pairs;
    - ``"each"``: every sentence is closer to its same-sense partner than to both sentences of
      the other sense.

    Args:
        n_layers: how many random layers to draw.
        seed: the seed of the generator that draws them (on the CPU).
        sentences: ``{"throwing": [two token lists], "intoxicated": [two token lists]}``, each
            list containing "stoned"; ``None`` for ``SENSE_SENTENCES``.

    Returns:
        ``{"average": share of layers, "each": share of layers}``, shares in ``[0, 1]``.
    """
    groups = SENSE_SENTENCES if sentences is None else sentences
    sentences = [s for group in groups.values() for s in group]  # 0, 1 throwing; 2, 3 not
    vocab = sorted({t for s in sentences for t in s})
    generator = torch.Generator().manual_seed(seed)
    tables = torch.randn(n_layers, len(vocab), _EMBED_DIM, generator=generator)  # [b, vocab, e]
    w_query, w_key, w_value = torch.randn(
        3, n_layers, _EMBED_DIM, _EMBED_DIM, generator=generator) / _EMBED_DIM**0.5  # [b, e, e]
    stoned = []
    for sentence in sentences:
        x = tables[:, [vocab.index(t) for t in sentence]]  # [b, n, e]: one batch entry per layer
        output, _ = mhsa.scaled_dot_product_attention(x @ w_query, x @ w_key, x @ w_value)
        stoned.append((x + output)[:, sentence.index("stoned")])  # [b, e]
    stoned = torch.stack(stoned, dim=1)  # [b, 4, e]
    cos = F.cosine_similarity(stoned[:, :, None], stoned[:, None], dim=-1)  # [b, 4, 4]
    same = (cos[:, 0, 1] + cos[:, 2, 3]) / 2
    across = cos[:, :2, 2:]  # [b, 2, 2]: throwing sentences against intoxicated ones
    average = same > across.mean(dim=(1, 2))
    each = ((cos[:, 0, 1] > across[:, 0].amax(-1)) & (cos[:, 0, 1] > across[:, 1].amax(-1))
            & (cos[:, 2, 3] > across[:, :, 0].amax(-1)) & (cos[:, 2, 3] > across[:, :, 1].amax(-1)))
    return {"average": average.float().mean().item(), "each": each.float().mean().item()}


ANSWERS = {
    "01.1": per_token_mlp_cosine,
    "01.2": zero_query_weight,
    "01.3": shuffled_cosine,
}
