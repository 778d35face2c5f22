"""FlashAttention-2 in loops (mhsa/core/flash.py) against torch's scaled_dot_product_attention:
outputs and gradients, masks, empty rows, what the forward pass saves, and its errors."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import mhsa

from tolerances import worst_case


def qkv(batch, heads, n_q, n_k, d=16, d_v=8, dtype=torch.float64, seed=0):
    """Queries, keys and values ``[batch, heads, n, d]`` that require gradients."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, n, width, generator=g, dtype=torch.float64)
            .to(dtype).requires_grad_() for n, width in ((n_q, d), (n_k, d), (n_k, d_v))]


def outputs_and_grads(attention, q, k, v, seed=1):
    """``attention(q, k, v)`` and the gradients of q, k, v for one seeded output gradient."""
    out = attention(q, k, v)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed),
                           dtype=torch.float64).to(out.dtype)
    return (out, *torch.autograd.grad(out, (q, k, v), grad_out))


def tolerance(dtype, n_q, n_k, d=16, d_v=8):
    """The chain of sums behind one gradient entry: scores over d, the softmax's sum and the
    weighted values over n_k, dO . V and D = rowsum(dO * O) over d_v, and dq (dk) over n_k
    (n_q) tiles' products; two computations that add in other orders differ by n * eps."""
    return worst_case(dtype, d + 2 * max(n_q, n_k) + 2 * d_v + d)


# sizes no block size divides: 37 = 5 * 7 + 2 = 4 * 9 + 1
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("batch", "heads", "n_q", "n_k", "is_causal"), [
    (1, 1, 37, 37, False),
    (2, 3, 37, 37, True),
    (2, 3, 11, 37, False),
    (3, 2, 37, 11, False),
])
@pytest.mark.parametrize(("block_q", "block_k"), [(7, 9), (16, 5), (64, 64)])
def test_outputs_and_gradients_equal_torch_sdpa(dtype, batch, heads, n_q, n_k, is_causal,
                                                block_q, block_k):
    q, k, v = qkv(batch, heads, n_q, n_k, dtype=dtype)
    flash = outputs_and_grads(lambda *t: mhsa.flash_attention(
        *t, is_causal=is_causal, block_q=block_q, block_k=block_k), q, k, v)
    torch_ = outputs_and_grads(lambda *t: F.scaled_dot_product_attention(
        *t, is_causal=is_causal), q, k, v)  # square when causal: torch's top-left = ours
    for name, ours, theirs in zip(("output", "dq", "dk", "dv"), flash, torch_):
        assert ours.dtype == dtype and ours.shape == theirs.shape, name
        assert_close(ours, theirs, **tolerance(dtype, n_q, n_k), msg=name)


@pytest.mark.parametrize(("n_q", "n_k"), [(5, 13), (13, 5)], ids=["fewer_queries", "more_queries"])
def test_rectangular_causal_is_bottom_right_and_empty_rows_get_zeros(n_q, n_k):
    q, k, v = qkv(2, 2, n_q, n_k)
    flash = outputs_and_grads(lambda *t: mhsa.flash_attention(
        *t, is_causal=True, block_q=3, block_k=4), q, k, v)
    explicit = outputs_and_grads(lambda *t: mhsa.scaled_dot_product_attention(
        *t, is_causal=True)[0], q, k, v)
    for name, ours, theirs in zip(("output", "dq", "dk", "dv"), flash, explicit):
        assert not ours.isnan().any(), name
        assert_close(ours, theirs, **tolerance(torch.float64, n_q, n_k), msg=name)
    if n_q > n_k:  # the first n_q - n_k queries see no key: zero output, zero gradient
        out, dq = flash[0], flash[1]
        assert torch.equal(out[..., : n_q - n_k, :], torch.zeros_like(out[..., : n_q - n_k, :]))
        assert torch.equal(dq[..., : n_q - n_k, :], torch.zeros_like(dq[..., : n_q - n_k, :]))


@pytest.mark.parametrize("mask_shape", [(2, 3, 9, 23), (2, 1, 1, 23), (9, 23)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_boolean_mask_true_may_attend_equals_torch(mask_shape, is_causal):
    q, k, v = qkv(2, 3, 9, 23)
    mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(2)) < 0.7
    mask[..., -1] = True  # every query keeps a key, whatever the causal mask (bottom-right)
    combined = mask & mhsa.causal_mask(9, 23) if is_causal else mask
    flash = outputs_and_grads(lambda *t: mhsa.flash_attention(
        *t, mask, is_causal=is_causal, block_q=4, block_k=6), q, k, v)
    torch_ = outputs_and_grads(lambda *t: F.scaled_dot_product_attention(
        *t, attn_mask=combined), q, k, v)
    for name, ours, theirs in zip(("output", "dq", "dk", "dv"), flash, torch_):
        assert_close(ours, theirs, **tolerance(torch.float64, 9, 23), msg=name)


def test_a_fully_masked_row_gives_zeros_not_nan():
    q, k, v = qkv(1, 2, 6, 10)
    mask = torch.ones(6, 10, dtype=torch.bool)
    mask[2] = False  # query 2 may attend to nothing
    flash = outputs_and_grads(lambda *t: mhsa.flash_attention(*t, mask, block_q=4, block_k=3),
                              q, k, v)
    explicit = outputs_and_grads(lambda *t: mhsa.scaled_dot_product_attention(*t, mask)[0],
                                 q, k, v)
    for name, ours, theirs in zip(("output", "dq", "dk", "dv"), flash, explicit):
        assert not ours.isnan().any(), name
        assert_close(ours, theirs, **tolerance(torch.float64, 6, 10), msg=name)
    assert torch.equal(flash[0][..., 2, :], torch.zeros(1, 2, 8, dtype=torch.float64))


@pytest.mark.parametrize("is_causal", [False, True])
def test_gradcheck_in_float64(is_causal):
    q, k, v = qkv(1, 2, 5, 5, d=3, d_v=2, seed=3)
    assert torch.autograd.gradcheck(
        lambda *t: mhsa.flash_attention(*t, is_causal=is_causal, block_q=2, block_k=3),
        (q, k, v))


def test_forward_saves_only_inputs_output_and_one_number_per_query_row():
    """The memory claim: besides q, k, v and the output, the backward pass gets O(n_q)."""
    q, k, v = qkv(2, 3, 40, 40)
    saved = []

    def pack(tensor):
        saved.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = mhsa.flash_attention(q, k, v, is_causal=True, block_q=8, block_k=8)
    assert saved == [(2, 3, 40, 16), (2, 3, 40, 16), (2, 3, 40, 8), (2, 3, 40, 8), (2, 3, 40)]
    assert out.grad_fn is not None
    output, lse = mhsa.FlashAttention2.apply(q, k, v, None, False, 0.25, 8, 8)
    scores = q @ k.transpose(-2, -1) * 0.25
    assert_close(lse, scores.logsumexp(dim=-1), **worst_case(torch.float64, 16 + 40))
    assert not lse.requires_grad


@pytest.mark.parametrize(("block_q", "block_k"), [(1, 1), (3, 40), (40, 2)])
def test_block_sizes_change_nothing_but_rounding(block_q, block_k):
    q, k, v = qkv(1, 2, 40, 40, dtype=torch.float32)
    one_tile = mhsa.flash_attention(q, k, v, block_q=40, block_k=40)
    tiled = mhsa.flash_attention(q, k, v, block_q=block_q, block_k=block_k)
    assert_close(tiled, one_tile, **worst_case(torch.float32, 16 + 40 + 40))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_keep_their_dtype_and_match_float32(dtype):
    q, k, v = qkv(1, 2, 20, 20, dtype=dtype)
    out = mhsa.flash_attention(q, k, v, block_q=8, block_k=8)
    reference = F.scaled_dot_product_attention(*(t.float() for t in (q, k, v)))
    assert out.dtype == dtype
    assert_close(out.float(), reference, **worst_case(dtype, 2))  # one rounding of the output


def test_errors_name_the_argument():
    q, k, v = qkv(1, 2, 4, 4)
    with pytest.raises(TypeError, match=r"`attn_mask` must be torch.bool \(boolean, True = may"):
        mhsa.flash_attention(q, k, v, torch.zeros(4, 4))
    with pytest.raises(ValueError, match=r"`attn_mask` of shape \(3, 4\) does not broadcast"):
        mhsa.flash_attention(q, k, v, torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="`block_q` must be a positive int, got 0"):
        mhsa.flash_attention(q, k, v, block_q=0)
    with pytest.raises(TypeError, match="`block_k` must be an int, got float 2.0"):
        mhsa.flash_attention(q, k, v, block_k=2.0)
    with pytest.raises(ValueError, match="`query` and `key` must have the same last dimension"):
        mhsa.flash_attention(q, k[..., :3], v)
    with pytest.raises(TypeError, match="`query`, `key` and `value` must share one dtype"):
        mhsa.flash_attention(q, k.float(), v)
