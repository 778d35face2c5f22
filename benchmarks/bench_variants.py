"""Part VII's variants side by side: KV-cache bytes per token and greedy decoding speed.

Run from the repository root::

    .venv/bin/python benchmarks/bench_variants.py               # about a minute on 2 cores
    .venv/bin/python benchmarks/bench_variants.py --clock wall  # a quiet machine

Setup: the model of ``bench_generate.py`` (batch 1, one thread, a 16-token prompt, 128 new
tokens, 4 layers, 256 wide, 8 query heads, SwiGLU width 688, vocabulary 1000, float32, random
weights), with the attention of each layer swapped:

- ``multi-head``, ``grouped-query`` (2 key/value heads), ``multi-query``:
  :class:`mhsa.GroupedQueryAttention` with 8, 2 and 1 key/value heads;
- ``query/key norms``, ``soft-capped``, ``sink logits``: ``mhsa.QKNormAttention``,
  ``mhsa.SoftCappedAttention`` (cap 50), ``mhsa.SinkAttention``, 2 key/value heads;
- ``latent (MLA)``: ``mhsa.MultiHeadLatentAttention``, latent width 64, rotary key 16, query
  latent 128, heads of 32 (+16 rotary) for keys and 32 for values; ``generate`` decodes it in
  the absorbed form (``pack_projections``);
- ``grouped-query, int8 cache``: the grouped-query model with ``QuantizedKVCache``
  (``mhsa.core.quantized_cache``, groups of 32 tokens) in a plain decoding loop, timed
  against the same loop with ``mhsa.KVCache``.

Printed per variant: parameters, KV bytes per token measured from the caches' ``nbytes`` after
a prompt of 16 plus 112 tokens (the cache's own accounting: allocated room included) and the
formula (int8: per layer, codes ``2 g d`` bytes, key scales ``g d * 4 / 32``, value scales
``g * 4``, plus the float residual of a group not yet full and the room allocated ahead), tokens per second of ``generate`` (best of the rounds; the variants interleaved with
``mhsa.course.measure.interleaved_times``), and the ratio to the grouped-query model.
The default clock is this process's CPU time (``--clock cpu``), blind to other programs.
"""

import argparse
import functools
import platform
import time

import torch

import mhsa
from mhsa.core.cache import KVCache
from mhsa.core.quantized_cache import QuantizedKVCache
from mhsa.course.measure import interleaved_times

LAYERS, WIDTH, HEADS, FF, VOCAB = 4, 256, 8, 688, 1000
PROMPT, NEW = 16, 128
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
LATENT = {"q_lora_rank": 128, "kv_lora_rank": 64, "qk_nope_head_dim": 32,
          "qk_rope_head_dim": 16, "v_head_dim": 32}


def models() -> dict:
    """``{name: (CausalLM, formula of KV bytes per token, cache class or None)}``."""
    def lm(**kw):
        torch.manual_seed(0)
        return mhsa.CausalLM(VOCAB, WIDTH, HEADS, FF, LAYERS, **kw).eval()

    d, f32 = WIDTH // HEADS, 4
    per_head = 2 * LAYERS * d * f32  # a key and a value of one head, every layer
    latent = functools.partial(mhsa.MultiHeadLatentAttention, WIDTH, HEADS, **LATENT)
    return {
        "multi-head": (lm(num_kv_heads=8), f"{8 * per_head}", None),
        "grouped-query": (lm(num_kv_heads=2), f"{2 * per_head}", None),
        "multi-query": (lm(num_kv_heads=1), f"{1 * per_head}", None),
        "query/key norms": (lm(num_kv_heads=2, attention="qk_norm"), f"{2 * per_head}", None),
        "soft-capped": (lm(num_kv_heads=2, attention="soft_capped"), f"{2 * per_head}", None),
        "sink logits": (lm(num_kv_heads=2, attention="sinks"), f"{2 * per_head}", None),
        "latent (MLA)": (lm(attention=latent),
                         f"{LAYERS * (LATENT['kv_lora_rank'] + LATENT['qk_rope_head_dim']) * f32}",
                         None),
        "grouped-query, int8 cache": (lm(num_kv_heads=2), f"{LAYERS * (2 * 2 * d + 2 * d * f32 // 32 + 2 * f32)} + residual",
                                      QuantizedKVCache),
    }


@torch.inference_mode()
def decode(model, ids, cache_cls, new=NEW):
    """Greedy tokens through ``cache_cls`` caches in a plain loop (``generate`` makes its own)."""
    cache = [cache_cls() for _ in model.layers]
    logits = model(ids, cache=cache, last_only=True)
    out = [ids]
    for _ in range(new):
        token = logits[:, -1].argmax(-1, keepdim=True)
        out.append(token)
        logits = model(token, cache=cache, last_only=True)
    return torch.cat(out, dim=1), cache


@torch.inference_mode()
def bytes_per_token(model, ids, cache_cls) -> float:
    n = PROMPT + NEW - 16
    if cache_cls is None:
        cache = model.new_cache(capacity=n)
        model(torch.cat([ids, ids.new_zeros(1, n - PROMPT)], dim=1), cache=cache)
    else:
        _, cache = decode(model, ids, cache_cls, new=n - PROMPT)
    return sum(c.nbytes for c in cache) / n


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best counts)")
    parser.add_argument("--clock", choices=CLOCKS, default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ids = torch.randint(VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    variants = models()
    fns = {}
    for name, (model, _, cache_cls) in variants.items():
        if cache_cls is None:
            fns[name] = functools.partial(model.generate, ids, NEW)
        else:
            fns[name] = functools.partial(decode, model, ids, cache_cls)
    base_model = variants["grouped-query"][0]
    fns["grouped-query, float cache loop"] = functools.partial(decode, base_model, ids, KVCache)
    for fn in fns.values():
        fn()  # warm-up
    times = interleaved_times(fns, args.rounds, CLOCKS[args.clock])
    best = {name: min(t) for name, t in times.items()}
    print(f"{'variant':<28} {'parameters':>10} {'KV bytes/token':>15} {'formula':>34} "
          f"{'tokens/s':>9} {'vs GQA':>7}")
    for name, (model, formula, cache_cls) in variants.items():
        params = sum(p.numel() for p in model.parameters())
        measured = bytes_per_token(model, ids, cache_cls)
        floor = "grouped-query, float cache loop" if cache_cls else "grouped-query"
        print(f"{name:<28} {params:>10,} {measured:>15,.0f} {formula:>34} "
              f"{NEW / best[name]:>9.0f} {best[floor] / best[name]:>7.2f}")
    print(f"(the int8 row is timed against the same loop with mhsa.KVCache: "
          f"{NEW / best['grouped-query, float cache loop']:.0f} tokens/s)")
    print(f"torch {torch.__version__}, 1 thread, {platform.machine()}, clock {args.clock}, "
          f"best of {args.rounds} rounds")


if __name__ == "__main__":
    main()
