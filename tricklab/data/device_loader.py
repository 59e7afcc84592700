"""`DeviceLoader`: the fast path, the whole split on the device, a batch one gather (see
data/loaders.py for what both loaders mean)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from tricklab.core.errors import TrickLabError
from tricklab.core.memory import check_fits, free_memory_bytes
from tricklab.data.augment import (
    cutout_centre_range,
    cutout_pixels,
    normalize,
    pad,
    window_view,
    zero_pixels,
)
from tricklab.data.loader_common import (
    AUGMENT_STREAM,
    STORAGE_DTYPES,
    LoaderSpec,
    alternating_flip_bits,
    check_common,
    derived_seed,
    epoch_order,
    num_batches,
)


def device_generator(device: torch.device, seed: int) -> torch.Generator:
    """A seeded random generator on `device`, so that the draws it makes stay there (on a GPU: no
    host copy, no sync)."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def check_storage_fits(needed_bytes: int, device: torch.device, what: str) -> None:
    """TrickLabError, before allocating, when a split stored on `device` would not fit there."""
    check_fits(
        "the device loader's split",
        needed_bytes,
        free_memory_bytes(device),
        what=what,
        where=f"on {device}",
        advice="set loader.storage_dtype=uint8 (a quarter of float32's memory) or loader.kind=torch",
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
        spec: LoaderSpec,
        *,
        storage_dtype: torch.dtype | None = None,
    ) -> None:
        self.augment = check_common(images, labels, spec)
        dtype = spec.dtype
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
        self.batch_size = spec.batch_size
        self.train = spec.train
        self.device = torch.device(spec.device)
        self.dtype = dtype
        self.storage_dtype = storage_dtype
        self.drop_last = spec.drop_last
        self.channels_last = spec.channels_last
        self.seed = spec.seed
        self.rank = spec.rank
        self.world_size = spec.world_size
        self.epoch = 0
        self.num_images = images.shape[0]
        self.num_samples = self.num_images // spec.world_size
        self.image_shape = tuple(images.shape[1:])

        channels = images.shape[1]
        mean, std = spec.mean, spec.std
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
            self._stored, *self.image_shape[1:], channels_last=self.channels_last
        )
        self._image_index = torch.arange(self.batch_size, device=self.device)[:, None]
        self._base_flip = (
            alternating_flip_bits(self.num_images, self.seed).to(self.device)
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
        return num_batches(self.num_samples, self.batch_size, self.drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order and augmentations the next `__iter__` yields."""
        if epoch < 0:
            raise TrickLabError(f"epoch must be >= 0 (got {epoch})")
        self.epoch = epoch

    def _draws(self, epoch: int, order: Tensor) -> dict[str, Tensor]:
        """All random augmentation choices of one epoch, one entry per sample of the epoch."""
        spec, n, device = self.augment, order.shape[0], self.device
        # Rank 0's seed on every rank: each draws the whole epoch as one process does.
        generator = device_generator(device, derived_seed(self.seed, epoch, AUGMENT_STREAM, 0))
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
