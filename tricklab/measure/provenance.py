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
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from tricklab.experiments.outcomes import COMPLETE_STATUSES
from tricklab.experiments.urls import shown_command

# The distributions whose versions are recorded, by the names the record gives them.
PACKAGES = ("torch", "torchvision", "numpy", "optuna", "tricklab")
GIT_TIMEOUT_SECONDS = 3.0
# Repeated runs of one recipe on an idle machine agree within a few percent; a speedrun whose train
# seconds spread by more than this (std of the log times, about std / mean) was shared with other work.
SPREAD_LIMIT = 0.10
BUSY_WORDS = "timings taken on a busy machine"


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
    """(CUDA version torch was built with, cuDNN version): None where the build has none."""
    import torch

    cudnn = None
    try:
        if torch.backends.cudnn.is_available():
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


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages; None where the system has none (Windows)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def start_record(device: Any = None) -> dict[str, Any]:
    """The record as a run on `device` (a torch.device or its name; None: the machine) starts."""
    import torch

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
    return {**record, "load_average_end": load_average()}


# ---------------------------------------------------------------- busy machine


@dataclass(frozen=True)
class Busy:
    """Whether timings were taken on a busy machine, and why (the first rule that fired)."""

    busy: bool
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"busy_machine": self.busy, "busy_reason": self.reason}

    def note(self) -> str:
        """'timings taken on a busy machine: REASON', or '' when it was not busy."""
        return f"{BUSY_WORDS}: {self.reason}" if self.busy else ""


@dataclass(frozen=True)
class Timings:
    """One configuration's train seconds across seeds, and the relative difference reported about
    them (|log speedup|, or log(1 + SPREAD_LIMIT) for a speedrun's own mean), in words in `what`."""

    label: str
    seconds: Sequence[float]
    reported: float
    what: str


def log_spread(seconds: Iterable[float | None]) -> float | None:
    """The standard deviation of the log times (about std / mean); None with fewer than 2."""
    logs = [math.log(s) for s in seconds if s is not None and s > 0]
    return statistics.stdev(logs) if len(logs) > 1 else None


def busy_machine(
    records: Iterable[Mapping[str, Any] | None], timings: Iterable[Timings] = ()
) -> Busy:
    """Busy when a record's 1-minute load average (start or end) was above its number of cores,
    or when some configuration's train seconds spread across seeds (`log_spread`) by more than the
    difference reported about them. The run's own threads count in the load: a run alone on the
    machine stays at or below its cores."""
    worst = None
    for record in records:
        cores = (record or {}).get("cpu_count")
        for when in ("start", "end"):
            load = (record or {}).get(f"load_average_{when}")
            if cores and load and load[0] > cores and (worst is None or load[0] > worst[0]):
                worst = (load[0], cores, when)
    if worst is not None:
        load, cores, when = worst
        return Busy(
            True, f"the 1-minute load average was {load:.2f} on {cores} cores ({when} of a run)"
        )
    for item in timings:
        spread = log_spread(item.seconds)
        if spread is not None and spread > item.reported:
            return Busy(
                True,
                f"{item.label}'s train seconds spread by {math.expm1(spread):.0%} across "
                f"{len(item.seconds)} seeds, more than {item.what}",
            )
    return Busy(False)


def speedrun_busy(records: Iterable[Mapping[str, Any] | None], seconds: Sequence[float]) -> Busy:
    """A speedrun's verdict: its records' load, and its runs' train seconds against SPREAD_LIMIT."""
    limit = Timings(
        "the speedrun",
        seconds,
        math.log1p(SPREAD_LIMIT),
        f"the {SPREAD_LIMIT:.0%} an idle machine allows",
    )
    return busy_machine(records, [limit])


def comparison_timings(records: Iterable[Mapping[str, Any]], rows: Sequence[Any]) -> list[Timings]:
    """For each configuration whose speedup the results table reports as a change (its verdict is
    not 'within noise'), its train seconds and the reference's against |log speedup|. Records are
    run records (`stats.collect_runs`); rows are `stats.config_stats` rows."""
    seconds: dict[str, list[float]] = {}
    for record in records:
        if record.get("status") in COMPLETE_STATUSES:
            if record.get("accuracy") is not None and record.get("train_seconds") is not None:
                seconds.setdefault(record["config_id"], []).append(float(record["train_seconds"]))
    reference = next((r.config_id for r in rows if r.is_reference), None)
    out = []
    for row in rows:
        if row.is_reference or row.speedup is None or row.speedup <= 0:
            continue
        if row.time_verdict in (None, "within noise"):
            continue
        what = f"the {row.speedup:.2f}x speedup of {row.config_id} over {reference}"
        reported = abs(math.log(row.speedup))
        out.append(Timings(row.config_id, seconds.get(row.config_id, []), reported, what))
        out.append(Timings(str(reference), seconds.get(str(reference), []), reported, what))
    return out


def results_busy(
    records: Sequence[Mapping[str, Any]],
    rows: Sequence[Any],
    speedrun: bool = False,
    summaries: Iterable[Mapping[str, Any] | None] = (),
) -> Busy:
    """The verdict on a results table: the runs' load (and that of `summaries`, the records of
    the calls that ran them) and the spread against each reported speedup; with `speedrun`, also
    each configuration's spread against SPREAD_LIMIT."""
    timings = comparison_timings(records, rows)
    if speedrun:
        by_config: dict[str, list[float]] = {}
        for record in records:
            if record.get("status") in COMPLETE_STATUSES:
                if record.get("train_seconds") is not None:
                    by_config.setdefault(record["config_id"], []).append(record["train_seconds"])
        limit, what = math.log1p(SPREAD_LIMIT), f"the {SPREAD_LIMIT:.0%} an idle machine allows"
        timings += [Timings(cid, s, limit, what) for cid, s in by_config.items()]
    return busy_machine([*summaries, *(r.get("provenance") for r in records)], timings)


def study_meta(
    attrs: Mapping[str, Any], records: Sequence[Mapping[str, Any]], rows: Sequence[Any]
) -> dict[str, Any]:
    """What a study's results carry: the record of the latest ablate/sweep call on it (its user
    attr `provenance`) and the busy-machine verdict (`busy_machine`, `busy_reason`)."""
    summary = attrs.get("provenance")
    busy = results_busy(records, rows, summaries=[summary])
    return {"provenance": summary, **busy.to_dict()}
