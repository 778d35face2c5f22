"""Answers to chapter 7's exercises (attention over image patches), computed with mhsa."""

import torch

from mhsa.core.patches import patchify, unpatchify
from mhsa.models.vision import VisionTransformer


def tokens_for_vit_base() -> float:
    """07.1: tokens (patches plus the class token) of a 224x224 RGB image with 16x16 patches."""
    return patchify(torch.zeros(1, 3, 224, 224), 16).shape[1] + 1


def patch_holding_pixel() -> float:
    """07.2: index of the 2x2 patch of an 8x8 image that holds the pixel at row 5, column 6."""
    image = torch.zeros(1, 1, 8, 8)
    image[0, 0, 5, 6] = 1.0
    patch, _ = patchify(image, 2)[0].nonzero()[0]
    return patch.item()


def vit_base_patch_embedding_parameters() -> float:
    """07.3: weights plus biases of ViT-Base/16's patch embedding (RGB, p = 16, e = 768)."""
    model = VisionTransformer(224, 16, 3, 1000, embed_dim=768, num_heads=12, ff_dim=3072,
                              num_layers=1)
    return sum(p.numel() for p in model.patch_embed.parameters())


def table_cells_with_patch_size_4() -> float:
    """07.4: cells of one head's attention table for an 8x8 digit cut into 4x4 patches."""
    n = patchify(torch.zeros(1, 1, 8, 8), 4).shape[1] + 1  # patches + class token
    return n * n


def shuffled_patch_accuracy(model: VisionTransformer, images: torch.Tensor, labels: torch.Tensor,
                            patch_size: int, seed: int = 1) -> float:
    """07.5: accuracy of a trained model on ``images`` [b, c, h, w] whose patches are all permuted the same way.

    The permutation is ``torch.randperm(n_patches)`` from a generator seeded with ``seed``, as in the solution.
    """
    patches = patchify(images, patch_size)
    order = torch.randperm(patches.shape[1], generator=torch.Generator().manual_seed(seed))
    shuffled = unpatchify(patches[:, order.to(images.device)], patch_size, *images.shape[-2:])
    model.eval()
    with torch.no_grad():
        return (model(shuffled).argmax(-1) == labels).float().mean().item()


def accuracy_without_positions(model: VisionTransformer, images: torch.Tensor, labels: torch.Tensor) -> float:
    """07.5: accuracy of a trained model with its position embeddings set to zero (restored afterwards)."""
    model.eval()
    with torch.no_grad():
        saved = model.pos_embed.clone()
        try:
            model.pos_embed.zero_()
            return (model(images).argmax(-1) == labels).float().mean().item()
        finally:
            model.pos_embed.copy_(saved)


ANSWERS = {
    "07.1": tokens_for_vit_base,
    "07.2": patch_holding_pixel,
    "07.3": vit_base_patch_embedding_parameters,
    "07.4": table_cells_with_patch_size_4,
}
