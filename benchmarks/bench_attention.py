"""Forward-pass timings of MultiHeadAttention against torch and plain-torch references.

Run from the repository root::

    .venv/bin/python benchmarks/bench_attention.py                      # quiet machine
    .venv/bin/python benchmarks/bench_attention.py --threads 1 --clock cpu  # busy machine
    .venv/bin/python benchmarks/bench_attention.py --repeats 5            # quick look

A full run takes about 40 s (one thread) to 90 s (two threads, busy machine) on 2 cores.

Five implementations share the same weights and run in eval mode under
``torch.inference_mode()``. They are interleaved: every round calls each of them once,
compared implementations back to back, every other round in reverse order, so a slow
moment of the machine hits both sides of a comparison alike. The table gives median and
minimum milliseconds per forward pass and the spread (interquartile range over median).
Each ratio is the median over rounds of that round's ratio (with its quartiles, which
show how finely this machine resolves it), plus the ratio of the minima:

- ours fused / plain fused: ``MultiHeadAttention(need_weights=False)`` against the same
  projections + ``view``/``transpose`` + ``F.scaled_dot_product_attention``. Target <= 1.05.
- ours explicit / plain explicit: ``need_weights=True`` against the same projections +
  ``matmul``/``softmax``/``matmul``. Target <= 1.15.
- torch MHA / plain fused: ``torch.nn.MultiheadAttention(batch_first=True)`` for context.
"""

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # references, tolerances

import torch

from mhsa import MultiHeadAttention
from mhsa.course.measure import interleaved_times

from references import plain_attention, plain_explicit_attention
from tolerances import worst_case

SIZES = [(8, 128, 256, 8), (4, 512, 256, 8), (1, 2048, 256, 8)]  # batch, tokens, e, heads
# call order within a round; each compared pair is adjacent (odd rounds run it backwards)
ORDER = ["torch MHA", "plain fused", "ours fused", "ours explicit", "plain explicit"]
RATIOS = {
    "ours fused / plain fused": ("ours fused", "plain fused"),
    "ours explicit / plain explicit": ("ours explicit", "plain explicit"),
    "torch MHA / plain fused": ("torch MHA", "plain fused"),
}
TARGETS = {"ours fused / plain fused": 1.05, "ours explicit / plain explicit": 1.15}
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def implementations(batch, tokens, embed_dim, heads):
    torch.manual_seed(0)
    ours = MultiHeadAttention(embed_dim, heads).eval()
    theirs = ours.to_torch().eval()
    x = torch.randn(batch, tokens, embed_dim)
    return x, {
        "ours fused": lambda: ours(x),
        "ours explicit": lambda: ours(x, need_weights=True),
        "torch MHA": lambda: theirs(x, x, x, need_weights=False),
        "plain fused": lambda: plain_attention(ours, x),
        "plain explicit": lambda: plain_explicit_attention(ours, x),
    }


def check_agreement(x, impls, heads):
    """The five compute the same output (float32); a benchmark of wrong code is worthless.

    Tolerance from tests/tolerances.py: projection over e, scores over d, weighted values
    over n keys, output projection over e.
    """
    n, e = x.shape[-2:]
    tol = worst_case(torch.float32, e + e // heads + n + e)
    ref = impls["plain fused"]()
    for name, fn in impls.items():
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        torch.testing.assert_close(out, ref, **tol, msg=name)


def time_size(size, repeats, warmup, clock):
    """Seconds per call of each implementation, one sample per round, rounds interleaved.

    Each round calls the five once. Compared implementations sit next to each other in
    ORDER, and every other round runs backwards, so each pair meets the same moment of
    the machine and neither always goes first.
    """
    x, impls = implementations(*size)
    with torch.inference_mode():
        check_agreement(x, impls, size[-1])
        for _ in range(warmup):
            for fn in impls.values():
                fn()
        return interleaved_times({name: impls[name] for name in ORDER}, repeats, clock)


def quartiles(values):
    q1, med, q3 = statistics.quantiles(values, n=4)
    return q1, med, q3


def report(size, samples):
    b, n, e, h = size
    print(f"\n(batch, tokens, embed_dim, heads) = ({b}, {n}, {e}, {h}), "
          f"{len(samples[ORDER[0]])} rounds")
    print(f"  {'':<15}{'median ms':>11}{'min ms':>10}{'IQR/median':>12}")
    for name in ORDER:
        q1, med, q3 = quartiles(samples[name])
        print(f"  {name:<15}{med * 1e3:11.3f}{min(samples[name]) * 1e3:10.3f}"
              f"{(q3 - q1) / med:12.1%}")
    row = {}
    for pair, (a, b_) in RATIOS.items():
        per_round = [ta / tb for ta, tb in zip(samples[a], samples[b_])]
        row[pair] = (*quartiles(per_round), min(samples[a]) / min(samples[b_]))
    return row


def overhead_probe(clock, blocks=15, calls=200):
    """Fixed per-call cost (Python, checks, einops) on a tiny input, in microseconds.

    The minimum over blocks of ``calls`` calls: contention from other processes only
    ever adds time, so the minimum is a stable estimate even on a busy machine. One
    thread: this cost is Python's, and on a busy machine a second thread adds waits.
    """
    _, impls = implementations(1, 4, 32, 2)
    best, threads = {}, torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.inference_mode():
        for name in ORDER:
            fn, times = impls[name], []
            for _ in range(blocks):
                start = clock()
                for _ in range(calls):
                    fn()
                times.append((clock() - start) / calls)
            best[name] = min(times) * 1e6
    torch.set_num_threads(threads)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=0,
                        help="rounds per size (default: 60, 30, 12 for the three sizes)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch intra-op threads (default: torch's choice, one per core)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: time.process_time, blind to time other processes take "
                        "from us; meaningful with --threads 1 on a busy machine")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = CLOCKS[args.clock]
    load_before = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.clock} clock, "
          f"{platform.machine()}, python {platform.python_version()}, "
          f"load average before {load_before:.2f}")
    rows = {}
    for size, default in zip(SIZES, [60, 30, 12]):
        rows[size] = report(size, time_size(size, args.repeats or default, args.warmup, clock))
    probe = overhead_probe(clock)
    print("\nfixed cost per call on a tiny input (1, 4, 32, 2), 1 thread, best of 15 x 200 calls:")
    for name in ORDER:
        print(f"  {name:<15}{probe[name]:8.1f} us")
    for a, b in RATIOS.values():
        print(f"  {a + ' - ' + b:<34}{probe[a] - probe[b]:+8.1f} us")
    print("\nratios: median of per-round ratios [quartiles], ratio of minima, target")
    for pair in RATIOS:
        print(f"  {pair}" + (f" (target <= {TARGETS[pair]})" if pair in TARGETS else ""))
        for size, row in rows.items():
            q1, med, q3, of_min = row[pair]
            verdict = ""
            if pair in TARGETS:
                verdict = "ok" if med <= TARGETS[pair] else "MISS"
            print(f"    {size!s:<18} {med:6.3f}  [{q1:.3f}, {q3:.3f}]   min {of_min:6.3f}  {verdict}")
    load = max(load_before, os.getloadavg()[0])
    print(f"load average after {os.getloadavg()[0]:.2f}")
    if load > 1.0 and args.clock == "wall":
        print(f"note: load average {load:.1f} on {os.cpu_count()} cores: other processes "
              "compete for the CPU and wall-clock ratios are noise (see the quartiles). "
              "Rerun with --threads 1 --clock cpu.")


if __name__ == "__main__":
    main()
