"""The environment variables torch and OpenMP read as they load, checked before they do: a value
they cannot use is one line naming it (torch._dynamo's traceback at a model's first forward,
libgomp's own lines on every command), not a failed run."""

from __future__ import annotations

import ctypes.util
import functools
import getpass
import importlib.util
import os
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from tricklab.core.errors import TrickLabError
from tricklab.core.process_limits import check_process_limits, check_torch_loads
from tricklab.core.safeio import shown

THREADS_ENV = "OMP_NUM_THREADS"
MAX_THREADS = 65536  # past any machine's cores; libgomp takes up to 2**64 - 1 and torch tries
# OpenMP's form: a positive count, or one per nesting level ("4,2")
_THREADS = re.compile(r"\s*[1-9][0-9]*(\s*,\s*[1-9][0-9]*)*\s*")
OPENMP_PREFIXES = ("OMP_", "GOMP_")  # what GNU OpenMP (libgomp, in torch's wheels) reads
OPENMP_SECONDS = 10.0  # libgomp reading its variables takes milliseconds; some values spin it


def check_environment() -> None:
    """TrickLabError for a working folder that no longer exists (os.getcwd fails: the run's
    record reads it, torch's MKL may end the process), an OpenMP variable (OMP_NUM_THREADS, ...)
    or a compile cache folder (TORCHINDUCTOR_CACHE_DIR, or torch's default one) torch cannot use."""
    working_folder()
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
    _check_openmp_env()
    _check_torch_load_env()
    check_process_limits()
    check_torch_cache_env()


def working_folder() -> str:
    """os.getcwd(); TrickLabError where the folder was removed (a run's record reads it, and
    torch's MKL ends the process with a "FATAL ERROR" as it loads)."""
    try:
        return os.getcwd()
    except OSError:
        raise TrickLabError(
            "the current folder no longer exists; cd into one that does and run again"
        ) from None


# torch's allocator settings, parsed as libc10 loads (on a CPU too): an item that is not
# `key:value` aborts the process with a C++ stack trace; a list value is bracketed.
ALLOC_CONF_ENVS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")
_ALLOC_ITEM = re.compile(r"\s*[^:,\[\]\s][^:,\[\]]*:\s*(\[[^\[\]]*\]|[^:,\[\]\s][^:,\[\]]*)\s*")
# ATEN_CPU_CAPABILITY: what torch's dispatch reads (per build); another value is ignored with
# a warning on every command.
CPU_CAPABILITIES = ("default", "avx2", "avx512", "vsx", "zvector", "sve256")


def _check_torch_load_env() -> None:
    for name in ALLOC_CONF_ENVS:
        value = os.environ.get(name)
        items = re.split(r",(?![^\[]*\])", value) if value else []
        if any(item.strip() and not _ALLOC_ITEM.fullmatch(item) for item in items):
            raise TrickLabError(
                f"{name}={shown(value)} is not the key:value,key:value form torch reads (e.g. "
                "expandable_segments:True): torch aborts on it as it loads; correct or unset it"
            )
    capability = os.environ.get("ATEN_CPU_CAPABILITY")
    if capability is not None and capability not in CPU_CAPABILITIES:
        raise TrickLabError(
            f"ATEN_CPU_CAPABILITY={shown(capability)} is none of {', '.join(CPU_CAPABILITIES)} "
            "(torch ignores it and warns on every command); set one or unset it"
        )


# What torch parses as it loads (TORCH_LOGS) or as its compiler's config loads (the others, read
# with int() and the like even when nothing compiles: counting a model's MACs loads it)
TORCH_PARSED_PREFIXES = ("TORCH_LOGS", "TORCHINDUCTOR_", "TORCHDYNAMO_", "TORCH_COMPILE_")


def check_torch_env() -> None:
    """TrickLabError for a variable torch parses as it loads that it cannot use: for commands
    that load torch (a listing of fields or recipes does not, and pays nothing)."""
    import logging

    check_torch_loads()  # under `ulimit -v`: a child loads torch first
    fmt = os.environ.get("TORCH_LOGS_FORMAT")
    if fmt:  # read at each log line, where a bad one is a logging traceback, not an error
        try:
            logging.Formatter(fmt).format(logging.LogRecord("torch", 20, "f", 1, "m", None, None))
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise TrickLabError(
                f"TORCH_LOGS_FORMAT={shown(fmt)} is no logging format ({exc}); correct or unset it"
            ) from None
    values = tuple(
        sorted(
            (n, v)
            for n, v in os.environ.items()
            if n.startswith(TORCH_PARSED_PREFIXES) and n != TORCH_CACHE_ENV  # checked apart
        )
    )
    if values:
        _torch_reads(values)


@functools.lru_cache(maxsize=8)
def _torch_reads(values: tuple[tuple[str, str], ...]) -> None:
    """TrickLabError when torch cannot load with `values` set, in torch's own words (its first
    line): loaded here (seconds) only when one of them is set."""
    try:
        import torch._dynamo.config  # noqa: F401
        import torch._inductor.autotune_process  # noqa: F401  reads its own variables
        import torch._inductor.config  # noqa: F401
    except Exception as exc:
        names = ", ".join(f"{n}={shown(v)}" for n, v in values)
        said = " ".join(str(exc).split())  # torch's message runs over lines: its first 160 chars
        said = said if len(said) <= 160 else said[:160].rsplit(" ", 1)[0] + " ..."
        raise TrickLabError(
            f"torch cannot load with {names}: {type(exc).__name__}: {shown(said)}; correct or "
            "unset it"
        ) from None


def _check_openmp_env() -> None:
    """TrickLabError for an OpenMP variable libgomp cannot read, in libgomp's own judgement
    (`libgomp_says`), asked once per set of values."""
    values = tuple(
        sorted(
            (n, v)
            for n, v in os.environ.items()
            if n.startswith(OPENMP_PREFIXES) and n != THREADS_ENV  # checked above
        )
    )
    said = libgomp_says(values)
    if said is None:
        return
    shown_values = ", ".join(f"{n}={shown(v)}" for n, v in values)
    named = [f"{n}={shown(v)}" for n, v in values if said.endswith(f" {n}")]
    raise TrickLabError(
        f"{named[0]} is not a value OpenMP reads (libgomp: {shown(said)}): set one it reads, "
        "or unset it"
        if named
        else f"OpenMP (libgomp) cannot use {shown_values}: {shown(said)}; correct or unset them"
    )


@functools.lru_cache(maxsize=8)
def libgomp_says(values: tuple[tuple[str, str], ...]) -> str | None:
    """What torch's libgomp says of the OpenMP variables `values` (its first complaint), or None.

    A child process loads that library, which reads them all as it loads: it prints its own line
    for a value it cannot read and goes on, and some values spin it for ever (in torch's own
    import too: GOMP_CPU_AFFINITY=bogus). Spellings change between libgomp versions, so asking
    the one torch loads is the only right answer."""
    library = _libgomp() if values else None
    if library is None:
        return None
    load = "import ctypes, sys; ctypes.CDLL(sys.argv[1])"
    try:
        stderr = subprocess.run(
            [sys.executable, "-I", "-S", "-c", load, str(library)], env=os.environ,
            stdin=subprocess.DEVNULL, capture_output=True, timeout=OPENMP_SECONDS,
        ).stderr.decode(errors="replace")  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"it did not finish reading them in {OPENMP_SECONDS:g} s (spinning)"
    except OSError:
        return None  # no child process to be had: torch's import will say what libgomp says
    lines = [line[8:].strip() for line in stderr.splitlines() if line.startswith("libgomp:")]
    return lines[0] if lines else None


def _libgomp() -> Path | None:
    """The libgomp torch loads, found without importing torch: its wheel's own (torch/lib, or
    torch.libs beside it for auditwheel's renamed copies), else the system's; None where there
    is none (torch brings Intel's or LLVM's OpenMP)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    package = Path(spec.origin).parent
    for folder in (package / "lib", package.parent / "torch.libs"):
        found = sorted(folder.glob("libgomp*.so*"))
        if found:
            return found[0]
    system = ctypes.util.find_library("gomp")
    return Path(system) if system else None


TORCH_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def check_torch_cache_env() -> None:
    """TrickLabError for a TORCHINDUCTOR_CACHE_DIR torch cannot use: torch._dynamo makes that
    folder when it is first imported, which a model's first forward can do, compiled or not
    (a file there, or a folder it may not write, was a traceback and a failed run)."""
    value = os.environ.get(TORCH_CACHE_ENV)
    if not value:
        _check_default_cache()
        return
    folder = Path(value).absolute()
    # Where torch would make it (the nearest folder that exists), checked without making it: a
    # listing or a dry run leaves no folder behind.
    there = next((p for p in (folder, *folder.parents) if os.path.lexists(p)), None)
    if there is None or not there.is_dir():
        problem = "cannot be made a folder (a file is in its way)"
    elif not os.access(there, os.W_OK | os.X_OK):
        problem = "is not writable" if there == folder else f"cannot be made ({there} is read-only)"
    else:
        problem = None
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
