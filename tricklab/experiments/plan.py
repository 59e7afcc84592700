"""Experiment plans: which configurations to run, each with which seeds.

An ablation starts from a baseline recipe and varies recipe keys: one key at a time by default
(seed report 0's method: the baseline plus every single change from it), or with `grid=True` the
full product of the varied values plus the baseline, so every configuration has a reference.

A configuration is named by the overrides that make it differ from the baseline, with values as the
recipe resolves them (`optim.lr=0.2 aug.flip=random`), or `baseline`. Two spellings of one change
(`0.20` and `0.2`) are one configuration, and a value equal to the baseline's is the baseline.
The unit of work is a (configuration, seed) pair; seeds are 0..N-1 (`run.seed`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tricklab.core.errors import TrickLabError, expect_list_of, expect_number, expect_type, plain
from tricklab.core.paths import folder_arg
from tricklab.recipe.load import takes_text
from tricklab.recipe.schema import SECTIONS, Recipe, all_keys
from tricklab.recipe.yamlio import read_value

BASELINE = "baseline"
SAMPLERS, PRUNERS = ("grid", "random", "tpe"), ("none", "median")
VALUE_TYPES = (str, int, float, list, tuple, type(None))  # a varied value, as YAML can write it
MAX_GRID_POINTS = 100_000  # an ablation --grid or a grid sweep
MAX_SEEDS = 10_000  # more is a typo: at a second a run, 10,000 seeds are hours per configuration
SEEDS_ERROR = "run.seed is set by --seeds (seeds 0..N-1), it cannot be varied"


@dataclass(frozen=True)
class Config:
    """One configuration: the baseline plus `overrides` ("key=value", values as resolved)."""

    config_id: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Unit:
    """One run to do: a configuration with one seed. `key` names it in the study's storage."""

    config: Config
    seed: int

    @property
    def key(self) -> str:
        return f"{self.config.config_id} seed={self.seed}"


def format_value(value: Any) -> str:
    """`value` written so that the recipe's YAML reading gives it back (`1e-05` -> `1.0e-05`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):  # numpy's too, written as Python writes them
        return str(int(value))
    if isinstance(value, numbers.Real):
        if math.isnan(value := float(value)):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text  # YAML's 1.0e-05
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    text = str(value)
    return text if _yaml_scalar(text) == text else json.dumps(text)


def _yaml_scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def split_values(text: str) -> list[str]:
    """Split "V1,V2,..." at commas that are not inside brackets or quotes."""
    values, depth, quote, current = [], 0, "", []
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            values.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    values.append("".join(current).strip())
    return values


def parse_vary(specs: Iterable[str]) -> dict[str, list[str]]:
    """`["optim.lr=0.1,0.2", "aug.flip=none,random"]` -> `{"optim.lr": ["0.1", "0.2"], ...}`."""
    expect_list_of(specs, str, "parse_vary's specs")
    vary: dict[str, list[str]] = {}
    for spec in specs:
        key, sep, text = spec.partition("=")
        key = key.strip()
        values = split_values(text) if sep else []
        if not key or not values or any(v == "" for v in values):
            raise TrickLabError(
                f"--vary '{spec}' is not of the form KEY=V1,V2,... (e.g. optim.lr=0.1,0.2)"
            )
        if key in vary:
            raise TrickLabError(f"--vary names {key} twice; give all its values in one --vary")
        vary[key] = values
    return vary


NO_EARLY_STOP = ["run.early_stopping_patience=0", "run.stop_at_target=false"]


def budget_overrides(
    epochs: float | None = None, seconds: float | None = None, target: float | None = None
) -> list[str]:
    """Recipe overrides that give every configuration the same fixed budget: NO_EARLY_STOP, then
    `budget_flags`.

    Early stopping and stop-at-target are switched off, so no run is cut short by them (the seed
    reports lost runs that way); the caller's own overrides may turn them back on (put them
    between the two parts: the budget flags win over a baseline's own run.epochs)."""
    return [*NO_EARLY_STOP, *budget_flags(epochs, seconds, target)]


def budget_flags(
    epochs: float | None = None, seconds: float | None = None, target: float | None = None
) -> list[str]:
    """The overrides of --budget-epochs (run.epochs), --budget-seconds (stop after that many train
    seconds, or at run.epochs, whichever comes first) and --target (a fraction, or a percentage
    above 1: each run's time-to-target is recorded, the run not stopped)."""
    for value, what in ((epochs, "epochs"), (seconds, "seconds"), (target, "target")):
        if value is not None:
            expect_number(value, f"the budget's {what}")
    out = []
    if epochs is not None and seconds is not None:
        raise TrickLabError("give --budget-epochs or --budget-seconds, not both")
    if epochs is not None:
        if not 0 < epochs < math.inf:  # nan too
            raise TrickLabError(f"--budget-epochs {epochs} must be a positive number")
        out.append(f"run.epochs={format_value(float(epochs))}")
    if seconds is not None:
        if not 0 < seconds < math.inf:
            raise TrickLabError(f"--budget-seconds {seconds} must be a positive number")
        out.append(f"run.time_budget_seconds={format_value(float(seconds))}")
    if target is not None:
        out.append(f"run.target_accuracy={format_value(normalize_target(target))}")
    return out


def normalize_target(target: float) -> float:
    """A target accuracy as a fraction, a Python float (numpy's too): 0.94 stays, 94 is 0.94."""
    fraction = float(min(target, 1000)) / 100 if target > 1 else float(target)  # 10**400 too
    if not 0 < fraction <= 1:
        raise TrickLabError(
            f"target accuracy {target!r:.40} must be a fraction in (0, 1] or a percentage"
        )
    return fraction


@dataclass(frozen=True)
class ConfigPlan:
    """The configurations of an ablation, and the recipes its setup check builds (`checked`): the
    baseline and, for each value of each varied key, one configuration that has it."""

    configs: list[Config]
    checked: list[Any]


@dataclass(frozen=True)
class AblationPlan:
    """An ablation: the baseline plus one change at a time from `vary` (with `grid`, every
    combination), each with seeds 0..seeds-1; `tricklab.experiments.ablate` runs it.

    `baseline` is a Recipe run as given (apply `budget_overrides` for the fixed budget the CLI
    uses); `vary` maps recipe keys to values (Python values or strings as typed on the command
    line). Where it is stored: study `study` (default: a name derived from the baseline and the
    plan) in `storage` (default: an SQLite file in `out_dir`, default runs/experiments/<study>;
    storage.py lists the others)."""

    baseline: Any
    vary: Mapping[str, Sequence[Any]]
    seeds: int = 3
    grid: bool = False
    study: str | None = None
    storage: str | None = None
    out_dir: str | None = None

    def __post_init__(self) -> None:
        expect_type(self.baseline, Recipe, "AblationPlan's baseline")
        # checked as a file's recipe is, and its own copy: a field set by hand is refused here
        object.__setattr__(self, "baseline", self.baseline.checked())
        expect_type(self.vary, Mapping, "AblationPlan's vary")
        object.__setattr__(self, "vary", plain(dict(self.vary)))  # numpy's values as Python's
        for key, values in self.vary.items():  # a lone string would be read letter by letter
            expect_type(key, str, "each key of AblationPlan's vary")
            expect_list_of(values, VALUE_TYPES, f"AblationPlan's vary[{key!r}]")  # not b"x"
        object.__setattr__(self, "vary", {k: tuple(v) for k, v in self.vary.items()})  # its own
        expect_type(self.grid, bool, "AblationPlan's grid")
        _check_where(self, "AblationPlan")


@dataclass(frozen=True)
class SweepPlan:
    """A sweep of recipe keys over `space` (space.py) from the recipe `base`, with an Optuna
    sampler; `tricklab.experiments.sweep` runs it.

    grid: every point of the (finite) space, or a seeded subset of `trials` of them, each with
    seeds 0..seeds-1; random, tpe: `trials` sampled configurations, each with every seed. pruner
    "median" stops trials whose per-epoch accuracy trails the median of earlier ones at that epoch.
    `sampler_seed` seeds the sampler (leave it None with several workers, or they draw alike).
    `study`, `storage` and `out_dir` say where it is stored, as `AblationPlan`'s do."""

    base: Any
    space: Any  # a space.SearchSpace
    trials: int | None = None
    sampler: str = "tpe"
    pruner: str = "none"
    seeds: int = 1
    sampler_seed: int | None = None
    study: str | None = None
    storage: str | None = None
    out_dir: str | None = None

    def __post_init__(self) -> None:
        expect_type(self.base, Recipe, "SweepPlan's base")
        object.__setattr__(self, "base", self.base.checked())
        if not callable(getattr(self.space, "grid_size", None)):  # space.py imports this module
            raise TypeError(
                "SweepPlan's space takes a SearchSpace (space.load_space or parse_space), got "
                f"{type(self.space).__name__} {self.space!r:.60}"
            )
        for name in ("trials", "sampler_seed"):
            _expect_int(self, name, f"SweepPlan's {name}", none=True)
        expect_type(self.sampler, str, "SweepPlan's sampler")
        expect_type(self.pruner, str, "SweepPlan's pruner")
        _check_where(self, "SweepPlan")


def _expect_int(plan: Any, name: str, what: str, none: bool = False) -> None:
    """TypeError for what is no whole number (a bool is not one: True would be 1 seed); numpy's
    ints become Python ints (a study's attributes are JSON)."""
    if getattr(plan, name) is not None or not none:
        expect_number(getattr(plan, name), what, whole=True)
        object.__setattr__(plan, name, int(getattr(plan, name)))


def _check_where(plan: Any, what: str) -> None:
    """The seeds, study name, storage and folder of a plan; a path-like storage becomes text."""
    _expect_int(plan, "seeds", f"{what}'s seeds")
    expect_type(plan.study, (str, type(None)), f"{what}'s study")
    if plan.study is not None:
        from tricklab.experiments.rundirs import check_study_name  # optuna: not for a speedrun

        check_study_name(plan.study, f"{what}'s study")
    expect_type(plan.storage, (str, os.PathLike, type(None)), f"{what}'s storage")
    out = folder_arg(plan.out_dir, f"{what}'s out_dir")  # absolute: a chdir changes nothing
    object.__setattr__(plan, "out_dir", out and str(out))
    object.__setattr__(plan, "storage", plan.storage and os.fspath(plan.storage))


def ablation_plan(
    baseline: Any, vary: Mapping[str, Sequence[Any]], grid: bool = False
) -> ConfigPlan:
    """The configurations of an ablation: baseline first, then one change at a time (or the grid).

    `baseline` is a Recipe; `vary` maps recipe keys to values (Python values or strings as typed on
    the command line). Unknown keys, bad values, a grid of more than MAX_GRID_POINTS points (told
    from the number of values, before any is read) and a grid point that breaks one of the recipe's
    cross-field rules raise TrickLabError before anything runs. Each value is read once, however
    many points hold it.
    """
    if not vary:
        raise TrickLabError("nothing to vary: give at least one --vary KEY=V1,V2,...")
    if "run.seed" in vary:
        raise TrickLabError(SEEDS_ERROR)
    for key, values in vary.items():
        if not values:
            raise TrickLabError(f"--vary {key} has no values")
    if grid:
        _check_grid_size(vary)
    axes = {key: _axis(baseline, key, values) for key, values in vary.items()}
    if grid:
        return _grid_plan(baseline, axes)
    configs, checked = [Config(BASELINE, ())], [baseline]
    for key, values in axes.items():
        for value in values:
            if value != baseline.get(key):
                text = f"{key}={format_value(value)}"
                recipe = with_values(baseline, [(key, value)])
                try:
                    check_rules(recipe)
                except TrickLabError as exc:
                    raise TrickLabError(f"--vary {text}: {exc}") from None
                configs.append(Config(text, (text,)))
                checked.append(recipe)
    return ConfigPlan(configs, checked)


def _check_grid_size(vary: Mapping[str, Sequence[Any]]) -> None:
    """TrickLabError for a grid of more than MAX_GRID_POINTS points, counted from the values as
    given (values spelt alike counted once), never by listing the points."""
    sizes = [len({_spelling(v) for v in values}) for values in vary.values()]
    if (total := math.prod(sizes)) > MAX_GRID_POINTS:
        raise TrickLabError(
            f"--grid has {total:,} points ({' × '.join(f'{n:,}' for n in sizes)}), more than "
            f"{MAX_GRID_POINTS:,}; vary fewer values, or sample the space with "
            "tricklab sweep --sampler random|tpe"
        )


def _spelling(value: Any) -> str:
    return value.strip() if isinstance(value, str) else json.dumps(value, default=str)


def _axis(baseline: Any, key: str, values: Sequence[Any]) -> list[Any]:
    """The distinct values of one varied key as the recipe reads them, first spelling first."""
    unique: dict[str, Any] = {}  # lists (model.widths) included
    for value in values:
        typed = _read_value(baseline, key, value)
        if isinstance(typed, float):
            typed += 0.0  # -0.0 is 0.0: one configuration, not two that train alike
        unique.setdefault(json.dumps(typed), typed)
    return list(unique.values())


def _read_value(baseline: Any, key: str, value: Any) -> Any:
    """`value` as the field `key` holds it: read and checked against that field alone (the rules
    tying fields together are checked on each configuration), which costs one field's reading,
    not the whole recipe's. Where that fails, the baseline overridden with it says why."""
    text = value if isinstance(value, str) else format_value(value)
    section, _, name = key.partition(".")
    try:
        if key not in all_keys():
            raise LookupError(key)
        field = read_value(text, takes_text(SECTIONS[section], name)) if text.strip() else None
        return Recipe.from_dict({section: {name: field}}, source="override").get(key)
    except Exception:  # the override below raises the error as the recipe words it
        return baseline.override([f"{key}={text}"]).get(key)


def _grid_plan(baseline: Any, axes: Mapping[str, list[Any]]) -> ConfigPlan:
    """Every point of the product (and the baseline), each checked against the recipe's
    cross-field rules; the setup check takes, for each value, the point whose other keys take
    their first values."""
    keys = list(axes)
    columns = [
        [(value, f"{key}={format_value(value)}" if value != baseline.get(key) else None)
         for value in axes[key]]
        for key in keys
    ]  # fmt: skip
    configs = {BASELINE: Config(BASELINE, ())}
    for combo in itertools.product(*columns):
        overrides = tuple(text for _, text in combo if text is not None)
        config_id = " ".join(overrides) or BASELINE
        if config_id not in configs:
            changes = [(key, value) for key, (value, text) in zip(keys, combo) if text is not None]
            try:
                check_rules(with_values(baseline, changes))
            except TrickLabError as exc:
                raise TrickLabError(f"--grid point '{config_id}': {exc}") from None
            configs[config_id] = Config(config_id, overrides)
    firsts = [column[0][0] for column in columns]
    checked = {BASELINE: baseline}
    for i, column in enumerate(columns):
        for value, _ in column:
            point = [*firsts[:i], value, *firsts[i + 1 :]]
            recipe = with_values(baseline, list(zip(keys, point)))
            checked.setdefault(json.dumps(point, default=str), recipe)
    return ConfigPlan(list(configs.values()), list(checked.values()))


def with_values(recipe: Any, changes: Sequence[tuple[str, Any]]) -> Any:
    """`recipe` with `changes` [(key, value)], values already read by the recipe (typed): a new
    Recipe, without reading every field again as `Recipe.override` does."""
    sections: dict[str, dict[str, Any]] = {}
    for key, value in changes:
        section, name = key.split(".")
        sections.setdefault(section, {})[name] = value
    replaced = {s: dataclasses.replace(getattr(recipe, s), **f) for s, f in sections.items()}
    return dataclasses.replace(recipe, **replaced)


def check_rules(recipe: Any) -> None:
    """The recipe's cross-field rules: each section's `check`, as `Recipe.from_dict` runs them."""
    for section in dataclasses.fields(recipe):
        check = getattr(getattr(recipe, section.name), "check", None)
        if check is not None:
            check(recipe)


def plan_units(configs: Sequence[Config], seeds: int) -> list[Unit]:
    """Every (configuration, seed) pair, seed-major: all configs get seed 0 before any gets seed 1,
    so a study stopped half-way still has comparable seeds for every configuration."""
    check_seeds(seeds)
    return [Unit(config, seed) for seed in range(seeds) for config in configs]


def check_seeds(seeds: int) -> None:
    """TrickLabError unless 1 <= seeds <= MAX_SEEDS."""
    expect_number(seeds, "seeds", whole=True)
    if seeds < 1:
        raise TrickLabError(f"--seeds {seeds} must be at least 1")
    if seeds > MAX_SEEDS:
        raise TrickLabError(f"--seeds {seeds} is too many; at most {MAX_SEEDS} seeds per config")


def unit_recipe(baseline: Any, unit: Unit) -> Any:
    """The fully resolved recipe one unit trains with."""
    return baseline.override([*unit.config.overrides, f"run.seed={unit.seed}"])


def fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON-able parts (names default studies)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def baseline_identity(baseline: Any) -> dict:
    """The baseline recipe as a dict without its seed and where its metrics are logged: what
    makes two experiments comparable."""
    data = baseline.to_dict()
    for key in ("seed", "loggers", "wandb_project"):
        data.get("run", {}).pop(key, None)
    return data


def default_study_name(kind: str, baseline: Any, *extra: Any) -> str:
    """`<kind>-<model>-<hash of the baseline and the plan>`: the same command, the same study."""
    model = str(baseline.get("model.name")).replace("/", "-")
    return f"{kind}-{model}-{fingerprint(baseline_identity(baseline), *extra)}"
