"""Experiments: ablations and sweeps over many seeds, stored in Optuna, resumable, with statistics.

- `plan.py`: which configurations and seeds an ablation runs (one change at a time, or the grid);
- `space.py`: sweep search spaces (SPACE.yaml) as Optuna distributions;
- `storage.py`: Optuna storages and studies, opened and read (a trial's status and runs);
- `runner.py`: `ablate` and `sweep` from Python, and the summary an experiment leaves;
- `reading.py`: `results` and `study_runs`: a stored study's table and runs, read only;
- `workers.py`: the worker loops that train the units; `claims.py`: the claim protocol, how
  workers claim units (so each (configuration, seed) runs exactly once across processes and
  reruns), beat and fail stale trials (`liveness.py`: the intervals); `rundirs.py`: where each
  run's folder goes;
- `stats.py`: the results table (means, Student t intervals, Welch tests, speedups);
- `speedrun.py`: `tricklab speedrun`'s runs and summary (SpeedrunPlan).
The commands are tricklab/cli/'s (ablate_sweep.py, results.py, speedrun.py).

Names are imported on first use, so the CLI can register its commands without loading Optuna.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AblationPlan": "plan",
    "SweepPlan": "plan",
    "Config": "plan",
    "Unit": "plan",
    "budget_overrides": "plan",
    "parse_vary": "plan",
    "ablation_plan": "plan",
    "plan_units": "plan",
    "SearchSpace": "space",
    "load_space": "space",
    "parse_space": "space",
    "ConfigStats": "stats",
    "ExperimentSummary": "runner",
    "Liveness": "liveness",
    "RunEvent": "workers",
    "ablate": "runner",
    "results": "reading",
    "study_results": "reading",
    "study_runs": "reading",
    "sweep": "runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tricklab.experiments' has no attribute '{name}'")
    return getattr(importlib.import_module(f"tricklab.experiments.{_EXPORTS[name]}"), name)
