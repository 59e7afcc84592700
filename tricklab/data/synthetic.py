"""The synthetic source: a generated, learnable image task of any size, for tests and smoke runs."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from tricklab.core.errors import TrickLabError
from tricklab.data import limits
from tricklab.data.dataset import Dataset, LoadedSource, SourceRequest, Split

SYNTHETIC_TRAIN_SIZE = 5000
SYNTHETIC_TEST_SIZE = 1000
# Bytes of memory per generated pixel value at the peak: float32 images, noise and rounding
# temporaries (4 bytes each) and the uint8 result.
_PEAK_BYTES_PER_VALUE = 13


def load_synthetic(request: SourceRequest) -> LoadedSource:
    """The loader `load_dataset` calls: as many images as the request asks for (no cache)."""
    train_size = request.train_size or SYNTHETIC_TRAIN_SIZE
    test_size = request.test_size or SYNTHETIC_TEST_SIZE
    image_size = request.image_size or 32
    ds = make_synthetic(train_size, test_size, image_size, seed=request.seed)
    splits = {
        split: (part.images.numpy(), part.labels.numpy())
        for split, part in (("train", ds.train), ("test", ds.test))
    }
    return LoadedSource(ds.classes, splits, ds.source)


def make_synthetic(
    train_size: int = SYNTHETIC_TRAIN_SIZE,
    test_size: int = SYNTHETIC_TEST_SIZE,
    image_size: int = 32,
    *,
    num_classes: int = 10,
    channels: int = 3,
    seed: int = 0,
) -> Dataset:
    """A generated, learnable image task: each class is a fixed smooth random pattern.

    Every image is its class's pattern, shifted by up to image_size/8 pixels and mirrored at
    random, plus a random colour cast and per-pixel noise. All patterns share one mean colour, so
    mean colour alone predicts the class barely above chance; a small conv net learns it to ≥95%
    in a few epochs. The same seed gives the same images; train and test share the patterns.
    """
    if min(train_size, test_size, num_classes, channels) < 1 or image_size < 4:
        raise TrickLabError(
            "make_synthetic needs positive sizes, classes and channels, and image_size >= 4"
        )
    count = train_size + test_size
    limits.check_fits_in_memory(
        "synthetic",
        _PEAK_BYTES_PER_VALUE * max(train_size, test_size) * channels * image_size**2
        + count * channels * image_size**2,
        f"{count} images of {channels}x{image_size}x{image_size}",
        "ask for fewer or smaller images (data.train_size=, data.test_size=, data.image_size=)",
    )
    shift = max(1, image_size // 8)
    patterns = _synthetic_patterns(num_classes, channels, image_size + 2 * shift, seed)
    train = _synthetic_split(
        patterns, train_size, image_size, shift, np.random.default_rng([seed, 1])
    )
    test = _synthetic_split(
        patterns, test_size, image_size, shift, np.random.default_rng([seed, 2])
    )
    classes = [f"pattern{i}" for i in range(num_classes)]
    return Dataset(name="synthetic", classes=classes, train=train, test=test, source="generated")


def _synthetic_patterns(num_classes: int, channels: int, size: int, seed: int) -> np.ndarray:
    """One smooth zero-mean, unit-variance pattern per class (a 5×5 random grid, upsampled)."""
    grid = np.random.default_rng([seed, 0]).standard_normal((num_classes, channels, 5, 5))
    smooth = F.interpolate(
        torch.from_numpy(grid), size=(size, size), mode="bicubic", align_corners=False
    ).numpy()
    smooth -= smooth.mean(axis=(2, 3), keepdims=True)  # same mean colour for every class
    smooth /= smooth.std(axis=(1, 2, 3), keepdims=True)
    return smooth.astype(np.float32)


def _synthetic_split(
    patterns: np.ndarray, n: int, size: int, shift: int, rng: np.random.Generator
) -> Split:
    num_classes, channels = patterns.shape[:2]
    labels = rng.permutation(np.arange(n) % num_classes)
    offsets = rng.integers(0, 2 * shift + 1, size=(n, 2))
    mirrored = rng.random(n) < 0.5
    images = np.empty((n, channels, size, size), dtype=np.float32)
    for i in range(n):
        dy, dx = offsets[i]
        crop = patterns[labels[i], :, dy : dy + size, dx : dx + size]
        images[i] = crop[..., ::-1] if mirrored[i] else crop
    images *= 45.0
    images += 128.0
    images += rng.uniform(-40.0, 40.0, size=(n, channels, 1, 1)).astype(np.float32)  # colour cast
    images += rng.standard_normal(images.shape, dtype=np.float32) * 30.0
    pixels = np.clip(np.rint(images), 0, 255).astype(np.uint8)
    return Split(torch.from_numpy(pixels), torch.from_numpy(labels.astype(np.int64)))
