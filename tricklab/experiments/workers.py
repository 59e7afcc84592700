"""The worker loops: claim a unit (claims.py), train it, store its record, until none is left.

`run_units` works through a plan of (configuration, seed) units (ablations, grid sweeps): it
enqueues the unit that needs a try, drawn at random among those of the lowest missing seed (every
config gets seed k before any gets seed k+1, the run order within a seed is random so a slow drift
of the machine does not line up with one config, and workers starting together rarely pick the same
unit), claims it and runs it with a heartbeat. When nothing is left to claim it waits while units of
the plan still run elsewhere (taking over those whose worker dies), then returns.

`run_sampled` runs random and TPE sweeps, which have no plan of points: a trial is one sampled
configuration run with every seed (the objective is the mean accuracy; only the first seed reports
per-epoch accuracy to the pruner; a configuration whose seed fails stops there and the trial takes
that status). Each complete seed is stored as it ends, and a (configuration, seed) that already ran
complete (or diverged), in an earlier trial that drew the same point or in an interrupted try of
this one, is not run again: the trial takes that run (a trial whose seeds all ran before trains
nothing, and still counts as one of the `trials`); one another worker trains at that moment is
waited for, then taken (claims.py). A worker asks Optuna for a new trial while fewer than `trials`
units exist, then counts the units created before its trial: if that reaches `trials`, the trial is
a surplus made by a concurrent worker and is skipped, so the study holds exactly `trials` sampled
units. Failed/oom/interrupted trials of an earlier session are enqueued again with their parameters
(as Optuna's RetryFailedTrialCallback does), under the same unit.

Each run trains in its own folder (rundirs.py), which the trial names before the run starts; a
folder an interrupted try of the same run left is replaced. Each run that starts is shown by the
command's progress display, if there is one (core/progress.py: `run k/N`, elapsed time and ETA, then
the run's epoch bar), and each finished run is reported to `on_run_end` with this process's count of
runs, the runs the study still wants and the time since this process started working.

A run's status is the one `train()` gave it (see tricklab.core.stopping and `api.run_end`). An
interrupted run is stored, then the worker raises Interrupted; a SIGKILL leaves the trial RUNNING
until the next worker sees its process gone (same host) or its heartbeat silent.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError

from tricklab.core.errors import TrickLabError, call_hook
from tricklab.core.progress import current as current_progress
from tricklab.core.status import COMPLETE_STATUSES, RETRY_STATUSES, TRAINED_STATUSES, Status
from tricklab.core.stopping import StopRequest, deferring_stops
from tricklab.experiments.claims import (
    ACTIVE,
    TRAINING_ATTR,
    attempts,
    claim_lock,
    claimed,
    fail_stale_trials,
    finish_trial,
    heartbeat,
    marked_stop,
    name_worker,
    needs_try,
    planned_runs_left,
    pop_waiting_trial,
    sampled_units_left,
    seed_owner,
    skip,
    taken_by_other,
    unit_of,
)
from tricklab.experiments.liveness import Liveness
from tricklab.experiments.plan import Unit, unit_recipe
from tricklab.experiments.rundirs import (
    RUN_DIR_ATTR,
    fresh_run_dir,
    recorded_run_dirs,
    run_dir,
)
from tricklab.experiments.single_run import TrainFn, pruning_reporter, train_one
from tricklab.experiments.space import SearchSpace, overrides_for
from tricklab.experiments.storage import stored_runs, trial_status

log = logging.getLogger(__name__)


@dataclass
class RunEvent:
    """One finished run, for progress display: the run, then this process's progress (its
    `runs_done` so far, the `runs_left` the study still wants from anyone, seconds since it
    started working)."""

    trial: int
    config_id: str
    seed: int
    status: str
    accuracy: float | None
    train_seconds: float | None
    error: str | None
    runs_done: int = 1
    runs_left: int = 0
    elapsed_seconds: float = 0.0
    run_dir: str | None = None
    tta: bool = False  # `accuracy` is the test-time-augmented one (tricks.tta)

    @property
    def runs_total(self) -> int:
        """N of "run k/N": this process's runs and those left."""
        return self.runs_done + self.runs_left

    @property
    def eta_seconds(self) -> float:
        """The runs left at this process's mean seconds per run (as if it ran them alone)."""
        return self.elapsed_seconds / max(self.runs_done, 1) * self.runs_left


@dataclass
class RunCounter:
    """A worker's finished runs and when it started working (perf_counter seconds)."""

    started: float = field(default_factory=time.perf_counter)
    done: int = 0


@dataclass(frozen=True)
class Worker:
    """What a worker loop needs besides its plan: the study and its storage (`url` names the
    claim lock, see claims.claim_lock), the baseline recipe the units change, how to train, the
    stop request, liveness, whether the study's pruner may stop runs, who hears of each run, and
    the study folder its run folders go in (None: runs keep no folder)."""

    study: optuna.Study
    storage: optuna.storages.BaseStorage
    url: str
    base: Any  # the baseline Recipe
    train_fn: TrainFn
    stop: StopRequest
    liveness: Liveness = Liveness()
    prune: bool = False
    on_run_end: Callable[[RunEvent], None] | None = None
    study_folder: Path | None = None
    counter: RunCounter = field(default_factory=RunCounter)

    def run_folder(self, trial_id: int, config_id: str, seed: int) -> Path | None:
        """The folder for a run this worker has claimed, cleared of what an interrupted try of it
        left (rundirs.fresh_run_dir), named in the trial's `run_dir` attr before anything is
        written there."""
        if self.study_folder is None:
            return None
        ours = recorded_run_dirs(self.study.get_trials(deepcopy=False))
        folder = fresh_run_dir(run_dir(self.study_folder, config_id, seed), ours)
        self.storage.set_trial_user_attr(trial_id, RUN_DIR_ATTR, str(folder))
        return folder

    def starting(self, config_id: str, seed: int, runs_left: int) -> None:
        """Show that a run starts (`runs_left`: it and the runs the study wants after it) on the
        command's progress display, if any: run k/N, elapsed, ETA."""
        display = current_progress()
        if display is not None:
            done = self.counter.done
            display.run_starts(f"{config_id} seed {seed}", done, done + runs_left)

    def report(self, trial_number: int, config_id: str, record: dict, runs_left: int) -> None:
        self.counter.done += 1
        if self.on_run_end is not None:
            call_hook(
                self.on_run_end,
                "on_run_end",
                RunEvent(
                    trial=trial_number,
                    config_id=config_id,
                    seed=int(record.get("seed", 0)),
                    status=record["status"],
                    accuracy=record.get("accuracy"),
                    train_seconds=record.get("train_seconds"),
                    error=record.get("error"),
                    runs_done=self.counter.done,
                    runs_left=runs_left,
                    elapsed_seconds=time.perf_counter() - self.counter.started,
                    run_dir=record.get(RUN_DIR_ATTR),
                    tta=record.get("val_acc_tta") is not None,
                ),
            )


# ---------------------------------------------------------------- planned units


@deferring_stops  # a signal never cuts a claim, heartbeat or record halfway
def run_units(
    worker: Worker,
    units: Sequence[Unit],
    *,
    params: Callable[[Unit], dict[str, Any]] | None = None,
    space: SearchSpace | None = None,
) -> int:
    """Work through `units` with any other workers of the study (see the module doc).

    `params(unit)` gives the Optuna params to record on the unit's trial, drawn from `space` (grid
    sweeps). Returns how many runs this worker did."""
    study, storage, liveness = worker.study, worker.storage, worker.liveness
    session_start = datetime.now()
    order = random.Random()  # run order only; no result depends on it
    by_key = {u.key: u for u in units}
    ran = 0
    while True:
        fail_stale_trials(study, storage, liveness.grace_seconds)
        with claim_lock(worker.url):
            tries = attempts(study.get_trials(deepcopy=False))
            missing = [u for u in units if needs_try(tries.get(u.key, []), session_start)]
            if missing:  # a stop with runs left stops here; after the last run, the study ends
                worker.stop.check()
                lowest_seed = min(u.seed for u in missing)
                unit = order.choice([u for u in missing if u.seed == lowest_seed])
                study.enqueue_trial(
                    params(unit) if params else {},
                    user_attrs={
                        "unit": unit.key,
                        "config_id": unit.config.config_id,
                        "overrides": list(unit.config.overrides),
                        "seed": unit.seed,
                    },
                )
            trial_id = pop_waiting_trial(study, storage, set(by_key))
        if trial_id is None:
            tries = attempts(study.get_trials(deepcopy=False))
            if not any(t.state in ACTIVE for key in by_key for t in tries.get(key, [])):
                return ran
            worker.stop.check()  # others still run units of this plan: this worker stops
            worker.stop.wait(liveness.poll_seconds)
            continue
        with claimed(storage, trial_id):
            frozen = storage.get_trial(trial_id)
            owner = taken_by_other(study, frozen)
            if owner is not None:
                skip(storage, trial_id, f"its unit is taken by trial {owner}")
                continue
            unit = by_key[frozen.user_attrs["unit"]]
            trial = optuna.Trial(study, trial_id)
            if space is not None:
                space.suggest(trial)
            with heartbeat(storage, trial_id, liveness.heartbeat_seconds):
                recipe = unit_recipe(worker.base, unit)
                reporter = pruning_reporter(trial, recipe) if worker.prune else None
                folder = worker.run_folder(trial_id, unit.config.config_id, unit.seed)
                left = planned_runs_left(study.get_trials(deepcopy=False), by_key, session_start)
                worker.starting(unit.config.config_id, unit.seed, left)
                record = train_one(recipe, worker.train_fn, worker.stop, reporter, folder)
            record["seed"] = unit.seed
            stored = finish_trial(study, trial, [record], record["status"], record["error"])
        ran += stored  # a run another worker took for dead is lost, not counted
        left = planned_runs_left(study.get_trials(deepcopy=False), by_key, session_start)
        worker.report(frozen.number, unit.config.config_id, record, left)
        if record["status"] == Status.INTERRUPTED:
            raise marked_stop(trial_id)


# ---------------------------------------------------------------- sampled configurations


@deferring_stops  # a signal never cuts a claim, heartbeat or record halfway
def run_sampled(worker: Worker, space: SearchSpace, trials: int, seeds: int) -> int:
    """Run sampled trials until the study holds `trials` units (see the module doc); returns how
    many trials (each with all its seeds) this call ran."""
    study, storage, liveness = worker.study, worker.storage, worker.liveness
    session_start = datetime.now()
    ran = 0
    while True:
        fail_stale_trials(study, storage, liveness.grace_seconds)
        tries = attempts(study.get_trials(deepcopy=False))
        retry = [(u, t[-1]) for u, t in tries.items() if trial_status(t[-1]) in RETRY_STATUSES]
        retries = [(unit, last) for unit, last in retry if needs_try(tries[unit], session_start)]
        if len(tries) < trials or retries or any(t.state in ACTIVE for t in study.get_trials()):
            worker.stop.check()  # work left (here or elsewhere); after the last trial, it ends
        for unit, last in retries:
            study.enqueue_trial(last.params, user_attrs={"unit": unit})
        with claim_lock(worker.url):
            trial_id = pop_waiting_trial(study, storage)
        if trial_id is None:
            if len(tries) >= trials:
                if not any(t.state in ACTIVE for t in study.get_trials(deepcopy=False)):
                    return ran
                worker.stop.wait(liveness.poll_seconds)
                continue
            with claim_lock(worker.url):
                trial = study.ask()  # pops a waiting retry if one appeared meanwhile
            trial_id = trial._trial_id
            name_worker(storage, trial_id)
        else:
            trial = None
        with claimed(storage, trial_id):
            frozen = storage.get_trial(trial_id)
            if "unit" in frozen.user_attrs:
                owner = taken_by_other(study, frozen)
                if owner is not None:
                    skip(storage, trial_id, f"its unit is taken by trial {owner}")
                    continue
            else:
                storage.set_trial_user_attr(trial_id, "unit", f"sample-{frozen.number}")
                earlier = {
                    unit_of(t)
                    for t in study.get_trials(deepcopy=False)
                    if t.number < frozen.number and trial_status(t) != Status.SKIPPED
                }
                if len(earlier) >= trials:
                    skip(storage, trial_id, f"the study already has its {trials} trials")
                    continue
            if trial is None:
                trial = optuna.Trial(study, trial_id)
            unit = unit_of(storage.get_trial(trial_id))  # tagged above, or when enqueued
            runs_left = functools.partial(
                _sampled_runs_left, study, trials, seeds, session_start, unit
            )
            with heartbeat(storage, trial_id, liveness.heartbeat_seconds):
                records = _run_sampled_trial(worker, trial, space, seeds, runs_left)
            failed = [r for r in records if r["status"] not in COMPLETE_STATUSES]
            status, error = (
                (failed[0]["status"], failed[0].get("error")) if failed else (Status.COMPLETE, None)
            )
            finish_trial(study, trial, records, status, error)
        ran += 1  # a sampled configuration, all its seeds: the unit `planned` counts
        if records and records[-1]["status"] == Status.INTERRUPTED:
            raise marked_stop(trial_id)


def _sampled_runs_left(
    study: optuna.Study,
    trials: int,
    seeds: int,
    session_start: datetime,
    unit: str,
    seeds_left_here: int,
) -> int:
    """Runs a random/TPE sweep still wants: the seeds left in `unit`'s trial, then every seed of
    the other units it wants (claims.sampled_units_left)."""
    now = study.get_trials(deepcopy=False)
    return seeds_left_here + seeds * sampled_units_left(now, trials, session_start, unit)


def _run_sampled_trial(
    worker: Worker,
    trial: optuna.Trial,
    space: SearchSpace,
    seeds: int,
    runs_left: Callable[[int], int],
) -> list[dict]:
    """Train the trial's sampled configuration with seeds 0..seeds-1 (reusing seeds that ran
    before), storing each complete seed as it ends; stops at the first seed that does not complete.
    `runs_left(seeds left in this trial)` counts the runs the study still wants, for the report."""
    values = space.suggest(trial)
    overrides = overrides_for(values)
    config_id = " ".join(overrides)
    trial.set_user_attr("config_id", config_id)
    trial.set_user_attr("overrides", overrides)
    records: list[dict] = []
    for seed in range(seeds):
        done = _claim_seed(worker, trial, config_id, seed)
        if seed in done:  # drawn before (or now elsewhere), or by this trial's try: not again
            records.append(done[seed])
            with contextlib.suppress(UpdateFinishedTrialError):
                trial.set_user_attr(f"run-{seed}", done[seed])
            if worker.prune and seed == 0:  # the pruner sees its curve as if it had run here
                for epoch, accuracy in enumerate(done[seed]["val_accs"], start=1):
                    if accuracy is not None:
                        trial.report(float(accuracy), epoch)
            if done[seed]["status"] not in COMPLETE_STATUSES:
                break
            continue
        try:
            recipe = worker.base.override([*overrides, f"run.seed={seed}"])
        except TrickLabError as exc:  # a sampled combination the recipe rejects
            records.append(
                {"seed": seed, "status": Status.FAILED, "error": str(exc), "accuracy": None}
            )
            break
        reporter = pruning_reporter(trial, recipe) if worker.prune and seed == 0 else None
        folder = worker.run_folder(trial._trial_id, config_id, seed)
        worker.starting(config_id, seed, runs_left(seeds - seed))
        record = train_one(recipe, worker.train_fn, worker.stop, reporter, folder)
        record["seed"] = seed
        records.append(record)
        # Stored as it ends, kept if the worker dies before the last seed (and before tell).
        if record["status"] in COMPLETE_STATUSES:
            with contextlib.suppress(UpdateFinishedTrialError):  # taken for dead: finish_trial
                trial.set_user_attr(f"run-{seed}", record)
        complete = record["status"] in COMPLETE_STATUSES
        worker.report(
            trial.number, config_id, record, runs_left(seeds - seed - 1 if complete else 0)
        )
        if not complete:
            break
    return records


def _claim_seed(worker: Worker, trial: optuna.Trial, config_id: str, seed: int) -> dict[int, dict]:
    """{seed: a finished run of it to take} (see `_finished_runs`), or {} once this trial has
    claimed the seed to train it; while another live trial trains it, wait (claims.py)."""
    study, storage, liveness = worker.study, worker.storage, worker.liveness
    waiting_for = None
    while True:
        with claim_lock(worker.url):
            done = _finished_runs(study, config_id)
            if seed in done:
                return done
            owner = seed_owner(study, trial.number, config_id, seed)
            if owner is None:
                storage.set_trial_system_attr(trial._trial_id, TRAINING_ATTR, seed)
                return {}
        if owner != waiting_for:
            log.info("trial %d waits for trial %d, which trains seed %d of its point",
                     trial.number, owner, seed)  # fmt: skip
            waiting_for = owner
        worker.stop.check()
        worker.stop.wait(liveness.poll_seconds)
        fail_stale_trials(study, storage, liveness.grace_seconds)  # a dead owner's seed is free


def _finished_runs(study: optuna.Study, config_id: str) -> dict[int, dict]:
    """{seed: a short record of its run} for the complete or diverged seeds of a sampled
    configuration, from earlier trials.

    Random and TPE samplers may draw a point again; its seeds already ran (a seeded run that
    diverged diverges again), and the same seeded run counted twice would shrink the confidence
    interval for nothing. The short record names the trial holding the full one, which results
    take, and keeps its per-epoch accuracies for the pruner."""
    found: dict[int, dict] = {}
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("config_id") != config_id:
            continue
        for run in stored_runs(t):
            if run.get("status") in TRAINED_STATUSES and "reused_from_trial" not in run:
                found.setdefault(
                    int(run["seed"]),
                    {
                        "seed": run["seed"],
                        "status": run["status"],
                        "error": run.get("error"),
                        "accuracy": run.get("accuracy"),
                        "train_seconds": run.get("train_seconds"),
                        "record_seconds": run.get("record_seconds"),
                        "reused_from_trial": t.number,
                        RUN_DIR_ATTR: run.get(RUN_DIR_ATTR),
                        "val_accs": [row.get("val_acc") for row in run.get("epochs") or []],
                    },
                )
    return found
