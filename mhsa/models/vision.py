"""A small vision transformer (ViT): attention over image patches instead of words.

Legend: b batch, c channels, gh / gw patch-grid rows / columns, ph / pw row / column in a
patch (see :mod:`mhsa.core.patches`); n tokens (``1 + gh * gw``: the class token, then the
patches in row-major order), h heads, d head_dim, e embed_dim, i query / j key positions.

The pipeline, as in Dosovitskiy et al. 2021, section 3.1, equations (1)-(4)::

    patches = patchify(images, p)                      # [b, gh*gw, ph*pw*c]
    z = cat(class_token, patch_embed(patches)) + pos   # [b, n, e]          (1)
    z = encoder(dropout(z))                            # pre-norm layers     (2), (3)
    logits = head(final_norm(z)[:, 0])                 # class token only    (4)
"""

import torch
from torch import nn

from mhsa.attention.recording import attention_by_layer
from mhsa.core._checks import check_positive_int, kind_of
from mhsa.core.patches import patchify
from mhsa.models.encoder_decoder import Encoder


class VisionTransformer(nn.Module):
    """Classify images from the class token after a stack of pre-norm encoder layers.

    Each image is cut into ``p x p`` patches (:func:`mhsa.core.patches.patchify`); a linear
    layer maps each flattened patch to an ``embed_dim`` vector (the patch "word"); a learned
    class token is put in front; learned position embeddings, one per position, are added
    (without them attention could not tell patches apart by place); a stack of
    :class:`mhsa.layers.transformer.EncoderLayer` with ``norm_first=True`` (the ViT choice) and a final
    LayerNorm (:class:`mhsa.models.encoder_decoder.Encoder`) mixes the tokens; a linear head reads the
    class token. No mask: every token may attend to every token.

    Args:
        image_size: ``height`` (square images) or ``(height, width)``, in pixels; each a
            multiple of ``patch_size``.
        patch_size: side ``p`` of the square patches, in pixels.
        in_channels: number of image channels ``c`` (1 for grey, 3 for RGB).
        num_classes: number of output classes.
        embed_dim: token width ``e``; must be divisible by ``num_heads``.
        num_heads: heads per layer ``h``; ``head_dim = embed_dim // num_heads``.
        ff_dim: hidden width of each layer's feed-forward network.
        num_layers: number of encoder layers.
        dropout: dropout after adding the position embeddings and inside every layer,
            in ``[0, 1)``; training mode only.
        activation: feed-forward activation, ``"gelu"`` (ViT) or ``"relu"``.
        layer_norm_eps: ``eps`` of every LayerNorm.
        device, dtype: where and in which floating dtype to create the parameters.

    Attributes:
        patch_embed: ``nn.Linear(p * p * c, e)``, one flattened patch to one token.
        class_token: learned ``[1, 1, e]`` vector put in front of the patches.
        pos_embed: learned ``[1, n, e]`` position embeddings, ``n = 1 + num_patches``.
        dropout: ``nn.Dropout`` applied after adding the position embeddings.
        encoder: :class:`mhsa.models.encoder_decoder.Encoder` (``layers``, then the final ``norm``).
        head: ``nn.Linear(e, num_classes)``, reads the class token.
        image_size: ``(height, width)`` in pixels.
        grid_size: ``(gh, gw)``, patches down and across.
        num_patches: ``gh * gw``.
        patch_size, in_channels: as given.

    Shape:
        ``images``: ``[b, c, height, width]`` floating ->
        logits ``[b, num_classes]``.

    Raises:
        TypeError: at construction, a size that is not an int.
        ValueError: at construction, a size below 1, an image side that is not a multiple
            of ``patch_size``, ``embed_dim`` not divisible by ``num_heads``, ``dropout``
            outside ``[0, 1)``, or an unknown ``activation``.

    Source: Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words: Transformers for
    Image Recognition at Scale", section 3.1 (patch embedding, class token, position
    embeddings, pre-norm encoder, head); Appendix B.1 (dropout after the position
    embeddings).
    """

    def __init__(self, image_size, patch_size, in_channels, num_classes, *, embed_dim=48,
                 num_heads=4, ff_dim=96, num_layers=2, dropout=0.1, activation="gelu",
                 layer_norm_eps=1e-5, device=None, dtype=None):
        super().__init__()
        sides = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        if len(sides) != 2:
            raise ValueError(f"`image_size` must be an int or (height, width), got {image_size!r}")
        height, width = sides
        for name, n in (("height", height), ("width", width), ("patch_size", patch_size),
                        ("in_channels", in_channels), ("num_classes", num_classes),
                        ("embed_dim", embed_dim)):
            check_positive_int(name, n)
        if height % patch_size or width % patch_size:
            raise ValueError(f"`image_size` sides must be multiples of `patch_size` "
                             f"({patch_size}), got height {height} and width {width}")
        self.image_size, self.patch_size, self.in_channels = (height, width), patch_size, in_channels
        self.grid_size = (height // patch_size, width // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        kw = {"device": device, "dtype": dtype}
        self.patch_embed = nn.Linear(patch_size * patch_size * in_channels, embed_dim, **kw)
        self.class_token = nn.Parameter(torch.zeros(1, 1, embed_dim, **kw))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + self.num_patches, embed_dim, **kw))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.class_token, std=0.02)
        self.dropout = nn.Dropout(dropout)
        self.encoder = Encoder(embed_dim, num_heads, ff_dim, num_layers, dropout=dropout,
                               activation=activation, norm_first=True,
                               layer_norm_eps=layer_norm_eps, **kw)
        self.head = nn.Linear(embed_dim, num_classes, **kw)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, num_classes]`` for ``images`` ``[batch, in_channels, height, width]``.

        Raises:
            TypeError: ``images`` is not a floating tensor.
            ValueError: ``images`` is not ``[batch, in_channels, height, width]`` with this
                model's sizes.
        """
        self._check_images(images)
        tokens = self.patch_embed(patchify(images, self.patch_size))  # [b, gh*gw, e]
        cls = self.class_token.expand(tokens.shape[0], -1, -1)  # [b, 1, e]
        z = self.dropout(torch.cat([cls, tokens], dim=1) + self.pos_embed)  # [b, n, e]
        z = self.encoder(z)  # pre-norm layers, then the final LayerNorm
        return self.head(z[:, 0])  # the class token's final vector -> [b, num_classes]

    @torch.no_grad()
    def attention_weights(self, images: torch.Tensor) -> torch.Tensor:
        """Every layer's attention weights for ``images``, stacked: ``[layers, b, h, n, n]``.

        Runs one forward pass inside :func:`mhsa.record_attention`. Token 0 is the class
        token and token ``1 + k`` is patch ``k`` (row-major), so
        ``weights[l, :, :, 0, 1:]`` is how much the class token attends to each patch in
        layer ``l``, ``[b, h, gh * gw]``; reshape it onto the grid with
        ``einops.rearrange(..., "b h (gh gw) -> b h gh gw", gh=gh)``. Call ``eval()`` first
        for weights without dropout noise in the layers below. Runs without gradients.

        Args:
            images: ``[batch, in_channels, height, width]``, floating.

        Returns:
            ``[num_layers, batch, num_heads, n, n]`` with ``n = 1 + num_patches``; queries on
            dimension 3, keys on dimension 4; every row sums to 1 (no mask).

        Raises:
            TypeError: ``images`` is not a floating tensor.
            ValueError: ``images`` does not have this model's sizes.
        """
        return attention_by_layer(self, "encoder.layers", images)

    def _check_images(self, images) -> None:
        if not isinstance(images, torch.Tensor) or not images.is_floating_point():
            got = kind_of(images)
            raise TypeError(f"`images` must be a floating-point torch.Tensor, got {got}")
        expected = (self.in_channels, *self.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                "`images` must be [batch, in_channels, height, width] = [batch, "
                f"{', '.join(map(str, expected))}], got shape {tuple(images.shape)}")

    def extra_repr(self) -> str:
        return (f"image_size={self.image_size}, patch_size={self.patch_size}, "
                f"grid_size={self.grid_size}, in_channels={self.in_channels}")
