"""mhsa.SwiGLU: silu(gate) * up, then down; equal to transformers' Llama MLP.

Tolerance 1e-6 (float32): sums over 8 (or 32) inputs and 12 (or 48) hidden units of size ~1.
"""

import torch

import mhsa
from mhsa import SwiGLU

from references import hf_llama


def test_swiglu_is_silu_gate_times_up_then_down():
    torch.manual_seed(6)
    ff = SwiGLU(8, 12)
    x = torch.randn(2, 3, 8)
    gate, up = x @ ff.gate_proj.weight.T, x @ ff.up_proj.weight.T
    expected = (gate * torch.sigmoid(gate) * up) @ ff.down_proj.weight.T
    torch.testing.assert_close(ff(x), expected, atol=1e-6, rtol=1e-6)
    assert ff.gate_proj.bias is None and SwiGLU(8, 12, bias=True).up_proj.bias.shape == (12,)


def test_swiglu_equals_transformers_llama_mlp():
    theirs = hf_llama(vocab=97).model.layers[0].mlp
    ours = mhsa.CausalLM.from_hf_llama(hf_llama(vocab=97)).layers[0].feed_forward
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)
