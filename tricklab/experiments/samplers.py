"""A seeded sweep's draws, the same however often it was stopped and resumed.

Optuna's RandomSampler(seed) and TPESampler(seed) draw from one random stream per process: a
sweep resumed after a stop started that stream again, so its first new draw repeated the first
configuration (already trained) and one that the whole sweep would have drawn never came (a
seeded random sweep of 3 trials, stopped in its first, ended with 2 configurations, saying 3).
Here the n-th fresh draw of the study (a trial that is not a retry enqueued with its parameters)
comes from a sampler seeded with (seed, n): resumed, the sweep draws what it would have drawn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState


def draw_seed(seed: int, draw: int) -> int:
    """The seed of the `draw`-th fresh draw of a sweep seeded `seed` (32 bits, as numpy takes)."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{draw}".encode()).digest()[:4], "big")


class SeededDraws(optuna.samplers.BaseSampler):
    """`make(seed=...)` (RandomSampler, TPESampler) made again for each trial, seeded by its
    draw's number: the trials before it in the study that were not enqueued retries."""

    def __init__(self, make: Callable[..., optuna.samplers.BaseSampler], seed: int) -> None:
        self._make, self._seed = make, seed
        self._inner = make(seed=seed)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        earlier = study.get_trials(deepcopy=False)
        draw = sum(
            t.number < trial.number and "fixed_params" not in t.system_attrs for t in earlier
        )
        self._inner = self._make(seed=draw_seed(self._seed, draw))
        self._inner.before_trial(study, trial)

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self._inner.sample_relative(study, trial, search_space)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Any,
    ) -> None:
        self._inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._inner.reseed_rng()
