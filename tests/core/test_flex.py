"""FlexAttention with the course's masks: each ``mask_mod`` gives exactly mhsa's boolean mask
(True = may attend), and eager ``flex_attention`` over it equals mhsa's attention and torch's
SDPA with that mask; the soft-capping ``score_mod`` equals capped scores written out.

Eager flex_attention on a CPU computes the full score matrix (no compiling, a few hundredths
of a second per call at these sizes after a first call of about two seconds).
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import and_masks, create_block_mask, create_mask
from torch.testing import assert_close

import mhsa
from mhsa.core.flex import (
    causal_mask_mod,
    document_mask_mod,
    flex_attention_with_mask,
    padding_mask_mod,
    prefix_lm_mask_mod,
    sliding_window_mask_mod,
    softcap_score_mod,
)
from mhsa.core.masks import document_mask, prefix_lm_mask

from tolerances import worst_case

B, H, G, D = 3, 4, 2, 8  # batch, query heads, key/value heads, head_dim
N = 8  # tokens, when queries and keys have one length
LENGTHS = torch.tensor([0, 3, 8])  # a sequence without any real token, one padded, one full
DOCUMENTS = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2], [5, 5, 5, 5, 5, 5, 5, 5],
                          [0, 1, 2, 3, 3, 3, 4, 4]])
PREFIXES = torch.tensor([0, 3, 8])  # causal, a prompt of 3, fully bidirectional
# one output entry: scores over head_dim D, weighted values over at most N keys
TOL = worst_case(torch.float32, D + N)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def dense(mask_mod, n_q=N, n_k=N):
    """The ``[B, 1, n_q, n_k]`` mask that FlexAttention reads from ``mask_mod``."""
    return create_mask(mask_mod, B, None, n_q, n_k, device="cpu")


# (name, mask_mod, mhsa's mask broadcast to [B, 1, n_q, n_k], n_q, n_k)
CASES = [
    ("causal", causal_mask_mod(), mhsa.causal_mask(N), N, N),
    ("causal, 3 new queries after 4 cached keys", causal_mask_mod(offset=4),
     mhsa.causal_mask(3, 7), 3, 7),
    ("causal, more queries than keys", causal_mask_mod(offset=-2), mhsa.causal_mask(6, 4), 6, 4),
    ("window 1", sliding_window_mask_mod(1), mhsa.sliding_window_mask(N, window=1), N, N),
    ("window 3", sliding_window_mask_mod(3), mhsa.sliding_window_mask(N, window=3), N, N),
    ("window 3, 2 new queries after 5 cached keys", sliding_window_mask_mod(3, offset=5),
     mhsa.sliding_window_mask(2, 7, window=3), 2, 7),
    ("window wider than the text", sliding_window_mask_mod(20),
     mhsa.sliding_window_mask(N, window=20), N, N),
    ("padding", padding_mask_mod(LENGTHS), mhsa.padding_mask(LENGTHS, N), N, N),
    ("padding, 2 queries", padding_mask_mod(LENGTHS), mhsa.padding_mask(LENGTHS, N), 2, N),
    ("documents, one row for the batch", document_mask_mod(DOCUMENTS[0]),
     document_mask(DOCUMENTS[0]), N, N),
    ("documents per sequence", document_mask_mod(DOCUMENTS), document_mask(DOCUMENTS), N, N),
    ("prefix LM", prefix_lm_mask_mod(PREFIXES), prefix_lm_mask(PREFIXES, N), N, N),
    ("causal and padding", and_masks(causal_mask_mod(), padding_mask_mod(LENGTHS)),
     mhsa.causal_mask(N) & mhsa.padding_mask(LENGTHS, N), N, N),
    ("causal and documents", and_masks(causal_mask_mod(), document_mask_mod(DOCUMENTS)),
     mhsa.causal_mask(N) & document_mask(DOCUMENTS), N, N),
    ("window and padding", and_masks(sliding_window_mask_mod(2), padding_mask_mod(LENGTHS)),
     mhsa.sliding_window_mask(N, window=2) & mhsa.padding_mask(LENGTHS, N), N, N),
]
IDS = [case[0] for case in CASES]


@pytest.mark.parametrize(("name", "mask_mod", "expected", "n_q", "n_k"), CASES, ids=IDS)
def test_mask_mod_gives_exactly_mhsas_mask(name, mask_mod, expected, n_q, n_k):
    expected = expected[..., :n_q, :].expand(B, 1, n_q, n_k)
    assert torch.equal(dense(mask_mod, n_q, n_k), expected)


@pytest.mark.parametrize(("name", "mask_mod", "expected", "n_q", "n_k"), CASES, ids=IDS)
def test_block_mask_marks_exactly_the_blocks_with_an_allowed_entry(name, mask_mod, expected,
                                                                     n_q, n_k):
    """Blocks of 2 x 2 scores (rows and columns padded to even counts with False)."""
    expected = expected[..., :n_q, :].expand(B, 1, n_q, n_k)
    padded = F.pad(expected, (0, n_k % 2, 0, n_q % 2), value=False)
    rows, cols = padded.shape[-2] // 2, padded.shape[-1] // 2
    any_allowed = padded.reshape(B, 1, rows, 2, cols, 2).any(dim=5).any(dim=3)
    block_mask = create_block_mask(mask_mod, B, None, n_q, n_k, device="cpu", BLOCK_SIZE=2)
    assert torch.equal(block_mask.to_dense().bool(), any_allowed)


@pytest.mark.parametrize(("name", "mask_mod", "expected", "n_q", "n_k"), CASES, ids=IDS)
def test_flex_attention_equals_mhsa_and_torch_sdpa(name, mask_mod, expected, n_q, n_k):
    """Grouped-query inputs (4 query heads, 2 key/value heads), float32, eager on the CPU."""
    q, k, v = randn(B, H, n_q, D, seed=1), randn(B, G, n_k, D, seed=2), randn(B, G, n_k, D, seed=3)
    mask = expected[..., :n_q, :].expand(B, 1, n_q, n_k)
    out = flex_attention_with_mask(q, k, v, mask_mod)
    repeated_k, repeated_v = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)
    ours = mhsa.scaled_dot_product_attention(q, repeated_k, repeated_v, mask)[0]
    torchs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    seeing = mask.any(dim=-1, keepdim=True)  # queries with at least one key
    assert_close(out, ours, **TOL)
    assert_close(out, torchs.where(seeing, 0.0), **TOL)  # torch: NaN where a row sees nothing
    assert not out.isnan().any() and bool((out.masked_select(~seeing) == 0).all())


def test_without_a_mask_flex_attention_is_plain_attention():
    q, k, v = randn(B, H, 5, D, seed=1), randn(B, H, 6, D, seed=2), randn(B, H, 6, D, seed=3)
    assert_close(flex_attention_with_mask(q, k, v, scale=0.5),
                 F.scaled_dot_product_attention(q, k, v, scale=0.5), **TOL)


@pytest.mark.parametrize("cap", [0.5, 3.0])
def test_softcap_score_mod_equals_capped_scores(cap):
    """Scores of size ~4 (inputs scaled by 2): a cap of 0.5 or 3 changes the output visibly."""
    q, k, v = 2 * randn(B, H, N, D, seed=1), 2 * randn(B, H, N, D, seed=2), randn(B, H, N, D, seed=3)
    mask = mhsa.causal_mask(N) & mhsa.padding_mask(LENGTHS, N)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)
    capped = (cap * torch.tanh(scores / cap)).masked_fill(~mask, float("-inf"))
    weights = torch.softmax(capped, dim=-1).nan_to_num(0.0)  # the row that sees nothing: 0
    expected = weights @ v
    out = flex_attention_with_mask(q, k, v, and_masks(causal_mask_mod(), padding_mask_mod(LENGTHS)),
                                   score_mod=softcap_score_mod(cap))
    assert_close(out, expected, **TOL)
    uncapped = mhsa.scaled_dot_product_attention(q, k, v, mask)[0]
    assert (out - uncapped).abs().max() > 100 * TOL["atol"]  # the cap did something


# -- the two new dense masks ----------------------------------------------------------------

def test_document_mask_written_out():
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]).bool()
    assert torch.equal(document_mask([7, 7, 2, 2]), expected)
    batched = document_mask(torch.tensor([[7, 7, 2, 2], [0, 0, 0, 0]]))
    assert batched.shape == (2, 1, 4, 4) and batched.dtype == torch.bool
    assert torch.equal(batched[0, 0], expected) and bool(batched[1].all())


def test_prefix_lm_mask_written_out():
    mask = prefix_lm_mask([2, 0, 4], 4)
    assert mask.shape == (3, 1, 4, 4) and mask.dtype == torch.bool
    assert torch.equal(mask[0, 0], torch.tensor(
        [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]).bool())
    assert torch.equal(mask[1, 0], mhsa.causal_mask(4))  # no prefix: causal
    assert bool(mask[2].all())  # all prefix: bidirectional


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: document_mask(torch.zeros(4)), TypeError,
     r"`document_ids` must be an integer tensor \[n\] or \[batch, n\], got torch.float32"),
    (lambda: document_mask(torch.zeros(1, 2, 4, dtype=torch.long)), ValueError,
     r"`document_ids` must be 1-D \[n\] or 2-D \[batch, n\], got shape \(1, 2, 4\)"),
    (lambda: prefix_lm_mask([1, 5], 4), ValueError,
     r"`prefix_lengths` must lie in \[0, n=4\], got \[1, 5\]"),
    (lambda: prefix_lm_mask([-1], 4), ValueError, r"must lie in \[0, n=4\], got \[-1\]"),
    (lambda: prefix_lm_mask(torch.tensor([[1]]), 4), ValueError,
     r"`prefix_lengths` must be 1-D \[batch\], got shape \(1, 1\)"),
    (lambda: prefix_lm_mask([1.5], 4), TypeError, "`prefix_lengths` must be an integer tensor"),
    (lambda: prefix_lm_mask([1], 4.0), TypeError, "`n` must be an int, got float"),
])
def test_new_masks_reject_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


# -- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: causal_mask_mod(offset=1.0), TypeError, "`offset` must be an int, got float"),
    (lambda: sliding_window_mask_mod(0), ValueError, "`window` must be a positive int, got 0"),
    (lambda: padding_mask_mod([1, 2]), TypeError,
     r"`lengths` must be an integer tensor \[batch\], got list"),
    (lambda: padding_mask_mod(torch.ones(2, 2, dtype=torch.long)), ValueError,
     r"`lengths` must be 1-D \[batch\], got shape \(2, 2\)"),
    (lambda: document_mask_mod(torch.zeros(4, dtype=torch.bool)), TypeError,
     "`document_ids` must be an integer tensor"),
    (lambda: prefix_lm_mask_mod(torch.zeros(2)), TypeError,
     "`prefix_lengths` must be an integer tensor"),
    (lambda: softcap_score_mod(0.0), ValueError, "`cap` must be a finite number > 0, got 0.0"),
    (lambda: softcap_score_mod(True), TypeError, "`cap` must be a real number, got bool"),
])
def test_factories_reject_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize(("shapes", "error", "match"), [
    (((1, 4, 3, 8), (1, 3, 3, 8), (1, 3, 3, 8)), ValueError,
     r"`query`'s heads \(4\) must be divisible by `key`'s \(3\)"),
    (((1, 4, 3, 8), (1, 2, 3, 6), (1, 2, 3, 6)), ValueError,
     r"`key`'s head_dim \(6\) must equal `query`'s \(8\)"),
    (((1, 4, 3, 8), (1, 2, 3, 8), (1, 2, 5, 8)), ValueError, "the same heads and length n_k"),
    (((2, 4, 3, 8), (1, 2, 3, 8), (1, 2, 3, 8)), ValueError, "the same batch size"),
    (((4, 3, 8), (2, 3, 8), (2, 3, 8)), ValueError,
     r"`query` must be 4-D \[batch, heads, n, head_dim\], got shape \(4, 3, 8\)"),
])
def test_flex_attention_with_mask_rejects_bad_shapes(shapes, error, match):
    q, k, v = (torch.zeros(shape) for shape in shapes)
    with pytest.raises(error, match=match):
        flex_attention_with_mask(q, k, v)


def test_flex_attention_with_mask_rejects_bad_types():
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(TypeError, match="`key` must have `query`'s dtype torch.float32, got "
                                        "torch.float64"):
        flex_attention_with_mask(q, q.double(), q)
    with pytest.raises(TypeError, match="`value` must be a floating-point tensor, got torch.int64"):
        flex_attention_with_mask(q, q, q.long())
    with pytest.raises(TypeError, match="`mask_mod` must be a function or None, got Tensor"):
        flex_attention_with_mask(q, q, q, mhsa.causal_mask(3))
