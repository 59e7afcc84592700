"""MNIST, Fashion-MNIST and SVHN through torchvision's readers, and downloads through torchvision.

torchvision is imported when one of these is loaded, not before (it takes a second).
"""

from __future__ import annotations

import contextlib
import http.client
import io
import logging
import os
import shutil
from pathlib import Path

import numpy as np

from tricklab.core.errors import TrickLabError
from tricklab.core.paths import first_missing
from tricklab.data import cache
from tricklab.data.dataset import (
    LoadedSource,
    SourceRequest,
    check_labels,
    data_root,
    resize_images,
)

log = logging.getLogger(__name__)


def load_torchvision(request: SourceRequest) -> LoadedSource:
    """The loader `load_dataset` calls for mnist, fashion-mnist and svhn."""
    name, root = request.name, data_root(request)
    files = _files(name, root)
    if not all(f.is_file() for f in files):
        download_with_torchvision(name, root, request.download, files)
    classes, splits = cache.cached_splits(
        name,
        {"fingerprint": cache.fingerprint_tree(files, root), "image_size": request.image_size},
        ("train", "test"),
        request.cache_dir,
        lambda: _read(name, root, request.image_size),
    )
    return LoadedSource(classes, splits, str(root))


def _files(name: str, root: Path) -> list[Path]:
    """The files torchvision reads for this dataset (MNIST-style raw files are kept unzipped)."""
    from torchvision import datasets

    if name == "svhn":
        return [root / datasets.SVHN.split_list[split][1] for split in ("train", "test")]
    cls = datasets.MNIST if name == "mnist" else datasets.FashionMNIST
    raw = root / cls.__name__ / "raw"
    return [
        raw / os.path.basename(url_or_file).removesuffix(".gz") for url_or_file, _ in cls.resources
    ]


def _split(name: str, root: Path, split: str, download: bool):
    from torchvision import datasets

    if name == "svhn":
        return datasets.SVHN(str(root), split=split, download=download)
    cls = datasets.MNIST if name == "mnist" else datasets.FashionMNIST
    return cls(str(root), train=split == "train", download=download)


def _read(name: str, root: Path, image_size: int | None):
    splits, shapes = {}, {}
    for split in ("train", "test"):
        try:
            ds = _split(name, root, split, download=False)
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
        if len(images) != len(labels):  # one file of another download, or cut short
            raise TrickLabError(
                f"{name} {split} ({root}) holds {len(images):,} images and {len(labels):,} "
                "labels; delete the files and download again"
            )
        check_labels(labels, len(classes), f"{name} {split} ({root})")
        images, shapes[split] = np.ascontiguousarray(images, dtype=np.uint8), images.shape[1:]
        splits[split] = (resize_images(images, image_size, name), labels)
    if shapes["train"] != shapes["test"]:  # trained on one size, measured on another
        raise TrickLabError(
            f"{name} ({root}): train images are {'x'.join(map(str, shapes['train']))} and test "
            f"images {'x'.join(map(str, shapes['test']))}; delete the files and download again"
        )
    return classes, splits


def download_with_torchvision(
    name: str, root: Path, download: bool, looked_for: list[Path]
) -> None:
    """Fetch `name` into `root` with torchvision, or raise a TrickLabError naming what was missing."""
    if root.exists() and not root.is_dir():  # not "not found (downloading failed: File exists)"
        raise TrickLabError(
            f"{name}: the data folder {root} is a file; pass --data-dir / data.dir= naming the "
            "folder that holds (or is to hold) its files"
        )
    if not download:
        raise not_found(name, root, looked_for, "download is off")
    from torchvision import datasets

    log.info("downloading %s into %s", name, root)
    created = first_missing(root)
    before = set(os.listdir(root)) if created is None else set()
    try:
        # torchvision prints its progress; library code keeps stdout clean.
        with contextlib.redirect_stdout(io.StringIO()):
            root.mkdir(parents=True, exist_ok=True)
            if name in ("cifar10", "cifar100"):  # one archive holds both splits
                cifar = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
                cifar(str(root), train=True, download=True)
            else:
                for split in ("train", "test"):
                    _split(name, root, split, download=True)
    except BaseException as err:
        # what this failed download made: the folders it created, or what it added to root
        # (torchvision makes MNIST/raw/ before it fetches a byte)
        with contextlib.suppress(OSError):
            made = [created] if created is not None else [root / n for n in os.listdir(root)]
            for path in (p for p in made if p.name not in before):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        if not isinstance(err, (OSError, RuntimeError, ValueError, http.client.HTTPException)):
            raise  # HTTPException: a proxy variable that names no URL (http.client.InvalidURL)
        first_line = (str(err).splitlines() or [type(err).__name__])[0]
        raise not_found(name, root, looked_for, f"downloading failed: {first_line}") from err


def not_found(name: str, root: Path, looked_for: list[Path], why: str) -> TrickLabError:
    """`name`'s files are not in `root`: where it looked, why, and where to get them."""
    return TrickLabError(
        f"{name} not found: looked for {', '.join(str(p) for p in looked_for)} ({why}); "
        f"{where_to_get(name, root)}, or pass --data-dir / data.dir= naming the folder that "
        "holds them"
    )


def where_to_get(name: str, root: Path) -> str:
    """The URLs `name`'s files come from (torchvision's, which its download fetches) and where
    in `root` they go."""
    from torchvision import datasets

    if name in ("cifar10", "cifar100"):
        cifar = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
        return (
            f"download {cifar.url} into {root} (the archive {cifar.filename} as it is, or "
            f"extracted to {cifar.base_folder}/)"
        )
    if name == "svhn":
        urls = [datasets.SVHN.split_list[split][0] for split in ("train", "test")]
        return f"download {' and '.join(urls)} into {root}"
    cls = datasets.MNIST if name == "mnist" else datasets.FashionMNIST
    urls = [cls.mirrors[0] + file for file, _ in cls.resources]
    return f"download {', '.join(urls)} into {root / cls.__name__ / 'raw'} and gunzip them"
