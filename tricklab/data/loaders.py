"""Two loaders with one meaning: `DeviceLoader` (the fast path) and `TorchLoader` (the baseline).

Both take a whole split as uint8 N×C×H×W images and int64 labels, and a `LoaderSpec` (batch size,
train or eval, augmentations, normalization, device and dtype, seed, rank), and yield
`(images of dtype on device, normalized and augmented; labels int64 on device)`.

Epochs: each `__iter__` is one epoch, whose order (and, in `DeviceLoader`, augmentations) is
drawn when it is called, so that a training loop can draw it before its timer starts. The sample order of epoch e is a permutation drawn from
(seed, e) (identity when `train=False`), identical on every rank; rank r takes
`order[r::world_size]` cut to `len(images) // world_size` samples, so every rank runs the same
number of steps and the last `len(images) % world_size` samples of each epoch's order are
dropped (with `world_size=1` nothing is dropped). `__iter__` advances `epoch` by one after a full
pass; `set_epoch` sets it, as with `DistributedSampler`. Augmentations apply only when
`train=True`.
"""

from tricklab.data.device_loader import DeviceLoader, device_generator
from tricklab.data.loader_common import (
    FLIPS,
    STORAGE_DTYPES,
    AugmentSpec,
    LoaderSpec,
    alternating_flip_bits,
    batch_dtypes,
    derived_seed,
    epoch_order,
)
from tricklab.data.torch_loader import TorchLoader

__all__ = [
    "FLIPS",
    "STORAGE_DTYPES",
    "AugmentSpec",
    "DeviceLoader",
    "LoaderSpec",
    "TorchLoader",
    "alternating_flip_bits",
    "batch_dtypes",
    "derived_seed",
    "device_generator",
    "epoch_order",
]
