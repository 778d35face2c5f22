"""MultiHeadAttention against torch.nn.MultiheadAttention and torch's fused SDPA.

Tolerances: tests/tolerances.py derives them from the dtype and the size of the sums.
Masks: boolean, True = may attend.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mhsa
from mhsa import MultiHeadAttention, causal_mask, padding_mask

from tolerances import worst_case

# An output entry: projection over embed_dim <= 16, scores over head_dim <= 8, weighted values
# over n_k <= 7 keys, output projection over 16.
CHAIN = 16 + 8 + 7 + 16
TOL32 = worst_case(torch.float32, CHAIN)
TOL64 = worst_case(torch.float64, CHAIN)

# (batch, n_q, n_k, embed_dim, num_heads, kdim, vdim); n_k None = self-attention
CASES = {
    "self": (2, 5, None, 16, 4, None, None),
    "cross_nq_ne_nk": (2, 3, 7, 16, 4, None, None),
    "batch_1": (1, 6, None, 12, 3, None, None),
    "one_head": (3, 4, 5, 8, 1, None, None),
    "head_dim_1": (2, 5, None, 4, 4, None, None),
    "kdim_vdim": (2, 3, 6, 16, 2, 6, 10),
    "one_token": (2, 1, 1, 8, 2, None, None),
}
SEEDS = [0, 1, 2]


def make_inputs(case, seed, dtype=torch.float32):
    b, n_q, n_k, e, _, kdim, vdim = CASES[case]
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(b, n_q, e, generator=g, dtype=dtype)
    if n_k is None:
        return query, None, None
    key = torch.randn(b, n_k, kdim or e, generator=g, dtype=dtype)
    value = torch.randn(b, n_k, vdim or e, generator=g, dtype=dtype)
    return query, key, value


def make_torch_mha(case, seed, bias=True):
    _, _, _, e, h, kdim, vdim = CASES[case]
    torch.manual_seed(100 + seed)
    mha = nn.MultiheadAttention(e, h, bias=bias, kdim=kdim, vdim=vdim, batch_first=True)
    if bias:  # torch initialises biases to zero; make them count
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    return mha.eval()


def torch_mha_forward(mha, query, key, value, need_weights, mask=None):
    key = query if key is None else key
    value = key if value is None else value
    torch_mask = None
    if mask is not None:  # ours: True = may attend, [b, h, n_q, n_k]; torch: True = ignore
        b, n_q, n_k, h = query.shape[0], query.shape[1], key.shape[1], mha.num_heads
        torch_mask = ~mask.expand(b, h, n_q, n_k).reshape(b * h, n_q, n_k)
    return mha(query, key, value, attn_mask=torch_mask, need_weights=need_weights,
               average_attn_weights=False)


# --- construction -----------------------------------------------------------------------


def test_attributes_and_parameter_shapes():
    m = MultiHeadAttention(16, 4, qkv_dim=24, kdim=6, vdim=10)
    assert (m.embed_dim, m.num_heads, m.qkv_dim, m.head_dim) == (16, 4, 24, 6)
    assert m.q_proj.weight.shape == (24, 16)
    assert m.k_proj.weight.shape == (24, 6)
    assert m.v_proj.weight.shape == (24, 10)
    assert m.out_proj.weight.shape == (16, 24)
    assert m.out_proj.bias.shape == (16,)
    assert mhsa.MultiHeadAttention is MultiHeadAttention and "MultiHeadAttention" in mhsa.__all__


def test_defaults_follow_torch():
    m = MultiHeadAttention(12, 3, bias=False)
    assert (m.qkv_dim, m.head_dim, m.kdim, m.vdim) == (12, 4, 12, 12)
    assert all(lin.bias is None for lin in (m.q_proj, m.k_proj, m.v_proj, m.out_proj))


def test_device_and_dtype_arguments():
    m = MultiHeadAttention(8, 2, device="cpu", dtype=torch.float64)
    assert {p.dtype for p in m.parameters()} == {torch.float64}
    assert {p.device.type for p in m.parameters()} == {"cpu"}


# --- against torch.nn.MultiheadAttention ------------------------------------------------


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("seed", SEEDS)
def test_matches_torch_mha(case, seed, bias):
    mha = make_torch_mha(case, seed, bias)
    ours = MultiHeadAttention.from_torch(mha)
    query, key, value = make_inputs(case, seed)
    expected, expected_w = torch_mha_forward(mha, query, key, value, need_weights=True)
    out_w, weights = ours(query, key, value, need_weights=True)
    out_f, none = ours(query, key, value)
    assert none is None
    torch.testing.assert_close(out_w, expected, **TOL32)
    torch.testing.assert_close(out_f, expected, **TOL32)
    torch.testing.assert_close(weights, expected_w, **TOL32)
    fast, _ = torch_mha_forward(mha, query, key, value, need_weights=False)
    torch.testing.assert_close(out_f, fast, **TOL32)


@pytest.mark.parametrize("case", ["self", "cross_nq_ne_nk", "kdim_vdim"])
@pytest.mark.parametrize("seed", SEEDS)
def test_matches_torch_mha_with_mask(case, seed):
    mha = make_torch_mha(case, seed)
    ours = MultiHeadAttention.from_torch(mha)
    query, key, value = make_inputs(case, seed)
    b, n_q, h = query.shape[0], query.shape[1], mha.num_heads
    n_k = n_q if key is None else key.shape[1]
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, h, n_q, n_k, generator=g) < 0.6
    mask[..., 0] = True  # torch's module returns NaN for rows with nothing to attend to
    expected, expected_w = torch_mha_forward(mha, query, key, value, True, mask)
    fused, _ = ours(query, key, value, attn_mask=mask)
    explicit, weights = ours(query, key, value, attn_mask=mask, need_weights=True)
    torch.testing.assert_close(fused, expected, **TOL32)
    torch.testing.assert_close(explicit, expected, **TOL32)
    torch.testing.assert_close(weights, expected_w, **TOL32)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("case", ["self", "kdim_vdim"])
def test_torch_round_trip_is_exact(case, bias):
    mha = make_torch_mha(case, 0, bias)
    back = MultiHeadAttention.from_torch(mha).to_torch()
    assert back.batch_first and back._qkv_same_embed_dim == mha._qkv_same_embed_dim
    original, copied = mha.state_dict(), back.state_dict()
    assert original.keys() == copied.keys()
    for name in original:
        assert torch.equal(original[name], copied[name]), name


def test_to_torch_matches_ours():
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4, kdim=6, vdim=10).eval()
    query, key, value = make_inputs("kdim_vdim", 3)
    expected, _ = ours(query, key, value)
    got, _ = torch_mha_forward(ours.to_torch(), query, key, value, need_weights=False)
    torch.testing.assert_close(got, expected, **TOL32)


def test_from_torch_copies_in_proj_in_qkv_order():
    mha = make_torch_mha("self", 0)
    ours = MultiHeadAttention.from_torch(mha)
    e = mha.embed_dim
    assert torch.equal(ours.q_proj.weight, mha.in_proj_weight[:e])
    assert torch.equal(ours.k_proj.weight, mha.in_proj_weight[e : 2 * e])
    assert torch.equal(ours.v_proj.weight, mha.in_proj_weight[2 * e :])
    assert torch.equal(ours.v_proj.bias, mha.in_proj_bias[2 * e :])
    assert ours.training == mha.training


# --- against F.scaled_dot_product_attention with the same projections -------------------


def plain_fused(m, query, key, value, attn_mask=None):
    """The textbook module: Linear, view/transpose, torch SDPA, transpose/view, Linear."""
    b, n_q, _ = query.shape
    h, d = m.num_heads, m.head_dim
    q = m.q_proj(query).view(b, n_q, h, d).transpose(1, 2)
    k = m.k_proj(key).view(b, key.shape[1], h, d).transpose(1, 2)
    v = m.v_proj(value).view(b, value.shape[1], h, d).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    return m.out_proj(out.transpose(1, 2).reshape(b, n_q, h * d))


@pytest.mark.parametrize("head_dim", [None, 6, 1], ids=["qkv_dim=embed_dim", "d=6", "d=1"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("seed", SEEDS)
def test_matches_torch_sdpa(case, seed, head_dim):
    """qkv_dim != embed_dim included: torch's module cannot express it, SDPA can."""
    _, _, _, e, h, kdim, vdim = CASES[case]
    torch.manual_seed(seed)
    qkv_dim = None if head_dim is None else h * head_dim
    m = MultiHeadAttention(e, h, qkv_dim=qkv_dim, kdim=kdim, vdim=vdim)
    query, key, value = make_inputs(case, seed)
    key = query if key is None else key
    value = key if value is None else value
    expected = plain_fused(m, query, key, value)
    for need_weights in (False, True):
        out, _ = m(query, key, value, need_weights=need_weights)
        torch.testing.assert_close(out, expected, **TOL32)


@pytest.mark.parametrize("n_q, n_k", [(5, 5), (2, 6), (6, 3)])
@pytest.mark.parametrize("seed", SEEDS)
def test_masks_match_torch_sdpa(n_q, n_k, seed):
    """Random mask AND bottom-right causal mask, against torch SDPA given the same mask.

    Rows with no key are compared only where torch defines them (it may give NaN there).
    """
    torch.manual_seed(seed)
    m = MultiHeadAttention(16, 4, qkv_dim=8)
    query, key = torch.randn(3, n_q, 16), torch.randn(3, n_k, 16)
    mask = torch.rand(3, 1, n_q, n_k) < 0.7
    full = mask & causal_mask(n_q, n_k)
    rows = full.any(dim=-1).squeeze(1)  # [b, n_q], True = the query sees some key
    expected = plain_fused(m, query, key, key, attn_mask=full)
    for need_weights in (False, True):
        out, _ = m(query, key, attn_mask=mask, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(out[rows], expected[rows], **TOL32)
        assert torch.equal(out[~rows], m.out_proj.bias.expand(int((~rows).sum()), 16))


def test_is_causal_is_bottom_right_not_torch_top_left():
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2)
    query, key = torch.randn(1, 1, 8), torch.randn(1, 4, 8)
    causal, _ = m(query, key, is_causal=True)
    unmasked, _ = m(query, key)  # one query after four keys sees all of them
    torch.testing.assert_close(causal, unmasked, atol=0, rtol=0)
    _, weights = m(query, key, is_causal=True, need_weights=True)
    assert bool((weights > 0).all())


def test_value_defaults_to_key():
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2)
    query, key = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    assert torch.equal(m(query, key)[0], m(query, key, key)[0])
    assert torch.equal(m(query)[0], m(query, query, query)[0])


@pytest.mark.parametrize("seed", SEEDS)
def test_fused_equals_explicit_with_masks(seed):
    torch.manual_seed(seed)
    m = MultiHeadAttention(12, 3, qkv_dim=9)
    query, key = torch.randn(2, 5, 12), torch.randn(2, 7, 12)
    mask = torch.rand(2, 3, 5, 7) < 0.3  # some rows empty
    fused, _ = m(query, key, attn_mask=mask, is_causal=True)
    explicit, _ = m(query, key, attn_mask=mask, is_causal=True, need_weights=True)
    torch.testing.assert_close(fused, explicit, **TOL32)


@pytest.mark.parametrize("masking", ["none", "causal", "padding"])
def test_fused_equals_explicit_on_long_sequences(masking):
    # from mhsa.core.functional._CONTIGUOUS_FROM tokens on, the CPU path copies the heads first
    n = mhsa.core.functional._CONTIGUOUS_FROM + 3
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, n, 8)
    kw = {"is_causal": masking == "causal",
          "attn_mask": padding_mask([n - 5], n) if masking == "padding" else None}
    fused, _ = m(x, **kw)
    explicit, _ = m(x, need_weights=True, **kw)
    torch.testing.assert_close(fused, explicit, **TOL32)


# --- fully masked rows --------------------------------------------------------------------


def empty_row_cases():
    """name -> (attn_mask, is_causal, n_k, empty): empty [b=2, n_q=4], True = sees no key."""
    row = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    row[0, :, 2] = False  # query 2 of item 0
    empty_row = torch.zeros(2, 4, dtype=torch.bool)
    empty_row[0, 2] = True
    padded = torch.tensor([[False] * 4, [True] * 4])  # item 1 is all padding
    causal = torch.tensor([[True, True, False, False]] * 2)  # 4 queries after 2 keys
    return {
        "all_false_row": (row, False, 4, empty_row),
        "padded_sequence": (padding_mask([4, 0], 4), False, 4, padded),
        "causal_n_q_gt_n_k": (None, True, 2, causal),
    }


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("which", list(empty_row_cases()))
def test_fully_masked_rows_give_out_proj_bias(which, need_weights, training):
    mask, is_causal, n_k, empty = empty_row_cases()[which]
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2, dropout=0.3).train(training)
    query = torch.randn(2, 4, 8, requires_grad=True)
    key = torch.randn(2, n_k, 8, requires_grad=True)
    out, weights = m(query, key, attn_mask=mask, is_causal=is_causal, need_weights=need_weights)
    bias = m.out_proj.bias.expand(int(empty.sum()), 8)
    torch.testing.assert_close(out[empty], bias, atol=0, rtol=0)
    assert bool(torch.isfinite(out).all())
    assert bool((out[~empty] != m.out_proj.bias).all(dim=-1).all())
    if need_weights:
        per_query = weights.permute(0, 2, 1, 3)  # [b, n_q, h, n_k]
        assert bool((per_query[empty] == 0).all())
        torch.testing.assert_close(per_query[~empty].sum(-1), torch.ones(int((~empty).sum()), 2))
    out.square().sum().backward()
    grads = [query.grad, key.grad] + [p.grad for p in m.parameters()]
    assert all(bool(torch.isfinite(g).all()) for g in grads)
    assert bool(query.grad.abs().sum() > 0)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_one_head_fully_masked(need_weights):
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2).train()
    query = torch.randn(2, 3, 8, requires_grad=True)
    mask = torch.tensor([False, True]).view(1, 2, 1, 1)  # head 0 sees nothing
    out, _ = m(query, attn_mask=mask, need_weights=need_weights)
    # head 0's attention output is zero: only head 1 reaches out_proj
    with torch.no_grad():
        v = m.v_proj(query)[..., m.head_dim :]  # head 1's values, all keys visible
        head_1, _ = mhsa.scaled_dot_product_attention(
            m.q_proj(query)[..., m.head_dim :], m.k_proj(query)[..., m.head_dim :], v)
        merged = torch.cat([torch.zeros_like(v), head_1], dim=-1)
    torch.testing.assert_close(out.detach(), m.out_proj(merged).detach(), **TOL32)
    out.sum().backward()
    assert bool(torch.isfinite(query.grad).all())


# --- dtypes ------------------------------------------------------------------------------

# Same weights and inputs (rounded to the low dtype), outputs of magnitude < 1 (default
# init), products summed in float32 on CPU. Against float32: the 4 weight matrices, 3
# projections, scores, weights, output and output projection each rounded once to the low
# dtype: 11 roundings. float64 against float32: the float32 chain's rounding.
# (Measured worst |low - float32| over 20 seeds and sizes up to embed_dim 256, 128 tokens:
# 4.6e-4 for float16, 4.1e-3 for bfloat16, both paths.)
DTYPE_TOL = {torch.float16: worst_case(torch.float16, 11),
             torch.bfloat16: worst_case(torch.bfloat16, 11),
             torch.float64: TOL32}


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_dtypes_agree_with_float32(dtype, need_weights):
    torch.manual_seed(0)
    m32 = MultiHeadAttention(16, 4, qkv_dim=8)
    m = MultiHeadAttention(16, 4, qkv_dim=8, dtype=dtype)
    m.load_state_dict({k: v.to(dtype) for k, v in m32.state_dict().items()})
    query, key = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    mask = torch.rand(2, 1, 5, 7) < 0.7
    mask[0, 0, 1] = False  # one empty row
    expected, _ = m32(query.to(dtype).float(), key.to(dtype).float(), attn_mask=mask,
                      need_weights=need_weights)
    out, weights = m(query.to(dtype), key.to(dtype), attn_mask=mask, need_weights=need_weights)
    assert out.dtype == dtype and bool(torch.isfinite(out).all())
    torch.testing.assert_close(out.float(), expected, **DTYPE_TOL[dtype])
    if need_weights:
        assert weights.dtype == dtype and bool((weights[0, :, 1] == 0).all())
        assert bool((weights.masked_select(~mask) == 0).all())


def test_float64_fused_equals_explicit_tightly():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4, dtype=torch.float64)
    query = torch.randn(2, 5, 16, dtype=torch.float64)
    fused, _ = m(query, is_causal=True)
    explicit, _ = m(query, is_causal=True, need_weights=True)
    torch.testing.assert_close(fused, explicit, **TOL64)


# --- dropout -----------------------------------------------------------------------------


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_dropout_only_in_training(need_weights):
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4, dropout=0.5)
    query = torch.randn(2, 6, 16)
    m.eval()
    a, w_a = m(query, need_weights=need_weights)
    b, _ = m(query, need_weights=need_weights)
    assert torch.equal(a, b)
    m.train()
    c, w_c = m(query, need_weights=need_weights)
    d, _ = m(query, need_weights=need_weights)
    assert not torch.allclose(c, a) and not torch.allclose(c, d)
    if need_weights:  # weights are returned before dropout: rows still sum to 1
        torch.testing.assert_close(w_c, w_a, **TOL32)


def test_zero_dropout_training_equals_eval():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4)
    query = torch.randn(2, 6, 16)
    assert torch.equal(m.train()(query)[0], m.eval()(query)[0])


# --- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"embed_dim": 30, "num_heads": 4}, ValueError,
         r"`embed_dim` \(30\) must be divisible by `num_heads` \(4\)"),
        ({"embed_dim": 32, "num_heads": 4, "qkv_dim": 30}, ValueError,
         r"`qkv_dim` \(30\) must be divisible by `num_heads` \(4\)"),
        ({"embed_dim": 32, "num_heads": 0}, ValueError, r"`num_heads` must be a positive int, got 0"),
        ({"embed_dim": 16.0, "num_heads": 4}, TypeError, r"`embed_dim` must be an int, got float 16\.0"),
        ({"embed_dim": 16, "num_heads": 4, "kdim": -3}, ValueError, r"`kdim` .* got -3"),
        ({"embed_dim": 16, "num_heads": 4, "dropout": 1.0}, ValueError,
         r"`dropout` must be in \[0, 1\), got 1\.0"),
        ({"embed_dim": 16, "num_heads": 4, "dropout": "0.1"}, TypeError,
         r"`dropout` must be a float in \[0, 1\), got str"),
    ],
)
def test_construction_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        MultiHeadAttention(**kwargs)


def forward_error_cases():
    x = torch.randn(2, 5, 16)
    kv = torch.randn(2, 7, 16)
    return {
        "query_rank_2": ((torch.randn(5, 16),), {}, ValueError,
                         r"`query` must be 3-D \[batch, n_q, embed_dim\], got shape \(5, 16\)"),
        "key_rank_4": ((x, torch.randn(2, 1, 7, 16)), {}, ValueError,
                       r"`key` must be 3-D \[batch, n_k, kdim\], got shape \(2, 1, 7, 16\)"),
        "query_width": ((torch.randn(2, 5, 12),), {}, ValueError,
                        r"`query` must be .* with embed_dim=16, got shape \(2, 5, 12\)"),
        "key_width": ((x, torch.randn(2, 7, 12)), {}, ValueError,
                      r"`key` must be .* with kdim=16, got shape \(2, 7, 12\)"),
        "value_width": ((x, kv, torch.randn(2, 7, 8)), {}, ValueError,
                        r"`value` must be .* with vdim=16, got shape \(2, 7, 8\)"),
        "batch_sizes": ((x, torch.randn(3, 7, 16)), {}, ValueError,
                        r"same batch size, got shapes \(2, 5, 16\), \(3, 7, 16\)"),
        "kv_lengths": ((x, kv, torch.randn(2, 6, 16)), {}, ValueError,
                       r"`key` and `value` must have the same length n_k, got 7 .* and 6"),
        "not_a_tensor": (([[1.0] * 16],), {}, TypeError, r"`query` must be a torch.Tensor, got list"),
        "int_query": ((torch.ones(2, 5, 16, dtype=torch.long),), {}, TypeError,
                      r"`query` must be a floating-point tensor, got torch.int64"),
        "dtype": ((x.double(),), {}, TypeError,
                  r"`query` must have the module's dtype torch.float32, got torch.float64"),
        "float_mask": ((x, kv), {"attn_mask": torch.zeros(5, 7)}, TypeError,
                       r"`attn_mask` must be torch.bool \(boolean, True = may attend\), "
                       + r"got torch.float32.*mask_from_additive"),
        "mask_shape": ((x, kv), {"attn_mask": torch.ones(5, 5, dtype=torch.bool)}, ValueError,
                       r"`attn_mask` of shape \(5, 5\) does not broadcast to .*\(2, 4, 5, 7\)"),
        "mask_too_big": ((x, kv), {"attn_mask": torch.ones(3, 4, 5, 7, dtype=torch.bool)},
                         ValueError, r"`attn_mask` of shape \(3, 4, 5, 7\) does not broadcast"),
    }


def test_self_attention_needs_kdim_and_vdim_equal_to_embed_dim():
    mha = MultiHeadAttention(16, 4, kdim=6, vdim=10)
    with pytest.raises(ValueError, match=r"self-attention \(key=None\) .* kdim == vdim == "
                                         r"embed_dim, got 6, 10 and 16"):
        mha(torch.randn(2, 5, 16))


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("case", list(forward_error_cases()))
def test_forward_errors(case, need_weights):
    args, kwargs, error, match = forward_error_cases()[case]
    m = MultiHeadAttention(16, 4)
    with pytest.raises(error, match=match):
        m(*args, **kwargs, need_weights=need_weights)


@pytest.mark.parametrize(
    "kwargs, flag",
    [({"batch_first": False}, "batch_first=False"), ({"add_bias_kv": True}, "add_bias_kv=True"),
     ({"add_zero_attn": True}, "add_zero_attn=True")],
)
def test_from_torch_refuses_unsupported_modules(kwargs, flag):
    mha = nn.MultiheadAttention(8, 2, **{"batch_first": True, **kwargs})
    with pytest.raises(ValueError, match=rf"`module` has {flag}"):
        MultiHeadAttention.from_torch(mha)


def test_from_torch_refuses_other_modules():
    with pytest.raises(TypeError, match=r"must be a torch.nn.MultiheadAttention, got Linear"):
        MultiHeadAttention.from_torch(nn.Linear(4, 4))


def test_to_torch_refuses_qkv_dim():
    with pytest.raises(ValueError, match=r"`qkv_dim` \(8\) equal to `embed_dim` \(16\)"):
        MultiHeadAttention(16, 4, qkv_dim=8).to_torch()


# --- one matrix product and one einops split per input tensor ---------------------------

@pytest.mark.parametrize("call, splits", [
    ("self", [3 * 6]),  # 3h heads from one stacked q/k/v projection
    ("memory", [6, 2 * 6]),  # cross-attention, key is value: q, then k and v stacked
    ("key_value", [6, 6, 6]),  # key and value from different tensors: three projections
    ("self_key_other_value", [6, 6, 6]),  # key is query, value is not: nothing shared
])
def test_heads_are_split_and_merged_by_the_einops_functions(monkeypatch, call, splits):
    seen = []
    split, merge = mhsa.attention.multihead.split_heads, mhsa.attention.multihead.merge_heads
    monkeypatch.setattr(mhsa.attention.multihead, "split_heads",
                        lambda x, h: seen.append(h) or split(x, h))
    monkeypatch.setattr(mhsa.attention.multihead, "merge_heads",
                        lambda x: seen.append("merge") or merge(x))
    mha = MultiHeadAttention(12, 6)
    x, memory = torch.randn(2, 4, 12), torch.randn(2, 5, 12)
    args = {"self": (x,), "memory": (x, memory), "key_value": (x, memory, memory.clone()),
            "self_key_other_value": (x, x, memory[:, :4])}[call]
    mha(*args)
    assert seen == splits + ["merge"]


@pytest.mark.parametrize("call", ["self", "memory", "key_value", "self_key_other_value"])
def test_gradients_reach_each_projection_as_in_torch(call):
    """The stacked q/k/v (or k/v) product passes torch's gradients to each of the three layers.

    Tolerance TOL32: a weight's gradient sums over 2 x 3 query tokens the products of chains
    no longer than the forward one, so the forward bound holds with room.
    """
    theirs = make_torch_mha("self", 0)
    ours = MultiHeadAttention.from_torch(theirs)
    x, memory = make_inputs("cross_nq_ne_nk", 0)[:2]
    args = {"self": (x, x, x), "memory": (x, memory, memory),
            "key_value": (x, memory, memory.flip(1)),
            "self_key_other_value": (x, x, x.flip(1))}[call]
    ours_args = {"self": (x,), "memory": args[:2]}.get(call, args)
    theirs(*args, need_weights=False)[0].square().sum().backward()
    ours(*ours_args)[0].square().sum().backward()
    e = theirs.embed_dim
    for i, projection in enumerate([ours.q_proj, ours.k_proj, ours.v_proj]):
        rows = slice(i * e, (i + 1) * e)
        torch.testing.assert_close(projection.weight.grad, theirs.in_proj_weight.grad[rows], **TOL32)
        torch.testing.assert_close(projection.bias.grad, theirs.in_proj_bias.grad[rows], **TOL32)
    torch.testing.assert_close(ours.out_proj.weight.grad, theirs.out_proj.weight.grad, **TOL32)


def test_attention_by_layer_finds_each_layers_one_attention_module():
    from mhsa.attention.recording import attention_by_layer

    torch.manual_seed(3)
    lm = mhsa.CausalLM(11, 8, 2, 16, 2).eval()
    ids = torch.randint(11, (1, 4))
    with torch.no_grad():
        weights = attention_by_layer(lm, "layers", ids)  # the layers call it "attn"
        with mhsa.record_attention(lm) as record:
            lm(ids)
    assert weights.shape == (2, 1, 2, 4, 4) and torch.equal(weights[1], record["layers.1.attn"])
    decoder = mhsa.Decoder(8, 2, 16, 1).eval()
    with pytest.raises(ValueError, match=r"hold the attention modules \['cross_attn', 'self_attn'\]"):
        attention_by_layer(decoder, "layers", torch.randn(1, 3, 8), torch.randn(1, 2, 8))
