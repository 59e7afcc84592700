"""What optuna-dashboard (or any Optuna tool) shows of a tricklab study.

The dashboard lists a trial's params and user attrs, and cuts long attrs short. So besides the run
records the runner reads back (`runs`, `run-<seed>`: see claims.py and stats.py), each trial holds:
- params: the recipe keys the experiment varies, each with an Optuna distribution, so that the
  dashboard's importance and slice views work: a sweep's space, and for an ablation each varied
  key as a categorical over the values the ablation gives it (the baseline's among them; a list
  value, such as model.widths, as its YAML text);
- short scalar user attrs (`trial_attrs`): `accuracy`, `train_seconds` and `record_seconds`, means
  over the trial's complete runs (one run per ablation trial, every seed of a sampled sweep
  trial), and `complete_runs`, beside `status` and `error`;
and the study names its objective `accuracy` (storage.open_study).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import yaml
from optuna.distributions import CategoricalDistribution

from tricklab.core.status import COMPLETE_STATUSES
from tricklab.experiments.plan import Config, format_value
from tricklab.experiments.space import SearchSpace

# Run-record fields a trial shows as the mean over its complete runs.
MEAN_ATTRS = ("accuracy", "train_seconds", "record_seconds")


def trial_attrs(records: Iterable[dict]) -> dict[str, Any]:
    """A trial's short scalar attrs from its run records: means over the complete runs (None when
    there is none or no run has the field) and how many runs that is."""
    done = [r for r in records if r.get("status") in COMPLETE_STATUSES]
    attrs: dict[str, Any] = {}
    for name in MEAN_ATTRS:
        values = [float(r[name]) for r in done if r.get(name) is not None]
        attrs[name] = statistics.fmean(values) if values else None
    attrs["complete_runs"] = len(done)
    return attrs


def param_value(value: Any) -> Any:
    """A recipe value as an Optuna categorical choice: scalars as they are, lists as YAML text."""
    return format_value(value) if isinstance(value, (list, tuple, dict)) else value


def ablation_params(
    baseline: Any, configs: Sequence[Config], keys: Iterable[str]
) -> tuple[SearchSpace, dict[str, dict[str, Any]]]:
    """The params of an ablation's trials: (a space of one categorical per varied key, over its
    values in the order the configurations give them; config_id -> {key: value})."""
    keys = list(keys)
    by_config: dict[str, dict[str, Any]] = {}
    for config in configs:
        values = {key: baseline.get(key) for key in keys}
        for text in config.overrides:  # "key=value", the value written by format_value
            key, _, value = text.partition("=")
            values[key] = yaml.safe_load(value)
        by_config[config.config_id] = {key: param_value(v) for key, v in values.items()}
    space = SearchSpace(
        {
            key: CategoricalDistribution(list(dict.fromkeys(p[key] for p in by_config.values())))
            for key in keys
        }
    )
    return space, by_config
