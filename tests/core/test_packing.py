"""mhsa.core._packing: the decoding layouts and the product that reads them."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mhsa.core._packing import matvec_layout, packed_linear, stacked

from tolerances import worst_case


@pytest.mark.parametrize("shape", [(1, 1, 24), (1, 24), (24,), (3, 1, 24), (1, 5, 24), (0, 1, 24)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_packed_linear_equals_f_linear_on_the_matvec_layout(shape, with_bias):
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(40, 24, generator=generator)
    bias = torch.randn(40, generator=generator) if with_bias else None
    x = torch.randn(shape, generator=generator)
    out = packed_linear(x, matvec_layout(weight), bias)
    assert out.shape == (*shape[:-1], 40)
    # a sum over 24 inputs, plus the bias
    torch.testing.assert_close(out, F.linear(x, weight, bias), **worst_case(torch.float32, 25))


def test_packed_linear_reads_one_row_of_a_strided_input():
    generator = torch.Generator().manual_seed(1)
    weight, x = torch.randn(16, 8, generator=generator), torch.randn(1, 3, 8, generator=generator)
    last = x[:, -1:]  # a view: what decoding passes after last_only
    torch.testing.assert_close(packed_linear(last, matvec_layout(weight)), F.linear(last, weight),
                               **worst_case(torch.float32, 8))


def test_stacked_stacks_weights_and_biases_by_rows_and_keeps_gradients():
    torch.manual_seed(0)
    a, b = nn.Linear(4, 3), nn.Linear(4, 5)
    weight, bias = stacked(a, b)
    assert torch.equal(weight, torch.cat([a.weight, b.weight]))
    assert torch.equal(bias, torch.cat([a.bias, b.bias]))
    weight.sum().backward()
    assert torch.equal(a.weight.grad, torch.ones(3, 4))
    assert stacked(nn.Linear(4, 3, bias=False), nn.Linear(4, 2, bias=False))[1] is None
