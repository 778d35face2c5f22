"""mhsa.core._packing: the decoding layouts of the weights and their stacks."""

import torch
from torch import nn

from mhsa.core._packing import matvec_layout, stacked


def test_matvec_layout_is_the_same_matrix_in_another_layout():
    weight = torch.arange(12.0).reshape(3, 4)
    packed = matvec_layout(weight)
    assert torch.equal(packed, weight) and packed.stride() == (1, 3)
    assert packed.data_ptr() != weight.data_ptr()  # a copy: later changes do not reach it


def test_stacked_stacks_weights_and_biases_by_rows_and_keeps_gradients():
    torch.manual_seed(0)
    a, b = nn.Linear(4, 3), nn.Linear(4, 5)
    weight, bias = stacked(a, b)
    assert torch.equal(weight, torch.cat([a.weight, b.weight]))
    assert torch.equal(bias, torch.cat([a.bias, b.bias]))
    weight.sum().backward()
    assert torch.equal(a.weight.grad, torch.ones(3, 4))
    assert stacked(nn.Linear(4, 3, bias=False), nn.Linear(4, 2, bias=False))[1] is None
