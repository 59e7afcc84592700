"""The environment variables torch and OpenMP read as they load, checked before they do: a value
they cannot use is one line naming it (torch._dynamo's traceback at a model's first forward,
libgomp's own lines on every command), not a failed run."""

from __future__ import annotations

import getpass
import os
import re
import stat
import tempfile
from pathlib import Path

from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import shown

THREADS_ENV = "OMP_NUM_THREADS"
MAX_THREADS = 65536  # past any machine's cores; libgomp takes up to 2**64 - 1 and torch tries
# OpenMP's form: a positive count, or one per nesting level ("4,2")
_THREADS = re.compile(r"\s*[1-9][0-9]*(\s*,\s*[1-9][0-9]*)*\s*")
_BIND = r"(master|primary|close|spread)"
# The other OpenMP variables libgomp reads as torch loads (it prints its own lines for a value it
# cannot read, and goes on): what each may be, in the spellings of GCC's libgomp, any version
OPENMP_ENV = {
    "OMP_WAIT_POLICY": (r"(active|passive)", "active or passive"),
    "OMP_DYNAMIC": (r"(true|false)", "true or false"),
    "OMP_PROC_BIND": (
        rf"(true|false|{_BIND}(\s*,\s*{_BIND})*)",
        "true, false, or a list of master, close, spread",
    ),
    "GOMP_SPINCOUNT": (r"(infinite|infinity|[0-9]+\s*[kmgt]?)", "a count (10k, 1M) or infinite"),
    "OMP_PLACES": (
        r"((threads|cores|sockets|ll_caches|numa_domains)\s*(\(\s*[1-9][0-9]*\s*\))?|\{.*)",
        "threads, cores or sockets, with an optional (count), or a list of {places}",
    ),
}


def check_environment() -> None:
    """TrickLabError for an OpenMP variable (OMP_NUM_THREADS, ...) or a compile cache folder
    (TORCHINDUCTOR_CACHE_DIR, or torch's default one) torch cannot use."""
    threads = os.environ.get(THREADS_ENV)
    if threads is not None and not (
        threads.isascii()
        and _THREADS.fullmatch(threads)
        and all(int(n) <= MAX_THREADS for n in threads.split(","))
    ):
        raise TrickLabError(
            f"{THREADS_ENV}={shown(threads)} is no whole number from 1 to {MAX_THREADS:,} (the "
            f"threads OpenMP, and so torch, may use): set one, e.g. {THREADS_ENV}=2, or unset it"
        )
    for name, (pattern, words) in OPENMP_ENV.items():
        value = os.environ.get(name)
        if value is not None and not (
            value.isascii() and re.fullmatch(rf"\s*{pattern}\s*", value, re.IGNORECASE)
        ):
            raise TrickLabError(
                f"{name}={shown(value)} is not a value OpenMP reads ({words}): set one or unset it"
            )
    check_torch_cache_env()


TORCH_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def check_torch_cache_env() -> None:
    """TrickLabError for a TORCHINDUCTOR_CACHE_DIR torch cannot use: torch._dynamo makes that
    folder when it is first imported, which a model's first forward can do, compiled or not
    (a file there, or a folder it may not write, was a traceback and a failed run)."""
    value = os.environ.get(TORCH_CACHE_ENV)
    if not value:
        _check_default_cache()
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


def _check_default_cache() -> None:
    """TrickLabError for torch's default compile cache folder, TMPDIR's torchinductor_USER, where
    it is a file or a folder this user may not write (another user's, on a shared machine)."""
    folder = Path(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", _user()))
    try:
        mode = folder.stat().st_mode
    except OSError:
        return  # not there yet: torch makes it in a temporary folder it may write
    if not stat.S_ISDIR(mode) or not os.access(folder, os.W_OK | os.X_OK):
        kind = "is not a folder" if not stat.S_ISDIR(mode) else "is not writable"
        raise TrickLabError(
            f"torch's compile cache folder {shown(folder)} {kind}: set {TORCH_CACHE_ENV} to a "
            "writable folder, or remove that one"
        )


def _user() -> str:
    """The user name as torch names its cache folder after it."""
    try:
        return getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        return f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
