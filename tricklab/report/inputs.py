"""The shape of the run and speedrun files a report reads from folders (result.json, summary.json,
metrics.jsonl), checked before anything uses them: a file of another tool, or one edited by hand,
is one TrickLabError line naming the file and the field, not a traceback deep in the statistics.
What each field must hold is experiments/recordfields.py's, the check of a study's stored runs too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import parse_json, read_bounded_text, shown
from tricklab.core.status import COMPLETE_STATUSES
from tricklab.experiments.recordfields import (
    MAX_MAGNITUDE,
    MAX_SECONDS,
    epochs_problem,
    is_number,
    record_problem,
)
from tricklab.experiments.speedrun import MAX_RUNS

__all__ = [
    "MAX_MAGNITUDE",
    "MAX_SECONDS",
    "check_run_result",
    "check_speedrun_summary",
    "is_number",
    "read_bounded_text",
    "read_metrics",
]

MAX_METRICS_BYTES = 64 << 20  # a metrics.jsonl of a million epochs is about 300 MB: none is


def check_run_result(result: dict[str, Any], path: Path) -> dict[str, Any]:
    """`result` (read from `path`, a result.json); TrickLabError unless a report can read it."""
    problem = record_problem(result, needs_status=True) or _unmeasured(result)
    if problem:
        raise TrickLabError(f"{shown(path)} is not a tricklab run result: {shown(problem)}")
    return result


def _unmeasured(result: dict[str, Any]) -> str | None:
    """What a run recorded complete lacks of what the statistics read, or None."""
    if result["status"] not in COMPLETE_STATUSES:
        return None
    if not is_number(result.get("train_seconds")):
        return f"a {result['status']} run without 'train_seconds'"
    if not any(is_number(result.get(k)) for k in ("accuracy", "val_acc", "val_acc_tta")):
        return f"a {result['status']} run without an accuracy"
    return None


def check_speedrun_summary(summary: dict[str, Any], path: Path) -> dict[str, Any]:
    """`summary` (read from `path`, a summary.json); TrickLabError unless a report can read it."""
    fields = ("recipe", "hardware", "recipe_name", "target_accuracy")
    problem = record_problem({k: summary.get(k) for k in fields}, needs_status=False)
    runs = summary.get("runs")
    if problem is None and runs is not None and not isinstance(runs, list):
        problem = "'runs' is not a list"
    planned = summary.get("runs_planned")
    if (
        problem is None
        and planned is not None
        and not (type(planned) is int and 1 <= planned <= MAX_RUNS)  # --runs takes no 0
    ):
        problem = f"'runs_planned' is {planned!r}, not a whole number from 1 to {MAX_RUNS:,}"
    if problem is None and planned and runs and len(runs) > planned:
        problem = f"'runs' holds {len(runs)} runs, more than the {planned} of 'runs_planned'"
    seeds = set()  # a seed listed twice would count one run twice (an interval from fewer)
    for number, run in enumerate((runs or []) if problem is None else []):
        problem = record_problem(run, needs_status=True)
        if problem is None and not isinstance(run.get("seed"), int):
            problem = "a run has no whole-number 'seed'"
        if problem is None and run["seed"] in seeds:
            problem = f"seed {run['seed']} is listed twice"
        seeds.add(None if problem else run["seed"])
        if problem:
            problem = f"runs[{number}]: {problem}"
            break
    if problem:
        raise TrickLabError(f"{shown(path)} is not a tricklab speedrun summary: {shown(problem)}")
    return summary


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The epoch rows of a metrics.jsonl (blank lines skipped); TrickLabError, one line, for one
    that cannot be read, is too large, or holds a line that is no epoch row."""
    text = read_bounded_text(path, MAX_METRICS_BYTES, "tricklab metrics.jsonl")
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(parse_json(line))
        except ValueError as exc:
            raise TrickLabError(
                f"{shown(path)} line {number} is not valid JSON: {shown(exc)}"
            ) from None
    problem = epochs_problem(rows)
    if problem:
        raise TrickLabError(f"{shown(path)} is not a tricklab metrics.jsonl: {shown(problem)}")
    return rows
