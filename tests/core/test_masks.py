"""Masking, one rule per test: one convention (True = may attend), exact zeros in every
dtype, no NaN on fully masked rows, bottom-right causal alignment, AND of masks, and
agreement with torch's SDPA and torch.nn.MultiheadAttention on the masks they accept."""

import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

import mhsa
from mhsa import causal_mask, padding_mask

from references import torch_mha
from tolerances import worst_case

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# float32; the module's output entry: projection over E = 16, scores over head_dim 4, weighted
# values over at most 7 keys, output projection over 16 (the bare function sums fewer)
TOL = worst_case(torch.float32, 16 + 4 + 7 + 16)
# the bare function, float16/bfloat16 against torch's SDPA in the same dtype: products summed in
# float32, scores, weights and output each rounded once to the low dtype by either side
DTYPE_TOL = {torch.float32: TOL} | {dtype: worst_case(dtype, 2 * 3)
                                     for dtype in (torch.float16, torch.bfloat16)}
PATHS = [pytest.param(True, id="explicit"), pytest.param(False, id="fused")]
MODES = ["train", "eval"]
E, H = 16, 4  # embed_dim, num_heads of the test module


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def qkv(*lead, n_q=5, n_k=7, d=8, seed=0, dtype=torch.float32):
    return (randn(*lead, n_q, d, seed=seed, dtype=dtype),
            randn(*lead, n_k, d, seed=seed + 100, dtype=dtype),
            randn(*lead, n_k, d, seed=seed + 200, dtype=dtype))


def random_mask(*shape, seed=0, p_keep=0.6):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) < p_keep


def module(*, dropout=0.0, seed=0, mode="eval"):
    torch.manual_seed(seed)
    attention = mhsa.MultiHeadAttention(E, H, dropout=dropout)
    with torch.no_grad():  # a clearly non-zero bias, so "output == bias" means something
        attention.out_proj.bias.copy_(randn(E, seed=seed + 1))
    return attention.train(mode == "train")


def attend(attention, x, need_weights, **kwargs):
    """Run the module and capture the merged attention output, before ``out_proj``.

    The module applies ``out_proj``'s weights with ``F.linear`` (as torch's own
    MultiheadAttention does), so the merge step ``mhsa.attention.multihead.merge_heads`` is watched.
    """
    seen, merge = [], mhsa.attention.multihead.merge_heads

    def watched(heads):
        seen.append(merge(heads))
        return seen[-1]

    mhsa.attention.multihead.merge_heads = watched
    try:
        out, weights = attention(x, need_weights=need_weights, **kwargs)
    finally:
        mhsa.attention.multihead.merge_heads = merge
    return out, weights, seen[0]


# -- masked keys get exactly zero weight, in every dtype -------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_causal", [False, True])
def test_masked_keys_get_exactly_zero_weight(dtype, is_causal):
    q, k, v = qkv(2, 3, n_q=6, n_k=6, dtype=dtype)
    mask = random_mask(2, 3, 6, 6, seed=1)
    k = k.masked_fill(~mask[..., 0, :, None], 50.0)  # masked keys would win: huge scores
    _, weights = mhsa.scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal)
    allowed = mask & causal_mask(6) if is_causal else mask
    assert weights.dtype == dtype
    assert torch.equal(weights[~allowed], torch.zeros_like(weights[~allowed]))
    assert torch.isfinite(weights).all()
    rows = allowed.any(-1)
    sums = weights.float().sum(-1)
    # each of the 6 weights was rounded once to dtype, then the sum in float32 (6 terms)
    assert_close(sums[rows], torch.ones_like(sums[rows]), **worst_case(dtype, 6 + 6))


# -- fully masked rows: zero weights, zero output, finite gradients ---------------------

# Each case: (mask or None, is_causal, n_q, n_k) with at least one query seeing no key.
EMPTY_ROW_CASES = {
    "all-False mask row": (torch.ones(4, 6, dtype=torch.bool).index_fill(0, torch.tensor([1]), False), False, 4, 6),
    "fully padded sequence": (padding_mask([4, 0], 6), False, 4, 6),
    "one head fully masked": (torch.tensor([True, False, True, True])[None, :, None, None], False, 4, 6),
    "causal, more queries than keys": (None, True, 6, 4),
    "padding AND causal": (padding_mask([2, 3], 3), True, 5, 3),
}


def allowed_of(mask, is_causal, n_q, n_k):
    allowed = torch.ones(n_q, n_k, dtype=torch.bool) if mask is None else mask
    return allowed & causal_mask(n_q, n_k) if is_causal else allowed


@pytest.mark.parametrize("case", EMPTY_ROW_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fully_masked_rows_give_zero_and_finite_gradients_in_the_function(case, dtype):
    mask, is_causal, n_q, n_k = EMPTY_ROW_CASES[case]
    q, k, v = (t.requires_grad_() for t in qkv(2, H, n_q=n_q, n_k=n_k, dtype=dtype))
    out, weights = mhsa.scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal)
    empty = ~allowed_of(mask, is_causal, n_q, n_k).any(-1).expand(2, H, n_q)
    assert empty.any()
    assert torch.equal(weights[empty], torch.zeros(int(empty.sum()), n_k, dtype=dtype))
    assert torch.equal(out[empty], torch.zeros(int(empty.sum()), 8, dtype=dtype))
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    (out.float().sum() + weights.float().sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


@pytest.mark.parametrize("case", EMPTY_ROW_CASES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("need_weights", PATHS)
def test_fully_masked_rows_give_out_proj_bias_and_finite_gradients_in_the_module(
    case, mode, need_weights
):
    mask, is_causal, n_q, n_k = EMPTY_ROW_CASES[case]
    attention = module(dropout=0.1, mode=mode)
    query = randn(2, n_q, E, seed=3).requires_grad_()
    memory = randn(2, n_k, E, seed=4).requires_grad_()
    out, weights, merged = attend(attention, query, need_weights, key=memory,
                                  attn_mask=mask, is_causal=is_causal)
    empty = ~allowed_of(mask, is_causal, n_q, n_k).any(-1).expand(2, H, n_q)  # [b, h, n_q]
    heads = merged.unflatten(-1, (H, E // H)).transpose(1, 2)  # [b, h, n_q, d]
    assert torch.equal(heads[empty], torch.zeros(int(empty.sum()), E // H))
    every_head_empty = empty.all(1)  # [b, n_q]
    assert torch.equal(out[every_head_empty],
                       attention.out_proj.bias.expand(int(every_head_empty.sum()), E))
    assert torch.isfinite(out).all()
    loss = out.sum()
    if need_weights:
        assert torch.equal(weights[empty], torch.zeros(int(empty.sum()), n_k))
        loss = loss + weights.sum()
    loss.backward()
    grads = [query.grad, memory.grad] + [p.grad for p in attention.parameters()]
    assert all(torch.isfinite(g).all() for g in grads)


# -- padding: a padded batch equals the truncated batch on the real tokens --------------

lengths_strategy = st.lists(st.integers(1, 6), min_size=1, max_size=4)


@given(lengths=lengths_strategy, extra=st.integers(0, 2), is_causal=st.booleans(),
       seed=st.integers(0, 2**16))
def test_padded_batch_equals_truncated_batch_in_the_function(lengths, extra, is_causal, seed):
    n = max(lengths) + extra
    q, k, v = qkv(len(lengths), 2, n_q=n, n_k=n, seed=seed)
    pad = ~padding_mask(lengths, n)[:, :, 0, :, None]  # [b, 1, n, 1]: padded positions
    q, k, v = (t.masked_fill(pad, 1e3) for t in (q, k, v))  # garbage that must not leak
    out, _ = mhsa.scaled_dot_product_attention(q, k, v, padding_mask(lengths, n),
                                               is_causal=is_causal)
    for b, length in enumerate(lengths):
        alone, _ = mhsa.scaled_dot_product_attention(
            q[b, :, :length], k[b, :, :length], v[b, :, :length], is_causal=is_causal)
        assert_close(out[b, :, :length], alone, **TOL)


@pytest.mark.parametrize("need_weights", PATHS)
@given(lengths=lengths_strategy, extra=st.integers(0, 2), is_causal=st.booleans(),
       seed=st.integers(0, 2**16))
def test_padded_batch_equals_truncated_batch_in_the_module(need_weights, lengths, extra,
                                                           is_causal, seed):
    n = max(lengths) + extra
    attention = module(seed=seed % 7)
    x = randn(len(lengths), n, E, seed=seed)
    x = x.masked_fill(~padding_mask(lengths, n)[:, 0, 0, :, None], 1e3)
    with torch.no_grad():
        out, _ = attention(x, attn_mask=padding_mask(lengths, n), is_causal=is_causal,
                           need_weights=need_weights)
        for b, length in enumerate(lengths):
            alone, _ = attention(x[b:b + 1, :length], is_causal=is_causal,
                                 need_weights=need_weights)
            assert_close(out[b, :length], alone[0], **TOL)


# -- causality: later tokens never change earlier outputs -------------------------------


@given(n=st.integers(2, 8), data=st.data())
def test_causal_outputs_up_to_p_ignore_later_tokens_in_the_function(n, data):
    p = data.draw(st.integers(0, n - 2), label="p")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    w_q, w_k, w_v = (randn(E, 8, seed=seed + s) for s in range(3))
    x = randn(2, n, E, seed=seed + 3)
    changed = x.clone()
    changed[:, p + 1:] = randn(2, n - p - 1, E, seed=seed + 4)
    before, _ = mhsa.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, is_causal=True)
    after, _ = mhsa.scaled_dot_product_attention(
        changed @ w_q, changed @ w_k, changed @ w_v, is_causal=True)
    assert_close(after[:, :p + 1], before[:, :p + 1], **TOL)
    assert not torch.allclose(after[:, p + 1:], before[:, p + 1:])  # the change did reach


@pytest.mark.parametrize("need_weights", PATHS)
@given(n=st.integers(2, 8), data=st.data())
def test_causal_outputs_up_to_p_ignore_later_tokens_in_the_module(need_weights, n, data):
    p = data.draw(st.integers(0, n - 2), label="p")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    attention = module(seed=seed % 7)
    x = randn(2, n, E, seed=seed)
    changed = x.clone()
    changed[:, p + 1:] = randn(2, n - p - 1, E, seed=seed + 1)
    with torch.no_grad():
        before, _ = attention(x, is_causal=True, need_weights=need_weights)
        after, _ = attention(changed, is_causal=True, need_weights=need_weights)
    assert_close(after[:, :p + 1], before[:, :p + 1], **TOL)


# -- query and key lengths that differ: bottom-right alignment --------------------------


def test_one_query_against_four_keys_under_causal_mask_equals_unmasked_attention():
    assert causal_mask(1, 4).tolist() == [[True, True, True, True]]
    q, k, v = qkv(2, H, n_q=1, n_k=4)
    plain, plain_weights = mhsa.scaled_dot_product_attention(q, k, v)
    masked, masked_weights = mhsa.scaled_dot_product_attention(q, k, v, causal_mask(1, 4))
    causal, _ = mhsa.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(masked, plain) and torch.equal(causal, plain)
    assert torch.equal(masked_weights, plain_weights) and (plain_weights > 0).all()


@pytest.mark.parametrize("need_weights", PATHS)
def test_decoding_one_token_with_cached_keys_equals_the_full_causal_pass(need_weights):
    attention = module()
    x = randn(2, 5, E, seed=5)
    with torch.no_grad():
        full, _ = attention(x, is_causal=True, need_weights=need_weights)
        for t in range(5):  # query = token t, keys = tokens 0..t (the "cache")
            step, _ = attention(x[:, t:t + 1], key=x[:, :t + 1], is_causal=True,
                                need_weights=need_weights)
            assert_close(step[:, 0], full[:, t], **TOL)


@pytest.mark.parametrize("n_q, n_k", [(1, 4), (2, 4), (3, 5), (2, 7)])
def test_is_causal_with_fewer_queries_is_bottom_right_not_torch_top_left(n_q, n_k):
    q, k, v = qkv(2, H, n_q=n_q, n_k=n_k)
    ours, _ = mhsa.scaled_dot_product_attention(q, k, v, is_causal=True)
    bottom_right = torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q)
    assert torch.equal(causal_mask(n_q, n_k), bottom_right)
    assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=bottom_right),
                 **TOL)
    # torch's is_causal=True aligns top-left: query i sees keys 0..i, whatever n_k is.
    torch_causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    top_left = torch.ones(n_q, n_k, dtype=torch.bool).tril()
    assert_close(torch_causal, F.scaled_dot_product_attention(q, k, v, attn_mask=top_left),
                 **TOL)
    assert not torch.allclose(ours, torch_causal, atol=100 * TOL["atol"])  # far beyond rounding


def allowed_by_torch_is_causal(n_q, n_k):
    """Which keys torch's SDPA(is_causal=True) lets each query see: equal scores (zero queries)
    and one-hot values make each output row the row's attention weights."""
    q, k, v = torch.zeros(n_q, 4), torch.zeros(n_k, 4), torch.eye(n_k)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True) > 0


def test_causal_mask_docstring_picture_shows_mhsa_and_torch():
    # the picture's rows: "query i   <mhsa's row>   <torch's row>", 0/1 per key
    rows = re.findall(r"^\s*query \d+\s+([01 ]+?)\s*$", causal_mask.__doc__, flags=re.MULTILINE)
    picture = torch.tensor([[int(c) for c in row.split()] for row in rows], dtype=torch.bool)
    n_q, n_k = picture.shape[0], picture.shape[1] // 2
    assert torch.equal(picture[:, :n_k], causal_mask(n_q, n_k))
    assert torch.equal(picture[:, n_k:], allowed_by_torch_is_causal(n_q, n_k))


# -- causal and padding together: logical AND, never one chosen over the other ----------


@pytest.mark.parametrize("need_weights", PATHS)
def test_causal_and_padding_masks_combine_by_and(need_weights):
    n, lengths = 5, [5, 3]
    pad = padding_mask(lengths, n)
    both = pad & causal_mask(n)  # explicitly ANDed, [b, 1, n, n]
    q, k, v = qkv(2, H, n_q=n, n_k=n)
    out, weights = mhsa.scaled_dot_product_attention(q, k, v, pad, is_causal=True)
    explicit, _ = mhsa.scaled_dot_product_attention(q, k, v, both)
    assert torch.equal(out, explicit)
    assert torch.equal(weights > 0, both.expand(2, H, n, n))
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=both)
    assert_close(out, reference, **TOL)
    for alone in ({"attn_mask": pad}, {"is_causal": True}):  # neither mask alone
        other, _ = mhsa.scaled_dot_product_attention(q, k, v, **alone)
        assert not torch.allclose(out, other)
    attention, x = module(), randn(2, n, E, seed=6)
    with torch.no_grad():
        combined, _ = attention(x, attn_mask=pad, is_causal=True, need_weights=need_weights)
        anded, _ = attention(x, attn_mask=both, need_weights=need_weights)
    assert_close(combined, anded, **TOL)


# -- float masks are refused with the convention in the message -------------------------

FOREIGN_MASKS = {
    "additive float32": mhsa.mask_to_additive(causal_mask(5)),
    "additive float16": mhsa.mask_to_additive(causal_mask(5), dtype=torch.float16),
    "seed-style 1/0 ints": causal_mask(5).long(),
}
CONVENTION = (
    r"must be torch.bool \(boolean, True = may attend\), got torch\.\w+\. Convert an additive "
    r"float mask \(0 = keep, -inf or a large negative number, <= -1e4, = block\) with "
    r"`mhsa\.mask_from_additive"
)


@pytest.mark.parametrize("mask", FOREIGN_MASKS.values(), ids=FOREIGN_MASKS.keys())
def test_non_bool_masks_raise_type_error_stating_the_convention(mask):
    q, k, v = qkv(n_q=5, n_k=5)
    with pytest.raises(TypeError, match=CONVENTION):
        mhsa.scaled_dot_product_attention(q, k, v, mask)
    for need_weights in (True, False):
        with pytest.raises(TypeError, match=CONVENTION):
            module()(randn(1, 5, E), attn_mask=mask, need_weights=need_weights)


# -- converters: round trips, torch.nn.MultiheadAttention, torch SDPA -------------------

mask_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4)


@given(shape=mask_shapes, seed=st.integers(0, 2**16))
def test_converters_round_trip(shape, seed):
    mask = random_mask(*shape, seed=seed)
    torch_mha = mhsa.mask_to_torch_mha(mask)
    assert torch.equal(torch_mha, ~mask)
    assert torch.equal(mhsa.mask_from_torch_mha(torch_mha), mask)
    for dtype in DTYPES:
        additive = mhsa.mask_to_additive(mask, dtype=dtype)
        assert additive.dtype == dtype and additive.shape == mask.shape
        assert torch.equal(additive == 0, mask) and torch.isneginf(additive[~mask]).all()
        assert torch.equal(mhsa.mask_from_additive(additive), mask)
        assert torch.equal(mhsa.mask_from_torch_mha(additive), mask)


@given(lengths=st.lists(st.integers(1, 5), min_size=1, max_size=4))
def test_key_padding_mask_round_trips_through_torch_shape(lengths):
    ours = padding_mask(lengths, 5)
    theirs = mhsa.mask_to_torch_mha(ours, key_padding=True)  # [b, n_k], True = ignore
    assert theirs.shape == (len(lengths), 5)
    assert torch.equal(theirs, ours[:, 0, 0, :].logical_not())
    assert torch.equal(mhsa.mask_from_torch_mha(theirs, key_padding=True), ours)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("blocked", [float("-inf"), -1e9, "finfo.min"])
def test_mask_from_additive_reads_the_usual_stand_ins_for_minus_infinity(dtype, blocked):
    value = torch.finfo(dtype).min if blocked == "finfo.min" else blocked
    mask = causal_mask(4)
    blocked = torch.tensor(value).to(dtype)  # -1e9 becomes -inf in float16
    additive = torch.where(mask, torch.zeros((), dtype=dtype), blocked)
    assert torch.equal(mhsa.mask_from_additive(additive), mask)


def test_converter_errors():
    with pytest.raises(ValueError, match="values other than 0 and large negatives.*score bias"):
        mhsa.mask_from_additive(torch.tensor([0.0, -1.0]))
    with pytest.raises(
        TypeError, match=r"additive float mask \(0 = keep, -inf or a large negative number, "
        r"<= -1e4, = block\), got torch.bool"
    ):
        mhsa.mask_from_additive(causal_mask(2))
    with pytest.raises(TypeError, match=r"torch.bool \(boolean, True = may attend\), got torch.float32"):
        mhsa.mask_to_additive(torch.zeros(2, 2))
    with pytest.raises(TypeError, match="floating-point torch.dtype, got torch.int64"):
        mhsa.mask_to_additive(causal_mask(2), dtype=torch.int64)
    with pytest.raises(TypeError, match=r"True = may attend\), got torch.int64"):
        mhsa.mask_to_torch_mha(causal_mask(2).long())
    with pytest.raises(TypeError, match=r"torch.bool \(True = ignore\) or an additive float mask, got torch.int64"):
        mhsa.mask_from_torch_mha(causal_mask(2).long())
    with pytest.raises(ValueError, match=r"`key_padding_mask` must be \[batch, n_k\], got shape \(2, 1, 3\)"):
        mhsa.mask_from_torch_mha(torch.ones(2, 1, 3, dtype=torch.bool), key_padding=True)
    with pytest.raises(ValueError, match=r"\[batch, 1, 1, n_k\] or \[batch, n_k\], got shape \(2, 2, 1, 3\)"):
        mhsa.mask_to_torch_mha(torch.ones(2, 2, 1, 3, dtype=torch.bool), key_padding=True)


def torch_mha_and_ours(seed=0):
    theirs = torch_mha(E, H, seed=seed)
    return theirs, mhsa.MultiHeadAttention.from_torch(theirs)


@pytest.mark.parametrize("need_weights", PATHS)
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_torch_mha_masks_converted_give_torch_mha_output(need_weights, kind):
    theirs, ours = torch_mha_and_ours()
    n, lengths = 5, [5, 3]
    x = randn(2, n, E, seed=7)
    ignore = ~random_mask(n, n, seed=8)  # torch's polarity: True = ignore
    ignore.fill_diagonal_(False)  # every query keeps a key: torch gives NaN otherwise
    key_padding = torch.arange(n)[None, :] >= torch.tensor(lengths)[:, None]  # [b, n_k]
    if kind == "additive":  # torch wants both masks of one kind
        ignore = torch.zeros(n, n).masked_fill(ignore, float("-inf"))
        key_padding = torch.zeros(2, n).masked_fill(key_padding, float("-inf"))
    with torch.no_grad():
        expected, expected_weights = theirs(x, x, x, attn_mask=ignore,
                                            key_padding_mask=key_padding,
                                            average_attn_weights=False)
        mask = (mhsa.mask_from_torch_mha(ignore)
                & mhsa.mask_from_torch_mha(key_padding, key_padding=True))
        out, weights = ours(x, attn_mask=mask, need_weights=need_weights)
        # and the other way: our mask converted back gives torch the same answer
        back, _ = theirs(x, x, x, attn_mask=mhsa.mask_to_torch_mha(mhsa.mask_from_torch_mha(ignore)),
                         key_padding_mask=mhsa.mask_to_torch_mha(padding_mask(lengths, n),
                                                                 key_padding=True))
    assert_close(out, expected, **TOL)
    assert_close(back, expected, **TOL)
    if need_weights:
        assert_close(weights, expected_weights, **TOL)


SDPA_MASK_SHAPES = [(5, 7), (2, 1, 1, 7), (2, 1, 5, 7), (2, H, 5, 7), (1, H, 1, 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SDPA_MASK_SHAPES, ids=str)
def test_agrees_with_torch_sdpa_on_bool_and_additive_masks(shape, dtype):
    q, k, v = qkv(2, H, dtype=dtype)
    mask = random_mask(*shape, seed=9)
    mask[..., 0] = True  # every query keeps a key; fully masked rows: next test
    ours, _ = mhsa.scaled_dot_product_attention(q, k, v, mask)
    additive = mhsa.mask_to_additive(mask, dtype=dtype)  # SDPA wants the query's dtype
    from_additive, _ = mhsa.scaled_dot_product_attention(q, k, v, mhsa.mask_from_additive(additive))
    assert torch.equal(from_additive, ours)
    for torch_mask in (mask, additive):
        theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=torch_mask)
        assert_close(ours, theirs, **DTYPE_TOL[dtype])


@pytest.mark.skipif(torch.__version__ < "2.5", reason="older SDPA gives NaN on empty rows")
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_agrees_with_torch_sdpa_on_fully_masked_rows(kind):
    q, k, v = qkv(2, H)
    mask = random_mask(2, H, 5, 7, seed=10)
    mask[0, 1, 2] = False
    mask[1, :, 4] = False
    torch_mask = mask if kind == "bool" else mhsa.mask_to_additive(mask)
    ours, _ = mhsa.scaled_dot_product_attention(q, k, v, mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=torch_mask)
    assert_close(ours, theirs, **TOL)
    assert torch.equal(ours[1, :, 4], torch.zeros(H, 8))


# -- padding_mask, padding_mask_from_ids, causal_mask: values and errors ----------------


def test_padding_mask_shape_dtype_and_values():
    mask = padding_mask([3, 0, 5], 5)
    assert mask.shape == (3, 1, 1, 5) and mask.dtype == torch.bool
    assert mask[:, 0, 0].int().tolist() == [[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert torch.equal(padding_mask(torch.tensor([3, 0, 5], dtype=torch.int32), 5), mask)
    assert padding_mask([], 4).shape == (0, 1, 1, 4)


@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=5), extra=st.integers(0, 2))
def test_padding_mask_from_ids_equals_padding_mask_from_lengths(lengths, extra):
    n = max(lengths) + extra
    ids = torch.zeros(len(lengths), n, dtype=torch.long)  # pad id 0
    for b, length in enumerate(lengths):
        ids[b, :length] = torch.arange(1, length + 1)
    assert torch.equal(mhsa.padding_mask_from_ids(ids, 0), padding_mask(lengths, n))


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: padding_mask([2.0, 1.0], 3), TypeError, "`lengths` must be an integer tensor \\[batch\\], got torch.float32"),
        (lambda: padding_mask([True], 3), TypeError, "`lengths` must be an integer tensor \\[batch\\], got torch.bool"),
        (lambda: padding_mask([[1, 2]], 3), ValueError, r"`lengths` must be 1-D \[batch\], got shape \(1, 2\)"),
        (lambda: padding_mask([1, 4], 3), ValueError, r"`lengths` must lie in \[0, n_tokens=3\], got \[1, 4\]"),
        (lambda: padding_mask([-1], 3), ValueError, r"must lie in \[0, n_tokens=3\], got \[-1\]"),
        (lambda: padding_mask([1], 3.5), TypeError, "`n_tokens` must be an int, got float 3.5"),
        (lambda: padding_mask([0], -1), ValueError, "`n_tokens` must be an int >= 0, got -1"),
        (lambda: mhsa.padding_mask_from_ids(torch.zeros(2, 3), 0), TypeError, "`token_ids` must be an integer tensor .* got torch.float32"),
        (lambda: mhsa.padding_mask_from_ids([[1, 0]], 0), TypeError, "`token_ids` must be an integer tensor .* got list"),
        (lambda: mhsa.padding_mask_from_ids(torch.zeros(3, dtype=torch.long), 0), ValueError, r"\[batch, n_tokens\], got shape \(3,\)"),
        (lambda: mhsa.padding_mask_from_ids(torch.zeros(1, 3, dtype=torch.long), 0.0), TypeError, "`pad_id` must be an int, got float"),
    ],
)
def test_padding_mask_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


@given(n_q=st.integers(1, 8), n_k=st.integers(1, 8))
def test_causal_mask_is_bottom_right_lower_triangle(n_q, n_k):
    mask = causal_mask(n_q, n_k)
    assert mask.shape == (n_q, n_k) and mask.dtype == torch.bool
    i, j = torch.meshgrid(torch.arange(n_q), torch.arange(n_k), indexing="ij")
    assert torch.equal(mask, j <= i + n_k - n_q)
    if n_q <= n_k:
        assert mask[-1].all()  # the newest query sees every key
    assert torch.equal(causal_mask(n_q), torch.ones(n_q, n_q, dtype=torch.bool).tril())


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((-1,), ValueError, "`n_q` must be an int >= 0, got -1"),
        ((3, -1), ValueError, "`n_k` must be an int >= 0, got -1"),
        ((2.5,), TypeError, "`n_q` must be an int, got float 2.5"),
        ((True,), TypeError, "`n_q` must be an int, got bool True"),
        ((2, "4"), TypeError, "`n_k` must be an int, got str '4'"),
    ],
)
def test_causal_mask_errors(args, error, message):
    with pytest.raises(error, match=message):
        causal_mask(*args)
