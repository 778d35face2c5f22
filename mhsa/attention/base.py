"""The contract every attention module of ``mhsa`` keeps: :class:`Attention`.

Layers, :func:`mhsa.record_attention`, caches and decoding rely on this contract and on
nothing else of a variant. A new variant is a new file in ``mhsa/attention/`` with a new
subclass; it touches no other variant.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim, i query positions, j key
positions. Masks are boolean, True = may attend.
"""

from torch import nn

from mhsa.core.cache import KVCache


class Attention(nn.Module):
    """Base class of the attention variants: what layers, recording and decoding rely on.

    A subclass sets the attributes and keeps the call contract below; everything else
    (projections, positions, windows, grouping of heads) is its own business.

    Attributes:
        embed_dim: width ``e`` of the input and of the output.
        num_heads: number of query heads ``h`` (the weights' second dimension).

    The call contract of ``forward``:
        - inputs ``[batch, n_q, embed_dim]`` first (self-attention reads one tensor), the
          rest keyword-only;
        - ``attn_mask``: optional torch.bool mask, **True = may attend**, broadcastable to
          ``[batch, num_heads, n_q, n_k]``;
        - ``cache``: optional, an object from :meth:`new_cache`; the module writes the
          keys and values of the new positions to it and attends over every kept one;
        - ``need_weights``: when True the weights are computed explicitly and returned;
        - returns ``(output, weights)``: ``output`` ``[batch, n_q, embed_dim]``,
          ``weights`` ``[batch, num_heads, n_q, n_k]`` (after softmax, before dropout) or
          None when ``need_weights`` is False.

    :func:`mhsa.record_attention` calls ``forward`` with ``need_weights=True`` through a
    forward hook, so a variant that keeps this contract is recorded without knowing it.

    Source: Vaswani et al. 2017, "Attention Is All You Need", section 3.2 (the attention
    function and its multi-head form).
    """

    embed_dim: int
    num_heads: int

    def new_cache(self, *, capacity: int | None = None) -> KVCache:
        """An empty cache that this module's ``forward`` accepts as ``cache``.

        Decoding loops call this for every attention module and never need to know the
        variant. The default is a :class:`mhsa.KVCache` of per-head keys and values; a
        variant that caches something else (a compressed latent, say) returns its own
        object with ``len()`` (positions seen) and ``nbytes``.

        Args:
            capacity: positions to allocate at the first write, ``int >= 1``, or None to
                grow as needed (see :class:`mhsa.KVCache`).

        Raises:
            TypeError, ValueError: a ``capacity`` that :class:`mhsa.KVCache` refuses.
        """
        return KVCache(capacity=capacity)

    def pack_projections(self, packed: bool = True) -> None:
        """Keep (or drop) a faster weight layout for inference; the default keeps nothing.

        ``mhsa.core._packing.packed_projections`` calls this around a decoding loop.
        A variant that overrides it must give the same outputs up to float rounding.
        """
