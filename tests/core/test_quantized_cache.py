"""QuantizedKVCache: int8 keys (per channel, in groups of tokens) and values (per token).

Each cached number comes back within half a quantization step of what was written (the bound
computed from the stored scales); nbytes equals its formula; attention over the cache stays
within the error those half steps can cause; a GroupedQueryAttention and a CausalLM decode
through it exactly as through a plain-torch reference that rounds the same tokens (float32
tolerances), and close to the unquantized cache (int8 tolerances, tests/tolerances.py).

transformers' own ``QuantizedCache`` needs optimum-quanto or hqq, which this environment does
not install, so it is not an oracle here; the reference below is plain torch.
Masks: boolean, True = may attend.
"""

import math

import pytest
import torch

import mhsa
from mhsa import CausalLM, GroupedQueryAttention, KVCache
from mhsa.core.quantized_cache import QuantizedKVCache, quantize_symmetric

from references import spread_weights_
from tolerances import DOCUMENTED_FLOAT32, int8_half_steps, worst_case

B, G, D = 2, 3, 8  # batch, key/value heads, head_dim
# float32 rounding around one code: x / scale (|x / scale| <= 127.5, so up to 64 eps of a step)
# and codes * scale (the same): the half-step bound grows by 128 eps of a step
ROUNDING = worst_case(torch.float32, 128)["atol"]
# a GroupedQueryAttention of width 16, head_dim 4, 8 tokens: projection over 16, scores over 4,
# weighted values over 8, output projection over 16
ATTENTION_TOL = worst_case(torch.float32, 16 + 4 + 8 + 16)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def keys_and_values(n, seed=0):
    """Keys ``[B, G, n, D]`` with one outlier channel (KIVI's observation), values without."""
    keys = randn(B, G, n, D, seed=seed)
    keys[..., 1] *= 20.0
    return keys, randn(B, G, n, D, seed=seed + 1)


def fill(cache, keys, values, sizes):
    """Write ``keys``/``values`` in chunks of ``sizes``; return the last update's result."""
    start = 0
    for size in sizes:
        returned = cache.update(keys[:, :, start:start + size], values[:, :, start:start + size])
        start += size
    assert start == keys.shape[2] and len(cache) == start
    return returned


class FakeQuantizedCache:
    """Plain-torch reference: keeps every key and value as written, and returns the tokens that
    filled whole groups before this update rounded to int8 (keys: one scale per channel and
    group of ``group_size`` tokens; values: one per token), the rest as written."""

    def __init__(self, group_size):
        self.group_size, self.keys, self.values = group_size, None, None

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[2]

    def update(self, key, value, window=None):
        quantized = len(self) // self.group_size * self.group_size
        self.keys = key if self.keys is None else torch.cat([self.keys, key], dim=2)
        self.values = value if self.values is None else torch.cat([self.values, value], dim=2)
        keys, values = self.keys.clone(), self.values.clone()
        for start in range(0, quantized, self.group_size):
            group = self.keys[:, :, start:start + self.group_size]
            scale = group.abs().amax(dim=2, keepdim=True) / 127
            keys[:, :, start:start + self.group_size] = (group / scale).round() * scale
        old = self.values[:, :, :quantized]
        scale = old.abs().amax(dim=3, keepdim=True) / 127
        values[:, :, :quantized] = (old / scale).round() * scale
        if window is not None:
            keep = window - 1 + key.shape[2]
            keys, values = keys[:, :, -keep:], values[:, :, -keep:]
        return keys, values


# -- the codes: half a step per element --------------------------------------------------------

def test_quantize_symmetric_stays_within_half_a_step():
    x = randn(4, 5, 6) * 3
    codes, scale = quantize_symmetric(x, dim=-1)
    assert codes.dtype == torch.int8 and scale.shape == (4, 5, 1) and scale.dtype == torch.float32
    assert torch.equal(scale, x.abs().amax(-1, keepdim=True) / 127)
    assert int(codes.abs().max()) == 127 and int(codes.min()) >= -127
    assert bool(((codes * scale - x).abs() <= scale * (0.5 + ROUNDING)).all())
    codes, scale = quantize_symmetric(torch.zeros(2, 3), dim=0)  # zeros: scale 0, codes 0
    assert not bool(codes.any()) and not bool(scale.any())


@pytest.mark.parametrize("sizes", [[13], [5, 1, 1, 3, 2, 1], [1] * 13])
def test_round_trip_is_within_half_a_step_of_the_stored_scales(sizes):
    """Keys per channel (the outlier channel gets its own scale), values per token."""
    keys, values = keys_and_values(14)
    cache = QuantizedKVCache(group_size=4)
    fill(cache, keys[:, :, :13], values[:, :, :13], sizes)
    n = cache.n_quantized
    assert n == 12  # three whole groups; one token waits in full precision
    key_scales, value_scales = cache.key_scales.clone(), cache.value_scales.clone()
    assert key_scales.shape == (B, G, 3, 1, D) and value_scales.shape == (B, G, 12, 1)
    assert bool((key_scales[..., 1] > 5 * key_scales[..., 0]).all())  # the outlier channel's own
    got_keys, got_values = cache.update(keys[:, :, 13:], values[:, :, 13:])
    key_error = (got_keys[:, :, :n] - keys[:, :, :n]).view(B, G, 3, 4, D).abs()
    value_error = (got_values[:, :, :n] - values[:, :, :n]).abs()
    assert bool((key_error <= key_scales * (0.5 + ROUNDING)).all())
    assert bool((value_error <= value_scales * (0.5 + ROUNDING)).all())
    assert bool(key_error.any()) and bool(value_error.any())  # rounded, not stored as given
    # the residual and the new token come back as written
    assert torch.equal(got_keys[:, :, n:], keys[:, :, n:])
    assert torch.equal(got_values[:, :, n:], values[:, :, n:])


# -- memory ----------------------------------------------------------------------------------

def expected_nbytes(allocated, group_size, residual, element_size=4):
    codes = 2 * B * G * allocated * D  # int8 keys and values
    scales = 4 * B * G * (allocated // group_size) * D + 4 * B * G * allocated  # float32
    return codes + scales + 2 * B * G * residual * D * element_size


@pytest.mark.parametrize(("capacity", "sizes", "allocated", "residual"), [
    (24, [10, 1, 1], 24, 0),  # the capacity asked for, allocated at the first group
    (10, [3, 3], 12, 2),  # rounded up to whole groups
    (None, [5], 16, 1),  # default growth: twice what is quantized, at least 16
    (None, [5, 12, 1], 16, 2),  # 16 quantized tokens fill the first buffers exactly
    (None, [5, 12, 3], 40, 0),  # 20 do not fit: new buffers for twice as many
    (None, [3], 0, 3),  # no whole group yet: only the residual
])
def test_nbytes_equals_the_formula(capacity, sizes, allocated, residual):
    keys, values = keys_and_values(sum(sizes))
    cache = QuantizedKVCache(group_size=4, capacity=capacity)
    assert cache.nbytes == 0
    fill(cache, keys, values, sizes)
    assert cache.nbytes == expected_nbytes(allocated, 4, residual)


def test_int8_cache_takes_about_a_quarter_of_float32():
    """Per token: 2 * D codes + D / 32 key scales + 1 value scale (4 bytes each) against
    2 * D float32 numbers: with D = 64, 140 bytes against 512 per head."""
    keys, values = randn(1, 1, 256, 64), randn(1, 1, 256, 64, seed=1)
    quantized, plain = QuantizedKVCache(capacity=256), KVCache(capacity=256)
    quantized.update(keys, values)
    plain.update(keys, values)
    assert quantized.nbytes == 256 * (2 * 64 + 4 * 64 // 32 + 4)
    assert plain.nbytes == 256 * 2 * 64 * 4


# -- attention over the cache -----------------------------------------------------------------

def test_attention_through_the_cache_stays_within_the_propagated_bound():
    """One query against 12 quantized keys and values. With key errors dk <= key_scale / 2 and
    value errors dv <= value_scale / 2 (per element, from the stored scales), each score moves
    by at most ds_j = sum_c |q_c| dk_jc / sqrt(D); the softmax then moves by at most
    2 max_j ds_j in L1, so an output entry moves by at most max_j dv_j + 2 max_j ds_j max |v|."""
    keys, values = keys_and_values(13)
    query = randn(B, G, 1, D, seed=5)
    cache = QuantizedKVCache(group_size=4)
    fill(cache, keys[:, :, :12], values[:, :, :12], [12])
    got_keys, got_values = cache.update(keys[:, :, 12:], values[:, :, 12:])
    out = mhsa.scaled_dot_product_attention(query, got_keys, got_values)[0]
    exact = mhsa.scaled_dot_product_attention(query, keys, values)[0]
    slack = 0.5 + ROUNDING
    key_bound = (cache.key_scales * slack).expand(B, G, 3, 4, D).reshape(B, G, 12, D)
    value_bound = cache.value_scales * slack  # [B, G, 12, 1]
    score_bound = (query.abs() @ key_bound.transpose(-2, -1)) / math.sqrt(D)  # [B, G, 1, 12]
    bound = value_bound.amax(dim=2, keepdim=True) + 2 * score_bound.amax(-1, keepdim=True) \
        * values.abs().amax(dim=(2, 3), keepdim=True)
    error = (out - exact).abs()
    assert bool((error <= bound + worst_case(torch.float32, D + 13)["atol"]).all())
    assert bool(error.any())


def test_a_window_bounds_the_memory_and_keeps_the_reference_values():
    """60 tokens one at a time through a window of 5: the buffers (16 positions) never grow,
    the kept groups move to their front, and what comes back equals the reference's."""
    keys, values = keys_and_values(60)
    cache, reference = QuantizedKVCache(group_size=4), FakeQuantizedCache(4)
    for t in range(60):
        got = cache.update(keys[:, :, t:t + 1], values[:, :, t:t + 1], window=5)
        expected = reference.update(keys[:, :, t:t + 1], values[:, :, t:t + 1], window=5)
        assert got[0].shape == (B, G, min(t + 1, 5), D)
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b, **worst_case(torch.float32, 1))
        assert cache.nbytes <= expected_nbytes(16, 4, residual=3)
    assert len(cache) == 60 and cache.n_quantized <= 8


def gqa(window=None):
    torch.manual_seed(0)
    return GroupedQueryAttention(16, 4, 2, rope_base=10000.0, window=window, bias=True).eval()


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("sizes", [[1] * 8, [3, 1, 4]])
def test_grouped_query_attention_decodes_through_it(window, sizes):
    """Equal to the plain-torch reference cache that rounds the same tokens (float32), and
    within two half steps of the output's size of the unquantized cache: the keys and values
    are off by at most half a step each, and one attention with unit-scale weights does not
    amplify that relative error (measured here: 0.35 to 0.37 half steps)."""
    module, x = gqa(window), randn(2, 8, 16, seed=3)
    start, outputs = 0, {"int8": [], "reference": [], "plain": []}
    caches = {"int8": QuantizedKVCache(group_size=2), "reference": FakeQuantizedCache(2),
              "plain": module.new_cache()}
    with torch.no_grad():
        for size in sizes:
            for name, cache in caches.items():
                outputs[name].append(module(x[:, start:start + size], cache=cache)[0])
            start += size
    out, reference, plain = (torch.cat(outputs[name], dim=1) for name in outputs)
    torch.testing.assert_close(out, reference, **ATTENTION_TOL)
    torch.testing.assert_close(out, plain, **int8_half_steps(2, float(plain.abs().max())))
    assert not torch.equal(out, plain)
    if window is not None:  # whole groups before the window were dropped (else 8 held)
        assert caches["int8"].n_quantized < window - 1 + sizes[-1] + 2


def test_causal_lm_decodes_through_a_list_of_them():
    """A 2-layer CausalLM with spread-out weights: logits equal the reference caches' (the
    documented float32 bound of cached decoding) and lie within 2 half steps per layer of the
    logits' size of the plain caches' (the keys and values of each layer are off by at most
    half a step; measured: 0.47 half steps in all)."""
    torch.manual_seed(0)
    model = spread_weights_(CausalLM(50, 32, 4, 48, 2, num_kv_heads=2).eval())
    ids = torch.randint(50, (2, 12), generator=torch.Generator().manual_seed(1))
    logits = {}
    for name, make in (("int8", lambda: QuantizedKVCache(group_size=4)),
                       ("reference", lambda: FakeQuantizedCache(4)), ("plain", KVCache)):
        cache = [make() for _ in model.layers]
        with torch.no_grad():
            steps = [model(ids[:, :5], cache=cache)]
            steps += [model(ids[:, t:t + 1], cache=cache) for t in range(5, 12)]
        logits[name] = torch.cat(steps, dim=1)
    torch.testing.assert_close(logits["int8"], logits["reference"], **DOCUMENTED_FLOAT32)
    size = float(logits["plain"].abs().max())
    torch.testing.assert_close(logits["int8"], logits["plain"], **int8_half_steps(2 * 2, size))
    assert not torch.equal(logits["int8"], logits["plain"])


# -- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"group_size": 0}, ValueError, "`group_size` must be a positive int, got 0"),
    ({"group_size": 4.0}, TypeError, "`group_size` must be an int, got float"),
    ({"capacity": True}, TypeError, "`capacity` must be an int, got bool"),
])
def test_constructor_rejects_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        QuantizedKVCache(**kwargs)


@pytest.mark.parametrize(("key", "value", "error", "match"), [
    (torch.zeros(2, 4, 1, 8), torch.zeros(3, 4, 1, 8), ValueError, "`value` must have the shape"),
    (torch.zeros(4, 1, 8), torch.zeros(4, 1, 8), ValueError, r"`key` must be 4-D .*got shape"),
    (torch.zeros(2, 4, 1, 8, dtype=torch.long), torch.zeros(2, 4, 1, 8), TypeError,
     "`key` must be a floating-point tensor, got torch.int64"),
    (torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8, dtype=torch.float64), TypeError,
     "share one dtype"),
])
def test_update_rejects_bad_input(key, value, error, match):
    with pytest.raises(error, match=match):
        QuantizedKVCache().update(key, value)


@pytest.mark.parametrize(("shape", "dtype", "error", "match"), [
    ((3, 4, 1, 8), torch.float32, ValueError, r"do not continue the cache's \[2, 4, n_cached=5, 8\]"),
    ((2, 4, 1, 6), torch.float32, ValueError, "batch, num_kv_heads and head_dim must match"),
    ((2, 4, 1, 8), torch.float64, TypeError, "new keys are torch.float64, the cache holds"),
])
def test_update_rejects_keys_that_do_not_continue_the_cache(shape, dtype, error, match):
    cache = QuantizedKVCache(group_size=2)
    cache.update(torch.ones(2, 4, 5, 8), torch.ones(2, 4, 5, 8))
    with pytest.raises(error, match=match):
        cache.update(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype))
    assert len(cache) == 5  # a refused update changes nothing
    cache.reset()
    assert len(cache) == 0 and cache.nbytes == 0 and cache.key_scales is None


def test_update_rejects_a_bad_window_before_writing():
    cache = QuantizedKVCache(group_size=2)
    with pytest.raises(ValueError, match="`window` must be a positive int, got 0"):
        cache.update(torch.ones(1, 1, 3, 4), torch.ones(1, 1, 3, 4), window=0)
    with pytest.raises(TypeError, match="`window` must be an int, got float"):
        cache.update(torch.ones(1, 1, 3, 4), torch.ones(1, 1, 3, 4), window=2.0)
    assert len(cache) == 0 and cache.nbytes == 0
