"""Conversion between :class:`mhsa.MultiHeadAttention` and ``torch.nn.MultiheadAttention``.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim. Both modules compute the same
function; they store the weights differently. torch packs the query, key and value
projections into one ``in_proj_weight`` ``[3 * e, e]`` (q, k, v in that order) when the
three inputs have width ``e``, and keeps three ``*_proj_weight`` otherwise; mhsa keeps three
``nn.Linear`` (``q_proj``, ``k_proj``, ``v_proj``). Masks differ in polarity: see
:func:`mhsa.mask_to_torch_mha`.
"""

import torch
import torch.nn.functional as F
from torch import nn

from mhsa.interop.weights import copy_weights


def mha_from_torch(module: nn.MultiheadAttention, cls):
    """A :class:`mhsa.MultiHeadAttention` copy of ``torch.nn.MultiheadAttention(batch_first=True)``.

    Weights, biases, dropout, train/eval mode, device and dtype are copied.

    Args:
        module: the torch module.
        cls: the class to build, :class:`mhsa.MultiHeadAttention` (its ``from_torch``
            passes itself: this module does not import the attention package).

    Raises:
        TypeError: ``module`` is not a ``torch.nn.MultiheadAttention``.
        ValueError: it has ``batch_first=False``, ``add_bias_kv`` or ``add_zero_attn``.
    """
    _check_torch_mha(module)
    weight = module.out_proj.weight
    ours = cls(module.embed_dim, module.num_heads, dropout=module.dropout,
               bias=module.in_proj_bias is not None, kdim=module.kdim, vdim=module.vdim,
               device=weight.device, dtype=weight.dtype)
    copy_weights(ours, torch_mha_pairs(module), source="torch.nn.MultiheadAttention")
    return ours.train(module.training)


def mha_to_torch(mha) -> nn.MultiheadAttention:
    """A ``torch.nn.MultiheadAttention(batch_first=True)`` with the weights of ``mha``.

    Raises:
        ValueError: what torch's module cannot represent: ``qkv_dim != embed_dim`` (it
            projects to ``embed_dim``).
    """
    if mha.qkv_dim != mha.embed_dim:
        raise ValueError(
            f"torch.nn.MultiheadAttention needs `qkv_dim` ({mha.qkv_dim}) equal to "
            f"`embed_dim` ({mha.embed_dim})")
    weight = mha.out_proj.weight
    theirs = nn.MultiheadAttention(
        mha.embed_dim, mha.num_heads, dropout=mha.dropout,
        bias=mha.out_proj.bias is not None, kdim=mha.kdim, vdim=mha.vdim,
        batch_first=True, device=weight.device, dtype=weight.dtype)
    copy_weights(mha, torch_mha_pairs(theirs), source="torch.nn.MultiheadAttention",
                 into_ours=False)
    return theirs.train(mha.training)


def torch_mha_pairs(mha: nn.MultiheadAttention) -> list:
    """``(our name, torch's tensor)`` pairs of :class:`mhsa.MultiHeadAttention`'s parameters.

    torch stacks q, k and v (in that order) into ``in_proj_weight`` when the three inputs
    have width ``embed_dim``; the pairs hold its row blocks (views, so a copy into them
    writes torch's parameter).
    """
    if mha._qkv_same_embed_dim:
        weights = mha.in_proj_weight.chunk(3)
    else:
        weights = (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight)
    pairs = [(f"{p}_proj.weight", w) for p, w in zip("qkv", weights)]
    pairs.append(("out_proj.weight", mha.out_proj.weight))
    if mha.in_proj_bias is not None:
        pairs += [(f"{p}_proj.bias", b) for p, b in zip("qkv", mha.in_proj_bias.chunk(3))]
        pairs.append(("out_proj.bias", mha.out_proj.bias))
    return pairs


def _check_torch_mha(module) -> None:
    if not isinstance(module, nn.MultiheadAttention):
        raise TypeError(
            f"`module` must be a torch.nn.MultiheadAttention, got {type(module).__name__}")
    for flag, bad in [("batch_first=False", not module.batch_first),
                      ("add_bias_kv=True", module.bias_k is not None),
                      ("add_zero_attn=True", module.add_zero_attn)]:
        if bad:
            raise ValueError(f"`module` has {flag}; MultiHeadAttention supports "
                             "batch_first=True without add_bias_kv or add_zero_attn")


def layer_from_torch(cls, layer, torch_cls):
    """Build ``cls`` (an mhsa encoder or decoder layer) with the sizes and weights of ``layer``.

    ``torch_cls`` is ``nn.TransformerEncoderLayer`` or ``nn.TransformerDecoderLayer``; the
    decoder's ``multihead_attn`` becomes our ``cross_attn``.

    Raises:
        TypeError: ``layer`` is not a ``torch_cls``.
        ValueError: it has ``batch_first=False``, LayerNorms or linears without bias, or an
            activation other than relu or exact gelu.
    """
    if not isinstance(layer, torch_cls):
        raise TypeError(f"`layer` must be a torch.nn.{torch_cls.__name__}, "
                        f"got {type(layer).__name__}")
    if not layer.self_attn.batch_first:
        raise ValueError(f"`layer` has batch_first=False; {cls.__name__}.from_torch needs "
                         f"torch.nn.{torch_cls.__name__}(..., batch_first=True)")
    decoder = torch_cls is nn.TransformerDecoderLayer
    norms = [layer.norm1, layer.norm2] + ([layer.norm3] if decoder else [])
    if any(norm.bias is None for norm in norms) or layer.linear1.bias is None:
        raise ValueError("`layer` was built with bias=False; our layers always have biases")
    weight = layer.linear1.weight
    ours = cls(layer.self_attn.embed_dim, layer.self_attn.num_heads, layer.linear1.out_features,
               dropout=layer.dropout.p, activation=_torch_activation_name(layer),
               norm_first=layer.norm_first, layer_norm_eps=norms[0].eps,
               device=weight.device, dtype=weight.dtype)
    ours.self_attn = mha_from_torch(layer.self_attn, type(ours.self_attn))
    if decoder:
        ours.cross_attn = mha_from_torch(layer.multihead_attn, type(ours.cross_attn))
    our_norms = [ours.norm1, ours.norm2] + ([ours.norm3] if decoder else [])
    with torch.no_grad():
        ours.feed_forward.linear1.load_state_dict(layer.linear1.state_dict())
        ours.feed_forward.linear2.load_state_dict(layer.linear2.state_dict())
        for mine, theirs in zip(our_norms, norms):
            mine.load_state_dict(theirs.state_dict())
    return ours.train(layer.training)


def _torch_activation_name(layer) -> str:
    fn = layer.activation
    if fn is F.relu or isinstance(fn, nn.ReLU):
        return "relu"
    if fn is F.gelu or (isinstance(fn, nn.GELU) and fn.approximate == "none"):
        return "gelu"
    raise ValueError(f"`layer` has activation {fn!r}; only relu and exact gelu are supported")
