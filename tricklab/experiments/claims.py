"""The claim protocol: each unit of work runs once, across worker processes and reruns.

A unit is a (configuration, seed) pair of an ablation or grid sweep, or one sampled configuration
with all its seeds in a random/TPE sweep; the `unit` user attr of a trial names it. A unit's
tries are its trials, `skipped` ones aside. Each worker (workers.py) loops:
1. fail stale trials: RUNNING trials whose worker died (SIGKILL, lost machine) become FAIL
   (`interrupted`), see Liveness below;
2. enqueue, as a WAITING trial tagged with its unit, one unit of its plan that `needs_try`: no
   done try (complete, diverged or pruned), nothing waiting or running, and no try that started
   since this worker started: a unit never run, or one that failed / ran out of memory / was
   interrupted in an earlier session. So rerunning the command resumes it, and within one session
   each unit is tried once;
3. claim the lowest-numbered WAITING trial of its plan (WAITING -> RUNNING is atomic in Optuna's
   RDB and journal storages, so no two workers claim one trial);
4. workers starting together may enqueue one unit twice, so a claimed trial is given up (FAIL,
   `skipped`) when `taken_by_other` finds its unit with a done trial or an earlier-numbered trial
   waiting or running. Trial numbers order creation, so of two claimed duplicates exactly the
   later one yields, and a duplicate claimed after the first finished sees it done: each unit
   runs once;
5. run it inside `claimed` (whatever escapes leaves the trial FAIL, never RUNNING) and store the
   outcome with `finish_trial`.
A unit's final status is its first done try's, else its last try's (`final_statuses`): the one
place summaries count statuses from.

Liveness: a claiming worker names itself on the trial (`tricklab:worker`: host and pid) and, while
it runs the unit, writes a heartbeat (`tricklab:heartbeat`, unix seconds) every few seconds
(`heartbeat`; the intervals are liveness.py's). A RUNNING trial is stale when its worker's process
is gone (same host: checked at once) or its heartbeat is older than the grace period (any host);
`fail_stale_trials` marks such trials FAIL so their units can run again. Optuna's own heartbeat
exists only for RDB storages; this one works for journal files too.

A random/TPE sampler may draw one point in two trials that run at once. Each seed of a sampled
point is then claimed as a unit is: holding `claim_lock`, a trial takes a finished run of that
(point, seed) if one exists, waits while another live trial trains it (`seed_owner`), and else
names the seed in its `TRAINING_ATTR` before training it. So two workers train each (point, seed)
once, the later one taking the earlier one's run (on a database server, where no file lock holds,
two claims in the same moment may still both train).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from tricklab.core.errors import MachineError, TrickLabError
from tricklab.core.paths import disk_full_error, is_disk_full
from tricklab.core.safeio import shown
from tricklab.core.status import COMPLETE_STATUSES, DONE_STATUSES, Status
from tricklab.core.stopping import INTERRUPTED_ERROR, Interrupted, is_interrupt
from tricklab.core.urls import file_of
from tricklab.experiments.dashboard import trial_attrs
from tricklab.experiments.storage import trial_status

try:
    import fcntl
except ImportError:  # Windows: SQLite claims are then not serialised across processes
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

ACTIVE = (TrialState.WAITING, TrialState.RUNNING)
TRAINING_ATTR = "tricklab:training-seed"  # the seed a sampled trial trains now
MARK_TRIES = 5  # tries to mark a trial that ends by an exception (claimed)


def unit_of(trial: FrozenTrial) -> str:
    """The unit a trial is a try of (a sampled trial made before it was tagged: its own)."""
    return trial.user_attrs.get("unit", f"sample-{trial.number}")


def attempts(trials: Iterable[FrozenTrial]) -> dict[str, list[FrozenTrial]]:
    """Each unit's tries, in trial-number order; `skipped` trials are no tries."""
    out: dict[str, list[FrozenTrial]] = {}
    for t in sorted(trials, key=lambda t: t.number):
        if trial_status(t) != Status.SKIPPED:
            out.setdefault(unit_of(t), []).append(t)
    return out


def needs_try(tries: Sequence[FrozenTrial], session_start: datetime) -> bool:
    """No done try, none waiting or running, none started in this session: enqueue it."""
    return not any(
        trial_status(t) in DONE_STATUSES or t.state in ACTIVE or started_since(t, session_start)
        for t in tries
    )


def _wanted(tries: Sequence[FrozenTrial], session_start: datetime) -> bool:
    """Whether a unit still wants a run from someone: it needs a try, or one waits or runs."""
    return needs_try(tries, session_start) or any(t.state in ACTIVE for t in tries)


def planned_runs_left(
    trials: Iterable[FrozenTrial], units: Iterable[str], session_start: datetime
) -> int:
    """How many of the planned units still want a run (for progress): never tried, failed in an
    earlier session, or waiting or running anywhere; a unit tried in this session is not."""
    tries = attempts(trials)
    return sum(_wanted(tries.get(unit, []), session_start) for unit in units)


def sampled_units_left(
    trials: Iterable[FrozenTrial], wanted: int, session_start: datetime, current: str
) -> int:
    """How many sampled units a random/TPE sweep of `wanted` trials still wants besides the
    `current` one: those not drawn yet, and those that want a run as `planned_runs_left` says."""
    tries = attempts(trials)
    drawn = sum(_wanted(t, session_start) for unit, t in tries.items() if unit != current)
    return max(wanted - len(tries), 0) + drawn


def taken_by_other(study: optuna.Study, claimed: FrozenTrial) -> int | None:
    """The number of another trial that owns the claimed trial's unit, if any (step 4 above)."""
    unit = unit_of(claimed)
    for t in study.get_trials(deepcopy=False):
        if t.number == claimed.number or unit_of(t) != unit or trial_status(t) == Status.SKIPPED:
            continue
        if trial_status(t) in DONE_STATUSES:
            return t.number
        if t.number < claimed.number and t.state in ACTIVE:
            return t.number
    return None


def seed_owner(study: optuna.Study, number: int, config_id: str, seed: int) -> int | None:
    """The number of another live trial that trains this seed of this sampled point, if any."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if (
            t.number != number
            and t.user_attrs.get("config_id") == config_id
            and t.system_attrs.get(TRAINING_ATTR) == seed
        ):
            return t.number
    return None


def skip(storage: optuna.storages.BaseStorage, trial_id: int, reason: str) -> None:
    """Give up a claimed trial that is no run (its unit is taken, or it is a surplus)."""
    with contextlib.suppress(UpdateFinishedTrialError):
        storage.set_trial_user_attr(trial_id, "status", Status.SKIPPED)
        storage.set_trial_user_attr(trial_id, "error", reason)
        storage.set_trial_state_values(trial_id, state=TrialState.FAIL)


# Set on the exception that left `claimed` once its trial is stored as finished: a stop that
# carries it was marked; one without it came between runs (nothing was running).
MARKED_ATTR = "tricklab_marked_trial"


def marked_stop(trial_id: int) -> Interrupted:
    """The stop to raise once the run it cut short is stored as interrupted in trial `trial_id`."""
    stop = Interrupted(INTERRUPTED_ERROR)
    setattr(stop, MARKED_ATTR, trial_id)
    return stop


@contextlib.contextmanager
def claimed(storage: optuna.storages.BaseStorage, trial_id: int) -> Iterator[None]:
    """Whatever escapes while a trial is claimed leaves it FAIL (interrupted / failed), not RUNNING."""
    try:
        yield
    except BaseException as exc:
        interrupted = is_interrupt(exc)
        machine = isinstance(exc, MachineError)  # no run happened: it runs again, as after a stop
        status = Status.INTERRUPTED if interrupted or machine else Status.FAILED
        error = INTERRUPTED_ERROR if interrupted else f"{type(exc).__name__}: {exc}"
        why = _mark_finished(storage, trial_id, status, error)
        if why is None:
            with contextlib.suppress(AttributeError, TypeError):  # the CLI says what was marked
                setattr(exc, MARKED_ATTR, trial_id)
            raise
        log.warning("trial %d could not be marked %s: %s", trial_id, status, why)
        if isinstance(exc, KeyboardInterrupt):  # the CLI must not say it was marked
            raise TrialNotMarked(
                f"the running trial could not be marked interrupted ({why}); a rerun finds its "
                "worker gone and runs it again"
            ) from exc
        raise


class TrialNotMarked(Interrupted):
    """A stop that left its running trial unmarked: the storage refused every try to mark it."""


def _mark_finished(
    storage: optuna.storages.BaseStorage, trial_id: int, status: str, error: str
) -> str | None:
    """Mark a RUNNING trial FAIL with `status` and `error` (a trial no longer RUNNING is left as
    it is); None once that is stored, else why it could not be, after MARK_TRIES tries. A stop
    landing inside a storage write leaves this thread's database session in its transaction,
    holding SQLite's write lock: each try first closes it (rolled back), or the mark would wait
    out the lock timeout and fail (the flaky Ctrl-C test)."""
    why = "no try"
    backend = getattr(storage, "_backend", storage)  # Optuna's cache around an RDB
    for attempt in range(MARK_TRIES):
        with contextlib.suppress(Exception):  # RDB storages only; a journal has no session
            backend.remove_session()
        try:
            if storage.get_trial(trial_id).state != TrialState.RUNNING:
                return None
            storage.set_trial_user_attr(trial_id, "status", status)
            storage.set_trial_user_attr(trial_id, "error", error)
            storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
            return None
        except UpdateFinishedTrialError:
            return None  # another worker finished it meanwhile (took it for dead)
        except Exception as exc:
            why = f"{type(exc).__name__}: {shown(str(exc).strip()[:200])}"
            time.sleep(0.1 * (attempt + 1))
    return why


def finish_trial(
    study: optuna.Study, trial: optuna.Trial, records: list[dict], status: str, error: str | None
) -> bool:
    """Store the runs and tell Optuna; False when another worker had already failed the trial."""
    complete = [r["accuracy"] for r in records if r["status"] in COMPLETE_STATUSES]
    value = sum(complete) / len(complete) if status in COMPLETE_STATUSES and complete else None
    if status in COMPLETE_STATUSES and value is None:
        status, error = Status.FAILED, "no complete run"
    state = (
        TrialState.COMPLETE
        if status in COMPLETE_STATUSES
        else TrialState.PRUNED
        if status == Status.PRUNED
        else TrialState.FAIL
    )
    try:  # each attr is one storage write: status, error and the means for people (and the
        # dashboard, dashboard.py), runs for everything
        trial.set_user_attr("status", status)
        trial.set_user_attr("error", error)
        for name, mean in trial_attrs(records).items():
            trial.set_user_attr(name, mean)
        trial.set_user_attr("runs", records)
        study.tell(trial, value if state == TrialState.COMPLETE else None, state=state)
    except UpdateFinishedTrialError:
        log.warning(
            "trial %d was taken for dead by another worker; its result is lost", trial.number
        )
        return False
    return True


def final_statuses(trials: Iterable[FrozenTrial]) -> dict[str, str]:
    """Each unit's final status: its first done try's (complete, diverged, pruned), else its last
    try's (failed, oom, interrupted: a rerun tries it again)."""
    out = {}
    for unit, tries in attempts(trials).items():
        statuses = [trial_status(t) for t in tries]
        done = [s for s in statuses if s in DONE_STATUSES]
        out[unit] = done[0] if done else statuses[-1]
    return out


def status_counts(finals: dict[str, str], units: Iterable[str] | None = None) -> dict[str, int]:
    """How many units end in each status; with `units`, those units (`missing`: not tried yet)."""
    keys = finals if units is None else units
    return dict(collections.Counter(finals.get(unit, "missing") for unit in keys))


def done_count(finals: dict[str, str], units: Iterable[str] | None = None) -> int:
    """How many of the units (all, without `units`) have a final outcome a rerun would repeat."""
    keys = finals if units is None else units
    return sum(finals.get(unit) in DONE_STATUSES for unit in keys)


HEARTBEAT_ATTR = "tricklab:heartbeat"


WORKER_ATTR = "tricklab:worker"


def worker_identity() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def name_worker(storage: optuna.storages.BaseStorage, trial_id: int) -> None:
    """Name this process on a trial it has just claimed: if it dies before its heartbeat starts,
    the next worker sees the process gone instead of waiting out the grace period."""
    storage.set_trial_system_attr(trial_id, WORKER_ATTR, worker_identity())


def _process_gone(pid: int) -> bool:
    """True when no live process has this pid (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "Z"


def is_stale(trial: FrozenTrial, grace_seconds: float, now: float | None = None) -> bool:
    """Whether a RUNNING trial's worker is gone: its process is dead, or it has gone silent."""
    if trial.state != TrialState.RUNNING:
        return False
    worker = trial.system_attrs.get(WORKER_ATTR)
    me = worker_identity()
    if isinstance(worker, dict) and worker.get("host") == me["host"]:
        if worker.get("pid") == me["pid"]:
            return False  # this process's own trial
        if _process_gone(int(worker.get("pid", -1))):
            return True
    beat = trial.system_attrs.get(HEARTBEAT_ATTR)
    if beat is None and trial.datetime_start is not None:
        beat = trial.datetime_start.timestamp()  # naive local time, as Optuna stores it
    if beat is None:
        return False
    return (time.time() if now is None else now) - float(beat) > grace_seconds


def fail_stale_trials(
    study: optuna.Study, storage: optuna.storages.BaseStorage, grace_seconds: float
) -> list[int]:
    """Mark RUNNING trials whose worker is gone as FAIL (read as `interrupted`); their numbers."""
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not is_stale(trial, grace_seconds):
            continue
        try:
            storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
        except UpdateFinishedTrialError:
            continue  # it finished meanwhile, or another worker got there first
        log.warning("trial %d: its worker is gone; marked interrupted", trial.number)
        failed.append(trial.number)
    return failed


@contextlib.contextmanager
def heartbeat(
    storage: optuna.storages.BaseStorage, trial_id: int, interval_seconds: float
) -> Iterator[None]:
    """Beat every `interval_seconds` until the block ends (the claim named the worker)."""
    stop = threading.Event()

    def beat() -> bool:
        try:
            storage.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())
            return True
        except UpdateFinishedTrialError:
            return False  # another worker took the trial for dead; the runner will hear of it
        except Exception as exc:  # a transient storage error must not kill the run
            log.warning("heartbeat of trial %d failed: %s", trial_id, exc)
            return True

    def loop() -> None:
        while not stop.wait(interval_seconds) and beat():
            pass

    beat()
    thread = threading.Thread(target=loop, name=f"tricklab-heartbeat-{trial_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def claim_lock(url: str) -> Iterator[None]:
    """Serialise trial claims where the storage cannot: SQLite and journal files.

    Optuna claims a WAITING trial with a row lock (SELECT ... FOR UPDATE) that PostgreSQL and MySQL
    honour and SQLite ignores, so two processes may both claim one trial; the journal storage
    settles those claims by the order of its log, but not a read-then-write such as the claim of
    a sampled point's seed (claims.py). A file storage is local, so an advisory lock on a file
    beside it makes the claim atomic for every process using it.
    """
    storage_file = file_of(url)
    if storage_file is None or fcntl is None:
        yield
        return
    path = storage_file.with_name(storage_file.name + ".claim-lock")
    try:  # read-write: a FIFO there would block a write-only open until a reader came
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as err:  # a read-only folder, a folder of that name, a full disk
        if is_disk_full(err):
            raise disk_full_error(err, path) from None
        raise _no_lock(path, err.strerror or str(err)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, a device: no lock to hold
            raise _no_lock(path, "not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _no_lock(path: Path, why: str) -> TrickLabError:
    return TrickLabError(
        f"cannot open {shown(path)}, the lock file beside the storage ({why}): the storage's "
        "folder must be writable"
        + (", and that name a file's: remove what is there" if path.exists() else "")
    )


def pop_waiting_trial(
    study: optuna.Study, storage: optuna.storages.BaseStorage, units: set[str] | None = None
) -> int | None:
    """Claim the lowest-numbered WAITING trial (of `units`, when given) and return its trial id.

    WAITING -> RUNNING is an atomic state change in Optuna's journal and server-database storages
    (hold `claim_lock` for SQLite), so two workers never claim the same trial. This is what
    `Study.ask` does, minus creating a fresh trial when nothing waits.
    """
    for trial in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if units is not None and trial.user_attrs.get("unit") not in units:
            continue
        try:
            if storage.set_trial_state_values(trial._trial_id, state=TrialState.RUNNING):
                name_worker(storage, trial._trial_id)
                return trial._trial_id
        except UpdateFinishedTrialError:
            continue
    return None


def started_since(trial: FrozenTrial, since: datetime) -> bool:
    """Whether the trial was claimed at or after `since` (naive local time, as Optuna's)."""
    return trial.datetime_start is not None and trial.datetime_start >= since
