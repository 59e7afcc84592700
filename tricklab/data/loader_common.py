"""What both loaders share (data/loaders.py says what they mean): the augmentation spec, the
seeded epoch order and the random streams derived from the one seed, argument checks, and the
dtypes a recipe's loader.storage_dtype gives."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from tricklab.core.errors import TrickLabError
from tricklab.data.augment import (
    PAD_MODES,
)
from tricklab.data.names import STORAGE_DTYPE_NAMES

FLIPS = ("none", "random", "alternating")
STORAGE_DTYPES = {name: getattr(torch, name) for name in STORAGE_DTYPE_NAMES}

# Independent random streams derived from the one user seed.
_ORDER_STREAM, AUGMENT_STREAM, _FLIP_BASE_STREAM = 0, 1, 2


@dataclass
class AugmentSpec:
    """Which training augmentations to apply; the same meaning in both loaders.

    flip: none | random (mirror with prob. 0.5) | alternating (airbench: mirror every other epoch)
    translate: random crop of the original size from images padded by this many pixels
    pad_mode: reflect | zeros (zeros = black pixels, i.e. uint8 value 0 before normalization)
    cutout: side of the square zeroed after normalization (DeVries & Taylor 2017), 0 = off
    cutout_inside: the square lies wholly inside the image (airbench96, hlb-CIFAR10) instead of
        being centred anywhere and clipped at the border (DeVries & Taylor)
    """

    flip: str = "none"
    translate: int = 0
    pad_mode: str = "reflect"
    cutout: int = 0
    cutout_inside: bool = False

    def validate(self, image_size: tuple[int, int] | None = None) -> None:
        """Raise TrickLabError on values no loader can apply."""
        if self.flip not in FLIPS:
            raise TrickLabError(f"flip must be one of {', '.join(FLIPS)} (got {self.flip!r})")
        if self.pad_mode not in PAD_MODES:
            raise TrickLabError(
                f"pad_mode must be one of {', '.join(PAD_MODES)} (got {self.pad_mode!r})"
            )
        for name in ("translate", "cutout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TrickLabError(f"{name} must be an int >= 0 pixels (got {value!r})")
        if (
            image_size is not None
            and self.pad_mode == "reflect"
            and self.translate >= min(image_size)
        ):
            raise TrickLabError(
                f"translate with reflect padding must be < image side {min(image_size)} (got {self.translate})"
            )
        if image_size is not None and self.cutout_inside and self.cutout > min(image_size):
            raise TrickLabError(
                f"cutout_inside needs a cutout square no larger than the image side "
                f"{min(image_size)} (got {self.cutout})"
            )
        if (
            image_size is not None
            and self.cutout
            and all(
                self.cutout >= side
                if self.cutout_inside
                else self.cutout // 2 >= side - 1 and (self.cutout + 1) // 2 >= side
                for side in image_size
            )
        ):  # wherever its centre falls: every training image all zeros
            raise TrickLabError(
                f"cutout={self.cutout} zeroes the whole {'x'.join(map(str, image_size))} image "
                "wherever it falls; give a square smaller than the image (aug.cutout=)"
            )


# ---------------------------------------------------------------- seeds and epoch order


def derived_seed(*parts: int) -> int:
    """A 63-bit seed mixed from non-negative ints (seed, epoch, stream, ...) by numpy's SeedSequence."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0] >> 1)


def epoch_order(
    num_images: int, *, seed: int, epoch: int, shuffle: bool, rank: int = 0, world_size: int = 1
) -> Tensor:
    """This rank's dataset indices for one epoch (CPU int64): its shard of the seeded order.

    The permutation is drawn on the CPU so it is the same on every rank and every device.
    """
    if shuffle:
        generator = torch.Generator().manual_seed(derived_seed(seed, epoch, _ORDER_STREAM))
        order = torch.randperm(num_images, generator=generator)
    else:
        order = torch.arange(num_images)
    return order[rank::world_size][: num_images // world_size]


def alternating_flip_bits(num_images: int, seed: int) -> Tensor:
    """One fixed random bit per image (bool, CPU): mirrored on even epochs under alternating flip."""
    generator = torch.Generator().manual_seed(derived_seed(seed, _FLIP_BASE_STREAM))
    return torch.randint(0, 2, (num_images,), generator=generator).bool()


# ---------------------------------------------------------------- argument checks


@dataclass(frozen=True)
class LoaderSpec:
    """How a loader batches a split; the same meaning in `DeviceLoader` and `TorchLoader`.

    batch_size: images per batch (per rank); train: shuffle each epoch and augment (else the
    split in order, unaugmented); augment: the training augmentations (default none);
    mean/std: per-channel normalization after 0..1 scaling (neither: 0..1 scaling only);
    device/dtype: where batches come out and in which floating dtype; drop_last: drop the last,
    smaller batch; channels_last: batches in channels-last memory order; seed: the one seed of
    the epoch order and the augmentations; rank/world_size: this rank's share of every epoch.
    """

    batch_size: int
    train: bool = True
    augment: AugmentSpec | None = None
    mean: Sequence[float] | None = None
    std: Sequence[float] | None = None
    device: str | torch.device = "cpu"
    dtype: torch.dtype = torch.float32
    drop_last: bool = False
    channels_last: bool = False
    seed: int = 0
    rank: int = 0
    world_size: int = 1


def check_common(images: Tensor, labels: Tensor, spec: LoaderSpec) -> AugmentSpec:
    """Raise TrickLabError on a split or spec no loader can batch; returns the augmentations the
    loader applies (none for an eval loader)."""
    batch_size, world_size, rank = spec.batch_size, spec.world_size, spec.rank
    mean, std = spec.mean, spec.std
    if not isinstance(images, Tensor) or images.ndim != 4 or images.dtype != torch.uint8:
        raise TrickLabError("images must be a uint8 tensor of shape N×C×H×W")
    if not isinstance(labels, Tensor) or labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise TrickLabError(
            f"labels must be a 1-D tensor with one entry per image ({images.shape[0]})"
        )
    if labels.is_floating_point() or labels.is_complex():
        raise TrickLabError(f"labels must be integers (got {labels.dtype})")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise TrickLabError(f"batch_size must be an int >= 1 (got {batch_size!r})")
    if world_size < 1 or not 0 <= rank < world_size:
        raise TrickLabError(
            f"rank must be in 0..world_size-1 and world_size >= 1 (got rank {rank}, world_size {world_size})"
        )
    if spec.seed < 0:
        raise TrickLabError(f"seed must be >= 0 (got {spec.seed})")
    if not spec.dtype.is_floating_point:
        raise TrickLabError(
            f"dtype must be a floating dtype such as torch.float32 (got {spec.dtype})"
        )
    if (mean is None) != (std is None):
        raise TrickLabError(
            "give both mean and std for normalization, or neither (0..1 scaling only)"
        )
    channels = images.shape[1]
    if mean is not None and (len(mean) != channels or len(std) != channels):
        raise TrickLabError(f"mean and std need one value per channel ({channels})")
    if std is not None and min(std) <= 0:
        raise TrickLabError(f"std values must be > 0 (got {list(std)})")
    num_samples = images.shape[0] // world_size
    if num_samples == 0:
        raise TrickLabError(f"{images.shape[0]} images cannot be shared by {world_size} ranks")
    if spec.drop_last and num_samples < batch_size:
        raise TrickLabError(
            f"drop_last with batch_size {batch_size} > {num_samples} samples per rank gives no "
            "batches; lower the batch size (loader.batch_size) or keep the last, smaller batch "
            "(loader.drop_last=false)"
        )
    augment = spec.augment if spec.augment is not None else AugmentSpec()
    augment.validate(tuple(images.shape[-2:]))
    return augment if spec.train else AugmentSpec()


def num_batches(num_samples: int, batch_size: int, drop_last: bool) -> int:
    return num_samples // batch_size if drop_last else math.ceil(num_samples / batch_size)


# ---------------------------------------------------------------- DeviceLoader


def batch_dtypes(
    storage_dtype: str, compute_dtype: torch.dtype, *, autocast: bool
) -> tuple[torch.dtype, torch.dtype]:
    """(dtype of the batches, dtype the split is stored in) for a recipe's loader.storage_dtype.

    auto: stored normalized in `compute_dtype` (the dtype the model computes in), as airbench
    keeps CIFAR-10 on the GPU; uint8: stored as uint8 (a quarter of float32's memory) and
    normalized into `compute_dtype` per batch; a float name: stored normalized in that dtype and
    batches come out in it, which a model without `autocast` takes only in its own dtype."""
    if storage_dtype == "auto":
        return compute_dtype, compute_dtype
    if storage_dtype not in STORAGE_DTYPES:
        raise TrickLabError(
            f"loader.storage_dtype must be auto or one of {', '.join(STORAGE_DTYPES)} "
            f"(got {storage_dtype!r})"
        )
    stored = STORAGE_DTYPES[storage_dtype]
    if stored == torch.uint8:
        return compute_dtype, stored
    if stored != compute_dtype and not autocast:
        wanted = str(compute_dtype).removeprefix("torch.")
        raise TrickLabError(
            f"loader.storage_dtype={storage_dtype} gives {storage_dtype} batches, and this "
            f"precision feeds the model {wanted} without autocast; use loader.storage_dtype=auto "
            f"({wanted}) or uint8"
        )
    return stored, stored
