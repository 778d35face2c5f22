"""GroupedQueryAttention: grouped- and multi-query heads, rotary positions, sliding windows, cache.

Reference: torch's ``F.scaled_dot_product_attention(..., enable_gqa=True)`` with the module's
weights copied into plain tensor code. Masks: boolean, True = may attend.

Tolerances from ``tests/tolerances.py``: one output entry is the end of a chain of sums: the
projection over embed_dim (32), the scores over head_dim (8), the weighted values over at most
12 keys and the output projection over 32, each summed in another order by the two paths.
"""

import pickle

import pytest
import torch

import mhsa
from mhsa import GroupedQueryAttention, KVCache, MultiHeadAttention

from references import decode_in_chunks, plain_attention
from tolerances import worst_case

CHAIN = 32 + 8 + 12 + 32  # see the module docstring
TOL32 = worst_case(torch.float32, CHAIN)
TOL64 = worst_case(torch.float64, CHAIN)
EMBED, HEADS = 32, 4
KV_HEADS = [4, 2, 1]  # multi-head, grouped-query, multi-query
KV_IDS = ["mha", "gqa", "mqa"]


def make(num_kv_heads, seed=0, dtype=torch.float32, **kw):
    torch.manual_seed(seed)
    mha = GroupedQueryAttention(EMBED, HEADS, num_kv_heads, bias=True, dtype=dtype, **kw).eval()
    with torch.no_grad():  # nn.Linear biases start small; make them count
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.bias.normal_()
    return mha


def reference(mha, x, *, attn_mask=None, is_causal=True, positions=None):
    """Plain torch (:func:`references.plain_attention`): linear, view/transpose, rotary
    positions, F.scaled_dot_product_attention(enable_gqa=True)."""
    return plain_attention(mha, x, attn_mask=attn_mask, is_causal=is_causal,
                           rope_base=mha.rope_base, positions=positions)


def test_projection_widths_and_repr():
    mha = GroupedQueryAttention(EMBED, 8, 2)
    assert (mha.q_proj.out_features, mha.k_proj.out_features, mha.v_proj.out_features) == (32, 8, 8)
    assert mha.out_proj.in_features == 32 and mha.head_dim == 4 and mha.q_proj.bias is None
    assert "num_kv_heads=2" in repr(mha)
    wide = GroupedQueryAttention(EMBED, 8, 4, head_dim=16)  # h * d = 128 != embed_dim
    assert (wide.q_proj.out_features, wide.k_proj.out_features, wide.out_proj.in_features) == (
        128, 64, 128)
    assert wide(torch.randn(1, 3, EMBED))[0].shape == (1, 3, EMBED)


def test_constructor_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"`num_heads` \(8\) must be divisible by `num_kv_heads` \(3\)"):
        GroupedQueryAttention(EMBED, 8, 3)
    with pytest.raises(ValueError, match=r"`embed_dim` \(30\) must be divisible by `num_heads` \(4\)"):
        GroupedQueryAttention(30, 4, 2)
    with pytest.raises(TypeError, match="num_kv_heads"):
        GroupedQueryAttention(EMBED, 4, 2.0)
    with pytest.raises(ValueError, match="`head_dim` .5. must be even with `rope_base`"):
        GroupedQueryAttention(EMBED, 4, 2, head_dim=5, rope_base=10000.0)
    with pytest.raises(ValueError, match="`window` must be a positive int, got 0"):
        GroupedQueryAttention(EMBED, 4, 2, window=0)
    with pytest.raises(TypeError, match=r"`window` must be an int, got float 2\.5"):
        GroupedQueryAttention(EMBED, 4, 2, window=2.5)
    with pytest.raises(TypeError, match="`rope_base` must be a number or None, got str"):
        GroupedQueryAttention(EMBED, 4, 2, rope_base="10000")
    with pytest.raises(ValueError, match=r"`rope_base` must be > 0, got 0\.0"):
        GroupedQueryAttention(EMBED, 4, 2, rope_base=0.0)


def test_forward_errors_name_the_argument():
    mha = make(2)
    with pytest.raises(ValueError, match=r"`x` must be 3-D \[batch, n, embed_dim\]"):
        mha(torch.randn(4, EMBED))
    with pytest.raises(TypeError, match="`x` must have the module's dtype torch.float32"):
        mha(torch.randn(1, 4, EMBED, dtype=torch.float64))
    with pytest.raises(TypeError, match="`attn_mask` must be torch.bool"):
        mha(torch.randn(1, 4, EMBED), attn_mask=torch.ones(4, 4))
    with pytest.raises(ValueError, match="`attn_mask` of shape .1, 1, 1, 5. does not broadcast"):
        mha(torch.randn(1, 4, EMBED), attn_mask=torch.ones(1, 1, 1, 5, dtype=torch.bool))


def test_is_an_attention_module_of_the_contract():
    mha = make(2, window=3)
    assert isinstance(mha, mhsa.Attention)
    cache = mha.new_cache(capacity=100)  # a window never needs more than 2 * window positions
    with torch.no_grad():
        mha(torch.randn(1, 2, EMBED), cache=cache)
    assert isinstance(cache, KVCache) and cache.nbytes == 2 * 1 * 2 * 6 * (EMBED // HEADS) * 4


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("masking", ["causal", "padding"])
@pytest.mark.parametrize("num_kv_heads", KV_HEADS, ids=KV_IDS)
def test_equals_torch_sdpa_with_enable_gqa(seed, need_weights, masking, num_kv_heads):
    mha = make(num_kv_heads, seed)
    x = torch.randn(2, 6, EMBED, generator=torch.Generator().manual_seed(seed))
    keep = mhsa.padding_mask([6, 3], 6) if masking == "padding" else None
    expected = reference(mha, x) if keep is None else reference(
        mha, x, attn_mask=keep & mhsa.causal_mask(6), is_causal=False)
    out, weights = mha(x, attn_mask=keep, need_weights=need_weights)  # always causal
    torch.testing.assert_close(out, expected, **TOL32)
    if need_weights:
        assert weights.shape == (2, HEADS, 6, 6)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, HEADS, 6), **TOL32)


def test_query_head_h_reads_key_value_head_h_over_r():
    """Heads 0, 1 share key/value head 0 and heads 2, 3 share head 1 (r = 2), as in torch."""
    mha = make(2)
    with torch.no_grad():  # every query head identical: weights then differ only by k/v head
        w_q = mha.q_proj.weight.view(HEADS, -1, EMBED)
        w_q[1:] = w_q[0]
        mha.q_proj.bias.view(HEADS, -1)[1:] = mha.q_proj.bias.view(HEADS, -1)[0]
    x = torch.randn(1, 5, EMBED, generator=torch.Generator().manual_seed(3))
    _, weights = mha(x, need_weights=True)
    assert torch.equal(weights[:, 0], weights[:, 1]) and torch.equal(weights[:, 2], weights[:, 3])
    assert not torch.allclose(weights[:, 0], weights[:, 2])


@pytest.mark.parametrize("num_kv_heads", KV_HEADS, ids=KV_IDS)
@pytest.mark.parametrize("rope_base", [None, 500.0], ids=["no_rope", "rope500"])
@pytest.mark.parametrize("window", [None, 3], ids=["full", "window3"])
@pytest.mark.parametrize("sizes", [[1] * 9, [4, 1, 1, 3], [2, 5, 2], [9]],
                         ids=["one_by_one", "prefill_4", "chunks", "all_at_once"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_cached_decoding_equals_the_full_causal_pass(num_kv_heads, rope_base, window, sizes,
                                                     need_weights):
    mha = make(num_kv_heads, rope_base=rope_base, window=window)
    x = torch.randn(2, 9, EMBED, generator=torch.Generator().manual_seed(1))
    full, _ = mha(x, need_weights=need_weights)
    steps, _ = decode_in_chunks(mha, x, sizes, need_weights=need_weights)
    torch.testing.assert_close(steps, full, **TOL32)


@pytest.mark.parametrize("num_kv_heads", KV_HEADS, ids=KV_IDS)
def test_cached_decoding_is_exact_in_float64_with_rope_and_window(num_kv_heads):
    mha = make(num_kv_heads, dtype=torch.float64, rope_base=10000.0, window=4)
    x = torch.randn(1, 11, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    steps, _ = decode_in_chunks(mha, x, [3, 1, 1, 5, 1])
    torch.testing.assert_close(steps, mha(x)[0], **TOL64)


@pytest.mark.parametrize("num_kv_heads", KV_HEADS, ids=KV_IDS)
def test_window_equals_the_sliding_window_mask(num_kv_heads):
    windowed = make(num_kv_heads, window=3)
    plain = make(num_kv_heads)  # same seed: same weights
    x = torch.randn(2, 8, EMBED, generator=torch.Generator().manual_seed(4))
    mask = mhsa.sliding_window_mask(8, window=3)
    expected = reference(plain, x, attn_mask=mask, is_causal=False)
    for need_weights in (False, True):
        out, _ = windowed(x, need_weights=need_weights)
        torch.testing.assert_close(out, expected, **TOL32)
    _, weights = windowed(x, need_weights=True)
    assert torch.equal(weights[0, 0] > 0, mask)  # exactly the window's keys get weight


def test_window_wider_than_the_text_is_plain_causal_attention():
    x = torch.randn(1, 6, EMBED, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(make(2, window=6)(x)[0], make(2)(x)[0], **TOL32)


@pytest.mark.parametrize("num_kv_heads", KV_HEADS, ids=KV_IDS)
def test_rope_equals_rotating_queries_and_keys_by_hand(num_kv_heads):
    mha = make(num_kv_heads, rope_base=10000.0)
    x = torch.randn(2, 7, EMBED, generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(mha(x)[0], reference(mha, x), **TOL32)
    positions = torch.arange(7) * 3 + 5
    torch.testing.assert_close(mha(x, positions=positions)[0],
                               reference(mha, x, positions=positions), **TOL32)


def test_rope_outputs_depend_on_offsets_only():
    """Shifting every position by 100 changes no score: rotary scores see offsets m - n."""
    mha = make(2, dtype=torch.float64, rope_base=10000.0)
    x = torch.randn(1, 6, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    _, near = mha(x, need_weights=True)
    _, far = mha(x, positions=torch.arange(100, 106), need_weights=True)
    torch.testing.assert_close(far, near, atol=1e-10, rtol=1e-10)  # angles of 100 rad: 1e-14
    _, unrotated = make(2, dtype=torch.float64)(x, need_weights=True)
    assert not torch.allclose(near, unrotated)


def test_rope_and_positions_errors():
    rope = make(2, rope_base=10000.0)
    x = torch.randn(1, 4, EMBED)
    with pytest.raises(TypeError):  # self-attention only: no key argument
        rope(x, torch.randn(1, 5, EMBED))
    with pytest.raises(ValueError, match="this module has no `rope_base`"):
        make(2)(x, positions=torch.arange(4))
    with pytest.raises(ValueError, match=r"`positions` must be \[n\] or \[batch, n\] with batch = 1, n = 4"):
        rope(x, positions=torch.arange(5))
    with pytest.raises(TypeError, match="`positions` must be an integer tensor"):
        rope(x, positions=torch.arange(4.0))


def test_positions_per_row_equal_each_row_alone():
    """Positions [b, n]: each row rotates with its own positions, as if it ran alone."""
    mha = make(2, rope_base=10000.0)
    x = torch.randn(2, 5, EMBED, generator=torch.Generator().manual_seed(11))
    rows = torch.stack([torch.arange(5), torch.arange(5) + 7])
    out, _ = mha(x, positions=rows)
    for b in range(2):
        torch.testing.assert_close(out[b:b + 1], mha(x[b:b + 1], positions=rows[b])[0], **TOL32)
    angles = mha.rotary_angles(rows)  # computed once, as a model does for all its layers
    torch.testing.assert_close(mha(x, positions=angles)[0], out, **TOL32)


def test_multi_head_case_equals_multihead_attention():
    """num_kv_heads = num_heads is MultiHeadAttention's causal self-attention, same weights."""
    gqa = make(HEADS)
    mha = MultiHeadAttention(EMBED, HEADS).eval()
    mha.load_state_dict(gqa.state_dict())
    x = torch.randn(2, 6, EMBED, generator=torch.Generator().manual_seed(12))
    torch.testing.assert_close(gqa(x)[0], mha(x, is_causal=True)[0], **TOL32)


# -- the cache: memory, preallocation, window ------------------------------------------------

@pytest.mark.parametrize("num_kv_heads", KV_HEADS, ids=KV_IDS)
def test_cache_stores_only_the_key_value_heads(num_kv_heads):
    """nbytes = 2 (k, v) * b * g * allocated positions * d * 4 (float32)."""
    mha, x, d = make(num_kv_heads), torch.randn(3, 5, EMBED), EMBED // HEADS
    _, cache = decode_in_chunks(mha, x, [2, 1, 2])  # autograd: grown by torch.cat, no spare
    assert cache.key.shape == cache.value.shape == (3, num_kv_heads, 5, d)
    assert cache.nbytes == 2 * 3 * num_kv_heads * 5 * d * 4
    with torch.no_grad():  # in place: the first update (2 tokens) allocated 16 positions
        _, cache = decode_in_chunks(mha, x, [2, 1, 2])
    assert cache.key.shape == (3, num_kv_heads, 5, d)
    assert cache.nbytes == 2 * 3 * num_kv_heads * 16 * d * 4


def test_cache_writes_in_place_and_grows_geometrically():
    cache, buffers = KVCache(), set()
    with torch.no_grad():
        for t in range(100):
            keys, _ = cache.update(torch.full((1, 2, 1, 4), float(t)), torch.zeros(1, 2, 1, 4))
            buffers.add(keys.untyped_storage().data_ptr())
    assert len(cache) == 100 and keys.shape == (1, 2, 100, 4)
    assert torch.equal(cache.key[0, 0, :, 0], torch.arange(100.0))
    assert len(buffers) <= 4  # 16, 34, 70 then 142 positions: log2(100 / 8) buffers, not 100
    assert cache.nbytes == 2 * 1 * 2 * 142 * 4 * 4  # the buffers: 142 positions, 100 filled


@pytest.mark.parametrize("chunk", [1, 3])
def test_window_cache_memory_is_bounded(chunk):
    mha = make(2, window=4)
    cache, most = mha.new_cache(), 0
    x = torch.randn(1, 60, EMBED, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        for t in range(0, 60, chunk):
            mha(x[:, t:t + chunk], cache=cache)
            assert cache.key.shape[2] <= 3 + chunk  # window - 1 kept + the new chunk
            most = max(most, cache._key.shape[2])  # the buffer's capacity
    assert len(cache) == 60
    assert cache.nbytes == 2 * 1 * 2 * 16 * (EMBED // HEADS) * 4  # the first 16 positions, reused
    assert most <= max(16, 2 * (3 + chunk))  # never grew with the text


def test_window_cache_with_padding_over_every_position():
    """With a window the mask still covers every position so far; the dropped columns go."""
    mha = make(2, window=3)
    x = torch.randn(2, 8, EMBED, generator=torch.Generator().manual_seed(9))
    keep = mhsa.padding_mask([8, 5], 8)  # [b, 1, 1, 8]
    full, _ = mha(x, attn_mask=keep)
    cache, steps = mha.new_cache(), []
    for t in range(8):
        steps.append(mha(x[:, t:t + 1], cache=cache, attn_mask=keep[..., :t + 1])[0])
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL32)


def test_cache_under_autograd_gives_the_gradients_of_the_full_pass():
    mha = make(2, rope_base=10000.0)
    x = torch.randn(1, 5, EMBED, generator=torch.Generator().manual_seed(10))
    steps, _ = decode_in_chunks(mha, x, [2, 1, 2])
    full, _ = mha(x)
    grad_steps = torch.autograd.grad(steps.square().sum(), mha.k_proj.weight)[0]
    grad_full = torch.autograd.grad(full.square().sum(), mha.k_proj.weight)[0]
    torch.testing.assert_close(grad_steps, grad_full, **TOL32)


def test_cache_made_in_inference_mode_continues_outside_it():
    mha = make(2)
    x = torch.randn(1, 4, EMBED)
    cache = mha.new_cache()
    with torch.inference_mode():
        first, _ = mha(x[:, :2], cache=cache)
    with torch.no_grad():
        second, _ = mha(x[:, 2:], cache=cache)
        full, _ = mha(x)
    torch.testing.assert_close(torch.cat([first, second], dim=1), full, **TOL32)


def test_cache_pickles_and_resets():
    mha = make(1)
    _, cache = decode_in_chunks(mha, torch.randn(1, 3, EMBED), [3])
    twin = pickle.loads(pickle.dumps(cache))
    assert len(twin) == 3 and torch.equal(twin.key, cache.key)
    cache.reset()
    assert len(cache) == 0 and cache.key is None and cache.nbytes == 0


class Tempered(GroupedQueryAttention):
    """A toy variant through the extension point: each head's queries over its temperature."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.temperature = torch.nn.Parameter(torch.ones(self.num_heads))

    def adjust_queries_and_keys(self, q, k):
        return q / self.temperature[:, None, None], k


@pytest.mark.parametrize("rope_base", [None, 500.0], ids=["no_rope", "rope500"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_adjust_queries_and_keys_is_the_variants_one_step(rope_base, need_weights):
    """A subclass that overrides only this step: queries over a per-head temperature equal
    the plain reference with each head's query rows scaled; cache and window still work."""
    torch.manual_seed(13)
    tempered = Tempered(EMBED, HEADS, 2, rope_base=rope_base, window=4, bias=True).eval()
    with torch.no_grad():
        tempered.temperature.copy_(torch.tensor([0.5, 1.0, 2.0, 3.0]))
    scaled = make(2, rope_base=rope_base, window=4)
    scaled.load_state_dict(tempered.state_dict(), strict=False)
    with torch.no_grad():
        rows = (1 / tempered.temperature).repeat_interleave(EMBED // HEADS)
        scaled.q_proj.weight.mul_(rows[:, None])
        scaled.q_proj.bias.mul_(rows)
    x = torch.randn(2, 7, EMBED, generator=torch.Generator().manual_seed(13))
    with torch.no_grad():
        out, _ = tempered(x, need_weights=need_weights)
        torch.testing.assert_close(out, scaled(x)[0], **TOL32)
        steps, _ = decode_in_chunks(tempered, x, [3, 1, 3], need_weights=need_weights)
    torch.testing.assert_close(steps, out, **TOL32)
    untempered = make(2, rope_base=rope_base, window=4)
    untempered.load_state_dict(tempered.state_dict(), strict=False)
    with torch.no_grad():  # the same weights without temperatures: another output
        assert not torch.allclose(out, untempered(x)[0], atol=1e-3)


# -- rope_scaling: scaled rotary positions, an option of the rotary positions -------------------

SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4},
    "llama3": {"rope_type": "llama3", "factor": 4.0, "original_max_position_embeddings": 4,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 4},
}


def test_rope_scaling_errors_name_the_argument():
    with pytest.raises(ValueError, match="`rope_scaling` scales rotary positions: pass a "
                                         "`rope_base` with it"):
        GroupedQueryAttention(EMBED, 4, 2, rope_scaling=SCALINGS["linear"])
    with pytest.raises(TypeError, match="`rope_scaling` must be a dict with a 'rope_type' or "
                                        "None, got float"):
        GroupedQueryAttention(EMBED, 4, 2, rope_base=100.0, rope_scaling=4.0)
    with pytest.raises(ValueError, match=r"`head_dim` \(2\) must be > 2"):
        GroupedQueryAttention(EMBED, 4, 2, head_dim=2, rope_base=100.0,
                              rope_scaling=SCALINGS["dynamic"])


def test_rope_scaling_is_checked_shown_and_default_means_none():
    mha = GroupedQueryAttention(EMBED, 4, 2, rope_base=100.0, rope_scaling=SCALINGS["yarn"])
    assert mha.rope_scaling["beta_fast"] == 32.0
    assert "rope_scaling={'rope_type': 'yarn'" in repr(mha)
    default = GroupedQueryAttention(EMBED, 4, 2, rope_base=100.0,
                                    rope_scaling={"rope_type": "default"})
    assert default.rope_scaling is None and "rope_scaling" not in repr(default)


@pytest.mark.parametrize("name", list(SCALINGS))
def test_rope_scaling_changes_the_output_as_the_scaled_angles_say(name):
    """The module with ``rope_scaling`` equals the plain reference rotated with the scaled
    angles (YaRN's attention factor in cos and sin), and differs from the unscaled module."""
    from mhsa.core.rotary import RotaryAngles, rotary_angles

    scaled = make(2, seed=3, rope_base=100.0, rope_scaling=SCALINGS[name])
    plain = make(2, seed=3, rope_base=100.0)
    x = torch.randn(2, 12, EMBED, generator=torch.Generator().manual_seed(3))
    angles = RotaryAngles(*rotary_angles(torch.arange(12), EMBED // HEADS, base=100.0,
                                         scaling=SCALINGS[name]))
    with torch.no_grad():
        out, weights = scaled(x, need_weights=True)
        torch.testing.assert_close(out, plain(x, positions=angles)[0], **TOL32)
        torch.testing.assert_close(scaled(x)[0], out, **TOL32)  # fused and explicit agree
        assert not torch.allclose(out, plain(x)[0], atol=1e-3)
    assert torch.allclose(weights.sum(-1), torch.ones(()))


@pytest.mark.parametrize("name", ["linear", "yarn", "llama3"])
def test_rope_scaling_cached_decoding_equals_the_full_pass(name):
    mha = make(2, seed=4, rope_base=100.0, rope_scaling=SCALINGS[name])
    x = torch.randn(2, 12, EMBED, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        steps, _ = decode_in_chunks(mha, x, [5, 1, 1, 5])
        torch.testing.assert_close(steps, mha(x)[0], **TOL32)


def test_dynamic_ntk_rotates_each_call_with_its_own_length():
    """A chunk's keys are rotated with the frequencies of ``len(cache) + n`` and kept so:
    cached decoding equals chunk-by-chunk rotation, and equals the full pass only up to the
    training length (4 here). Per-sequence positions ``[b, n]`` use the longest of the batch."""
    from mhsa.core.rotary import rotary_angles

    mha = make(2, seed=5, rope_base=100.0, rope_scaling=SCALINGS["dynamic"])
    x = torch.randn(2, 9, EMBED, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        short, _ = decode_in_chunks(mha, x[:, :4], [2, 1, 1])
        torch.testing.assert_close(short, mha(x[:, :4])[0], **TOL32)
        steps, _ = decode_in_chunks(mha, x, [4, 3, 2])
        assert not torch.allclose(steps[:, 4:], mha(x)[0][:, 4:], atol=1e-4)
        torch.testing.assert_close(steps[:, :7], decode_in_chunks(mha, x[:, :7], [4, 3])[0],
                                   atol=0.0, rtol=0.0)
        rows = torch.tensor([[0, 1, 2, 3, 4, 5], [2, 3, 4, 5, 6, 7]])  # longest: 8
        cos, sin = mha.rotary_angles(rows)
        expected = rotary_angles(torch.arange(8), 8, base=100.0, scaling=SCALINGS["dynamic"])
        torch.testing.assert_close(cos[0, 0], expected[0][:6], atol=0.0, rtol=0.0)
        torch.testing.assert_close(sin[1, 0], expected[1][2:], atol=0.0, rtol=0.0)


@pytest.mark.parametrize("name", list(SCALINGS))
def test_rope_scaling_kept_angles_equal_computed_ones(name):
    """Short CPU position lists come from the kept angles, keyed by the scaling too."""
    from mhsa.core.rotary import rotary_angles

    mha = GroupedQueryAttention(EMBED, 4, 2, rope_base=100.0, rope_scaling=SCALINGS[name])
    plain = GroupedQueryAttention(EMBED, 4, 2, rope_base=100.0)
    positions = torch.arange(3, 9)
    for _ in range(2):  # the second call reads the kept angles
        got = mha.rotary_angles(positions)
        expected = rotary_angles(positions, 8, base=100.0, scaling=SCALINGS[name])
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert not torch.equal(plain.rotary_angles(positions).cos, got.cos)  # not the unscaled ones


@pytest.mark.skipif(not torch._dynamo.is_dynamo_supported(), reason="no torch.compile here")
@pytest.mark.parametrize("name", ["yarn", "dynamic"])
def test_rope_scaling_compiles_without_graph_break(name):
    """Under torch.compile the scaled frequencies are traced inline; dynamic NTK's length is
    a tensor (``max(positions) + 1``), never read back. backend="eager": tracing only."""
    mha = make(2, seed=6, rope_base=100.0, rope_scaling=SCALINGS[name])
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: mha(x)[0], fullgraph=True, backend="eager")
    x = torch.randn(2, 9, EMBED, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), mha(x)[0], **TOL32)
