"""Weights laid out for decoding: stacked projections, read faster by a matrix-vector product."""

import contextlib

import torch


def matvec_layout(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` ``[out, in]`` as a view of an ``[in, out]`` copy: the same matrix.

    ``F.linear(x, w)`` gives the same numbers (up to float rounding: the sums run in
    another order) but, with one or a few rows in ``x``, runs about 1.4-1.7x faster on the
    CPU with this layout (measured for the benchmark's sizes; see benchmarks/README.md).
    A copy: it does not follow later changes of ``weight``.
    """
    return weight.t().contiguous().t()


@contextlib.contextmanager
def packed_projections(modules):
    """Within: ``module.pack_projections()`` for each of ``modules``; dropped after, errors too.

    The decoding loops (:meth:`mhsa.EncoderDecoder.greedy_decode`,
    :meth:`mhsa.CausalLM.generate`) build the stacks once per call, not once per step.
    """
    modules = list(modules)
    try:
        for module in modules:
            module.pack_projections()
        yield
    finally:
        for module in modules:
            module.pack_projections(False)
