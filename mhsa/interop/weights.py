"""The one way ``mhsa.interop`` copies weights: by our parameter names.

Each mapping (torch's ``nn.MultiheadAttention``, transformers' Llama family, a BERT checkpoint)
is a list of ``(our name, their tensor)`` pairs, or ``(our name, their tensor, their name)``: our
name as in ``module.state_dict()``, their tensor a parameter, a checkpoint entry or a view of one
(torch stacks q, k and v into one ``in_proj_weight``; the pairs hold its row blocks).
:func:`copy_weights` checks and copies them.
"""

import torch
from torch import nn


def copy_weights(ours: nn.Module, pairs, *, source: str, into_ours: bool = True) -> None:
    """Copy each pair's tensor into our parameter of that name (or ours into theirs), in place.

    Args:
        ours: the mhsa module whose ``state_dict`` names the pairs use.
        pairs: iterable of ``(our name, their tensor)`` or ``(our name, their tensor, their
            name)``; their name, when given, is what an error message calls the tensor.
        source: what the other tensors belong to, for error messages (e.g. "model.safetensors").
        into_ours: copy theirs into ours (True) or ours into theirs (False).

    Raises:
        ValueError: a name that ``ours`` does not have, or two shapes that differ.
    """
    targets = ours.state_dict(keep_vars=True)
    with torch.no_grad():
        for name, theirs, *their_name in pairs:
            if name not in targets:
                raise ValueError(f"{type(ours).__name__} has no parameter {name!r} "
                                 f"(mapping from {source})")
            mine = targets[name]
            if mine.shape != theirs.shape:
                what = repr(their_name[0]) if their_name else f"of {source}"
                raise ValueError(f"tensor {what} has shape {tuple(theirs.shape)}, expected "
                                 f"{tuple(mine.shape)} (for {name})")
            (mine if into_ours else theirs).copy_(theirs if into_ours else mine)
