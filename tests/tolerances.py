"""Tolerances for comparing two floating-point computations of one value, derived from the dtype
and the size of the sums instead of picked by hand.

A sum of n products computed in a dtype with machine epsilon eps is off by at most n * eps / 2
relative to the sum of the terms' sizes (Higham 2002, "Accuracy and Stability of Numerical
Algorithms", section 3.1). Two computations that add in different orders (ours and torch's, or
one-shot and step by step) can err in opposite directions: n * eps apart. ``n_terms`` counts
every term summed along the chain of sums that makes one output entry (a projection over e
inputs, scores over d, weighted values over n_k keys, ...) plus one per rounding of a stored
intermediate in float16 or bfloat16 (on CPU, torch sums their products in float32). Entries are
of size ~1 in these tests (unit-variance inputs, default initialisation), so one number serves
as both atol and rtol.

For long chains (a pretrained model, thousands of terms) that worst case is far too loose:
the rounding errors of many terms add like a random walk, sqrt(n) * eps (Higham and Mary 2019,
"A new approach to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5)).
"""

import math

import torch


def worst_case(dtype: torch.dtype, n_terms: int) -> dict:
    """``{"atol", "rtol"}``: ``n_terms * eps(dtype)``, for short chains of sums."""
    tol = n_terms * torch.finfo(dtype).eps
    return {"atol": tol, "rtol": tol}


def random_walk(dtype: torch.dtype, n_terms: int) -> dict:
    """``{"atol", "rtol"}``: ``sqrt(n_terms) * eps(dtype)``, for long chains of sums."""
    tol = math.sqrt(n_terms) * torch.finfo(dtype).eps
    return {"atol": tol, "rtol": tol}


def rounded_to(decimals: int) -> dict:
    """``{"atol", "rtol"}`` for a float32 value stored rounded to ``decimals`` decimals: half a
    unit of the last one, absolute (3 decimals: 5e-4), plus float32's rounding of what is read
    back, relative."""
    return {"atol": 0.5 * 10.0**-decimals, "rtol": torch.finfo(torch.float32).eps}


def int8_half_steps(n_steps: float, size: float) -> dict:
    """``{"atol", "rtol"}`` for a value computed from symmetric int8 codes (127 levels a side)
    of numbers up to ``size`` in magnitude: ``n_steps`` half steps of ``size / 254`` each, the
    most one code is off (mhsa.core.quantized_cache), absolute."""
    return {"atol": n_steps * size / 254, "rtol": 0.0}


# Bounds that mhsa's docstrings promise, stated once: a test of a promise checks the number
# the reader was given, not one derived here.
# MultiHeadAttention's fused path equals its explicit path, a layer copied ``from_torch``
# equals torch's, CausalLM's cached decoding equals its full pass: "float32, 1e-5".
DOCUMENTED_FLOAT32 = {"atol": 1e-5, "rtol": 1e-5}
# CausalLM.from_hf_llama: "logits equal the model's (float32: within 1e-4)".
DOCUMENTED_HF_LLAMA = {"atol": 1e-4, "rtol": 1e-4}
