"""Copying torch's layers (mhsa/interop/torch_nn.py): what from_torch keeps and what it refuses.

The outputs of the copies are compared with torch's in tests/layers/test_transformer.py.
"""

import pytest
import torch
from torch import nn

import mhsa

E, H, FF = 16, 4, 32  # embed_dim, num_heads, feed-forward width


def test_from_torch_copies_hyper_parameters_and_training_mode():
    theirs = nn.TransformerDecoderLayer(E, H, FF, dropout=0.2, activation="gelu",
                                        norm_first=True, layer_norm_eps=1e-6, batch_first=True)
    ours = mhsa.DecoderLayer.from_torch(theirs)
    assert ours.training and ours.norm_first
    assert ours.feed_forward.activation_name == "gelu"
    assert ours.norm3.eps == 1e-6 and ours.dropout2.p == 0.2 and ours.cross_attn.dropout == 0.2
    assert mhsa.DecoderLayer.from_torch(theirs.eval()).training is False


def test_from_torch_refuses_batch_first_false_and_other_types():
    layer = nn.TransformerEncoderLayer(E, H, FF)
    with pytest.raises(ValueError, match="batch_first=False"):
        mhsa.EncoderLayer.from_torch(layer)
    with pytest.raises(ValueError, match="batch_first=False"):
        mhsa.DecoderLayer.from_torch(nn.TransformerDecoderLayer(E, H, FF))
    with pytest.raises(TypeError, match="must be a torch.nn.TransformerDecoderLayer, got "
                                        "TransformerEncoderLayer"):
        mhsa.DecoderLayer.from_torch(nn.TransformerEncoderLayer(E, H, FF, batch_first=True))


def test_from_torch_refuses_unsupported_activation_and_no_bias():
    layer = nn.TransformerEncoderLayer(E, H, FF, activation=torch.tanh, batch_first=True)
    with pytest.raises(ValueError, match="only relu and exact gelu"):
        mhsa.EncoderLayer.from_torch(layer)
    layer = nn.TransformerEncoderLayer(E, H, FF, batch_first=True, bias=False)
    with pytest.raises(ValueError, match="bias=False"):
        mhsa.EncoderLayer.from_torch(layer)
