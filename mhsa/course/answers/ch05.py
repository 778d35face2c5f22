"""Answers to the exercises of chapter 5, the encoder layer. Try the exercises first."""

import math

import torch
from torch import nn

from mhsa.layers.transformer import EncoderLayer
from mhsa.models.encoder_decoder import sinusoidal_positional_encoding


def _encoder_layer_parameters() -> float:
    return float(sum(p.numel() for p in EncoderLayer(256, 8, 1024).parameters()))


def _positional_encoding_3_2() -> float:
    return sinusoidal_positional_encoding(4, 8)[3, 2].item()


def _layer_norm_first_entry() -> float:
    with torch.no_grad():
        return nn.LayerNorm(4)(torch.tensor([1.0, 2.0, 3.0, 4.0]))[0].item()


def _wavelength_pair_128() -> float:
    return 2 * math.pi * 10000 ** (2 * 128 / 512)


ANSWERS = {
    "05.1": _encoder_layer_parameters,
    "05.2": _positional_encoding_3_2,
    "05.3": _layer_norm_first_entry,
    "05.4": _wavelength_pair_128,
}
TOLERANCES = {
    "05.2": 5e-4,  # "round to three decimals": 0.296, not the angle 0.3
    "05.4": 0.5,  # "after how many positions": 628 as well as 628.3
}
