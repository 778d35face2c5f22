"""SinkKVCache: StreamingLLM's window that keeps the first tokens, with positions in the cache.

References: plain causal decoding (a window longer than the text evicts nothing); a
hand-written plain-torch version of the policy (:func:`streaming_reference`): keys and values
of every token computed once without positions, and at each chunk the kept ones (the first
``num_sink_tokens`` and the last ``window - 1`` before the chunk, then the chunk) rotated at
their places in the cache, ``0, 1, ...``, the queries at theirs (Xiao et al. 2023, section
3.2); the windowed :class:`mhsa.KVCache` for ``num_sink_tokens=0``. Masks: boolean,
True = may attend. Tolerances: chains of sums (projection over 32, scores over 8, weighted
values over at most 12 keys, output projection over 32), plus the rotations of the sinks.
"""

import pytest
import torch
import torch.nn.functional as F

import mhsa
from mhsa import GroupedQueryAttention, SinkKVCache

from references import decode_in_chunks
from tolerances import DOCUMENTED_FLOAT32, worst_case

TOL32 = worst_case(torch.float32, 32 + 8 + 12 + 32 + 8)
EMBED, HEADS, KV_HEADS, D = 32, 4, 2, 8


def make(seed=0, rope_base=10000.0, window=None):
    torch.manual_seed(seed)
    attn = GroupedQueryAttention(EMBED, HEADS, KV_HEADS, rope_base=rope_base, window=window,
                                 bias=True).eval()
    with torch.no_grad():
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj):
            proj.bias.normal_()
    return attn


def text(n, seed=1, batch=2):
    return torch.randn(batch, n, EMBED, generator=torch.Generator().manual_seed(seed))


def streaming_reference(attn, x, sizes, num_sink_tokens, window, key_mask=None):
    """The policy in plain torch: per chunk, the kept text positions (sinks, the window's
    last ``window - 1``, the chunk), rotated at their cache positions ``arange(n_kept)``,
    queries at the chunk's last places, bottom-right causal, ``enable_gqa``; ``key_mask``
    ``[b, n]`` (True = may attend) read at the kept text positions."""

    def heads(proj):  # [b, n, e] -> [b, heads, n, d], no positions yet
        return F.linear(x, proj.weight, proj.bias).unflatten(-1, (-1, D)).transpose(1, 2)

    q, k, v = heads(attn.q_proj), heads(attn.k_proj), heads(attn.v_proj)
    outputs, kept, start = [], [], 0
    for size in sizes:
        sinks = [t for t in kept if t < num_sink_tokens]
        recent = [t for t in kept if t >= num_sink_tokens]
        recent = recent[len(recent) - min(len(recent), window - 1):]  # the last window - 1
        chunk = list(range(start, start + size))
        kept = sinks + recent + chunk
        places = torch.arange(len(kept))  # positions in the cache, not in the text
        keys = k[:, :, kept]
        queries = q[:, :, chunk]
        if attn.rope_base is not None:
            keys = mhsa.apply_rotary(keys, places, base=attn.rope_base)
            queries = mhsa.apply_rotary(queries, places[-size:], base=attn.rope_base)
        causal = torch.ones(size, len(kept), dtype=torch.bool).tril(len(kept) - size)
        if key_mask is not None:  # [b, 1, 1, n_kept]
            causal = causal & key_mask[:, kept][:, None, None, :]
        out = F.scaled_dot_product_attention(queries, keys, v[:, :, kept], attn_mask=causal,
                                             enable_gqa=True)
        outputs.append(F.linear(out.transpose(1, 2).flatten(2), attn.out_proj.weight,
                                attn.out_proj.bias))
        start += size
    return torch.cat(outputs, dim=1)


def decode(attn, x, sizes, num_sink_tokens, window, key_mask=None):
    cache = SinkKVCache(num_sink_tokens, window, rotary_angles=attn.rotary_angles)
    outputs, start = [], 0
    with torch.no_grad():
        for size in sizes:
            mask = None if key_mask is None else key_mask[:, None, None, :start + size]
            outputs.append(attn(x[:, start:start + size], attn_mask=mask, cache=cache)[0])
            start += size
    return torch.cat(outputs, dim=1), cache


@pytest.mark.parametrize("sizes", [[1] * 10, [4, 1, 5], [10]], ids=["steps", "chunks", "one"])
def test_a_window_longer_than_the_text_is_plain_causal_decoding(sizes):
    attn, x = make(), text(10)
    out, cache = decode(attn, x, sizes, num_sink_tokens=2, window=16)
    with torch.no_grad():
        expected = attn(x)[0]
    torch.testing.assert_close(out, expected, **DOCUMENTED_FLOAT32)
    assert len(cache) == 10 and cache.evicted == 0 and cache.key.shape == (2, KV_HEADS, 10, D)


@pytest.mark.parametrize("rope_base", [10000.0, None], ids=["rope", "no_rope"])
@pytest.mark.parametrize(("sinks", "window"), [(4, 4), (1, 3), (2, 1), (0, 5)])
@pytest.mark.parametrize("sizes", [[1] * 24, [6, 1, 1, 5, 1, 1, 1, 3, 2, 1, 1, 1]],
                         ids=["steps", "chunks"])
def test_equals_the_plain_torch_policy_with_positions_in_the_cache(rope_base, sinks, window,
                                                                   sizes):
    attn, x = make(2, rope_base=rope_base), text(24, seed=2)
    out, cache = decode(attn, x, sizes, sinks, window)
    with torch.no_grad():
        expected = streaming_reference(attn, x, sizes, sinks, window)
    torch.testing.assert_close(out, expected, **TOL32)
    assert len(cache) == 24
    assert cache.key.shape[2] == min(24, sinks + window - 1 + sizes[-1])
    assert cache.evicted == 24 - cache.key.shape[2]


@pytest.mark.parametrize("sizes", [[1] * 20, [6, 1, 1, 5, 1, 1, 1, 3, 1]],
                         ids=["steps", "chunks"])
def test_a_padding_mask_hides_the_same_text_positions_after_eviction(sizes):
    """A mask over text positions hides a sink and window keys by their text positions,
    not by the last columns (which are not the sinks')."""
    attn, x = make(7), text(20, seed=7)
    key_mask = torch.ones(2, 20, dtype=torch.bool)
    key_mask[0, 1] = False  # a sink of row 0
    key_mask[1, [3, 14, 15]] = False  # evicted early, then two the window keeps a while
    out, cache = decode(attn, x, sizes, 2, 4, key_mask=key_mask)
    with torch.no_grad():
        expected = streaming_reference(attn, x, sizes, 2, 4, key_mask=key_mask)
        unmasked, _ = decode(attn, x, sizes, 2, 4)
    torch.testing.assert_close(out, expected, **TOL32)
    assert cache.evicted > 0 and not torch.allclose(out, unmasked, atol=1e-3)
    assert cache.kept_positions().tolist() == [0, 1] + list(range(20 - cache.key.shape[2] + 2,
                                                                  20))


def test_the_sinks_matter():
    """Dropping the first tokens (a plain window) gives other outputs once they are evicted:
    the comparison above can tell the sinks' positions apart."""
    attn, x = make(3), text(16, seed=3)
    with_sinks, _ = decode(attn, x, [1] * 16, 2, 4)
    without, _ = decode(attn, x, [1] * 16, 0, 4)
    torch.testing.assert_close(with_sinks[:, :4], without[:, :4], **TOL32)  # none evicted yet
    assert not torch.allclose(with_sinks[:, 6:], without[:, 6:], atol=1e-3)


def test_without_sinks_it_is_the_windowed_kv_cache():
    """``num_sink_tokens=0`` decoded token by token is GroupedQueryAttention's window."""
    attn, x = make(4), text(14, seed=4)
    windowed = make(4, window=5)
    out, _ = decode(attn, x, [1] * 14, 0, 5)
    with torch.no_grad():
        expected, _ = decode_in_chunks(windowed, x, [1] * 14)
    torch.testing.assert_close(out, expected, **TOL32)


def test_bytes_are_bounded_by_sinks_plus_window():
    attn, x = make(5), text(40, seed=5, batch=3)
    cache = SinkKVCache(2, 6, rotary_angles=attn.rotary_angles)
    per_position = 3 * KV_HEADS * D * 4  # batch * g * d * float32 bytes
    bound = 2 * (2 + 6) * per_position + 2 * per_position  # keys and values, sinks' copies
    with torch.no_grad():
        attn(x[:, :20], cache=cache)  # a long first chunk grows the buffers once
        assert cache.nbytes == 2 * 20 * per_position + 2 * per_position
        for t in range(20, 40):
            attn(x[:, t:t + 1], cache=cache)
            assert cache.nbytes == bound, t
    plain = SinkKVCache(2, 6)  # no rotary positions: no copies of the sinks
    with torch.no_grad():
        make(5, rope_base=None)(x, cache=plain)
        make(5, rope_base=None)(x[:, :1], cache=plain)
    assert plain.nbytes == 2 * (2 + 6) * per_position


def test_a_causal_lm_decodes_with_it():
    """One cache per layer, positions from the model (text positions, len(cache)): a window
    longer than the text reproduces the full pass."""
    model = mhsa.CausalLM(31, EMBED, HEADS, 48, 2, num_kv_heads=KV_HEADS).eval()
    ids = torch.randint(0, 31, (2, 9), generator=torch.Generator().manual_seed(6))
    caches = [SinkKVCache(2, 32, rotary_angles=layer.attn.rotary_angles)
              for layer in model.layers]
    with torch.no_grad():
        steps = torch.cat([model(ids[:, t:t + 1], cache=caches) for t in range(9)], dim=1)
        torch.testing.assert_close(steps, model(ids), **DOCUMENTED_FLOAT32)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="`num_sink_tokens` must be an int >= 0, got -1"):
        SinkKVCache(-1, 4)
    with pytest.raises(ValueError, match="`window` must be a positive int, got 0"):
        SinkKVCache(4, 0)
    with pytest.raises(TypeError, match=r"`window` must be an int, got float 4\.0"):
        SinkKVCache(4, 4.0)
    with pytest.raises(TypeError, match="`rotary_angles` must be a module's rotary_angles"):
        SinkKVCache(4, 4, rotary_angles=10000.0)
    windowed = GroupedQueryAttention(EMBED, HEADS, KV_HEADS, window=3)
    with pytest.raises(ValueError, match=r"keeps its own window \(4\); use it with a module "
                                         "built without `window`, got window=3"):
        windowed(text(2), cache=SinkKVCache(1, 4))
    with pytest.raises(ValueError, match="the keys require grad; call the module under"):
        make()(text(2), cache=SinkKVCache(1, 4))
    cache = SinkKVCache(1, 4)
    cache.update(torch.zeros(2, 2, 3, D), torch.zeros(2, 2, 3, D))
    with pytest.raises(ValueError, match=r"do not continue the cache's \[2, 2, n_kept, 8\]"):
        cache.update(torch.zeros(1, 2, 1, D), torch.zeros(1, 2, 1, D))
    with pytest.raises(TypeError, match="new keys are torch.float64, the cache holds"):
        cache.update(torch.zeros(2, 2, 1, D, dtype=torch.float64),
                     torch.zeros(2, 2, 1, D, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"must be 4-D \[batch, num_kv_heads, n_new"):
        cache.update(torch.zeros(2, 1, D), torch.zeros(2, 1, D))


def test_len_reset_and_repr():
    cache = SinkKVCache(1, 2)
    keys = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(1, 2, 5, 3)
    kept, _ = cache.update(keys, keys)
    assert len(cache) == 5 and torch.equal(kept, keys)  # one chunk sees itself whole
    kept, _ = cache.update(keys[:, :, :1] + 100, keys[:, :, :1])
    # no rotary positions: the sink as written, the window's last position, the new one
    assert torch.equal(kept, torch.cat([keys[:, :, :1], keys[:, :, 4:], keys[:, :, :1] + 100],
                                       dim=2))
    assert (len(cache), cache.evicted) == (6, 3) and "evicted=3" in repr(cache)
    cache.reset()
    assert len(cache) == 0 and cache.key is None and cache.nbytes == 0
