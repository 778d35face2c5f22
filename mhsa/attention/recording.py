"""Recording attention weights: a forward hook on every module that keeps the attention contract.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim, i query positions, j key
positions. Masks are boolean, True = may attend.
"""

from contextlib import contextmanager

import torch
from torch import nn

from mhsa.attention.base import Attention


@contextmanager
def record_attention(model: nn.Module):
    """Record the attention weights of every attention module in ``model``.

    Inside the ``with`` block, every :class:`mhsa.attention.base.Attention` in ``model``
    (:class:`mhsa.MultiHeadAttention`, :class:`mhsa.GroupedQueryAttention` and any other
    variant that keeps the contract; the model itself included) is called with
    ``need_weights=True``, through a forward hook, so it computes its attention weights with
    the explicit :func:`mhsa.scaled_dot_product_attention`; the hook stores them in the
    yielded dict, keyed by the module's name in ``model``, e.g.
    ``"encoder.layers.0.self_attn"``, ``"decoder.layers.1.cross_attn"``; ``"self_attn"``
    when ``model`` is one layer, and ``""`` when ``model`` is the attention module itself.
    Each forward pass overwrites the entries, so the dict holds the last call's weights.
    What ``forward`` returns is the same inside and outside, up to float rounding (outside,
    torch's fused kernel runs), and its weights only when the caller asked for them.

    The hooks are removed when the block ends, errors included; a ``copy.deepcopy`` or a
    pickle made inside it is not recording.

    Example::

        with mhsa.record_attention(model) as weights:
            model(src, tgt)
        cross = weights["decoder.layers.0.cross_attn"]  # [b, h, n_tgt, n_src]

    Args:
        model: any ``nn.Module`` containing an attention module, or one.

    Yields:
        dict ``{name: weights}``; weights are detached tensors ``[b, h, n_q, n_k]``, per
        head, before dropout (rows sum to 1, or less for ``mhsa.SinkAttention``, whose
        sink column takes a share; masked keys get 0).

    Raises:
        ValueError: ``model`` contains no attention module, or is already being recorded.

    Source: the forward hooks of ``torch.nn.Module.register_forward_pre_hook`` and
    ``register_forward_hook``; Clark et al. 2019, "What Does BERT Look At?" (reading the
    weights of every head).
    """
    modules = [(name, m) for name, m in model.named_modules() if isinstance(m, Attention)]
    if not modules:
        raise ValueError(f"`model` ({type(model).__name__}) contains no attention module "
                         "whose attention could be recorded")
    if any(m in _RECORDING for _, m in modules):
        raise ValueError("`model` is already inside a record_attention block")
    record, handles = {}, []
    try:
        for name, m in modules:
            recorder = _Recorder(record, name, m)
            _RECORDING.add(m)
            handles.append(m.register_forward_pre_hook(recorder.before, with_kwargs=True))
            handles.append(m.register_forward_hook(recorder.after))
        yield record
    finally:
        for handle in handles:
            handle.remove()
        for _, m in modules:
            _RECORDING.discard(m)


_RECORDING = set()  # the modules inside a record_attention block (by identity)


class _Recorder:
    """The two hooks of one module: ask for the weights, keep them, return what was asked.

    Bound methods of this object are the hooks; a deep copy or a pickle of the module gets an
    inert recorder (``module`` None), so copies never write into the block's dict.
    """

    def __init__(self, record: dict, name: str, module: nn.Module):
        self.record, self.name, self.module, self.asked = record, name, module, []

    def before(self, module, args, kwargs):
        if module is not self.module:
            return None
        self.asked.append(kwargs.get("need_weights", False))
        return args, {**kwargs, "need_weights": True}

    def after(self, module, args, output):
        if module is not self.module:
            return None
        out, weights = output
        self.record[self.name] = weights.detach()
        return out, (weights if self.asked.pop() else None)

    def __reduce__(self):  # copies and pickles get an inert recorder
        return _Recorder, ({}, "", None)


def attention_by_layer(model: nn.Module, layers: str, *inputs, attention: str | None = None,
                       **kwargs) -> torch.Tensor:
    """Run ``model(*inputs, **kwargs)`` once, recording; stack each layer's weights.

    Args:
        model: the model to run.
        layers: the name in ``model`` of its ``nn.ModuleList`` of layers, e.g.
            ``"encoder.layers"``.
        inputs, kwargs: passed to ``model``.
        attention: the attention module's name inside each layer (``"self_attn"`` in an
            encoder layer, ``"attn"`` in a causal LM's); None: the layers' only one.

    Returns:
        ``[num_layers, b, h, n_q, n_k]``: ``weights[l]`` is layer ``l``'s.

    Raises:
        ValueError: ``attention`` is None and a layer holds more or fewer than one attention
            module (a decoder layer has two: name one).
    """
    stack = model.get_submodule(layers)
    if attention is None:
        names = {name for name, m in stack[0].named_modules() if isinstance(m, Attention)}
        if len(names) != 1:
            raise ValueError(f"the layers of `{layers}` hold the attention modules "
                             f"{sorted(names)}: name one with `attention`")
        attention = names.pop()
    with record_attention(model) as record:
        model(*inputs, **kwargs)
    return torch.stack([record[f"{layers}.{k}.{attention}"] for k in range(len(stack))])
