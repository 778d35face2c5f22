"""Greedy generation: mhsa.CausalLM against transformers' Llama on the same weights.

Run from the repository root::

    .venv/bin/python benchmarks/bench_generate.py               # about a minute on 2 cores
    .venv/bin/python benchmarks/bench_generate.py --clock wall  # a quiet machine

Setup (issue 16): batch 1, one thread, a 16-token prompt, 128 new tokens, a 4-layer,
256-wide Llama with 8 query heads, 2 key/value heads (grouped-query), SwiGLU width 688 and
vocabulary 1000, float32, random weights. Three generators share those weights:

- ``mhsa``: ``mhsa.CausalLM.from_hf_llama(model).generate(ids, 128)``;
- ``transformers``: ``model.generate(ids, do_sample=False, max_new_tokens=128)``;
- ``bare torch``: a plain loop of ``F.linear``, ``F.rms_norm``, rotary tables, a
  preallocated cache and ``F.scaled_dot_product_attention(enable_gqa=True)``: the floor
  for Python-driven decoding, to show what is left to gain.

All three must produce the same tokens. They are interleaved (``mhsa.course.measure.
interleaved_times``): each round calls each once, every other round in reverse order.
Printed: best-of-rounds seconds and tokens/s; the speed-up ``transformers / mhsa`` as the
ratio of the best times (target >= 2) and the median of per-round ratios; where one decoding
step of mhsa spends its time (per module, then per torch operator); and the KV-cache bytes
per token for multi-head, grouped-query and multi-query attention, measured from the
``KVCache`` tensors, next to the formula ``2 * layers * num_kv_heads * head_dim * bytes``.

The default clock is this process's CPU time (``--clock cpu``), blind to other programs on
a shared machine; with one thread it counts the work each generator does.
"""

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # references, tolerances

import torch
import torch.nn.functional as F

import mhsa
from mhsa.core.heads import merge_heads, split_heads
from mhsa.course.measure import interleaved_times

from references import hf_llama

LAYERS, WIDTH, HEADS, KV_HEADS, FF, VOCAB = 4, 256, 8, 2, 688, 1000
PROMPT, NEW = 16, 128
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


class BareLoop:
    """Greedy decoding with plain torch calls over a ``LlamaForCausalLM``'s weights."""

    def __init__(self, model):
        self.config, base = model.config, model.model
        self.embed, self.norm = base.embed_tokens.weight, base.norm.weight
        self.head = model.lm_head.weight
        self.eps = self.config.rms_norm_eps
        self.layers = [(layer.input_layernorm.weight,
                        torch.cat([layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight,
                                   layer.self_attn.v_proj.weight]),
                        layer.self_attn.o_proj.weight, layer.post_attention_layernorm.weight,
                        torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]),
                        layer.mlp.down_proj.weight) for layer in base.layers]
        d = WIDTH // HEADS
        angles = torch.arange(PROMPT + NEW)[:, None] * 10000.0 ** (-torch.arange(0, d, 2) / d)
        angles = torch.cat([angles, angles], dim=-1)
        self.cos, self.sin = angles.cos(), angles.sin()  # [positions, d], built once

    def rotate(self, x, start):
        n, half = x.shape[-2], x.shape[-1] // 2
        cos, sin = self.cos[start:start + n], self.sin[start:start + n]
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    @torch.inference_mode()
    def generate(self, ids, new):
        b, n = ids.shape
        d, total = WIDTH // HEADS, n + new
        out = ids.new_empty(b, total)
        out[:, :n] = ids
        caches = [torch.empty(2, b, KV_HEADS, total, d) for _ in self.layers]
        start, step = 0, ids
        for t in range(n, total):
            x = F.embedding(step, self.embed)
            m = step.shape[1]
            for (n1, qkv, o, n2, gate_up, down), cache in zip(self.layers, caches):
                h = F.linear(F.rms_norm(x, (WIDTH,), n1, self.eps), qkv)
                q, k, v = h.split([WIDTH, KV_HEADS * d, KV_HEADS * d], dim=-1)
                q = self.rotate(q.view(b, m, HEADS, d).transpose(1, 2), start)
                cache[0, :, :, start:start + m] = self.rotate(
                    k.view(b, m, KV_HEADS, d).transpose(1, 2), start)
                cache[1, :, :, start:start + m] = v.view(b, m, KV_HEADS, d).transpose(1, 2)
                a = F.scaled_dot_product_attention(
                    q, cache[0, :, :, :start + m], cache[1, :, :, :start + m],
                    is_causal=m > 1, enable_gqa=True)
                x = x + F.linear(a.transpose(1, 2).reshape(b, m, WIDTH), o)
                g, u = F.linear(F.rms_norm(x, (WIDTH,), n2, self.eps), gate_up).chunk(2, -1)
                x = x + F.linear(F.silu(g) * u, down)
            logits = F.linear(F.rms_norm(x[:, -1], (WIDTH,), self.norm, self.eps), self.head)
            out[:, t] = logits.argmax(dim=-1)
            start, step = start + m, out[:, t:t + 1]
        return out


def per_call(pairs, clock, rounds=5, calls=50):
    """``{name: (ours, bare)}`` seconds per call: ``calls`` calls per round, interleaved."""
    fns = {}
    for name, (ours, bare) in pairs.items():
        fns[(name, 0)] = lambda f=ours: [f() for _ in range(calls)]
        fns[(name, 1)] = lambda f=bare: [f() for _ in range(calls)]
    with torch.inference_mode():
        times = interleaved_times(fns, rounds, clock=clock)
    return {name: (min(times[(name, 0)]) / calls, min(times[(name, 1)]) / calls)
            for name in pairs}


def step_breakdown(model, bare, clock, n_cached=PROMPT + NEW // 2):
    """Microseconds per decoding step, part by part: mhsa's call next to the bare torch one.

    Each part is timed alone on one token, a cache of about ``n_cached`` positions (the
    attention's cache grows by one per call), the model's own weights (hot in the processor
    cache, so the matrix products read faster than inside a whole step), times its count
    per step. The whole attention call is also timed against the same steps written out by
    hand and against bare torch's step, each on a cache that grows by one per call: the
    difference to the hand-written steps is what ``forward`` itself adds. The parts, timed
    alone on small hot inputs, add up to less than the calls. Every rotary call here finds
    its angles kept (in a step of ``generate`` the first of the 8 calls computes them, about
    70 us more per step). Returns ``[(part, ours us, bare us)]``.
    """
    layer, attn = model.layers[0], model.layers[0].attn
    n1, qkv, o, _, gate_up, down = bare.layers[0]
    torch.manual_seed(0)
    x, tok, d = torch.randn(1, 1, WIDTH), torch.tensor([[7]]), WIDTH // HEADS
    pos = torch.tensor([n_cached])
    q, k = torch.randn(1, HEADS, 1, d), torch.randn(1, KV_HEADS, 1, d)
    keys = torch.randn(1, KV_HEADS, n_cached + 1, d)
    with torch.inference_mode():
        cache = attn.new_cache()
        attn(torch.randn(1, n_cached, WIDTH), cache=cache)
    big = mhsa.KVCache()  # grows in place, doubling its buffers when full
    slots = torch.empty(1, KV_HEADS, 8192, d)

    def attend_cached():  # one decoding step of attention: the cache grows by one
        attn(x, cache=cache, positions=pos)  # the rotary angles of ``pos`` are kept, as below

    by_hand = attn.new_cache()
    with torch.inference_mode():
        attn(torch.randn(1, n_cached, WIDTH), cache=by_hand)

    split, merge = split_heads, merge_heads  # what forward runs: einops rearrange
    projected = torch.randn(1, 1, (HEADS + 2 * KV_HEADS) * d)  # q, k and v of one token

    def attend_by_hand():  # the steps of GroupedQueryAttention.forward, without it
        heads = split(F.linear(x, torch.cat([attn.q_proj.weight, attn.k_proj.weight,
                                             attn.v_proj.weight])), HEADS + 2 * KV_HEADS)
        q_, k_, v_ = heads.split_with_sizes([HEADS, KV_HEADS, KV_HEADS], dim=1)
        q_, k_ = mhsa.apply_rotary(q_, pos), mhsa.apply_rotary(k_, pos)
        k_, v_ = by_hand.update(k_, v_)
        out = F.scaled_dot_product_attention(q_, k_, v_, enable_gqa=True)
        F.linear(merge(out), attn.out_proj.weight)

    bare_cache, filled = torch.empty(2, 1, KV_HEADS, 8192, d), [n_cached]

    def attend_bare():  # BareLoop's attention step on its preallocated cache
        t = filled[0]
        q_, k_, v_ = F.linear(x, qkv).split([WIDTH, KV_HEADS * d, KV_HEADS * d], dim=-1)
        q_ = bare.rotate(q_.view(1, 1, HEADS, d).transpose(1, 2), n_cached)
        bare_cache[0, :, :, t:t + 1] = bare.rotate(k_.view(1, 1, KV_HEADS, d).transpose(1, 2),
                                                   n_cached)
        bare_cache[1, :, :, t:t + 1] = v_.view(1, 1, KV_HEADS, d).transpose(1, 2)
        out = F.scaled_dot_product_attention(q_, bare_cache[0, :, :, :t + 1],
                                             bare_cache[1, :, :, :t + 1], enable_gqa=True)
        F.linear(out.transpose(1, 2).reshape(1, 1, WIDTH), o)
        filled[0] = t + 1

    def write_cache():
        big.update(k, k)

    def write_bare():
        slots[:, :, 5:6] = k
        slots[:, :, 6:7] = k

    def split_bare():
        return (x.view(1, 1, HEADS, d).transpose(1, 2),
                x[..., :KV_HEADS * d].view(1, 1, KV_HEADS, d).transpose(1, 2),
                x[..., :KV_HEADS * d].view(1, 1, KV_HEADS, d).transpose(1, 2))

    attention_parts = {
        "q/k/v projections": (  # unpacked: the stack is built on every call
            lambda: F.linear(x, torch.cat([attn.q_proj.weight, attn.k_proj.weight,
                                           attn.v_proj.weight])),
            lambda: F.linear(x, qkv).split([WIDTH, 2 * d, 2 * d], -1)),
        "head split": (lambda: split(projected, HEADS + 2 * KV_HEADS).split_with_sizes(
            [HEADS, KV_HEADS, KV_HEADS], dim=1), split_bare),
        "rotary positions": (
            lambda: (mhsa.apply_rotary(q, pos), mhsa.apply_rotary(k, pos)),
            lambda: (bare.rotate(q, n_cached), bare.rotate(k, n_cached))),
        "cache write": (write_cache, write_bare),
        "attention kernel": (
            lambda: F.scaled_dot_product_attention(q, keys, keys, enable_gqa=True),
            lambda: F.scaled_dot_product_attention(q, keys, keys, enable_gqa=True)),
        "head merge + out projection": (
            lambda: F.linear(merge(q), attn.out_proj.weight),
            lambda: F.linear(q.transpose(1, 2).reshape(1, 1, WIDTH), o)),
    }
    parts = {
        "token embedding": (lambda: model.embed(tok), lambda: F.embedding(tok, bare.embed)),
        "RMSNorm": (lambda: layer.norm1(x), lambda: F.rms_norm(x, (WIDTH,), n1, bare.eps)),
        "GroupedQueryAttention, in all": (attend_cached, attend_bare),
        "  the same steps by hand": (attend_by_hand, attend_bare),
        **attention_parts,
        "SwiGLU feed-forward": (
            lambda: layer.feed_forward(x),
            lambda: F.linear(F.silu((gu := F.linear(x, gate_up).chunk(2, -1))[0]) * gu[1],
                             down)),
        "lm_head": (lambda: model.lm_head(x), lambda: F.linear(x, bare.head)),
    }
    times = per_call(parts, clock)
    count = {"token embedding": 1, "RMSNorm": 2 * LAYERS + 1, "lm_head": 1}
    rows = [(name, ours * 1e6 * count.get(name, LAYERS), theirs * 1e6 * count.get(name, LAYERS))
            for name, (ours, theirs) in times.items()]
    total = next(ours for name, ours, _ in rows if name == "GroupedQueryAttention, in all")
    hand = next(ours for name, ours, _ in rows if name == "  the same steps by hand")
    at = [name for name, *_ in rows].index("  the same steps by hand") + 1
    rows.insert(at, ("  forward's own cost: checks, masks, calls", total - hand, 0.0))
    return rows


def cache_bytes_per_token(num_kv_heads, n=PROMPT + 8):
    """KV-cache bytes per token measured from KVCache tensors, and the formula's value."""
    torch.manual_seed(0)
    model = mhsa.CausalLM(VOCAB, WIDTH, HEADS, FF, LAYERS, num_kv_heads=num_kv_heads).eval()
    caches = model.new_cache(capacity=n)  # nbytes: exactly n positions
    with torch.inference_mode():
        x = model.embed(torch.randint(VOCAB, (1, n)))
        for layer, cache in zip(model.layers, caches):
            x = layer(x, cache=cache)
    measured = sum(cache.nbytes for cache in caches) / n
    head_dim = WIDTH // HEADS
    formula = 2 * LAYERS * num_kv_heads * head_dim * torch.finfo(torch.float32).bits // 8
    return measured, formula


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (best counts)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=CLOCKS, default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = CLOCKS[args.clock]
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"Python {platform.python_version()}, {platform.machine()}, "
          f"{args.threads} thread(s), clock {args.clock}")
    print(f"model: {LAYERS} layers, width {WIDTH}, {HEADS} query heads, {KV_HEADS} KV heads, "
          f"SwiGLU {FF}, vocab {VOCAB}; batch 1, prompt {PROMPT}, {NEW} new tokens, float32\n")

    theirs = hf_llama(vocab=VOCAB, hidden=WIDTH, intermediate=FF, layers=LAYERS, heads=HEADS,
                      kv_heads=KV_HEADS)
    ours, bare = mhsa.CausalLM.from_hf_llama(theirs), BareLoop(theirs)
    ids = torch.randint(VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    runs = {
        "mhsa": lambda: ours.generate(ids, NEW),
        "transformers": lambda: theirs.generate(ids, attention_mask=mask, do_sample=False,
                                                max_new_tokens=NEW, min_new_tokens=NEW),
        "bare torch": lambda: bare.generate(ids, NEW),
    }
    tokens = {name: run() for name, run in runs.items()}  # also the warm-up
    for name, out in tokens.items():
        if not torch.equal(out, tokens["transformers"]):
            raise SystemExit(f"{name} generated other tokens than transformers")
    print(f"tokens: all three equal ({NEW} new, {len(set(tokens['mhsa'][0, PROMPT:].tolist()))} "
          "distinct)")

    times = interleaved_times(runs, args.rounds, clock=clock)
    best = {name: min(ts) for name, ts in times.items()}
    print(f"\n{'generator':<14}{'best s':>9}{'median s':>10}{'tokens/s':>10}")
    for name, ts in times.items():
        print(f"{name:<14}{best[name]:>9.3f}{statistics.median(ts):>10.3f}"
              f"{NEW / best[name]:>10.0f}")
    for a, b in (("transformers", "mhsa"), ("mhsa", "bare torch")):
        per_round = statistics.median(x / y for x, y in zip(times[a], times[b]))
        print(f"{a} / {b}: {best[a] / best[b]:.2f} (best of {args.rounds}), "
              f"{per_round:.2f} (median of per-round ratios)")
    speedup = best["transformers"] / best["mhsa"]
    print(f"target: mhsa >= 2x transformers' tokens/s: {'met' if speedup >= 2 else 'NOT met'} "
          f"({speedup:.2f}x)")

    print(f"\nwhere a decoding step goes, us per step (parts timed alone, one token, "
          f"{PROMPT + NEW // 2} cached; the whole step took {best['mhsa'] / NEW * 1e6:.0f} us "
          f"in mhsa, {best['bare torch'] / NEW * 1e6:.0f} us bare):")
    print(f"  {'part':<46}{'mhsa':>8}{'bare':>8}")
    for name, ours_us, bare_us in step_breakdown(ours, bare, clock):
        top = name.startswith(" ") or name in (
            "token embedding", "RMSNorm", "SwiGLU feed-forward", "lm_head",
            "GroupedQueryAttention, in all")
        label = name if top else f"    {name} (alone)"
        print(f"  {label:<46}{ours_us:>8.0f}{bare_us:>8.0f}")

    print("\nKV-cache bytes per token (float32, measured from KVCache.nbytes; formula "
          "2 * layers * num_kv_heads * head_dim * bytes):")
    for name, kv in (("multi-head", HEADS), ("grouped-query", KV_HEADS), ("multi-query", 1)):
        measured, formula = cache_bytes_per_token(kv)
        print(f"  {name:<14} num_kv_heads={kv}: measured {measured:>6.0f}, "
              f"formula 2*{LAYERS}*{kv}*{WIDTH // HEADS}*4 = {formula}")


if __name__ == "__main__":
    main()
