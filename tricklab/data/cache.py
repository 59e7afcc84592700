"""Decoded-dataset cache: one `.npz` file per split, keyed by the source's content.

Decoding 60,000 JPEGs takes seconds; reading the decoded arrays back takes a fraction of one.
Each cached split is a plain numpy archive (`images` uint8 N×C×H×W, `labels` int64 N, `classes` a
unicode array, `key` the file's own cache key), so loading it with `allow_pickle=False` can never
execute code. A file's name holds a sha256 over the source's fingerprint (see `sha256_file` and
`fingerprint_tree`) and the decode options (image size), so a changed source or option simply
misses the cache. The splits are written to temporary names in the same folder and renamed into
place only when all are written, so a crash or a full disk never leaves a half-written file, or
one split without the other, under a real name.

A cached file is trusted only if it is exactly what `write_cached_splits` writes: a zip of the
four stored (uncompressed) arrays with the expected dtypes and shapes, each array's size matching
its header, its CRC matching, labels within the classes and the key matching its name. Anything
else (an empty file, a `.npy`, a truncated or foreign file, a link to a device) is a miss, logged
and decoded again; no array larger than the file itself is ever allocated for it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import stat
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from tricklab.core.errors import TrickLabError
from tricklab.core.paths import (
    PATH_ERRNOS,
    first_missing,
    home_folder,
    remove_empty_dirs,
    user_path,
)
from tricklab.core.progress import decoding

log = logging.getLogger(__name__)

# Bump when the decoded content for the same source changes (e.g. a different resize filter).
# 2: each file holds its own key.
CACHE_FORMAT_VERSION = 2
_TEMP_SUFFIX = ".partial"
# The arrays of a cached split: the dtype kind each must have and its number of dimensions.
_ARRAYS = {"images": ("u1", 4), "labels": ("i8", 1), "classes": ("U", 1), "key": ("U", 0)}
_READ_CHUNK_BYTES = 1 << 20
_HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}

SplitArrays = tuple[np.ndarray, np.ndarray, list[str]]  # images, labels, class names


def default_cache_dir() -> Path:
    """`$TRICKLAB_CACHE` when set, else `~/.cache/tricklab`."""
    env = os.environ.get("TRICKLAB_CACHE")
    if env and env.strip():  # blank as unset, as empty is: not a folder named " "
        return user_path(env, "TRICKLAB_CACHE")
    return home_folder("TRICKLAB_CACHE") / ".cache" / "tricklab"


def dataset_cache_dir(cache_dir: str | Path | None) -> Path:
    """The folder holding decoded datasets: `<cache_dir>/datasets`."""
    root = user_path(cache_dir, "cache_dir") if cache_dir is not None else default_cache_dir()
    return root / "datasets"


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """sha256 of a file's bytes (used for archives: hashing 20 MB takes a few milliseconds)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint_tree(
    paths: Iterable[Path], root: Path, read: Callable[[Path], bool] | None = None
) -> str:
    """sha256 over each entry's (path relative to root, kind, size and sha256 of its bytes): the
    tree's content. Each name is written with its length, each file's bytes as their own digest,
    so no arrangement of names and bytes can read as another tree's.

    Editing, adding, removing or renaming a file or folder (an empty class folder too) changes it;
    touching or copying files does not. Reading 50,000 CIFAR JPEGs for it takes about 0.7 s
    (against seconds to decode them). Only regular files are read: anything else (a FIFO, a link
    to a device or to nothing) counts by its name, since reading it might never end; a file that
    `read` says the decode does not read (a stray video in an image folder) by its name and size.
    """
    digest = hashlib.sha256()
    for path in sorted(paths):
        # The name's bytes as on disk: a name that is not UTF-8 holds surrogates as a str.
        name = os.fsencode(path.relative_to(root).as_posix())
        digest.update(len(name).to_bytes(8, "big") + name)
        try:
            mode = os.stat(path).st_mode  # through links, as reading does
        except FileNotFoundError:  # a link to nothing
            mode = 0
        if stat.S_ISDIR(mode):
            digest.update(b"d")
            continue
        if not stat.S_ISREG(mode):
            digest.update(b"o")  # not a file
            continue
        if read is not None and not read(path):
            digest.update(b"s" + os.stat(path).st_size.to_bytes(8, "big"))
            continue
        content = hashlib.sha256()
        with path.open("rb") as f:  # in chunks: a huge stray file costs time, not memory
            size = os.fstat(f.fileno()).st_size
            while chunk := f.read(1 << 20):
                content.update(chunk)
        digest.update(b"f" + size.to_bytes(8, "big") + content.digest())
    return digest.hexdigest()


def cache_key(**parts: object) -> str:
    """sha256 of the JSON of `parts` plus the cache format version (parts must be JSON-able)."""
    payload = json.dumps({"format": CACHE_FORMAT_VERSION, **parts}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def split_file(folder: Path, name: str, key: str, split: str) -> Path:
    """Where one cached split lives, e.g. `datasets/imagefolder-3f2a…-train.npz`."""
    return folder / f"{name}-{key[:32]}-{split}.npz"


def read_cached_splits(
    folder: Path, name: str, key: str, splits: Iterable[str], image_size: int | None = None
) -> dict[str, SplitArrays] | None:
    """All requested splits from the cache, or None when any of them is missing, damaged, or
    does not fit the others (a file that no decode could have written is rebuilt, not trusted).
    `image_size`: the side every image was resized to, when the key holds one."""
    result = {}
    for split in splits:
        path = split_file(folder, name, key, split)
        arrays = _read_split(path, file_key(name, key, split), image_size)
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


def file_key(name: str, key: str, split: str) -> str:
    """What a cached split holds as `key`: its dataset, full cache key and split."""
    return f"{name}-{key}-{split}"


def _read_split(path: Path, expected_key: str, image_size: int | None) -> SplitArrays | None:
    """One cached split, or None (logged) when the file is missing or is not exactly what
    `write_cached_splits` writes for this key (images of `image_size`² pixels when it is set)."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise TrickLabError(f"the dataset cache file {path} is a folder; delete that folder")
        if not stat.S_ISREG(mode):
            raise _Damaged("not a regular file")
        with open(path, "rb") as f, zipfile.ZipFile(f) as archive:
            arrays = _read_arrays(archive, os.fstat(f.fileno()).st_size)
    except (FileNotFoundError, NotADirectoryError):  # none yet; a file as a folder: said on write
        return None
    except OSError as err:  # a path the cache cannot use (too long, a link loop, no access) is
        if err.errno in PATH_ERRNOS:  # said once, when the decode's result is written there
            return None
        log.warning("ignoring damaged cache file %s (%s); decoding the source again", path, err)
        return None
    except (MemoryError, TrickLabError):
        raise  # an intact file too large for memory: decoding again would not fit either
    except Exception as err:  # a damaged file can make zipfile or numpy raise almost anything
        # A damaged cache file is rebuilt from the source, which is still there.
        log.warning("ignoring damaged cache file %s (%s); decoding the source again", path, err)
        return None
    images, labels, classes, key = (arrays[name] for name in _ARRAYS)
    problem = (
        "it belongs to another source or option"
        if key.item() != expected_key
        else "its labels do not match its images"
        if len(labels) != len(images)
        else "its images have neither 1 nor 3 channels"
        if images.shape[1] not in (1, 3)
        else "it holds no image, or images of no pixel"
        if 0 in images.shape
        else f"its images are not {image_size}×{image_size} pixels, as its key says"
        if image_size is not None and images.shape[2:] != (image_size, image_size)
        else "its labels are outside its classes"
        if labels.min() < 0 or labels.max() >= len(classes)
        else "it names fewer than 2 classes, or a class twice"
        if len(classes) < 2 or len(set(classes.tolist())) != len(classes)
        else None
    )
    if problem:
        log.warning("ignoring cache file %s: %s; decoding the source again", path, problem)
        return None
    return images, labels, [str(c) for c in classes]


def _read_exactly(member, nbytes: int, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """Read an array's bytes in chunks straight into it (zipfile checks the CRC at the end)."""
    array = np.empty(shape, dtype=dtype)
    view = memoryview(array.reshape(-1).view(np.uint8))
    filled = 0
    while filled < nbytes:
        got = member.readinto(view[filled : filled + _READ_CHUNK_BYTES])
        if not got:
            raise _Damaged("an array ends before its header says")
        filled += got
    return array


class _Damaged(Exception):
    """A cache file that is not what tricklab writes."""


def _read_arrays(archive: zipfile.ZipFile, file_bytes: int) -> dict[str, np.ndarray]:
    """The four arrays of a cached split, each checked against its header before it is read."""
    infos = archive.infolist()
    names = sorted(info.filename for info in infos)
    if names != sorted(f"{name}.npy" for name in _ARRAYS):
        raise _Damaged(f"it holds {', '.join(names) or 'nothing'}")
    arrays = {}
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED or info.file_size > file_bytes:
            raise _Damaged(f"{info.filename} is compressed or larger than the file")
        name = info.filename.removesuffix(".npy")
        with archive.open(info) as member:
            read_header = _HEADER_READERS.get(np.lib.format.read_magic(member))
            if read_header is None:
                raise _Damaged(f"{info.filename} has an npy format tricklab does not write")
            shape, fortran_order, dtype = read_header(member)
            kind, ndim = _ARRAYS[name]
            nbytes = math.prod(shape) * dtype.itemsize
            if (
                (dtype.kind if kind == "U" else dtype.str[1:]) != kind
                or not dtype.isnative
                or len(shape) != ndim
                or fortran_order
                or member.tell() + nbytes != info.file_size
            ):
                raise _Damaged(f"{info.filename} holds {dtype} {shape}, not what tricklab writes")
            arrays[name] = _read_exactly(member, nbytes, dtype, shape)
    return arrays


ABANDONED_SECONDS = 600  # a partial file its writer has not touched for this long: a killed one


def remove_abandoned(folder: Path) -> None:
    """Remove the partial files in `folder` no writer has touched for ABANDONED_SECONDS."""
    with contextlib.suppress(OSError):  # a folder not there (yet), or that cannot be listed
        for partial in folder.glob(f"*{_TEMP_SUFFIX}"):
            with contextlib.suppress(OSError):  # another process removed it first
                if time.time() - partial.lstat().st_mtime > ABANDONED_SECONDS:
                    partial.unlink()


def ensure_writable(folder: Path) -> None:
    """Create the cache folder and prove a file can be written there, before any slow decode;
    remove the partial files of writers killed there (SIGKILL, or a signal whose default is to
    kill: a write touches its file every few milliseconds, so one untouched for 10 minutes is
    abandoned)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, suffix=_TEMP_SUFFIX):
            pass
        remove_abandoned(folder)
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
            temps[path] = _write_temp(path, images, labels, classes, file_key(name, key, split))
        for path, temp in temps.items():
            os.replace(temp, path)
            placed.append(path)
    except BaseException as err:
        for leftover in (*temps.values(), *placed):
            leftover.unlink(missing_ok=True)
        if isinstance(err, OSError):
            advice = (
                "delete that folder"
                if isinstance(err, IsADirectoryError)
                else "set TRICKLAB_CACHE or pass cache_dir= (data.cache_dir=) to a folder with "
                "free space"
            )
            raise TrickLabError(
                f"cannot write the dataset cache file {path} ({err.strerror or err}); {advice}"
            ) from err
        raise


def _write_temp(
    path: Path, images: np.ndarray, labels: np.ndarray, classes: list[str], key: str
) -> Path:
    """One split in a temporary file beside `path` (removed again if writing it fails)."""
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=_TEMP_SUFFIX)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            # Uncompressed: loading is then a plain read, which is what makes the cache fast.
            np.savez(
                f,
                images=images,
                labels=labels,
                classes=np.array(classes, dtype=np.str_),
                key=np.array(key, dtype=np.str_),
            )
        os.chmod(temp, 0o644)  # mkstemp makes 0600; a shared cache folder wants readable files
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def cached_splits(
    name: str,
    key_parts: dict,
    split_names: Iterable[str],
    cache_dir: str | Path | None,
    build: Callable[[], tuple[list[str], dict[str, tuple[np.ndarray, np.ndarray]]]],
    parts_now: Callable[[], dict] | None = None,
) -> tuple[list[str], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The decoded splits from the cache, else `build()` them and cache them.

    `key_parts` (JSON-able) identify the source's content and the decode options; `parts_now`
    gives them again after the decode: a source that changed while it was read is a
    TrickLabError, not a decode of part old, part new kept under the old content's key.
    """
    folder = dataset_cache_dir(cache_dir)
    key = cache_key(dataset=name, **key_parts)
    start = time.perf_counter()
    cached = read_cached_splits(folder, name, key, split_names, key_parts.get("image_size"))
    if cached is not None:
        remove_abandoned(folder)  # a killed writer's partial file, found on a hit too
        log.info("loaded %s from cache %s in %.2f s", name, folder, time.perf_counter() - start)
        classes = cached["train"][2]
        return classes, {split: (images, labels) for split, (images, labels, _) in cached.items()}
    created = first_missing(folder)
    try:
        ensure_writable(folder)  # fail before a slow decode, not after
        with decoding(f"decoding {name}"):  # shown by the CLI's display, if any
            classes, splits = build()
        if parts_now is not None and parts_now() != key_parts:
            raise TrickLabError(
                f"the {name} files changed while they were decoded (another program writes "
                "to them): run again once nothing does"
            )
        log.info(
            "decoded %s in %.2f s; caching it in %s", name, time.perf_counter() - start, folder
        )
        write_cached_splits(
            folder, name, key, {s: (*arrays, classes) for s, arrays in splits.items()}
        )
    except BaseException:
        # A failed check, decode or write leaves no cache folder behind that it made.
        remove_empty_dirs(folder, created)
        raise
    return classes, splits
