"""The measuring helpers of the chapters: FLOP counts, timings, matmul rate, peak memory."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import mhsa
from mhsa import MultiHeadAttention
from mhsa.course.measure import (
    attention_flops,
    interleaved_times,
    matmul_rate,
    peak_memory,
    peak_memory_supported,
    time_call,
)


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
