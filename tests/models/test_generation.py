"""Decoding (mhsa.models.generation) as users of transformers' ``generate`` expect it.

Oracles: transformers' ``LlamaForCausalLM.generate`` (greedy, left padding, end of sequence)
and its logits processors (temperature, top-k, top-p), on the tiny random models of
test_causal_lm. Tokens are compared exactly; filtered probabilities within float32 rounding
of a softmax over 97 logits (1e-6).
"""

import pytest
import torch
from test_causal_lm import VOCAB, hf_model  # tiny transformers Llama/Mistral oracles

import mhsa
from mhsa import CausalLM
from mhsa.models.generation import top_k_filter, top_p_filter

PROBS_TOL = {"atol": 1e-6, "rtol": 1e-6}


def pair(**kw):
    """(transformers model, its mhsa copy), eval mode."""
    theirs = hf_model(**kw)
    return theirs, CausalLM.from_hf_llama(theirs)


def left_padded(generator_seed=0):
    """Two prompts of 6 and 3 tokens, the second left-padded with id 0, and their mask."""
    g = torch.Generator().manual_seed(generator_seed)
    long, short = torch.randint(1, VOCAB, (6,), generator=g), torch.randint(1, VOCAB, (3,), generator=g)
    ids = torch.stack([long, torch.cat([torch.zeros(3, dtype=torch.long), short])])
    mask = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1]])
    return ids, mask, (long, short)


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_greedy_equals_transformers_greedy(kind):
    theirs, ours = pair(kind=kind, window=3 if kind == "mistral" else None)
    ids = torch.randint(VOCAB, (3, 5), generator=torch.Generator().manual_seed(1))
    expected = theirs.generate(ids, max_new_tokens=10, do_sample=False, pad_token_id=0)
    assert torch.equal(ours.generate(ids, 10), expected)
    assert torch.equal(ours.generate(ids, 10, temperature=0.0, use_cache=False), expected)


@pytest.mark.parametrize("use_cache", [True, False])
def test_left_padded_rows_get_the_tokens_they_get_alone(use_cache):
    theirs, ours = pair()
    ids, mask, (long, short) = left_padded()
    out = ours.generate(ids, 8, attention_mask=mask, use_cache=use_cache)
    for row, prompt in enumerate((long, short)):
        alone = ours.generate(prompt[None], 8)
        assert torch.equal(out[row, -8:], alone[0, -8:]), row
    expected = theirs.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                               pad_token_id=0)
    assert torch.equal(out, expected)
    bool_mask = ours.generate(ids, 8, attention_mask=mask.bool(), use_cache=use_cache)
    assert torch.equal(bool_mask, out)  # True/False and 1/0 mean the same


def test_rows_that_reach_eos_stop_and_are_padded_with_it():
    theirs, ours = pair()
    ids = torch.randint(VOCAB, (4, 4), generator=torch.Generator().manual_seed(2))
    free = ours.generate(ids, 12)
    eos = int(free[0, 4 + 2])  # row 0 produces it at its third new token
    out = ours.generate(ids, 12, eos_token_id=eos)
    expected = theirs.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=eos,
                               pad_token_id=eos)
    assert torch.equal(out, expected)
    assert (out[0, 4 + 2:] == eos).all()
    finished_rows = [(row[4:] == eos).any() for row in free]
    assert not all(finished_rows)  # some row runs to the end: the test can tell stopping apart


def test_decoding_stops_early_when_every_row_is_finished():
    _, ours = pair()
    ids = torch.randint(VOCAB, (1, 4), generator=torch.Generator().manual_seed(3))
    free = ours.generate(ids, 12)
    eos = int(free[0, 4 + 1])
    first = (free[0, 4:] == eos).nonzero()[0, 0]  # where eos first appears
    out = ours.generate(ids, 12, eos_token_id=eos)
    assert out.shape == (1, 4 + first + 1) and torch.equal(out, free[:, :4 + first + 1])


@pytest.mark.parametrize("temperature, top_k, top_p", [
    (1.0, None, None), (0.7, 5, None), (1.3, None, 0.8), (0.9, 10, 0.9), (1.0, 1, None),
    (1.0, None, 1.0), (2.0, 200, 0.05)])
def test_filtered_probabilities_equal_transformers_logits_processors(temperature, top_k, top_p):
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    logits = 3 * torch.randn(6, VOCAB, generator=torch.Generator().manual_seed(4))
    logits[0, :4] = logits[0, 4]  # ties at the boundary
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k is not None:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p is not None:
        warpers.append(TopPLogitsWarper(top_p))
    expected = warpers(None, logits.clone()).softmax(dim=-1)
    ours = logits / temperature
    if top_k is not None:
        ours = top_k_filter(ours, top_k)
    if top_p is not None:
        ours = top_p_filter(ours, top_p)
    torch.testing.assert_close(ours.softmax(dim=-1), expected, **PROBS_TOL)
    assert torch.equal(ours.isinf(), expected == 0)  # the same tokens removed


def test_sampling_is_reproducible_with_a_generator_and_top_k_1_is_greedy():
    _, ours = pair()
    ids = torch.randint(VOCAB, (2, 4), generator=torch.Generator().manual_seed(5))

    def sample(seed, **kw):
        return ours.generate(ids, 16, temperature=1.0,
                             generator=torch.Generator().manual_seed(seed), **kw)

    assert torch.equal(sample(0), sample(0))
    assert not torch.equal(sample(0), sample(1))  # the draws do depend on the generator
    assert torch.equal(sample(0, top_k=1), ours.generate(ids, 16))
    assert torch.equal(sample(2, top_p=1e-9), ours.generate(ids, 16))  # the top token alone


def test_sampled_tokens_stay_inside_the_top_k():
    """Every sampled token is among the top_k logits of its step (checked on the full pass)."""
    _, ours = pair()
    ids = torch.randint(VOCAB, (4, 3), generator=torch.Generator().manual_seed(6))
    out = ours.generate(ids, 12, temperature=1.5, top_k=3,
                        generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        logits = ours(out[:, :-1])[:, 2:]  # the logits that chose tokens 3..14
    ranks = (logits > logits.gather(-1, out[:, 3:, None])).sum(-1)  # how many beat it
    assert (ranks < 3).all()


@pytest.mark.parametrize("kwargs, error, message", [
    ({"attention_mask": torch.ones(2, 5)}, TypeError, "`attention_mask` must be a torch.bool or integer"),
    ({"attention_mask": torch.ones(2, 4, dtype=torch.bool)}, ValueError, r"`attention_mask` must be \[batch, n\] = \(2, 5\)"),
    ({"temperature": -1.0}, ValueError, "`temperature` must be >= 0"),
    ({"temperature": "hot"}, TypeError, "`temperature` must be a number"),
    ({"temperature": 1.0, "top_k": 0}, ValueError, "`top_k` must be a positive int"),
    ({"temperature": 1.0, "top_p": 0.0}, ValueError, r"`top_p` must be in \(0, 1\]"),
    ({"top_k": 5}, ValueError, "pass a temperature > 0"),
    ({"eos_token_id": 1.5}, TypeError, "`eos_token_id` must be an int"),
    ({"temperature": 1.0, "generator": 3}, TypeError, "`generator` must be a torch.Generator"),
    ({"use_cache": 1}, TypeError, "`use_cache` must be a bool"),
])
def test_bad_arguments_name_themselves(kwargs, error, message):
    model = CausalLM(VOCAB, 16, 2, 24, 1).eval()
    with pytest.raises(error, match=message):
        model.generate(torch.zeros(2, 5, dtype=torch.long), 3, **kwargs)


def test_works_for_any_variant_through_the_contract(monkeypatch):
    """Decoding reads no attribute of a variant: a registered subclass decodes unchanged."""

    class Tempered(mhsa.GroupedQueryAttention):  # a toy variant: its own class, registered
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.temperature = torch.nn.Parameter(torch.linspace(0.5, 2.0, self.num_heads))

        def adjust_queries_and_keys(self, q, k):
            return q / self.temperature[:, None, None], k

    monkeypatch.setitem(mhsa.attention.CAUSAL_ATTENTION, "tempered", Tempered)
    torch.manual_seed(7)
    model = CausalLM(VOCAB, 16, 2, 24, 2, attention="tempered").eval()
    assert isinstance(model.layers[0].attn, Tempered)
    ids = torch.randint(VOCAB, (2, 3), generator=torch.Generator().manual_seed(7))
    assert torch.equal(model.generate(ids, 6), model.generate(ids, 6, use_cache=False))
    with mhsa.record_attention(model) as weights:
        model(ids)
    assert sorted(weights) == ["layers.0.attn", "layers.1.attn"]


def test_positions_follow_the_mask_as_transformers_computes_them():
    """Rotary scores see offsets only, so shifted positions give the same tokens up to
    rounding; the positions handed to the model are checked directly instead: each row's
    first token at 0 (transformers: ``attention_mask.cumsum(-1) - 1``), cached or not."""
    _, ours = pair()
    ids, mask, _ = left_padded()
    for use_cache in (True, False):
        seen = []
        hook = ours.register_forward_pre_hook(
            lambda module, args, kwargs: seen.append(kwargs["positions"]), with_kwargs=True)
        try:
            ours.generate(ids, 3, attention_mask=mask, use_cache=use_cache)
        finally:
            hook.remove()
        full = torch.cat([mask, torch.ones(2, 3, dtype=mask.dtype)], dim=1).cumsum(-1) - 1
        full = full.clamp(min=0)
        if use_cache:  # the prompt, then one position per step
            assert torch.equal(seen[0], full[:, :6])
            assert [p.tolist() for p in seen[1:]] == [full[:, t:t + 1].tolist() for t in (6, 7)]
        else:
            assert all(torch.equal(p, full[:, :p.shape[1]]) for p in seen)
    assert full[1, 3] == 0 and full[0, 0] == 0  # the first real token of each row
