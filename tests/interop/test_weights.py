"""mhsa.interop.weights.copy_weights: the one mapping style, by our parameter names."""

import pytest
import torch
from torch import nn

from mhsa.interop.weights import copy_weights


def test_copies_by_name_both_ways_into_views_too():
    ours = nn.Linear(3, 2)
    stacked = torch.arange(12.0).reshape(4, 3)  # their weight is a row block of a bigger tensor
    copy_weights(ours, [("weight", stacked[2:]), ("bias", torch.tensor([5.0, 6.0]))],
                 source="test")
    assert torch.equal(ours.weight, stacked[2:]) and torch.equal(ours.bias, torch.tensor([5.0, 6.0]))
    target = torch.zeros(4, 3)
    copy_weights(ours, [("weight", target[:2])], source="test", into_ours=False)
    assert torch.equal(target[:2], stacked[2:]) and torch.equal(target[2:], torch.zeros(2, 3))


def test_errors_name_the_tensors_and_both_shapes():
    ours = nn.Linear(3, 2)
    with pytest.raises(ValueError, match=r"tensor 'dense.weight' has shape \(2, 4\), expected "
                                         r"\(2, 3\) \(for weight\)"):
        copy_weights(ours, [("weight", torch.zeros(2, 4), "dense.weight")], source="ckpt")
    with pytest.raises(ValueError, match=r"tensor of ckpt has shape \(5,\), expected \(2,\)"):
        copy_weights(ours, [("bias", torch.zeros(5))], source="ckpt")
    with pytest.raises(ValueError, match="Linear has no parameter 'scale' .mapping from ckpt."):
        copy_weights(ours, [("scale", torch.zeros(1))], source="ckpt")
