"""Stacks, embeddings, positions and the encoder-decoder model with greedy decoding."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mhsa

from references import encoder_decoder
from tolerances import worst_case

E, H, FF = 16, 4, 32
# Width E = 16, feed-forward FF = 32, head_dim 4, at most 7 keys. One attention sums over
# 16 + 4 + 7 + 16 terms (projection, scores, weighted values, output projection); a layer adds
# the feed-forward's two sums (16, 32) and LayerNorms (mean and variance over 16, twice each).
ATTENTION = 16 + 4 + 7 + 16
LAYER = 2 * ATTENTION + 16 + 32 + 3 * 2 * 16  # a decoder layer: self- and cross-attention
# Two encoder layers, then two decoder layers reading their memory, then the output projection
# over E; each stack ends in a LayerNorm when pre-norm (mean and variance over 16).
ENCODER = 2 * (LAYER - ATTENTION - 2 * 16) + 2 * 16
TOL = worst_case(torch.float32, ENCODER + 2 * LAYER + 2 * 16 + E)
PAD, BOS, EOS = 0, 1, 2


def test_sinusoidal_positional_encoding_follows_the_paper_formula():
    n, e = 7, 10
    pe = mhsa.sinusoidal_positional_encoding(n, e)
    assert pe.shape == (n, e) and pe.dtype == torch.float32
    expected = torch.tensor([
        [math.sin(pos / 10000 ** (2 * (c // 2) / e)) if c % 2 == 0
         else math.cos(pos / 10000 ** (2 * (c // 2) / e)) for c in range(e)]
        for pos in range(n)])
    torch.testing.assert_close(pe, expected)
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0] * (e // 2)))


def test_sinusoidal_positions_differ_and_prefix_is_stable():
    pe = mhsa.sinusoidal_positional_encoding(50, 16)
    distances = torch.cdist(pe, pe) + torch.eye(50) * 10
    assert distances.min() > 0.1  # every position gets its own vector
    torch.testing.assert_close(mhsa.sinusoidal_positional_encoding(20, 16), pe[:20])


def test_sinusoidal_positional_encoding_refuses_bad_sizes():
    with pytest.raises(ValueError, match=r"`embed_dim` must be even .* got 7"):
        mhsa.sinusoidal_positional_encoding(4, 7)
    with pytest.raises(ValueError, match=r"`n_tokens` must be a positive int, got 0"):
        mhsa.sinusoidal_positional_encoding(0, 8)


def test_token_embedding_is_scaled_by_sqrt_embed_dim():
    torch.manual_seed(0)
    embed = mhsa.TokenEmbedding(11, E, pad_id=PAD)
    ids = torch.tensor([[3, 4, 0]])
    torch.testing.assert_close(embed(ids), embed.embedding.weight[ids] * 4.0)
    assert torch.equal(embed(ids)[0, 2], torch.zeros(E))  # padding vector is zero
    wide = mhsa.TokenEmbedding(1000, 64)  # scaled entries start with unit variance, like PE
    assert abs(wide(torch.arange(1000)[None]).std().item() - 1.0) < 0.05
    with pytest.raises(TypeError, match=r"`ids` must be an integer tensor of token ids, got "
                                        r"torch.float32"):
        embed(torch.zeros(1, 3))


@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_match_torch_encoder_and_decoder(norm_first):
    torch.manual_seed(0)
    kw = {"dropout": 0.1, "norm_first": norm_first, "batch_first": True}
    enc_layer = nn.TransformerEncoderLayer(E, H, FF, **kw)
    dec_layer = nn.TransformerDecoderLayer(E, H, FF, **kw)
    torch_enc = nn.TransformerEncoder(enc_layer, 2, norm=nn.LayerNorm(E) if norm_first else None,
                                      enable_nested_tensor=False).eval()
    torch_dec = nn.TransformerDecoder(dec_layer, 2, norm=nn.LayerNorm(E) if norm_first else None
                                      ).eval()
    ours_enc = mhsa.Encoder(E, H, FF, 2, norm_first=norm_first).eval()
    ours_dec = mhsa.Decoder(E, H, FF, 2, norm_first=norm_first).eval()
    for ours, theirs in ((ours_enc, torch_enc), (ours_dec, torch_dec)):
        for k, layer in enumerate(theirs.layers):
            ours.layers[k] = type(ours.layers[k]).from_torch(layer)
        assert (ours.norm is None) == (theirs.norm is None)
        if ours.norm is not None:
            with torch.no_grad():
                theirs.norm.weight.normal_()
            ours.norm.load_state_dict(theirs.norm.state_dict())
    src, tgt = torch.randn(2, 6, E), torch.randn(2, 4, E)
    mask = mhsa.padding_mask([6, 3], 6)
    memory = ours_enc(src, attn_mask=mask)
    expected = torch_enc(src, src_key_padding_mask=mhsa.mask_to_torch_mha(mask, key_padding=True))
    torch.testing.assert_close(memory[0], expected[0], **TOL)
    torch.testing.assert_close(memory[1, :3], expected[1, :3], **TOL)
    torch.testing.assert_close(
        ours_dec(tgt, memory, memory_mask=mask),
        torch_dec(tgt, memory, tgt_mask=mhsa.mask_to_torch_mha(mhsa.causal_mask(4)),
                  tgt_is_causal=True,
                  memory_key_padding_mask=mhsa.mask_to_torch_mha(mask, key_padding=True)),
        **TOL)


def small_model(seed=0, num_layers=2, **kw):
    return encoder_decoder(seed, embed_dim=E, num_heads=H, ff_dim=FF, num_layers=num_layers, **kw)


def test_forward_returns_logits_and_ignores_source_padding():
    model = small_model()
    src = torch.tensor([[3, 4, 5, 6], [7, 8, 9, PAD]])
    tgt = torch.tensor([[BOS, 6, 5], [BOS, 9, 8]])
    logits = model(src, tgt)
    assert logits.shape == (2, 3, 13)
    more_padding = torch.cat([src, torch.full((2, 3), PAD)], dim=1)
    torch.testing.assert_close(model(more_padding, tgt), logits, **TOL)
    torch.testing.assert_close(model(src[1:, :3], tgt[1:]), logits[1:], **TOL)


def test_model_logits_at_i_ignore_later_target_tokens():
    model = small_model(norm_first=True)
    src = torch.tensor([[3, 4, 5, 6]])
    tgt = torch.tensor([[BOS, 6, 5, 4]])
    changed = tgt.clone()
    changed[0, 2] = 11
    torch.testing.assert_close(model(src, changed)[:, :2], model(src, tgt)[:, :2],
                               atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_decode_adds_the_sinusoidal_positions_at_every_length(dtype):
    model = small_model().to(dtype)
    src = torch.tensor([[3, 4, 5, 6]])
    memory, src_mask = model.encode(src)
    for n in (5, 300):  # the model keeps a table of positions: 300 needs it to grow
        tgt = torch.randint(3, 13, (1, n), generator=torch.Generator().manual_seed(n))
        x = model.tgt_embed(tgt) + mhsa.sinusoidal_positional_encoding(n, E, dtype=dtype)
        expected = model.lm_head(model.decoder(x, memory, memory_mask=src_mask))
        torch.testing.assert_close(model.decode(tgt, memory, src_mask), expected)


def test_target_padding_is_masked_and_an_unpadded_target_needs_no_mask():
    model = small_model()
    src, tgt = torch.tensor([[3, 4, 5]]), torch.tensor([[BOS, 6, PAD, 7]])
    memory, src_mask = model.encode(src)
    x = model.tgt_embed(tgt) + mhsa.sinusoidal_positional_encoding(4, E)
    masked = model.decoder(x, memory, self_attn_mask=mhsa.padding_mask_from_ids(tgt, PAD),
                           memory_mask=src_mask)
    torch.testing.assert_close(model.decode(tgt, memory, src_mask), model.lm_head(masked))
    unpadded = tgt[:, :2]  # no padding id: decode passes no target mask, same logits
    all_true = torch.ones(1, 1, 1, 2, dtype=torch.bool)
    expected = model.lm_head(model.decoder(x[:, :2], memory, self_attn_mask=all_true,
                                             memory_mask=src_mask))
    torch.testing.assert_close(model.decode(unpadded, memory, src_mask), expected)


def reversal_batch(g, batch, n):
    src = torch.randint(3, 13, (batch, n), generator=g)
    target = torch.cat([src.flip(1), torch.full((batch, 1), EOS)], dim=1)
    tgt_in = torch.cat([torch.full((batch, 1), BOS), target[:, :-1]], dim=1)
    return src, tgt_in, target


def test_a_short_training_run_lowers_the_loss():
    model = small_model(seed=0, num_layers=1).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(30):
        src, tgt_in, target = reversal_batch(g, 64, 3)
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), target.flatten(),
                               ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.7 * first, (first, last)
    # A model that ignores the source can at best be sure of eos and guess 3 digits out of
    # 10: mean loss 3 * ln(10) / 4 = 1.73. Going below it means reading the source.
    assert last < 3 * math.log(10) / 4 - 0.08, (first, last)


def scripted(model, script):
    """Make the decoder (``model.decode``, which greedy decoding calls) return logits that
    pick ``script[b][t]`` at step ``t``."""
    calls = []

    def decode(tgt, memory, src_mask=None, *, caches=None, tgt_mask="from_ids"):
        step = tgt.shape[1] - 1
        calls.append(step)
        logits = torch.zeros(tgt.shape[0], tgt.shape[1], 13)
        for b, tokens in enumerate(script):
            logits[b, -1, tokens[min(step, len(tokens) - 1)]] = 1.0
        return logits

    model.decode = decode
    return calls


def test_greedy_decode_pads_after_eos_and_stops_when_all_finished():
    model = small_model()
    calls = scripted(model, [[5, EOS, 7, 7, 7, 7], [4, 6, 8, EOS, 9, 9]])
    out = model.greedy_decode(torch.tensor([[3, 4], [5, 6]]), bos_id=BOS, eos_id=EOS, max_len=6)
    assert out.tolist() == [[5, EOS, PAD, PAD], [4, 6, 8, EOS]]
    assert calls == [0, 1, 2, 3]  # stopped once both had produced eos


def test_greedy_decode_stops_at_max_len_without_eos():
    model = small_model()
    scripted(model, [[5], [6]])
    out = model.greedy_decode(torch.tensor([[3, 4], [5, 6]]), bos_id=BOS, eos_id=EOS, max_len=3)
    assert out.shape == (2, 3) and out.dtype == torch.long
    assert out.tolist() == [[5, 5, 5], [6, 6, 6]]


def test_greedy_decode_agrees_with_teacher_forced_argmax():
    model = small_model(seed=3)
    src = torch.tensor([[3, 4, 5], [6, 7, PAD]])
    out = model.greedy_decode(src, bos_id=BOS, eos_id=EOS, max_len=5)
    assert out.shape[0] == 2 and 1 <= out.shape[1] <= 5
    tgt_in = torch.cat([torch.full((2, 1), BOS), out[:, :-1]], dim=1)
    predicted = model(src, tgt_in).argmax(-1)
    for b in range(2):  # up to and including the first eos, the tokens are the argmax
        n = out.shape[1] if EOS not in out[b] else out[b].tolist().index(EOS) + 1
        assert torch.equal(predicted[b, :n], out[b, :n])


def test_greedy_decode_returns_an_ordinary_tensor():
    model = small_model()
    out = model.greedy_decode(torch.tensor([[3, 4]]), bos_id=BOS, eos_id=EOS, max_len=3)
    assert not out.is_inference() and not out.requires_grad
    out[0, 0] = 7  # decoding runs in inference mode; its result can still be written to
    assert out[0, 0] == 7


def test_record_attention_covers_every_layer_of_the_model():
    model = small_model()
    src = torch.tensor([[3, 4, 5, PAD, PAD]])
    tgt = torch.tensor([[BOS, 5, 4, 3]])
    plain = model(src, tgt)
    with mhsa.record_attention(model) as weights:
        recorded = model(src, tgt)
    torch.testing.assert_close(recorded, plain, **TOL)
    assert sorted(weights) == [
        "decoder.layers.0.cross_attn", "decoder.layers.0.self_attn",
        "decoder.layers.1.cross_attn", "decoder.layers.1.self_attn",
        "encoder.layers.0.self_attn", "encoder.layers.1.self_attn"]
    cross = weights["decoder.layers.1.cross_attn"]
    assert cross.shape == (1, H, 4, 5)  # n_tgt queries, n_src keys
    assert torch.equal(cross[..., 3:], torch.zeros(1, H, 4, 2))  # padded source keys
    assert weights["encoder.layers.0.self_attn"].shape == (1, H, 5, 5)


def test_model_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"`pad_id` must be an int in \[0, tgt_vocab=5\), got 7"):
        mhsa.EncoderDecoder(10, 5, E, H, FF, 1, pad_id=7)
    with pytest.raises(TypeError, match=r"`pad_id` must be an int, got float 0\.0"):
        mhsa.EncoderDecoder(10, 5, E, H, FF, 1, pad_id=0.0)
    with pytest.raises(ValueError, match=r"`pad_id` must be an int >= 0, got -1"):
        mhsa.EncoderDecoder(10, 5, E, H, FF, 1, pad_id=-1)
    with pytest.raises(ValueError, match=r"`num_layers` must be a positive int, got 0"):
        mhsa.EncoderDecoder(10, 10, E, H, FF, 0)
    model = small_model()
    with pytest.raises(TypeError, match=r"`src` must be an integer tensor of token ids, got "
                                        r"torch.float32"):
        model(torch.zeros(1, 3), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`tgt` must be 2-D \[batch, n\] token ids, got "
                                         r"shape \(3,\)"):
        model(torch.ones(1, 3, dtype=torch.long), torch.ones(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`src` and `tgt` must have the same batch size"):
        model(torch.ones(2, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`max_len` must be a positive int, got 0"):
        model.greedy_decode(torch.ones(1, 3, dtype=torch.long), bos_id=BOS, eos_id=EOS,
                            max_len=0)
    with pytest.raises(TypeError, match=r"`eos_id` must be an int, got float"):
        model.greedy_decode(torch.ones(1, 3, dtype=torch.long), bos_id=BOS, eos_id=2.0,
                            max_len=3)
