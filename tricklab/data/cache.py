"""Decoded-dataset cache: one `.npz` file per split, keyed by the source's content.

Decoding 60,000 JPEGs takes seconds; reading the decoded arrays back takes a fraction of one.
Each cached split is a plain numpy archive (`images` uint8 N×C×H×W, `labels` int64 N, `classes` a
unicode array), so loading it with `allow_pickle=False` can never execute code. A file's name holds
a sha256 over the source's fingerprint (see `sha256_file` and `fingerprint_tree`) and the decode
options (image size), so a changed source or option simply misses the cache. The splits are
written to temporary names in the same folder and renamed into place only when all are written,
so a crash or a full disk never leaves a half-written file, or one split without the other, under
a real name. A cached file whose labels or classes do not fit is a miss, decoded again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from tricklab.errors import TrickLabError

log = logging.getLogger(__name__)

# Bump when the decoded content for the same source changes (e.g. a different resize filter).
CACHE_FORMAT_VERSION = 1
_TEMP_SUFFIX = ".partial"

SplitArrays = tuple[np.ndarray, np.ndarray, list[str]]  # images, labels, class names


def default_cache_dir() -> Path:
    """`$TRICKLAB_CACHE` when set, else `~/.cache/tricklab`."""
    env = os.environ.get("TRICKLAB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tricklab"


def dataset_cache_dir(cache_dir: str | Path | None) -> Path:
    """The folder holding decoded datasets: `<cache_dir>/datasets`."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return root / "datasets"


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """sha256 of a file's bytes (used for archives: hashing 20 MB takes a few milliseconds)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint_tree(paths: Iterable[Path], root: Path) -> str:
    """sha256 over (path relative to root, size, bytes) of each file, and the relative path of
    each folder: the tree's content.

    Editing, adding, removing or renaming a file or folder (an empty class folder too) changes it;
    touching or copying files does not. Reading 50,000 CIFAR JPEGs for it takes about 0.7 s
    (against seconds to decode them).
    """
    digest = hashlib.sha256()
    for path in sorted(paths):
        # The name's bytes as on disk: a name that is not UTF-8 holds surrogates as a str.
        name = os.fsencode(path.relative_to(root).as_posix())
        if path.is_dir():
            digest.update(name + b"/\n")
            continue
        data = path.read_bytes()
        digest.update(name + f"\t{len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


def cache_key(**parts: object) -> str:
    """sha256 of the JSON of `parts` plus the cache format version (parts must be JSON-able)."""
    payload = json.dumps({"format": CACHE_FORMAT_VERSION, **parts}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def split_file(folder: Path, name: str, key: str, split: str) -> Path:
    """Where one cached split lives, e.g. `datasets/imagefolder-3f2a…-train.npz`."""
    return folder / f"{name}-{key[:32]}-{split}.npz"


def read_cached_splits(
    folder: Path, name: str, key: str, splits: Iterable[str]
) -> dict[str, SplitArrays] | None:
    """All requested splits from the cache, or None when any of them is missing, unreadable, or
    does not fit the others (a file that no decode could have written is rebuilt, not trusted)."""
    result = {}
    for split in splits:
        path = split_file(folder, name, key, split)
        if not path.is_file():
            return None
        arrays = _read_split(path)
        if arrays is None:
            return None
        if result:
            first_images, _, first_classes = next(iter(result.values()))
            if arrays[2] != first_classes or arrays[0].shape[1:] != first_images.shape[1:]:
                log.warning(
                    "ignoring cache file %s whose classes or image shape differ from the other "
                    "split's; decoding the source again",
                    path,
                )
                return None
        result[split] = arrays
    return result


def _read_split(path: Path) -> SplitArrays | None:
    try:
        with np.load(path, allow_pickle=False) as npz:
            images, labels, classes = npz["images"], npz["labels"], npz["classes"]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
        # A damaged cache file is rebuilt from the source, which is still there.
        log.warning("ignoring unreadable cache file %s (%s); decoding the source again", path, err)
        return None
    if (
        images.dtype != np.uint8
        or images.ndim != 4
        or labels.dtype != np.int64
        or labels.ndim != 1
        or len(labels) != len(images)
        or classes.ndim != 1
        or (len(labels) and (labels.min() < 0 or labels.max() >= len(classes)))
    ):
        log.warning(
            "ignoring cache file %s with unexpected arrays; decoding the source again", path
        )
        return None
    return images, labels, [str(c) for c in classes]


def ensure_writable(folder: Path) -> None:
    """Create the cache folder and prove a file can be written there, before any slow decode."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, suffix=_TEMP_SUFFIX):
            pass
    except OSError as err:
        raise TrickLabError(
            f"cannot write the dataset cache in {folder} ({err.strerror or err}); "
            "set TRICKLAB_CACHE or pass cache_dir= (data.cache_dir=) to a writable folder"
        ) from err


def write_cached_splits(folder: Path, name: str, key: str, splits: dict[str, SplitArrays]) -> None:
    """Write every split of one dataset, all or nothing: each to a temporary file in the same
    folder, then all renamed into place. A failure (a full disk while writing test) leaves no
    lone train file behind, and no temporary file."""
    temps: dict[Path, Path] = {}  # final path -> temporary file
    placed: list[Path] = []
    path = folder
    try:
        for split, (images, labels, classes) in splits.items():
            path = split_file(folder, name, key, split)
            temps[path] = _write_temp(path, images, labels, classes)
        for path, temp in temps.items():
            os.replace(temp, path)
            placed.append(path)
    except BaseException as err:
        for leftover in (*temps.values(), *placed):
            leftover.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise TrickLabError(
                f"cannot write the dataset cache file {path} ({err.strerror or err}); "
                "set TRICKLAB_CACHE or pass cache_dir= (data.cache_dir=) to a folder with free space"
            ) from err
        raise


def _write_temp(path: Path, images: np.ndarray, labels: np.ndarray, classes: list[str]) -> Path:
    """One split in a temporary file beside `path` (removed again if writing it fails)."""
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=_TEMP_SUFFIX)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            # Uncompressed: loading is then a plain read, which is what makes the cache fast.
            np.savez(f, images=images, labels=labels, classes=np.array(classes, dtype=np.str_))
        os.chmod(temp, 0o644)  # mkstemp makes 0600; a shared cache folder wants readable files
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp
