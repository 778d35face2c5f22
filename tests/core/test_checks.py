"""The input checks shared by every module: one error type per kind of mistake."""

import pytest
import torch

import mhsa


def test_check_broadcast_agrees_with_torch_broadcast_shapes():
    from itertools import product

    from mhsa.core._checks import check_broadcast

    target = (2, 3, 1, 4)
    for rank in range(6):
        for shape in product([1, 2, 3, 4, 5], repeat=rank):
            try:
                expected = rank <= 4 and torch.broadcast_shapes(shape, target) == target
            except RuntimeError:
                expected = False
            try:
                check_broadcast("m", torch.empty(shape, device="meta"), target, "the target")
                got = True
            except ValueError:
                got = False
            assert got == expected, shape


@pytest.mark.parametrize("value, error", [(2.0, TypeError), (True, TypeError), ("3", TypeError),
                                          (0, ValueError), (-1, ValueError)])
def test_one_exception_type_per_kind_of_mistake(value, error):
    """A non-integer is a TypeError and an out-of-range int a ValueError, everywhere."""
    calls = [lambda: mhsa.MultiHeadAttention(value, 1),
             lambda: mhsa.sliding_window_mask(2, window=value),
             lambda: mhsa.patchify(torch.zeros(1, 1, 4, 4), value),
             lambda: mhsa.FeedForward(4, value)]
    if value != 0:  # causal_mask(2, 0) is an allowed, empty mask
        calls.append(lambda: mhsa.causal_mask(2, value))
    for call in calls:
        with pytest.raises(error):
            call()
