"""The explicit attention function against torch's fused one, and its errors."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import mhsa

from tolerances import worst_case

# float32; an output entry sums d_k = 8 products (a score), then n_k = 7 weighted values
TOL = worst_case(torch.float32, 8 + 7)
# float16/bfloat16 against float32 (products summed in float32): q, k, v, scores, weights and
# output each rounded once to the low dtype
LOW_PRECISION_TOL = {dtype: worst_case(dtype, 6) for dtype in (torch.float16, torch.bfloat16)}


def qkv(*lead, n_q=5, n_k=7, d_k=8, d_v=4, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    def make(*shape):
        return torch.randn(*lead, *shape, generator=g, dtype=dtype)
    return make(n_q, d_k), make(n_k, d_k), make(n_k, d_v)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lead", [(), (3,), (2, 4)])
def test_matches_torch_without_mask(seed, lead):
    q, k, v = qkv(*lead, seed=seed)
    out, weights = mhsa.scaled_dot_product_attention(q, k, v)
    assert_close(out, F.scaled_dot_product_attention(q, k, v), **TOL)
    assert weights.shape == (*lead, 5, 7)
    assert_close(weights.sum(-1), torch.ones(*lead, 5), **TOL)


@pytest.mark.parametrize("mask_shape", [(2, 3, 5, 7), (2, 1, 5, 7), (1, 1, 1, 7), (5, 7), (7,)])
def test_matches_torch_with_bool_mask(mask_shape):
    q, k, v = qkv(2, 3)
    mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(3)) > 0.3
    mask[..., 0] = True  # fully masked rows are tested apart (tests/core/test_masks.py)
    out, weights = mhsa.scaled_dot_product_attention(q, k, v, mask)
    full = mask.expand(2, 3, 5, 7)  # torch needs at least [n_q, n_k]
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=full), **TOL)
    assert torch.all(weights.masked_select(~full) == 0)


def test_matches_torch_with_explicit_scale_and_float64():
    q, k, v = qkv(2, dtype=torch.float64)
    out, _ = mhsa.scaled_dot_product_attention(q, k, v, scale=0.3)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.3))


def test_default_scale_is_inverse_sqrt_of_key_dimension():
    q, k, v = qkv(n_q=1, n_k=2, d_k=16)
    _, weights = mhsa.scaled_dot_product_attention(q, k, v)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(16)
    assert_close(weights, scores.softmax(-1), **TOL)


def test_is_causal_square_matches_torch():
    q, k, v = qkv(2, n_q=6, n_k=6)
    out, weights = mhsa.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), **TOL)
    assert torch.all(weights.triu(diagonal=1) == 0)


def test_is_causal_is_bottom_right_when_fewer_queries():
    q, k, v = qkv(2, n_q=1, n_k=4)
    out, weights = mhsa.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(out, F.scaled_dot_product_attention(q, k, v), **TOL)
    assert torch.all(weights > 0)  # one new query sees all four cached keys
    bottom_right = torch.ones(1, 4, dtype=torch.bool)
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not torch.allclose(out, top_left)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bottom_right))


def test_is_causal_and_mask_both_apply():
    q, k, v = qkv(n_q=4, n_k=4)
    keep_last_key_out = torch.tensor([True, True, True, False])
    _, weights = mhsa.scaled_dot_product_attention(q, k, v, keep_last_key_out, is_causal=True)
    expected = torch.tril(torch.ones(4, 4, dtype=torch.bool)) & keep_last_key_out
    assert torch.equal(weights > 0, expected)


def test_fully_masked_row_gives_zeros_and_finite_gradients():
    q, k, v = (t.requires_grad_() for t in qkv(n_q=3, n_k=4))
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    out, weights = mhsa.scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(weights[1], torch.zeros(4))
    assert torch.equal(out[1], torch.zeros(4))
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


def test_dropout_changes_output_but_weights_stay_normalised():
    q, k, v = qkv(2, 3)
    plain, _ = mhsa.scaled_dot_product_attention(q, k, v)
    torch.manual_seed(0)
    dropped, weights = mhsa.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert not torch.allclose(plain, dropped)
    assert_close(weights.sum(-1), torch.ones(2, 3, 5), **TOL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_close_to_float32(dtype):
    q, k, v = qkv(2)
    ref, _ = mhsa.scaled_dot_product_attention(q, k, v)
    out, _ = mhsa.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype))
    assert out.dtype == dtype
    assert_close(out.float(), ref, **LOW_PRECISION_TOL[dtype])


def _bad(**changes):
    q, k, v = qkv(2)
    args = {"query": q, "key": k, "value": v} | changes
    mask = args.pop("attn_mask", None)
    return lambda: mhsa.scaled_dot_product_attention(**args, attn_mask=mask)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (_bad(query=torch.randn(8)), ValueError, r"`query` must be at least 2-D, got shape \(8,\)"),
        (_bad(key=torch.randn(2, 7, 6)), ValueError, r"same last dimension d_k, got 8 .* and 6"),
        (_bad(value=torch.randn(2, 6, 4)), ValueError, r"same length n_k, got 7 .* and 6"),
        (_bad(key=torch.randn(3, 7, 8), value=torch.randn(3, 7, 4)), ValueError, "same leading dimensions"),
        (_bad(value=torch.randn(2, 7, 4, dtype=torch.float64)), TypeError, "share one dtype"),
        (_bad(query=torch.ones(2, 5, 8, dtype=torch.long)), TypeError, "`query` must be a floating-point"),
        (_bad(key=[[1.0]]), TypeError, "`key` must be a torch.Tensor, got list"),
        (_bad(attn_mask=torch.zeros(5, 7)), TypeError, r"torch.bool \(boolean, True = may attend\), got torch.float32.*mask_from_additive"),
        (_bad(attn_mask=torch.ones(5, 6, dtype=torch.bool)), ValueError, r"`attn_mask` of shape \(5, 6\) does not broadcast .* \(2, 5, 7\)"),
        (_bad(attn_mask=torch.ones(3, 2, 5, 7, dtype=torch.bool)), ValueError, "does not broadcast"),
    ],
)
def test_bad_input_raises_before_computing(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_mask_on_another_device_raises():
    q, k, v = qkv()
    mask = torch.ones(5, 7, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match="`attn_mask` is on meta but `query` is on cpu"):
        mhsa.scaled_dot_product_attention(q, k, v, mask)


def test_bad_dropout_raises():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"`dropout_p` must be in \[0, 1\), got 1.0"):
        mhsa.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
