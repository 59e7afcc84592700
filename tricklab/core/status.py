"""What a run's status says about training, and the one definition of "fraction >= target" that
`tricklab speedrun` (speedrun.py) and `tricklab results` (stats.py) both use.

No torch, numpy or Optuna here: `tricklab speedrun` imports it without loading the experiment code.
"""

from __future__ import annotations

from collections.abc import Iterable

# The run trained to its end (its budget, an early stop, or the target reached) and has a final
# accuracy.
COMPLETE_STATUSES = ("complete", "stopped-early", "reached-target")
# The recipe's own outcome: completed, or the loss went to NaN/inf (the recipe failed to train).
# A crash (failed, oom), a run stopped from outside (interrupted, pruned) or one not finished
# (running, waiting) is no outcome of the recipe and is left out.
TRAINED_STATUSES = (*COMPLETE_STATUSES, "diverged")


def target_counts(runs: Iterable[tuple[str, float | None]], target: float) -> tuple[int, int]:
    """(runs at or above `target`, runs counted) of (status, accuracy) pairs.

    Counted: the completed runs with an accuracy (complete, stopped-early, reached-target) and the
    diverged ones, which count as below the target. Not counted: crashes (failed, oom: a bug or
    too little memory, not a training outcome), runs stopped from outside (interrupted, pruned) and
    runs not finished (running, waiting). A run reaches the target when its final accuracy (with
    test-time augmentation where the recipe has it) is >= `target`."""
    reached = counted = 0
    for status, accuracy in runs:
        if status == "diverged":
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
