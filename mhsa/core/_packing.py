"""Weights laid out for decoding: stacked projections, read faster by a matrix-vector product.

The one home of packing: :func:`stacked` and :func:`matvec_layout` build the layouts, and the
context manager :func:`packed_projections` asks modules to keep them for the length of a
decoding call (each module's ``pack_projections`` says what it keeps).
"""

import contextlib

import torch
from torch import nn


def matvec_layout(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` ``[out, in]`` as a view of an ``[in, out]`` copy: the same matrix.

    ``F.linear(x, w)`` gives the same numbers (up to float rounding: the sums run in
    another order) but, with one or a few rows in ``x``, runs about 1.4-1.7x faster on the
    CPU with this layout (measured for the benchmark's sizes; see benchmarks/README.md).
    A copy: it does not follow later changes of ``weight``.
    """
    return weight.t().contiguous().t()


def stacked(*projections: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weights and biases of ``projections`` stacked by rows: one ``F.linear`` for all.

    As ``torch.nn.MultiheadAttention``'s ``in_proj_weight``: gradients reach each layer
    through the stack (``torch.cat`` is differentiable).
    """
    weights = [p.weight for p in projections]
    biases = [p.bias for p in projections]  # each read once: a lookup costs about 1 us
    return torch.cat(weights), None if biases[0] is None else torch.cat(biases)


@contextlib.contextmanager
def packed_projections(modules):
    """Within: ``module.pack_projections()`` for each of ``modules``; dropped after, errors too.

    The decoding loops (:mod:`mhsa.models.generation`) build the stacks once per call, not
    once per step.
    """
    modules = list(modules)
    try:
        for module in modules:
            module.pack_projections()
        yield
    finally:
        for module in modules:
            module.pack_projections(False)
