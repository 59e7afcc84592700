"""The status words of a run and of an experiment's trial, their groups, and the one definition of
"fraction >= target" that `tricklab speedrun` (speedrun.py) and `tricklab results` (stats.py) use.

A status is stored as its plain string (result.json, an Optuna trial's `status` attr): `Status` is
a `str`, so a stored "complete" equals `Status.COMPLETE` and files written by any version read
the same. No torch, numpy or Optuna here: the loop, the loggers, the experiments and the report
all import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum


class Status(str, Enum):
    """How a run or a trial ended (or that it has not yet)."""

    COMPLETE = "complete"  # trained its whole budget
    STOPPED_EARLY = "stopped-early"  # early stopping ended it
    REACHED_TARGET = "reached-target"  # stopped at run.target_accuracy
    DIVERGED = "diverged"  # the loss went to NaN/inf: the recipe failed to train
    OOM = "oom"  # out of memory
    FAILED = "failed"  # a crash: a bug, a broken file
    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM, or its worker died
    PRUNED = "pruned"  # a sweep's pruner stopped it
    SKIPPED = "skipped"  # a trial a worker claimed and gave up: its unit was taken (no run)
    RUNNING = "running"
    WAITING = "waiting"

    def __str__(self) -> str:  # f-strings and str() show the stored word, as StrEnum does
        return self.value


# Trained to its end (its budget, an early stop, the target reached), with a final accuracy.
COMPLETE_STATUSES = frozenset({Status.COMPLETE, Status.STOPPED_EARLY, Status.REACHED_TARGET})
# The recipe's own outcome: completed, or the loss went to NaN/inf. A crash (failed, oom), a run
# stopped from outside (interrupted, pruned) or one not finished is no outcome of the recipe. A
# sampled point's seed that ended so is taken by a later draw of the point, not trained again.
TRAINED_STATUSES = COMPLETE_STATUSES | {Status.DIVERGED}
# A unit's final outcome: rerunning would only repeat it (a seeded divergence diverges again).
DONE_STATUSES = TRAINED_STATUSES | {Status.PRUNED}
# Outcomes a rerun of the command tries again: they say little about the configuration.
RETRY_STATUSES = frozenset({Status.FAILED, Status.OOM, Status.INTERRUPTED})
# A run that ended without a model to count: `train` and `speedrun` exit 1 after one.
FAILED_STATUSES = frozenset({Status.DIVERGED, Status.OOM, Status.FAILED})
# The statuses an Optuna trial in state FAIL may carry.
FAIL_STATE_STATUSES = FAILED_STATUSES | {Status.INTERRUPTED, Status.SKIPPED}


def target_counts(runs: Iterable[tuple[str, float | None]], target: float) -> tuple[int, int]:
    """(runs at or above `target`, runs counted) of (status, accuracy) pairs.

    Counted: the trained runs (TRAINED_STATUSES): the completed ones with an accuracy, and the
    diverged ones, which count as below the target. Not counted: crashes (failed, oom: a bug or
    too little memory, not a training outcome), runs stopped from outside (interrupted, pruned) and
    runs not finished (running, waiting). A run reaches the target when its final accuracy (with
    test-time augmentation where the recipe has it) is >= `target`."""
    reached = counted = 0
    for status, accuracy in runs:
        if status == Status.DIVERGED:
            counted += 1
        elif status in COMPLETE_STATUSES and accuracy is not None:
            counted += 1
            reached += accuracy >= target
    return reached, counted


def fraction_at_target(
    runs: Iterable[tuple[str, float | None]], target: float | None
) -> float | None:
    """The fraction of counted runs at or above `target` (see `target_counts`); None without a
    target or without a counted run."""
    if target is None:
        return None
    reached, counted = target_counts(runs, target)
    return reached / counted if counted else None
