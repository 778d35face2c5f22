"""Chapter 3's two-place task: its data, its model, its training loop and its measures."""

import pytest
import torch

from mhsa.course.heads_task import (
    IGNORE,
    SYMBOLS,
    Accuracy,
    TinyAttentionModel,
    accuracy,
    first_and_previous,
    train,
    weight_on_places,
)


def test_sequences_hold_distinct_symbols_and_targets_name_the_first_and_previous_token():
    ids, targets = first_and_previous(50, 8, torch.Generator().manual_seed(0))
    assert ids.shape == (50, 8) and ids.dtype == torch.int64
    assert targets.shape == (50, 8, 2) and targets.dtype == torch.int64
    assert 0 <= ids.min() and ids.max() < len(SYMBOLS)
    assert all(len(set(row)) == 8 for row in ids.tolist())  # no repeats within a sequence
    assert (targets[:, :2] == IGNORE).all()  # positions 0 and 1 are not scored
    for i in range(2, 8):
        assert torch.equal(targets[:, i, 0], ids[:, 0])
        assert torch.equal(targets[:, i, 1], ids[:, i - 1])


def test_sequences_come_from_the_generator_alone():
    first, _ = first_and_previous(4, 6, torch.Generator().manual_seed(3))
    torch.manual_seed(123)  # the global generator plays no part
    second, _ = first_and_previous(4, 6, torch.Generator().manual_seed(3))
    assert torch.equal(first, second)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"batch": 2, "n_tokens": 9, "n_symbols": 8}, ValueError, r"`n_tokens` \(9\) distinct symbols"),
    ({"batch": 2, "n_tokens": 2}, ValueError, "`n_tokens` must be an int >= 3"),
    ({"batch": 0, "n_tokens": 5}, ValueError, "`batch` must be a positive int"),
    ({"batch": 2.0, "n_tokens": 5}, TypeError, "`batch` must be an int"),
])
def test_first_and_previous_refuses_impossible_sizes(kwargs, error, match):
    with pytest.raises(error, match=match):
        first_and_previous(generator=torch.Generator(), **kwargs)


def test_the_model_has_the_same_parameters_for_every_head_count():
    counts = {h: sum(p.numel() for p in TinyAttentionModel(26, 8, 8, h).parameters())
              for h in (1, 2, 4, 8)}
    assert len(set(counts.values())) == 1, counts
    model = TinyAttentionModel(26, 8, 8, 2)
    logits, weights = model(torch.zeros(3, 5, dtype=torch.int64), need_weights=True)
    assert logits.shape == (3, 5, 2, 26) and weights.shape == (3, 2, 5, 5)
    assert (weights.triu(diagonal=1) == 0).all()  # causal: no query sees a later key
    with pytest.raises(ValueError, match=r"`embed_dim` \(8\) must be divisible by `num_heads` \(3\)"):
        TinyAttentionModel(26, 8, 8, 3)


def test_accuracy_counts_the_scored_positions_only():
    targets = torch.full((1, 4, 2), IGNORE)
    targets[0, 2:] = torch.tensor([[1, 2], [1, 0]])
    logits = torch.zeros(1, 4, 2, 3)
    logits[0, 2, 0, 1] = logits[0, 2, 1, 2] = 1.0  # position 2: both right
    logits[0, 3, 0, 1] = logits[0, 3, 1, 2] = 1.0  # position 3: first right, previous wrong
    assert accuracy(logits, targets) == Accuracy(both=0.5, first=1.0, previous=0.5)
    with pytest.raises(ValueError, match="must match `targets`"):
        accuracy(logits[:, :3], targets)
    with pytest.raises(ValueError, match="no position has targets"):
        accuracy(logits, torch.full((1, 4, 2), IGNORE))


def test_weight_on_places_reads_key_0_and_the_key_before_each_query():
    n = 5
    weights = torch.zeros(2, 2, n, n)
    weights[:, 0, :, 0] = 1.0  # head 0 looks at the first token
    weights[:, 1, torch.arange(1, n), torch.arange(n - 1)] = 1.0  # head 1 at the previous one
    weights[:, 1, 0, 0] = 1.0
    torch.testing.assert_close(weight_on_places(weights), torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
                               rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"\[b, h, n, n\] with n >= 3"):
        weight_on_places(weights[..., :2, :2])


def test_training_is_seeded_lowers_the_loss_and_reports_progress():
    wrapped = []

    def progress(steps):
        wrapped.append(len(steps))
        return steps

    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = TinyAttentionModel(26, 8, 8, 2)
        runs.append(train(model, 60, torch.Generator().manual_seed(1), progress=progress))
    assert runs[0] == runs[1]  # same seeds, same losses, bit for bit
    assert len(runs[0]) == 60 and wrapped == [60, 60]
    assert sum(runs[0][-10:]) / 10 < sum(runs[0][:10]) / 10 - 0.5
    assert not model.training  # left in evaluation mode
    with pytest.raises(ValueError, match="`steps` must be a positive int"):
        train(model, 0, torch.Generator())
