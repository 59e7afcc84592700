"""The name of a file an option writes (--trace, --csv): checked before the work, so that a
name the file system refuses, a folder's name or a file of another kind is one line, not an error
after minutes of work or a file replaced that the option did not write."""

from __future__ import annotations

import codecs
import os
from pathlib import Path

from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import shown


def check_file_name(path: Path, option: str) -> None:
    """TrickLabError for a file name longer than its folder's file system takes (ENAMETOOLONG
    would come only at the write, after the work)."""
    try:
        limit = os.pathconf(path.parent if path.parent.is_dir() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if len(os.fsencode(path.name)) > limit:
        raise TrickLabError(
            f"{option} {shown(path.name[:60])}...: a file name of {len(os.fsencode(path.name))} "
            f"bytes, longer than the file system takes ({limit})"
        )


def file_path(name: str | Path, option: str) -> Path:
    """`name` as the Path of a file an option writes; TrickLabError for a folder's name, one
    ending in a slash, `.` or `..` (Path drops a last slash and `.`: `t.json/` wrote t.json)."""
    if isinstance(name, str) and os.path.basename(name) in ("", ".", ".."):
        if name.strip("/" + os.sep):  # "/" alone: "needs a file name", below
            raise TrickLabError(
                f"{option} {shown(name)} names a folder (it ends in a slash, . or ..): give a file"
            )
    return Path(name)


def check_output_file(name: str | Path, option: str, holds: bytes) -> Path:
    """`name` for a file an option writes (check_replaceable), in a folder that takes it; an
    existing file is replaced only if it `holds` the given bytes in its first MiB: one written
    before (torch's Chrome trace: '"traceEvents"')."""
    path = file_path(name, option)
    check_file_name(path, option)
    if not str(path).strip() or str(path) == "-" or path.is_dir():
        raise TrickLabError(f"{option} needs a file name, got {shown(str(path))}")
    check_replaceable(path, option, holds)
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK | os.X_OK):
        problem = (
            "is not writable"
            if path.parent.is_dir()
            else "is a file, not a folder"
            if os.path.lexists(path.parent) and not path.parent.is_symlink()
            else "does not exist"
        )
        raise TrickLabError(f"cannot write {option} {shown(path)}: its folder {problem}")
    return path


def check_replaceable(
    path: Path, option: str, holds: bytes | None = None, at_start: bool = False
) -> None:
    """TrickLabError for a path a file written there (atomic_write: a rename) must not replace:
    not a plain file (a device such as /dev/null, a link, a folder), a file that holds no text
    (a study's own database named by mistake), or, given `holds`, a file without those bytes in
    its first MiB: not one the option wrote (a run's result.json, an empty lock file). With
    `at_start`, the file must begin with them (a CSV's header line, not a note quoting it)."""
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_file():
        raise TrickLabError(
            f"{option} {shown(path)} is not a plain file (a link, a device or a folder); give a "
            "new file, or one tricklab wrote"
        )
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)  # a cut last char: fine
        text = b"\0" not in head
    except (OSError, UnicodeDecodeError):
        text = False
    if not text:
        raise TrickLabError(
            f"{option} {shown(path)} holds something other than text (a database?) that it would "
            "replace; give a new file"
        )
    if holds is not None:  # an empty file too: a lock file is one (a rename swaps its inode)
        with open(path, "rb") as handle:
            head = handle.read(2**20)
            if not (head.startswith(holds) if at_start else holds in head):
                raise TrickLabError(
                    f"{option} {shown(path)} holds a file of another kind that it would replace; "
                    "give a new file, or one it wrote before"
                )
