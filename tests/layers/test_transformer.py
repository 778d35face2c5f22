"""Encoder and decoder layers: equal to torch's with copied weights, causal, padding-invariant.

What `from_torch` carries over and refuses: tests/interop/test_torch_nn.py.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mhsa

from tolerances import worst_case

E, H, FF = 16, 4, 32
# Width E = 16, feed-forward FF = 32, head_dim 4, at most 7 keys. One attention sums over
# 16 + 4 + 7 + 16 terms (projection, scores, weighted values, output projection); a layer adds
# the feed-forward's two sums (16, 32) and LayerNorms (mean and variance over 16, twice each).
ATTENTION = 16 + 4 + 7 + 16
LAYER = 2 * ATTENTION + 16 + 32 + 3 * 2 * 16  # a decoder layer: self- and cross-attention
TOL = worst_case(torch.float32, LAYER)
SETTINGS = [(nf, act) for nf in (False, True) for act in ("relu", "gelu")]
IDS = [f"{'pre' if nf else 'post'}-{act}" for nf, act in SETTINGS]


def randomize(module, seed):
    """Fill every parameter (LayerNorms included) with random values, so a copy is tested."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return module


def torch_encoder_layer(norm_first, activation, seed):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(E, H, FF, dropout=0.1, activation=activation,
                                       norm_first=norm_first, batch_first=True)
    return randomize(layer, seed).eval()


def torch_decoder_layer(norm_first, activation, seed):
    torch.manual_seed(seed)
    layer = nn.TransformerDecoderLayer(E, H, FF, dropout=0.1, activation=activation,
                                       norm_first=norm_first, batch_first=True)
    return randomize(layer, seed).eval()


def inputs(seed, batch=3, n=6):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, n, E, generator=g)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("norm_first", "activation"), SETTINGS, ids=IDS)
def test_encoder_layer_matches_torch_with_copied_weights(norm_first, activation, seed):
    theirs = torch_encoder_layer(norm_first, activation, seed)
    ours = mhsa.EncoderLayer.from_torch(theirs)
    x = inputs(seed)
    lengths = torch.tensor([6, 4, 1])
    mask = mhsa.padding_mask(lengths, 6)  # True = may attend
    expected = theirs(x, src_key_padding_mask=mhsa.mask_to_torch_mha(mask, key_padding=True))
    got = ours(x, attn_mask=mask)
    real = mask[:, 0, 0, :]  # torch's fast path may zero padded rows: compare real tokens
    torch.testing.assert_close(got[real], expected[real], **TOL)
    torch.testing.assert_close(ours(x), theirs(x), **TOL)
    with mhsa.record_attention(ours):  # the explicit path gives the same output
        torch.testing.assert_close(ours(x, attn_mask=mask)[real], expected[real],
                                   **TOL)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("norm_first", "activation"), SETTINGS, ids=IDS)
def test_decoder_layer_matches_torch_with_copied_weights(norm_first, activation, seed):
    theirs = torch_decoder_layer(norm_first, activation, seed)
    ours = mhsa.DecoderLayer.from_torch(theirs)
    x, memory = inputs(seed, n=5), inputs(seed + 10, n=7)
    src_mask = mhsa.padding_mask(torch.tensor([7, 3, 5]), 7)  # [b, 1, 1, n_src]
    tgt_mask = mhsa.padding_mask(torch.tensor([5, 5, 2]), 5)  # [b, 1, 1, n_tgt]
    expected = theirs(
        x, memory,
        tgt_mask=mhsa.mask_to_torch_mha(mhsa.causal_mask(5)), tgt_is_causal=True,
        tgt_key_padding_mask=mhsa.mask_to_torch_mha(tgt_mask, key_padding=True),
        memory_key_padding_mask=mhsa.mask_to_torch_mha(src_mask, key_padding=True))
    got = ours(x, memory, self_attn_mask=tgt_mask, memory_mask=src_mask)
    torch.testing.assert_close(got, expected, **TOL)
    with mhsa.record_attention(ours):
        torch.testing.assert_close(ours(x, memory, self_attn_mask=tgt_mask, memory_mask=src_mask),
                                   expected, **TOL)


def test_feed_forward_is_two_linears_around_the_activation():
    torch.manual_seed(0)
    ff = mhsa.FeedForward(E, FF, activation="gelu").eval()
    x = torch.randn(2, 3, E)
    expected = F.gelu(x @ ff.linear1.weight.T + ff.linear1.bias) @ ff.linear2.weight.T \
        + ff.linear2.bias
    torch.testing.assert_close(ff(x), expected)


def test_post_norm_output_is_normalized_and_pre_norm_is_not():
    torch.manual_seed(0)
    x = torch.randn(2, 4, E) * 5
    post = mhsa.EncoderLayer(E, H, FF, norm_first=False).eval()
    pre = mhsa.EncoderLayer(E, H, FF, norm_first=True).eval()
    torch.testing.assert_close(post(x).mean(-1), torch.zeros(2, 4), **TOL)
    assert pre(x).mean(-1).abs().max() > 0.1  # the residual stream passes through un-normed


def test_dropout_acts_in_training_mode_only():
    torch.manual_seed(0)
    layer = mhsa.EncoderLayer(E, H, FF, dropout=0.5)
    x = torch.randn(2, 4, E)
    assert not torch.equal(layer(x), layer(x))
    layer.eval()
    assert torch.equal(layer(x), layer(x))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_is_causal(norm_first):
    torch.manual_seed(0)
    layer = mhsa.DecoderLayer(E, H, FF, norm_first=norm_first).eval()
    x, memory = torch.randn(2, 6, E), torch.randn(2, 4, E)
    before = layer(x, memory)
    for j in range(6):
        changed = x.clone()
        changed[:, j] = torch.randn(2, E)
        after = layer(changed, memory)
        torch.testing.assert_close(after[:, :j], before[:, :j], atol=0, rtol=0)
        assert (after[:, j:] - before[:, j:]).abs().amax(dim=-1).min() > 1e-3


@pytest.mark.parametrize("norm_first", [False, True])
def test_masked_memory_padding_equals_truncated_memory(norm_first):
    torch.manual_seed(1)
    layer = mhsa.DecoderLayer(E, H, FF, norm_first=norm_first).eval()
    x, memory = torch.randn(1, 5, E), torch.randn(1, 3, E)
    padded = torch.cat([memory, torch.randn(1, 4, E) * 100], dim=1)  # 4 garbage pads
    mask = mhsa.padding_mask([3], 7)
    torch.testing.assert_close(layer(x, padded, memory_mask=mask), layer(x, memory),
                               **TOL)
    # the mask matters: far beyond rounding
    assert not torch.allclose(layer(x, padded), layer(x, memory), atol=100 * TOL["atol"])


@pytest.mark.parametrize("norm_first", [False, True])
def test_masked_encoder_padding_leaves_real_tokens_unchanged(norm_first):
    torch.manual_seed(2)
    layer = mhsa.EncoderLayer(E, H, FF, norm_first=norm_first).eval()
    x = torch.randn(1, 4, E)
    padded = torch.cat([x, torch.randn(1, 3, E) * 100], dim=1)
    out = layer(padded, attn_mask=mhsa.padding_mask([4], 7))
    torch.testing.assert_close(out[:, :4], layer(x), **TOL)
    assert not torch.allclose(layer(padded)[:, :4], layer(x), atol=100 * TOL["atol"])


def test_record_attention_stores_every_layer_weights_without_changing_forward():
    torch.manual_seed(0)
    layer = mhsa.DecoderLayer(E, H, FF).eval()
    x, memory = torch.randn(2, 5, E), torch.randn(2, 7, E)
    mask = mhsa.padding_mask([7, 4], 7)
    plain = layer(x, memory, memory_mask=mask)
    with mhsa.record_attention(layer) as weights:
        recorded = layer(x, memory, memory_mask=mask)
    torch.testing.assert_close(recorded, plain, **TOL)
    assert sorted(weights) == ["cross_attn", "self_attn"]
    assert weights["self_attn"].shape == (2, H, 5, 5)
    assert weights["cross_attn"].shape == (2, H, 5, 7)  # n_tgt queries against n_src keys
    torch.testing.assert_close(weights["cross_attn"].sum(-1), torch.ones(2, H, 5))
    assert torch.equal(weights["self_attn"].triu(1), torch.zeros(2, H, 5, 5))  # causal
    assert torch.equal(weights["cross_attn"][1, :, :, 4:], torch.zeros(H, 5, 3))  # padding
    before = {name: w.clone() for name, w in weights.items()}
    layer(x * 2, memory)  # outside the block: nothing is recorded any more
    assert all(torch.equal(weights[name], w) for name, w in before.items())


def test_record_attention_overwrites_with_the_last_call():
    layer = mhsa.EncoderLayer(E, H, FF).eval()
    with mhsa.record_attention(layer) as weights:
        layer(torch.randn(1, 3, E))
        layer(torch.randn(2, 5, E))
    assert weights["self_attn"].shape == (2, H, 5, 5)


# ---- errors -------------------------------------------------------------------------------

def test_unknown_activation_is_named():
    with pytest.raises(ValueError, match=r"`activation` must be 'relu' or 'gelu', got 'tanh'"):
        mhsa.EncoderLayer(E, H, FF, activation="tanh")
    with pytest.raises(ValueError, match="got 'swish'"):
        mhsa.FeedForward(E, FF, activation="swish")


def test_bad_sizes_and_dropout_are_refused():
    with pytest.raises(ValueError, match=r"`embed_dim` \(30\) must be divisible by `num_heads` \(4\)"):
        mhsa.DecoderLayer(30, 4, FF)
    with pytest.raises(ValueError, match=r"`ff_dim` must be a positive int, got 0"):
        mhsa.EncoderLayer(E, H, 0)
    with pytest.raises(ValueError, match=r"`dropout` must be in \[0, 1\), got 1.5"):
        mhsa.EncoderLayer(E, H, FF, dropout=1.5)


def test_bad_inputs_name_the_argument():
    layer = mhsa.DecoderLayer(E, H, FF)
    x = torch.randn(2, 3, E)
    with pytest.raises(ValueError, match=r"`memory` must be 3-D \[batch, n_src, embed_dim\] with "
                                         r"embed_dim=16, got shape \(2, 4, 8\)"):
        layer(x, torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match=r"`x` and `memory` must have the same batch size"):
        layer(x, torch.randn(3, 4, E))
    with pytest.raises(TypeError, match=r"`memory_mask` must be torch.bool"):
        layer(x, torch.randn(2, 4, E), memory_mask=torch.ones(2, 1, 1, 4))
    with pytest.raises(ValueError, match=r"`memory_mask` of shape \(2, 1, 1, 3\) does not "
                                         r"broadcast"):
        layer(x, torch.randn(2, 4, E), memory_mask=torch.ones(2, 1, 1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"`x` must be 3-D \[batch, n, embed_dim\]"):
        mhsa.EncoderLayer(E, H, FF)(torch.randn(3, E))


def test_record_attention_refuses_a_model_without_layers_and_nesting():
    with pytest.raises(ValueError, match=r"`model` \(Linear\) contains no attention module"), \
            mhsa.record_attention(nn.Linear(2, 2)):
        pass
    layer = mhsa.EncoderLayer(E, H, FF)
    with mhsa.record_attention(layer), \
            pytest.raises(ValueError, match="already inside a record_attention block"), \
            mhsa.record_attention(layer):
        pass
