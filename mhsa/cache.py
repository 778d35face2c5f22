"""The key-value cache: keys and values of the tokens a decoder has already read.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim, i query positions, j key
positions. Masks are boolean, True = may attend.
"""

import torch

from ._checks import kind_of


class KVCache:
    """Keys and values that a causal self-attention has computed so far, per head.

    A decoder writes one token per step, and under the causal mask a token never sees
    later ones, so the keys and values of earlier tokens never change. Without a cache
    every step projects the whole prefix again: writing ``n`` tokens projects
    ``1 + 2 + ... + n`` of them. With one, each step projects only its new tokens,
    appends their keys and values here, and attends over all of them.

    Use one cache per self-attention module and per batch of sequences::

        cache = mhsa.KVCache()
        steps = [attn(x[:, t:t + 1], cache=cache)[0] for t in range(x.shape[1])]
        torch.cat(steps, dim=1)  # equals attn(x, is_causal=True)[0]

    :meth:`mhsa.MultiHeadAttention.forward` calls :meth:`update`; call :meth:`reset` (or
    make a new cache) to start other sequences.

    Attributes:
        key: cached keys ``[batch, num_heads, n_cached, head_dim]``, or None while empty.
        value: cached values ``[batch, num_heads, n_cached, head_dim]``, or None while empty.

    Source: the decoder of Vaswani et al. 2017, "Attention Is All You Need", section 3.2.3
    (a position attends to the positions up to and including itself), run incrementally;
    Pope et al. 2022, "Efficiently Scaling Transformer Inference", for the cache's costs.
    """

    def __init__(self):
        self.key: torch.Tensor | None = None
        self.value: torch.Tensor | None = None

    def __len__(self) -> int:
        """Number of cached token positions ``n_cached`` (0 while empty)."""
        return 0 if self.key is None else self.key.shape[-2]

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new keys and values; return every cached key and value.

        Args:
            key: keys of the new tokens ``[batch, num_heads, n_new, head_dim]``, floating.
            value: their values, same shape, dtype and device as ``key``.

        Returns:
            ``(keys, values)``, each ``[batch, num_heads, n_cached + n_new, head_dim]``: the
            earlier tokens first, the new ones last (positions ``n_cached`` onwards).

        Raises:
            TypeError: ``key`` or ``value`` is not a floating tensor, their dtypes differ,
                or differ from the cached ones.
            ValueError: ``key`` is not 4-D, ``value`` has another shape, or batch, heads,
                head_dim or device differ from what is cached (a cache serves one
                attention module and one batch of sequences; :meth:`reset` it first).
        """
        self._check(key, value)
        if self.key is not None:
            key = torch.cat([self.key, key], dim=-2)  # [b, h, n_cached + n_new, d]
            value = torch.cat([self.value, value], dim=-2)
        self.key, self.value = key, value
        return key, value

    def reset(self) -> None:
        """Empty the cache, to decode other sequences."""
        self.key = self.value = None

    def __repr__(self) -> str:
        shape = None if self.key is None else tuple(self.key.shape)
        return f"KVCache(n_cached={len(self)}, key shape={shape})"

    def _check(self, key, value) -> None:
        for name, x in (("key", key), ("value", value)):
            if not isinstance(x, torch.Tensor) or not x.is_floating_point():
                got = kind_of(x)
                raise TypeError(f"`{name}` must be a floating-point tensor, got {got}")
        if key.dim() != 4:
            raise ValueError("`key` must be 4-D [batch, num_heads, n_new, head_dim], got shape "
                             f"{tuple(key.shape)}")
        if value.shape != key.shape:
            raise ValueError(f"`value` must have the shape of `key` {tuple(key.shape)}, got "
                             f"{tuple(value.shape)}")
        if value.dtype != key.dtype:
            raise TypeError(f"`key` and `value` must share one dtype, got {key.dtype} and "
                            f"{value.dtype}")
        if value.device != key.device:
            raise ValueError(f"`key` is on {key.device} but `value` on {value.device}")
        if self.key is None:
            return
        b, h, _, d = self.key.shape
        if (key.shape[0], key.shape[1], key.shape[3]) != (b, h, d):
            raise ValueError(
                f"new keys {tuple(key.shape)} do not continue the cache's [{b}, {h}, "
                f"n_cached={len(self)}, {d}]: batch, num_heads and head_dim must match "
                "(one cache per attention module and batch; call reset() to start over)")
        if key.dtype != self.key.dtype:
            raise TypeError(f"new keys are {key.dtype}, the cache holds {self.key.dtype}")
        if key.device != self.key.device:
            raise ValueError(f"new keys are on {key.device}, the cache is on {self.key.device}")
