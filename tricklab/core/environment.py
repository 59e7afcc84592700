"""The environment variables torch and OpenMP read as they load, checked before they do: a value
they cannot use is one line naming it (torch._dynamo's traceback at a model's first forward,
libgomp's own lines on every command), not a failed run."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import shown

THREADS_ENV = "OMP_NUM_THREADS"
# OpenMP's form: a positive count, or one per nesting level ("4,2")
_THREADS = re.compile(r"\s*[1-9][0-9]*(\s*,\s*[1-9][0-9]*)*\s*")


def check_environment() -> None:
    """TrickLabError for an OMP_NUM_THREADS or TORCHINDUCTOR_CACHE_DIR torch cannot use."""
    threads = os.environ.get(THREADS_ENV)
    if threads is not None and not (threads.isascii() and _THREADS.fullmatch(threads)):
        raise TrickLabError(
            f"{THREADS_ENV}={shown(threads)} is no positive whole number (the threads OpenMP, "
            f"and so torch, may use): set one, e.g. {THREADS_ENV}=2, or unset it"
        )
    check_torch_cache_env()


TORCH_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def check_torch_cache_env() -> None:
    """TrickLabError for a TORCHINDUCTOR_CACHE_DIR torch cannot use: torch._dynamo makes that
    folder when it is first imported, which a model's first forward can do, compiled or not
    (a file there, or a folder it may not write, was a traceback and a failed run)."""
    value = os.environ.get(TORCH_CACHE_ENV)
    if not value:
        return
    folder = Path(value)
    try:
        folder.mkdir(parents=True, exist_ok=True)  # as torch would
        problem = None if os.access(folder, os.W_OK | os.X_OK) else "is not writable"
    except OSError as err:
        problem = f"cannot be made a folder ({err.strerror or err})"
    if problem:
        raise TrickLabError(
            f"{TORCH_CACHE_ENV}={shown(value)} {problem}: torch keeps its compile cache there; "
            "point it at a writable folder or unset it"
        )
