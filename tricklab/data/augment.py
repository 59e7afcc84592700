"""Batched augmentations: plain functions on whole B×C×H×W batches, on any device.

Each function works without the loaders (Composer's `functional` style) and never loops over
images in Python. The `*_at` variants take the random draws as arguments, so they are
deterministic and the random variants are thin wrappers that draw and call them; `DeviceLoader`
draws once per epoch and applies the same pieces per batch (`window_view`, `zero_pixels`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from tricklab.core.errors import TrickLabError

PAD_MODES = ("reflect", "zeros")


# ---------------------------------------------------------------- flips


def flip_at(images: Tensor, mirror: Tensor) -> Tensor:
    """Mirror (left-right) the images whose entry in the bool vector `mirror` is true."""
    return torch.where(mirror.view(-1, 1, 1, 1), images.flip(-1), images)


def flip_random(images: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Mirror each image left-right with probability 0.5 (the standard CIFAR flip)."""
    mirror = torch.rand(images.shape[0], generator=generator, device=images.device) < 0.5
    return flip_at(images, mirror)


def flip_alternating(images: Tensor, epoch: int, base_flip: Tensor) -> Tensor:
    """Alternating flip (airbench, Keller Jordan 2024): each image is mirrored every other epoch.

    `base_flip` holds one fixed random bit per image of the batch (draw it once per dataset and
    index it by the batch's dataset indices): it says whether the image is mirrored on even
    epochs; on odd epochs the opposite holds. Unlike a coin flip per epoch, two consecutive
    epochs always show both orientations.
    """
    return flip_at(images, base_flip.to(torch.bool) ^ bool(epoch % 2))


# ---------------------------------------------------------------- translate (pad + random crop)


def _reflect_index(length: int, translate: int, device: torch.device) -> Tensor:
    index = torch.arange(-translate, length + translate, device=device).abs()
    return torch.where(index >= length, 2 * (length - 1) - index, index)


def pad(images: Tensor, translate: int, mode: str = "reflect") -> Tensor:
    """Pad `translate` pixels on every side, once for a whole split, so crops are plain indexing.

    `reflect` mirrors the border without repeating it (like numpy/torch 'reflect');
    `zeros` pads with the value 0 of `images`' own scale (black pixels for uint8 images).
    Works for every dtype on every device.
    """
    if mode not in PAD_MODES:
        raise TrickLabError(f"pad mode must be one of {', '.join(PAD_MODES)} (got {mode!r})")
    if translate < 0:
        raise TrickLabError(f"translate must be >= 0 pixels (got {translate})")
    if translate == 0:
        return images
    height, width = images.shape[-2:]
    if mode == "zeros":
        return torch.nn.functional.pad(images, (translate,) * 4)
    if translate >= min(height, width):
        raise TrickLabError(
            f"reflect padding needs translate < image side {min(height, width)} (got {translate})"
        )
    rows = _reflect_index(height, translate, images.device)
    cols = _reflect_index(width, translate, images.device)
    return images.index_select(-2, rows).index_select(-1, cols)


def window_view(images: Tensor, height: int, width: int, *, channels_last: bool = False) -> Tensor:
    """Overlapping view of `images` (…×C×H×W, any strides): entry k is the C×height×width window
    whose first element sits k elements after `images`' first element.

    The window of image (i, …) at (top, left) is entry Σ index·stride + top·stride(-2) +
    left·stride(-1), so a whole batch of crops, from any images of a split, is one
    `index_select` on this view: no copy of the padded images and no loop over images or offsets.
    With `channels_last`, the view's dimensions are ordered k×height×width×C instead: a gather
    from it is then a contiguous NHWC batch, which `.permute(0, 3, 1, 2)` turns, without a copy,
    into an N×C×H×W batch in channels_last memory format (for images stored channels-last).
    """
    *lead, channels, full_height, full_width = images.shape
    *lead_strides, channel_stride, row_stride, col_stride = images.stride()
    last = sum((n - 1) * s for n, s in zip(lead, lead_strides))
    last += (full_height - height) * row_stride + (full_width - width) * col_stride
    if channels_last:
        size = (last + 1, height, width, channels)
        stride = (1, row_stride, col_stride, channel_stride)
    else:
        size = (last + 1, channels, height, width)
        stride = (1, channel_stride, row_stride, col_stride)
    return images.as_strided(size, stride, images.storage_offset())


def crop_at(padded: Tensor, size: int, top: Tensor, left: Tensor) -> Tensor:
    """Crop a size×size window at per-image offsets (`top`, `left`, int64 vectors) of a batch.

    Offsets must lie in [0, padded side - size]. One `index_select` on `window_view`.
    """
    batch_stride, _, row_stride, col_stride = padded.stride()
    offsets = torch.arange(padded.shape[0], device=padded.device) * batch_stride
    offsets = offsets + top * row_stride + left * col_stride
    return window_view(padded, size, size).index_select(0, offsets)


def crop_random(padded: Tensor, size: int, generator: torch.Generator | None = None) -> Tensor:
    """Random size×size crop of each image of a padded batch (random translation, Krizhevsky 2012).

    With a batch padded by `pad(images, t)` and `size` the original side, this shifts each image
    by a uniform random (dy, dx) in [-t, t]².
    """
    batch, _, height, width = padded.shape
    if size > min(height, width):
        raise TrickLabError(f"crop size {size} is larger than the padded images {height}×{width}")
    device = padded.device
    top = torch.randint(0, height - size + 1, (batch,), generator=generator, device=device)
    left = torch.randint(0, width - size + 1, (batch,), generator=generator, device=device)
    return crop_at(padded, size, top, left)


# ---------------------------------------------------------------- cutout


def cutout_pixels(size: int, cy: Tensor, cx: Tensor, height: int, width: int) -> Tensor:
    """The pixels a size×size Cutout square centred at (`cy`, `cx`) covers in each image, clipped
    at the borders: B×size² flat indices (row·width + col) into an image plane, for `zero_pixels`.

    The square covers rows cy - size//2 ... cy - size//2 + size - 1 (same for columns), as in
    DeVries & Taylor 2017. Clamping maps out-of-image rows onto the border row, which the clipped
    square contains anyway, so the listed set (with repeats) is exactly the clipped square."""
    offsets = torch.arange(size, device=cy.device) - size // 2
    rows = (cy[:, None] + offsets).clamp_(0, height - 1)
    cols = (cx[:, None] + offsets).clamp_(0, width - 1)
    return (rows[:, :, None] * width + cols[:, None, :]).view(-1, size * size)


def zero_pixels(images: Tensor, pixels: Tensor, image_index: Tensor | None = None) -> Tensor:
    """Zero, in every channel and in place, the pixels of each image listed in `pixels`
    (B×K flat indices from `cutout_pixels`): one `index_put_`, on contiguous and channels_last
    batches alike (both view as B×C×(H·W) without a copy). `image_index` is
    `arange(B)[:, None]` on the images' device, made here when not given (a loader keeps one)."""
    batch, channels, height, width = images.shape
    if image_index is None:
        image_index = torch.arange(batch, device=images.device)[:, None]
    images.view(batch, channels, height * width).permute(0, 2, 1)[image_index, pixels] = 0
    return images


def cutout_at(
    images: Tensor, size: int, cy: Tensor | int, cx: Tensor | int, *, inplace: bool = False
) -> Tensor:
    """Zero a size×size square centred at (`cy`, `cx`) in each image, clipped at the borders.

    The square is the one `cutout_pixels` lists (DeVries & Taylor 2017); centres must lie inside
    the image. `cy`/`cx` are ints or int64 vectors with one entry per image. Zero means zero in
    whatever scale `images` has: on normalized images that is the dataset mean.
    """
    batch, _, height, width = images.shape
    device = images.device
    cy = torch.as_tensor(cy, device=device).expand(batch)
    cx = torch.as_tensor(cx, device=device).expand(batch)
    if (
        device.type == "cpu"
        and batch
        and (cy.min() < 0 or cy.max() >= height or cx.min() < 0 or cx.max() >= width)
    ):
        raise TrickLabError(f"cutout centres must lie inside the {height}×{width} image")
    out = images if inplace else images.clone()
    if size <= 0 or batch == 0:
        return out
    pixels = cutout_pixels(size, cy, cx, height, width)
    try:
        return zero_pixels(out, pixels)
    except RuntimeError:  # strides that no B×C×(H·W) view can cover: index the pixels instead
        out[torch.arange(batch, device=device)[:, None], :, pixels // width, pixels % width] = 0
        return out


def cutout_centre_range(side: int, size: int, inside: bool) -> tuple[int, int]:
    """[low, high) of a Cutout square's centre along an image side: anywhere (DeVries & Taylor,
    the square clipped at the border), or where the whole square fits (`inside`: airbench96)."""
    if not inside:
        return 0, side
    return size // 2, side - size + size // 2 + 1


def cutout(
    images: Tensor,
    size: int,
    generator: torch.Generator | None = None,
    *,
    inside: bool = False,
    inplace: bool = False,
) -> Tensor:
    """Cutout (DeVries & Taylor 2017): zero a size×size square at a uniformly random centre per
    image, clipped at the borders; with `inside`, a square wholly inside the image (airbench96).
    Page's ResNet-9 CIFAR-10 record used 8×8."""
    batch, _, height, width = images.shape
    device = images.device
    cy, cx = (
        torch.randint(
            *cutout_centre_range(side, size, inside), (batch,), generator=generator, device=device
        )
        for side in (height, width)
    )
    return cutout_at(images, size, cy, cx, inplace=inplace)


# ---------------------------------------------------------------- normalization


def normalize(
    images_uint8: Tensor,
    mean: Sequence[float] | Tensor,
    std: Sequence[float] | Tensor,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Per-channel standardization (x/255 - mean)/std, computed in float32, returned as `dtype`.

    The float32 arithmetic follows torchvision's ToDtype(scale=True) + Normalize step by step,
    so both loaders give bit-identical values.
    """
    device = images_uint8.device
    mean_t = torch.as_tensor(mean, dtype=torch.float32, device=device).view(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=torch.float32, device=device).view(-1, 1, 1)
    out = images_uint8.to(torch.float32).mul_(1.0 / 255).sub_(mean_t).div_(std_t)
    return out.to(dtype)


def channel_stats(images_uint8: Tensor, chunk: int = 4096) -> tuple[list[float], list[float]]:
    """Per-channel mean and (population) std of uint8 images on the 0..1 scale.

    Accumulates in float64 over chunks so a whole training split fits in little memory.
    """
    if images_uint8.ndim != 4 or images_uint8.shape[0] == 0:
        raise TrickLabError(
            f"channel_stats needs a non-empty N×C×H×W batch (got shape {tuple(images_uint8.shape)})"
        )
    channels = images_uint8.shape[1]
    total = torch.zeros(channels, dtype=torch.float64)
    total_sq = torch.zeros(channels, dtype=torch.float64)
    for start in range(0, images_uint8.shape[0], chunk):
        part = images_uint8[start : start + chunk].to(torch.float64).div_(255)
        total += part.sum(dim=(0, 2, 3)).cpu()
        total_sq += part.square_().sum(dim=(0, 2, 3)).cpu()
    count = images_uint8.numel() // channels
    mean = total / count
    std = (total_sq / count - mean.square()).clamp_(min=0).sqrt()
    return mean.tolist(), std.tolist()
