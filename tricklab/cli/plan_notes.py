"""What `tricklab ablate` says on stderr about --vary values that make no configuration of
their own, so that a value dropped from the plan is never dropped in silence."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tricklab.cli.common import echo, err_console
from tricklab.experiments.plan import BASELINE, ablation_plan, format_value


def vary_notes(baseline: Any, vary: Mapping[str, Sequence[Any]], grid: bool) -> list[str]:
    """Why --vary values add no configuration: one equal to the baseline's (one change at a time:
    the baseline runs already; with --grid it is a point's value, so not said) and one listed
    twice, in any spelling (run once). Each value is compared as its one-value plan reads it."""
    notes = []
    for key, values in vary.items():
        given: dict[str, list[str]] = {}  # config id (or baseline) -> the values that make it
        for value in values:
            config = ablation_plan(baseline, {key: [value]}).configs[-1]
            given.setdefault(config.config_id, []).append(str(value).strip())
        for config_id, spelt in given.items():
            if config_id == BASELINE and not grid:
                notes.append(
                    f"--vary {key}={spelt[0]} is the baseline's value: no configuration of its own"
                )
            elif len(spelt) > 1:
                value = config_id.partition("=")[2] or format_value(baseline.get(key))
                times = "twice" if len(spelt) == 2 else f"{len(spelt)} times"
                spellings = f" ({', '.join(spelt)})" if len(set(spelt)) > 1 else ""
                notes.append(f"--vary {key} lists {value} {times}{spellings}: run once")
    return notes


def plan_notes(plan: Any, configs: Sequence[Any]) -> list[str]:
    """`vary_notes` of an AblationPlan as `note: ...` lines, and that the plan is the baseline
    alone where its `configs` are."""
    notes = [f"note: {note}" for note in vary_notes(plan.baseline, plan.vary, plan.grid)]
    if len(configs) == 1:
        notes.append(
            "note: no --vary value differs from the baseline's: the plan is the baseline alone; "
            "vary other values to compare"
        )
    return notes


def say_notes(notes: Sequence[str]) -> None:
    for note in notes:
        echo(err_console, note)
