"""Recording attention weights: a property of :class:`mhsa.MultiHeadAttention` itself.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim, i query positions, j key
positions. Masks are boolean, True = may attend.
"""

from contextlib import contextmanager

import torch
from torch import nn

from mhsa.attention.multihead import MultiHeadAttention


@contextmanager
def record_attention(model: nn.Module):
    """Record the attention weights of every :class:`mhsa.MultiHeadAttention` in ``model``.

    Inside the ``with`` block, every attention module in ``model`` (the model itself
    included) computes its attention weights with the explicit
    :func:`mhsa.scaled_dot_product_attention` and stores them in the yielded dict, keyed by
    the module's name in ``model``, e.g. ``"encoder.layers.0.self_attn"``,
    ``"decoder.layers.1.cross_attn"``; ``"self_attn"`` when ``model`` is one layer, and
    ``""`` when ``model`` is the attention module itself. Each forward pass overwrites the
    entries, so the dict holds the last call's weights. What ``forward`` returns is the
    same inside and outside, up to float rounding (outside, torch's fused kernel runs).

    The recording state lives only in the modules of ``model`` and only inside the block:
    a ``copy.deepcopy`` or a pickle made inside it is not recording.

    Example::

        with mhsa.record_attention(model) as weights:
            model(src, tgt)
        cross = weights["decoder.layers.0.cross_attn"]  # [b, h, n_tgt, n_src]

    Args:
        model: any ``nn.Module`` containing a :class:`mhsa.MultiHeadAttention`, or one.

    Yields:
        dict ``{name: weights}``; weights are detached tensors ``[b, h, n_q, n_k]``, per
        head, before dropout (rows sum to 1; masked keys get 0).

    Raises:
        ValueError: ``model`` contains no :class:`mhsa.MultiHeadAttention`, or is already
            being recorded.
    """
    modules = [(name, m) for name, m in model.named_modules()
               if isinstance(m, MultiHeadAttention)]
    if not modules:
        raise ValueError(f"`model` ({type(model).__name__}) contains no MultiHeadAttention "
                         "whose attention could be recorded")
    if any(m._record is not None for _, m in modules):
        raise ValueError("`model` is already inside a record_attention block")
    record = {}
    for name, m in modules:
        m._record = (record, name)
    try:
        yield record
    finally:
        for _, m in modules:
            m._record = None


def attention_by_layer(model: nn.Module, layers: str, *inputs, attention: str = "self_attn",
                       **kwargs) -> torch.Tensor:
    """Run ``model(*inputs, **kwargs)`` once, recording; stack each layer's weights.

    Args:
        model: the model to run.
        layers: the name in ``model`` of its ``nn.ModuleList`` of layers, e.g.
            ``"encoder.layers"``.
        inputs, kwargs: passed to ``model``.
        attention: the attention module's name inside each layer.

    Returns:
        ``[num_layers, b, h, n_q, n_k]``: ``weights[l]`` is layer ``l``'s.
    """
    with record_attention(model) as record:
        model(*inputs, **kwargs)
    count = len(model.get_submodule(layers))
    return torch.stack([record[f"{layers}.{k}.{attention}"] for k in range(count)])
