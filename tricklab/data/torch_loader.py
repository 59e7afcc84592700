"""`TorchLoader`: the baseline, torch's DataLoader with per-sample torchvision v2 transforms (see
data/loaders.py for what both loaders mean)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch
from torch import Tensor

from tricklab.core.errors import TrickLabError
from tricklab.core.process_limits import open_files_for_workers
from tricklab.data.augment import (
    cutout_centre_range,
)
from tricklab.data.loader_common import (
    AUGMENT_STREAM,
    LoaderSpec,
    alternating_flip_bits,
    check_common,
    derived_seed,
    epoch_order,
    num_batches,
)


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
        spec: LoaderSpec,
        *,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
    ) -> None:
        self.augment = check_common(images, labels, spec)
        if num_workers < 0:
            raise TrickLabError(f"num_workers must be >= 0 (got {num_workers})")
        if num_workers == 0 and (persistent_workers or prefetch_factor is not None):
            raise TrickLabError("persistent_workers and prefetch_factor need num_workers >= 1")
        if num_workers:
            open_files_for_workers(num_workers)
        self.batch_size = spec.batch_size
        self.train = spec.train
        self.device = torch.device(spec.device)
        self.dtype = spec.dtype
        self.drop_last = spec.drop_last
        self.channels_last = spec.channels_last
        self.seed = spec.seed
        self.rank = spec.rank
        self.world_size = spec.world_size
        self.num_workers = num_workers
        self.epoch = 0
        self._iter_epoch = 0
        self.num_images = images.shape[0]
        self.num_samples = self.num_images // spec.world_size

        base_flip = (
            alternating_flip_bits(self.num_images, self.seed)
            if self.augment.flip == "alternating"
            else None
        )
        self._dataset = _SampleDataset(
            images.cpu(),
            labels.cpu().to(torch.int64),
            self._transform(images, spec.mean, spec.std),
            base_flip,
        )
        self._loader_kwargs = dict(
            batch_size=self.batch_size,
            sampler=_EpochSampler(self),
            drop_last=self.drop_last,
            num_workers=num_workers,
            # Page-locked memory speeds copies to an accelerator only; on a CPU torch ignores it
            # (and warns that it does).
            pin_memory=pin_memory and self.device.type != "cpu",
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
            derived_seed(self.seed, epoch, AUGMENT_STREAM, self.rank)
        )
        with _workers_as_asked():
            return torch.utils.data.DataLoader(
                self._dataset, generator=generator, **self._loader_kwargs
            )

    def __len__(self) -> int:
        return num_batches(self.num_samples, self.batch_size, self.drop_last)

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
        rng = _PrivateRng(derived_seed(self.seed, epoch, AUGMENT_STREAM, self.rank))
        with _workers_as_asked():
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


@contextlib.contextmanager
def _workers_as_asked() -> Iterator[None]:
    """Without torch's warning that loader.num_workers is above the cores it suggests (four lines
    at each loader and epoch): the count is the user's setting, and `tricklab profile loader`
    measures which count pays."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "This DataLoader will create", UserWarning)
        yield
