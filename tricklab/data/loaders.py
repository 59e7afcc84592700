"""Two loaders with one meaning: `DeviceLoader` (the fast path) and `TorchLoader` (the baseline).

Both take a whole split as uint8 N×C×H×W images and int64 labels, and yield
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

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from tricklab.data.augment import (
    PAD_MODES,
    cutout_centre_range,
    cutout_pixels,
    normalize,
    pad,
    window_view,
    zero_pixels,
)
from tricklab.data.limits import format_bytes
from tricklab.data.names import STORAGE_DTYPE_NAMES
from tricklab.errors import TrickLabError
from tricklab.measure.memory import free_memory_bytes

FLIPS = ("none", "random", "alternating")
STORAGE_DTYPES = {name: getattr(torch, name) for name in STORAGE_DTYPE_NAMES}

# Independent random streams derived from the one user seed.
_ORDER_STREAM, _AUGMENT_STREAM, _FLIP_BASE_STREAM = 0, 1, 2


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


def _check_common(
    images, labels, batch_size, *, augment, mean, std, dtype, seed, rank, world_size, drop_last
) -> AugmentSpec:
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
    if seed < 0:
        raise TrickLabError(f"seed must be >= 0 (got {seed})")
    if not dtype.is_floating_point:
        raise TrickLabError(f"dtype must be a floating dtype such as torch.float32 (got {dtype})")
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
    if drop_last and num_samples < batch_size:
        raise TrickLabError(
            f"drop_last with batch_size {batch_size} > {num_samples} samples per rank gives no batches"
        )
    augment = augment if augment is not None else AugmentSpec()
    augment.validate(tuple(images.shape[-2:]))
    return augment


def _steps(num_samples: int, batch_size: int, drop_last: bool) -> int:
    return num_samples // batch_size if drop_last else math.ceil(num_samples / batch_size)


# ---------------------------------------------------------------- DeviceLoader


def device_generator(device: torch.device, seed: int) -> torch.Generator:
    """A seeded random generator on `device`, so that the draws it makes stay there (on a GPU: no
    host copy, no sync)."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


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


def check_storage_fits(needed_bytes: int, device: torch.device, what: str) -> None:
    """TrickLabError, before allocating, when a split stored on `device` would not fit there."""
    free = free_memory_bytes(device)
    if free is not None and needed_bytes > free:
        raise TrickLabError(
            f"the device loader's split does not fit on {device}: {what} take "
            f"{format_bytes(needed_bytes)}, {format_bytes(free)} free; set "
            "loader.storage_dtype=uint8 (a quarter of float32's memory) or loader.kind=torch"
        )


class DeviceLoader:
    """The whole split lives on the device in the form its batches take; a batch is one gather.

    At construction the split is put on the device as airbench keeps it (seed report 4):
    normalized in `dtype`, padded for `translate`, with a mirrored copy next to it for a flip
    (twice the memory), channels-last in memory with `channels_last`. Each epoch, when the loader
    is iterated (before a training loop's timer starts), its order and augmentations are drawn
    on the device from a generator seeded by (seed, epoch), for the whole epoch on every rank,
    each rank keeping its share, and turned into one offset per sample, flip, crop and dataset
    index at once, and, with cutout, the pixels each sample loses.
    A batch is then one `index_select` on an overlapping window view of the stored images
    (`augment.window_view`) and, with cutout, one `index_put_` (`augment.zero_pixels`): no
    conversion, no layout copy, no host sync. `storage_dtype=torch.uint8` keeps the split as uint8
    instead (a quarter of float32's memory) and normalizes each batch into `dtype` (four kernels
    more, five for a half `dtype`). A float `storage_dtype` must be `dtype`: batches come out in
    the dtype they are stored in.
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        batch_size: int,
        *,
        train: bool = True,
        augment: AugmentSpec | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        storage_dtype: torch.dtype | None = None,
        drop_last: bool = False,
        channels_last: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        augment = _check_common(
            images, labels, batch_size, augment=augment, mean=mean, std=std, dtype=dtype,
            seed=seed, rank=rank, world_size=world_size, drop_last=drop_last,
        )  # fmt: skip
        storage_dtype = dtype if storage_dtype is None else storage_dtype
        if storage_dtype not in (*STORAGE_DTYPES.values(), dtype):
            raise TrickLabError(
                f"storage_dtype must be one of {', '.join(STORAGE_DTYPES)} (got {storage_dtype})"
            )
        if storage_dtype not in (torch.uint8, dtype):
            raise TrickLabError(
                f"storage_dtype {storage_dtype} differs from dtype {dtype}: batches come out in "
                "the dtype the split is stored in; give dtype the same, or storage_dtype uint8"
            )
        self.batch_size = batch_size
        self.train = train
        self.augment = augment if train else AugmentSpec()
        self.device = torch.device(device)
        self.dtype = dtype
        self.storage_dtype = storage_dtype
        self.drop_last = drop_last
        self.channels_last = channels_last
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.num_images = images.shape[0]
        self.num_samples = self.num_images // world_size
        self.image_shape = tuple(images.shape[1:])

        channels = images.shape[1]
        self._mean = torch.as_tensor(
            mean if mean is not None else [0.0] * channels, dtype=torch.float32, device=self.device
        )
        self._std = torch.as_tensor(
            std if std is not None else [1.0] * channels, dtype=torch.float32, device=self.device
        )
        self.labels = labels.to(self.device, torch.int64)
        self._mirrored = self.augment.flip != "none"
        self._stored = self._build_storage(images)  # copies × N × C × (H+2t) × (W+2t)
        self._windows = window_view(
            self._stored, *self.image_shape[1:], channels_last=channels_last
        )
        self._image_index = torch.arange(batch_size, device=self.device)[:, None]
        self._base_flip = (
            alternating_flip_bits(self.num_images, seed).to(self.device)
            if self.augment.flip == "alternating"
            else None
        )

    @property
    def storage_bytes(self) -> int:
        """Device memory the stored split takes (padded, mirrored copy included)."""
        return self._stored.untyped_storage().nbytes()

    def _build_storage(self, images: Tensor, chunk: int = 4096) -> Tensor:
        """Pad, normalize (float storage) and mirror once, chunk by chunk to bound temporaries.

        Returns copies × N × C × H' × W'; with channels_last its memory is ordered
        copies × N × H' × W' × C."""
        t = self.augment.translate
        n, c, h, w = images.shape
        copies = 2 if self._mirrored else 1
        if copies == 1 and t == 0 and self.storage_dtype == torch.uint8 and not self.channels_last:
            return images.to(self.device)[None]  # nothing to precompute: no second copy
        check_storage_fits(
            copies * n * c * (h + 2 * t) * (w + 2 * t) * self.storage_dtype.itemsize,
            self.device,
            f"{n} images stored as {str(self.storage_dtype).removeprefix('torch.')}"
            + (", padded" if t else "")
            + (", with a mirrored copy" if copies == 2 else ""),
        )
        shape = (copies, n, h + 2 * t, w + 2 * t, c) if self.channels_last else None
        if shape is not None:
            stored = torch.empty(shape, dtype=self.storage_dtype, device=self.device)
            stored = stored.permute(0, 1, 4, 2, 3)
        else:
            stored = torch.empty(
                (copies, n, c, h + 2 * t, w + 2 * t), dtype=self.storage_dtype, device=self.device
            )
        for start in range(0, n, chunk):
            part = pad(images[start : start + chunk].to(self.device), t, self.augment.pad_mode)
            if self.storage_dtype != torch.uint8:
                part = normalize(part, self._mean, self._std, self.storage_dtype)
            stored[0, start : start + chunk] = part
            if self._mirrored:
                stored[1, start : start + chunk] = part.flip(-1)
        return stored

    def __len__(self) -> int:
        return _steps(self.num_samples, self.batch_size, self.drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order and augmentations the next `__iter__` yields."""
        if epoch < 0:
            raise TrickLabError(f"epoch must be >= 0 (got {epoch})")
        self.epoch = epoch

    def _draws(self, epoch: int, order: Tensor) -> dict[str, Tensor]:
        """All random augmentation choices of one epoch, one entry per sample of the epoch."""
        spec, n, device = self.augment, order.shape[0], self.device
        # Rank 0's seed on every rank: each draws the whole epoch as one process does.
        generator = device_generator(device, derived_seed(self.seed, epoch, _AUGMENT_STREAM, 0))
        draws = {}
        if spec.flip == "random":
            draws["flip"] = torch.randint(0, 2, (n,), generator=generator, device=device)
        elif spec.flip == "alternating":
            draws["flip"] = (self._base_flip[order] ^ bool(epoch % 2)).long()
        if spec.translate:
            span = 2 * spec.translate + 1
            draws["top"] = torch.randint(0, span, (n,), generator=generator, device=device)
            draws["left"] = torch.randint(0, span, (n,), generator=generator, device=device)
        if spec.cutout:
            for name, side in zip(("cy", "cx"), self.image_shape[1:]):
                low, high = cutout_centre_range(side, spec.cutout, spec.cutout_inside)
                draws[name] = torch.randint(low, high, (n,), generator=generator, device=device)
        return draws

    def _plan(self, epoch: int) -> tuple[Tensor, Tensor, Tensor | None]:
        """This rank's share of the epoch's (window offsets, labels, cutout pixels or None), one
        row per sample: the whole epoch's order and draws, as one process makes them, sharded."""
        order = epoch_order(self.num_images, seed=self.seed, epoch=epoch, shuffle=self.train)
        order = order.to(self.device)
        draws = self._draws(epoch, order)
        # The window of image `index` in copy `flip` at (top, left): one offset says it all,
        # and equals crop_at(flip_at(pad(x), flip), H, top, left).
        copy_stride, image_stride, _, row_stride, col_stride = self._stored.stride()
        offsets = order * image_stride
        if self._mirrored:
            offsets += draws["flip"] * copy_stride
        if self.augment.translate:
            offsets += draws["top"] * row_stride + draws["left"] * col_stride
        pixels = None
        if self.augment.cutout:
            height, width = self.image_shape[1:]
            pixels = cutout_pixels(self.augment.cutout, draws["cy"], draws["cx"], height, width)
        # This rank's samples: order[rank::world_size], as many on every rank (as epoch_order).
        shard = slice(self.rank, self.num_samples * self.world_size, self.world_size)
        return offsets[shard], self.labels[order][shard], None if pixels is None else pixels[shard]

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        """One epoch: its order and augmentations are drawn now, its batches as they are asked."""
        epoch = self.epoch
        return self._batches(epoch, *self._plan(epoch))

    def _batches(
        self, epoch: int, offsets: Tensor, labels: Tensor, pixels: Tensor | None
    ) -> Iterator[tuple[Tensor, Tensor]]:
        for step in range(len(self)):
            batch = slice(step * self.batch_size, (step + 1) * self.batch_size)
            images = self._windows.index_select(0, offsets[batch])
            if self.channels_last:
                images = images.permute(0, 3, 1, 2)  # NHWC in memory: channels_last, no copy
            if self.storage_dtype == torch.uint8:
                images = normalize(images, self._mean, self._std, self.dtype)
            if pixels is not None:
                zero_pixels(images, pixels[batch], self._image_index[: images.shape[0]])
            yield images, labels[batch]
        self.epoch = epoch + 1


# ---------------------------------------------------------------- TorchLoader (baseline)


class _Cutout:
    """Per-sample cutout for a torchvision pipeline, same semantics as `augment.cutout_at`:
    a size×size square at a uniformly random centre (within `cutout_centre_range`), clipped at
    the borders, zeroed in place."""

    def __init__(self, size: int, inside: bool) -> None:
        self.size, self.inside = size, inside

    def __call__(self, image: Tensor) -> Tensor:
        height, width = image.shape[-2:]
        top = int(torch.randint(*cutout_centre_range(height, self.size, self.inside), ()))
        left = int(torch.randint(*cutout_centre_range(width, self.size, self.inside), ()))
        top, left = top - self.size // 2, left - self.size // 2
        image[..., max(top, 0) : top + self.size, max(left, 0) : left + self.size] = 0
        return image


class _SampleDataset(torch.utils.data.Dataset):
    """Map-style dataset over uint8 tensors; keys are (index, epoch) so workers know the epoch."""

    def __init__(self, images: Tensor, labels: Tensor, transform, base_flip: Tensor | None) -> None:
        self.images = images
        self.labels = labels
        self.transform = transform
        self.base_flip = base_flip

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, key: tuple[int, int]) -> tuple[Tensor, Tensor]:
        index, epoch = key
        image = self.images[index]
        if self.base_flip is not None and bool(self.base_flip[index]) != bool(epoch % 2):
            image = image.flip(-1)  # a mirror image, as v2.functional.horizontal_flip
        return self.transform(image), self.labels[index]


class _EpochSampler(torch.utils.data.Sampler):
    """This rank's share of the seeded epoch order, yielded as (index, epoch) keys."""

    def __init__(self, loader: TorchLoader) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return self.loader.num_samples

    def __iter__(self) -> Iterator[tuple[int, int]]:
        loader = self.loader
        order = epoch_order(
            loader.num_images, seed=loader.seed, epoch=loader._iter_epoch, shuffle=loader.train
        ).tolist()
        shard = torch.utils.data.DistributedSampler(  # positions in the order: the rank's share
            order, loader.world_size, loader.rank, shuffle=False, drop_last=True
        )
        return iter([(order[position], loader._iter_epoch) for position in shard])


class _PrivateRng:
    """Holds a CPU RNG state that per-sample transforms use instead of the caller's global one."""

    def __init__(self, seed: int) -> None:
        self.state = torch.Generator().manual_seed(seed).get_state()

    @contextlib.contextmanager
    def active(self):
        saved = torch.get_rng_state()
        torch.set_rng_state(self.state)
        try:
            yield
        finally:
            self.state = torch.get_rng_state()
            torch.set_rng_state(saved)


class TorchLoader:
    """The classic baseline: `torch.utils.data.DataLoader` with per-sample torchvision v2 transforms.

    Same augmentations as `DeviceLoader` (RandomHorizontalFlip, alternating flip per sample from
    index and epoch, RandomCrop with padding, ToDtype + Normalize, per-sample cutout), same epoch
    order and sharding, same `__len__`/`__iter__`/`set_epoch`. Augmentation draws are reproducible
    from (seed, epoch, rank): worker processes are seeded through the DataLoader's generator
    (with persistent workers: once, then their streams continue), and with `num_workers=0` the
    transforms run on a private RNG state so the caller's global RNG is neither used nor changed.
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        batch_size: int,
        *,
        train: bool = True,
        augment: AugmentSpec | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        drop_last: bool = False,
        channels_last: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
    ) -> None:
        augment = _check_common(
            images, labels, batch_size, augment=augment, mean=mean, std=std, dtype=dtype,
            seed=seed, rank=rank, world_size=world_size, drop_last=drop_last,
        )  # fmt: skip
        if num_workers < 0:
            raise TrickLabError(f"num_workers must be >= 0 (got {num_workers})")
        if num_workers == 0 and (persistent_workers or prefetch_factor is not None):
            raise TrickLabError("persistent_workers and prefetch_factor need num_workers >= 1")
        self.batch_size = batch_size
        self.train = train
        self.augment = augment if train else AugmentSpec()
        self.device = torch.device(device)
        self.dtype = dtype
        self.drop_last = drop_last
        self.channels_last = channels_last
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.num_workers = num_workers
        self.epoch = 0
        self._iter_epoch = 0
        self.num_images = images.shape[0]
        self.num_samples = self.num_images // world_size

        base_flip = (
            alternating_flip_bits(self.num_images, seed)
            if self.augment.flip == "alternating"
            else None
        )
        self._dataset = _SampleDataset(
            images.cpu(),
            labels.cpu().to(torch.int64),
            self._transform(images, mean, std),
            base_flip,
        )
        self._loader_kwargs = dict(
            batch_size=batch_size,
            sampler=_EpochSampler(self),
            drop_last=drop_last,
            num_workers=num_workers,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            prefetch_factor=prefetch_factor,
        )
        self._persistent = self._make_loader(0) if persistent_workers else None

    def _transform(self, images: Tensor, mean, std):
        from torchvision.transforms import v2  # imported here: `import torchvision` takes a second

        spec = self.augment
        steps = []
        if spec.flip == "random":
            steps.append(v2.RandomHorizontalFlip(p=0.5))
        if spec.translate:
            steps.append(
                v2.RandomCrop(
                    tuple(images.shape[-2:]),
                    padding=spec.translate,
                    padding_mode="reflect" if spec.pad_mode == "reflect" else "constant",
                    fill=0,
                )
            )
        steps.append(v2.ToDtype(torch.float32, scale=True))
        if mean is not None:
            steps.append(v2.Normalize([float(m) for m in mean], [float(s) for s in std]))
        if spec.cutout:
            steps.append(_Cutout(spec.cutout, spec.cutout_inside))
        return v2.Compose(steps)

    def _make_loader(self, epoch: int) -> torch.utils.data.DataLoader:
        generator = torch.Generator().manual_seed(
            derived_seed(self.seed, epoch, _AUGMENT_STREAM, self.rank)
        )
        return torch.utils.data.DataLoader(
            self._dataset, generator=generator, **self._loader_kwargs
        )

    def __len__(self) -> int:
        return _steps(self.num_samples, self.batch_size, self.drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order and augmentations the next `__iter__` yields."""
        if epoch < 0:
            raise TrickLabError(f"epoch must be >= 0 (got {epoch})")
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        """One epoch: its DataLoader iterator (workers, when not persistent) is started now."""
        epoch = self.epoch
        self._iter_epoch = epoch
        loader = self._persistent if self._persistent is not None else self._make_loader(epoch)
        rng = _PrivateRng(derived_seed(self.seed, epoch, _AUGMENT_STREAM, self.rank))
        return self._batches(epoch, iter(loader), rng)

    def _batches(
        self, epoch: int, batches: Iterator, rng: _PrivateRng
    ) -> Iterator[tuple[Tensor, Tensor]]:
        non_blocking = self._loader_kwargs["pin_memory"]
        while True:
            with rng.active() if self.num_workers == 0 else contextlib.nullcontext():
                batch = next(batches, None)
            if batch is None:
                break
            images, labels = batch
            images = images.to(self.device, non_blocking=non_blocking).to(self.dtype)
            if self.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            yield images, labels.to(self.device, non_blocking=non_blocking)
        self.epoch = epoch + 1
