"""Compile once: torch.compile's artifacts kept in tricklab's cache folder across processes.

PyTorch's own caches do the work (Inductor's FX graph cache and autotuning results, and on CUDA
Triton's kernels, all under TORCHINDUCTOR_CACHE_DIR); tricklab only points them at a folder of its
cache (`$TRICKLAB_CACHE/compile/<key>`) whose key changes with anything that could make an artifact
wrong: tricklab's version and a hash of its source, torch's version, and the device (GPU name and
compute capability; on a CPU the instruction set Inductor generates code for). A changed key is a
new, cold folder: a stale artifact is never looked up.

torch loads pickled graphs and compiled libraries from that folder, so only its owner may write
it: tricklab makes it 0700 and refuses one that another user owns or others may write (as ssh
refuses a key others can write). A folder that cannot be made, a full disk while compiling, and
a damaged file that torch cannot load are one CompileCacheError line before anything of the run
is recorded; a damaged graph entry that torch treats as a miss (and recompiles) is not said."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import logging
import os
import pickle
import platform
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

import tricklab
from tricklab.core.errors import MachineError, TrickLabError
from tricklab.core.paths import DiskFullError, check_out_folder, disk_full_error, is_disk_full
from tricklab.core.safeio import shown
from tricklab.core.usercode import described
from tricklab.core.version import __version__
from tricklab.data.cache import default_cache_dir
from tricklab.training.resolve import compile_for_device

# torch's loggers that warn, with a traceback, of a cache entry they could not load (and then
# recompile): a miss, not the user's business
CACHE_MISS_LOGGERS = (
    "torch._inductor.codecache",
    "torch._inductor.output_code",
    "torch._functorch._aot_autograd.autograd_cache",
)
ADVICE = "set TRICKLAB_CACHE to a folder of your own"


class CompileCacheError(MachineError):
    """The compile cache cannot be used; raised before, or instead of, recording the run."""


class CompileCacheFull(DiskFullError, MachineError):
    """The disk of the compile cache filled while torch compiled: every run would meet it."""


def check_compile_cache(tricks: Any, device: torch.device) -> None:
    """CompileCacheError now, before a study stores anything, for a run of `tricks` on `device`
    that would compile into a cache folder it cannot use."""
    if compile_for_device(tricks.compile, device.type) != "off":
        make_private_folder(compile_cache_dir(device))


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """sha256 of every Python file of the tricklab package (paths and contents): read once per
    process, not at each run's compile and each study's check."""
    package = Path(tricklab.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def device_key(device: torch.device) -> str:
    """What the generated code depends on: the GPU model and capability, or the CPU's ISA."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"cuda-{torch.cuda.get_device_name(device)}-sm{major}{minor}"
    return f"{device.type}-{platform.machine()}-{torch.backends.cpu.get_cpu_capability()}"


def compile_cache_dir(device: torch.device, root: Path | None = None) -> Path:
    """The folder of compile artifacts for this code, torch and device under `root` (default:
    tricklab's cache folder)."""
    key = "\n".join([__version__, source_hash(), torch.__version__, device_key(device)])
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    return (root or default_cache_dir()) / "compile" / name


@contextlib.contextmanager
def compile_cache(device: torch.device, root: Path | None = None) -> Iterator[Path]:
    """torch.compile's caches in `compile_cache_dir(device)` for the block; the environment as it
    was after."""
    # torch._inductor imports torch._dynamo (~2 s): only runs that compile pay for it
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    folder = compile_cache_dir(device, root)
    make_private_folder(folder)
    try:
        with temporary_cache_dir(str(folder)), _quiet_cache_misses():
            yield folder
    except Exception as exc:
        problem = cache_problem(exc, folder)
        if problem is None:
            raise
        raise problem from None


def make_private_folder(folder: Path) -> None:
    """`folder` and its parent (`compile/`) made 0700 where missing; CompileCacheError for one
    that cannot be made, or that another user owns or others may write."""
    try:
        check_out_folder(folder, "the compile cache")
    except TrickLabError as exc:
        raise CompileCacheError(f"{exc}; {ADVICE}") from None
    try:
        folder.parent.parent.mkdir(parents=True, exist_ok=True)
        for made in (folder.parent, folder):
            made.mkdir(mode=0o700, exist_ok=True)
            info = made.stat()
            mode, owner = info.st_mode, info.st_uid
            if owner != os.getuid() or mode & 0o022:
                who, fix = (
                    ("another user owns it", "chown it")
                    if owner != os.getuid()
                    else ("others may write it", "chmod go-w it")
                )
                raise CompileCacheError(
                    f"the compile cache folder {shown(made)} is not private ({who}): torch loads "
                    f"pickled files from it; {fix}, or {ADVICE}"
                )
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(exc, folder) from None
        raise CompileCacheError(
            f"cannot make the compile cache folder {shown(folder)}: {exc.strerror or exc}; {ADVICE}"
        ) from None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def cache_problem(exc: BaseException, folder: Path) -> Exception | None:
    """What a compile that raised `exc` says to the user when the cache folder is the cause: a
    full disk (the compiler's "No space left on device"), or a file of the folder that torch
    could not load (a truncated library or pickle); None for any other error."""
    for cause in _chain(exc):
        text = described(cause)
        try:
            whole = str(cause)  # a compiler's error holds its whole output
        except Exception:
            whole = text
        if is_disk_full(cause) or "No space left on device" in whole:
            said = disk_full_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), folder)
            return CompileCacheFull(errno.ENOSPC, said.strerror, str(folder), said.message)
        damaged = (ImportError, EOFError, pickle.UnpicklingError, OSError, SyntaxError)
        named = str(folder) in whole or str(folder) in str(getattr(cause, "filename", ""))
        loading = isinstance(cause, damaged) or whole.startswith("Failed to import")
        if loading and named:
            return CompileCacheError(
                f"torch.compile could not load a file of its cache ({text[:300]}): remove the "
                f"folder (rm -r {shown(folder)}) and run again"
            )
    return None


@contextlib.contextmanager
def _quiet_cache_misses() -> Iterator[None]:
    """torch's warnings of cache entries it could not load, and the `__del__` of a half-loaded
    graph, kept off stderr for the block: torch recompiles such an entry."""
    loggers = [logging.getLogger(name) for name in CACHE_MISS_LOGGERS]
    levels = [logger.level for logger in loggers]
    hook = sys.unraisablehook

    def unraisable(info: sys.UnraisableHookArgs) -> None:
        if "CompiledFxGraph.__del__" not in repr(info.object):
            hook(info)

    for logger in loggers:  # their errors too: "Failed to load artifact" before our one line
        logger.setLevel(logging.CRITICAL)
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
