"""The standard streams as the `tricklab` command leaves them for every command (`prepare`).

- A stream the caller closed (`>&-`) reads or writes /dev/null: Python leaves sys.stdout None (a
  traceback at the first flush), and the next file opened would take the closed descriptor, so
  that what torch's C++ code prints would land in a run's result.json.
- What a stream's encoding cannot take (`×`, `±`, `≥` under PYTHONIOENCODING=ascii or a C locale
  without UTF-8 mode) is written as a backslash escape, as Python writes its own tracebacks.
- stderr carries progress, notes and errors: a write that fails there (a closed pipe, a full
  disk) makes it go quiet, not fail the run that was printing (rich would have answered a closed
  pipe with SystemExit(1), which the run recorded as its model's exit, and pointed stdout at
  /dev/null).
- stdout carries the results: a write that fails there for anything but a closed pipe (which
  ends quietly, `tricklab ... | head`) is one line naming it, exit 2, not "free some space".
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any, TextIO

from tricklab.core.errors import TrickLabError


class _Delegate:
    """A text stream's stand-in: everything but writing is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class QuietOnFailure(_Delegate):
    """stderr that stops writing at its first failed write or flush, `failed` holding why."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        if self.failed is None:
            try:
                return self._stream.write(text)
            except OSError as err:
                self.failed = err
        return len(text)

    def flush(self) -> None:
        if self.failed is None:
            try:
                self._stream.flush()
            except OSError as err:
                self.failed = err


class FailsInOneLine(_Delegate):
    """stdout whose failed write or flush (not a closed pipe) is a TrickLabError naming it; the
    descriptor then points at /dev/null, so that no flush at exit fails a second time."""

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as err:
            raise self._failed(err) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as err:
            raise self._failed(err) from None

    def _failed(self, err: OSError) -> TrickLabError:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self._stream.fileno())
        os.close(null)
        return TrickLabError(f"cannot write the standard output: {err.strerror or err}")


def _open_closed() -> None:
    for fd, name, mode in (
        (0, "stdin", os.O_RDONLY),
        (1, "stdout", os.O_WRONLY),
        (2, "stderr", os.O_WRONLY),
    ):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, mode)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False))  # noqa: SIM115


def prepare() -> None:
    """The streams as the module's docstring says, once, before any command runs."""
    _open_closed()
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    sys.stderr = QuietOnFailure(sys.stderr)
    sys.stdout = FailsInOneLine(sys.stdout)
