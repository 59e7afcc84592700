"""`profile step --trace FILE`: the Chrome trace torch.profiler writes, checked before any work
(a new file, or a trace written before: never a device, a link or a run's result.json) and
written whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tricklab.core.errors import TrickLabError
from tricklab.core.outfiles import check_output_file
from tricklab.core.paths import write_with
from tricklab.core.safeio import shown


def check_trace_path(trace: str | Path | None) -> Path | None:
    """The --trace file, or None without one; TrickLabError for a path it must not replace."""
    if trace is None:
        return None
    return check_output_file(trace, "--trace", holds=b'"traceEvents"')


def write_trace(prof: Any, trace: Path) -> None:
    """The profiler's trace into `trace`, whole (core.paths.write_with), or one line saying why."""
    try:
        write_with(trace, prof.export_chrome_trace, _check_whole)
    except OSError as exc:  # not a full disk (DiskFullError, one line of its own)
        raise TrickLabError(f"cannot write the trace {shown(trace)}: {exc.strerror}") from None


def _check_whole(name: str) -> None:
    """TrickLabError for a trace torch wrote only in part (its C++ writer says nothing when the
    disk is full): a trace is one JSON object, ending in its closing brace."""
    with open(name, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(size - 64, 0))
        ends_whole = handle.read().rstrip().endswith(b"}")
    if not ends_whole:
        raise TrickLabError(
            f"the trace came out cut short ({size:,} bytes, not a whole JSON object): is its "
            "disk full? free some space and run again"
        )
