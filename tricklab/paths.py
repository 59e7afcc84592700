"""Outputs on disk: files written whole or not at all; folders made, and removed when a step fails."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_write(path: Path, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """A file to write `path`'s new content into: a temporary file beside it, flushed to disk and
    renamed over `path` when the block ends, removed when it raises. A crash leaves the old file or
    the new one, never part of one."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, mode, **open_kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (what `mkdir(parents=True)` makes);
    None when `path` exists."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing


def remove_empty_dirs(path: Path, created: Path | None) -> None:
    """Remove `path` and its parents up to `created` (what we made), while they are empty."""
    if created is None:
        return
    for folder in (path, *path.parents):
        try:
            folder.rmdir()
        except OSError:  # not empty (someone wrote there meanwhile) or gone: keep the rest
            return
        if folder == created:
            return


def new_numbered_dir(base: Path) -> Path:
    """Make and return `base`, or `base-2`, `base-3`, ... if taken: each caller gets its own folder,
    also when several processes start at once (mkdir either creates the folder or fails)."""
    base.parent.mkdir(parents=True, exist_ok=True)
    for number in range(1, 10_000):
        folder = base if number == 1 else base.with_name(f"{base.name}-{number}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"{base} and 9,999 numbered variants exist")
