"""Image folders: `DIR/train/<class>/*` and `DIR/test/<class>/*`, or `train.tar.gz` / `test.tar.gz`.

This module finds a folder's splits and caches what `imagefolder_decode` decodes from the files
`imagefolder_files` lists. Images are decoded with Pillow, one by one: on two shared cores a
thread pool measured slower than this plain loop (Pillow's per-image work is mostly Python-side
for 32×32 images). Archives are streamed member by member, never extracted to disk nor held whole in memory; a
member with an absolute path or `..`, or a link, is refused. Hidden files and folders
(`.DS_Store`, `._x.jpg`, `.ipynb_checkpoints`) are skipped silently; other files whose suffix is
not an image suffix are skipped with a warning naming them. Sizes are bounded before anything
large is read (see `tricklab.data.limits`): an image file or member by its bytes, an image by the
pixels its header declares, the decoded dataset by the memory available.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from tricklab.core.errors import TrickLabError
from tricklab.data.cache import cached_splits, dataset_cache_dir, fingerprint_tree, sha256_file
from tricklab.data.dataset import LoadedSource, SourceRequest
from tricklab.data.imagefolder_decode import decode_imagefolder
from tricklab.data.imagefolder_files import (
    ARCHIVE_SUFFIXES,
    check_file_size,
    is_image_file,
    walk_folder,
)

# Part of the cache key: raised when decoding changes what images come out (2: 16-bit grey scaled,
# 3: 8-bit values in a 16- or 32-bit file refused, not cached black; class names composed, NFC).
DECODER_VERSION = 3
# Folder (or archive) names of each split; torchvision/Lightning layouts often call the test split val/.
SPLIT_FOLDERS = {"train": ("train",), "test": ("test", "val")}


def load_imagefolder(request: SourceRequest) -> LoadedSource:
    """The loader `load_dataset` calls: every split decoded once, then read from the cache."""
    if request.data_dir is None:
        raise TrickLabError(
            "dataset 'imagefolder' needs its folder: pass data_dir= (--data-dir / data.dir=) "
            "holding train/<class>/<image> or train.tar.gz"
        )
    sources = find_split_sources(request.data_dir)
    _check_cache_outside(sources, dataset_cache_dir(request.cache_dir))

    def parts() -> dict:
        return {
            "sources": {split: source_fingerprint(path) for split, path in sources.items()},
            "image_size": request.image_size,
            "decoder": DECODER_VERSION,
        }

    classes, splits = cached_splits(
        "imagefolder",
        parts(),
        tuple(sources),
        request.cache_dir,
        lambda: decode_imagefolder(sources, request.image_size),
        parts_now=parts,  # again after the decode: a file replaced meanwhile is not cached
    )
    return LoadedSource(classes, splits, str(request.data_dir))


# ---------------------------------------------------------------- locating the splits


def find_split_sources(root: Path) -> dict[str, Path]:
    """{"train": folder-or-archive, "test": folder-or-archive}; "test" is absent when neither exists.

    An extracted folder wins over an archive of the same split.
    """
    if not root.is_dir():
        problem = "is a file, not a folder" if root.exists() else "does not exist"
        raise TrickLabError(
            f"image folder {root} {problem}; pass data_dir= (--data-dir / data.dir=) "
            "pointing at a folder holding train/<class>/<image> or train.tar.gz"
        )
    sources = {}
    for split, names in SPLIT_FOLDERS.items():
        candidates = [
            path
            for name in names
            for path in [root / name, *(root / f"{name}{s}" for s in ARCHIVE_SUFFIXES)]
        ]
        found = next((c for c in candidates if c.is_dir() or (c.suffix and c.is_file())), None)
        if found is not None:
            sources[split] = found
    if "train" not in sources:
        raise TrickLabError(
            f"image folder {root} holds neither train/ nor train.tar.gz; expected "
            "train/<class>/<image> (and optionally test/<class>/<image>)"
        )
    return sources


def _check_cache_outside(sources: dict[str, Path], cache: Path) -> None:
    """Refuse a cache folder inside a split's folder (not in a hidden one, which is not read): its
    files would be the split's, changed by the decode itself (refused for ever as "changed")."""
    for source in (s for s in sources.values() if s.is_dir()):
        with contextlib.suppress(ValueError):  # not inside
            inside = cache.resolve().relative_to(source.resolve()).parts
            if not any(part.startswith(".") for part in inside):
                raise TrickLabError(
                    f"the cache folder {cache} is inside the image folder {source}, whose files "
                    "it would add to: give one outside it (--cache-dir / data.cache_dir=)"
                )


def source_fingerprint(source: Path) -> str:
    """sha256 of an archive's bytes, or of a folder's tree (its folders, files and their bytes)."""
    if source.is_file():
        return sha256_file(source)
    paths = walk_folder(source)
    for path in filter(is_image_file, paths):  # a 3 GB image was hashed before it was refused
        check_file_size(path.stat().st_size, f"image {source.name}/{path.relative_to(source)}")
    return fingerprint_tree(paths, source, read=is_image_file)  # a stray video: by name and size
