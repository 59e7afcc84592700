"""What the process is allowed, checked before torch meets it: limits and settings under which
torch hangs, aborts with a C++ stack trace or fails a run half-way say so in one line instead
(found by the fourteenth hostile round, each in torch's own code):

- `OMP_THREAD_LIMIT` below the threads torch starts: a convolution's backward waits for ever for a
  thread OpenMP will not give, and a SIGTERM cannot stop it;
- `OMP_STACKSIZE` larger than the machine's memory: libgomp cannot start its threads;
- an open-files limit (`ulimit -n`) too low for a storage, a dataset and a loader's workers;
- an address-space limit (`ulimit -v`) that lets torch begin to load but not finish (a C++
  `std::bad_alloc`, an abort): found by loading torch in a child process under it, once;
- a umask that takes the owner's read, write or search permission from every folder made (0277):
  a study's folder was made read-only, then its storage could not be made in it, and the rerun
  refused the folder.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import shown

MIN_OPEN_FILES = 64  # a study's storage and its runs' files, a loader's worker pipes
LOAD_SECONDS = 120.0  # loading torch takes seconds; a child that takes longer is not waited for
_SIZE = re.compile(r"\s*([0-9]+)\s*([bBkKmMgGtT]?)\s*")  # OpenMP's OMP_STACKSIZE (K by default)
_UNITS = {"b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def check_process_limits() -> None:
    """TrickLabError for an open-files limit, an OpenMP thread limit or stack size, or a umask
    under which torch or tricklab cannot run (the module's docstring); cheap: no child, no torch."""
    _check_open_files()
    _check_thread_limit()
    _check_stack_size()
    _check_umask()


def _check_umask() -> None:
    try:  # read, not set: os.umask would change it for a moment, for every thread
        status = Path("/proc/self/status").read_text(encoding="utf-8")
    except OSError:
        return
    match = re.search(r"^Umask:\s*([0-7]+)", status, re.M)
    if match and int(match[1], 8) & 0o700:
        raise TrickLabError(
            f"the umask is {match[1]}: every folder tricklab makes would lose its owner's read, "
            "write or search permission, and nothing could be written into it or read back; set "
            "one such as 022"
        )


def open_files_for_workers(workers: int) -> None:
    """Worker processes pass each batch's tensors as file descriptors: with few allowed, a run
    met "Too many open files" mid-epoch and failed. The soft limit is raised toward the hard one
    where it is below what `workers` need (as `ulimit -Sn` would); TrickLabError where the hard
    limit is below it too."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # no such limit here (Windows)
        return
    need = max(256, 64 * (workers + 2))
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard == resource.RLIM_INFINITY or hard >= need:
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
            return
    raise TrickLabError(
        f"loader.num_workers={workers} needs about {need} open files, and the limit is {soft} "
        f"(ulimit -n): raise it, e.g. ulimit -n 1024, or set loader.num_workers=0"
    )


def _check_open_files() -> None:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):  # no such limit here (Windows)
        return
    if soft != resource.RLIM_INFINITY and soft < MIN_OPEN_FILES:
        raise TrickLabError(
            f"the open-files limit is {soft} (ulimit -n), below the {MIN_OPEN_FILES} tricklab "
            "needs (a storage, a dataset, a loader's workers): raise it, e.g. ulimit -n 1024"
        )


def threads_torch_starts() -> int:
    """The threads torch's OpenMP pool starts: MKL_NUM_THREADS, else OMP_NUM_THREADS's first
    level (torch asks them in that order), else one per CPU this process may run on."""
    for name in ("MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        first = os.environ.get(name, "").split(",")[0].strip()
        if first.isdigit() and int(first) > 0:
            return int(first)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _check_thread_limit() -> None:
    limit = os.environ.get("OMP_THREAD_LIMIT", "").strip()
    if not limit.isdigit():  # unset; a value libgomp cannot read is environment.py's to refuse
        return
    threads = threads_torch_starts()
    if 0 < int(limit) < threads:
        raise TrickLabError(
            f"OMP_THREAD_LIMIT={shown(limit)} is below the {threads} threads torch starts (one "
            f"per CPU, or MKL_NUM_THREADS, else OMP_NUM_THREADS): its kernels would wait for ever "
            f"for the rest; set OMP_NUM_THREADS={limit} (and MKL_NUM_THREADS, if set) too, or "
            "unset OMP_THREAD_LIMIT"
        )


def _check_stack_size() -> None:
    value = os.environ.get("OMP_STACKSIZE")
    match = _SIZE.fullmatch(value) if value else None
    if match is None:  # unset, or a form libgomp refuses itself (environment.py asks it)
        return
    size = int(match[1]) * _UNITS[(match[2] or "k").lower()]
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return
    if size > memory:
        raise TrickLabError(
            f"OMP_STACKSIZE={shown(value)} asks each OpenMP thread for a stack larger than this "
            f"machine's {memory / 2**30:.0f} GiB of memory, so none can start: set a smaller one "
            "(e.g. 16M) or unset it"
        )


def check_torch_loads() -> None:
    """TrickLabError when an address-space limit (`ulimit -v`) lets torch begin to load but not
    finish: asked of a child process under the same limit (seconds), only where such a limit is
    set and torch is not loaded yet, once per process and limit."""
    if "torch" in sys.modules:
        return
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return
    if soft != resource.RLIM_INFINITY:
        _loads_under(soft)


@functools.lru_cache(maxsize=4)
def _loads_under(limit: int) -> None:
    try:  # torch, and its compiler, which a run's first forward loads (its MAC count)
        child = subprocess.run(
            [sys.executable, "-c", "import torch, torch._dynamo"], stdin=subprocess.DEVNULL,
            capture_output=True, timeout=LOAD_SECONDS,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return  # no child to be had, or a slow disk: the import here says what it meets
    said = [ln.strip() for ln in child.stderr.decode(errors="replace").splitlines() if ln.strip()]
    out_of_memory = any(ln.startswith(("MemoryError", "SystemError")) for ln in said[-1:])
    if child.returncode >= 0 and not out_of_memory:  # loaded, or not mapped (an ImportError the
        return  # import here meets after the command's own checks: cli/main.py's one line)
    what = next((ln for ln in said if ln.startswith(("what()", "terminate"))), None)
    what = what or (said[-1] if said else f"killed by signal {-child.returncode}")
    raise TrickLabError(
        f"torch cannot load under the address-space limit of {limit / 2**30:.1f} GiB "
        f"(ulimit -v {limit // 1024}): {shown(what[:160])}; raise the limit (torch maps about "
        "4 GiB of address space as it loads) or unset it"
    )
