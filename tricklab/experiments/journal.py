"""Optuna's journal file, kept readable when a writer dies mid-line.

Optuna appends each batch of records as one write ending in a newline, under a lock file
(PATH.lock, JournalFileSymlinkLock). A writer killed in that write (SIGKILL, a power cut, a full
disk) leaves a last line without its newline; Optuna reads past it, but its next append lands on
that same line, which from then on fails to parse and takes every later record with it. Here the
lock Optuna's backend takes for each append is wrapped: once held, and before the append, bytes
after the journal's last newline are moved to `PATH.torn-<date>-<time>-<pid>` beside it, with a
warning. Under that lock no live writer is mid-line, so what is found is torn for good; nothing a
writer finished is touched (its records all end in a newline). An append of this process that
fails midway (a full disk) is cut off again before the lock is let go.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import optuna

from tricklab.core.paths import DiskFullError, disk_full_error, is_disk_full

log = logging.getLogger(__name__)

RECORD_START = b'{"op_code":'  # how every record Optuna writes begins
CHUNK_BYTES = 1 << 16


def _optuna_class(name: str, old_name: str) -> Any:
    """A journal class from optuna.storages.journal (Optuna >= 4.0) or its older home."""
    module = getattr(optuna.storages, "journal", None)
    found = getattr(module, name, None) if module is not None else None
    return found if found is not None else getattr(optuna.storages, old_name)


def looks_like_record_start(data: bytes) -> bool:
    """Whether `data` begins like an Optuna journal record (or is the start of one)."""
    return data.startswith(RECORD_START) or RECORD_START.startswith(data)


def journal_backend(path: Path) -> Any:
    """Optuna's journal file backend on `path`, with the torn-line check before each append."""
    return JournalFile(path)


class TornLineCheckingLock:
    """The lock Optuna's journal backend uses by default (the same PATH.lock, so tricklab and
    plain Optuna processes exclude each other), which, once held, sets a torn last line aside."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = _optuna_class("JournalFileSymlinkLock", "JournalFileSymlinkLock")(str(path))

    def acquire(self) -> bool:
        self._lock.acquire()
        try:
            set_torn_line_aside(self.path)
        except BaseException:
            self._lock.release()
            raise
        return True

    def release(self) -> None:
        try:  # an append that failed midway (a full disk) is taken back: the journal ends whole
            with contextlib.suppress(OSError):
                set_torn_line_aside(self.path, keep=False)
        finally:
            self._lock.release()


def set_torn_line_aside(path: Path, *, keep: bool = True) -> Path | None:
    """Move the bytes after the journal's last newline (a record never finished) into a file
    beside it and cut them off; the side file's path, or None when the journal ends whole.
    `keep=False` only cuts them off (this process's own append that failed). Call it holding
    the journal's lock."""
    with open(path, "r+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return None
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return None
        start = _line_start(handle, size)
        handle.seek(start)
        torn = handle.read()
        if start == 0 and not looks_like_record_start(torn[: len(RECORD_START)]):
            return None  # not a journal at all: open_storage refuses such files untouched
        if not keep:
            handle.truncate(start)
            return None
        side = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        with open(side, "xb") as out:
            out.write(torn)
            out.flush()
            os.fsync(out.fileno())
        handle.truncate(start)
        handle.flush()
        os.fsync(handle.fileno())
    log.warning(
        "journal %s ended in a record a writer never finished (%d bytes, no newline): "
        "moved it to %s and went on",
        path,
        len(torn),
        side,
    )
    return side


def _line_start(handle: Any, size: int) -> int:
    """The offset just after the last newline of the file (0 when it has none)."""
    end = size
    while end > 0:
        begin = max(0, end - CHUNK_BYTES)
        handle.seek(begin)
        chunk = handle.read(end - begin)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return begin + newline + 1
        end = begin
    return 0


class JournalFile(_optuna_class("JournalFileBackend", "JournalFileStorage")):  # before 4.0: Storage
    """Optuna's journal file backend, appending under TornLineCheckingLock; a full disk is a
    DiskFullError naming the journal (Optuna's write names no file)."""

    def __init__(self, path: Path) -> None:
        super().__init__(str(path), lock_obj=TornLineCheckingLock(path))
        self.path = Path(path)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        try:
            super().append_logs(logs)
        except OSError as exc:
            if is_disk_full(exc) and not isinstance(exc, DiskFullError):
                raise disk_full_error(exc, self.path, name_path=True) from exc
            raise
