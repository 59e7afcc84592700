"""What every source yields (`Dataset`, `Split`), what a source's loader is asked and returns
(`SourceRequest`, `LoadedSource`), and the helpers sources share."""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from tricklab.core.errors import TrickLabError
from tricklab.core.paths import home_folder, user_path
from tricklab.core.sizes import MAX_SEED
from tricklab.data import limits

# The splits of a source as decoded: {"train": (images, labels), "test": (...)}, numpy uint8
# N×C×H×W and int64 N. A source without "test" gets a held-out one.
SplitArrays = dict[str, tuple[np.ndarray, np.ndarray]]


@dataclass
class Split:
    """One split: `images` uint8 N×C×H×W (contiguous, CPU) and `labels` int64 N."""

    images: torch.Tensor
    labels: torch.Tensor

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise ValueError(
                f"images must be uint8 N×C×H×W, got {self.images.dtype} {tuple(self.images.shape)}"
            )
        if self.labels.dtype != torch.int64 or self.labels.shape != (len(self.images),):
            raise ValueError(
                f"labels must be int64 of length {len(self.images)}, got {self.labels.dtype} {tuple(self.labels.shape)}"
            )
        self.images = self.images.contiguous()

    def __len__(self) -> int:
        return len(self.labels)

    def __repr__(self) -> str:  # the shapes, not the pixels
        return f"Split(images=uint8 {tuple(self.images.shape)}, labels=int64 ({len(self)},))"


@dataclass
class Dataset:
    """A named dataset: class names (index = label) and its train and test splits."""

    name: str
    classes: list[str]
    train: Split
    test: Split
    source: str = ""  # where it came from (a path, or "generated"), for reports

    def __repr__(self) -> str:
        classes = ", ".join(self.classes[:4]) + (", ..." if len(self.classes) > 4 else "")
        return (
            f"Dataset({self.name!r}, {self.num_classes} classes [{classes}], train={self.train}, "
            f"test={self.test}, source={self.source!r})"
        )

    @property
    def image_shape(self) -> tuple[int, int, int]:
        channels, height, width = self.train.images.shape[1:]
        return (channels, height, width)

    @property
    def num_classes(self) -> int:
        return len(self.classes)


@dataclass(frozen=True)
class Sampling:
    """Which images of a source a dataset keeps, where a choice is drawn: `seed` draws the
    class-balanced subsets (`train_size`, `test_size`) and the hold-out; `val_fraction` is the
    class-stratified share of train held out as test by an image folder without test/."""

    seed: int = 0
    val_fraction: float = 0.1

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise TypeError(f"Sampling's seed takes an int, got {self.seed!r:.60}")
        if not 0 <= self.seed <= MAX_SEED:  # numpy's generator takes no other (data.seed's range)
            raise TrickLabError(f"Sampling's seed must be from 0 to {MAX_SEED}, got {self.seed}")
        if isinstance(self.val_fraction, bool) or not isinstance(self.val_fraction, numbers.Real):
            raise TypeError(f"Sampling's val_fraction takes a float, got {self.val_fraction!r:.60}")


@dataclass(frozen=True)
class SourceRequest:
    """What `load_dataset` asks of a source's loader (sizes already checked).

    `data_dir` is None when the user gave none. `train_size`/`test_size` are taken as subsets
    after loading; only a generated source uses them to decide how much to make.
    """

    name: str
    data_dir: Path | None
    image_size: int | None
    cache_dir: str | Path | None
    download: bool
    seed: int
    train_size: int | None
    test_size: int | None


@dataclass
class LoadedSource:
    """A loader's answer: class names, the splits as decoded, and where they came from."""

    classes: list[str]
    splits: SplitArrays
    source: str


def default_data_dir() -> Path:
    """Where downloads go when no data_dir is given: `$TRICKLAB_DATA`, else `~/.cache/tricklab/data`."""
    env = os.environ.get("TRICKLAB_DATA")
    if env and env.strip():  # blank as unset, as empty is: not a folder named " "
        return user_path(env, "TRICKLAB_DATA")
    return home_folder("TRICKLAB_DATA (or give data_dir)") / ".cache" / "tricklab" / "data"


def data_root(request: SourceRequest) -> Path:
    """The folder a downloadable source reads: the request's, else `default_data_dir()`."""
    return request.data_dir if request.data_dir is not None else default_data_dir()


def check_labels(labels: np.ndarray, num_classes: int, where: str) -> None:
    bad = labels[(labels < 0) | (labels >= num_classes)]
    if len(bad):
        raise TrickLabError(
            f"label {int(bad[0])} in {where} is outside 0..{num_classes - 1} ({num_classes} classes); "
            "the file is damaged or belongs to another dataset"
        )


def resize_images(images: np.ndarray, image_size: int | None, name: str) -> np.ndarray:
    """Resize N×C×H×W uint8 images to image_size² with Pillow's bilinear filter (as image folders
    are); refused up front when the result, held twice while it is made, cannot fit in memory."""
    if image_size is None or images.shape[2:] == (image_size, image_size):
        return images
    count, channels = images.shape[:2]
    limits.check_fits_in_memory(
        name,
        2 * count * channels * image_size * image_size,
        f"{count} images of {channels}x{image_size}x{image_size}",
        "ask for a smaller data.image_size",
    )
    out = np.empty((count, image_size, image_size, channels), dtype=np.uint8)
    for i, chw in enumerate(images):
        img = Image.fromarray(chw[0] if channels == 1 else chw.transpose(1, 2, 0))
        out[i] = np.asarray(
            img.resize((image_size, image_size), Image.Resampling.BILINEAR)
        ).reshape(image_size, image_size, channels)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))
