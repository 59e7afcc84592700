"""The claim protocol: each unit of work runs once, across worker processes and reruns.

A unit is a (configuration, seed) pair of an ablation or grid sweep, or one sampled configuration
with all its seeds in a random/TPE sweep; the `unit` user attr of a trial names it. A unit's
tries are its trials, `skipped` ones aside. Each worker (workers.py) loops:
1. fail stale trials: RUNNING trials whose worker died (SIGKILL, lost machine) become FAIL
   (`interrupted`), see storage.py;
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
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from tricklab.experiments.dashboard import trial_attrs
from tricklab.experiments.storage import (
    COMPLETE_STATUSES,
    DONE_STATUSES,
    started_since,
    trial_status,
)
from tricklab.stopping import INTERRUPTED_ERROR, is_interrupt

log = logging.getLogger(__name__)

ACTIVE = (TrialState.WAITING, TrialState.RUNNING)
TRAINING_ATTR = "tricklab:training-seed"  # the seed a sampled trial trains now


def unit_of(trial: FrozenTrial) -> str:
    """The unit a trial is a try of (a sampled trial made before it was tagged: its own)."""
    return trial.user_attrs.get("unit", f"sample-{trial.number}")


def attempts(trials: Iterable[FrozenTrial]) -> dict[str, list[FrozenTrial]]:
    """Each unit's tries, in trial-number order; `skipped` trials are no tries."""
    out: dict[str, list[FrozenTrial]] = {}
    for t in sorted(trials, key=lambda t: t.number):
        if trial_status(t) != "skipped":
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
        if t.number == claimed.number or unit_of(t) != unit or trial_status(t) == "skipped":
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
        storage.set_trial_user_attr(trial_id, "status", "skipped")
        storage.set_trial_user_attr(trial_id, "error", reason)
        storage.set_trial_state_values(trial_id, state=TrialState.FAIL)


@contextlib.contextmanager
def claimed(storage: optuna.storages.BaseStorage, trial_id: int) -> Iterator[None]:
    """Whatever escapes while a trial is claimed leaves it FAIL (interrupted / failed), not RUNNING."""
    try:
        yield
    except BaseException as exc:
        interrupted = is_interrupt(exc)
        with contextlib.suppress(Exception):
            if storage.get_trial(trial_id).state == TrialState.RUNNING:
                storage.set_trial_user_attr(
                    trial_id, "status", "interrupted" if interrupted else "failed"
                )
                error = INTERRUPTED_ERROR if interrupted else f"{type(exc).__name__}: {exc}"
                storage.set_trial_user_attr(trial_id, "error", error)
                storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
        raise


def finish_trial(
    study: optuna.Study, trial: optuna.Trial, records: list[dict], status: str, error: str | None
) -> bool:
    """Store the runs and tell Optuna; False when another worker had already failed the trial."""
    complete = [r["accuracy"] for r in records if r["status"] in COMPLETE_STATUSES]
    value = sum(complete) / len(complete) if status in COMPLETE_STATUSES and complete else None
    if status in COMPLETE_STATUSES and value is None:
        status, error = "failed", "no complete run"
    state = (
        TrialState.COMPLETE
        if status in COMPLETE_STATUSES
        else TrialState.PRUNED
        if status == "pruned"
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
