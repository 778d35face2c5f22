"""The SwiGLU feed-forward network of Llama and Mistral: a gated two-layer network per token.

Legend: b batch, n tokens, e embed_dim. Like :class:`mhsa.FeedForward`, it is applied to
every token on its own; no information moves between tokens here.
"""

import torch
import torch.nn.functional as F
from torch import nn

from mhsa.core._checks import check_positive_int
from mhsa.core._packing import matvec_layout


class SwiGLU(nn.Module):
    r"""Gated feed-forward network: ``down_proj(silu(gate_proj(x)) * up_proj(x))``.

    Two projections up to ``ff_dim``: one goes through SiLU (``x * sigmoid(x)``, Swish
    with beta = 1) and gates the other elementwise; a third projects back to ``e``::

        FFN_SwiGLU(x) = (Swish_1(x W) * (x V)) W_2        # W = gate_proj, V = up_proj

    Three weight matrices instead of two, so Llama shrinks ``ff_dim`` to about
    ``8/3 * e`` (e.g. 11008 for ``e = 4096``) to keep the parameter count of a ``4 * e``
    ReLU network. The attribute names are those of transformers' ``LlamaMLP``.

    Args:
        embed_dim: width ``e`` of the input and output, ``int >= 1``.
        ff_dim: width of the hidden (gated) layer, ``int >= 1``.
        bias: add a learnable bias to the three projections (Llama and Mistral: none).
        device, dtype: where and in which floating dtype to create the parameters.

    Attributes:
        gate_proj, up_proj: ``nn.Linear(embed_dim, ff_dim)``; down_proj:
            ``nn.Linear(ff_dim, embed_dim)``. ``forward`` applies ``down_proj``'s weights
            with ``F.linear`` (as :class:`mhsa.MultiHeadAttention` does): forward hooks
            registered on it do not run.

    Shape:
        ``[..., embed_dim] -> [..., embed_dim]``, floating, the module's dtype.

    Raises:
        ValueError: ``embed_dim`` or ``ff_dim`` is not a positive int.

    Source: Shazeer 2020, "GLU Variants Improve Transformer", section 2 (equation 6,
    FFN_SwiGLU); Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language
    Models", section 2.2 (SwiGLU with a ``2/3 * 4e`` hidden width).
    """

    def __init__(self, embed_dim, ff_dim, *, bias=False, device=None, dtype=None):
        super().__init__()
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("ff_dim", ff_dim)
        kw = {"bias": bias, "device": device, "dtype": dtype}
        self.gate_proj = nn.Linear(embed_dim, ff_dim, **kw)  # e -> ff_dim, through SiLU
        self.up_proj = nn.Linear(embed_dim, ff_dim, **kw)  # e -> ff_dim, gated
        self.down_proj = nn.Linear(ff_dim, embed_dim, **kw)  # ff_dim -> e
        self._packed = None  # (gate/up weight, gate/up bias, down weight), see pack_projections

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed, down = self._packed, self.down_proj
        if packed is not None:  # one matrix product for both, then split
            gate, up = F.linear(x, packed[0], packed[1]).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        down_weight = down.weight if packed is None else packed[2]
        return F.linear(F.silu(gate) * up, down_weight, down.bias)  # one module call fewer

    def pack_projections(self, packed: bool = True) -> None:
        """Stack the gate and up weights into one matrix, or drop the stack.

        While packed, ``forward`` computes both projections with one matrix product
        (the same numbers), and the stack and ``down_proj``'s weight are held in the
        layout of ``mhsa.core._packing.matvec_layout`` (faster for a few tokens; equal up to
        float rounding). The copies do not follow later changes of the projections, and
        gradients do not reach them.
        :meth:`mhsa.CausalLM.generate` packs for the length of one call, under
        ``torch.inference_mode``.
        """
        if not packed:
            self._packed = None
            return
        gate, up = self.gate_proj, self.up_proj
        bias = None if gate.bias is None else torch.cat([gate.bias, up.bias])
        gate_up = matvec_layout(torch.cat([gate.weight, up.weight]))
        self._packed = (gate_up, bias, matvec_layout(self.down_proj.weight))

    def __getstate__(self):
        """Copies and pickles never inherit a stack of :meth:`pack_projections`."""
        return {**self.__dict__, "_packed": None}
