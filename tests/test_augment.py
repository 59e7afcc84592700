"""Batched augmentations: each function does exactly what its docstring says, on whole batches."""

import pytest
import torch
import torch.nn.functional as F
from torchvision.transforms import v2

from tricklab.core.errors import TrickLabError
from tricklab.data.augment import (
    channel_stats,
    crop_at,
    crop_random,
    cutout,
    cutout_at,
    cutout_pixels,
    flip_alternating,
    flip_at,
    flip_random,
    normalize,
    pad,
    window_view,
    zero_pixels,
)


def random_images(n=64, size=8, channels=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, channels, size, size), dtype=torch.uint8, generator=generator)


def test_flip_random_mirrors_exactly_about_half_the_images():
    images = random_images(n=1000)
    out = flip_random(images, torch.Generator().manual_seed(1))
    mirrored = (out == images.flip(-1)).flatten(1).all(1)
    unchanged = (out == images).flatten(1).all(1)
    assert torch.all(mirrored ^ unchanged)  # random images are never symmetric
    assert 0.44 < mirrored.float().mean() < 0.56


def test_flip_at_mirrors_only_marked_images():
    images = random_images(n=4)
    out = flip_at(images, torch.tensor([True, False, False, True]))
    assert torch.equal(out[[0, 3]], images[[0, 3]].flip(-1))
    assert torch.equal(out[[1, 2]], images[[1, 2]])


def test_flip_alternating_mirrors_base_images_on_even_epochs_and_the_others_on_odd_epochs():
    images = random_images(n=6)
    base_flip = torch.tensor([True, False, True, False, False, True])
    for epoch in range(4):
        mirror = base_flip if epoch % 2 == 0 else ~base_flip
        assert torch.equal(flip_alternating(images, epoch, base_flip), flip_at(images, mirror))


def test_pad_reflect_matches_torch_reflect_padding():
    images = random_images(n=5)
    expected = F.pad(images.float(), (3, 3, 3, 3), mode="reflect").to(torch.uint8)
    assert torch.equal(pad(images, 3, "reflect"), expected)


def test_pad_zeros_adds_a_black_border():
    images = random_images(n=5)
    padded = pad(images, 2, "zeros")
    assert padded.shape == (5, 3, 12, 12)
    assert torch.equal(padded[..., 2:-2, 2:-2], images)
    assert padded.sum() == images.sum()


def test_pad_with_zero_translate_returns_the_images():
    images = random_images(n=2)
    assert pad(images, 0) is images


def test_crop_of_padded_image_is_the_original_shifted_by_the_offset():
    images = random_images(n=25, size=8)
    padded = pad(images, 2, "zeros")
    top = torch.arange(25) // 5  # every (top, left) in 0..4 once
    left = torch.arange(25) % 5
    out = crop_at(padded, 8, top, left)
    for k in range(25):
        dy, dx = int(top[k]) - 2, int(left[k]) - 2  # output pixel (i, j) shows input (i+dy, j+dx)
        rows, cols = slice(max(0, -dy), 8 - max(0, dy)), slice(max(0, -dx), 8 - max(0, dx))
        source = images[k, :, max(0, dy) : 8 + min(0, dy), max(0, dx) : 8 + min(0, dx)]
        assert torch.equal(out[k, :, rows, cols], source)
        assert out[k].sum() == source.sum()  # outside the valid region only black padding


def test_crop_works_on_sliced_and_channels_last_batches():
    padded = pad(random_images(n=9, size=6), 2, "reflect")
    top, left = torch.arange(8) % 5, torch.arange(8) // 2
    expected = crop_at(padded[1:].contiguous(), 6, top, left)
    assert torch.equal(crop_at(padded[1:], 6, top, left), expected)  # storage offset
    strided = padded.contiguous(memory_format=torch.channels_last)[1:]
    assert torch.equal(crop_at(strided, 6, top, left), expected)


def test_channels_last_window_view_gathers_a_channels_last_batch_of_the_same_crops():
    padded = pad(random_images(n=9, size=6), 2, "reflect")
    top, left = torch.arange(9) % 5, torch.arange(9) // 2
    stored = padded.contiguous(memory_format=torch.channels_last)
    batch_stride, _, row_stride, col_stride = stored.stride()
    offsets = torch.arange(9) * batch_stride + top * row_stride + left * col_stride
    out = window_view(stored, 6, 6, channels_last=True).index_select(0, offsets)
    out = out.permute(0, 3, 1, 2)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out, crop_at(padded, 6, top, left))


def test_crop_random_draws_every_offset_and_keeps_the_size():
    images = random_images(n=400, size=6)
    padded = pad(images, 1, "reflect")
    out = crop_random(padded, 6, torch.Generator().manual_seed(0))
    assert out.shape == images.shape
    windows = torch.stack(
        [
            crop_at(padded, 6, torch.full((400,), t), torch.full((400,), s))
            for t in range(3)
            for s in range(3)
        ]
    )  # 9 × N × C × 6 × 6
    match = (windows == out).flatten(2).all(2)  # 9 × N
    assert torch.all(match.any(0))
    assert torch.all(match.any(1))  # all 9 offsets occur


def test_cutout_zeroes_exactly_a_size_by_size_square_away_from_borders():
    images = torch.ones(50, 3, 32, 32)
    generator = torch.Generator().manual_seed(0)
    cy = torch.randint(4, 28, (50,), generator=generator)
    cx = torch.randint(4, 28, (50,), generator=generator)
    out = cutout_at(images, 8, cy, cx)
    assert torch.all((out == 0).sum(dim=(2, 3)) == 64)
    assert torch.all(out[:, 0] == out[:, 1])  # the same square in every channel
    assert torch.all(images == 1)  # not in place unless asked


def test_cutout_square_is_clipped_at_the_borders():
    images = torch.ones(4, 1, 32, 32)
    out = cutout_at(images, 8, torch.tensor([0, 31, 0, 16]), torch.tensor([0, 31, 16, 3]))
    expected = torch.ones(4, 1, 32, 32)
    expected[0, :, 0:4, 0:4] = 0  # rows/cols cy-4 .. cy+3
    expected[1, :, 27:32, 27:32] = 0
    expected[2, :, 0:4, 12:20] = 0
    expected[3, :, 12:20, 0:7] = 0
    assert torch.equal(out, expected)


def test_cutout_odd_size_is_centred_on_the_centre():
    out = cutout_at(torch.ones(1, 1, 9, 9), 3, 4, 4)
    expected = torch.ones(1, 1, 9, 9)
    expected[..., 3:6, 3:6] = 0
    assert torch.equal(out, expected)


def test_cutout_gives_the_same_result_on_channels_last_input():
    images = torch.rand(8, 3, 10, 10)
    cy, cx = torch.randint(0, 10, (8,)), torch.randint(0, 10, (8,))
    strided = images.contiguous(memory_format=torch.channels_last)
    assert torch.equal(cutout_at(strided, 4, cy, cx), cutout_at(images, 4, cy, cx))


def test_cutout_gives_the_same_result_on_input_no_plane_view_covers():
    images = torch.rand(8, 3, 10, 12)
    cy, cx = torch.randint(0, 10, (8,)), torch.randint(0, 10, (8,))
    sliced = images[..., :10]  # rows 12 apart: H×W does not flatten without a copy
    expected = cutout_at(sliced.contiguous(), 4, cy, cx)
    assert torch.equal(cutout_at(sliced, 4, cy, cx), expected)
    assert torch.equal(cutout_at(sliced, 4, cy, cx, inplace=True), expected)
    assert torch.equal(images[..., :10], expected)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_zero_pixels_zeroes_the_cutout_square_in_every_channel_in_place(memory_format):
    images = torch.ones(3, 2, 6, 6).contiguous(memory_format=memory_format)
    cy, cx = torch.tensor([0, 3, 5]), torch.tensor([0, 2, 5])
    pixels = cutout_pixels(3, cy, cx, 6, 6)
    assert pixels.shape == (3, 9) and pixels.dtype == torch.int64
    assert zero_pixels(images, pixels) is images
    expected = torch.ones(3, 2, 6, 6)
    expected[0, :, 0:2, 0:2] = 0  # rows/cols cy-1 .. cy+1, clipped
    expected[1, :, 2:5, 1:4] = 0
    expected[2, :, 4:6, 4:6] = 0
    assert torch.equal(images, expected)
    assert images.is_contiguous(memory_format=memory_format)
    again = torch.ones(3, 2, 6, 6).contiguous(memory_format=memory_format)
    assert torch.equal(zero_pixels(again, pixels, torch.arange(3)[:, None]), expected)


def test_cutout_inplace_modifies_the_input():
    images = torch.ones(2, 1, 8, 8)
    assert cutout_at(images, 2, 4, 4, inplace=True) is images
    assert (images == 0).sum() == 8


def test_cutout_rejects_centres_outside_the_image():
    with pytest.raises(TrickLabError, match="inside"):
        cutout_at(torch.ones(1, 1, 8, 8), 2, 8, 0)


def test_cutout_random_centres_cover_the_whole_image():
    images = torch.ones(2000, 1, 8, 8)
    out = cutout(images, 4, torch.Generator().manual_seed(0))
    zeros = (out == 0).sum(dim=(1, 2, 3))
    assert set(zeros.tolist()) <= {4, 6, 8, 9, 12, 16}  # clipped rectangles of a 4×4 square
    assert (out == 0).any(0).all()  # every pixel gets cut in some image
    assert 0.33 < (zeros == 16).float().mean() < 0.45  # 5×5 of the 8×8 centres: 25/64 = 0.39


def test_normalize_matches_the_formula():
    images = random_images(n=10)
    mean, std = [0.4, 0.5, 0.6], [0.2, 0.25, 0.3]
    expected = (images.double() / 255 - torch.tensor(mean).double().view(-1, 1, 1)) / torch.tensor(
        std
    ).double().view(-1, 1, 1)
    out = normalize(images, mean, std)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=1e-6)
    assert normalize(images, mean, std, torch.bfloat16).dtype == torch.bfloat16


def test_normalize_is_bit_identical_to_torchvision():
    images = random_images(n=10)
    mean, std = [0.4914, 0.4822, 0.4465], [0.247, 0.2435, 0.2616]
    reference = v2.Normalize(mean, std)(v2.ToDtype(torch.float32, scale=True)(images))
    assert torch.equal(normalize(images, mean, std), reference)


def test_channel_stats_match_mean_and_std_of_the_scaled_images():
    images = random_images(n=30)
    mean, std = channel_stats(images, chunk=7)
    scaled = images.double() / 255
    torch.testing.assert_close(torch.tensor(mean).double(), scaled.mean(dim=(0, 2, 3)))
    torch.testing.assert_close(torch.tensor(std).double(), scaled.std(dim=(0, 2, 3), correction=0))


def test_pad_rejects_unknown_mode_and_too_large_reflection():
    with pytest.raises(TrickLabError, match="reflect, zeros"):
        pad(random_images(n=1), 2, "edge")
    with pytest.raises(TrickLabError, match="translate"):
        pad(random_images(n=1, size=4), 4, "reflect")
