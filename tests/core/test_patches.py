"""patchify / unpatchify: exact round trips, patch order, element order, errors.

Pure rearrangements, so every comparison is exact equality on torch.arange inputs.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from mhsa import patchify, unpatchify

# (batch, channels, height, width, patch_size)
SIZES = [
    (1, 1, 4, 4, 2),
    (2, 3, 6, 4, 2),
    (3, 1, 8, 8, 4),
    (2, 4, 9, 6, 3),
    (1, 2, 5, 5, 5),  # one patch
    (2, 3, 3, 7, 1),  # one pixel per patch
]


def arange_images(b, c, h, w, dtype=torch.int64):
    return torch.arange(b * c * h * w, dtype=dtype).reshape(b, c, h, w)


@pytest.mark.parametrize("b, c, h, w, p", SIZES)
def test_round_trip_is_exact(b, c, h, w, p):
    images = arange_images(b, c, h, w)
    patches = patchify(images, p)
    assert patches.shape == (b, (h // p) * (w // p), p * p * c)
    assert patches.dtype == images.dtype
    assert torch.equal(unpatchify(patches, p, h, w), images)


@given(
    b=st.integers(1, 3), c=st.integers(1, 4), p=st.integers(1, 4),
    gh=st.integers(1, 4), gw=st.integers(1, 4),
)
def test_round_trip_property(b, c, p, gh, gw):
    images = arange_images(b, c, gh * p, gw * p)
    patches = patchify(images, p)
    assert torch.equal(unpatchify(patches, p, gh * p, gw * p), images)
    # and the other way round: patches -> images -> patches
    assert torch.equal(patchify(unpatchify(patches, p, gh * p, gw * p), p), patches)


def test_round_trip_float_and_uint8():
    images = torch.randn(2, 3, 8, 12, generator=torch.Generator().manual_seed(0))
    assert torch.equal(unpatchify(patchify(images, 4), 4, 8, 12), images)
    pixels = (arange_images(1, 3, 4, 6) % 256).to(torch.uint8)
    assert torch.equal(unpatchify(patchify(pixels, 2), 2, 4, 6), pixels)


def test_patch_order_on_one_channel_is_row_major():
    image = torch.arange(16).reshape(1, 1, 4, 4)
    # 0  1 |  2  3
    # 4  5 |  6  7
    # -----+------
    # 8  9 | 10 11
    # 12 13| 14 15
    expected = torch.tensor([[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]])
    assert torch.equal(patchify(image, 2)[0], expected)


def test_channel_varies_fastest_inside_a_patch():
    image = torch.arange(8).reshape(1, 2, 2, 2)  # channel 0: 0..3, channel 1: 4..7
    # pixel (0,0): c0=0, c1=4; pixel (0,1): 1, 5; pixel (1,0): 2, 6; pixel (1,1): 3, 7
    assert patchify(image, 2)[0, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


@pytest.mark.parametrize("b, c, h, w, p", SIZES)
def test_patch_k_is_the_expected_slice(b, c, h, w, p):
    images = arange_images(b, c, h, w)
    patches = patchify(images, p)
    grid_w = w // p
    for k in range(patches.shape[1]):
        row, col = divmod(k, grid_w)
        block = images[:, :, row * p:(row + 1) * p, col * p:(col + 1) * p]  # [b, c, p, p]
        expected = block.permute(0, 2, 3, 1).reshape(b, -1)  # (row, col, channel)
        assert torch.equal(patches[:, k], expected), k


@pytest.mark.parametrize("b, c, h, w, p", SIZES)
def test_agrees_with_torch_unfold(b, c, h, w, p):
    images = arange_images(b, c, h, w, dtype=torch.float64)
    unfolded = F.unfold(images, kernel_size=p, stride=p)  # [b, c*p*p, L], (c, ph, pw) order
    expected = unfolded.reshape(b, c, p * p, -1).permute(0, 3, 2, 1).reshape(b, -1, p * p * c)
    assert torch.equal(patchify(images, p), expected)


@pytest.mark.parametrize("h, w", [(7, 8), (8, 6), (5, 5)])
def test_indivisible_sides_raise_naming_the_sizes(h, w):
    images = torch.zeros(1, 1, h, w)
    with pytest.raises(ValueError, match=rf"multiples of `patch_size` \(4\), got height {h} "
                                         rf"and width {w}"):
        patchify(images, 4)
    with pytest.raises(ValueError, match=rf"`patch_size` \(4\), got height {h} and width {w}"):
        unpatchify(torch.zeros(1, 4, 16), 4, h, w)


@pytest.mark.parametrize("shape", [(8, 8), (1, 8, 8), (1, 1, 1, 8, 8)])
def test_patchify_wrong_rank_raises(shape):
    with pytest.raises(ValueError, match=r"`images` must be 4-D \[batch, channels, height, "
                                         r"width\], got shape"):
        patchify(torch.zeros(shape), 4)


def test_unpatchify_wrong_rank_and_counts_raise():
    with pytest.raises(ValueError, match=r"`patches` must be 3-D .* got shape \(4, 16\)"):
        unpatchify(torch.zeros(4, 16), 4, 8, 8)
    with pytest.raises(ValueError, match=r"has 3 patches but a 8x8 image .* has 2 \* 2 = 4"):
        unpatchify(torch.zeros(1, 3, 16), 4, 8, 8)
    with pytest.raises(ValueError, match=r"last dimension \(20\) must be a multiple of "
                                         r"patch_size \* patch_size \(16\)"):
        unpatchify(torch.zeros(1, 4, 20), 4, 8, 8)


@pytest.mark.parametrize("bad, error, match", [
    (0, ValueError, r"`patch_size` must be a positive int, got 0"),
    (-2, ValueError, r"`patch_size` must be a positive int, got -2"),
    (2.0, TypeError, r"`patch_size` must be an int, got float 2\.0"),
    (True, TypeError, r"`patch_size` must be an int, got bool True"),
])
def test_bad_patch_size_raises(bad, error, match):
    with pytest.raises(error, match=match):
        patchify(torch.zeros(1, 1, 4, 4), bad)


def test_non_tensor_raises():
    with pytest.raises(TypeError, match=r"`images` must be a torch.Tensor, got list"):
        patchify([[1.0]], 1)
    with pytest.raises(TypeError, match=r"`patches` must be a torch.Tensor, got list"):
        unpatchify([[1.0]], 1, 1, 1)
