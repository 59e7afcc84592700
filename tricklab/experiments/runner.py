"""Run experiments in an Optuna study: exactly once per unit, across workers, resumable.

Units and claims. An ablation (and a grid sweep) is a list of units, (configuration, seed) pairs.
Each worker loops:
1. fail stale trials: RUNNING trials whose worker died (SIGKILL, lost machine) become FAIL
   (`interrupted`), see storage.py;
2. enqueue, as a WAITING trial tagged with its unit, one unit of its plan that has no done trial
   (complete, diverged or pruned), nothing waiting or running, and no try that started since this
   worker started: a unit never run, or one that failed / ran out of memory / was interrupted in
   an earlier session. So rerunning the command resumes it, and within one session each unit is
   tried once. The unit is drawn at random among those of the lowest missing seed: every config
   gets seed k before any gets seed k+1, the run order within a seed is random (a slow drift of
   the machine does not line up with one config), and workers starting together rarely pick the
   same unit;
3. claim the lowest-numbered WAITING trial of its plan (WAITING -> RUNNING is atomic in Optuna's
   RDB and journal storages, so no two workers claim one trial);
4. workers starting together may enqueue one unit twice, so a claimed trial is given up (FAIL,
   `skipped`) when its unit already has a done trial or an earlier-numbered trial waiting or
   running. Trial numbers order creation, so of two claimed duplicates exactly the later one
   yields, and a duplicate claimed after the first finished sees it done: each unit runs once;
5. run it with a heartbeat; store the outcome; when nothing is left to claim, wait while units of
   the plan still run elsewhere (taking over those whose worker dies), then return.
Ctrl-C marks the running trial `interrupted` and re-raises KeyboardInterrupt; a SIGKILL leaves the
trial RUNNING until the next worker sees its process gone (same host) or its heartbeat silent.

Sampled sweeps (random, TPE) have no plan of points: a trial is one sampled configuration run with
every seed (the objective is the mean accuracy; only the first seed reports per-epoch accuracy to
the pruner; a configuration whose seed fails stops there and the trial takes that status). Each
complete seed is stored as it ends, and a (configuration, seed) that already ran complete (or
diverged), in an earlier trial that drew the same point or in an interrupted try of this one, is
not run again: the trial takes that run (a trial whose seeds all ran before trains nothing, and
still counts as one of the `trials`). A worker
asks Optuna for a new trial while fewer than `trials` units exist, then counts the units created
before its trial: if that reaches `trials`, the trial is a surplus made by a concurrent worker and
is skipped, so the study holds exactly `trials` sampled units. Failed/oom/interrupted trials of an
earlier session are enqueued again with their parameters (as Optuna's RetryFailedTrialCallback
does), under the same unit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

import tricklab
from tricklab.errors import TrickLabError
from tricklab.experiments.plan import (
    PRUNERS,
    SAMPLERS,
    Config,
    Unit,
    baseline_identity,
    check_seeds,
    default_study_name,
    plan_configs,
    plan_units,
    unit_recipe,
)
from tricklab.experiments.space import SearchSpace, overrides_for
from tricklab.experiments.stats import ConfigStats, collect_runs, config_stats, headline_accuracy
from tricklab.experiments.storage import (
    COMPLETE_STATUSES,
    DEFAULT_GRACE_SECONDS,
    DEFAULT_HEARTBEAT_SECONDS,
    DONE_STATUSES,
    RETRY_STATUSES,
    WORKER_ATTR,
    claim_lock,
    experiment_dir,
    fail_stale_trials,
    heartbeat,
    open_storage,
    open_study,
    pop_waiting_trial,
    started_since,
    storage_url,
    stored_runs,
    trial_status,
    worker_identity,
)
from tricklab.stopping import (
    INTERRUPTED_ERROR,
    Interrupted,
    StopRequest,
    is_interrupt,
    stop_on_signals,
)

log = logging.getLogger(__name__)

TrainFn = Callable[..., Any]  # train(recipe, *, on_epoch=..., stop=...) -> RunResult
ACTIVE = (TrialState.WAITING, TrialState.RUNNING)
MAX_HEARTBEAT_SECONDS = 86_400


@dataclass(frozen=True)
class Liveness:
    """How workers tell each other they are alive (see storage.py).

    heartbeat_seconds: beat interval; grace_seconds: silence after which another host's worker
    counts as dead (same-host workers are checked by pid at once); poll_seconds: how often an idle
    worker looks again while units of its plan run elsewhere."""

    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    poll_seconds: float = 2.0

    def __post_init__(self) -> None:
        for flag, value in (
            ("--heartbeat-seconds", self.heartbeat_seconds),
            ("--grace-seconds", self.grace_seconds),
            ("poll_seconds", self.poll_seconds),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise TrickLabError(f"{flag} {value} must be a finite number of seconds > 0")
        if self.heartbeat_seconds > MAX_HEARTBEAT_SECONDS:  # beyond threading's timeouts
            raise TrickLabError(
                f"--heartbeat-seconds {self.heartbeat_seconds} must be at most "
                f"{MAX_HEARTBEAT_SECONDS} (a day)"
            )
        # A live worker beats at least once per grace period, or others take its trial for dead.
        if self.grace_seconds <= self.heartbeat_seconds:
            raise TrickLabError(
                f"--grace-seconds {self.grace_seconds} must be larger than the heartbeat "
                f"interval ({self.heartbeat_seconds} s)"
            )


@dataclass
class RunEvent:
    """One finished run, for progress display."""

    trial: int
    config_id: str
    seed: int
    status: str
    accuracy: float | None
    train_seconds: float | None
    error: str | None


@dataclass
class ExperimentSummary:
    """What an `ablate` or `sweep` call leaves: counts and the statistics of the whole study.

    planned, ran (by this call) and already_done count units: (config, seed) runs of an ablation or
    grid sweep, sampled configurations with all their seeds in a random/TPE sweep. status_counts:
    the final status of each such unit; `missing` counts units with no try yet."""

    study: str
    storage: str
    kind: str
    planned: int
    ran: int
    already_done: int
    status_counts: dict[str, int]
    stats: list[ConfigStats] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExperimentSummary:
        data = dict(data)
        data["stats"] = [ConfigStats.from_dict(s) for s in data.get("stats", [])]
        return cls(**data)


# ---------------------------------------------------------------- one run


def _default_train() -> TrainFn:
    from tricklab.train.api import train

    return train


def _jsonable(data: Any) -> Any:
    def default(value: Any) -> Any:
        item = getattr(value, "item", None)  # numpy / torch scalars
        return item() if callable(item) else str(value)

    return json.loads(json.dumps(data, default=default))


def train_one(
    recipe: Any,
    train_fn: TrainFn,
    stop: StopRequest,
    on_epoch: Callable[[dict, int], None] | None = None,
) -> dict[str, Any]:
    """Train one recipe and return its run record; never raises for a run that ended.

    The record is the RunResult's dict plus `accuracy`; its status is the one `train()` gave
    (see `api.run_end`), or `pruned` when `on_epoch` raised optuna.TrialPruned. An interrupted run
    is recorded too (the caller stores it, then stops). `on_epoch(row, epoch_number)` sees each
    epoch's metrics.
    """
    from tricklab.train.api import RunInterrupted, run_end

    epochs: list[dict] = []

    def record_epoch(row: dict) -> None:
        epochs.append(dict(row))
        if on_epoch is not None:
            on_epoch(row, len(epochs))

    start = time.perf_counter()
    try:
        record = train_fn(recipe, on_epoch=record_epoch, stop=stop).to_dict()
    except RunInterrupted as stopped:
        record = stopped.result.to_dict()
    except optuna.TrialPruned as exc:
        record = _unfinished_record(recipe, epochs, start, "pruned", str(exc) or None)
    except (Exception, KeyboardInterrupt) as exc:  # a train_fn other than train() raised
        record = _unfinished_record(recipe, epochs, start, *run_end(exc, stop))
    record["accuracy"] = headline_accuracy(record)
    record["target_accuracy"] = recipe.get("run.target_accuracy")
    if record["status"] in COMPLETE_STATUSES and record["accuracy"] is None:
        record.update(status="failed", error="the run finished without a validation accuracy")
    return _jsonable(record)


def _unfinished_record(
    recipe: Any, epochs: list[dict], start: float, status: str, error: str | None
) -> dict[str, Any]:
    """The record of a run that left no RunResult: what the epochs it finished show."""
    from tricklab.measure.hardware import hardware_fingerprint
    from tricklab.train.api import resolve_device

    return {
        "status": status,
        "error": error,
        "recipe": recipe.to_dict(),
        "epochs": epochs,
        "wall_seconds": time.perf_counter() - start,
        "train_seconds": epochs[-1].get("train_seconds", 0.0) if epochs else 0.0,
        "tricklab_version": tricklab.__version__,
        "hardware": hardware_fingerprint(resolve_device(recipe.run.device)),
    }


def _pruning_reporter(trial: optuna.Trial, recipe: Any) -> Callable[[dict, int], None]:
    """Report each epoch's val_acc to the study's pruner; raise TrialPruned when it says so,
    except after the last epoch: a run that has finished is kept, not thrown away."""
    last_epoch = math.ceil(recipe.run.epochs)

    def on_epoch(row: dict, epoch: int) -> None:
        accuracy = row.get("val_acc")
        if accuracy is None:
            return
        trial.report(float(accuracy), epoch)
        if epoch < last_epoch and trial.should_prune():
            raise optuna.TrialPruned(f"pruned after epoch {epoch} (val_acc {accuracy:.4f})")

    return on_epoch


# ---------------------------------------------------------------- trials


def _finish_trial(
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
    try:  # each attr is one storage write: status and error for people, runs for everything
        trial.set_user_attr("status", status)
        trial.set_user_attr("error", error)
        trial.set_user_attr("runs", records)
        study.tell(trial, value if state == TrialState.COMPLETE else None, state=state)
    except UpdateFinishedTrialError:
        log.warning(
            "trial %d was taken for dead by another worker; its result is lost", trial.number
        )
        return False
    return True


def _skip(storage: optuna.storages.BaseStorage, trial_id: int, reason: str) -> None:
    """Give up a claimed trial that is no run (its unit is taken, or it is a surplus)."""
    with contextlib.suppress(UpdateFinishedTrialError):
        storage.set_trial_user_attr(trial_id, "status", "skipped")
        storage.set_trial_user_attr(trial_id, "error", reason)
        storage.set_trial_state_values(trial_id, state=TrialState.FAIL)


@contextlib.contextmanager
def _claimed(storage: optuna.storages.BaseStorage, trial_id: int) -> Iterator[None]:
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


def _unit_of(trial: FrozenTrial) -> str:
    return trial.user_attrs.get("unit", f"sample-{trial.number}")


def _attempts(trials: Sequence[FrozenTrial]) -> dict[str, list[FrozenTrial]]:
    out: dict[str, list[FrozenTrial]] = {}
    for t in trials:
        if trial_status(t) != "skipped":
            out.setdefault(_unit_of(t), []).append(t)
    return out


def _needs_try(tries: Sequence[FrozenTrial], session_start: datetime) -> bool:
    """No done try, none waiting or running, none started in this session: enqueue it."""
    return not any(
        trial_status(t) in DONE_STATUSES or t.state in ACTIVE or started_since(t, session_start)
        for t in tries
    )


def _taken_by_other(study: optuna.Study, claimed: FrozenTrial) -> int | None:
    """The number of another trial that owns the claimed trial's unit, if any (see module doc)."""
    unit = _unit_of(claimed)
    for t in study.get_trials(deepcopy=False):
        if t.number == claimed.number or _unit_of(t) != unit or trial_status(t) == "skipped":
            continue
        if trial_status(t) in DONE_STATUSES:
            return t.number
        if t.number < claimed.number and t.state in ACTIVE:
            return t.number
    return None


def _event(trial_number: int, config_id: str, record: dict) -> RunEvent:
    return RunEvent(
        trial=trial_number,
        config_id=config_id,
        seed=int(record.get("seed", 0)),
        status=record["status"],
        accuracy=record.get("accuracy"),
        train_seconds=record.get("train_seconds"),
        error=record.get("error"),
    )


# ---------------------------------------------------------------- worker loops


def run_units(
    study: optuna.Study,
    storage: optuna.storages.BaseStorage,
    baseline: Any,
    units: Sequence[Unit],
    *,
    url: str,
    train_fn: TrainFn,
    stop: StopRequest,
    liveness: Liveness = Liveness(),
    params: Callable[[Unit], dict[str, Any]] | None = None,
    space: SearchSpace | None = None,
    prune: bool = False,
    on_run_end: Callable[[RunEvent], None] | None = None,
) -> int:
    """Work through `units` with any other workers of the study (see the module doc).

    `url` is the storage's (`storage.storage_url`), for `claim_lock`. `params(unit)` gives the Optuna params to record on the unit's trial, drawn from `space`
    (grid sweeps). Returns how many runs this worker did.
    """
    session_start = datetime.now()
    order = random.Random()  # run order only; no result depends on it
    by_key = {u.key: u for u in units}
    ran = 0
    while True:
        stop.check()
        fail_stale_trials(study, storage, liveness.grace_seconds)
        with claim_lock(url):
            tries = _attempts(study.get_trials(deepcopy=False))
            missing = [u for u in units if _needs_try(tries.get(u.key, []), session_start)]
            if missing:
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
            tries = _attempts(study.get_trials(deepcopy=False))
            if not any(t.state in ACTIVE for key in by_key for t in tries.get(key, [])):
                return ran
            time.sleep(liveness.poll_seconds)  # others still run units of this plan
            continue
        with _claimed(storage, trial_id):
            claimed = storage.get_trial(trial_id)
            owner = _taken_by_other(study, claimed)
            if owner is not None:
                _skip(storage, trial_id, f"its unit is taken by trial {owner}")
                continue
            unit = by_key[claimed.user_attrs["unit"]]
            trial = optuna.Trial(study, trial_id)
            if space is not None:
                space.suggest(trial)
            with heartbeat(storage, trial_id, liveness.heartbeat_seconds):
                recipe = unit_recipe(baseline, unit)
                record = train_one(
                    recipe, train_fn, stop, _pruning_reporter(trial, recipe) if prune else None
                )
            record["seed"] = unit.seed
            stored = _finish_trial(study, trial, [record], record["status"], record["error"])
        ran += stored  # a run another worker took for dead is lost, not counted
        if on_run_end is not None:
            on_run_end(_event(claimed.number, unit.config.config_id, record))
        if record["status"] == "interrupted":
            raise Interrupted(INTERRUPTED_ERROR)


def _run_sampled_trial(
    study: optuna.Study,
    storage: optuna.storages.BaseStorage,
    trial_id: int,
    trial: optuna.Trial,
    base: Any,
    space: SearchSpace,
    seeds: int,
    train_fn: TrainFn,
    stop: StopRequest,
    liveness: Liveness,
    prune: bool,
    on_run_end: Callable[[RunEvent], None] | None,
) -> list[dict]:
    with heartbeat(storage, trial_id, liveness.heartbeat_seconds):
        values = space.suggest(trial)
        overrides = overrides_for(values)
        config_id = " ".join(overrides)
        trial.set_user_attr("config_id", config_id)
        trial.set_user_attr("overrides", overrides)
        records: list[dict] = []
        done = _finished_runs(study, config_id)
        for seed in range(seeds):
            if seed in done:  # drawn before, or run by this trial's interrupted try: not again
                records.append(done[seed])
                with contextlib.suppress(UpdateFinishedTrialError):
                    trial.set_user_attr(f"run-{seed}", done[seed])
                if prune and seed == 0:  # the pruner sees its curve as if it had run here
                    for epoch, accuracy in enumerate(done[seed]["val_accs"], start=1):
                        if accuracy is not None:
                            trial.report(float(accuracy), epoch)
                if done[seed]["status"] not in COMPLETE_STATUSES:
                    break
                continue
            try:
                recipe = base.override([*overrides, f"run.seed={seed}"])
            except TrickLabError as exc:  # a sampled combination the recipe rejects
                records.append(
                    {"seed": seed, "status": "failed", "error": str(exc), "accuracy": None}
                )
                break
            reporter = _pruning_reporter(trial, recipe) if prune and seed == 0 else None
            record = train_one(recipe, train_fn, stop, reporter)
            record["seed"] = seed
            records.append(record)
            # Stored as it ends, kept if the worker dies before the last seed (and before tell).
            if record["status"] in COMPLETE_STATUSES:
                with contextlib.suppress(
                    UpdateFinishedTrialError
                ):  # taken for dead: see _finish_trial
                    trial.set_user_attr(f"run-{seed}", record)
            if on_run_end is not None:
                on_run_end(_event(trial.number, config_id, record))
            if record["status"] not in COMPLETE_STATUSES:
                break
    failed = [r for r in records if r["status"] not in COMPLETE_STATUSES]
    status = failed[0]["status"] if failed else "complete"
    _finish_trial(study, trial, records, status, failed[0].get("error") if failed else None)
    return records


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
            if run.get("status") in REUSED_STATUSES and "reused_from_trial" not in run:
                found.setdefault(
                    int(run["seed"]),
                    {
                        "seed": run["seed"],
                        "status": run["status"],
                        "error": run.get("error"),
                        "accuracy": run.get("accuracy"),
                        "reused_from_trial": t.number,
                        "val_accs": [row.get("val_acc") for row in run.get("epochs") or []],
                    },
                )
    return found


# A sampled point's seeded runs that a later draw of the point takes instead of training again.
REUSED_STATUSES = (*COMPLETE_STATUSES, "diverged")


def run_sampled(
    study: optuna.Study,
    storage: optuna.storages.BaseStorage,
    base: Any,
    space: SearchSpace,
    trials: int,
    *,
    url: str,
    seeds: int,
    train_fn: TrainFn,
    stop: StopRequest,
    liveness: Liveness = Liveness(),
    prune: bool = False,
    on_run_end: Callable[[RunEvent], None] | None = None,
) -> int:
    """Run sampled trials until the study holds `trials` units (see the module doc); returns how
    many trials (each with all its seeds) this call ran."""
    session_start = datetime.now()
    ran = 0
    while True:
        stop.check()
        fail_stale_trials(study, storage, liveness.grace_seconds)
        all_trials = study.get_trials(deepcopy=False)
        tries = _attempts(all_trials)
        for unit, unit_tries in tries.items():
            last = max(unit_tries, key=lambda t: t.number)
            if trial_status(last) in RETRY_STATUSES and _needs_try(unit_tries, session_start):
                study.enqueue_trial(last.params, user_attrs={"unit": unit})
        with claim_lock(url):
            trial_id = pop_waiting_trial(study, storage)
        if trial_id is None:
            if len(tries) >= trials:
                if not any(t.state in ACTIVE for t in study.get_trials(deepcopy=False)):
                    return ran
                time.sleep(liveness.poll_seconds)
                continue
            with claim_lock(url):
                trial = study.ask()  # pops a waiting retry if one appeared meanwhile
            trial_id = trial._trial_id
            storage.set_trial_system_attr(trial_id, WORKER_ATTR, worker_identity())
        else:
            trial = None
        with _claimed(storage, trial_id):
            claimed = storage.get_trial(trial_id)
            if "unit" in claimed.user_attrs:
                owner = _taken_by_other(study, claimed)
                if owner is not None:
                    _skip(storage, trial_id, f"its unit is taken by trial {owner}")
                    continue
            else:
                storage.set_trial_user_attr(trial_id, "unit", f"sample-{claimed.number}")
                earlier = {
                    _unit_of(t)
                    for t in study.get_trials(deepcopy=False)
                    if t.number < claimed.number and trial_status(t) != "skipped"
                }
                if len(earlier) >= trials:
                    _skip(storage, trial_id, f"the study already has its {trials} trials")
                    continue
            if trial is None:
                trial = optuna.Trial(study, trial_id)
            records = _run_sampled_trial(
                study,
                storage,
                trial_id,
                trial,
                base,
                space,
                seeds,
                train_fn,
                stop,
                liveness,
                prune,
                on_run_end,
            )
        ran += 1  # a sampled configuration, all its seeds: the unit `planned` counts
        if records and records[-1]["status"] == "interrupted":
            raise Interrupted(INTERRUPTED_ERROR)


# ---------------------------------------------------------------- public API


def _stop_request(stop: StopRequest | None) -> contextlib.AbstractContextManager[StopRequest]:
    """The caller's stop request, or Ctrl-C and SIGTERM caught for the call (see stopping.py)."""
    return contextlib.nullcontext(stop) if stop is not None else stop_on_signals()


def _pruner(name: str) -> optuna.pruners.BasePruner:
    if name == "none":
        return optuna.pruners.NopPruner()
    if name == "median":
        return optuna.pruners.MedianPruner()
    raise TrickLabError(f"unknown pruner '{name}'; choose one of {', '.join(PRUNERS)}")


def _summarize_units(
    study: optuna.Study, units: Sequence[Unit], done_before: int, ran: int, kind: str, url: str
) -> ExperimentSummary:
    tries = _attempts(study.get_trials(deepcopy=False))
    counts: dict[str, int] = {}
    for unit in units:
        statuses = [
            trial_status(t) for t in sorted(tries.get(unit.key, []), key=lambda t: t.number)
        ]
        done = [s for s in statuses if s in DONE_STATUSES]
        final = done[0] if done else (statuses[-1] if statuses else "missing")
        counts[final] = counts.get(final, 0) + 1
    return ExperimentSummary(
        study=study.study_name,
        storage=url,
        kind=kind,
        planned=len(units),
        ran=ran,
        already_done=done_before,
        status_counts=counts,
        stats=config_stats(
            collect_runs(study), order="appearance" if kind == "ablation" else "accuracy"
        ),
    )


def _done_units(study: optuna.Study, units: Sequence[Unit]) -> int:
    tries = _attempts(study.get_trials(deepcopy=False))
    return sum(any(trial_status(t) in DONE_STATUSES for t in tries.get(u.key, [])) for u in units)


def plan_ablation(
    baseline: Any,
    vary: Mapping[str, Sequence[Any]],
    seeds: int,
    grid: bool = False,
    *,
    check_runs: bool = True,
) -> tuple[list[Config], list[Unit]]:
    """The ablation's configurations and (configuration, seed) units. With `check_runs`, input
    that every run would fail on (missing data, an unknown model, ...) raises TrickLabError first."""
    configs = plan_configs(baseline, vary, grid)
    units = plan_units(configs, seeds)
    if check_runs:
        from tricklab.train.api import check_setup

        check_setup(unit_recipe(baseline, Unit(config, 0)) for config in configs)
    return configs, units


def ablate(
    baseline: Any,
    vary: Mapping[str, Sequence[Any]],
    seeds: int = 3,
    *,
    grid: bool = False,
    study: str | None = None,
    storage: str | None = None,
    out_dir: str | None = None,
    train_fn: TrainFn | None = None,
    on_run_end: Callable[[RunEvent], None] | None = None,
    liveness: Liveness = Liveness(),
    stop: StopRequest | None = None,
) -> ExperimentSummary:
    """Run an ablation: the baseline plus one change at a time (or the grid), seeds 0..seeds-1.

    `baseline` is a Recipe run as given (apply `plan.budget_overrides` for the fixed budget the CLI
    uses). `study` defaults to a name derived from the baseline and the plan, `storage` to an SQLite
    file in `out_dir` (default runs/experiments/<study>); see storage.py for the other storages.
    Calling it again resumes; several processes calling it on one storage share the work.
    Ctrl-C or SIGTERM (or `stop`, see tricklab.stopping) marks the running trial interrupted and
    raises Interrupted.
    """
    configs, units = plan_ablation(baseline, vary, seeds, grid, check_runs=train_fn is None)
    name = study or default_study_name("ablate", baseline, [c.config_id for c in configs])
    url = storage_url(storage, experiment_dir(name, out_dir))
    store = open_storage(url)
    opened = open_study(
        store,
        name,
        attrs={
            "kind": "ablation",
            "baseline": baseline_identity(baseline),
            "configs": [c.config_id for c in configs],
            "seeds": seeds,
            "grid": grid,
            "tricklab_version": tricklab.__version__,
        },
        must_match=("kind", "baseline"),
        sampler=optuna.samplers.RandomSampler(),
    )
    done_before = _done_units(opened, units)
    with _stop_request(stop) as stop:
        ran = run_units(
            opened,
            store,
            baseline,
            units,
            url=url,
            train_fn=train_fn or _default_train(),
            stop=stop,
            liveness=liveness,
            on_run_end=on_run_end,
        )
    return _summarize_units(opened, units, done_before, ran, "ablation", url)


def grid_configs(
    space: SearchSpace, trials: int | None, seed: int | None
) -> list[tuple[Config, dict]]:
    """The grid's points as configurations with their params; with `trials`, a seeded random
    subset of that many (the same in every worker)."""
    points = space.grid()
    if trials is not None and trials < len(points):
        random.Random(seed or 0).shuffle(points)
        points = points[:trials]
    out = []
    for values in points:
        overrides = tuple(overrides_for(values))
        out.append((Config(" ".join(overrides), overrides), values))
    return out


def check_sweep(
    base: Any,
    space: SearchSpace,
    sampler: str,
    trials: int | None,
    seeds: int,
    sampler_seed: int | None,
    *,
    check_runs: bool = True,
) -> None:
    """TrickLabError for sweep arguments no sweep can run with, and for a key or value of the
    space that is not valid. With `check_runs`, also for input every run with some value of the
    space would fail on (missing data, an unknown model, ...)."""
    if sampler not in SAMPLERS:
        raise TrickLabError(f"unknown sampler '{sampler}'; choose one of {', '.join(SAMPLERS)}")
    if trials is not None and trials < 1:
        raise TrickLabError(f"--trials {trials} must be at least 1")
    if sampler != "grid" and trials is None:
        raise TrickLabError(f"--sampler {sampler} needs --trials N")
    check_seeds(seeds)
    if sampler_seed is not None and not 0 <= sampler_seed < 2**32:
        raise TrickLabError(f"--sampler-seed {sampler_seed} must lie in [0, 2**32 - 1]")
    recipes = space.check(base)  # every choice and both ends of every range
    if check_runs:
        from tricklab.train.api import check_setup

        check_setup([base, *recipes])


def sweep(
    base: Any,
    space: SearchSpace,
    trials: int | None = None,
    *,
    sampler: str = "tpe",
    pruner: str = "none",
    seeds: int = 1,
    sampler_seed: int | None = None,
    study: str | None = None,
    storage: str | None = None,
    out_dir: str | None = None,
    train_fn: TrainFn | None = None,
    on_run_end: Callable[[RunEvent], None] | None = None,
    liveness: Liveness = Liveness(),
    stop: StopRequest | None = None,
) -> ExperimentSummary:
    """Sweep recipe keys over `space` with an Optuna sampler; objective: validation accuracy.

    grid: every point of the (finite) space, or a seeded subset of `trials` of them; each
    (point, seed) pair is one trial and runs exactly once, as an ablation unit does. random, tpe:
    `trials` sampled configurations, each trained with seeds 0..seeds-1 in one trial whose value is
    their mean accuracy. pruner "median" stops trials whose per-epoch accuracy falls below the
    median of earlier trials at the same epoch (Optuna's MedianPruner); they are stored `pruned`.
    `sampler_seed` seeds the sampler (leave it None with several workers, or they draw alike).
    """
    check_sweep(base, space, sampler, trials, seeds, sampler_seed, check_runs=train_fn is None)
    name = study or default_study_name(
        "sweep", base, space.to_dict(), sampler, trials if sampler == "grid" else None
    )
    url = storage_url(storage, experiment_dir(name, out_dir))
    store = open_storage(url)
    optuna_sampler = (
        optuna.samplers.TPESampler(seed=sampler_seed)
        if sampler == "tpe"
        else optuna.samplers.RandomSampler(seed=sampler_seed)
    )
    opened = open_study(
        store,
        name,
        attrs={
            "kind": "sweep",
            "baseline": baseline_identity(base),
            "space": space.to_dict(),
            "sampler": sampler,
            "seeds": seeds,
            "tricklab_version": tricklab.__version__,
        },
        must_match=("kind", "baseline", "space"),
        sampler=optuna_sampler,
        pruner=_pruner(pruner),
    )
    with _stop_request(stop) as stop:
        train = train_fn or _default_train()
        if sampler == "grid":
            points = grid_configs(space, trials, sampler_seed)
            values = {config.config_id: v for config, v in points}
            units = plan_units([config for config, _ in points], seeds)
            done_before = _done_units(opened, units)
            ran = run_units(
                opened,
                store,
                base,
                units,
                url=url,
                train_fn=train,
                stop=stop,
                liveness=liveness,
                params=lambda unit: values[unit.config.config_id],
                space=space.grid_space(),
                prune=pruner != "none",
                on_run_end=on_run_end,
            )
            return _summarize_units(opened, units, done_before, ran, "sweep", url)
        done_before = sum(
            any(trial_status(t) in DONE_STATUSES for t in ts)
            for ts in _attempts(opened.get_trials(deepcopy=False)).values()
        )
        ran = run_sampled(
            opened,
            store,
            base,
            space,
            trials,
            url=url,
            seeds=seeds,
            train_fn=train,
            stop=stop,
            liveness=liveness,
            prune=pruner != "none",
            on_run_end=on_run_end,
        )
        counts: dict[str, int] = {}
        for unit_tries in _attempts(opened.get_trials(deepcopy=False)).values():
            statuses = [trial_status(t) for t in sorted(unit_tries, key=lambda t: t.number)]
            done = [s for s in statuses if s in DONE_STATUSES]
            final = done[0] if done else statuses[-1]
            counts[final] = counts.get(final, 0) + 1
        return ExperimentSummary(
            study=opened.study_name,
            storage=url,
            kind="sweep",
            planned=trials,
            ran=ran,
            already_done=done_before,
            status_counts=counts,
            stats=config_stats(collect_runs(opened), order="accuracy"),
        )


def results(
    study: str,
    storage: str | None = None,
    *,
    out_dir: str | None = None,
    reference: str | None = None,
    target: float | None = None,
) -> list[ConfigStats]:
    """The statistics table of a stored study (see stats.py); never creates a storage."""
    return study_results(study, storage, out_dir=out_dir, reference=reference, target=target)[1]


def study_results(
    study: str,
    storage: str | None = None,
    *,
    out_dir: str | None = None,
    reference: str | None = None,
    target: float | None = None,
) -> tuple[dict[str, Any], list[ConfigStats]]:
    """(meta, rows): meta names the study, storage, kind, reference and confidence."""
    from tricklab.experiments.storage import load_study

    url = storage_url(storage, experiment_dir(study, out_dir))
    opened = load_study(open_storage(url, must_exist=True), study)
    kind = opened.user_attrs.get("kind", "sweep")
    rows = config_stats(
        collect_runs(opened),
        reference=reference,
        target=target,
        order="appearance" if kind == "ablation" else "accuracy",
    )
    ref = next((r.config_id for r in rows if r.is_reference), None)
    meta = {"study": study, "storage": url, "kind": kind, "reference": ref, "confidence": 0.95}
    return meta, rows
