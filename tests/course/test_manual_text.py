"""mhsa.course.manual_text: chapter 10's text, tokenizer, training loop and perplexity."""

import math

import pytest
import torch

import mhsa
from mhsa.course import manual_text


@pytest.fixture(scope="module")
def manual():
    return manual_text.python_manual()


@pytest.fixture(scope="module")
def tokenizer(manual):
    return manual_text.train_tokenizer(manual.train_texts, 256)


def test_split_holds_out_every_eighth_topic(manual):
    import pydoc_data.topics
    names = sorted(pydoc_data.topics.topics)
    assert manual.held_out_names == names[5::8]
    assert len(manual.train_texts) + len(manual.test_texts) == len(names)
    assert all("  " not in t and "\n" not in t for t in manual.test_texts)


def test_clean_drops_underlines_and_squeezes_whitespace():
    assert manual_text.clean("Title\n=====\n\n a  b\tc") == "Title a b c"


def test_tokenizer_is_deterministic_and_round_trips(manual, tokenizer):
    again = manual_text.train_tokenizer(manual.train_texts, 256)
    assert tokenizer.to_str() == again.to_str()
    assert tokenizer.get_vocab_size() == 256
    text = 'The "while" statement is used for repeated execution'
    assert tokenizer.decode(tokenizer.encode(text).ids) == text
    ids = manual_text.encode(tokenizer, [text, text])
    assert ids.dtype == torch.int64 and len(ids) == 2 * len(tokenizer.encode(text).ids)


def test_uniform_model_has_perplexity_of_the_vocabulary():
    class Uniform(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))

        def forward(self, ids):
            return torch.zeros(*ids.shape, 50) + self.w

    ids = torch.randint(50, (200,), generator=torch.Generator().manual_seed(0))
    assert math.isclose(manual_text.perplexity(Uniform(), ids, context=16), 50, rel_tol=1e-6)


def test_training_lowers_held_out_perplexity(manual, tokenizer):
    train_ids = manual_text.encode(tokenizer, manual.train_texts[:40])
    test_ids = manual_text.encode(tokenizer, manual.test_texts[:5])
    torch.manual_seed(0)
    model = mhsa.CausalLM(256, 32, 2, 64, 1)
    before = manual_text.perplexity(model, test_ids, context=16)
    steps = []
    manual_text.train_language_model(model, train_ids, steps=60, context=16, batch_size=8,
                                     progress=lambda r: steps.append(r) or r)
    after = manual_text.perplexity(model, test_ids, context=16)
    assert not model.training and len(steps) == 1 and len(steps[0]) == 60
    assert before > 200 and after < 0.5 * before  # from about uniform (256) to far better


def test_same_seed_same_model(manual, tokenizer):
    train_ids = manual_text.encode(tokenizer, manual.train_texts[:10])
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(manual_text.train_language_model(
            mhsa.CausalLM(256, 16, 2, 32, 1), train_ids, steps=5, context=8, batch_size=4))
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("ids, error, match", [
    (torch.zeros(40), TypeError, "`train_ids` must be an integer tensor"),
    (torch.zeros(2, 40, dtype=torch.long), ValueError, r"`train_ids` must be 1-D \[n\]"),
    (torch.zeros(9, dtype=torch.long), ValueError, "more than context"),
])
def test_training_refuses_bad_streams(ids, error, match):
    with pytest.raises(error, match=match):
        manual_text.train_language_model(mhsa.CausalLM(16, 8, 2, 16, 1), ids, steps=1,
                                         context=8)


def test_perplexity_refuses_short_streams():
    with pytest.raises(ValueError, match="more than context = 8 ids, got 8"):
        manual_text.perplexity(mhsa.CausalLM(16, 8, 2, 16, 1), torch.zeros(8, dtype=torch.long),
                               context=8)


def test_bigram_perplexity_is_the_smoothed_count_by_hand():
    # pairs of the training stream: (0, 1) twice, (1, 0) once; V = 2, alpha = 0.1
    train_ids = torch.tensor([0, 1, 0, 1])
    # p(1 | 0) = (2 + 0.1) / (2 + 0.2), p(0 | 1) = (1 + 0.1) / (1 + 0.2)
    expected = math.exp(-(math.log(2.1 / 2.2) + math.log(1.1 / 1.2)) / 2)
    got = manual_text.bigram_perplexity(train_ids, torch.tensor([0, 1, 0]), vocab_size=2,
                                        alpha=0.1)
    assert math.isclose(got, expected, rel_tol=1e-6)  # float32 counts and logs


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"alpha": 0.0}, ValueError, "alpha"),
    ({"vocab_size": 2.0}, TypeError, "vocab_size"),
])
def test_bigram_perplexity_refuses_bad_arguments(kwargs, error, match):
    args = {"vocab_size": 2, "alpha": 0.1} | kwargs
    with pytest.raises(error, match=match):
        manual_text.bigram_perplexity(torch.tensor([0, 1]), torch.tensor([1, 0]), **args)
