"""Properties of MultiHeadAttention, checked with hypothesis on tiny random shapes.

Seeded through the hypothesis profile in conftest.py. float64 keeps tolerances tight, so a head
split or merge that mixes tokens or batch items fails loudly.
Masks: boolean, True = may attend.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from mhsa import MultiHeadAttention
from mhsa.attention.multihead import merge_heads, split_heads

from tolerances import worst_case

# float64; the largest drawn module: projection over e <= 10, scores over d <= 4, weighted
# values over n <= 6 tokens, output projection over h * d <= 16
TOL64 = worst_case(torch.float64, 10 + 4 + 6 + 16)


@st.composite
def setups(draw, min_tokens=1):
    """A module, a self-attention input and a generator, all from one drawn seed."""
    b, n = draw(st.integers(1, 3)), draw(st.integers(min_tokens, 6))
    h, d, e = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 10))
    seed = draw(st.integers(0, 2**16))
    torch.manual_seed(seed)
    m = MultiHeadAttention(e, h, qkv_dim=h * d, dtype=torch.float64).eval()
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, e, generator=g, dtype=torch.float64)
    return m, x, g


@given(st.integers(1, 3), st.integers(1, 5), st.integers(1, 4), st.integers(1, 4))
def test_split_then_merge_is_exactly_the_identity(b, n, h, d):
    x = torch.arange(b * n * h * d).reshape(b, n, h * d)
    heads = split_heads(x, h)
    assert heads.shape == (b, h, n, d)
    assert torch.equal(heads, x.view(b, n, h, d).transpose(1, 2))  # head i: columns i*d..
    assert torch.equal(merge_heads(heads), x)


@given(setups(), st.booleans(), st.randoms(use_true_random=False))
def test_permuting_tokens_permutes_the_output(setup, need_weights, rng):
    m, x, _ = setup
    perm = list(range(x.shape[1]))
    rng.shuffle(perm)
    out, weights = m(x, need_weights=need_weights)
    out_p, weights_p = m(x[:, perm], need_weights=need_weights)
    torch.testing.assert_close(out_p, out[:, perm], **TOL64)
    if need_weights:
        torch.testing.assert_close(weights_p, weights[:, :, perm][..., perm], **TOL64)


@given(setups(), st.integers(1, 6), st.randoms(use_true_random=False))
def test_permuting_keys_with_values_changes_nothing(setup, n_k, rng):
    m, query, g = setup
    key = torch.randn(query.shape[0], n_k, m.embed_dim, generator=g, dtype=torch.float64)
    perm = list(range(n_k))
    rng.shuffle(perm)
    for need_weights in (False, True):
        out, _ = m(query, key, need_weights=need_weights)
        torch.testing.assert_close(m(query, key[:, perm], need_weights=need_weights)[0], out,
                                   **TOL64)


@given(setups(), st.booleans(), st.floats(0.0, 1.0))
def test_weight_rows_sum_to_one_or_zero(setup, is_causal, p_keep):
    m, x, g = setup
    b, n, _ = x.shape
    mask = torch.rand(b, m.num_heads, n, n, generator=g) < p_keep
    _, weights = m(x, attn_mask=mask, is_causal=is_causal, need_weights=True)
    allowed = mask & torch.ones(n, n, dtype=torch.bool).tril() if is_causal else mask
    expected = allowed.any(dim=-1).to(torch.float64)  # 1 where the query sees a key, else 0
    torch.testing.assert_close(weights.sum(dim=-1), expected, **TOL64)
    assert bool((weights[~allowed] == 0).all()) and bool((weights >= 0).all())


@given(setups(), st.booleans())
def test_each_batch_item_is_independent(setup, need_weights):
    m, x, g = setup
    out, _ = m(x, need_weights=need_weights, is_causal=True)
    for i in range(x.shape[0]):
        alone, _ = m(x[i : i + 1], need_weights=need_weights, is_causal=True)
        torch.testing.assert_close(alone[0], out[i], **TOL64)
    other = x.clone()
    other[1:] = torch.randn(other[1:].shape, generator=g, dtype=torch.float64)
    torch.testing.assert_close(m(other, need_weights=need_weights)[0][0],
                               m(x, need_weights=need_weights)[0][0], **TOL64)


@given(setups(min_tokens=2), st.data())
def test_causal_outputs_ignore_later_tokens(setup, data):
    m, x, g = setup
    p = data.draw(st.integers(0, x.shape[1] - 2), label="last unchanged position")
    changed = x.clone()
    changed[:, p + 1 :] = torch.randn(changed[:, p + 1 :].shape, generator=g,
                                      dtype=torch.float64)
    for need_weights in (False, True):
        out, _ = m(x, is_causal=True, need_weights=need_weights)
        out_c, _ = m(changed, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(out_c[:, : p + 1], out[:, : p + 1], **TOL64)


@given(setups(), st.integers(1, 6), st.booleans(), st.floats(0.0, 1.0))
def test_fused_path_equals_explicit_path(setup, n_k, is_causal, p_keep):
    m, query, g = setup
    b, n_q, _ = query.shape
    key = torch.randn(b, n_k, m.embed_dim, generator=g, dtype=torch.float64)
    mask = torch.rand(b, 1, n_q, n_k, generator=g) < p_keep  # empty rows included
    fused, none = m(query, key, attn_mask=mask, is_causal=is_causal)
    explicit, _ = m(query, key, attn_mask=mask, is_causal=is_causal, need_weights=True)
    assert none is None
    torch.testing.assert_close(fused, explicit, **TOL64)
