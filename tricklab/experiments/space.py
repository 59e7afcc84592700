"""Sweep search spaces: SPACE.yaml maps recipe keys to choices or ranges.

    optim.name: [sgd, adam]                       # choices (categorical)
    optim.lr: {low: 1.0e-3, high: 1, log: true}   # float range, log scale
    loader.batch_size: {low: 128, high: 1024, step: 128}   # int range (low, high and step ints)
    schedule.name: {choices: [constant, cosine]}  # choices, long form

Each entry becomes an Optuna distribution, so Optuna's samplers draw from it. The grid sampler
needs a finite space: choices, or ranges with a `step` (they are discretised); a continuous range
in a grid is an error that says what to add.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from tricklab.errors import TrickLabError
from tricklab.experiments.plan import format_value

RANGE_KEYS = {"low", "high", "log", "step"}


@dataclass(frozen=True)
class SearchSpace:
    """Recipe key -> Optuna distribution, in the order SPACE.yaml gives them."""

    distributions: dict[str, BaseDistribution]

    def to_dict(self) -> dict[str, Any]:
        return {
            k: optuna.distributions.distribution_to_json(d) for k, d in self.distributions.items()
        }

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Draw every key from the trial's sampler (or take its fixed params): key -> value."""
        return {k: _suggest(trial, k, d) for k, d in self.distributions.items()}

    def grid(self) -> list[dict[str, Any]]:
        """Every point of a finite space, in product order; TrickLabError for a continuous range."""
        axes = [_grid_values(key, dist) for key, dist in self.distributions.items()]
        return [dict(zip(self.distributions, combo)) for combo in itertools.product(*axes)]

    def check(self, base: Any) -> list[Any]:
        """TrickLabError before any run if a key is unknown or a value is not valid for it:
        every choice, and both ends of every range, are applied to the recipe `base`. Returns
        the recipes so made (for `api.check_setup`)."""
        recipes = []
        for key, dist in self.distributions.items():
            ends = dist.choices if isinstance(dist, CategoricalDistribution) else (dist.low, dist.high)
            for value in ends:
                recipes.append(base.override(overrides_for({key: value})))
        return recipes

    def grid_space(self) -> SearchSpace:
        """The same space with every axis as the categorical of its grid values (for grid trials)."""
        return SearchSpace(
            {k: CategoricalDistribution(_grid_values(k, d)) for k, d in self.distributions.items()}
        )


def _suggest(trial: optuna.Trial, key: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(key, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(key, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.suggest_float(key, dist.low, dist.high, step=dist.step, log=dist.log)


def overrides_for(params: Mapping[str, Any]) -> list[str]:
    """Sampled params as recipe overrides."""
    return [f"{k}={format_value(v)}" for k, v in params.items()]


def load_space(path: str | Path) -> SearchSpace:
    """Read SPACE.yaml (see the module doc); TrickLabError says which entry is wrong and why."""
    path = Path(path)
    if not path.is_file():
        raise TrickLabError(f"search space file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise TrickLabError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
    return parse_space(data, source=str(path))


def parse_space(data: Any, source: str = "space") -> SearchSpace:
    """A search space from a mapping of recipe key -> list of choices or {low, high, log, step}."""
    if not isinstance(data, dict) or not data:
        raise TrickLabError(f"{source}: expected a mapping of recipe keys to choices or ranges")
    return SearchSpace({str(k): _distribution(str(k), v, source) for k, v in data.items()})


def _number(key: str, name: str, value: Any, source: str) -> float | int:
    if isinstance(value, str):  # PyYAML reads 1e-3 (no dot) as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TrickLabError(f"{source}: {key}.{name}={value!r} is not a number")
    return value


def _distribution(key: str, spec: Any, source: str) -> BaseDistribution:
    if isinstance(spec, dict) and set(spec) == {"choices"}:
        spec = spec["choices"]
    if isinstance(spec, list):
        if not spec:
            raise TrickLabError(f"{source}: {key} has an empty list of choices")
        bad = [c for c in spec if not (c is None or isinstance(c, (bool, int, float, str)))]
        if bad:
            raise TrickLabError(f"{source}: {key} choices must be scalars, not {bad[0]!r}")
        return CategoricalDistribution(list(dict.fromkeys(spec)))
    if not isinstance(spec, dict) or not {"low", "high"} <= set(spec) or set(spec) - RANGE_KEYS:
        raise TrickLabError(
            f"{source}: {key} must be a list of choices or a range {{low, high[, log][, step]}}"
        )
    low = _number(key, "low", spec["low"], source)
    high = _number(key, "high", spec["high"], source)
    step = _number(key, "step", spec["step"], source) if spec.get("step") is not None else None
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise TrickLabError(f"{source}: {key}.log must be true or false")
    integer = all(isinstance(v, int) for v in (low, high) + ((step,) if step is not None else ()))
    try:
        if integer:
            return IntDistribution(low, high, log=log, step=step or 1)
        return FloatDistribution(float(low), float(high), log=log, step=step)
    except ValueError as exc:
        raise TrickLabError(f"{source}: {key}: {exc}") from None


def _grid_values(key: str, dist: BaseDistribution) -> list[Any]:
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        return list(range(dist.low, dist.high + 1, dist.step))
    if isinstance(dist, FloatDistribution) and dist.step is not None:
        count = round((dist.high - dist.low) / dist.step)
        return [round(dist.low + i * dist.step, 12) for i in range(count + 1)]
    raise TrickLabError(
        f"the grid sampler needs a finite space, but {key} is a continuous range; "
        "give it a list of choices or a step, or use --sampler random|tpe"
    )
