"""The key-value cache: decoding step by step equals the full causal forward pass.

Tolerances: tests/tolerances.py derives them from the dtype and the size of the sums.
Masks: boolean, True = may attend.
"""

import pytest
import torch

import mhsa
from mhsa import DecoderLayer, EncoderDecoder, KVCache

import references
from references import small_mha
from tolerances import worst_case

# One attention: projection over embed_dim 16, scores over head_dim <= 8, weighted values over
# <= 8 cached keys, output projection over 16.
ATTENTION = 16 + 8 + 8 + 16
TOL32 = worst_case(torch.float32, ATTENTION)
TOL64 = worst_case(torch.float64, ATTENTION)
# A decoder layer of width 16, feed-forward 32: self- and cross-attention, the feed-forward's
# two sums (16, 32) and three LayerNorms (mean and variance over 16 each).
LAYER_TOL32 = worst_case(torch.float32, 2 * ATTENTION + 16 + 32 + 3 * 2 * 16)
# The model of make_model: width 32, feed-forward 64, 2 decoder layers, then the output
# projection over 32 (memory comes in already computed, the same for both ways).
MODEL_TOL32 = worst_case(torch.float32, 2 * (2 * (32 + 8 + 8 + 32) + 32 + 64 + 3 * 2 * 32) + 32)
SEEDS = [0, 1, 2]


def make_mha(seed, dtype=torch.float32):
    return small_mha(seed, dtype=dtype)


def decode_in_chunks(module, x, sizes, **kwargs):
    """The outputs of :func:`references.decode_in_chunks` (one cache, chunks of ``sizes``)."""
    return references.decode_in_chunks(module, x, sizes, **kwargs)[0]


# -- KVCache on its own ---------------------------------------------------------------------

def test_update_appends_along_the_token_axis_and_returns_everything():
    cache = KVCache()
    assert len(cache) == 0 and cache.key is None
    k1, v1 = torch.arange(24.0).reshape(1, 2, 3, 4), -torch.arange(24.0).reshape(1, 2, 3, 4)
    k2, v2 = torch.full((1, 2, 1, 4), 7.0), torch.full((1, 2, 1, 4), -7.0)
    cache.update(k1, v1)
    keys, values = cache.update(k2, v2)
    assert len(cache) == 4 and keys.shape == (1, 2, 4, 4)
    assert torch.equal(keys, torch.cat([k1, k2], dim=2))
    assert torch.equal(values, torch.cat([v1, v2], dim=2))
    assert torch.equal(cache.key, keys) and torch.equal(cache.value, values)
    cache.reset()
    assert len(cache) == 0 and cache.value is None


@pytest.mark.parametrize("key, value, error, match", [
    (torch.zeros(2, 4, 1, 8), torch.zeros(3, 4, 1, 8), ValueError, "`value` must have the shape"),
    (torch.zeros(4, 1, 8), torch.zeros(4, 1, 8), ValueError, r"`key` must be 4-D .*got shape \(4, 1, 8\)"),
    (torch.zeros(2, 4, 1, 8, dtype=torch.long), torch.zeros(2, 4, 1, 8), TypeError,
     "`key` must be a floating-point tensor, got torch.int64"),
    (torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8, dtype=torch.float64), TypeError,
     "share one dtype"),
    ([[0.0]], torch.zeros(2, 4, 1, 8), TypeError, "got list"),
])
def test_update_rejects_bad_input(key, value, error, match):
    with pytest.raises(error, match=match):
        KVCache().update(key, value)


@pytest.mark.parametrize("shape, dtype, error, match", [
    ((3, 4, 1, 8), torch.float32, ValueError, r"do not continue the cache's \[2, 4, n_cached=5, 8\]"),
    ((2, 2, 1, 8), torch.float32, ValueError, "batch, num_kv_heads and head_dim must match"),
    ((2, 4, 1, 6), torch.float32, ValueError, "batch, num_kv_heads and head_dim must match"),
    ((2, 4, 1, 8), torch.float64, TypeError, "new keys are torch.float64, the cache holds"),
])
def test_update_rejects_keys_that_do_not_continue_the_cache(shape, dtype, error, match):
    cache = KVCache()
    cache.update(torch.zeros(2, 4, 5, 8), torch.zeros(2, 4, 5, 8))
    with pytest.raises(error, match=match):
        cache.update(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype))
    assert len(cache) == 5  # a refused update changes nothing


# -- KVCache's memory: capacity and nbytes ------------------------------------------------------

def kv(n, fill=0.0, batch=2, heads=3, d=4, dtype=torch.float32):
    """New keys (or values) ``[batch, heads, n, d]``."""
    return torch.full((batch, heads, n, d), fill, dtype=dtype)


def test_capacity_allocates_exactly_that_many_positions_once():
    """nbytes = 2 (k, v) * b * g * capacity * d * element size, filled or not."""
    cache = KVCache(capacity=5)
    assert cache.nbytes == 0
    keys, _ = cache.update(kv(2, 1.0), kv(2, -1.0))
    storage = keys.untyped_storage().data_ptr()
    assert cache.nbytes == 2 * 2 * 3 * 5 * 4 * 4  # float32, 3 of the 5 positions still empty
    keys, values = cache.update(kv(3, 2.0), kv(3, -2.0))
    assert keys.untyped_storage().data_ptr() == storage  # written in place, no new buffer
    assert cache.nbytes == 2 * 2 * 3 * 5 * 4 * 4 and len(cache) == 5
    assert torch.equal(keys[0, 0, :, 0], torch.tensor([1.0, 1.0, 2.0, 2.0, 2.0]))
    assert torch.equal(values, -keys)
    assert cache.key.nbytes + cache.value.nbytes == cache.nbytes  # full: no spare position
    half = KVCache(capacity=3)
    half.update(kv(1, dtype=torch.bfloat16), kv(1, dtype=torch.bfloat16))
    assert half.nbytes == 2 * 2 * 3 * 3 * 4 * 2  # bfloat16: 2 bytes a number


def test_nbytes_counts_the_spare_positions_of_the_buffers():
    """Without capacity one token allocates 16 positions; beyond capacity the buffers double."""
    cache = KVCache()
    cache.update(kv(1), kv(1))
    assert cache.nbytes == 2 * 2 * 3 * 16 * 4 * 4  # 16 allocated, 1 filled
    assert cache.key.nbytes + cache.value.nbytes == 2 * 2 * 3 * 1 * 4 * 4
    grown = KVCache(capacity=4)
    grown.update(kv(4), kv(4))
    assert grown.nbytes == 2 * 2 * 3 * 4 * 4 * 4
    grown.update(kv(1, 5.0), kv(1))  # a fifth position: twice the 5 needed, at least 16
    assert grown.nbytes == 2 * 2 * 3 * 16 * 4 * 4 and len(grown) == 5
    assert torch.equal(grown.key[0, 0, :, 0], torch.tensor([0.0, 0.0, 0.0, 0.0, 5.0]))
    too_long = KVCache(capacity=4)
    too_long.update(kv(10), kv(10))  # a first update longer than capacity: the usual growth
    assert too_long.nbytes == 2 * 2 * 3 * 20 * 4 * 4


@pytest.mark.parametrize("chunk", [1, 2])
def test_window_cache_with_twice_its_span_as_capacity_never_reallocates(chunk):
    """Window 4, chunks of 1 or 2: ``capacity = 2 * (window - 1 + chunk)`` positions hold
    every step; the kept part moves to the front of the same buffers."""
    window, capacity = 4, 2 * (4 - 1 + chunk)
    cache, storages = KVCache(capacity=capacity), set()
    with torch.no_grad():
        for t in range(0, 60, chunk):
            keys, _ = cache.update(kv(chunk, float(t)), kv(chunk), window=window)
            storages.add(keys.untyped_storage().data_ptr())
            assert cache.nbytes == 2 * 2 * 3 * capacity * 4 * 4
    assert len(storages) == 1 and len(cache) == 60
    kept = range(60 - (window - 1 + chunk), 60)  # the last positions, in order
    expected = torch.tensor([float(p - p % chunk) for p in kept])  # each chunk's fill value
    assert torch.equal(keys[0, 0, :, 0], expected)


def test_reset_keeps_the_capacity():
    cache = KVCache(capacity=7)
    cache.update(kv(2), kv(2))
    cache.reset()
    assert len(cache) == 0 and cache.nbytes == 0
    cache.update(kv(1), kv(1))
    assert cache.nbytes == 2 * 2 * 3 * 7 * 4 * 4


@pytest.mark.parametrize("capacity, error, match", [
    (0, ValueError, "`capacity` must be a positive int, got 0"),
    (-3, ValueError, "`capacity` must be a positive int, got -3"),
    (16.0, TypeError, "`capacity` must be an int, got float 16.0"),
    (True, TypeError, "`capacity` must be an int, got bool"),
    ("16", TypeError, "`capacity` must be an int, got str"),
])
def test_capacity_rejects_bad_values(capacity, error, match):
    with pytest.raises(error, match=match):
        KVCache(capacity=capacity)
    with pytest.raises(TypeError, match="positional argument"):
        KVCache(16)  # keyword only


# -- MultiHeadAttention with a cache ------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("sizes", [[1] * 7, [3, 1, 1, 2], [7], [2, 5]],
                         ids=["one_by_one", "prefill_3", "all_at_once", "chunks"])
def test_decoding_in_steps_equals_the_full_causal_forward(seed, need_weights, sizes):
    mha = make_mha(seed)
    x = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(seed))
    full, _ = mha(x, is_causal=True, need_weights=need_weights)
    steps = decode_in_chunks(mha, x, sizes, need_weights=need_weights)
    torch.testing.assert_close(steps, full, **TOL32)


@pytest.mark.parametrize("seed", SEEDS)
def test_decoding_in_steps_is_exact_in_float64(seed):
    mha = make_mha(seed, dtype=torch.float64)
    x = torch.randn(3, 6, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(decode_in_chunks(mha, x, [1] * 6), mha(x, is_causal=True)[0],
                               **TOL64)


@pytest.mark.parametrize("seed", SEEDS)
def test_decoding_in_steps_equals_torch_multihead_attention(seed):
    mha = make_mha(seed)
    with torch.no_grad():  # torch initializes biases to zero; make them count
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.bias.normal_()
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(seed))
    theirs = mha.to_torch().eval()
    ignore_future = mhsa.mask_to_torch_mha(mhsa.causal_mask(6))  # torch: True = ignore
    expected, _ = theirs(x, x, x, attn_mask=ignore_future, need_weights=False)
    torch.testing.assert_close(decode_in_chunks(mha, x, [1] * 6), expected, **TOL32)


def test_cached_weights_are_the_last_rows_of_the_full_table():
    mha = make_mha(0)
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
    _, full = mha(x, is_causal=True, need_weights=True)  # [b, h, 6, 6]
    cache = KVCache()
    mha(x[:, :4], cache=cache)
    _, weights = mha(x[:, 4:], cache=cache, need_weights=True)  # [b, h, 2, 6]
    assert weights.shape == (2, 4, 2, 6)
    torch.testing.assert_close(weights, full[:, :, 4:], **TOL32)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_padding_mask_over_every_cached_key(need_weights):
    mha = make_mha(1)
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(1))
    keep = mhsa.padding_mask(torch.tensor([6, 4]), 6)  # [b, 1, 1, 6]; sequence 2 ends padded
    full, _ = mha(x, attn_mask=keep, is_causal=True, need_weights=need_weights)
    cache, steps = KVCache(), []
    for t in range(6):
        step, _ = mha(x[:, t:t + 1], cache=cache, attn_mask=keep[..., :t + 1],
                      need_weights=need_weights)
        steps.append(step)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL32)


def test_later_tokens_never_change_cached_outputs():
    mha = make_mha(2)
    x = torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(2))
    first = decode_in_chunks(mha, x, [3, 2])[:, :3]
    changed = x.clone()
    changed[:, 3:] = 100.0
    assert torch.equal(decode_in_chunks(mha, changed, [3, 2])[:, :3], first)


def test_cache_is_refused_for_cross_attention():
    mha, x = make_mha(0), torch.randn(1, 2, 16)
    with pytest.raises(ValueError, match="`cache` serves self-attention: call with key=None"):
        mha(x, torch.randn(1, 3, 16), cache=KVCache())
    with pytest.raises(ValueError, match="`cache` serves self-attention"):
        mha(x, None, torch.randn(1, 2, 16), cache=KVCache())


def test_mask_of_the_wrong_length_is_refused_before_the_cache_grows():
    mha, cache = make_mha(0), KVCache()
    mha(torch.randn(1, 3, 16), cache=cache)
    wrong = torch.ones(1, 1, 1, 1, 3, dtype=torch.bool)  # only the old keys, one dim too many
    with pytest.raises(ValueError, match=r"`attn_mask` of shape .* does not broadcast .*\(1, 4, 1, 4\)"):
        mha(torch.randn(1, 1, 16), cache=cache, attn_mask=wrong)
    with pytest.raises(ValueError, match=r"\(1, 4, 1, 4\)"):
        mha(torch.randn(1, 1, 16), cache=cache, attn_mask=torch.ones(1, 1, 1, 3, dtype=torch.bool))
    assert len(cache) == 3


def test_cache_of_another_batch_is_refused():
    mha, cache = make_mha(0), KVCache()
    mha(torch.randn(2, 3, 16), cache=cache)
    with pytest.raises(ValueError, match="do not continue the cache's"):
        mha(torch.randn(1, 1, 16), cache=cache)


# -- decoder layers and the encoder-decoder ----------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("seed", SEEDS)
def test_decoder_layer_in_steps_equals_the_full_layer(norm_first, seed):
    torch.manual_seed(seed)
    layer = DecoderLayer(16, 4, 32, norm_first=norm_first).eval()
    g = torch.Generator().manual_seed(seed)
    x, memory = torch.randn(2, 6, 16, generator=g), torch.randn(2, 5, 16, generator=g)
    memory_mask = mhsa.padding_mask(torch.tensor([5, 3]), 5)
    full = layer(x, memory, memory_mask=memory_mask)
    cache = KVCache()
    steps = [layer(x[:, t:t + 1], memory, memory_mask=memory_mask, cache=cache)
             for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **LAYER_TOL32)


def test_decoder_layer_checks_the_self_attention_mask_against_the_cache():
    layer, cache = DecoderLayer(16, 4, 32).eval(), KVCache()
    memory = torch.randn(1, 5, 16)
    layer(torch.randn(1, 2, 16), memory, cache=cache)
    wrong = torch.ones(1, 1, 1, 2, dtype=torch.bool)  # the new token's own key is missing
    with pytest.raises(ValueError, match=r"`self_attn_mask` of shape \(1, 1, 1, 2\) does not "
                                         r"broadcast .*\(1, 4, 1, 3\)"):
        layer(torch.randn(1, 1, 16), memory, self_attn_mask=wrong, cache=cache)


def make_model(seed, num_layers=2, norm_first=False):
    torch.manual_seed(seed)
    return EncoderDecoder(13, 13, 32, 4, 64, num_layers=num_layers, dropout=0.0, pad_id=0,
                          norm_first=norm_first).eval()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_decode_with_caches_gives_the_last_rows_of_the_full_logits(norm_first):
    model = make_model(0, norm_first=norm_first)
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(3, 13, (3, 6), generator=g), torch.randint(1, 13, (3, 7), generator=g)
    src[2, 4:] = 0  # a padded source
    tgt[1, 5:] = 0  # a padded target
    memory, src_mask = model.encode(src)
    full = model.decode(tgt, memory, src_mask)  # [b, 7, vocab]
    caches = [KVCache() for _ in model.decoder.layers]
    first = model.decode(tgt[:, :4], memory, src_mask, caches=caches)  # positions 0-3
    rest = [model.decode(tgt[:, :t + 1], memory, src_mask, caches=caches) for t in range(4, 7)]
    assert first.shape == (3, 4, 13) and all(r.shape == (3, 1, 13) for r in rest)
    torch.testing.assert_close(torch.cat([first, *rest], dim=1), full, **MODEL_TOL32)


def test_decode_refuses_caches_that_do_not_fit():
    model = make_model(0)
    memory, src_mask = model.encode(torch.randint(3, 13, (1, 4)))
    tgt = torch.tensor([[1, 5, 6]])
    with pytest.raises(ValueError, match=r"`caches` must hold one KVCache per layer \(2\), got 1"):
        model.decode(tgt, memory, src_mask, caches=[KVCache()])
    caches = [KVCache(), KVCache()]
    model.decode(tgt, memory, src_mask, caches=caches)
    with pytest.raises(ValueError, match=r"`caches` hold 3 positions; `tgt` \(3 ids\) has no new"):
        model.decode(tgt, memory, src_mask, caches=caches)


@pytest.mark.parametrize("seed", SEEDS)
def test_greedy_decode_with_cache_gives_the_same_tokens(seed):
    model = make_model(seed)
    src = torch.randint(3, 13, (6, 8), generator=torch.Generator().manual_seed(seed))
    src[0, 5:] = 0  # a padded source
    without = model.greedy_decode(src, bos_id=1, eos_id=2, max_len=12)
    with_cache = model.greedy_decode(src, bos_id=1, eos_id=2, max_len=12, use_cache=True)
    assert without.shape[0] == 6 and without.shape[1] <= 12
    assert torch.equal(with_cache, without)


def test_greedy_decode_cache_handles_sequences_that_finish_early():
    model = make_model(3)
    with torch.no_grad():  # make <eos> (id 2) likely, so that some rows finish and get padded
        model.lm_head.bias[2] += 1.7
    src = torch.randint(3, 13, (16, 8), generator=torch.Generator().manual_seed(3))
    without = model.greedy_decode(src, bos_id=1, eos_id=2, max_len=12)
    finished_early = (without == 0).any(dim=1)
    assert finished_early.any() and not finished_early.all()
    assert torch.equal(model.greedy_decode(src, bos_id=1, eos_id=2, max_len=12, use_cache=True),
                       without)


def test_recorded_attention_with_a_cache_has_one_query_row():
    model = make_model(0)
    src = torch.randint(3, 13, (2, 5), generator=torch.Generator().manual_seed(0))
    with mhsa.record_attention(model) as weights:
        out = model.greedy_decode(src, bos_id=1, eos_id=-1, max_len=4, use_cache=True)
    assert out.shape == (2, 4)
    assert weights["decoder.layers.1.self_attn"].shape == (2, 4, 1, 4)  # 4th step, 4 keys
    assert weights["decoder.layers.1.cross_attn"].shape == (2, 4, 1, 5)


def test_greedy_decode_masks_a_generated_pad_like_decode_does():
    """A pad id the model writes mid-sequence is masked as a key, cached or not, as decode()
    masks it: the tokens equal a loop that calls decode() on the whole prefix."""
    model = make_model(4)  # seed and bias chosen so that ignoring the mask changes tokens
    with torch.no_grad():  # make the pad id (0) likely at some steps, never eos
        model.lm_head.bias[0] += 0.6
    src = torch.randint(3, 13, (3, 6), generator=torch.Generator().manual_seed(4))
    cached = model.greedy_decode(src, bos_id=1, eos_id=-1, max_len=10, use_cache=True)
    assert (cached == 0).any() and (cached != 0).any()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.ones(3, 1, dtype=torch.long)
        for _ in range(10):
            next_id = model.decode(out, memory, src_mask)[:, -1].argmax(-1)
            out = torch.cat([out, next_id[:, None]], dim=1)
    assert torch.equal(cached, out[:, 1:])
    assert torch.equal(model.greedy_decode(src, bos_id=1, eos_id=-1, max_len=10), cached)


def test_greedy_decode_allocates_each_cache_once_for_max_len_positions(kv_caches_made_by):
    made = kv_caches_made_by(mhsa.attention.base)  # MultiHeadAttention.new_cache makes them
    model = make_model(4)
    src = torch.randint(3, 13, (3, 6), generator=torch.Generator().manual_seed(4))
    out = model.greedy_decode(src, bos_id=1, eos_id=2, max_len=9, use_cache=True)
    assert len(made) == 2 and out.shape[1] == 9  # no row finished: every position was read
    for cache in made:  # 2 (k, v) * b * h * max_len * d * float32: allocated once, exactly
        assert len(cache) == 9 and cache.nbytes == 2 * 3 * 4 * 9 * 8 * 4
        assert cache.key.untyped_storage().nbytes() == 3 * 4 * 9 * 8 * 4  # the key buffer
