"""CIFAR-10 and CIFAR-100 from the official python release (the archive or its extracted folder).

The release is a set of Python 2 pickles; `_PlainDataUnpickler` reads them allowing numpy arrays
and plain data only, so a tampered file cannot run code, and every batch must be a uint8 N×3072
array with one whole-number label per row, each file at most `MAX_CIFAR_FILE_BYTES`.
"""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tricklab.core.errors import TrickLabError
from tricklab.core.memory import format_bytes
from tricklab.core.safeio import shown
from tricklab.data import cache
from tricklab.data.dataset import (
    LoadedSource,
    SourceRequest,
    check_labels,
    data_root,
    resize_images,
)
from tricklab.data.limits import MAX_CIFAR_FILE_BYTES
from tricklab.data.torchvision_sources import download_with_torchvision, not_found

MAX_CLASS_NAME_CHARS = 200  # the release's longest, "aquarium_fish", has 13


@dataclass(frozen=True)
class CifarFormat:
    archive: str  # the downloaded file
    folder: str  # what it extracts to (torchvision uses the same folder)
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    meta_file: str
    label_key: bytes
    names_key: bytes
    num_classes: int

    @property
    def files(self) -> tuple[str, ...]:
        return (*self.train_files, *self.test_files, self.meta_file)


CIFAR_FORMATS = {
    "cifar10": CifarFormat(
        archive="cifar-10-python.tar.gz",
        folder="cifar-10-batches-py",
        train_files=tuple(f"data_batch_{i}" for i in range(1, 6)),
        test_files=("test_batch",),
        meta_file="batches.meta",
        label_key=b"labels",
        names_key=b"label_names",
        num_classes=10,
    ),
    "cifar100": CifarFormat(
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


def load_cifar(request: SourceRequest) -> LoadedSource:
    """The loader `load_dataset` calls for cifar10 and cifar100 (downloading when allowed)."""
    name, root = request.name, data_root(request)
    fmt = CIFAR_FORMATS[name]
    looked_for = [root / fmt.folder, root / fmt.archive]
    source = _find_source(fmt, root)
    if source is None:
        download_with_torchvision(name, root, request.download, looked_for)
        source = _find_source(fmt, root)
        if source is None:
            raise not_found(name, root, looked_for, "the download left no files")
    if source.is_file():
        fingerprint = cache.sha256_file(source)
    else:
        fingerprint = cache.fingerprint_tree([source / f for f in fmt.files], source)
    classes, splits = cache.cached_splits(
        name,
        {"fingerprint": fingerprint, "image_size": request.image_size},
        ("train", "test"),
        request.cache_dir,
        lambda: _read_cifar(name, fmt, source, request.image_size),
    )
    return LoadedSource(classes, splits, str(root))


def _find_source(fmt: CifarFormat, root: Path) -> Path | None:
    """The extracted folder (preferred: faster to read) or the downloaded archive, if present."""
    for folder in (root / fmt.folder, root):
        if all((folder / f).is_file() for f in fmt.files):
            return folder
    archive = root / fmt.archive
    if os.path.lexists(archive) and not archive.is_file():  # a FIFO, a device: no download
        raise TrickLabError(f"{shown(archive)} is not a regular file (a pipe, a device or a link "
                            "to one); put the downloaded archive there, or remove it")  # fmt: skip
    return archive if archive.is_file() else None


def _read_cifar(name: str, fmt: CifarFormat, source: Path, image_size: int | None):
    blobs = _read_files(fmt, source)
    meta = _unpickle(blobs[fmt.meta_file], fmt.meta_file, source)
    classes = _class_names(meta.get(fmt.names_key), fmt, source, name)
    splits = {}
    for split, files in (("train", fmt.train_files), ("test", fmt.test_files)):
        images, labels = [], []
        for file in files:
            data, batch_labels = _batch_arrays(_unpickle(blobs[file], file, source), fmt)
            if data is None:
                raise TrickLabError(
                    f"{file} in {source} is not an official CIFAR batch (expected uint8 N×3072 data "
                    "and one label per image)"
                )
            check_labels(batch_labels, fmt.num_classes, f"{file} in {source}")
            images.append(data.reshape(-1, 3, 32, 32))  # rows hold the R, G, B planes in turn
            labels.append(batch_labels)
        splits[split] = (
            resize_images(np.concatenate(images), image_size, name),
            np.concatenate(labels),
        )
    return classes, splits


def _class_names(raw: object, fmt: CifarFormat, source: Path, name: str) -> list[str]:
    """The meta file's class names: a list of `num_classes` distinct short texts (the release's
    are UTF-8 bytes). Anything else is refused before it is turned into text: a pickle can
    repeat one list by reference until its text would fill the memory."""
    where = f"{fmt.meta_file} in {source}"
    if not isinstance(raw, list) or len(raw) != fmt.num_classes:
        count = f"{len(raw)} class names" if isinstance(raw, list) else "no list of class names"
        raise TrickLabError(
            f"{where} holds {count}, not {fmt.num_classes}; it is not the official {name} release"
        )
    classes = []
    for n in raw:
        text = None
        if isinstance(n, (bytes, str)) and 0 < len(n) <= MAX_CLASS_NAME_CHARS:
            try:
                text = n.decode("utf-8") if isinstance(n, bytes) else n
            except UnicodeDecodeError:
                pass
        if text is None or text in classes:
            raise TrickLabError(
                f"{where} lists a class name that is no short UTF-8 text or is given twice; "
                f"it is not the official {name} release"
            )
        classes.append(text)
    return classes


def _batch_arrays(batch: dict, fmt: CifarFormat) -> tuple[np.ndarray | None, np.ndarray]:
    """A batch's uint8 N×3072 data and int64 labels, or (None, ...) when it is not one.

    The data must already be an array: turning nested lists into one could build an array far
    larger than the file (a pickle can repeat one row by reference).
    """
    data, raw_labels = batch.get(b"data"), batch.get(fmt.label_key)
    if isinstance(raw_labels, list) and all(
        _is_whole(x) and -(2**63) <= x < 2**63 for x in raw_labels
    ):
        labels = np.array(raw_labels, dtype=np.int64).reshape(-1)
    elif (
        isinstance(raw_labels, np.ndarray)
        and raw_labels.ndim == 1
        and raw_labels.dtype.kind in "iu"
    ):
        labels = raw_labels.astype(np.int64)
    else:
        return None, np.zeros(0, np.int64)
    if (
        not isinstance(data, np.ndarray)
        or data.dtype != np.uint8
        or data.ndim != 2
        or data.shape[1] != 3 * 32 * 32
        or len(labels) != len(data)
    ):
        return None, labels
    return data, labels


def _is_whole(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _read_files(fmt: CifarFormat, source: Path) -> dict[str, bytes]:
    if source.is_dir():
        for n in fmt.files:
            _check_size(os.stat(source / n).st_size, f"{n} in {source}")
        return {n: (source / n).read_bytes() for n in fmt.files}
    blobs = {}
    try:
        with tarfile.open(source, "r:gz") as tar:
            for n in fmt.files:
                try:
                    member = tar.getmember(f"{fmt.folder}/{n}")
                except KeyError:
                    member = None
                if member is None or not member.isfile():
                    raise TrickLabError(
                        f"archive {source} lacks {fmt.folder}/{n}; it is not the official release"
                    )
                _check_size(member.size, f"{fmt.folder}/{n} in {source}")
                blobs[n] = tar.extractfile(member).read()
    except (OSError, EOFError, tarfile.TarError) as err:
        raise TrickLabError(f"cannot read archive {source} ({err}); download it again") from err
    return blobs


def _check_size(size: int, where: str) -> None:
    if size > MAX_CIFAR_FILE_BYTES:
        raise TrickLabError(
            f"{where} is {size:,} bytes, more than the {format_bytes(MAX_CIFAR_FILE_BYTES)} a file "
            "of the official release may be; it is not the official release"
        )


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
