"""The sliding-window mask: the meaning of ``sliding_window`` in transformers' Mistral.

Oracle: transformers' own mask builder, ``masking_utils.sdpa_mask`` with
``sliding_window_causal_mask_function`` (what Mistral uses), queries placed at the end of
the keys as in cached decoding. Masks are boolean, True = may attend; comparisons are exact.
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mhsa import causal_mask, padding_mask, sliding_window_mask


def mistral_mask(n_q, n_k, window, attention_mask=None):
    """transformers' sliding-window causal mask ``[batch, 1, n_q, n_k]``, queries last."""
    from transformers.masking_utils import sdpa_mask, sliding_window_causal_mask_function

    batch = 1 if attention_mask is None else attention_mask.shape[0]
    return sdpa_mask(batch_size=batch, q_length=n_q, kv_length=n_k, q_offset=n_k - n_q,
                     mask_function=sliding_window_causal_mask_function(window),
                     attention_mask=attention_mask, allow_is_causal_skip=False)


@given(n_k=st.integers(1, 12), data=st.data())
def test_equals_mistral_sliding_window_mask(n_k, data):
    n_q = data.draw(st.integers(1, n_k))
    window = data.draw(st.integers(1, n_k + 2))
    ours = sliding_window_mask(n_q, n_k, window=window)
    assert ours.dtype == torch.bool and ours.shape == (n_q, n_k)
    assert torch.equal(ours, mistral_mask(n_q, n_k, window)[0, 0])


def test_example_from_the_docstring():
    expected = torch.tensor([[1, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0],
                             [1, 1, 1, 0, 0],
                             [0, 1, 1, 1, 0],
                             [0, 0, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(sliding_window_mask(5, window=3), expected)


@pytest.mark.parametrize("n_q, n_k, window", [(6, 6, 2), (3, 9, 4), (1, 9, 4), (9, 9, 1)])
def test_each_query_sees_itself_and_at_most_window_minus_one_before(n_q, n_k, window):
    mask = sliding_window_mask(n_q, n_k, window=window)
    position = torch.arange(n_q) + (n_k - n_q)  # each query's key position, bottom-right
    assert torch.equal(mask.sum(dim=-1), torch.clamp(position + 1, max=window))
    assert mask[torch.arange(n_q), position].all()  # itself
    j = torch.arange(n_k)[None, :]
    inside = (j <= position[:, None]) & (j > position[:, None] - window)
    assert torch.equal(mask, inside)


@pytest.mark.parametrize("n_q, n_k", [(5, 5), (2, 7), (1, 4)])
def test_a_window_as_long_as_the_keys_is_the_causal_mask(n_q, n_k):
    for window in (n_k, n_k + 5):
        assert torch.equal(sliding_window_mask(n_q, n_k, window=window), causal_mask(n_q, n_k))
    assert not torch.equal(sliding_window_mask(n_q, n_k, window=1), causal_mask(n_q, n_k)) \
        or n_k == 1


def test_combines_with_padding_like_mistral():
    """AND with a padding mask ``[batch, 1, 1, n_k]`` equals Mistral's mask with its 2-D
    attention mask (1 = real token)."""
    lengths = torch.tensor([7, 4, 1])
    ours = sliding_window_mask(7, window=3) & padding_mask(lengths, 7)  # [3, 1, 7, 7]
    attention_mask = (torch.arange(7)[None, :] < lengths[:, None]).long()
    assert torch.equal(ours, mistral_mask(7, 7, 3, attention_mask))


def test_no_query_or_no_key_gives_an_empty_mask():
    assert sliding_window_mask(0, 4, window=2).shape == (0, 4)
    assert sliding_window_mask(3, 0, window=2).shape == (3, 0)


def test_builds_on_the_requested_device():
    assert sliding_window_mask(3, 4, window=2, device="cpu").device.type == "cpu"


@pytest.mark.parametrize("kwargs, error, match", [
    ({"n_q": 3, "window": 2.0}, TypeError, "`window` must be an int, got float 2.0"),
    ({"n_q": 3, "window": True}, TypeError, "`window` must be an int, got bool"),
    ({"n_q": 3, "window": 0}, ValueError, "`window` must be a positive int, got 0"),
    ({"n_q": -1, "window": 2}, ValueError, "`n_q` must be an int >= 0, got -1"),
    ({"n_q": 3, "n_k": -1, "window": 2}, ValueError, "`n_k` must be an int >= 0, got -1"),
    ({"n_q": "3", "window": 2}, TypeError, "`n_q` must be an int, got str"),
])
def test_rejects_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        sliding_window_mask(**kwargs)
