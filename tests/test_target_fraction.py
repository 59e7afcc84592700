"""Fraction >= target has one definition (experiments/outcomes.py): `tricklab speedrun` and
`tricklab results` give the same number for the same runs. A diverged run is a miss; a crash
(failed, oom) is no training outcome and is left out of both counts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tricklab.core.status import fraction_at_target, target_counts
from tricklab.experiments.speedrun import SpeedrunRun, summarize
from tricklab.experiments.stats import config_stats
from tricklab.recipe.schema import Recipe

# (status, final accuracy): three complete runs, two at or above 0.94, then a divergence, a crash
# and an out-of-memory run.
RUNS = [
    ("complete", 0.945),
    ("complete", 0.931),
    ("reached-target", 0.940),
    ("diverged", None),
    ("failed", None),
    ("oom", None),
]
TARGET = 0.94


def speedrun_fraction(runs: list[tuple[str, float | None]], target: float) -> float | None:
    records = [
        SpeedrunRun(
            seed=seed, status=status, accuracy=accuracy, val_acc=accuracy, val_acc_tta=None,
            train_seconds=1.0, whiten_seconds=0.0, final_eval_seconds=0.1, record_seconds=1.1,
            compile_seconds=0.0, time_to_target_seconds=None, images_per_second=None,
            peak_memory_bytes=None, achieved_tflops=None, mfu=None,
        )
        for seed, (status, accuracy) in enumerate(runs)
    ]  # fmt: skip
    result = SimpleNamespace(peak_memory={}, hardware={}, forward_macs=None, params=None)
    summary = summarize(
        records, [result] * len(runs), Recipe(), "mine", target, None, None, warmup=None
    )
    return summary.fraction_at_target


def results_row(runs: list[tuple[str, float | None]], target: float):
    records = [
        {
            "config_id": "baseline",
            "overrides": [],
            "seed": seed,
            "status": status,
            "accuracy": accuracy,
            "train_seconds": 1.0,
            "target_accuracy": target,
        }
        for seed, (status, accuracy) in enumerate(runs)
    ]
    return config_stats(records)[0]


def test_a_crash_is_left_out_and_a_divergence_is_a_miss():
    assert target_counts(RUNS, TARGET) == (2, 4)
    assert fraction_at_target(RUNS, TARGET) == pytest.approx(2 / 4)


def test_speedrun_and_results_give_the_same_fraction_for_the_same_runs():
    row = results_row(RUNS, TARGET)
    assert (row.reached_target, row.target_runs) == (2, 4)
    assert row.fraction_reached_target == pytest.approx(0.5)
    assert speedrun_fraction(RUNS, TARGET) == row.fraction_reached_target


def test_only_crashed_runs_give_no_fraction_in_either():
    crashed = [("failed", None), ("oom", None)]
    assert speedrun_fraction(crashed, TARGET) is None
    assert results_row(crashed, TARGET).fraction_reached_target is None


def test_interrupted_pruned_and_pending_runs_are_not_counted():
    runs = [("complete", 0.95), ("interrupted", 0.96), ("pruned", 0.5), ("running", None)]
    assert target_counts(runs, TARGET) == (1, 1)


def test_no_target_gives_no_fraction():
    assert fraction_at_target(RUNS, None) is None
