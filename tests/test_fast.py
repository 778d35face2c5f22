"""The fast path: which torch kernel runs, its peak memory, torch.compile, the measuring helpers.

Speed is checked by benchmarks/bench_fast.py, never here.
"""

import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import mhsa
from mhsa import KVCache, MultiHeadAttention
from mhsa.course.measure import (
    attention_flops,
    interleaved_times,
    matmul_rate,
    peak_memory,
    peak_memory_supported,
    time_call,
)

from tolerances import worst_case

# float32. An output entry of MultiHeadAttention(16, 4) ends a chain of sums: projection over
# 16, scores over head_dim 4, weighted values over at most 7 keys, output projection over 16.
TOL32 = worst_case(torch.float32, 16 + 4 + 7 + 16)


@pytest.fixture
def sdpa_calls(monkeypatch):
    """Record the keyword arguments of every torch SDPA call made by MultiHeadAttention."""
    calls, sdpa = [], F.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):  # keeps the arguments that change something
        calls.append({"n_q": q.shape[-2], "n_k": k.shape[-2],
                      **{name: a for name, a in kwargs.items() if a is not None and a is not False}})
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(mhsa.core.functional.F, "scaled_dot_product_attention", spy)
    return calls


def make_mha(seed=0):
    torch.manual_seed(seed)
    return MultiHeadAttention(16, 4).eval()


@pytest.mark.parametrize("seed", [0, 1])
def test_square_causal_runs_torchs_is_causal_without_a_mask_and_matches_explicit(sdpa_calls, seed):
    mha, x = make_mha(seed), torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(seed))
    fused, _ = mha(x, is_causal=True)
    assert sdpa_calls == [{"n_q": 6, "n_k": 6, "dropout_p": 0.0, "is_causal": True}]
    torch.testing.assert_close(fused, mha(x, is_causal=True, need_weights=True)[0], **TOL32)


def test_one_cached_query_runs_without_any_mask(sdpa_calls):
    mha, x, cache = make_mha(), torch.randn(1, 5, 16), KVCache()
    mha(x[:, :4], cache=cache)
    mha(x[:, 4:], cache=cache)
    assert sdpa_calls[1] == {"n_q": 1, "n_k": 5, "dropout_p": 0.0}


@pytest.mark.parametrize("n_q, n_k", [(3, 7), (7, 3)], ids=["fewer_queries", "more_queries"])
def test_rectangular_causal_is_aligned_bottom_right_with_an_explicit_mask(sdpa_calls, n_q, n_k):
    mha, g = make_mha(), torch.Generator().manual_seed(0)
    query, memory = torch.randn(2, n_q, 16, generator=g), torch.randn(2, n_k, 16, generator=g)
    fused, _ = mha(query, memory, is_causal=True)
    explicit, _ = mha(query, memory, is_causal=True, need_weights=True)
    (call,) = sdpa_calls  # torch's is_causal would align top-left: a mask is passed instead
    assert "is_causal" not in call and call["attn_mask"].shape == (n_q, n_k)
    torch.testing.assert_close(fused, explicit, **TOL32)
    if n_q > n_k:  # the first n_q - n_k queries see no key: output is out_proj's bias
        bias = mha.out_proj.bias.expand(2, n_q - n_k, 16)
        torch.testing.assert_close(fused[:, : n_q - n_k], bias, atol=0, rtol=0)  # 0 @ W + b = b


PEAK_SCRIPT = textwrap.dedent("""
    import torch
    from mhsa import MultiHeadAttention
    from mhsa.course.measure import peak_memory
    torch.manual_seed(0)
    mha = MultiHeadAttention(256, 8).eval()  # head_dim 32
    x = torch.randn(1, 16_384, 256)
    with torch.inference_mode():
        mha(x[:, :64]), mha(x[:, :64], is_causal=True)  # load the kernels first
        for is_causal in (False, True):
            print(peak_memory(lambda: mha(x, is_causal=is_causal)))
""")


@pytest.mark.skipif(not peak_memory_supported(), reason="peak RSS can only be reset on Linux")
def test_fused_forward_at_16k_tokens_adds_under_half_a_gib():
    # The scores alone would be 8 heads * 16384**2 * 4 bytes = 8 GiB. A fresh process, so
    # that nothing else this test session did is counted.
    result = subprocess.run([sys.executable, "-c", PEAK_SCRIPT], capture_output=True, text=True,
                            timeout=300, check=True)
    plain, causal = (int(line) for line in result.stdout.split())
    assert plain < 2**29, f"no mask: {plain / 2**30:.2f} GiB"
    assert causal < 2**29, f"causal: {causal / 2**30:.2f} GiB"


def compile_unavailable() -> str:
    """Why torch.compile cannot run here, or '' when it can."""
    if not torch._dynamo.is_dynamo_supported():
        return f"torch.compile does not support Python {sys.version.split()[0]} here"
    if not any(shutil.which(cc) for cc in ("gcc", "cc", "clang")):
        return "torch.compile's CPU backend needs a C compiler (gcc, cc or clang); none found"
    return ""


@pytest.mark.skipif(bool(compile_unavailable()), reason=compile_unavailable() or "available")
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_torch_compile_fullgraph_gives_the_same_output():
    # fullgraph=True raises at the first graph break, so compiling at all shows there is none.
    torch._dynamo.reset()
    mha = make_mha(3)
    g = torch.Generator().manual_seed(3)
    x, keep = torch.randn(2, 5, 16, generator=g), mhsa.padding_mask(torch.tensor([5, 3]), 5)
    compiled = torch.compile(mha, fullgraph=True)
    with torch.no_grad():
        for kwargs in ({}, {"is_causal": True}, {"attn_mask": keep, "is_causal": True}):
            torch.testing.assert_close(compiled(x, **kwargs)[0], mha(x, **kwargs)[0], **TOL32)


@pytest.mark.parametrize("batch, n, e, h", [(1, 8, 16, 4), (3, 5, 12, 3), (2, 33, 32, 8)])
def test_attention_flops_equals_what_torchs_flop_counter_counts(batch, n, e, h):
    # The explicit path runs every product as a matmul that FlopCounterMode counts (2 per
    # multiply-add); the fused kernel on CPU is not counted by it.
    torch.manual_seed(0)
    attention = MultiHeadAttention(e, h).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        attention(torch.randn(batch, n, e), need_weights=True)
    assert attention_flops(n, e, batch=batch) == counter.get_total_flops()


def test_attention_flops_refuses_a_bad_size():
    with pytest.raises(ValueError, match="`n_tokens` must be a positive int, got 0"):
        attention_flops(0, 16)


class FakeClock:
    """Stands in for the ``time`` module: each call of ``fn`` takes the next of ``durations``."""

    def __init__(self, durations):
        self.now, self.durations = 0.0, iter(durations)

    def perf_counter(self):
        return self.now

    def advance(self):
        self.now += next(self.durations)


def test_time_call_returns_the_fastest_of_its_repeats(monkeypatch):
    clock = FakeClock([100.0, 100.0, 5.0, 2.0, 3.0])  # two warmups, then three timed calls
    monkeypatch.setattr(mhsa.course.measure, "time", clock)
    # neither the first (5), nor the last (3), nor a warmup (100), nor the mean: the minimum
    assert time_call(clock.advance, repeats=3, warmup=2) == 2.0
    with pytest.raises(StopIteration):  # every duration used: exactly warmup + repeats calls
        clock.advance()
    with pytest.raises(ValueError, match="`repeats` must be a positive int, got 0"):
        time_call(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="`warmup` must be an int >= 0, got -1"):
        time_call(lambda: None, warmup=-1)
    with pytest.raises(TypeError, match="`warmup` must be an int, got float 1.0"):
        time_call(lambda: None, warmup=1.0)


def test_interleaved_times_alternates_the_order_and_times_every_call():
    calls, ticks = [], iter(range(100))
    fns = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times = interleaved_times(fns, 3, clock=lambda: next(ticks))  # each call takes 1 tick
    assert calls == list("abccbaabc")  # every other round reversed
    assert times == {"a": [1, 1, 1], "b": [1, 1, 1], "c": [1, 1, 1]}
    with pytest.raises(ValueError, match="`rounds` must be a positive int, got 0"):
        interleaved_times(fns, 0)


def test_matmul_rate_is_a_positive_rate():
    assert matmul_rate(size=64, repeats=2) > 1e6  # any machine does a million FLOP/s


@pytest.mark.skipif(not peak_memory_supported(), reason="peak RSS can only be reset on Linux")
def test_peak_memory_sees_a_tensor_torch_allocates():
    size = 256 * 2**20  # 256 MiB, written so that its pages are resident

    def allocate():
        torch.ones(size // 4)

    measured = peak_memory(allocate)
    assert 0.9 * size < measured < 1.5 * size
