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
