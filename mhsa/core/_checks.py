"""Input checks shared by the package: one helper per kind of check.

Each check raises before any computation, naming the argument, what it got and what it
expected. The same mistake always gets the same exception type:

- a value of the wrong type (a float where an int is needed, a float tensor where integer
  ids are needed, a mask that is not torch.bool): ``TypeError``;
- a value of the right type out of range, or a tensor of the wrong rank or shape:
  ``ValueError``.

``assert`` is never used for user input (it vanishes under ``python -O``). No check reads
a tensor's values: that would fail on ``meta`` tensors, synchronize with the device, and
break ``torch.compile(fullgraph=True)``.
"""

import operator

import torch

MASK_CONVENTION = "boolean, True = may attend"


def kind_of(x) -> str:
    """What an argument is, for error messages: a tensor's dtype, else its type's name."""
    return str(x.dtype) if isinstance(x, torch.Tensor) else type(x).__name__


def check_int(name: str, n, *, minimum: int = 1) -> int:
    """Return ``n`` as an int; ``TypeError`` unless an integer, ``ValueError`` below ``minimum``.

    Python ints and anything with ``__index__`` (numpy and 0-d torch integers) pass, and
    so do the symbolic sizes of ``torch.compile``; ``bool`` and floats (even ``16.0``) are
    refused.
    """
    if isinstance(n, bool) or not isinstance(n, (int, torch.SymInt)) \
            and not hasattr(n, "__index__"):
        raise TypeError(f"`{name}` must be an int, got {type(n).__name__} {n!r}")
    if not isinstance(n, (int, torch.SymInt)):  # torch.SymInt: a size torch.compile traces
        n = operator.index(n)
    if n < minimum:
        kind = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"`{name}` must be {kind}, got {n}")
    return n


def check_positive_int(name: str, n) -> int:
    """:func:`check_int` with ``minimum=1``: ``TypeError`` for a non-int, ``ValueError`` below 1."""
    return check_int(name, n, minimum=1)


def check_probability(name: str, p) -> float:
    """Return ``p``; ``TypeError`` unless a real number, ``ValueError`` outside ``[0, 1)``."""
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise TypeError(f"`{name}` must be a float in [0, 1), got {type(p).__name__} {p!r}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"`{name}` must be in [0, 1), got {p}")
    return float(p)


def check_tensor(name: str, x, *, min_rank: int = 0) -> None:
    """``TypeError`` unless ``x`` is a floating tensor; ``ValueError`` if its rank < ``min_rank``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"`{name}` must be a floating-point tensor, got {x.dtype}")
    if min_rank:  # every rank is >= 0: no call for the default
        check_rank(name, x, min_rank=min_rank)


def check_int_tensor(name: str, x, what: str = "an integer tensor") -> None:
    """``TypeError`` unless ``x`` is a tensor of an integer dtype (bool is not an integer)."""
    if not isinstance(x, torch.Tensor) or x.is_floating_point() or x.is_complex() \
            or x.dtype == torch.bool:
        raise TypeError(f"`{name}` must be {what}, got {kind_of(x)}")


def check_rank(name: str, x, *, rank: int | None = None, min_rank: int = 0,
               layout: str | None = None) -> None:
    """``ValueError`` unless ``x.dim() == rank`` (when given) and ``x.dim() >= min_rank``.

    ``layout`` names the dimensions for the message, e.g. ``"[batch, n_q, embed_dim]"``.
    """
    if (rank is not None and x.dim() != rank) or x.dim() < min_rank:
        expected = (f"{rank}-D" if rank is not None else f"at least {min_rank}-D") + \
            (f" {layout}" if layout else "")
        raise ValueError(f"`{name}` must be {expected}, got shape {tuple(x.shape)}")


def check_shape(name: str, x, layout: tuple, last: int) -> None:
    """Raise unless ``x`` is a floating tensor with ``len(layout)`` dims and last dim ``last``.

    ``layout`` names the dimensions for the message, e.g. ``("batch", "n_q", "embed_dim")``.
    """
    check_tensor(name, x)
    if x.dim() != len(layout) or x.shape[-1] != last:
        expected = f"{len(layout)}-D [{', '.join(layout)}]"
        if x.dim() == len(layout):
            expected += f" with {layout[-1]}={last}"
        raise ValueError(f"`{name}` must be {expected}, got shape {tuple(x.shape)}")


def check_broadcast(name: str, x, target: tuple, what: str) -> None:
    """``ValueError`` unless ``x`` broadcasts to ``target`` without making it larger.

    The rule is ``torch.broadcast_shapes(x.shape, target) == target``: every dimension of
    ``x``, aligned right, is 1 or equal to ``target``'s, and ``x`` has at most
    ``len(target)`` dimensions. It is written out in plain Python because
    ``torch.broadcast_shapes`` costs about 10x more, and this check runs on every call
    (``tests/core/test_checks.py`` checks that both agree).
    """
    target = tuple(target)
    ok = x.dim() <= len(target) and all(
        m == 1 or m == t for m, t in zip(reversed(x.shape), reversed(target)))
    if not ok:
        raise ValueError(f"`{name}` of shape {tuple(x.shape)} does not broadcast to {what} "
                         f"{target}")


def check_bool_mask(name: str, mask, target_shape: tuple) -> None:
    """``TypeError`` unless ``mask`` is torch.bool; ``ValueError`` unless it broadcasts to ``target_shape``.

    Broadcasting may only add or stretch size-1 dimensions of the mask; the mask may not
    make the result larger than ``target_shape`` (no silent broadcast of the data).
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"`{name}` must be a torch.Tensor of dtype torch.bool ({MASK_CONVENTION}), "
            f"got {type(mask).__name__}"
        )
    if mask.dtype != torch.bool:
        raise TypeError(
            f"`{name}` must be torch.bool ({MASK_CONVENTION}), got {mask.dtype}. "
            "Convert an additive float mask (0 = keep, -inf or a large negative number, "
            "<= -1e4, = block) with "
            "`mhsa.mask_from_additive(mask)`, or a torch.nn.MultiheadAttention mask "
            "(True = ignore) with `mhsa.mask_from_torch_mha(mask)`"
        )
    check_broadcast(name, mask, target_shape, "the attention scores' shape [..., n_q, n_k]")


def check_divisible(name: str, n: int, divisor_name: str, divisor: int) -> None:
    """``ValueError`` unless ``divisor`` divides ``n`` (e.g. a width into heads)."""
    if n % divisor:
        raise ValueError(f"`{name}` ({n}) must be divisible by `{divisor_name}` ({divisor})")


def check_attention_inputs(query, key, value, attn_mask, *, widths: tuple, num_heads: int,
                           dtype: torch.dtype, n_cached: int = 0) -> None:
    """The checks of an attention module's ``forward``, with messages naming the argument.

    ``key is query`` (and ``value is key``) means self-attention: checked once. ``widths``
    are the expected last dimensions ``(embed_dim, kdim, vdim)``; ``n_cached`` positions
    held by a cache come before the new keys in ``attn_mask``'s last dimension.
    """
    inputs = [("query", query, "n_q", "embed_dim", widths[0])]
    one_tensor = key is query and value is query  # self-attention: no sizes to compare
    if one_tensor and not widths[0] == widths[1] == widths[2]:
        raise ValueError(f"self-attention (key=None) reads `query` as key and value: it needs "
                         f"kdim == vdim == embed_dim, got {widths[1]}, {widths[2]} and "
                         f"{widths[0]}; pass `key` and `value`")
    if key is not query:
        inputs.append(("key", key, "n_k", "kdim", widths[1]))
    if value is not query:
        inputs.append(("value", value, "n_k", "vdim", widths[2]))
    for name, x, n, width, size in inputs:
        if isinstance(x, torch.Tensor) and x.dtype == dtype and x.dim() == 3 \
                and x.shape[-1] == size:  # fine (the module's dtype is floating): no calls
            continue
        check_shape(name, x, ("batch", n, width), size)
        if x.dtype != dtype:
            raise TypeError(f"`{name}` must have the module's dtype {dtype}, got {x.dtype}")
    if not one_tensor and not query.shape[0] == key.shape[0] == value.shape[0]:
        raise ValueError(
            "`query`, `key` and `value` must have the same batch size, got shapes "
            f"{tuple(query.shape)}, {tuple(key.shape)} and {tuple(value.shape)}")
    if not one_tensor and key.shape[1] != value.shape[1]:
        raise ValueError(
            f"`key` and `value` must have the same length n_k, got {key.shape[1]} "
            f"(key {tuple(key.shape)}) and {value.shape[1]} (value {tuple(value.shape)})")
    if attn_mask is not None:
        scores = (query.shape[0], num_heads, query.shape[1], n_cached + key.shape[1])
        check_bool_mask("attn_mask", attn_mask, scores)
        check_same_device("attn_mask", attn_mask, query)


def check_same_dtype_and_device(first: str, a: torch.Tensor, second: str,
                                b: torch.Tensor) -> None:
    """``TypeError`` unless ``a`` and ``b`` share one dtype, ``ValueError`` unless one device."""
    if b.dtype != a.dtype:
        raise TypeError(f"`{first}` and `{second}` must share one dtype, got {a.dtype} and "
                        f"{b.dtype}")
    if b.device != a.device:
        raise ValueError(f"`{first}` is on {a.device} but `{second}` on {b.device}")


def check_same_device(name: str, mask: torch.Tensor, like: torch.Tensor,
                      like_name: str = "query") -> None:
    """``ValueError`` unless ``mask`` is on the device of ``like`` (the argument ``like_name``)."""
    if mask.device != like.device:
        raise ValueError(f"`{name}` is on {mask.device} but `{like_name}` is on {like.device}; "
                         "build the mask on the same device")
