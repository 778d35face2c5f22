"""Rotary position embedding: equal to transformers' Llama, relative by construction.

Oracle: transformers' ``apply_rotary_pos_emb`` with the cos/sin of ``LlamaRotaryEmbedding``
(a test oracle only; mhsa does not import transformers). Tolerances: float32 1e-6 (atol and
rtol; both compute the same products in the same order up to the angle table), float64 1e-12.
A module with rotary positions under ``torch.autocast(bfloat16)``: AUTOCAST_TOL below;
exported or compiled against eager: 1e-5.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mhsa
from mhsa import GroupedQueryAttention, apply_rotary

from tolerances import worst_case

TOL32 = {"atol": 1e-6, "rtol": 1e-6}
TOL64 = {"atol": 1e-12, "rtol": 1e-12}
# Under torch.autocast("cpu", bfloat16) one attention output entry goes through about ten
# roundings to bfloat16 of values of size about 1 (the input and each weight matrix as a
# product reads them; q/k/v, the rotated q/k, the scores and weights on the explicit path,
# the attention output, the result), each off by at most eps/2 relative; the sums run in
# float32. Worst case 10 * eps / 2 = 5 * eps(bfloat16) = 0.039, atol and rtol (measured:
# below 0.005).
AUTOCAST_TOL = worst_case(torch.bfloat16, 5)


def transformers_rotary(q, k, positions, base):
    """transformers' Llama: cos/sin from its rotary module, then ``apply_rotary_pos_emb``."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    heads, d = q.shape[1], q.shape[-1]
    config = LlamaConfig(hidden_size=heads * d, num_attention_heads=heads, head_dim=d,
                         rope_parameters={"rope_type": "default", "rope_theta": base})
    cos, sin = LlamaRotaryEmbedding(config)(q, positions[None, :].expand(q.shape[0], -1))
    return apply_rotary_pos_emb(q, k, cos, sin)


@pytest.mark.parametrize("base", [10000.0, 500.0, 1e6])
@pytest.mark.parametrize("d", [2, 8, 32])
@pytest.mark.parametrize("positions", [torch.arange(6), torch.arange(6) + 100,
                                       torch.tensor([7, 0, 3, 3, 250, 1])])
def test_equals_transformers_apply_rotary_pos_emb(base, d, positions):
    torch.manual_seed(d)
    q, k = torch.randn(2, 4, 6, d), torch.randn(2, 4, 6, d)
    q_ref, k_ref = transformers_rotary(q, k, positions, base)
    torch.testing.assert_close(apply_rotary(q, positions, base=base), q_ref, **TOL32)
    torch.testing.assert_close(apply_rotary(k, positions, base=base), k_ref, **TOL32)


def test_half_split_convention_pairs_dimension_k_with_k_plus_half():
    """One pair turned by a quarter turn: only dimensions 0 and d/2 = 2 move (not 0 and 1)."""
    x = torch.tensor([[[1.0, 0.0, 0.0, 0.0]]])  # [1, n=1, d=4]: unit vector on dimension 0
    base = 1.0  # theta_k = 1 for every k: the angle is the position itself
    out = apply_rotary(x, torch.tensor([1]), base=base)
    expected = torch.tensor([[[torch.cos(torch.tensor(1.0)), 0.0, torch.sin(torch.tensor(1.0)),
                               0.0]]])
    torch.testing.assert_close(out, expected, **TOL32)


def rotated_score(q, k, m, n, base=10000.0):
    """Dot product of ``q`` at position ``m`` with ``k`` at position ``n`` (float64)."""
    q_m = apply_rotary(q[None, :], torch.tensor([m]), base=base)[0]
    k_n = apply_rotary(k[None, :], torch.tensor([n]), base=base)[0]
    return q_m @ k_n


@given(m=st.integers(0, 2000), n=st.integers(0, 2000), shift=st.integers(-500, 2000),
       seed=st.integers(0, 2**16))
def test_score_depends_only_on_the_offset_between_positions(m, n, shift, seed):
    """RoFormer's equation 16: <R_m q, R_n k> = <q, R_{n-m} k>, so moving both by ``shift``
    leaves the score unchanged."""
    shift = max(shift, -min(m, n))  # positions stay >= 0
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 16, generator=generator, dtype=torch.float64)
    same = rotated_score(q, k, m + shift, n + shift)
    torch.testing.assert_close(same, rotated_score(q, k, m, n), **TOL64)
    torch.testing.assert_close(same, rotated_score(q, k, 0, n - m) if n >= m
                               else rotated_score(q, k, m - n, 0), **TOL64)


def test_score_changes_with_the_offset():
    """The relative property is not trivial: another offset gives another score."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 16, dtype=torch.float64)
    scores = torch.stack([rotated_score(q, k, 10, n) for n in range(10)])
    assert (scores.diff().abs() > 1e-3).all()


def test_rotation_keeps_norms_and_position_zero_is_identity():
    torch.manual_seed(1)
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    out = apply_rotary(x, torch.tensor([0, 1, 2, 50, 4000]))
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), **TOL64)
    torch.testing.assert_close(out[:, 0], x[:, 0], atol=0.0, rtol=0.0)


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 2e-2),
                                        (torch.float64, 1e-6)])
def test_returns_a_new_tensor_of_the_input_dtype(dtype, tol):
    torch.manual_seed(2)
    x32 = torch.randn(2, 3, 7, 8)
    x = x32.to(dtype)
    before = x.clone()
    out = apply_rotary(x, torch.arange(7) + 3)
    assert out.dtype == dtype and out.shape == x.shape and out.data_ptr() != x.data_ptr()
    assert torch.equal(x, before)  # the input is left as it was
    reference = apply_rotary(x.to(torch.float32), torch.arange(7) + 3)
    torch.testing.assert_close(out.to(torch.float32), reference, atol=tol, rtol=tol)


@pytest.mark.parametrize("x, positions, base, error, match", [
    (torch.zeros(4, 8, dtype=torch.long), torch.arange(4), 10000.0, TypeError,
     "`x` must be a floating-point tensor, got torch.int64"),
    ([[0.0]], torch.arange(1), 10000.0, TypeError, "`x` must be a torch.Tensor, got list"),
    (torch.zeros(8), torch.arange(1), 10000.0, ValueError,
     r"`x` must be at least 2-D, got shape \(8,\)"),
    (torch.zeros(4, 7), torch.arange(4), 10000.0, ValueError,
     r"`x` must have an even last dimension d, got shape \(4, 7\)"),
    (torch.zeros(4, 8), torch.arange(4.0), 10000.0, TypeError,
     "`positions` must be an integer tensor .*got torch.float32"),
    (torch.zeros(4, 8), [0, 1, 2, 3], 10000.0, TypeError,
     r"`positions` must be an integer tensor \[n\], got list"),
    (torch.zeros(4, 8), torch.ones(4, dtype=torch.bool), 10000.0, TypeError,
     "`positions` must be an integer tensor .*got torch.bool"),
    (torch.zeros(4, 8), torch.arange(5), 10000.0, ValueError,
     r"`positions` must be \[n\] with n = x.shape\[-2\] = 4, got shape \(5,\)"),
    (torch.zeros(4, 8), torch.arange(4)[None], 10000.0, ValueError,
     r"`positions` must be \[n\] .* got shape \(1, 4\)"),
    (torch.zeros(4, 8), torch.arange(4), "10000", TypeError, "`base` must be a number, got str"),
    (torch.zeros(4, 8), torch.arange(4), True, TypeError, "`base` must be a number, got bool"),
    (torch.zeros(4, 8), torch.arange(4), 0.0, ValueError, "`base` must be > 0, got 0.0"),
    (torch.zeros(4, 8), torch.arange(4), -5, ValueError, "`base` must be > 0, got -5"),
])
def test_rejects_bad_input(x, positions, base, error, match):
    with pytest.raises(error, match=match):
        apply_rotary(x, positions, base=base)


def test_is_exported_at_the_top_level():
    assert mhsa.apply_rotary is apply_rotary


@pytest.mark.parametrize("positions", [torch.tensor([5]), torch.arange(16) + 3,
                                       torch.tensor([7, 0, 3], dtype=torch.int32),
                                       torch.arange(40)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_kept_angles_equal_freshly_computed_ones_exactly(positions, dtype):
    """Short CPU position lists reuse their angles between calls; longer ones do not."""
    from mhsa.core.rotary import rotary_angles

    torch.manual_seed(3)
    x = torch.randn(2, 3, len(positions), 8).to(dtype)
    cos, sin = rotary_angles(positions, 8, base=500.0, dtype=dtype)
    expected = x * cos + torch.cat([-x[..., 4:], x[..., :4]], dim=-1) * sin
    for _ in range(2):  # the second call reads the kept angles
        assert torch.equal(apply_rotary(x, positions, base=500.0), expected)


def test_kept_angles_follow_the_values_and_serve_autograd():
    """Changing ``positions`` in place changes the angles; angles first made in inference
    mode still work under autograd."""
    positions = torch.tensor([2])
    x = torch.randn(1, 2, 1, 8, dtype=torch.float64)
    with torch.inference_mode():
        at_two = apply_rotary(x, positions)
    positions += 3
    torch.testing.assert_close(apply_rotary(x, positions), apply_rotary(x, torch.tensor([5])),
                               atol=0.0, rtol=0.0)
    assert not torch.equal(apply_rotary(x, positions), at_two)
    leaf = x.clone().requires_grad_()
    apply_rotary(leaf, torch.tensor([2])).pow(2).sum().backward()
    torch.testing.assert_close(leaf.grad, 2 * x, **TOL64)  # a rotation keeps norms


@pytest.mark.skipif(not torch._dynamo.is_dynamo_supported(), reason="no torch.compile here")
def test_compiles_without_graph_break_or_warning():
    """Under torch.compile nothing is kept between calls: the angles are traced inline."""
    import warnings

    torch._dynamo.reset()
    compiled = torch.compile(lambda x, p: apply_rotary(x, p, base=100.0), fullgraph=True,
                             backend="eager")  # fullgraph: a graph break raises
    x = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = compiled(x, torch.arange(5) + 2)
    torch.testing.assert_close(got, apply_rotary(x, torch.arange(5) + 2, base=100.0), **TOL32)


# -- a module with rotary positions under torch.autocast, torch.export and torch.compile ----

def rope_attention(seed=0):
    torch.manual_seed(seed)
    return GroupedQueryAttention(32, 4, 2, rope_base=10000.0, bias=True).eval()


@pytest.mark.parametrize("seed", [0, 1])
def test_every_path_runs_under_autocast_bfloat16(seed):
    """Fused, explicit (need_weights), step by step with a KVCache, and recorded: each in
    bfloat16, within AUTOCAST_TOL of float32, and the fused and explicit paths agree."""
    mha = rope_attention(seed)
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected, expected_weights = mha(x, need_weights=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            fused, _ = mha(x)
            explicit, weights = mha(x, need_weights=True)
            cache = mha.new_cache()
            steps = torch.cat([mha(x[:, t:t + 1], cache=cache)[0] for t in range(7)], dim=1)
            with mhsa.record_attention(mha) as recorded:
                in_record, _ = mha(x)
    got = {"fused": fused, "explicit": explicit, "cache": steps, "record_attention": in_record}
    for path, out in got.items():
        assert out.dtype == torch.bfloat16, path
        torch.testing.assert_close(out.float(), expected, **AUTOCAST_TOL, msg=path)
    assert cache.key.dtype == cache.value.dtype == torch.bfloat16
    torch.testing.assert_close(weights.float(), expected_weights, **AUTOCAST_TOL)
    torch.testing.assert_close(recorded[""].float(), expected_weights, **AUTOCAST_TOL)
    torch.testing.assert_close(fused.float(), explicit.float(), **AUTOCAST_TOL)


def test_rotate_keeps_the_dtype_of_its_input():
    """bfloat16 queries and keys rotated with float32 angles (as under autocast) stay
    bfloat16: the sum is formed in float32 and rounded once."""
    from mhsa.core.rotary import rotary_angles, rotate

    x = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(5))
    cos, sin = rotary_angles(torch.arange(5), 8)  # float32
    out = rotate(x.to(torch.bfloat16), cos, sin)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, rotate(x.to(torch.bfloat16).float(), cos, sin).to(torch.bfloat16))


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_exports_with_a_dynamic_sequence_length(need_weights):
    """One exported program for every length: 5 and 40 lie on both sides of the 16
    positions whose angles eager mode keeps, and past no guard on the length."""
    mha = rope_attention()
    kwargs = {"need_weights": need_weights}
    x = torch.randn(2, 20, 32, generator=torch.Generator().manual_seed(6))
    n = torch.export.Dim("n")  # no upper bound
    program = torch.export.export(mha, (x,), kwargs, dynamic_shapes={
        "x": {1: n}, "need_weights": None}).module()
    for length in (5, 40):
        x = torch.randn(2, length, 32, generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            expected = mha(x, **kwargs)
        for got, want in zip(program(x, **kwargs), expected):
            if want is not None:
                torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch._dynamo.is_dynamo_supported(), reason="no torch.compile here")
def test_compiles_once_for_every_length_with_dynamic_shapes():
    """torch.compile(dynamic=True) traces one graph for lengths 5, 40 and 3: a recompilation
    raises. backend="eager" keeps it fast: the guards on the length come from tracing, which
    every backend shares (inductor needs about 30 s here)."""
    mha = rope_attention()
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: mha(x)[0], dynamic=True,
                             fullgraph=True, backend="eager")
    with torch._dynamo.config.patch(error_on_recompile=True), torch.no_grad():
        for length in (5, 40, 3):
            x = torch.randn(2, length, 32, generator=torch.Generator().manual_seed(length))
            torch.testing.assert_close(compiled(x), mha(x)[0],
                                       atol=1e-5, rtol=1e-5)


# -- scaled rotary positions: rotary_frequencies against transformers' ROPE_INIT_FUNCTIONS ----
#
# Both compute the same float32 formulas up to the order of a few operations (a power, a
# division, yarn's ramp written as one blend instead of two): a handful of roundings of
# relative size eps apart, SCALED_TOL (measured: at most 2 eps).
SCALED_TOL = worst_case(torch.float32, 8)
TRAINED = 64  # original_max_position_embeddings of the cases below

LLAMA3 = {"rope_type": "llama3", "original_max_position_embeddings": TRAINED,
          "low_freq_factor": 1.0, "high_freq_factor": 4.0}
YARN = {"rope_type": "yarn", "original_max_position_embeddings": TRAINED}
SCALINGS = {  # name: (our scaling without factor, transformers' rope_parameters w/o factor)
    "linear": ({"rope_type": "linear"}, {"rope_type": "linear"}),
    "dynamic": ({"rope_type": "dynamic", "original_max_position_embeddings": TRAINED},
                {"rope_type": "dynamic"}),  # transformers: max_position_embeddings = TRAINED
    "yarn": (YARN, YARN),
    "yarn betas 16/2, no truncation": ({**YARN, "beta_fast": 16, "beta_slow": 2,
                                        "truncate": False},) * 2,
    "yarn mscale 0.707/1 (DeepSeek)": ({**YARN, "mscale": 0.707, "mscale_all_dim": 1.0},) * 2,
    "yarn attention_factor 1.5": ({**YARN, "attention_factor": 1.5},) * 2,
    "llama3": (LLAMA3, LLAMA3),
    "llama3 2/8": ({**LLAMA3, "low_freq_factor": 2.0, "high_freq_factor": 8.0},) * 2,
}


def hf_rope_config(head_dim, base, factor, rope_parameters):
    """A LlamaConfig carrying ``rope_parameters``; max_position_embeddings = TRAINED for
    dynamic NTK (what it reads as the training length), factor * TRAINED otherwise."""
    from transformers import LlamaConfig

    longest = TRAINED if rope_parameters["rope_type"] == "dynamic" else int(factor * TRAINED)
    return LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                       max_position_embeddings=longest,
                       rope_parameters={**rope_parameters, "factor": factor,
                                        "rope_theta": base})


@pytest.mark.parametrize("name", list(SCALINGS))
@pytest.mark.parametrize("head_dim, base", [(8, 10000.0), (64, 10000.0), (128, 500000.0)])
@pytest.mark.parametrize("factor", [1.0, 8.0])
@pytest.mark.parametrize("seq_len", [None, 200])
def test_frequencies_equal_transformers_rope_init_functions(name, head_dim, base, factor,
                                                            seq_len):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from mhsa.core.rotary import rotary_frequencies

    ours, theirs = SCALINGS[name]
    config = hf_rope_config(head_dim, base, factor, theirs)
    expected, expected_factor = ROPE_INIT_FUNCTIONS[theirs["rope_type"]](config, "cpu",
                                                                         seq_len=seq_len)
    got, got_factor = rotary_frequencies(head_dim, base=base, scaling={**ours, "factor": factor},
                                         seq_len=seq_len)
    assert got.shape == (head_dim // 2,) and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, **SCALED_TOL)
    assert got_factor == pytest.approx(expected_factor, rel=1e-12)


@pytest.mark.parametrize("name", ["linear", "dynamic", "yarn", "llama3"])
def test_scaling_changes_the_low_frequencies_and_keeps_the_fastest(name):
    """The test above can fail: with factor 8 (dynamic: at 4x the training length) the
    slowest pair turns slower than unscaled, while llama3 and yarn keep the fastest pair."""
    from mhsa.core.rotary import rotary_frequencies

    plain, _ = rotary_frequencies(64, base=10000.0)
    scaled, _ = rotary_frequencies(64, base=10000.0, scaling={**SCALINGS[name][0], "factor": 8.0},
                                   seq_len=4 * TRAINED)
    assert scaled[-1] < plain[-1] / 2
    if name in ("yarn", "llama3", "dynamic"):
        assert scaled[0] == plain[0]
    else:  # position interpolation divides every frequency
        torch.testing.assert_close(scaled, plain / 8, **SCALED_TOL)


def test_dynamic_ntk_is_unscaled_up_to_the_training_length():
    from mhsa.core.rotary import rotary_frequencies

    dynamic = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64}
    plain, _ = rotary_frequencies(32, base=500.0)
    for seq_len in (None, 1, 64):
        assert torch.equal(rotary_frequencies(32, base=500.0, scaling=dynamic,
                                              seq_len=seq_len)[0], plain)
    assert not torch.allclose(rotary_frequencies(32, base=500.0, scaling=dynamic,
                                                 seq_len=65)[0], plain)


def test_linear_scaling_is_position_interpolation():
    """Chen et al. 2023: the angles of position m under factor s are those of m / s."""
    from mhsa.core.rotary import rotary_angles

    positions = torch.arange(0, 64, 4)
    cos, sin = rotary_angles(positions, 16, base=100.0, dtype=torch.float64,
                             scaling={"rope_type": "linear", "factor": 4.0})
    angles = (positions.double() / 4.0)[:, None] * 100.0 ** (-torch.arange(0, 16, 2).double() / 16)
    angles = torch.cat([angles, angles], dim=-1)
    torch.testing.assert_close(cos, angles.cos(), **TOL64)
    torch.testing.assert_close(sin, angles.sin(), **TOL64)


@pytest.mark.parametrize("name", list(SCALINGS))
@pytest.mark.parametrize("positions", [torch.arange(100), torch.arange(8) + 20,
                                       torch.tensor([[3, 150, 7], [0, 1, 2]])],
                         ids=["0..99", "20..27", "batch"])
def test_angles_equal_transformers_llama_rotary_embedding(name, positions):
    """cos and sin, YaRN's attention factor included, as transformers' rotary module computes
    them for a fresh model; dynamic NTK reads the longest position of the call (over the
    batch) in both."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from mhsa.core.rotary import rotary_angles

    ours, theirs = SCALINGS[name]
    config = hf_rope_config(16, 10000.0, 4.0, theirs)
    batch = positions if positions.dim() == 2 else positions[None]
    x = torch.zeros(1, dtype=torch.float32)
    expected = LlamaRotaryEmbedding(config)(x, batch)
    got = rotary_angles(positions, 16, base=10000.0, scaling={**ours, "factor": 4.0})
    for mine, want in zip(got, expected):
        torch.testing.assert_close(mine, want if positions.dim() == 2 else want[0], **SCALED_TOL)


def test_yarn_attention_factor_scales_the_scores_by_its_square():
    from mhsa.core.rotary import rotary_angles, rotate

    yarn = {**YARN, "factor": 16.0}
    plain = {**yarn, "attention_factor": 1.0}
    factor = 0.1 * math.log(16.0) + 1.0  # YaRN's sqrt(1/t)
    positions = torch.arange(6)
    q, k = torch.randn(2, 1, 6, 16, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(7))
    scaled = [rotate(x, *rotary_angles(positions, 16, dtype=torch.float64, scaling=yarn))
              for x in (q, k)]
    unscaled = [rotate(x, *rotary_angles(positions, 16, dtype=torch.float64, scaling=plain))
                for x in (q, k)]
    torch.testing.assert_close(scaled[0] @ scaled[1].mT,
                               factor**2 * (unscaled[0] @ unscaled[1].mT), **TOL64)


@pytest.mark.parametrize("scaling, error, match", [
    ([("rope_type", "linear")], TypeError, "`rope_scaling` must be a dict"),
    ({"factor": 2.0}, ValueError, r"`rope_scaling\['rope_type'\]` must be one of .*got None"),
    ({"rope_type": "longrope", "factor": 2.0}, ValueError,
     r"must be one of \['default', 'dynamic', 'linear', 'llama3', 'yarn'\], got 'longrope'"),
    ({"rope_type": "linear"}, ValueError, "rope_type 'linear' needs the key 'factor'"),
    ({"rope_type": "yarn", "factor": 2.0}, ValueError,
     "needs the key 'original_max_position_embeddings'"),
    ({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}, ValueError,
     r"not \['rope_theta'\] \(the base is `rope_base`\)"),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "beta_fast": 3}, ValueError,
     r"rope_type 'llama3' reads .*not \['beta_fast'\]"),
    ({"rope_type": "linear", "factor": 0.0}, ValueError,
     r"`rope_scaling\['factor'\]` must be > 0, got 0.0"),
    ({"rope_type": "linear", "factor": "2"}, TypeError,
     r"`rope_scaling\['factor'\]` must be a number, got str '2'"),
    ({"rope_type": "linear", "factor": True}, TypeError, "must be a number, got bool"),
    ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64.0},
     TypeError, r"`rope_scaling\['original_max_position_embeddings'\]` must be an int"),
    ({**YARN, "factor": 2.0, "truncate": 1}, TypeError,
     r"`rope_scaling\['truncate'\]` must be a bool, got int"),
    ({**YARN, "factor": 2.0, "beta_slow": -1}, ValueError, r"'beta_slow'\]` must be > 0"),
    ({**LLAMA3, "factor": 8.0, "low_freq_factor": 4.0}, ValueError,
     r"`rope_scaling\['high_freq_factor'\]` \(4.0\) must be > `low_freq_factor` \(4.0\)"),
])
def test_check_rope_scaling_names_what_is_wrong(scaling, error, match):
    from mhsa.core.rotary import check_rope_scaling

    with pytest.raises(error, match=match):
        check_rope_scaling(scaling)


def test_check_rope_scaling_completes_and_copies():
    from mhsa.core.rotary import check_rope_scaling

    given = {**YARN, "factor": 4, "attention_factor": None}  # None: absent, as transformers
    checked = check_rope_scaling(given)
    assert checked == {**YARN, "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                       "truncate": True}
    assert checked is not given and "beta_fast" not in given
    assert check_rope_scaling(None) is None and check_rope_scaling({"rope_type": "default"}) is None


@pytest.mark.parametrize("kwargs, error, match", [
    ({"head_dim": 7}, ValueError, r"`head_dim` \(7\) must be even"),
    ({"head_dim": 8.0}, TypeError, "`head_dim` must be an int"),
    ({"head_dim": 8, "base": "1e4"}, TypeError, "`base` must be a number, got str"),
    ({"head_dim": 8, "base": -1.0}, ValueError, r"`base` must be > 0, got -1.0"),
    ({"head_dim": 8, "base": 1.0, "scaling": {**YARN, "factor": 2.0}}, ValueError,
     r"`base` must be > 1, got 1.0"),
    ({"head_dim": 8, "seq_len": 0}, ValueError, "`seq_len` must be a positive int, got 0"),
    ({"head_dim": 2, "scaling": {"rope_type": "dynamic", "factor": 2.0,
                                 "original_max_position_embeddings": 8}},
     ValueError, r"`head_dim` \(2\) must be > 2"),
])
def test_rotary_frequencies_rejects_bad_input(kwargs, error, match):
    from mhsa.core.rotary import rotary_frequencies

    with pytest.raises(error, match=match):
        rotary_frequencies(**kwargs)
