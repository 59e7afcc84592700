"""Datasets as uint8 tensors: `load_dataset(name, ...)` for every source, subsets, description.

Every source yields a `Dataset`: class names plus a train and a test `Split`, each holding uint8
N×C×H×W images and int64 labels on the CPU. `load_dataset` finds the source's loader in
`tricklab.data.names.DATASET_SOURCES` (CIFAR in `cifar`, MNIST/Fashion-MNIST/SVHN in
`torchvision_sources`, image folders in `imagefolder`, generated images in `synthetic`). Decoded
sources are cached (see `tricklab.data.cache`); subsets (`train_size`, `test_size`) and the
validation hold-out of a test-less image folder are taken after the cache, so the cache always
holds full splits.
"""

from __future__ import annotations

import contextlib
import importlib
import numbers
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from tricklab.core.errors import TrickLabError, expect_type
from tricklab.core.paths import user_path
from tricklab.data.augment import channel_stats
from tricklab.data.dataset import (  # noqa: F401 (Dataset, Split, default_data_dir: public here)
    Dataset,
    LoadedSource,
    Sampling,
    SourceRequest,
    Split,
    default_data_dir,
)
from tricklab.data.imagefolder_files import printable
from tricklab.data.limits import MAX_IMAGE_SIZE
from tricklab.data.names import DATASET_NAMES, DATASET_SOURCES


def load_dataset(
    name: str,
    data_dir: str | Path | None = None,
    *,
    train_size: int | None = None,
    test_size: int | None = None,
    image_size: int | None = None,
    cache_dir: str | Path | None = None,
    download: bool = True,
    sampling: Sampling | None = None,
) -> Dataset:
    """Load a dataset by name (one of `DATASET_NAMES`).

    `data_dir`: where the files are (ignored by "synthetic"; required by "imagefolder"; default
    `default_data_dir()` for the downloadable ones). `train_size`/`test_size`: a seeded,
    class-balanced subset of that split. `image_size`: resize every image to that square size
    (at most `MAX_IMAGE_SIZE`). `cache_dir`: where decoded splits are cached (default
    `$TRICKLAB_CACHE` or `~/.cache/tricklab`). `download`: fetch missing files with torchvision.
    `sampling`: the seed of the subsets and the hold-out, and the share of train an image folder
    without a test split holds out as test (`Sampling(seed=0, val_fraction=0.1)`).
    """
    expect_type(name, str, "load_dataset's name")
    expect_type(download, bool, "load_dataset's download")
    expect_type(sampling, (Sampling, type(None)), "load_dataset's sampling")
    for path, what in ((data_dir, "data_dir"), (cache_dir, "cache_dir")):
        expect_type(path, (str, os.PathLike, type(None)), f"load_dataset's {what}")
    sampling = sampling if sampling is not None else Sampling()
    seed, val_fraction = sampling.seed, sampling.val_fraction
    if name not in DATASET_SOURCES:
        raise TrickLabError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASET_NAMES)}")
    train_size, test_size, image_size = (  # numpy's integers as Python's, then checked
        _positive(option, value)
        for option, value in (("train_size", train_size), ("test_size", test_size),
                              ("image_size", image_size))
    )  # fmt: skip
    if image_size is not None and image_size > MAX_IMAGE_SIZE:
        raise TrickLabError(
            f"image_size={image_size} is too large: images are resized to at most "
            f"{MAX_IMAGE_SIZE}x{MAX_IMAGE_SIZE} (data.image_size=, --image-size)"
        )
    for option, value in (("data_dir", data_dir), ("cache_dir", cache_dir)):
        if isinstance(value, str) and not value.strip():
            flag = option.replace("_", "-")
            raise TrickLabError(
                f"{option} is empty (--{flag} / data.{option.removeprefix('data_')}=); give a "
                "folder, or leave it out for the default"
            )
    request = SourceRequest(
        name=name,
        data_dir=user_path(data_dir, "data_dir") if data_dir is not None else None,
        image_size=image_size,
        cache_dir=cache_dir,
        download=download,
        seed=seed,
        train_size=train_size,
        test_size=test_size,
    )
    with _fits_in_memory(name), _readable_files(name):
        loaded = loader_for(name)(request)
        classes, splits = loaded.classes, loaded.splits
        train = _to_split(*splits["train"])
        if "test" in splits:
            test = _to_split(*splits["test"])
        else:
            train, test = _stratified_holdout(train, val_fraction, len(classes), seed)
        train = _subset(train, train_size, "train_size", name, len(classes), seed)
        test = _subset(test, test_size, "test_size", name, len(classes), seed)
        return Dataset(name=name, classes=classes, train=train, test=test, source=loaded.source)


def loader_for(name: str) -> Callable[[SourceRequest], LoadedSource]:
    """The loader function `DATASET_SOURCES` names for `name` (its module imported now)."""
    module, function = DATASET_SOURCES[name].split(":")
    return getattr(importlib.import_module(module), function)


@contextlib.contextmanager
def _fits_in_memory(name: str) -> Iterator[None]:
    """A dataset too large for memory that the estimates let through, as one clear error."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        if not isinstance(exc, MemoryError) and "memory" not in str(exc):
            raise
        raise TrickLabError(
            f"dataset {name} does not fit in memory ({type(exc).__name__}); ask for fewer or "
            "smaller images (data.train_size=, data.test_size=, data.image_size=)"
        ) from None


@contextlib.contextmanager
def _readable_files(name: str) -> Iterator[None]:
    """An OSError while reading the source (no permission, a folder where a file belongs, ...)
    as one clear error naming the path; the cache and the download turn their own OSErrors."""
    try:
        yield
    except OSError as exc:
        where = os.fsdecode(exc.filename) if exc.filename else f"the {name} files"
        raise TrickLabError(f"cannot read {printable(where)}: {exc.strerror or exc}") from exc


def _positive(option: str, value: int | None) -> int | None:
    """`value` as a Python int (a numpy integer too); TrickLabError unless a whole number >= 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise TrickLabError(f"{option}={value!r} must be a positive whole number (data.{option}=)")
    return int(value)


def _to_split(images: np.ndarray, labels: np.ndarray) -> Split:
    return Split(torch.from_numpy(images), torch.from_numpy(labels))


def _subset(
    split: Split, size: int | None, option: str, name: str, num_classes: int, seed: int
) -> Split:
    if size is None or size == len(split):  # all of it, in order: what the subset would be
        return split
    if size > len(split):
        raise TrickLabError(
            f"{option}={size} is more than the {len(split)} images of {name}'s "
            f"{option.removesuffix('_size')} split; use at most {len(split)} (data.{option}=)"
        )
    return balanced_subset(split, size, num_classes, seed)


def _stratified_holdout(
    split: Split, fraction: float, num_classes: int, seed: int
) -> tuple[Split, Split]:
    """Hold out `fraction` of every class (seeded) as the test split; the rest stays train."""
    if not 0.0 < fraction < 1.0:
        raise TrickLabError(
            f"val_fraction={fraction} must be between 0 and 1 (exclusive) to hold out a test split "
            "from an image folder without test/ (data.val_fraction=)"
        )
    rng = np.random.default_rng(seed)
    labels = split.labels.numpy()
    held = np.zeros(len(labels), dtype=bool)
    for label in range(num_classes):
        members = np.flatnonzero(labels == label)
        count = min(round(fraction * len(members)), max(len(members) - 1, 0))
        held[rng.choice(members, count, replace=False)] = True
    if not held.any():
        raise TrickLabError(
            f"val_fraction={fraction} of {len(labels)} images holds out none for a test split: "
            "add a test/ folder, more images, or raise data.val_fraction"
        )
    keep, hold = torch.from_numpy(np.flatnonzero(~held)), torch.from_numpy(np.flatnonzero(held))
    return (
        Split(split.images[keep], split.labels[keep]),
        Split(split.images[hold], split.labels[hold]),
    )


# ---------------------------------------------------------------- subsets and description


def balanced_subset(split: Split, size: int, num_classes: int, seed: int) -> Split:
    """A seeded, class-balanced subset of `size` images, in the split's original order.

    Every class gets size // num_classes images (a seeded choice of classes gets one more for the
    remainder); a class with too few images gives all it has and the others make up the rest.
    """
    if not 0 < size <= len(split):
        raise TrickLabError(f"cannot take a subset of {size} images from a split of {len(split)}")
    rng = np.random.default_rng(seed)
    labels = split.labels.numpy()
    members = [np.flatnonzero(labels == c) for c in range(num_classes)]
    counts = np.array([len(m) for m in members])
    if counts.sum() < size:
        raise TrickLabError(
            f"cannot take {size} images: only {counts.sum()} have labels below {num_classes}"
        )
    quota = _balanced_quota(counts, size, rng)
    chosen = np.concatenate([rng.choice(m, q, replace=False) for m, q in zip(members, quota)])
    chosen.sort()
    index = torch.from_numpy(chosen)
    return Split(split.images[index], split.labels[index])


def _balanced_quota(counts: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Images per class: as equal as the class counts allow, summing to `size`."""
    quota = np.zeros_like(counts)
    remaining = size
    while remaining > 0:
        open_classes = np.flatnonzero(quota < counts)
        share = remaining // len(open_classes)
        if share == 0:
            quota[rng.choice(open_classes, remaining, replace=False)] += 1
            break
        added = np.minimum(share, counts[open_classes] - quota[open_classes])
        quota[open_classes] += added
        remaining -= int(added.sum())
    return quota


def describe_dataset(ds: Dataset) -> dict:
    """Sizes, per-class counts, and per-channel mean/std of the train split (0..1 scale)."""
    mean, std = channel_stats(ds.train.images)
    return {
        "name": ds.name,
        "classes": list(ds.classes),
        "image_shape": list(ds.image_shape),
        "train": _describe_split(ds.train, ds.num_classes),
        "test": _describe_split(ds.test, ds.num_classes),
        "mean": [round(m, 6) for m in mean],
        "std": [round(s, 6) for s in std],
    }


def _describe_split(split: Split, num_classes: int) -> dict:
    per_class = torch.bincount(split.labels, minlength=num_classes)
    return {"size": len(split), "per_class": per_class.tolist()}
