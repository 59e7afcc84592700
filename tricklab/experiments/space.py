"""Sweep search spaces: SPACE.yaml maps recipe keys to choices or ranges.

    optim.name: [sgd, adam]                       # choices (categorical)
    optim.lr: {low: 1.0e-3, high: 1, log: true}   # float range, log scale
    loader.batch_size: {low: 128, high: 1024, step: 128}   # int range (an int field)
    schedule.name: {choices: [constant, cosine]}  # choices, long form
    model.widths: [[32, 128, 128], [64, 256, 256]]   # a list field's choices are lists

The file is read as recipes are (true/false are the only booleans: `off` is the word "off"). Each
entry becomes an Optuna distribution, so Optuna's samplers draw from it; a range is an int or a
float range as the recipe field is. The grid sampler needs a finite space of at most
MAX_GRID_POINTS points: choices, or ranges with a `step` (they are discretised); a continuous range
in a grid is an error that says what to add. `run.seed` is no axis: `--seeds` sets it.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from tricklab.core.errors import TrickLabError, plain
from tricklab.experiments.plan import MAX_GRID_POINTS, SEEDS_ERROR, format_value
from tricklab.recipe.schema import field_table
from tricklab.recipe.yamlio import number_in_text, read_yaml_file

RANGE_KEYS = {"low", "high", "log", "step"}
SETUP_CHECKS_PER_AXIS = (
    16  # setups built per axis by the check before a sweep (see SearchSpace.check)
)


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
        axes = self._grid_axes()
        return [dict(zip(self.distributions, combo)) for combo in itertools.product(*axes)]

    def grid_size(self) -> int:
        """How many points the grid has, from the axis sizes (nothing listed); TrickLabError for a
        continuous range or more than MAX_GRID_POINTS points."""
        sizes = [_grid_size(key, dist) for key, dist in self.distributions.items()]
        total = math.prod(sizes)
        if total > MAX_GRID_POINTS:
            raise TrickLabError(
                f"the grid has {total:,} points ({' × '.join(f'{n:,}' for n in sizes)}), more "
                f"than {MAX_GRID_POINTS:,}; give coarser steps or fewer choices, or use "
                "--sampler random|tpe"
            )
        return total

    def _grid_axes(self) -> list[list[Any]]:
        """Each axis's grid values, once their product is known to be small enough to list."""
        self.grid_size()
        return [_grid_values(dist) for dist in self.distributions.values()]

    def check(self, base: Any) -> list[Any]:
        """TrickLabError before any run if a key is unknown or a value is not valid for it:
        every choice, and both ends of every range, are applied to the recipe `base`. Returns
        recipes for `check_setup` to build: of an axis with more than SETUP_CHECKS_PER_AXIS
        choices, that many spread over it, the first and last included (building a run's setup
        costs about 0.1 s; a 10,000-choice axis would take minutes). A choice past the sample
        passed the recipe's own checks; a setup error it meets is recorded by its run."""
        recipes = []
        for key, dist in self.distributions.items():
            ends = (
                dist.choices if isinstance(dist, CategoricalDistribution) else (dist.low, dist.high)
            )
            made = [base.override(overrides_for({key: value}), "space") for value in ends]
            if isinstance(dist, CategoricalDistribution):
                _check_distinct(key, ends, [recipe.get(key) for recipe in made])
            recipes += spread(made, SETUP_CHECKS_PER_AXIS)
        return recipes

    def grid_space(self) -> SearchSpace:
        """The same space with every axis as the categorical of its grid values (for grid trials)."""
        axes = self._grid_axes()
        return SearchSpace(
            {k: CategoricalDistribution(v) for k, v in zip(self.distributions, axes)}
        )


def _check_distinct(key: str, choices: Sequence[Any], held: list[Any]) -> None:
    """TrickLabError for two choices the recipe holds as one value (0.1 and "0.1"): one
    configuration trained twice, as two."""
    first: dict[str, Any] = {}
    for choice, value in zip(choices, held):
        if repr(value) in first:
            raise TrickLabError(
                f"space: {key} choices {first[repr(value)]!r} and {choice!r} are the same value "
                f"({value!r}); give each once"
            )
        first[repr(value)] = choice


def describe(dist: BaseDistribution, shown: int = 6) -> str:
    """A distribution in one short line: a long categorical as its count, first and last choices."""
    if isinstance(dist, CategoricalDistribution) and len(dist.choices) > shown:
        head = ", ".join(map(repr, dist.choices[: shown - 1]))
        return f"one of {len(dist.choices):,} choices: {head}, ..., {dist.choices[-1]!r}"
    return repr(dist)


def spread(items: list[Any], count: int) -> list[Any]:
    """At most `count` of `items`, evenly spaced, the first and the last included."""
    if len(items) <= count:
        return items
    step = (len(items) - 1) / (count - 1)
    return [items[round(i * step)] for i in range(count)]


def _suggest(trial: optuna.Trial, key: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(key, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(key, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.suggest_float(key, dist.low, dist.high, step=dist.step, log=dist.log)


def overrides_for(params: Mapping[str, Any]) -> list[str]:
    """Sampled params as recipe overrides (a list field's choice is already its YAML text)."""
    return [
        f"{k}={v if isinstance(v, str) and _is_list_field(k) else format_value(v)}"
        for k, v in params.items()
    ]


def load_space(path: str | Path) -> SearchSpace:
    """Read SPACE.yaml (see the module doc); TrickLabError says which entry is wrong and why."""
    return parse_space(read_yaml_file(path, "search space file"), source=str(path))


def parse_space(data: Any, source: str = "space") -> SearchSpace:
    """A search space from a mapping of recipe key -> list of choices or {low, high, log, step}."""
    data = plain(data)  # numpy's numbers as Python's
    if not isinstance(data, dict) or not data:
        raise TrickLabError(f"{source}: expected a mapping of recipe keys to choices or ranges")
    if "run.seed" in data:
        raise TrickLabError(f"{source}: {SEEDS_ERROR}")
    return SearchSpace({str(k): _distribution(str(k), v, source) for k, v in data.items()})


def _number(key: str, name: str, value: Any, source: str) -> float | int:
    if isinstance(value, str) and (number := number_in_text(value)) is not None:
        value = number  # a quoted number: "1e-3"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TrickLabError(f"{source}: {key}.{name}={value!r} is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise TrickLabError(f"{source}: {key}.{name}={value!r} is not a finite number")
    return value + 0.0 if isinstance(value, float) else value  # -0.0 is 0.0


def _field_type(key: str) -> str | None:
    """The recipe field's type without `| None` (`int`, `float`, ...); None for an unknown key
    (`SearchSpace.check` names it)."""
    return next((row["type"].split(" |")[0] for row in field_table() if row["key"] == key), None)


def _is_list_field(key: str) -> bool:
    return (_field_type(key) or "").startswith("list[")


def _is_scalar_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    )


def _distribution(key: str, spec: Any, source: str) -> BaseDistribution:
    if isinstance(spec, dict) and set(spec) == {"choices"}:
        spec = spec["choices"]
    if isinstance(spec, list):
        if not spec:
            raise TrickLabError(f"{source}: {key} has an empty list of choices")
        if _is_list_field(key):  # each choice a list, held by Optuna as its YAML text
            bad = [c for c in spec if c is not None and not _is_scalar_list(c)]
            if bad:
                raise TrickLabError(
                    f"{source}: {key} is a list field; each choice must be a list of numbers "
                    f"(e.g. [[64, 256, 256], [32, 128, 128]]), not {bad[0]!r}"
                )
            spec = [c if c is None else format_value(c) for c in spec]
        bad = [c for c in spec if not (c is None or isinstance(c, (bool, int, float, str)))]
        if bad:
            raise TrickLabError(f"{source}: {key} choices must be scalars, not {bad[0]!r}")
        spec = [c + 0.0 if isinstance(c, float) else c for c in spec]  # -0.0 is 0.0
        return CategoricalDistribution(list(dict.fromkeys(spec)))
    if not isinstance(spec, dict) or not {"low", "high"} <= set(spec) or set(spec) - RANGE_KEYS:
        raise TrickLabError(
            f"{source}: {key} must be a list of choices or a range {{low, high[, log][, step]}}"
        )
    low = _number(key, "low", spec["low"], source)
    high = _number(key, "high", spec["high"], source)
    step = _number(key, "step", spec["step"], source) if spec.get("step") is not None else None
    if step is not None and step <= 0:
        raise TrickLabError(f"{source}: {key}.step={step} must be > 0")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise TrickLabError(f"{source}: {key}.log must be true or false")
    numbers = (low, high) + ((step,) if step is not None else ())
    all_ints = all(isinstance(v, int) for v in numbers)
    kind = _field_type(key)
    if kind == "int" and not all_ints:
        raise TrickLabError(
            f"{source}: {key} is an integer field; its low, high and step must be integers"
        )
    if kind not in (None, "int", "float"):
        raise TrickLabError(
            f"{source}: {key} is a {kind} field, not a number; give it a list of choices"
        )
    try:
        with warnings.catch_warnings():  # Optuna's about a step that does not divide the range
            warnings.simplefilter("ignore")
            if kind == "int" or (kind is None and all_ints):
                dist = IntDistribution(low, high, log=log, step=1 if step is None else step)
            else:
                dist = FloatDistribution(
                    float(low), float(high), log=log, step=None if step is None else float(step)
                )
        if step is not None and dist.high != type(dist.high)(high):  # lowered to a whole step
            raise TrickLabError(
                f"{source}: {key}: high={high:g} is not low={low:g} plus whole steps of {step:g}, "
                f"so the range would stop at {dist.high:g}; give high={dist.high:g} or another step"
            )
        return dist
    except ValueError as exc:
        raise TrickLabError(f"{source}: {key}: {exc}") from None
    except ArithmeticError:  # a huge int, or a step Optuna's Decimal arithmetic cannot divide by
        raise TrickLabError(
            f"{source}: {key}: low, high or step is too large or too fine"
        ) from None


def _grid_size(key: str, dist: BaseDistribution) -> int | float:
    """How many grid values an axis has (math.inf when too many to count); TrickLabError for a
    continuous range."""
    if isinstance(dist, CategoricalDistribution):
        return len(dist.choices)
    if isinstance(dist, IntDistribution):
        return (dist.high - dist.low) // dist.step + 1
    if isinstance(dist, FloatDistribution) and dist.step is not None:
        span = (dist.high - dist.low) / dist.step
        return round(span) + 1 if math.isfinite(span) else math.inf
    raise TrickLabError(
        f"the grid sampler needs a finite space, but {key} is a continuous range; "
        "give it a list of choices or a step, or use --sampler random|tpe"
    )


def _grid_values(dist: BaseDistribution) -> list[Any]:
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        return list(range(dist.low, dist.high + 1, dist.step))
    count = round((dist.high - dist.low) / dist.step)
    return [round(dist.low + i * dist.step, 12) for i in range(count + 1)]
