"""VisionTransformer: shapes, wiring against an independent convolutional patch embedding,
attention weights, permutation behaviour, errors, and a short training run.

Tolerances: torch.testing.assert_close's float32 defaults (1.3e-6 relative, 1e-5 absolute) for
single steps; whole-model comparisons derive theirs from the size of the sums (TOL below).
"""

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange

import mhsa
from mhsa import VisionTransformer, patchify, unpatchify

from references import plain_explicit_attention
from tolerances import worst_case

# make_model: width 16, head_dim 4, 7 tokens (6 patches and the class token), feed-forward 32,
# 2 pre-norm layers. The patch embedding sums 4 * 4 * 3 = 48 products; each layer one attention
# (16 + 4 + 7 + 16), a feed-forward (16 + 32) and two LayerNorms (mean and variance over 16);
# then a last LayerNorm and the classifier over 16.
TOL = worst_case(torch.float32, 48 + 2 * ((16 + 4 + 7 + 16) + (16 + 32) + 2 * 2 * 16) + 2 * 16 + 16)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one thread is as fast, and avoids oversubscription on a shared CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_model(seed=0, **overrides):
    torch.manual_seed(seed)
    kw = {"image_size": (8, 12), "patch_size": 4, "in_channels": 3, "num_classes": 5,
          "embed_dim": 16, "num_heads": 4, "ff_dim": 32, "num_layers": 2, "dropout": 0.0}
    kw.update(overrides)
    return VisionTransformer(**kw).eval()


def images_for(model, batch=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, model.in_channels, *model.image_size, generator=g)


@pytest.mark.parametrize("image_size, patch_size, channels, classes, layers, grid", [
    (8, 2, 1, 10, 2, (4, 4)),
    ((8, 12), 4, 3, 5, 1, (2, 3)),
    ((6, 4), 2, 2, 3, 3, (3, 2)),
    (5, 5, 1, 2, 1, (1, 1)),
])
def test_output_and_attention_shapes(image_size, patch_size, channels, classes, layers, grid):
    model = make_model(image_size=image_size, patch_size=patch_size, in_channels=channels,
                       num_classes=classes, num_layers=layers)
    images = images_for(model, batch=2)
    assert model.grid_size == grid
    assert model.num_patches == grid[0] * grid[1]
    assert model(images).shape == (2, classes)
    n = 1 + grid[0] * grid[1]
    assert model.attention_weights(images).shape == (layers, 2, 4, n, n)


def test_forward_matches_a_convolutional_patch_embedding():
    """A stride-p convolution is the usual ViT patch embedding; same weights, same logits."""
    model = make_model()
    images = images_for(model)
    p = model.patch_size
    kernel = rearrange(model.patch_embed.weight, "e (ph pw c) -> e c ph pw", ph=p, pw=p)
    grid = F.conv2d(images, kernel, model.patch_embed.bias, stride=p)  # [b, e, gh, gw]
    tokens = rearrange(grid, "b e gh gw -> b (gh gw) e")
    cls = model.class_token.expand(len(images), -1, -1)
    z = torch.cat([cls, tokens], dim=1) + model.pos_embed
    for layer in model.encoder.layers:
        z = layer(z)
    expected = model.head(model.encoder.norm(z)[:, 0])
    torch.testing.assert_close(model(images), expected)


def test_attention_weights_are_the_recorded_ones_and_rows_sum_to_one():
    model = make_model()
    images = images_for(model)
    logits = model(images)
    with mhsa.record_attention(model) as record:
        recorded_logits = model(images)
    weights = model.attention_weights(images)
    torch.testing.assert_close(recorded_logits, logits, **TOL)
    for k in range(2):
        assert torch.equal(weights[k], record[f"encoder.layers.{k}.self_attn"])
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    assert not weights.requires_grad


def test_first_layer_weights_match_attention_computed_by_hand():
    model = make_model()
    images = images_for(model)
    z = torch.cat([model.class_token.expand(3, -1, -1),
                   model.patch_embed(patchify(images, model.patch_size))], 1) + model.pos_embed
    layer = model.encoder.layers[0]
    x = layer.norm1(z)  # pre-norm: attention reads the normalized tokens
    _, expected = plain_explicit_attention(layer.self_attn, x)
    torch.testing.assert_close(model.attention_weights(images)[0], expected)


def shuffle_patches(images, patch_size, order):
    h, w = images.shape[-2:]
    return unpatchify(patchify(images, patch_size)[:, order], patch_size, h, w)


def test_without_position_embeddings_patch_order_does_not_matter():
    """The class token reads a set of patches: only the position embeddings carry place."""
    model = make_model()
    images = images_for(model)
    order = torch.tensor([4, 0, 5, 2, 1, 3])
    shuffled = shuffle_patches(images, model.patch_size, order)
    assert not torch.equal(shuffled, images)
    assert not torch.allclose(model(shuffled), model(images), atol=100 * TOL["atol"])
    with torch.no_grad():
        model.pos_embed.zero_()
    torch.testing.assert_close(model(shuffled), model(images), **TOL)


def test_training_mode_dropout_and_eval_determinism():
    model = make_model(dropout=0.5)
    images = images_for(model)
    assert torch.equal(model(images), model(images))  # eval: deterministic
    model.train()
    torch.manual_seed(0)
    assert not torch.equal(model(images), model(images))


@pytest.mark.parametrize("shape, match", [
    ((2, 3, 8, 8), r"\[batch, 3, 8, 12\], got shape \(2, 3, 8, 8\)"),
    ((2, 1, 8, 12), r"\[batch, 3, 8, 12\], got shape \(2, 1, 8, 12\)"),
    ((3, 8, 12), r"\[batch, 3, 8, 12\], got shape \(3, 8, 12\)"),
])
def test_wrong_image_shape_raises(shape, match):
    model = make_model()
    with pytest.raises(ValueError, match=match):
        model(torch.zeros(shape))
    with pytest.raises(ValueError, match=match):
        model.attention_weights(torch.zeros(shape))


def test_integer_images_raise():
    with pytest.raises(TypeError, match=r"`images` must be a floating-point torch.Tensor, "
                                        r"got torch.int64"):
        make_model()(torch.zeros(1, 3, 8, 12, dtype=torch.int64))


@pytest.mark.parametrize("overrides, match", [
    ({"image_size": (8, 10)}, r"multiples of `patch_size` \(4\), got height 8 and width 10"),
    ({"image_size": (8, 8, 8)}, r"`image_size` must be an int or \(height, width\)"),
    ({"patch_size": 0}, r"`patch_size` must be a positive int, got 0"),
    ({"embed_dim": 30, "num_heads": 4}, r"`embed_dim` \(30\) must be divisible by `num_heads`"),
    ({"activation": "tanh"}, r"`activation` must be 'relu' or 'gelu'"),
])
def test_bad_construction_raises(overrides, match):
    with pytest.raises(ValueError, match=match):
        make_model(**overrides)


def quadrant_task(n, generator):
    """8x8 noise with one bright 4x4 quadrant; the label is which quadrant (0-3, row-major).

    Every bright patch looks alike wherever it is, so the model must use the position
    embeddings to tell the classes apart.
    """
    images = 0.1 * torch.randn(n, 1, 8, 8, generator=generator)
    labels = torch.randint(0, 4, (n,), generator=generator)
    for k, label in enumerate(labels.tolist()):
        row, col = 4 * (label // 2), 4 * (label % 2)
        images[k, 0, row:row + 4, col:col + 4] += 1.0
    return images, labels


def test_short_training_run_lowers_the_loss():
    g = torch.Generator().manual_seed(0)
    train_x, train_y = quadrant_task(256, g)
    test_x, test_y = quadrant_task(256, g)
    model = make_model(image_size=8, patch_size=2, in_channels=1, num_classes=4,
                       num_layers=1)  # eval mode
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    with torch.no_grad():
        first = F.cross_entropy(model(test_x), test_y).item()
    model.train()
    for step in range(80):
        batch = torch.arange(step * 32, (step + 1) * 32) % 256
        loss = F.cross_entropy(model(train_x[batch]), train_y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        logits = model(test_x)
    last = F.cross_entropy(logits, test_y).item()
    accuracy = (logits.argmax(-1) == test_y).float().mean().item()
    assert last < 0.5 * first, (first, last)
    assert accuracy > 0.8, accuracy
