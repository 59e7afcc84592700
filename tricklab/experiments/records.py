"""The runs of a stored study as records, one per (configuration, seed): the try that stands.

Each (configuration, seed) counts once: one run again after a failure counts by its final
outcome, and a sampled point drawn twice reuses its runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import optuna
import yaml

from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import shown
from tricklab.core.status import COMPLETE_STATUSES, DONE_STATUSES, Status
from tricklab.experiments.claims import is_stale
from tricklab.experiments.liveness import DEFAULT_GRACE_SECONDS
from tricklab.experiments.plan import MAX_GRID_POINTS, MAX_SEEDS
from tricklab.experiments.recordfields import (
    PROVENANCE,
    fields_problem,
    is_whole,
    quoted,
    record_problem,
)
from tricklab.experiments.storage import seed_runs, stored_runs, trial_status
from tricklab.recipe.yamlio import read_yaml


def headline_accuracy(record: dict[str, Any]) -> float | None:
    """The run's accuracy: with TTA when it used TTA."""
    value = record.get("val_acc_tta")
    if value is None:
        value = record.get("val_acc")
    return None if value is None else float(value)


def collect_runs(study: optuna.Study) -> list[dict[str, Any]]:
    """One record per (configuration, seed): its final outcome, the best try (complete, else
    another done outcome, else the latest try).

    Records hold config_id, overrides, seed, status, error, accuracy, train_seconds,
    time_to_target_seconds, target_accuracy, trial (number) and what the run stored.
    """
    best: dict[tuple[str, int], dict[str, Any]] = {}
    check_study_attrs(study.study_name, study.user_attrs)
    seeds = study.user_attrs.get("seeds")
    for trial in study.get_trials(deepcopy=False):
        _check_trial(study.study_name, trial)
        status = trial_status(trial)
        config_id = trial.user_attrs.get("config_id")
        if status == Status.SKIPPED or config_id is None:
            continue  # no run, or killed before its parameters were drawn: nothing to attribute
        if status == Status.RUNNING and is_stale(trial, DEFAULT_GRACE_SECONDS):
            status = (
                Status.INTERRUPTED
            )  # its worker is gone; the next worker to start will say so too
        finished = "runs" in trial.user_attrs  # told: every run it made is stored, with its outcome
        stored = stored_runs(trial)
        unfinished = {
            "status": status,
            "error": trial.user_attrs.get("error")
            or ("the worker stopped without reporting" if status == Status.INTERRUPTED else None),
        }
        if trial.user_attrs.get("unit", "").startswith("sample-") or "unit" not in trial.user_attrs:
            # A sampled trial stores each complete seed as it ends: those stand. The seed it was
            # on when it stopped (or is on now) takes the trial's status.
            runs = [r for r in stored if "reused_from_trial" not in r]  # the full one is elsewhere
            if not finished:
                upcoming = max((int(r["seed"]) for r in stored), default=-1) + 1
                if seeds is None or upcoming < seeds:
                    runs.append({"seed": upcoming, **unfinished})
        elif status in (Status.RUNNING, Status.WAITING, Status.INTERRUPTED) or not stored:
            # A unit's trial that never reached tell() (its worker died after storing the run) is
            # interrupted whatever its stored run says; the unit runs again and counts once.
            runs = [{"seed": trial.user_attrs.get("seed", 0), **unfinished}]
        else:
            runs = stored
        for run in runs:
            record = {
                "config_id": config_id,
                "overrides": trial.user_attrs.get("overrides", []),
                **run,
                "trial": trial.number,
            }
            key = (config_id, int(record.get("seed", 0)))
            previous = best.get(key)
            if (
                previous is None
                or _rank(record) > _rank(previous)
                or _rank(record) == _rank(previous) == 0
            ):
                best[key] = record
    return sorted(best.values(), key=lambda r: (r["trial"], r.get("seed", 0)))


def _rank(record: dict[str, Any]) -> int:
    """Which try of a (configuration, seed) stands: a complete run, else another done outcome
    (diverged, pruned), else the latest try."""
    return (
        2
        if record["status"] in COMPLETE_STATUSES
        else 1
        if record["status"] in DONE_STATUSES
        else 0
    )


NUMBER = (int, float)
NONE = type(None)
# What tricklab stores on a trial, and in each run record there, that the tables read: a storage
# changed by another program (or by hand) must give one line, not a traceback three calls down.
# Each run record then as a result.json is checked (recordfields.record_problem: ranges, the
# hardware, the provenance, the epochs), and the study's attrs by check_study_attrs.
TRIAL_ATTRS = {
    "config_id": (str,),
    "unit": (str,),
    "seed": (int,),
    "error": (str, NONE),
    "overrides": (list,),
    "runs": (list,),
    "status": (str, NONE),
    "run_dir": (str,),  # the run's folder, named before it starts (workers.py)
}
RUN_FIELDS = {
    "seed": (int,),
    "status": (str,),
    "error": (str, NONE),
    "accuracy": (*NUMBER, NONE),
    "val_acc": (*NUMBER, NONE),
    "val_acc_tta": (*NUMBER, NONE),
    "train_seconds": (*NUMBER, NONE),
    "time_to_target_seconds": (*NUMBER, NONE),
    "target_accuracy": (*NUMBER, NONE),
    "reused_from_trial": (int,),
    "run_dir": (str, NONE),  # null in a reused run whose first try kept no folder
}


def checked_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The study's trials; TrickLabError naming the first whose attributes tricklab reads have
    the wrong type (`collect_runs` checks each as it reads; an ablation or sweep resuming a study,
    before it counts what is done: a `unit` stored as a list was a TypeError there)."""
    trials = study.get_trials(deepcopy=False)
    for trial in trials:
        _check_trial(study.study_name, trial)
    return trials


def _check_trial(study: str, trial: optuna.trial.FrozenTrial) -> None:
    """TrickLabError naming the trial when an attribute tricklab reads has the wrong type."""
    attrs = trial.user_attrs

    def wrong(where: str, value: Any, types: tuple[type, ...]) -> TrickLabError:
        want = " or ".join("null" if t is NONE else t.__name__ for t in types)
        return TrickLabError(
            f"study {shown(study)}: trial {trial.number} holds {shown(where)} of type "
            f"{type(value).__name__}, not {want}; was the storage written by another program?"
        )

    for key, types in TRIAL_ATTRS.items():
        value = attrs.get(key)
        if key in attrs and (not isinstance(value, types) or isinstance(value, bool)):
            raise wrong(key, value, types)
    runs = [("runs", r, None) for r in attrs.get("runs", [])]
    runs += [(f"run-{seed}", run, seed) for seed, run in seed_runs(trial).items()]
    for where, run, seed in runs:
        if not isinstance(run, dict):
            raise wrong(where, run, (dict,))
        if "seed" not in run or (seed is not None and run["seed"] != seed):
            raise TrickLabError(
                f"study {shown(study)}: trial {trial.number} holds a run in {shown(where)} whose "
                f"seed is {quoted(run.get('seed'))}; was the storage written by another program?"
            )
        for key, types in RUN_FIELDS.items():
            value = run.get(key)
            if key in run and (not isinstance(value, types) or isinstance(value, bool)):
                raise wrong(f"{where}: {key}", value, types)
        if run.get("status") in COMPLETE_STATUSES and run.get("train_seconds") is None:
            raise wrong(f"{where}: train_seconds of a complete run", None, NUMBER)
        problem = record_problem(run, needs_status=False)  # ranges, hardware, provenance, epochs
        if problem:
            raise TrickLabError(
                f"study {shown(study)}: trial {trial.number} holds a run in {shown(where)} that "
                f"tricklab cannot read: {shown(problem)}; was the storage written by another "
                "program?"
            )
    listed = [r.get("seed") for r in attrs.get("runs", [])]
    if len(set(map(str, listed))) < len(listed):  # one seed's run twice: one would be dropped
        raise TrickLabError(
            f"study {shown(study)}: trial {trial.number} holds two runs of one seed; was the "
            "storage written by another program?"
        )
    overrides = attrs.get("overrides", [])
    if not all(isinstance(o, str) for o in overrides):
        raise wrong("overrides", overrides, (list,))


STUDY_KINDS = ("ablation", "sweep")  # runner.ablation_attrs and sweep_attrs write them


def study_kind(study: str, attrs: dict[str, Any]) -> str:
    """The study's kind, ablation or sweep; TrickLabError for a study without one: every study
    tricklab makes says which it is, so it is another program's."""
    kind = attrs.get("kind")
    if kind is None:  # no attr at all: another program's, or a command stopped as it made it
        stopped = ", or the one that made it was stopped before it wrote its plan (run it again"
        raise TrickLabError(
            f"study {shown(study)} was not made by tricklab ablate or sweep (it has no 'kind' "
            f"attr){stopped + ' to resume)' if not attrs else ''}; tricklab reads only the "
            "studies those commands make"
        )
    check_study_attrs(study, attrs)
    return kind


def check_study_attrs(study: str, attrs: dict[str, Any]) -> None:
    """TrickLabError naming the study and the attr when a study attr the tables read is of the
    wrong type or out of range: `kind` (ablation or sweep; `study_kind` refuses a study without
    it), `seeds` (a whole number from 1 to MAX_SEEDS, as
    `--seeds` takes it), `configs` (a list of at most MAX_GRID_POINTS + 1 configuration names),
    `provenance` (the latest call's record, recordfields.PROVENANCE)."""
    kind, seeds, configs = attrs.get("kind"), attrs.get("seeds"), attrs.get("configs")
    problem = None
    if kind is not None and kind not in STUDY_KINDS:
        problem = f"'kind' is {quoted(kind)}, not one of {', '.join(STUDY_KINDS)}"
    elif seeds is not None and not (is_whole(seeds) and 1 <= seeds <= MAX_SEEDS):
        problem = f"'seeds' is {quoted(seeds)}, not a whole number from 1 to {MAX_SEEDS:,}"
    elif configs is not None and not (
        isinstance(configs, list)
        and len(configs) <= MAX_GRID_POINTS + 1
        and all(isinstance(c, str) for c in configs)
    ):
        problem = (
            f"'configs' is {quoted(configs)}, not a list of at most {MAX_GRID_POINTS + 1:,} "
            "configuration names"
        )
    else:
        problem = fields_problem(attrs.get("provenance"), PROVENANCE, "provenance")
    if problem:
        raise TrickLabError(
            f"study {shown(study)} holds an attr tricklab cannot read: {shown(problem)}; was the "
            "storage written by another program?"
        )


def resolve_reference(reference: str, config_ids: Sequence[str]) -> str:
    """The configuration `reference` names: its id, or the same overrides spelled otherwise, as
    the tables show them (`optim.lr=1e+30` for `optim.lr=1.0e+30`, a number to the 4 figures
    shown: `optim.lr=0.143` for `optim.lr=0.14297724879798399`). TrickLabError for none or
    several."""
    if reference in config_ids:
        return reference
    wanted = _overrides(reference)
    hits = [c for c in config_ids if wanted is not None and _alike(_overrides(c), wanted)]
    if len(hits) == 1:
        return hits[0]
    which = f"{len(hits)} configurations" if hits else "no configuration"
    raise TrickLabError(f"{which} '{reference}' in this study; have: {', '.join(config_ids)}")


_KEY_START = re.compile(r" (?=[a-z_]+\.[a-z_]+=)")  # where the next override of an id begins


def _overrides(config_id: str) -> dict[str, Any] | None:
    """{key: value read as YAML} of an id's space-joined `key=value` overrides; None if unread."""
    values = {}
    for part in _KEY_START.split(config_id.strip()):
        key, sep, text = part.partition("=")
        try:
            values[key] = read_yaml(text) if sep else None  # YAML 1.2, as a recipe reads it
        except (yaml.YAMLError, TrickLabError):
            return None
        if not sep:
            return None
    return values


def _alike(have: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
    if have is None or have.keys() != wanted.keys():
        return False
    return all(_same(have[k], wanted[k]) for k in wanted)


def _same(have: Any, wanted: Any) -> bool:
    """Equal, or a float and what its 4 shown figures read as."""
    if (
        isinstance(have, float)
        and isinstance(wanted, (int, float))
        and not isinstance(wanted, bool)
    ):
        return have == wanted or float(f"{have:.4g}") == wanted
    if isinstance(have, list) and isinstance(wanted, list) and len(have) == len(wanted):
        return all(_same(h, w) for h, w in zip(have, wanted))
    return have == wanted
