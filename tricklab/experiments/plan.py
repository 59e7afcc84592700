"""Experiment plans: which configurations to run, each with which seeds.

An ablation starts from a baseline recipe and varies recipe keys. By default it changes one key at
a time (seed report 0's method: the baseline plus every single change from it); with `grid=True`
it runs the full product of the varied values, plus the baseline when the product lacks it, so
every configuration has a reference to be compared with.

A configuration is named by the overrides that make it differ from the baseline, with values as the
recipe resolves them (`optim.lr=0.2 aug.flip=random`), or `baseline`. Two spellings of one change
(`0.20` and `0.2`) are one configuration, and a value equal to the baseline's is the baseline.
The unit of work is a (configuration, seed) pair; seeds are 0..N-1 (`run.seed`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tricklab.errors import TrickLabError

BASELINE = "baseline"
SAMPLERS = ("grid", "random", "tpe")
PRUNERS = ("none", "median")
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
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        # PyYAML reads 1e-05 as a string; it wants a dot in the mantissa.
        return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text
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


def budget_overrides(
    epochs: float | None = None, seconds: float | None = None, target: float | None = None
) -> list[str]:
    """Recipe overrides that give every configuration the same fixed budget.

    Early stopping and stop-at-target are switched off, so no run is cut short by them (the seed
    reports lost runs that way); the caller's own overrides come after these and may turn them back
    on. `epochs` sets run.epochs; `seconds` stops training after that many train seconds (or at
    run.epochs, whichever comes first); `target` (a fraction, or a percentage above 1) records each
    run's time-to-target without stopping it.
    """
    out = ["run.early_stopping_patience=0", "run.stop_at_target=false"]
    if epochs is not None and seconds is not None:
        raise TrickLabError("give --budget-epochs or --budget-seconds, not both")
    if epochs is not None:
        if epochs <= 0:
            raise TrickLabError(f"--budget-epochs {epochs} must be positive")
        out.append(f"run.epochs={format_value(float(epochs))}")
    if seconds is not None:
        if seconds <= 0:
            raise TrickLabError(f"--budget-seconds {seconds} must be positive")
        out.append(f"run.time_budget_seconds={format_value(float(seconds))}")
    if target is not None:
        out.append(f"run.target_accuracy={format_value(normalize_target(target))}")
    return out


def normalize_target(target: float) -> float:
    """A target accuracy as a fraction: 0.94 stays, 94 becomes 0.94."""
    fraction = target / 100 if target > 1 else target
    if not 0 < fraction <= 1:
        raise TrickLabError(
            f"target accuracy {target} must be a fraction in (0, 1] or a percentage"
        )
    return fraction


def _resolve(baseline: Any, key: str, value: Any) -> Any:
    """The value `key` takes when the baseline is overridden with `value` (as the recipe reads it)."""
    text = value if isinstance(value, str) else format_value(value)
    return baseline.override([f"{key}={text}"]).get(key)


def _config(baseline: Any, changes: Sequence[tuple[str, Any]]) -> Config:
    overrides = tuple(f"{k}={format_value(v)}" for k, v in changes if v != baseline.get(k))
    if overrides:
        baseline.override(overrides)  # combined overrides may break a cross-field rule
    return Config(" ".join(overrides) if overrides else BASELINE, overrides)


def plan_configs(
    baseline: Any, vary: Mapping[str, Sequence[Any]], grid: bool = False
) -> list[Config]:
    """The configurations of an ablation: baseline first, then one change at a time (or the grid).

    `baseline` is a Recipe; `vary` maps recipe keys to values (Python values or strings as typed on
    the command line). Unknown keys or bad values raise TrickLabError before anything runs.
    """
    if not vary:
        raise TrickLabError("nothing to vary: give at least one --vary KEY=V1,V2,...")
    if "run.seed" in vary:
        raise TrickLabError(SEEDS_ERROR)
    resolved = {}
    for key, values in vary.items():
        if not values:
            raise TrickLabError(f"--vary {key} has no values")
        unique: dict[str, Any] = {}  # first of equal values; lists (model.widths) included
        for value in values:
            typed = _resolve(baseline, key, value)
            unique.setdefault(json.dumps(typed), typed)
        resolved[key] = list(unique.values())
    configs = [_config(baseline, [])]
    if grid:
        keys = list(resolved)
        for combo in itertools.product(*(resolved[k] for k in keys)):
            configs.append(_config(baseline, list(zip(keys, combo))))
    else:
        for key, values in resolved.items():
            configs.extend(_config(baseline, [(key, v)]) for v in values)
    return list({c.config_id: c for c in configs}.values())


def plan_units(configs: Sequence[Config], seeds: int) -> list[Unit]:
    """Every (configuration, seed) pair, seed-major: all configs get seed 0 before any gets seed 1,
    so a study stopped half-way still has comparable seeds for every configuration."""
    check_seeds(seeds)
    return [Unit(config, seed) for seed in range(seeds) for config in configs]


def check_seeds(seeds: int) -> None:
    """TrickLabError unless 1 <= seeds <= MAX_SEEDS."""
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
    """The baseline recipe as a dict without its seed: what makes two experiments comparable."""
    data = baseline.to_dict()
    data.get("run", {}).pop("seed", None)
    return data


def default_study_name(kind: str, baseline: Any, *extra: Any) -> str:
    """`<kind>-<model>-<hash of the baseline and the plan>`: the same command, the same study."""
    model = str(baseline.get("model.name")).replace("/", "-")
    return f"{kind}-{model}-{fingerprint(baseline_identity(baseline), *extra)}"
