"""Experiments from Python: `ablate`, `sweep` and `results`, and what an experiment call leaves.

Each call plans its units (plan.py, space.py), checks up front what every run would meet (bad data,
an unknown model, ...), opens its Optuna study (storage.py) and runs the worker loop (workers.py;
claims.py: each unit exactly once across workers and reruns) inside `stop_on_signals()` unless the
caller gives its own stop request. Calling it again resumes the study. Each run keeps its folder
under the study folder (rundirs.py); `study_runs` lists them.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import optuna

from tricklab.core.errors import TrickLabError
from tricklab.core.stopping import StopRequest, stop_on_signals
from tricklab.core.version import __version__
from tricklab.experiments.busy import study_meta
from tricklab.experiments.claims import done_count, final_statuses, status_counts
from tricklab.experiments.dashboard import ablation_params
from tricklab.experiments.liveness import Liveness
from tricklab.experiments.plan import (
    BASELINE,
    PRUNERS,
    SAMPLERS,
    Config,
    Unit,
    ablation_plan,
    baseline_identity,
    check_seeds,
    default_study_name,
    plan_units,
)
from tricklab.experiments.rundirs import RUN_DIR_ATTR, study_dir
from tricklab.experiments.space import SearchSpace, overrides_for
from tricklab.experiments.stats import ConfigStats, collect_runs, config_stats
from tricklab.experiments.storage import (
    experiment_dir,
    load_study,
    open_storage,
    open_study,
    shown_url,
    storage_url,
)
from tricklab.experiments.workers import (
    RunEvent,
    TrainFn,
    Worker,
    run_sampled,
    run_units,
)
from tricklab.measure.provenance import finish_record, start_record


@dataclass
class ExperimentSummary:
    """What an `ablate` or `sweep` call leaves: counts and the statistics of the whole study.

    planned, ran (by this call) and already_done count units: (config, seed) runs of an ablation or
    grid sweep, sampled configurations with all their seeds in a random/TPE sweep. status_counts:
    the final status of each such unit; `missing` counts units with no try yet."""

    study: str
    storage: str  # its URL as shown, a password as *** (storage.shown_url): not for connecting
    kind: str
    planned: int
    ran: int
    already_done: int
    status_counts: dict[str, int]
    stats: list[ConfigStats] = field(default_factory=list)
    provenance: dict[str, Any] | None = None  # this call's record (measure/provenance.py)
    busy_machine: bool = False  # provenance.results_busy: load above the cores, or times spread
    busy_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExperimentSummary:
        data = dict(data)
        data["stats"] = [ConfigStats.from_dict(s) for s in data.get("stats", [])]
        return cls(**data)


def _summary(
    study: optuna.Study, kind: str, url: str, planned: int, ran: int, done_before: int,
    counts: dict[str, int], provenance: dict[str, Any],
) -> ExperimentSummary:  # fmt: skip
    provenance = finish_record(provenance)
    study.set_user_attr("provenance", provenance)  # the latest call's, for `results`
    records = collect_runs(study)
    stats = config_stats(records, order="appearance" if kind == "ablation" else "accuracy")
    return ExperimentSummary(
        study=study.study_name,
        storage=shown_url(url),  # for output: the password hidden
        kind=kind,
        planned=planned,
        ran=ran,
        already_done=done_before,
        status_counts=counts,
        stats=stats,
        **study_meta({"provenance": provenance}, records, stats),
    )


def _default_train() -> TrainFn:
    from tricklab.training.api import train  # torch: imported when the first run is near

    return train


def _stop_request(stop: StopRequest | None) -> contextlib.AbstractContextManager[StopRequest]:
    """The caller's stop request, or Ctrl-C and SIGTERM caught for the call (see stopping.py)."""
    return contextlib.nullcontext(stop) if stop is not None else stop_on_signals()


def _pruner(name: str) -> optuna.pruners.BasePruner:
    if name == "none":
        return optuna.pruners.NopPruner()
    if name == "median":
        return optuna.pruners.MedianPruner()
    raise TrickLabError(f"unknown pruner '{name}'; choose one of {', '.join(PRUNERS)}")


# ---------------------------------------------------------------- what a study stores of its experiment

# A study name given again must hold the same experiment (storage.check_same_experiment).
ABLATION_MATCH = ("kind", "baseline")
SWEEP_MATCH = ("kind", "baseline", "space")


def ablation_attrs(
    baseline: Any, configs: Sequence[Config], seeds: int, grid: bool
) -> dict[str, Any]:
    """The study user attrs an ablation stores (and --dry-run compares with a stored study's)."""
    return {
        "kind": "ablation",
        "baseline": baseline_identity(baseline),
        "configs": [c.config_id for c in configs],
        "seeds": seeds,
        "grid": grid,
        "tricklab_version": __version__,
    }


def sweep_attrs(base: Any, space: SearchSpace, sampler: str, seeds: int) -> dict[str, Any]:
    """The study user attrs a sweep stores (and --dry-run compares with a stored study's)."""
    return {
        "kind": "sweep",
        "baseline": baseline_identity(base),
        "space": space.to_dict(),
        "sampler": sampler,
        "seeds": seeds,
        "tricklab_version": __version__,
    }


# ---------------------------------------------------------------- ablations


def plan_ablation(
    baseline: Any,
    vary: Mapping[str, Sequence[Any]],
    seeds: int,
    grid: bool = False,
    *,
    check_runs: bool = True,
) -> tuple[list[Config], list[Unit]]:
    """The ablation's configurations and (configuration, seed) units. With `check_runs`, input
    that every run would fail on (missing data, an unknown model, ...) raises TrickLabError first:
    the setup of the baseline and of one configuration per varied value is built (each distinct
    data source, model and loader once), so a large grid costs about what a small one does."""
    plan = ablation_plan(baseline, vary, grid)
    units = plan_units(plan.configs, seeds)
    if check_runs:
        from tricklab.training.setup import check_setup  # torch

        check_setup(plan.checked)
    return plan.configs, units


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
    liveness: Liveness | None = None,
    stop: StopRequest | None = None,
) -> ExperimentSummary:
    """Run an ablation: the baseline plus one change at a time (or the grid), seeds 0..seeds-1.

    `baseline` is a Recipe run as given (apply `plan.budget_overrides` for the fixed budget the CLI
    uses). `study` defaults to a name derived from the baseline and the plan, `storage` to an SQLite
    file in `out_dir` (default runs/experiments/<study>); see storage.py for the other storages.
    Each run's folder goes to `<study folder>/runs/<config>/seed-<k>` (rundirs.py).
    Calling it again resumes; several processes calling it on one storage share the work.
    Ctrl-C or SIGTERM (or `stop`, see tricklab.core.stopping) marks the running trial interrupted and
    raises Interrupted.
    """
    configs, units = plan_ablation(baseline, vary, seeds, grid, check_runs=train_fn is None)
    name = study or default_study_name("ablate", baseline, [c.config_id for c in configs])
    url = storage_url(storage, experiment_dir(name, out_dir))
    store = open_storage(url)
    opened = open_study(
        store,
        name,
        attrs=ablation_attrs(baseline, configs, seeds, grid),
        must_match=ABLATION_MATCH,
        sampler=optuna.samplers.RandomSampler(),
    )
    keys = [u.key for u in units]
    done_before = done_count(final_statuses(opened.get_trials(deepcopy=False)), keys)
    provenance = start_record()
    with _stop_request(stop) as stop:
        worker = Worker(
            opened,
            store,
            url,
            baseline,
            train_fn or _default_train(),
            stop,
            liveness or Liveness(),
            on_run_end=on_run_end,
            study_folder=study_dir(name, storage, out_dir),
        )
        space, params = ablation_params(baseline, configs, vary)  # for optuna-dashboard
        ran = run_units(
            worker, units, params=lambda unit: params[unit.config.config_id], space=space
        )
    counts = status_counts(final_statuses(opened.get_trials(deepcopy=False)), keys)
    return _summary(opened, "ablation", url, len(units), ran, done_before, counts, provenance)


# ---------------------------------------------------------------- sweeps


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
    if sampler == "grid":
        space.grid_size()  # too large a grid is refused before any setup is built
    if check_runs:
        from tricklab.training.setup import check_setup

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
    liveness: Liveness | None = None,
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
        attrs=sweep_attrs(base, space, sampler, seeds),
        must_match=SWEEP_MATCH,
        sampler=optuna_sampler,
        pruner=_pruner(pruner),
    )
    provenance = start_record()
    with _stop_request(stop) as stop:
        worker = Worker(
            opened,
            store,
            url,
            base,
            train_fn or _default_train(),
            stop,
            liveness or Liveness(),
            prune=pruner != "none",
            on_run_end=on_run_end,
            study_folder=study_dir(name, storage, out_dir),
        )
        if sampler == "grid":
            points = grid_configs(space, trials, sampler_seed)
            values = {config.config_id: v for config, v in points}
            units = plan_units([config for config, _ in points], seeds)
            keys = [u.key for u in units]
            done_before = done_count(final_statuses(opened.get_trials(deepcopy=False)), keys)
            ran = run_units(
                worker,
                units,
                params=lambda unit: values[unit.config.config_id],
                space=space.grid_space(),
            )
            counts = status_counts(final_statuses(opened.get_trials(deepcopy=False)), keys)
            return _summary(opened, "sweep", url, len(units), ran, done_before, counts, provenance)
        done_before = done_count(final_statuses(opened.get_trials(deepcopy=False)))
        ran = run_sampled(worker, space, trials, seeds)
    counts = status_counts(final_statuses(opened.get_trials(deepcopy=False)))
    return _summary(opened, "sweep", url, trials, ran, done_before, counts, provenance)


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
    url = storage_url(storage, experiment_dir(study, out_dir))
    opened = load_study(open_storage(url, must_exist=True), study)
    kind = opened.user_attrs.get("kind", "sweep")
    records = collect_runs(opened)
    rows = config_stats(
        records,
        reference=reference,
        target=target,
        order="appearance" if kind == "ablation" else "accuracy",
    )
    ref = next((r.config_id for r in rows if r.is_reference), None)
    meta = {"study": study, "storage": shown_url(url), "kind": kind, "reference": ref}
    meta["confidence"] = 0.95
    meta.update(study_meta(opened.user_attrs, records, rows))  # provenance, busy_machine
    return meta, rows


def study_runs(
    study: str, storage: str | None = None, *, out_dir: str | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(meta, runs) of a stored study: one run per (configuration, seed), the try that stands (as
    `results` counts it), with config_id, seed, status, accuracy, train_seconds, run_dir (its
    folder; None for a run of an older tricklab that kept none), trial and error."""
    url = storage_url(storage, experiment_dir(study, out_dir))
    opened = load_study(open_storage(url, must_exist=True), study)
    trials = {t.number: t for t in opened.get_trials(deepcopy=False)}
    runs = []
    for record in collect_runs(opened):
        # A run that never stored its record (its worker died) has the folder its trial named.
        folder = record.get(RUN_DIR_ATTR) or trials[record["trial"]].user_attrs.get(RUN_DIR_ATTR)
        runs.append(
            {
                "config_id": record["config_id"],
                "seed": int(record.get("seed", 0)),
                "status": record["status"],
                "accuracy": record.get("accuracy"),
                "train_seconds": record.get("train_seconds"),
                "run_dir": folder,
                "trial": record["trial"],
                "error": record.get("error"),
            }
        )
    first = {}  # configurations as they first ran, the baseline first; each one's seeds in order
    for run in runs:
        first.setdefault(run["config_id"], (run["config_id"] != BASELINE, len(first)))
    runs.sort(key=lambda r: (first[r["config_id"]], r["seed"]))
    kind = opened.user_attrs.get("kind", "sweep")
    meta = {"study": study, "storage": shown_url(url), "kind": kind}
    return meta, runs
