"""The reproducibility record kept with every result, and the one rule that calls timings busy.

`start_record(device)` when a run (or a speedrun, an ablation, a sweep) starts and
`finish_record(record)` when it ends give a dict of plain values: the command line, the git commit
and dirty flag of the working folder, the versions of the libraries that decide the numbers, the
CUDA and cuDNN versions, the device, the threads and cores, the data-parallel world (processes and
backend, under torchrun), and the machine's load average at both ends. What cannot change within a process is looked up once and cached, so a run pays two
`os.getloadavg()` calls for it.

`busy_machine(records, timings)` decides whether timings were taken on a busy machine; speedrun,
results and the report all ask it (see its doc). It needs no torch.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Any

from tricklab.core.urls import shown_command

# The distributions whose versions are recorded, by the names the record gives them.
PACKAGES = ("torch", "torchvision", "numpy", "optuna", "tricklab")
GIT_TIMEOUT_SECONDS = 3.0


# ---------------------------------------------------------------- the record


def command_line() -> str:
    """The process's command line, or "python API" when there is none (an interpreter, a notebook);
    a storage URL's password shows as *** (experiments/urls.py)."""
    if not sys.argv or sys.argv[0] in ("", "-c", "-"):
        return "python API"
    return shown_command(sys.argv)


def git_state(folder: str | os.PathLike[str]) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git work tree holding `folder`; (None, None) without git, outside a
    repository, or when git does not answer in time. Dirty means tracked files differ from the
    commit: untracked files are left out, or the run folders a run writes there would mark every
    later run dirty."""
    commit = _git(folder, "rev-parse", "--verify", "HEAD")
    if commit is None:
        return None, None
    status = _git(folder, "status", "--porcelain", "--untracked-files=no")
    return commit, None if status is None else bool(status)


def _git(folder: str | os.PathLike[str], *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", os.fspath(folder), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):  # no git, no such folder, too slow
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.lru_cache(maxsize=8)
def _git_state_cached(folder: str) -> tuple[str | None, bool | None]:
    return git_state(folder)


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str | None]:
    return {"python": platform.python_version(), **{p: package_version(p) for p in PACKAGES}}


@functools.lru_cache(maxsize=1)
def _accelerator_libraries() -> tuple[str | None, int | None]:
    """(CUDA version torch was built with, cuDNN version): None where the build has none, and
    cuDNN's None where no GPU is there (loading its library to ask maps hundreds of MB, which
    under `ulimit -v` aborted a CPU run)."""
    import torch

    cudnn = None
    try:
        if torch.cuda.is_available() and torch.backends.cudnn.is_available():
            cudnn = torch.backends.cudnn.version()
    except RuntimeError:  # a cuDNN that fails to load
        pass
    return torch.version.cuda, cudnn


@functools.lru_cache(maxsize=8)
def device_name(device: str | None) -> str:
    """The device's model: the GPU's name for cuda, else the CPU's. None or "auto": the machine's
    GPU if it has one, else its CPU."""
    import torch

    from tricklab.measure.hardware import cpu_model

    if device in (None, "auto") and torch.cuda.is_available():
        device = "cuda"
    if device is not None and device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return cpu_model()


def start_record(device: Any = None) -> dict[str, Any]:
    """The record as a run on `device` (a torch.device or its name; None: the machine) starts."""
    import torch

    from tricklab.measure.hardware import load_average

    name = None if device is None else str(device)
    commit, dirty = _git_state_cached(os.getcwd())
    cuda, cudnn = _accelerator_libraries()
    return {
        "command": command_line(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": commit,
        "git_dirty": dirty,
        "versions": dict(_versions()),
        "cuda": cuda,
        "cudnn": cudnn,
        "device": name,
        "device_name": device_name(name),
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        **_world(),
        "load_average_start": load_average(),
        "load_average_end": None,
    }


def _world() -> dict[str, Any]:
    """The data-parallel job this process is a rank of (torchrun): its size and backend."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return {"world_size": dist.get_world_size(), "dist_backend": dist.get_backend()}
    return {"world_size": 1, "dist_backend": None}


def finish_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """`record` with the load average as the run ends."""
    from tricklab.measure.hardware import load_average

    return {**record, "load_average_end": load_average()}


# ---------------------------------------------------------------- busy machine
# A run alone on the machine with a thread per core reads a little above its cores (the shell, the
# kernel's threads): the demo alone on the 2-core VM read 2.05. Busy is above 110 % of the cores.
LOAD_MARGIN = 1.10
BUSY_WORDS = "timings taken on a busy machine"
BUSY_ADVICE = (
    "to judge train time, run again when the machine is idle (a load average below its cores, "
    "as uptime shows it), "
    "with fewer threads (OMP_NUM_THREADS=N, N below the cores left free), or on another machine"
)


def busiest_load(records: Iterable[Mapping[str, Any] | None], what: str) -> str | None:
    """'the 1-minute load average was L on N cores (start of WHAT)' for the record whose 1-minute
    load (`load_average_start` or `_end`) was highest above its `cpu_count` x LOAD_MARGIN; None
    when none was. The work's own threads count in the load: alone on the machine it stays at or
    below its cores."""
    worst = None
    for record in records:
        cores = (record or {}).get("cpu_count")
        for when in ("start", "end"):
            load = (record or {}).get(f"load_average_{when}")
            busy = cores and load and load[0] > cores * LOAD_MARGIN
            if busy and (worst is None or load[0] > worst[0]):
                worst = (load[0], cores, when)
    if worst is None:
        return None
    load, cores, when = worst
    return f"the 1-minute load average was {load:.2f} on {cores} cores ({when} of {what})"
