"""The shape of the run and speedrun files a report reads from folders (result.json, summary.json,
metrics.jsonl), checked before anything uses them: a file of another tool, or one edited by hand,
is one TrickLabError line naming the file and the field, not a traceback deep in the statistics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import parse_json, read_bounded_text, shown
from tricklab.core.status import COMPLETE_STATUSES

__all__ = ["read_bounded_text", "read_metrics", "check_run_result", "check_speedrun_summary"]

# Fields a report reads, by the type they must have when present and not null.
NUMBER_FIELDS = (
    "accuracy", "val_acc", "val_loss", "val_acc_tta", "val_loss_tta", "train_seconds",
    "whiten_seconds", "final_eval_seconds", "record_seconds", "compile_seconds", "wall_seconds",
    "time_to_target_seconds", "peak_memory_bytes", "images_per_second", "params", "forward_macs",
    "target_accuracy",
)  # fmt: skip
FRACTION_FIELDS = ("accuracy", "val_acc", "val_acc_tta", "target_accuracy")
MAPPING_FIELDS = ("recipe", "hardware", "provenance", "resolved", "peak_memory")
TEXT_FIELDS = ("status", "error", "recipe_name")
# Larger than any run records (a billion seconds is 31 years; 1e18 bytes an exabyte), small enough
# that sums, squares and exponentials of them stay finite in the statistics.
MAX_MAGNITUDE = 1e18
MAX_SECONDS = 1e9
MAX_METRICS_BYTES = 64 << 20  # a metrics.jsonl of a million epochs is about 300 MB: none is


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _problem(record: Any, needs_status: bool) -> str | None:
    """What makes `record` no tricklab run record, or None."""
    if not isinstance(record, dict):
        return f"a run is {type(record).__name__}, not an object"
    if needs_status and not isinstance(record.get("status"), str):
        return "no 'status' of the run"
    kinds = (
        (NUMBER_FIELDS, is_number, "a number"),
        (MAPPING_FIELDS, lambda v: isinstance(v, dict), "an object"),
        (TEXT_FIELDS, lambda v: isinstance(v, str), "text"),
    )
    for names, fits, kind in kinds:
        for name in names:
            value = record.get(name)
            if value is not None and not fits(value):
                return f"'{name}' is {json.dumps(value)[:40]}, not {kind}"
    for name in FRACTION_FIELDS:
        value = record.get(name)
        if is_number(value) and not 0 <= value <= 1:
            return f"'{name}' is {value!r:.40}, not a fraction from 0 to 1"
    for name in NUMBER_FIELDS:
        value = record.get(name)
        if not is_number(value):
            continue
        if name.endswith(("_seconds", "_bytes")) and value < 0:
            return f"'{name}' is {value!r:.40}, below 0"
        limit = MAX_SECONDS if name.endswith("_seconds") else MAX_MAGNITUDE
        if abs(value) > limit:
            return f"'{name}' is {value!r:.40}, more than any run records ({limit:g})"
    if "seed" in record and not (isinstance(record["seed"], int) and is_number(record["seed"])):
        return f"'seed' is {json.dumps(record['seed'])[:40]}, not a whole number"
    recipe = record.get("recipe") or {}
    if not all(isinstance(v, dict) for v in recipe.values()):
        return "a section of 'recipe' is not an object"
    seed = (recipe.get("run") or {}).get("seed", 0)
    if not (isinstance(seed, int) and is_number(seed)):
        return f"'recipe.run.seed' is {json.dumps(seed)[:40]}, not a whole number"
    epochs = record.get("epochs")
    if epochs is not None:
        problem = epochs_problem(epochs)
        if problem:
            return problem
    return None


def epochs_problem(epochs: Any) -> str | None:
    """What makes `epochs` no list of epoch rows (objects of numbers), or None."""
    if not isinstance(epochs, list):
        return "'epochs' is not a list"
    for row in epochs:
        if not isinstance(row, dict):
            return f"an epoch row is {json.dumps(row)[:40]}, not an object"
        bad = next((k for k, v in row.items() if v is not None and not is_number(v)), None)
        if bad is not None:
            return f"an epoch row's '{bad}' is {json.dumps(row[bad])[:40]}, not a number"
        big = next((k for k, v in row.items() if v is not None and abs(v) > MAX_MAGNITUDE), None)
        if big is not None:
            return f"an epoch row's '{big}' is {row[big]!r:.40}, more than any run records"
    return None


def check_run_result(result: dict[str, Any], path: Path) -> dict[str, Any]:
    """`result` (read from `path`, a result.json); TrickLabError unless a report can read it."""
    problem = _problem(result, needs_status=True) or _unmeasured(result)
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
    problem = _problem({k: summary.get(k) for k in fields}, needs_status=False)
    runs = summary.get("runs")
    if problem is None and runs is not None and not isinstance(runs, list):
        problem = "'runs' is not a list"
    for run in (runs or []) if problem is None else []:
        problem = _problem(run, needs_status=True)
        if problem is None and not isinstance(run.get("seed"), int):
            problem = "a run has no whole-number 'seed'"
        if problem:
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
