"""Decoded-dataset cache: one `.npz` file per split, keyed by the source's content.

Decoding 60,000 JPEGs takes seconds; reading the decoded arrays back takes a fraction of one.
Each cached split is a plain numpy archive (`images` uint8 N×C×H×W, `labels` int64 N, `classes` a
unicode array), so loading it with `allow_pickle=False` can never execute code. A file's name holds
a sha256 over the source's fingerprint (see `sha256_file` and `fingerprint_tree`) and the decode
options (image size), so a changed source or option simply misses the cache. Files are written to a
temporary name in the same folder and renamed into place, so a crash never leaves a half-written
file under a real name.
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
    """All requested splits from the cache, or None when any of them is missing or unreadable."""
    result = {}
    for split in splits:
        path = split_file(folder, name, key, split)
        if not path.is_file():
            return None
        arrays = _read_split(path)
        if arrays is None:
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
        or len(labels) != len(images)
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


def write_split(path: Path, images: np.ndarray, labels: np.ndarray, classes: list[str]) -> None:
    """Write one split atomically: a temporary file in the same folder, then `os.replace`."""
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=_TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            # Uncompressed: loading is then a plain read, which is what makes the cache fast.
            np.savez(f, images=images, labels=labels, classes=np.array(classes, dtype=np.str_))
        os.chmod(temp_name, 0o644)  # mkstemp makes 0600; a shared cache folder wants readable files
        os.replace(temp_name, path)
    except BaseException as err:
        Path(temp_name).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise TrickLabError(
                f"cannot write the dataset cache file {path} ({err.strerror or err}); "
                "set TRICKLAB_CACHE or pass cache_dir= (data.cache_dir=) to a folder with free space"
            ) from err
        raise


def write_cached_splits(folder: Path, name: str, key: str, splits: dict[str, SplitArrays]) -> None:
    """Write every split of one dataset (each file atomically)."""
    for split, (images, labels, classes) in splits.items():
        write_split(split_file(folder, name, key, split), images, labels, classes)
