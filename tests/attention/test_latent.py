"""MultiHeadLatentAttention: DeepSeek's latent attention, its cache and its absorbed form.

Reference: transformers' ``DeepseekV3Attention`` built from a tiny random ``DeepseekV3Config``
(offline), with its weights copied by ``MultiHeadLatentAttention.from_hf``; and the module's
own plain form for the absorbed one and for cached decoding. Masks: boolean, True = may attend.

Tolerances from ``tests/tolerances.py``: one output entry is the end of a chain of sums: the
query projections over embed_dim (32) and q_lora_rank (16), the latent's over embed_dim and
kv_lora_rank (12), the scores over at most kv_lora_rank + qk_rope_head_dim (18, absorbed),
the weighted values over at most 12 keys and the output projection over at most
heads * kv_lora_rank (48, absorbed), each summed in another order by the two paths.
"""

import copy
import math
import pickle

import pytest
import torch

import mhsa
from mhsa import GroupedQueryAttention, KVCache, MultiHeadLatentAttention
from mhsa.attention.latent import LatentCache

from references import decode_in_chunks, hf_deepseek_attention, hf_deepseek_forward
from tolerances import DOCUMENTED_FLOAT32, worst_case

EMBED, HEADS, Q_RANK, KV_RANK, NOPE, ROPE, V = 32, 4, 16, 12, 8, 6, 10
CHAIN = 2 * EMBED + Q_RANK + KV_RANK + (KV_RANK + ROPE) + 12 + HEADS * KV_RANK
TOL32 = worst_case(torch.float32, CHAIN)
TOL64 = worst_case(torch.float64, CHAIN)
Q_RANKS = [Q_RANK, None]
Q_IDS = ["q_lora", "no_q_lora"]


def make(q_lora_rank=Q_RANK, seed=0, dtype=torch.float64, **kw):
    """A seeded module with spread-out weights (no norm is the identity)."""
    torch.manual_seed(seed)
    attn = MultiHeadLatentAttention(EMBED, HEADS, q_lora_rank=q_lora_rank, kv_lora_rank=KV_RANK,
                                    qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE,
                                    v_head_dim=V, dtype=dtype, **kw).eval()
    with torch.no_grad():
        for name, p in attn.named_parameters():
            p.uniform_(0.5, 1.5) if "norm" in name else p.normal_(0.0, p.shape[1] ** -0.5)
    return attn


def inputs(b=2, n=9, seed=1, dtype=torch.float64):
    return torch.randn(b, n, EMBED, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def absorbed(attn):
    """A copy of ``attn`` in the absorbed form (copies never inherit it: pack again)."""
    twin = copy.deepcopy(attn)
    twin.pack_projections()
    assert twin.absorbed and not attn.absorbed
    return twin


# -- against transformers' DeepseekV3Attention ----------------------------------------------

@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("interleave", [True, False], ids=["interleaved", "half"])
@pytest.mark.parametrize("q_lora_rank", Q_RANKS, ids=Q_IDS)
def test_equals_transformers_deepseek_v3_attention(q_lora_rank, interleave, need_weights):
    theirs = hf_deepseek_attention(q_lora_rank=q_lora_rank, interleave=interleave)
    ours = MultiHeadLatentAttention.from_hf(theirs)
    x = inputs(dtype=torch.float32)
    positions = torch.arange(9).expand(2, 9)
    with torch.no_grad():
        expected, their_weights = hf_deepseek_forward(theirs, x, positions)
        out, weights = ours(x, need_weights=need_weights)
    torch.testing.assert_close(out, expected, **DOCUMENTED_FLOAT32)
    if need_weights:
        torch.testing.assert_close(weights, their_weights, **DOCUMENTED_FLOAT32)


@pytest.mark.parametrize("q_lora_rank", Q_RANKS, ids=Q_IDS)
def test_equals_transformers_with_padding_and_shifted_positions(q_lora_rank):
    """Right padding (True = may attend) and each row at its own positions ([b, n])."""
    theirs = hf_deepseek_attention(q_lora_rank=q_lora_rank, seed=3)
    ours = MultiHeadLatentAttention.from_hf(theirs)
    x = inputs(dtype=torch.float32, seed=4)
    positions = torch.stack([torch.arange(9), torch.arange(9) + 5])
    keep = mhsa.padding_mask([9, 6], 9)  # [b, 1, 1, n]
    with torch.no_grad():
        expected, their_weights = hf_deepseek_forward(theirs, x, positions,
                                                      keep & mhsa.causal_mask(9))
        for need_weights in (False, True):
            out, weights = ours(x, attn_mask=keep, positions=positions,
                                need_weights=need_weights)
            torch.testing.assert_close(out, expected, **DOCUMENTED_FLOAT32)
    torch.testing.assert_close(weights, their_weights, **DOCUMENTED_FLOAT32)
    assert torch.all(weights[1, :, :, 6:] == 0)  # padded keys get no weight


def test_interleaved_checkpoints_need_the_row_permutation():
    """Copying an interleaved module's weights as they are gives other outputs: the
    permutation in the conversion is what makes the equality above hold."""
    theirs = hf_deepseek_attention(interleave=True)
    x = inputs(dtype=torch.float32)
    with torch.no_grad():
        expected, _ = hf_deepseek_forward(theirs, x, torch.arange(9).expand(2, 9))
        theirs.config.rope_interleave = False  # copy the rows unpermuted
        unpermuted = MultiHeadLatentAttention.from_hf(theirs)(x)[0]
    assert not torch.allclose(unpermuted, expected, atol=1e-3)


# -- long context: DeepSeek-V3's YaRN --------------------------------------------------------

TRAINED, LONG = 16, 40  # original_max_position_embeddings, and a sequence past it
YARN = {  # DeepSeek-V3's released settings (factor 40 there), and one whose two mscales differ
    "deepseek_v3": {"mscale": 1.0, "mscale_all_dim": 1.0},
    "mscales_differ": {"mscale": 1.0, "mscale_all_dim": 0.5},
}


def yarn(mscales):
    return {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": TRAINED,
            "beta_fast": 32.0, "beta_slow": 1.0, **mscales}


def hf_deepseek_yarn(mscales, q_lora_rank=Q_RANK, seed=0):
    return hf_deepseek_attention(q_lora_rank=q_lora_rank, seed=seed,
                                 rope_parameters={**yarn(mscales), "rope_theta": 1000.0},
                                 max_position_embeddings=4 * TRAINED)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("q_lora_rank", Q_RANKS, ids=Q_IDS)
@pytest.mark.parametrize("mscales", list(YARN))
def test_yarn_equals_transformers_plain_cached_and_absorbed(mscales, q_lora_rank,
                                                             need_weights):
    """Past the training length (40 > 16): the full pass, decoding from the cache (a
    prompt, then one token at a time) and the absorbed form, all equal transformers'."""
    theirs = hf_deepseek_yarn(YARN[mscales], q_lora_rank)
    ours = MultiHeadLatentAttention.from_hf(theirs)
    assert ours.rope_scaling == yarn(YARN[mscales]) | {"truncate": True}
    assert ours.scale == pytest.approx(theirs.scaling, rel=1e-12)
    x = inputs(n=LONG, dtype=torch.float32, seed=9)
    with torch.no_grad():
        expected, their_weights = hf_deepseek_forward(theirs, x, torch.arange(LONG).expand(2, -1))
        sizes = [TRAINED + 4] + [1] * (LONG - TRAINED - 4)
        for decoder in (ours, absorbed(ours)):
            out, weights = decoder(x, need_weights=need_weights)
            torch.testing.assert_close(out, expected, **DOCUMENTED_FLOAT32)
            if need_weights:
                torch.testing.assert_close(weights, their_weights, **DOCUMENTED_FLOAT32)
            steps, _ = decode_in_chunks(decoder, x, sizes, need_weights=need_weights)
            torch.testing.assert_close(steps, expected, **DOCUMENTED_FLOAT32)


@pytest.mark.parametrize("mscales", list(YARN))
def test_yarn_equals_transformers_with_padding_and_positions_per_row(mscales):
    theirs = hf_deepseek_yarn(YARN[mscales], seed=3)
    ours = MultiHeadLatentAttention.from_hf(theirs)
    x = inputs(n=24, dtype=torch.float32, seed=4)
    positions = torch.stack([torch.arange(24), torch.arange(24) + 20])  # up to 43
    keep = mhsa.padding_mask([24, 19], 24)
    with torch.no_grad():
        expected, _ = hf_deepseek_forward(theirs, x, positions, keep & mhsa.causal_mask(24))
        for decoder in (ours, absorbed(ours)):
            out, _ = decoder(x, attn_mask=keep, positions=positions)
            torch.testing.assert_close(out, expected, **DOCUMENTED_FLOAT32)


def test_yarn_needs_its_angles_and_its_softmax_temperature():
    """Each of the two changes matters past the training length: without the scaled angles
    (and their attention factor), or without the temperature
    ``yarn_mscale(4, mscale_all_dim) ** 2`` on the softmax scale (plain or absorbed), the
    output is another one."""
    theirs = hf_deepseek_yarn(YARN["mscales_differ"])
    ours = MultiHeadLatentAttention.from_hf(theirs)
    x = inputs(n=LONG, dtype=torch.float32, seed=9)
    temperature = (0.1 * 0.5 * math.log(4.0) + 1) ** 2
    assert ours.scale == pytest.approx((NOPE + ROPE) ** -0.5 * temperature, rel=1e-12)
    unscaled = MultiHeadLatentAttention(EMBED, HEADS, q_lora_rank=Q_RANK, kv_lora_rank=KV_RANK,
                                        qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE,
                                        v_head_dim=V, rope_base=1000.0)
    unscaled.load_state_dict(ours.state_dict())
    unscaled.scale = ours.scale  # only the angles differ
    cooled = copy.deepcopy(ours)
    cooled.scale = (NOPE + ROPE) ** -0.5
    with torch.no_grad():
        expected, _ = hf_deepseek_forward(theirs, x, torch.arange(LONG).expand(2, -1))
        assert not torch.allclose(unscaled(x)[0], expected, atol=1e-3)
        assert not torch.allclose(cooled(x)[0], expected, atol=1e-3)
        cooled.pack_projections()
        assert not torch.allclose(cooled(x)[0], expected, atol=1e-3)


def test_yarn_rotary_keys_are_cached_with_the_scaled_angles():
    """The cache holds the rotary keys rotated by the scaled frequencies, times the
    attention factor (``yarn_mscale(4, 1) / yarn_mscale(4, 0.5)``), written out here."""
    scaling = yarn(YARN["mscales_differ"])
    attn, x = make(dtype=torch.float64, rope_base=1000.0, rope_scaling=scaling), inputs(n=30)
    cache = attn.new_cache()
    with torch.no_grad():
        attn(x, cache=cache)
        _, key = attn.kv_a_proj(x).split([KV_RANK, ROPE], dim=-1)
    inv_freq, factor = mhsa.core.rotary.rotary_frequencies(ROPE, base=1000.0, scaling=scaling)
    assert factor == pytest.approx((0.1 * math.log(4.0) + 1) / (0.05 * math.log(4.0) + 1))
    angles = torch.arange(30.0, dtype=torch.float64)[:, None] * inv_freq.double()
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    rotated = key * cos + torch.cat([-key[..., ROPE // 2:], key[..., :ROPE // 2]], -1) * sin
    torch.testing.assert_close(cache.rope_key, rotated * factor, atol=1e-6, rtol=1e-6)


def test_rope_scaling_errors_name_the_argument():
    kw = {"q_lora_rank": None, "kv_lora_rank": 4, "qk_nope_head_dim": 4, "qk_rope_head_dim": 2,
          "v_head_dim": 4}
    with pytest.raises(ValueError, match=r"`rope_base` must be > 1 with rope_type 'yarn', "
                                         r"got 1\.0"):
        MultiHeadLatentAttention(EMBED, HEADS, **kw, rope_base=1.0, rope_scaling=yarn({}))
    with pytest.raises(ValueError, match="needs the key 'original_max_position_embeddings'"):
        MultiHeadLatentAttention(EMBED, HEADS, **kw,
                                 rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(TypeError, match=r"`rope_scaling\['mscale_all_dim'\]` must be a number"):
        MultiHeadLatentAttention(EMBED, HEADS, **kw,
                                 rope_scaling=yarn({"mscale_all_dim": "1"}))
    with pytest.raises(TypeError, match="`rope_scaling` must be a dict"):
        MultiHeadLatentAttention(EMBED, HEADS, **kw, rope_scaling=4.0)


# -- the cache -------------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["plain", "absorbed"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("sizes", [[1] * 9, [4, 1, 1, 3], [9]],
                         ids=["one_by_one", "prefill_4", "all_at_once"])
@pytest.mark.parametrize("q_lora_rank", Q_RANKS, ids=Q_IDS)
def test_cached_decoding_equals_the_full_pass(q_lora_rank, sizes, need_weights, form):
    attn = make(q_lora_rank, dtype=torch.float32)
    x = inputs(dtype=torch.float32)
    with torch.no_grad():
        full, _ = attn(x, need_weights=need_weights)
        decoder = absorbed(attn) if form == "absorbed" else attn
        steps, cache = decode_in_chunks(decoder, x, sizes, need_weights=need_weights)
    torch.testing.assert_close(steps, full, **TOL32)
    assert isinstance(cache, LatentCache) and len(cache) == 9


@pytest.mark.parametrize("q_lora_rank", Q_RANKS, ids=Q_IDS)
def test_cached_decoding_is_exact_in_float64(q_lora_rank):
    attn = make(q_lora_rank)
    x = inputs(n=11)
    with torch.no_grad():
        steps, _ = decode_in_chunks(attn, x, [3, 1, 1, 5, 1])
        torch.testing.assert_close(steps, attn(x)[0], **TOL64)


def test_cache_holds_only_the_latent_and_the_rotary_key():
    attn, x = make(dtype=torch.float32), inputs(b=3, n=7, dtype=torch.float32)
    cache = attn.new_cache(capacity=7)
    with torch.no_grad():
        attn(x[:, :4], cache=cache)
        attn(x[:, 4:], cache=cache)
        latent, key = attn.kv_a_proj(x).split([KV_RANK, ROPE], dim=-1)
        latent = attn.kv_a_norm(latent)
        key = mhsa.apply_rotary(key, torch.arange(7), base=attn.rope_base)
    assert len(cache) == 7
    assert cache.latent.shape == (3, 7, KV_RANK) and cache.rope_key.shape == (3, 7, ROPE)
    torch.testing.assert_close(cache.latent, latent, **TOL32)
    torch.testing.assert_close(cache.rope_key, key, **TOL32)
    assert cache.nbytes == 3 * 7 * (KV_RANK + ROPE) * 4  # batch * positions * (c + dr) * 4


def test_cache_is_smaller_than_a_kv_cache_of_the_same_heads():
    """The same heads, queries and keys of width nope + rope, in a KVCache: 2 * h * d numbers
    per token against c + dr."""
    b, n = 2, 9
    attn = make(dtype=torch.float32)
    gqa = GroupedQueryAttention(EMBED, HEADS, HEADS, head_dim=NOPE + ROPE, rope_base=1e4)
    latent_cache, kv_cache = attn.new_cache(capacity=n), gqa.new_cache(capacity=n)
    with torch.no_grad():
        attn(inputs(b, n, dtype=torch.float32), cache=latent_cache)
        gqa(inputs(b, n, dtype=torch.float32), cache=kv_cache)
    assert isinstance(kv_cache, KVCache) and len(kv_cache) == len(latent_cache) == n
    assert kv_cache.nbytes == 2 * b * HEADS * n * (NOPE + ROPE) * 4
    assert latent_cache.nbytes == b * n * (KV_RANK + ROPE) * 4 < kv_cache.nbytes


def test_cache_grows_geometrically_and_resets():
    cache, buffers = LatentCache(), set()
    with torch.no_grad():
        for t in range(40):
            latent, _ = cache.update(torch.full((1, 1, 3), float(t)), torch.zeros(1, 1, 2))
            buffers.add(latent.untyped_storage().data_ptr())
    assert len(cache) == 40 and torch.equal(cache.latent[0, :, 0], torch.arange(40.0))
    assert len(buffers) <= 3  # 16, 34 then 70 positions: not one buffer per step
    assert cache.nbytes == 70 * (3 + 2) * 4
    twin = pickle.loads(pickle.dumps(cache))
    assert len(twin) == 40 and torch.equal(twin.latent, cache.latent)
    cache.reset()
    assert len(cache) == 0 and cache.latent is None and cache.nbytes == 0


def test_cache_under_autograd_gives_the_gradients_of_the_full_pass():
    attn, x = make(dtype=torch.float32), inputs(n=5, dtype=torch.float32)
    steps, _ = decode_in_chunks(attn, x, [2, 1, 2])
    full, _ = attn(x)
    grads = [torch.autograd.grad(y.square().sum(), attn.kv_a_proj.weight)[0] for y in (steps, full)]
    torch.testing.assert_close(*grads, **TOL32)


def test_cache_made_in_inference_mode_continues_outside_it():
    attn, x = make(dtype=torch.float32), inputs(n=4, dtype=torch.float32)
    cache = attn.new_cache()
    with torch.inference_mode():
        first, _ = attn(x[:, :2], cache=cache)
    with torch.no_grad():
        second, _ = attn(x[:, 2:], cache=cache)
        full, _ = attn(x)
    torch.testing.assert_close(torch.cat([first, second], dim=1), full, **TOL32)


def test_cached_decoding_with_padding_equals_the_full_pass():
    attn, x = make(dtype=torch.float32), inputs(dtype=torch.float32, seed=5)
    keep = mhsa.padding_mask([9, 5], 9)
    with torch.no_grad():
        full, _ = attn(x, attn_mask=keep)
        cache = attn.new_cache()
        steps = [attn(x[:, t:t + 1], cache=cache, attn_mask=keep[..., :t + 1])[0]
                 for t in range(9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL32)


# -- the absorbed form -----------------------------------------------------------------------

@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("q_lora_rank", Q_RANKS, ids=Q_IDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_absorbed_form_equals_the_plain_form(dtype, q_lora_rank, need_weights):
    attn = make(q_lora_rank, dtype=dtype)
    twin, x = absorbed(attn), inputs(dtype=dtype, seed=6)
    keep = mhsa.padding_mask([9, 7], 9)
    tol = TOL64 if dtype == torch.float64 else TOL32
    with torch.no_grad():
        for mask in (None, keep):
            plain, plain_weights = attn(x, attn_mask=mask, need_weights=need_weights)
            out, weights = twin(x, attn_mask=mask, need_weights=need_weights)
            torch.testing.assert_close(out, plain, **tol)
            if need_weights:
                torch.testing.assert_close(weights, plain_weights, **tol)
        steps, _ = decode_in_chunks(twin, x, [5, 1, 3], need_weights=need_weights)
    torch.testing.assert_close(steps, attn(x)[0], **tol)


def test_absorbed_form_is_multi_query_attention_over_the_latent():
    """Written out: q_h^T W_UK,h c + q^R_h k^R for the scores, W_O,h W_UV,h (weights c) out."""
    attn, x = make(), inputs(seed=7)
    h, n = HEADS, x.shape[1]
    with torch.no_grad():
        c, k_rope = attn.kv_a_proj(x).split([KV_RANK, ROPE], dim=-1)
        c = attn.kv_a_norm(c)  # [b, n, c]
        q = attn.q_b_proj(attn.q_a_norm(attn.q_a_proj(x))).view(2, n, h, NOPE + ROPE)
        q_nope, q_rope = q.split([NOPE, ROPE], dim=-1)  # [b, n, h, d]
        positions = torch.arange(n)
        q_rope = mhsa.apply_rotary(q_rope.transpose(1, 2), positions, base=attn.rope_base)
        k_rope = mhsa.apply_rotary(k_rope, positions, base=attn.rope_base)  # [b, n, dr]
        w_uk, w_uv = attn.kv_b_proj.weight.view(h, NOPE + V, KV_RANK).split([NOPE, V], dim=1)
        q_latent = torch.einsum("bnhd,hdc->bhnc", q_nope, w_uk)
        scores = (q_latent @ c.transpose(1, 2)[:, None] + q_rope @ k_rope.transpose(1, 2)[:, None])
        scores = (scores * attn.scale).masked_fill(~mhsa.causal_mask(n), float("-inf"))
        over_latent = scores.softmax(-1) @ c[:, None]  # [b, h, n, c]
        w_o = attn.out_proj.weight.view(EMBED, h, V)
        expected = torch.einsum("bhnc,ehv,hvc->bne", over_latent, w_o, w_uv)
        attn.pack_projections()
        torch.testing.assert_close(attn(x)[0], expected, **TOL64)


def test_pack_projections_switches_and_copies_drop_it():
    attn, x = make(), inputs()
    with torch.no_grad():
        plain, _ = attn(x)
        with mhsa.core._packing.packed_projections([attn]):  # what decoding loops use
            assert attn.absorbed
            inside, _ = attn(x)
    assert not attn.absorbed
    torch.testing.assert_close(inside, plain, **TOL64)
    attn.pack_projections()
    assert not copy.deepcopy(attn).absorbed and not pickle.loads(pickle.dumps(attn)).absorbed
    attn.pack_projections(False)
    assert not attn.absorbed


# -- the contract: weights, recording, positions ---------------------------------------------

def test_weights_rows_sum_to_one_and_follow_the_mask():
    attn, x = make(dtype=torch.float32), inputs(dtype=torch.float32)
    keep = mhsa.padding_mask([9, 4], 9)
    out, weights = attn(x, attn_mask=keep, need_weights=True)
    assert weights.shape == (2, HEADS, 9, 9)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, HEADS, 9), **TOL32)
    assert torch.equal(weights[1, 0] > 0, (keep[1, 0] & mhsa.causal_mask(9)))
    torch.testing.assert_close(out, attn(x, attn_mask=keep)[0], **TOL32)  # the fused path


def test_a_query_with_nothing_to_attend_to_gets_zero_not_nan():
    attn, x = make(dtype=torch.float32), inputs(dtype=torch.float32)
    keep = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    keep[1, ..., 0] = False  # row 1's first query sees only its own, masked, key
    for need_weights in (False, True):
        out, _ = attn(x, attn_mask=keep, need_weights=need_weights)
        assert not out.isnan().any() and torch.equal(out[1, 0], torch.zeros(EMBED))


def test_record_attention_records_it():
    attn, x = make(dtype=torch.float32), inputs(dtype=torch.float32)
    with torch.no_grad():
        _, expected = attn(x, need_weights=True)
        with mhsa.record_attention(attn) as record:
            out, weights = attn(x)
    assert weights is None and isinstance(attn, mhsa.Attention)
    torch.testing.assert_close(record[""], expected, **TOL32)
    torch.testing.assert_close(out, attn(x)[0], **TOL32)


def test_positions_per_row_equal_each_row_alone_and_angles_once():
    attn, x = make(), inputs(seed=8)
    rows = torch.stack([torch.arange(9), torch.arange(9) + 7])
    with torch.no_grad():
        out, _ = attn(x, positions=rows)
        for b in range(2):
            torch.testing.assert_close(out[b:b + 1], attn(x[b:b + 1], positions=rows[b])[0],
                                       **TOL64)
        torch.testing.assert_close(attn(x, positions=attn.rotary_angles(rows))[0], out, **TOL64)
        shifted, _ = attn(x, positions=torch.arange(100, 109))  # rotary: offsets only
        torch.testing.assert_close(shifted, attn(x)[0], atol=1e-10, rtol=1e-10)
    cos, sin = attn.rotary_angles(start=3, n=4)
    assert cos.shape == sin.shape == (4, ROPE) and cos.dtype == torch.float64


# -- errors ----------------------------------------------------------------------------------

def test_constructor_errors_name_the_argument():
    kw = {"q_lora_rank": None, "kv_lora_rank": 4, "qk_nope_head_dim": 4, "qk_rope_head_dim": 2,
          "v_head_dim": 4}
    with pytest.raises(ValueError, match=r"`qk_rope_head_dim` \(3\) must be even"):
        MultiHeadLatentAttention(EMBED, HEADS, **{**kw, "qk_rope_head_dim": 3})
    with pytest.raises(TypeError, match=r"`kv_lora_rank` must be an int, got float 4\.0"):
        MultiHeadLatentAttention(EMBED, HEADS, **{**kw, "kv_lora_rank": 4.0})
    with pytest.raises(ValueError, match="`q_lora_rank` must be a positive int, got 0"):
        MultiHeadLatentAttention(EMBED, HEADS, **{**kw, "q_lora_rank": 0})
    with pytest.raises(ValueError, match=r"`rope_base` must be > 0, got -1\.0"):
        MultiHeadLatentAttention(EMBED, HEADS, **kw, rope_base=-1.0)
    with pytest.raises(TypeError, match="`rope_base` must be a number, got NoneType"):
        MultiHeadLatentAttention(EMBED, HEADS, **kw, rope_base=None)
    with pytest.raises(TypeError, match="q_lora_rank"):
        MultiHeadLatentAttention(EMBED, HEADS, kv_lora_rank=4, qk_nope_head_dim=4,
                                 qk_rope_head_dim=2, v_head_dim=4)  # keyword-only, required


def test_forward_errors_name_the_argument():
    attn, x = make(dtype=torch.float32), inputs(b=1, n=4, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"`x` must be 3-D \[batch, n, embed_dim\]"):
        attn(x[0])
    with pytest.raises(TypeError, match="`x` must have the module's dtype torch.float32"):
        attn(x.double())
    with pytest.raises(TypeError, match="`attn_mask` must be torch.bool"):
        attn(x, attn_mask=torch.ones(4, 4))
    with pytest.raises(ValueError, match="`attn_mask` of shape .1, 1, 1, 5. does not broadcast"):
        attn(x, attn_mask=torch.ones(1, 1, 1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"`positions` must be \[n\] or \[batch, n\] with "
                                         r"batch = 1, n = 4"):
        attn(x, positions=torch.arange(5))
    with pytest.raises(TypeError, match="`positions` must be an integer tensor"):
        attn(x, positions=torch.arange(4.0))
    with pytest.raises(TypeError, match="`cache` must be the LatentCache .* got KVCache"):
        attn(x, cache=KVCache())


def test_a_cache_of_another_batch_is_refused():
    attn, cache = make(dtype=torch.float32), LatentCache()
    with torch.no_grad():
        attn(inputs(b=2, n=3, dtype=torch.float32), cache=cache)
        with pytest.raises(ValueError, match="do not continue the cache's .2, n_cached=3, 12."):
            attn(inputs(b=1, n=1, dtype=torch.float32), cache=cache)
    with pytest.raises(TypeError, match="`latent` must be a floating-point tensor"):
        LatentCache().update(torch.ones(1, 1, 3, dtype=torch.long), torch.ones(1, 1, 2))
    with pytest.raises(ValueError, match="must share batch and n_new"):
        LatentCache().update(torch.ones(1, 2, 3), torch.ones(1, 1, 2))
    with pytest.raises(ValueError, match="`capacity` must be a positive int, got 0"):
        attn.new_cache(capacity=0)
