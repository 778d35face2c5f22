"""Measuring attention: FLOP counts, the machine's matmul rate, time and peak memory per call.

Used by chapter 9 and ``benchmarks/bench_fast.py``. Timings take the minimum over repeats:
other processes only ever add time, so the minimum is the most stable estimate of what the
code itself costs. Legend: n tokens, e embed_dim.
"""

import ctypes
import sys
import time
from pathlib import Path

import torch

from mhsa.core._checks import check_int, check_positive_int


def attention_flops(n_tokens: int, embed_dim: int, *, batch: int = 1) -> int:
    """Floating-point operations of one multi-head self-attention forward pass.

    Counting a multiply-add as 2 operations: the four projections (query, key, value,
    output), each ``[n, e] @ [e, e]``, cost ``4 * 2 * n * e**2 = 8 n e^2``; the scores
    ``Q K^T`` and the weighted values ``W V`` cost ``2 * n^2 * d`` each per head, so
    ``4 n^2 e`` over all heads. Softmax, scaling and masking (``O(n^2 h)``) are left out.
    The number of heads does not appear: the heads split ``e``, not multiply it.

    Args:
        n_tokens: sequence length ``n`` (queries = keys), ``int >= 1``.
        embed_dim: width ``e``, ``int >= 1``.
        batch: number of sequences, ``int >= 1``.

    Returns:
        ``batch * (8 * n * e**2 + 4 * n**2 * e)``, an int.

    Raises:
        ValueError: an argument below 1 (not an int: ``TypeError``).

    Source: Vaswani et al. 2017, section 4 and Table 1 (per-layer complexity
    ``O(n^2 d)`` of self-attention); Kaplan et al. 2020, "Scaling Laws for Neural Language
    Models", section 2.1 (counting forward FLOPs as 2 per parameter per token).
    """
    for name, value in (("n_tokens", n_tokens), ("embed_dim", embed_dim), ("batch", batch)):
        check_positive_int(name, value)
    return batch * (8 * n_tokens * embed_dim**2 + 4 * n_tokens**2 * embed_dim)


def time_call(fn, *, repeats: int = 5, warmup: int = 1) -> float:
    """Seconds per call of ``fn()``: the minimum over ``repeats`` timed calls.

    Args:
        fn: a callable without arguments.
        repeats: timed calls, ``int >= 1``.
        warmup: untimed calls first (allocations, thread pools, lazy initialization).

    Returns:
        seconds, a float. On a GPU, ``fn`` is synchronized before each clock read.

    Raises:
        TypeError: ``repeats`` or ``warmup`` is not an int.
        ValueError: ``repeats`` is below 1, or ``warmup`` is negative.
    """
    check_positive_int("repeats", repeats)
    check_int("warmup", warmup, minimum=0)
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def interleaved_times(fns: dict, rounds: int, clock=time.perf_counter) -> dict:
    """Seconds of every call of each function, the functions called in turn, round after round.

    Made for comparisons on a shared machine: within a round every function meets the same
    moment of the machine, and every other round runs in reverse order, so no function
    always follows the same one. Ratios of one round's times are then far steadier than
    ratios of separately taken minima.

    Args:
        fns: ``{name: callable without arguments}``, called in this order (then reversed).
        rounds: number of rounds, ``int >= 1``.
        clock: a function returning seconds, e.g. ``time.perf_counter`` (wall clock) or
            ``time.process_time`` (this process's CPU time, blind to other programs).

    Returns:
        ``{name: [seconds of round 0, round 1, ...]}``.

    Raises:
        ValueError: ``rounds`` is below 1 (not an int: ``TypeError``).
    """
    check_positive_int("rounds", rounds)
    times, names = {name: [] for name in fns}, list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            start = clock()
            fns[name]()
            times[name].append(clock() - start)
    return times


def matmul_rate(*, size: int = 1024, repeats: int = 10, device=None,
                dtype=torch.float32) -> float:
    """The machine's matrix-multiply rate in FLOP/s: the ceiling for attention.

    Times ``[size, size] @ [size, size]`` (``2 * size**3`` operations) with
    :func:`time_call`. Attention is mostly matrix products, so no attention code on this
    machine can do much better than this rate; the ratio measures how close it gets.

    Args:
        size: side of the square matrices, ``int >= 1``.
        repeats: timed products (best one counts).
        device, dtype: where and in which floating dtype to multiply.

    Returns:
        FLOP/s, a float.

    Raises:
        ValueError: ``size`` or ``repeats`` is below 1 (not an int: ``TypeError``).
    """
    check_positive_int("size", size)
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
            for _ in range(2))
    with torch.inference_mode():
        seconds = time_call(lambda: a @ b, repeats=repeats, warmup=2)
    return 2 * size**3 / seconds


_CLEAR_REFS = Path("/proc/self/clear_refs")


def peak_memory_supported() -> bool:
    """Whether :func:`peak_memory` can measure here (Linux: it resets the RSS peak)."""
    return sys.platform.startswith("linux") and _CLEAR_REFS.exists()


def peak_memory(fn) -> int | None:
    """Bytes by which the process's resident memory (RSS) peaks above its level before ``fn()``.

    Hands freed heap pages back to the OS (glibc's ``malloc_trim``, so that memory ``fn``
    reuses from earlier calls counts too), resets the kernel's RSS high-water mark
    (``/proc/self/clear_refs``), reads the current RSS, runs ``fn`` once and reads the new
    high-water mark, ``VmHWM``. (``ru_maxrss`` would not do: it never resets, and it keeps
    the peak of the image a process had before ``exec``, a forked parent's.) This counts
    everything the call touches, torch's CPU allocations included (``tracemalloc`` sees
    only Python's), at page granularity, and what ``fn`` returns. For CPU work; on a GPU
    use ``torch.cuda.max_memory_allocated``.

    Args:
        fn: a callable without arguments.

    Returns:
        bytes, an int >= 0; ``None`` where the peak cannot be reset (not Linux).
    """
    if not peak_memory_supported():
        return None
    _release_free_heap()
    _CLEAR_REFS.write_text("5")  # 5: reset the peak RSS (VmHWM) to the current RSS
    before = _status_bytes("VmRSS")
    fn()
    return max(0, _status_bytes("VmHWM") - before)


def _release_free_heap() -> None:
    """Give freed heap pages back to the OS (glibc), so memory reused from earlier calls counts."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # another C library: its free pages stay counted as used
        pass


def _status_bytes(field: str) -> int:
    """A memory line of ``/proc/self/status`` (VmRSS: now, VmHWM: peak), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024  # the file counts in kB
    raise RuntimeError(f"no {field} line in /proc/self/status")
