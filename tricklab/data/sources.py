"""Datasets as uint8 tensors: CIFAR-10/100, MNIST, Fashion-MNIST, SVHN, image folders, synthetic.

Every source yields a `Dataset`: class names plus a train and a test `Split`, each holding uint8
N×C×H×W images and int64 labels on the CPU. Decoded sources are cached (see `tricklab.data.cache`);
subsets (`train_size`, `test_size`) and the validation hold-out of a test-less image folder are
taken after the cache, so the cache always holds full splits.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import pickle
import shutil
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from tricklab.data import cache, imagefolder
from tricklab.errors import TrickLabError
from tricklab.paths import first_missing, remove_empty_dirs

log = logging.getLogger(__name__)

DATASET_NAMES = (
    "cifar10",
    "cifar100",
    "mnist",
    "fashion-mnist",
    "svhn",
    "imagefolder",
    "synthetic",
)
SYNTHETIC_TRAIN_SIZE = 5000
SYNTHETIC_TEST_SIZE = 1000


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


@dataclass
class Dataset:
    """A named dataset: class names (index = label) and its train and test splits."""

    name: str
    classes: list[str]
    train: Split
    test: Split
    source: str = ""  # where it came from (a path, or "generated"), for reports

    @property
    def image_shape(self) -> tuple[int, int, int]:
        channels, height, width = self.train.images.shape[1:]
        return (channels, height, width)

    @property
    def num_classes(self) -> int:
        return len(self.classes)


def default_data_dir() -> Path:
    """Where downloads go when no data_dir is given: `$TRICKLAB_DATA`, else `~/.cache/tricklab/data`."""
    env = os.environ.get("TRICKLAB_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tricklab" / "data"


# ---------------------------------------------------------------- the entry point


def load_dataset(
    name: str,
    data_dir: str | Path | None = None,
    *,
    train_size: int | None = None,
    test_size: int | None = None,
    image_size: int | None = None,
    val_fraction: float = 0.1,
    seed: int = 0,
    cache_dir: str | Path | None = None,
    download: bool = True,
) -> Dataset:
    """Load a dataset by name (one of `DATASET_NAMES`).

    `data_dir`: where the files are (ignored by "synthetic"; required by "imagefolder"; default
    `default_data_dir()` for the downloadable ones). `train_size`/`test_size`: a seeded,
    class-balanced subset of that split. `image_size`: resize every image to that square size.
    `val_fraction`: for an image folder without a test split, the class-stratified share of train
    held out as test. `cache_dir`: where decoded splits are cached (default `$TRICKLAB_CACHE` or
    `~/.cache/tricklab`). `download`: fetch missing files with torchvision.
    """
    if name not in DATASET_NAMES:
        raise TrickLabError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASET_NAMES)}")
    _check_positive("train_size", train_size)
    _check_positive("test_size", test_size)
    _check_positive("image_size", image_size)

    with _fits_in_memory(name), _readable_files(name):
        if name == "synthetic":
            return make_synthetic(
                train_size=train_size or SYNTHETIC_TRAIN_SIZE,
                test_size=test_size or SYNTHETIC_TEST_SIZE,
                image_size=image_size or 32,
                seed=seed,
            )

        if name == "imagefolder":
            if data_dir is None:
                raise TrickLabError(
                    "dataset 'imagefolder' needs its folder: pass data_dir= (--data-dir / data.dir=) "
                    "holding train/<class>/<image> or train.tar.gz"
                )
            root = Path(data_dir).expanduser()
            classes, splits = _load_imagefolder(root, image_size, cache_dir)
        else:
            root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
            if name in _CIFAR_FORMATS:
                classes, splits = _load_cifar(name, root, image_size, cache_dir, download)
            else:
                classes, splits = _load_torchvision(name, root, image_size, cache_dir, download)

        train = _to_split(*splits["train"])
        if "test" in splits:
            test = _to_split(*splits["test"])
        else:
            train, test = _stratified_holdout(train, val_fraction, len(classes), seed)
        train = _subset(train, train_size, "train_size", name, len(classes), seed)
        test = _subset(test, test_size, "test_size", name, len(classes), seed)
        return Dataset(name=name, classes=classes, train=train, test=test, source=str(root))


@contextlib.contextmanager
def _fits_in_memory(name: str) -> Iterator[None]:
    """A dataset too large for memory (huge sizes asked for) as one clear error."""
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
        raise TrickLabError(
            f"cannot read {imagefolder.printable(where)}: {exc.strerror or exc}"
        ) from exc


def _check_positive(option: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise TrickLabError(f"{option}={value!r} must be a positive whole number (data.{option}=)")


def _to_split(images: np.ndarray, labels: np.ndarray) -> Split:
    return Split(torch.from_numpy(images), torch.from_numpy(labels))


def _subset(
    split: Split, size: int | None, option: str, name: str, num_classes: int, seed: int
) -> Split:
    if size is None:
        return split
    if size > len(split):
        raise TrickLabError(
            f"{option}={size} is more than the {len(split)} images of {name}'s "
            f"{option.removesuffix('_size')} split; use at most {len(split)} (data.{option}=)"
        )
    return balanced_subset(split, size, num_classes, seed)


def _cached_splits(
    name: str,
    key_parts: dict,
    split_names: tuple[str, ...],
    cache_dir: str | Path | None,
    build: Callable[[], tuple[list[str], dict[str, tuple[np.ndarray, np.ndarray]]]],
) -> tuple[list[str], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The decoded splits from the cache, else `build()` them and cache them."""
    folder = cache.dataset_cache_dir(cache_dir)
    key = cache.cache_key(dataset=name, **key_parts)
    start = time.perf_counter()
    cached = cache.read_cached_splits(folder, name, key, split_names)
    if cached is not None:
        log.info("loaded %s from cache %s in %.2f s", name, folder, time.perf_counter() - start)
        classes = cached["train"][2]
        return classes, {split: (images, labels) for split, (images, labels, _) in cached.items()}
    created = first_missing(folder)
    try:
        cache.ensure_writable(folder)  # fail before a slow decode, not after
        classes, splits = build()
        log.info(
            "decoded %s in %.2f s; caching it in %s", name, time.perf_counter() - start, folder
        )
        cache.write_cached_splits(
            folder, name, key, {s: (*arrays, classes) for s, arrays in splits.items()}
        )
    except BaseException:
        # A failed check, decode or write leaves no cache folder behind that it made.
        remove_empty_dirs(folder, created)
        raise
    return classes, splits


# ---------------------------------------------------------------- image folders


def _load_imagefolder(root: Path, image_size: int | None, cache_dir: str | Path | None):
    sources = imagefolder.find_split_sources(root)
    key_parts = {
        "sources": {split: imagefolder.source_fingerprint(path) for split, path in sources.items()},
        "image_size": image_size,
        "decoder": imagefolder.DECODER_VERSION,
    }
    return _cached_splits(
        "imagefolder",
        key_parts,
        tuple(sources),
        cache_dir,
        lambda: imagefolder.decode_imagefolder(sources, image_size),
    )


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


# ---------------------------------------------------------------- CIFAR-10 / CIFAR-100 (official python release)


@dataclass(frozen=True)
class _CifarFormat:
    archive: str  # the downloaded file
    folder: str  # what it extracts to (torchvision uses the same folder)
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    meta_file: str
    label_key: bytes
    names_key: bytes
    num_classes: int


_CIFAR_FORMATS = {
    "cifar10": _CifarFormat(
        archive="cifar-10-python.tar.gz",
        folder="cifar-10-batches-py",
        train_files=tuple(f"data_batch_{i}" for i in range(1, 6)),
        test_files=("test_batch",),
        meta_file="batches.meta",
        label_key=b"labels",
        names_key=b"label_names",
        num_classes=10,
    ),
    "cifar100": _CifarFormat(
        archive="cifar-100-python.tar.gz",
        folder="cifar-100-python",
        train_files=("train",),
        test_files=("test",),
        meta_file="meta",
        label_key=b"fine_labels",
        names_key=b"fine_label_names",
        num_classes=100,
    ),
}


class _PlainDataUnpickler(pickle.Unpickler):
    """Unpickles plain data and numpy arrays only: any other global is refused.

    The official CIFAR python release *is* a set of pickles, so reading it needs pickle; this
    keeps a tampered file from running code.
    """

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _find_cifar_source(fmt: _CifarFormat, root: Path) -> Path | None:
    """The extracted folder (preferred: faster to read) or the downloaded archive, if present."""
    needed = (*fmt.train_files, *fmt.test_files, fmt.meta_file)
    for folder in (root / fmt.folder, root):
        if all((folder / f).is_file() for f in needed):
            return folder
    archive = root / fmt.archive
    return archive if archive.is_file() else None


def _load_cifar(name: str, root: Path, image_size: int | None, cache_dir, download: bool):
    fmt = _CIFAR_FORMATS[name]
    source = _find_cifar_source(fmt, root)
    if source is None:
        _download_with_torchvision(name, root, download, [root / fmt.folder, root / fmt.archive])
        source = _find_cifar_source(fmt, root)
        if source is None:
            raise _not_found(
                name, [root / fmt.folder, root / fmt.archive], "the download left no files"
            )
    if source.is_file():
        fingerprint = cache.sha256_file(source)
    else:
        files = [source / f for f in (*fmt.train_files, *fmt.test_files, fmt.meta_file)]
        fingerprint = cache.fingerprint_tree(files, source)
    return _cached_splits(
        name,
        {"fingerprint": fingerprint, "image_size": image_size},
        ("train", "test"),
        cache_dir,
        lambda: _read_cifar(name, fmt, source, image_size),
    )


def _read_cifar(name: str, fmt: _CifarFormat, source: Path, image_size: int | None):
    blobs = _read_cifar_files(fmt, source)
    meta = _unpickle(blobs[fmt.meta_file], fmt.meta_file, source)
    classes = [n.decode() if isinstance(n, bytes) else str(n) for n in meta.get(fmt.names_key, [])]
    if len(classes) != fmt.num_classes:
        raise TrickLabError(
            f"{fmt.meta_file} in {source} lists {len(classes)} class names, not {fmt.num_classes}; "
            f"it is not the official {name} release"
        )
    splits = {}
    for split, files in (("train", fmt.train_files), ("test", fmt.test_files)):
        images, labels = [], []
        for file in files:
            batch = _unpickle(blobs[file], file, source)
            try:  # a batch is a dict of a uint8 array and a list of ints; anything else is refused
                data = np.asarray(batch.get(b"data"))
                raw_labels = np.asarray(batch.get(fmt.label_key, []))
            except (AttributeError, TypeError, ValueError):
                data = raw_labels = None
            whole = (
                raw_labels is not None and raw_labels.ndim == 1 and raw_labels.dtype.kind in "iu"
            )
            batch_labels = raw_labels.astype(np.int64) if whole else None
            if (
                batch_labels is None
                or data.dtype != np.uint8
                or data.ndim != 2
                or data.shape[1] != 3 * 32 * 32
                or len(batch_labels) != len(data)
            ):
                raise TrickLabError(
                    f"{file} in {source} is not an official CIFAR batch (expected uint8 N×3072 data "
                    "and one label per image)"
                )
            _check_labels(batch_labels, fmt.num_classes, f"{file} in {source}")
            images.append(data.reshape(-1, 3, 32, 32))  # rows hold the R, G, B planes in turn
            labels.append(batch_labels)
        splits[split] = (_resize(np.concatenate(images), image_size), np.concatenate(labels))
    return classes, splits


def _read_cifar_files(fmt: _CifarFormat, source: Path) -> dict[str, bytes]:
    names = (*fmt.train_files, *fmt.test_files, fmt.meta_file)
    if source.is_dir():
        return {n: (source / n).read_bytes() for n in names}
    blobs = {}
    try:
        with tarfile.open(source, "r:gz") as tar:
            for n in names:
                try:
                    member = tar.extractfile(f"{fmt.folder}/{n}")
                except KeyError:
                    member = None
                if member is None:
                    raise TrickLabError(
                        f"archive {source} lacks {fmt.folder}/{n}; it is not the official release"
                    )
                blobs[n] = member.read()
    except (OSError, EOFError, tarfile.TarError) as err:
        raise TrickLabError(f"cannot read archive {source} ({err}); download it again") from err
    return blobs


def _unpickle(blob: bytes, file: str, source: Path) -> dict:
    try:
        # The release was pickled by Python 2: keys and strings come back as bytes.
        data = _PlainDataUnpickler(io.BytesIO(blob), encoding="bytes").load()
    except Exception as err:  # garbage bytes can make the unpickler raise almost anything
        raise TrickLabError(
            f"cannot read {file} in {source} ({err}); it is corrupt or not the official release"
        ) from err
    if not isinstance(data, dict):
        raise TrickLabError(f"{file} in {source} is not an official CIFAR file (expected a dict)")
    return data


def _check_labels(labels: np.ndarray, num_classes: int, where: str) -> None:
    bad = labels[(labels < 0) | (labels >= num_classes)]
    if len(bad):
        raise TrickLabError(
            f"label {int(bad[0])} in {where} is outside 0..{num_classes - 1} ({num_classes} classes); "
            "the file is damaged or belongs to another dataset"
        )


# ---------------------------------------------------------------- MNIST, Fashion-MNIST, SVHN (via torchvision)


def _torchvision_files(name: str, root: Path) -> list[Path]:
    """The files torchvision reads for this dataset (MNIST-style raw files are kept unzipped)."""
    from torchvision import datasets

    if name == "svhn":
        return [root / datasets.SVHN.split_list[split][1] for split in ("train", "test")]
    cls = datasets.MNIST if name == "mnist" else datasets.FashionMNIST
    raw = root / cls.__name__ / "raw"
    return [
        raw / os.path.basename(url_or_file).removesuffix(".gz") for url_or_file, _ in cls.resources
    ]


def _torchvision_split(name: str, root: Path, split: str, download: bool):
    from torchvision import datasets

    if name == "svhn":
        return datasets.SVHN(str(root), split=split, download=download)
    cls = datasets.MNIST if name == "mnist" else datasets.FashionMNIST
    return cls(str(root), train=split == "train", download=download)


def _load_torchvision(name: str, root: Path, image_size: int | None, cache_dir, download: bool):
    files = _torchvision_files(name, root)
    if not all(f.is_file() for f in files):
        _download_with_torchvision(name, root, download, files)
    return _cached_splits(
        name,
        {"fingerprint": cache.fingerprint_tree(files, root), "image_size": image_size},
        ("train", "test"),
        cache_dir,
        lambda: _read_torchvision(name, root, image_size),
    )


def _read_torchvision(name: str, root: Path, image_size: int | None):
    splits = {}
    for split in ("train", "test"):
        try:
            ds = _torchvision_split(name, root, split, download=False)
        # torchvision asserts on a malformed idx header and raises TypeError on a wrong dtype.
        except (RuntimeError, OSError, ValueError, AssertionError, TypeError) as err:
            raise TrickLabError(
                f"cannot read {name} from {root} ({str(err) or type(err).__name__}); delete the files "
                "and download again"
            ) from err
        if name == "svhn":  # already N×3×32×32; torchvision maps the digit 0 (stored as 10) to 0
            images, labels = np.asarray(ds.data), np.asarray(ds.labels, dtype=np.int64)
            classes = [str(digit) for digit in range(10)]
        else:  # N×28×28
            images, labels = ds.data.numpy()[:, None], ds.targets.numpy().astype(np.int64)
            classes = list(ds.classes)
        _check_labels(labels, len(classes), f"{name} {split} ({root})")
        splits[split] = (_resize(np.ascontiguousarray(images, dtype=np.uint8), image_size), labels)
    return classes, splits


def _download_with_torchvision(
    name: str, root: Path, download: bool, looked_for: list[Path]
) -> None:
    """Fetch `name` into `root` with torchvision, or raise a TrickLabError naming what was missing."""
    if not download:
        raise _not_found(name, looked_for, "download is off")
    from torchvision import datasets

    log.info("downloading %s into %s", name, root)
    created = first_missing(root)
    try:
        # torchvision prints its progress; library code keeps stdout clean.
        with contextlib.redirect_stdout(io.StringIO()):
            root.mkdir(parents=True, exist_ok=True)
            if name in _CIFAR_FORMATS:  # one archive holds both splits
                cifar = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
                cifar(str(root), train=True, download=True)
            else:
                for split in ("train", "test"):
                    _torchvision_split(name, root, split, download=True)
    except BaseException as err:
        if created is not None:  # everything under it was made by this failed download
            shutil.rmtree(created, ignore_errors=True)
        if not isinstance(err, (OSError, RuntimeError, ValueError)):
            raise
        first_line = (str(err).splitlines() or [type(err).__name__])[0]
        raise _not_found(name, looked_for, f"downloading failed: {first_line}") from err


def _not_found(name: str, looked_for: list[Path], why: str) -> TrickLabError:
    return TrickLabError(
        f"{name} not found: looked for {', '.join(str(p) for p in looked_for)} ({why}); "
        "put the files there or pass --data-dir / data.dir= pointing at them"
    )


# ---------------------------------------------------------------- resizing


def _resize(images: np.ndarray, image_size: int | None) -> np.ndarray:
    """Resize N×C×H×W uint8 images to image_size² with Pillow's bilinear filter (as image folders are)."""
    if image_size is None or images.shape[2:] == (image_size, image_size):
        return images
    channels = images.shape[1]
    out = np.empty((len(images), image_size, image_size, channels), dtype=np.uint8)
    for i, chw in enumerate(images):
        img = Image.fromarray(chw[0] if channels == 1 else chw.transpose(1, 2, 0))
        out[i] = np.asarray(
            img.resize((image_size, image_size), Image.Resampling.BILINEAR)
        ).reshape(image_size, image_size, channels)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


# ---------------------------------------------------------------- synthetic


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
    mean, std = _channel_mean_std(ds.train.images)
    return {
        "name": ds.name,
        "classes": list(ds.classes),
        "image_shape": list(ds.image_shape),
        "train": _describe_split(ds.train, ds.num_classes),
        "test": _describe_split(ds.test, ds.num_classes),
        "mean": mean,
        "std": std,
    }


def _describe_split(split: Split, num_classes: int) -> dict:
    per_class = torch.bincount(split.labels, minlength=num_classes)
    return {"size": len(split), "per_class": per_class.tolist()}


def _channel_mean_std(images: torch.Tensor, chunk: int = 2048) -> tuple[list[float], list[float]]:
    """Exact per-channel mean and std (integer sums, chunked to bound memory)."""
    channels = images.shape[1]
    total = torch.zeros(channels, dtype=torch.int64)
    total_sq = torch.zeros(channels, dtype=torch.int64)
    for block in images.split(chunk):
        wide = block.to(torch.int64)
        total += wide.sum(dim=(0, 2, 3))
        total_sq += (wide * wide).sum(dim=(0, 2, 3))
    count = images.numel() // channels
    mean = total.double() / count
    var = (total_sq.double() / count - mean * mean).clamp_min(0)
    return [round(float(m) / 255, 6) for m in mean], [round(float(s) / 255, 6) for s in var.sqrt()]
