"""What a run record must hold for the tables, statistics and the busy-machine rule to read it:
the one check of a record's fields, whichever file or storage it comes from.

A run record is a result.json, a run of a speedrun's summary.json (report/inputs.py reads both) or
a run a study stores on its trial (records.py). Each field that is read has a type and a range:
accuracies are fractions from 0 to 1, seconds lie from 0 to MAX_SECONDS, other numbers within
MAX_MAGNITUDE; the status is one of the status words (core/status.py); the hardware fingerprint
(measure/hardware.py) and the reproducibility record (`provenance`, measure/provenance.py; the
busy-machine rule reads its load averages and cores) hold values of their types. Every check
returns what is wrong in words ('provenance.cpu_count is "2", not a whole number above 0') or
None; the reader names the file or the trial. No torch, numpy or Optuna here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from tricklab.core.sizes import MAX_SEED
from tricklab.core.status import Status

# Larger than any run records (a billion seconds is 31 years; 1e18 bytes an exabyte), small enough
# that sums, squares and exponentials of them stay finite in the statistics.
MAX_MAGNITUDE = 1e18
MAX_SECONDS = 1e9
# A loss past the float32 range is inf (a diverged run); below it, any a run may record: an lr of
# 1e10 trains to losses of 1e28, and a study of such runs must still read.
MAX_LOSS = 1e39
MIN_SECONDS = 1e-9  # a time above 0 s is at least what perf_counter resolves (0 is a phase not run)
# Counts and rates no run records below 0 (a report drew "-500" images/s).
NONNEGATIVE_FIELDS = ("images_per_second", "params", "forward_macs")
# Cores, threads, processes: more than any machine has; a load average above it is no reading.
MAX_COUNT = 1_000_000
STATUS_WORDS = frozenset(s.value for s in Status)

# Fields of a run record a report reads, by the type they must have when present and not null.
NUMBER_FIELDS = (
    "accuracy", "val_acc", "val_loss", "val_acc_tta", "val_loss_tta", "train_seconds",
    "whiten_seconds", "final_eval_seconds", "record_seconds", "compile_seconds", "wall_seconds",
    "time_to_target_seconds", "peak_memory_bytes", "images_per_second", "params", "forward_macs",
    "target_accuracy",
)  # fmt: skip
FRACTION_FIELDS = ("accuracy", "val_acc", "val_acc_tta", "target_accuracy", "train_acc")
MAPPING_FIELDS = ("recipe", "hardware", "provenance", "resolved", "peak_memory")
TEXT_FIELDS = ("status", "error", "recipe_name")

# The hardware fingerprint and the reproducibility record, field by field: "text", "switch",
# "count" (a whole number from 1 to MAX_COUNT), "version" (a whole number from 0), "bytes",
# "load" (the 1-, 5- and 15-minute load averages), "versions" (an object of text). Any may be null.
HARDWARE = {
    "device_type": "text", "device_name": "text", "torch": "text", "cuda": "text",
    "cpu_model": "text", "cpu_cores": "count", "torch_threads": "count", "python": "text",
    "platform": "text", "tricklab": "text", "device_memory_bytes": "bytes",
    "compute_capability": "text", "cudnn": "version", "driver": "text",
}  # fmt: skip
# The run's own fields beside its measurements, and the recipe's fields a report names.
RUN = {
    "world_size": "count", "dist_backend": "text", "epochs_completed": "version",
    "stopped_epoch": "version", "run_dir": "path", "folder": "path", "tricklab_version": "text",
}  # fmt: skip
RECIPE = {
    "data": {"name": "text", "train_size": "version", "test_size": "version", "seed": "seed"},
    "run": {"seed": "seed", "epochs": "positive"},
}
PROVENANCE = {
    "command": "text", "started_at": "text", "git_commit": "text", "git_dirty": "switch",
    "versions": "versions", "cuda": "text", "cudnn": "version", "device": "text",
    "device_name": "text", "torch_threads": "count", "cpu_count": "count", "world_size": "count",
    "dist_backend": "text", "load_average_start": "load", "load_average_end": "load",
}  # fmt: skip


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def quoted(value: Any) -> str:
    """`value` as JSON, cut to 40 characters: how a message quotes what it refuses."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:39] + "…"


def number_problem(name: str, value: Any) -> str | None:
    """What makes `value` no reading of the field `name` (a number): a fraction outside 0..1 (a
    target accuracy of 0 too), seconds, bytes, counts or rates below 0, seconds between 0 and
    MIN_SECONDS or above MAX_SECONDS, a loss above MAX_LOSS, anything else above
    MAX_MAGNITUDE or not finite (a loss may be: NaN where a run diverged); None when it is one.
    `name` is as the message gives it."""
    field = name.rpartition(".")[2]
    if not is_number(value):
        return f"'{name}' is {quoted(value)}, not a number"
    if not math.isfinite(value):  # a loss that went to NaN is a diverging run's (figures skip it)
        return None if field.endswith("_loss") else f"'{name}' is {value!r}, not a finite number"
    if field == "target_accuracy" and not 0 < value <= 1:
        return f"'{name}' is {value!r:.40}, not a target accuracy: a fraction above 0, at most 1"
    if field in FRACTION_FIELDS and not 0 <= value <= 1:
        return f"'{name}' is {value!r:.40}, not a fraction from 0 to 1"
    at_least_0 = field.endswith(("_seconds", "_bytes", "_loss")) or field in NONNEGATIVE_FIELDS
    if at_least_0 and value < 0:  # a cross-entropy is at least 0 too
        return f"'{name}' is {value!r:.40}, below 0"
    if field.endswith("_seconds") and 0 < value < MIN_SECONDS:  # 5e-324 overflowed an interval
        return f"'{name}' is {value!r:.40}, less than any run records ({MIN_SECONDS:g} s)"
    limit = (
        MAX_SECONDS
        if field.endswith("_seconds")
        else MAX_LOSS
        if field.endswith("_loss")
        else MAX_MAGNITUDE
    )
    if abs(value) > limit:
        return f"'{name}' is {value!r:.40}, more than any run records ({limit:g})"
    return None


def record_problem(record: Any, needs_status: bool) -> str | None:
    """What makes `record` no tricklab run record, or None (see the module doc)."""
    if not isinstance(record, dict):
        return f"a run is {type(record).__name__}, not an object"
    if needs_status and not isinstance(record.get("status"), str):
        return "no 'status' of the run"
    kinds = (
        (MAPPING_FIELDS, lambda v: isinstance(v, dict), "an object"),
        (TEXT_FIELDS, lambda v: isinstance(v, str), "text"),
    )
    for names, fits, kind in kinds:
        for name in names:
            value = record.get(name)
            if value is not None and not fits(value):
                return f"'{name}' is {quoted(value)}, not {kind}"
    for name in NUMBER_FIELDS:
        if record.get(name) is not None and (problem := number_problem(name, record[name])):
            return problem
    status = record.get("status")
    if status is not None and status not in STATUS_WORDS:
        return f"'status' is {quoted(status)}, not a run status (complete, failed, ...)"
    if "seed" in record and not _fits(record["seed"], "seed"):
        return f"'seed' is {quoted(record['seed'])}, not {_WANTED['seed']}"
    problem = (
        fields_problem(record, RUN, "")
        or _recipe_problem(record.get("recipe") or {})
        or fields_problem(record.get("hardware"), HARDWARE, "hardware")
        or fields_problem(record.get("provenance"), PROVENANCE, "provenance")
    )
    if problem:
        return problem
    epochs = record.get("epochs")
    return None if epochs is None else epochs_problem(epochs)


def _recipe_problem(recipe: dict[str, Any]) -> str | None:
    if not all(isinstance(v, dict) for v in recipe.values()):
        return "a section of 'recipe' is not an object"
    for section, spec in RECIPE.items():
        if problem := fields_problem(recipe.get(section), spec, f"recipe.{section}"):
            return problem
    target = (recipe.get("run") or {}).get("target_accuracy")
    return None if target is None else number_problem("recipe.run.target_accuracy", target)


def epochs_problem(epochs: Any) -> str | None:
    """What makes `epochs` no list of epoch rows (objects of numbers, bounded as a run's), or
    None."""
    if not isinstance(epochs, list):
        return "'epochs' is not a list"
    for row in epochs:
        if not isinstance(row, dict):
            return f"an epoch row is {quoted(row)}, not an object"
        epoch = row.get("epoch", 1)  # the report's curves are drawn by it
        if not (is_whole(epoch) and 1 <= epoch <= MAX_MAGNITUDE):
            return f"an epoch row's 'epoch' is {quoted(epoch)}, not a whole number from 1"
        for key, value in row.items():
            problem = None if value is None else number_problem(str(key), value)
            if problem:
                return f"an epoch row's {problem}"
    return None


def fields_problem(value: Any, spec: Mapping[str, str], where: str) -> str | None:
    """What in `value` (an object, or None) does not fit `spec` (HARDWARE, PROVENANCE): the first
    field of the wrong type or out of range, named `where.field` (or `field`); fields `spec` does not name are
    not read. None when it all fits."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"'{where}' is {quoted(value)}, not an object"
    for key, kind in spec.items():
        item = value.get(key)
        if item is not None and not _fits(item, kind):
            return f"'{where + '.' if where else ''}{key}' is {quoted(item)}, not {_WANTED[kind]}"
    return None


_WANTED = {
    "text": "text",
    "switch": "true or false",
    "count": f"a whole number from 1 to {MAX_COUNT:,}",
    "version": "a whole number from 0",
    "bytes": f"a whole number of bytes from 0 to {MAX_MAGNITUDE:g}",
    "load": f"three load averages (numbers from 0 to {MAX_COUNT:,})",
    "versions": "an object of version texts",
    "path": "a path (text without a NUL)",
    "seed": f"a seed, a whole number from 0 to {MAX_SEED}",
    "positive": f"a number above 0, at most {MAX_MAGNITUDE:g}",
}


def _fits(value: Any, kind: str) -> bool:
    if kind == "text":
        return isinstance(value, str)
    if kind == "switch":
        return isinstance(value, bool)
    if kind == "path":
        return isinstance(value, str) and "\0" not in value
    if kind == "seed":
        return is_whole(value) and 0 <= value <= MAX_SEED
    if kind == "positive":
        return is_number(value) and 0 < value <= MAX_MAGNITUDE
    if kind == "count":
        return is_whole(value) and 1 <= value <= MAX_COUNT
    if kind == "version":
        return is_whole(value) and 0 <= value <= MAX_MAGNITUDE
    if kind == "bytes":
        return is_whole(value) and 0 <= value <= MAX_MAGNITUDE
    if kind == "load":
        return (
            isinstance(value, list)
            and len(value) == 3
            and all(is_number(v) and 0 <= v <= MAX_COUNT for v in value)
        )
    return isinstance(value, dict) and all(v is None or isinstance(v, str) for v in value.values())
