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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import optuna

from tricklab.core.environment import check_environment
from tricklab.core.errors import TrickLabError, expect_callback, expect_type
from tricklab.core.stopping import StopRequest, stop_request
from tricklab.core.version import __version__
from tricklab.experiments.busy import study_meta
from tricklab.experiments.claims import claim_lock, done_count, final_statuses, status_counts
from tricklab.experiments.dashboard import ablation_params
from tricklab.experiments.liveness import Liveness
from tricklab.experiments.plan import (
    PRUNERS,
    SAMPLERS,
    AblationPlan,
    Config,
    SweepPlan,
    Unit,
    ablation_plan,
    baseline_identity,
    check_seeds,
    default_study_name,
    plan_units,
)
from tricklab.experiments.records import checked_trials
from tricklab.experiments.rundirs import check_out_dir, study_dir
from tricklab.experiments.samplers import SeededDraws
from tricklab.experiments.space import SearchSpace, overrides_for
from tricklab.experiments.stats import ConfigStats, collect_runs, config_stats, planned_runs
from tricklab.experiments.storage import (
    experiment_dir,
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
    unit: str = "runs"  # what planned, ran and already_done count: "sampled trials" for random/TPE
    provenance: dict[str, Any] | None = None  # the latest call that trained (measure/provenance.py)
    busy_machine: bool = False  # busy.results_busy: load above the cores, or times spread
    busy_reason: str | None = None
    # the study's runs' warm-ups (torch.compile, cuDNN autotuning), timed apart from their times:
    # summed, and the largest one run paid (the first compile; a warm cache makes the rest small)
    compile_seconds: float = 0.0
    compile_seconds_max: float = 0.0

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
    stored = study.user_attrs  # one read of the storage
    if ran or "provenance" not in stored:  # the latest call that trained, for `results`
        study.set_user_attr("provenance", provenance)
    else:  # a resume that ran nothing measured nothing: the stored record stands
        provenance = stored["provenance"]
    records = collect_runs(study)
    order = "appearance" if kind == "ablation" else "accuracy"
    stats = config_stats(records, order=order, planned=planned_runs(study.user_attrs, records))
    return ExperimentSummary(
        study=study.study_name, storage=shown_url(url), kind=kind,  # shown: the password hidden
        planned=planned, ran=ran, already_done=done_before, status_counts=counts, stats=stats,
        **study_meta({"provenance": provenance}, records, stats),
        compile_seconds=sum(r.get("compile_seconds") or 0.0 for r in records),
        compile_seconds_max=max((r.get("compile_seconds") or 0.0 for r in records), default=0.0),
    )  # fmt: skip


def _default_train() -> TrainFn:
    from tricklab.training.api import train  # torch: imported when the first run is near

    return train


def _sharing_data(train_fn: TrainFn | None) -> contextlib.AbstractContextManager:
    """tricklab's runs share one loaded dataset (training.setup.sharing_data); another train_fn
    loads its own."""
    if train_fn is not None:
        return contextlib.nullcontext()
    from tricklab.training.setup import sharing_data  # torch

    return sharing_data()


def _pruner(name: str) -> optuna.pruners.BasePruner:
    if name == "none":
        return optuna.pruners.NopPruner()
    if name == "median":
        return optuna.pruners.MedianPruner()
    raise TrickLabError(f"unknown pruner '{name}'; choose one of {', '.join(PRUNERS)}")


# ---------------------------------------------------------------- what a study stores of its experiment

# A study name given again must hold the same experiment (storage.check_study).
# model_code: the hash of your own models' code (training.setup.check_setup), where checked.
ABLATION_MATCH = ("kind", "baseline", "configs", "model_code")  # another --vary: another one
SWEEP_MATCH = ("kind", "baseline", "space", "model_code")


def sweep_match(sampler: str) -> tuple[str, ...]:
    """What a sweep's study must hold again: a random/TPE trial's value is the mean over its
    seeds, all trained in the trial, so its seeds cannot change (a grid's (point, seed) can)."""
    return SWEEP_MATCH if sampler == "grid" else (*SWEEP_MATCH, "seeds")


def ablation_attrs(
    plan: AblationPlan, configs: Sequence[Config], model_code: dict[str, str] | None = None
) -> dict[str, Any]:
    """The study user attrs an ablation stores (and --dry-run compares with a stored study's)."""
    return {
        "kind": "ablation",
        "baseline": baseline_identity(plan.baseline),
        "configs": [c.config_id for c in configs],
        "seeds": plan.seeds,
        "grid": plan.grid,
        "tricklab_version": __version__,
        **({"model_code": model_code} if model_code else {}),
    }


def sweep_attrs(plan: SweepPlan, model_code: dict[str, str] | None = None) -> dict[str, Any]:
    """The study user attrs a sweep stores (and --dry-run compares with a stored study's)."""
    return {
        "kind": "sweep",
        "baseline": baseline_identity(plan.base),
        "space": plan.space.to_dict(),
        "sampler": plan.sampler,
        "seeds": plan.seeds,
        "tricklab_version": __version__,
        **({"model_code": model_code} if model_code else {}),
    }


def ablation_study(plan: AblationPlan, configs: Sequence[Config]) -> str:
    """The ablation's study name: the plan's, else one derived from the baseline and configs."""
    return plan.study or default_study_name("ablate", plan.baseline, [c.config_id for c in configs])


def sweep_study(plan: SweepPlan) -> str:
    """The sweep's study name: the plan's, else one derived from the baseline and the space."""
    grid_trials = plan.trials if plan.sampler == "grid" else None
    space = plan.space.to_dict()
    return plan.study or default_study_name("sweep", plan.base, space, plan.sampler, grid_trials)


# ---------------------------------------------------------------- ablations
MAX_PLANNED_RUNS = 1_000_000  # an ablation's configurations × seeds; 10 million took 1.8 GB


def plan_ablation(
    plan: AblationPlan, *, check_runs: bool = True
) -> tuple[list[Config], list[Unit], dict[str, str]]:
    """The ablation's configurations, its (configuration, seed) units and its own models' code
    hashes. With `check_runs`, input that every run would fail on (missing data, an unknown
    model, ...) raises TrickLabError first: the setup of the baseline and of one configuration per
    varied value is built (each distinct data source, model and loader once), so a large grid
    costs about what a small one does; without it, no model is built and no hash is made."""
    expect_type(plan, AblationPlan, "ablate's plan")
    plan.__post_init__()  # again: a field set by hand past `frozen` is refused as when made
    check_out_dir(plan.out_dir, "the ablation")
    planned = ablation_plan(plan.baseline, plan.vary, plan.grid)
    check_seeds(plan.seeds)  # its own bound first, then the runs'
    if (runs := len(planned.configs) * plan.seeds) > MAX_PLANNED_RUNS:  # listed, they fill memory
        raise TrickLabError(
            f"{len(planned.configs):,} configurations × {plan.seeds:,} seeds are {runs:,} runs, "
            f"more than {MAX_PLANNED_RUNS:,} (weeks at a second a run): vary fewer values or "
            "give fewer --seeds"
        )
    units = plan_units(planned.configs, plan.seeds)
    if check_runs:
        check_environment()  # as the command line checks it: one line, not every run failed
        from tricklab.training.setup import check_setup  # torch

        return planned.configs, units, check_setup(planned.checked)
    return planned.configs, units, {}


def check_hooks(
    command: str,
    train_fn: TrainFn | None,
    on_run_end: Callable[[RunEvent], None] | None,
    liveness: Liveness | None,
    stop: StopRequest | None,
) -> None:
    """TypeError, before any storage is opened, for a hook of the wrong kind."""
    expect_callback(train_fn, f"{command}'s train_fn", ("on_epoch", "stop"))
    expect_callback(on_run_end, f"{command}'s on_run_end")
    expect_type(liveness, (Liveness, type(None)), f"{command}'s liveness")
    expect_type(stop, (StopRequest, type(None)), f"{command}'s stop")


def ablate(
    plan: AblationPlan,
    *,
    train_fn: TrainFn | None = None,
    on_run_end: Callable[[RunEvent], None] | None = None,
    liveness: Liveness | None = None,
    stop: StopRequest | None = None,
) -> ExperimentSummary:
    """Run an ablation (plan.AblationPlan): the baseline plus one change at a time (or the
    grid), seeds 0..seeds-1, e.g. `ablate(AblationPlan(recipe, {"optim.lr": [0.1, 0.4]}))`.

    `train_fn` replaces `tricklab.train` (tests); `on_run_end` hears of each finished run.
    Each run's folder goes to `<study folder>/runs/<config>/seed-<k>` (rundirs.py).
    Calling it again resumes; several processes calling it on one storage share the work.
    Ctrl-C or SIGTERM (or `stop`, see tricklab.core.stopping) marks the running trial interrupted and
    raises Interrupted.
    """
    check_hooks("ablate", train_fn, on_run_end, liveness, stop)
    configs, units, model_code = plan_ablation(plan, check_runs=train_fn is None)
    name = ablation_study(plan, configs)
    url = storage_url(plan.storage, experiment_dir(name, plan.out_dir))
    store = open_storage(url)
    with claim_lock(url):  # two experiments started at once on one --study: one is refused
        opened = open_study(
            store,
            name,
            where=shown_url(url),
            attrs=ablation_attrs(plan, configs, model_code),
            must_match=ABLATION_MATCH,
            sampler=optuna.samplers.RandomSampler(),
        )
    keys = [u.key for u in units]
    done_before = done_count(final_statuses(checked_trials(opened)), keys)
    provenance = start_record()
    with stop_request(stop) as stop, _sharing_data(train_fn):
        worker = Worker(
            opened,
            store,
            url,
            plan.baseline,
            train_fn or _default_train(),
            stop,
            liveness or Liveness(),
            on_run_end=on_run_end,
            study_folder=study_dir(name, plan.storage, plan.out_dir).absolute(),
        )
        space, params = ablation_params(plan.baseline, configs, plan.vary)  # optuna-dashboard
        ran = run_units(
            worker, units, params=lambda unit: params[unit.config.config_id], space=space
        )
    counts = status_counts(final_statuses(checked_trials(opened)), keys)
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


def check_sweep(plan: SweepPlan, *, check_runs: bool = True) -> dict[str, str]:
    """TrickLabError for sweep arguments no sweep can run with, and for a key or value of the
    space that is not valid. With `check_runs`, also for input every run with some value of the
    space would fail on (missing data, an unknown model, ...); returns its own models' code
    hashes then (training.setup.check_setup), else {}."""
    expect_type(plan, SweepPlan, "sweep's plan")
    plan.__post_init__()  # again: a field set by hand past `frozen` is refused as when made
    sampler, trials, sampler_seed = plan.sampler, plan.trials, plan.sampler_seed
    check_out_dir(plan.out_dir, "the sweep")
    if sampler not in SAMPLERS:
        raise TrickLabError(f"unknown sampler '{sampler}'; choose one of {', '.join(SAMPLERS)}")
    _pruner(plan.pruner)  # an unknown one is refused before any storage is opened
    if trials is not None and trials < 1:
        raise TrickLabError(f"--trials {trials} must be at least 1")
    if sampler != "grid" and trials is None:
        raise TrickLabError(f"--sampler {sampler} needs --trials N")
    check_seeds(plan.seeds)
    if sampler_seed is not None and not 0 <= sampler_seed < 2**32:
        raise TrickLabError(f"--sampler-seed {sampler_seed} must lie in [0, 2**32 - 1]")
    recipes = plan.space.check(plan.base)  # every choice and both ends of every range
    if sampler == "grid":
        plan.space.grid_size()  # too large a grid is refused before any setup is built
    if check_runs:
        check_environment()  # as the command line checks it: one line, not every run failed
        from tricklab.training.setup import check_setup

        return check_setup([plan.base, *recipes])
    return {}


def sweep(
    plan: SweepPlan,
    *,
    train_fn: TrainFn | None = None,
    on_run_end: Callable[[RunEvent], None] | None = None,
    liveness: Liveness | None = None,
    stop: StopRequest | None = None,
) -> ExperimentSummary:
    """Sweep recipe keys over a space (plan.SweepPlan) with an Optuna sampler; objective:
    validation accuracy, e.g. `sweep(SweepPlan(recipe, load_space("space.yaml"), trials=20))`.

    grid: each (point, seed) pair is one trial and runs exactly once, as an ablation unit does.
    random, tpe: each sampled configuration is one trial, trained with seeds 0..seeds-1, whose
    value is their mean accuracy. Trials the median pruner (Optuna's MedianPruner) stops are
    stored `pruned`. The other arguments are `ablate`'s.
    """
    check_hooks("sweep", train_fn, on_run_end, liveness, stop)
    model_code = check_sweep(plan, check_runs=train_fn is None)
    space, sampler, seeds, trials = plan.space, plan.sampler, plan.seeds, plan.trials
    name = sweep_study(plan)
    url = storage_url(plan.storage, experiment_dir(name, plan.out_dir))
    store = open_storage(url)
    kind = optuna.samplers.TPESampler if sampler == "tpe" else optuna.samplers.RandomSampler
    seeded = plan.sampler_seed is not None  # its n-th draw the same, resumed or not
    optuna_sampler = SeededDraws(kind, plan.sampler_seed) if seeded else kind()
    with claim_lock(url):  # as ablate's
        opened = open_study(
            store,
            name,
            where=shown_url(url),
            attrs=sweep_attrs(plan, model_code),
            must_match=sweep_match(sampler),
            sampler=optuna_sampler,
            pruner=_pruner(plan.pruner),
        )
    provenance = start_record()
    with stop_request(stop) as stop, _sharing_data(train_fn):
        worker = Worker(
            opened,
            store,
            url,
            plan.base,
            train_fn or _default_train(),
            stop,
            liveness or Liveness(),
            prune=plan.pruner != "none",
            on_run_end=on_run_end,
            study_folder=study_dir(name, plan.storage, plan.out_dir).absolute(),
        )
        if sampler == "grid":
            points = grid_configs(space, trials, plan.sampler_seed)
            values = {config.config_id: v for config, v in points}
            units = plan_units([config for config, _ in points], seeds)
            keys = [u.key for u in units]
            done_before = done_count(final_statuses(checked_trials(opened)), keys)
            ran = run_units(
                worker,
                units,
                params=lambda unit: values[unit.config.config_id],
                space=space.grid_space(),
            )
            counts = status_counts(final_statuses(checked_trials(opened)), keys)
            return _summary(opened, "sweep", url, len(units), ran, done_before, counts, provenance)
        done_before = done_count(final_statuses(checked_trials(opened)))
        ran = run_sampled(worker, space, trials, seeds)
    counts = status_counts(final_statuses(checked_trials(opened)))
    summary = _summary(opened, "sweep", url, trials, ran, done_before, counts, provenance)
    return replace(summary, unit="sampled trials")  # each with its seeds, a drawn twin reused
