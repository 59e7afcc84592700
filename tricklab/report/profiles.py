"""The report's profile section: saved `tricklab profile model|step|loader --json` output, each file
as the tables its command prints (report.md and report.html; the cells and the notes under each
table from tricklab.profile.tables, as the terminal's), with the device, torch version and
date it records.

A file is checked and its tables built when it is loaded, before anything is written: a file that
cannot be read, is not JSON, is not a profile output, holds a field the tables read with a value
of the wrong type or out of its range (SCHEMA), or numbers that cannot be together (`impossible`:
quartiles out of order, an interval upside down) is one TrickLabError naming it and the field.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tricklab.profile.tables as tables
import tricklab.report.document as doc
from tricklab.core.errors import TrickLabError
from tricklab.profile.tables import num
from tricklab.report.collect import machine_name, read_json
from tricklab.report.inputs import MAX_MAGNITUDE, MAX_SECONDS, is_number
from tricklab.report.tables import TableData

KINDS = ("model", "step", "loader")
# What each kind must hold for its tables (the rest is read where present).
REQUIRED = {
    "model": ("device", "hardware", "repeats", "image_shape", "models", "results"),
    "step": ("device", "hardware", "batch_size", "repeats", "step_ms", "components"),
    "loader": ("device", "hardware", "dataset", "batch_size", "repeats", "configs"),
}

# The type of every field the tables, titles and notes read, where it is present: a leaf is one
# of LEAVES ("text", "switch", "number", "count", ...) or several ("text|switch"); {...} an object
# checked field by field ("*": each of its values), [spec] a list whose every item fits spec. A
# key ending in "?" may also be null. Only these fields reach a renderer; a file of another type
# is one line, not a traceback (an int as a model's name broke the Markdown writer), and a number
# out of its range (a median of 1e308 ms, a batch of -5) one line, not a table of it.
TIMING = {"median_ms": "ms", "q1_ms": "ms", "q3_ms": "ms"}
HARDWARE = {
    "device_type?": "text", "device_name?": "text", "cpu_model?": "text", "cpu_cores?": "count",
    "torch_threads?": "count", "torch?": "text", "cuda?": "text",
    "load_average_start?": ["rate"], "load_average_end?": ["rate"],  # a busy machine's note
}  # fmt: skip
COMMON = {"device": "text", "hardware": HARDWARE, "repeats": "count", "date?": "text"}
COMPONENT = {
    "name": "text", "ms?": "ms", "ms_raw?": "ms_diff", "share?": "fraction",
    "ci_low_ms?": "ms_diff", "ci_high_ms?": "ms_diff", "measured_as?": "text",
    "within_noise?": "switch",
}  # fmt: skip
SETTING = "text|switch"  # precision, compile, channels_last: a word or on/off
SCHEMA: dict[str, dict[str, Any]] = {
    "model": {
        **COMMON, "image_shape": ["count"], "macs_note?": "text", "train_step_note?": "text",
        "build?": {"width?": "positive", "widths?": ["count"]},
        "peak_tflops?": {"*?": "rate"}, "peak_source?": {"*?": "text"},
        "models": [
            {"name": "text", "params": "whole", "forward_flops": "rate", "forward_macs": "rate"},
        ],
        "results": [
            {"model": "text", "batch_size": "count", "precision": SETTING, "compile": SETTING,
             "channels_last": SETTING, "forward_ms": TIMING, "train_step_ms": TIMING,
             "train_images_per_second": "positive", "train_tflops?": "rate", "mfu?": "fraction",
             "forward_ms_per_gmac?": "ms", "train_ms_per_gmac?": "ms",
             "compile_seconds?": "seconds"},
        ],
    },
    "step": {
        **COMMON, "recipe?": "text", "batch_size": "count", "step_ms": "ms",
        "components": [COMPONENT], "inside_forward_backward?": [COMPONENT],
        "top_operators?": [  # the profiler's self times: below 0 now and then
            {"name": "text", "calls_per_step?": "rate", "self_cpu_ms_per_step?": "ms_diff",
             "self_device_ms_per_step?": "ms_diff", "self_share?": "fraction"},
        ],
        "profiled_steps?": "count", "replaced_modules?": {"*": "whole"},
        "components_sum_ms?": "ms", "compile_seconds?": "seconds",
        "resolved?": {"notes?": ["text"]},
        "evaluation?": {"seconds?": "seconds", "images": "count", "tta?": "text",
                        "tta_seconds?": "seconds"},
    },
    "loader": {
        **COMMON, "recipe?": "text", "dataset": "text", "batch_size": "count",
        "image_shape?": ["count"], "train_images?": "count",
        "batches_per_measurement?": "count", "augment?": {"*?": "text|number|switch"},
        "configs": [
            {"kind": "text", "num_workers?": "whole", "pin_memory?": "switch",
             "images_per_second": "positive", "vs_first?": "positive",
             "ms_per_batch?": {"median_ms?": "ms", "q1_ms?": "ms", "q3_ms?": "ms"},
             "setup_seconds?": "seconds", "step_fraction?": "fraction"},
        ],
        "step?": {"seconds": "seconds", "batch_size": "count"}, "notes?": ["text"],
    },
}  # fmt: skip
MAX_MS = MAX_SECONDS * 1e3


def _within(low: float, high: float, whole: bool = False) -> Any:
    return lambda v: is_number(v) and low <= v <= high and (not whole or isinstance(v, int))


# Each leaf: (fits, in words). Numbers are finite and within MAX_MAGNITUDE (json's door refuses
# NaN and infinities; an int past the float range, 10**400, is no measurement either).
LEAVES = {
    "text": (lambda v: isinstance(v, str), "text"),
    "switch": (lambda v: isinstance(v, bool), "switch"),
    "number": (_within(-MAX_MAGNITUDE, MAX_MAGNITUDE), f"a number within ±{MAX_MAGNITUDE:g}"),
    "rate": (_within(0, MAX_MAGNITUDE), f"a number from 0 to {MAX_MAGNITUDE:g}"),
    "positive": (
        lambda v: is_number(v) and 0 < v <= MAX_MAGNITUDE,
        f"a number above 0, up to {MAX_MAGNITUDE:g}",
    ),
    "fraction": (_within(0, 1), "a fraction from 0 to 1"),
    "count": (_within(1, MAX_MAGNITUDE, whole=True), "a whole number above 0"),
    "whole": (_within(0, MAX_MAGNITUDE, whole=True), "a whole number from 0"),
    "ms": (_within(0, MAX_MS), f"milliseconds from 0 to {MAX_MS:g}"),
    "ms_diff": (_within(-MAX_MS, MAX_MS), f"milliseconds within ±{MAX_MS:g}"),
    "seconds": (_within(0, MAX_SECONDS), f"seconds from 0 to {MAX_SECONDS:g}"),
}


@dataclass
class Profile:
    """One saved profile: its file, what it records and its tables, ready to render."""

    path: Path
    kind: str  # model | step | loader
    data: dict[str, Any]
    title: str = ""
    tables: list[TableData] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def hardware(self) -> dict[str, Any]:
        return self.data.get("hardware") or {}

    @property
    def device(self) -> str:
        """'NVIDIA H100 80GB HBM3, cuda', 'AMD EPYC 7B13 (2 cores), cpu, 2 torch threads'."""
        where = str(self.data.get("device", "?"))
        threads = self.hardware.get("torch_threads")
        if where == "cpu" and threads:
            where += f", {threads} torch thread{'' if threads == 1 else 's'}"
        return f"{machine_name(self.hardware)}, {where}"

    @property
    def torch(self) -> str:
        """'2.11.0+cu130 (CUDA 13.0)', '2.14.1+cpu'; '-' when the file does not say."""
        version = str(self.hardware.get("torch") or "-")
        cuda = self.hardware.get("cuda")
        return f"{version} (CUDA {cuda})" if cuda and self.data.get("device") != "cpu" else version

    @property
    def date(self) -> str:
        """The date the command wrote (UTC, ISO 8601); files from before it did: 'not recorded'."""
        return str(self.data.get("date") or "not recorded")

    @property
    def measured(self) -> str:
        """'measured 2026-11-24T23:14:22Z' or 'date not recorded in the file'."""
        return f"measured {self.date}" if self.data.get("date") else "date not recorded in the file"


def load_profiles(paths: Sequence[str | Path]) -> list[Profile]:
    """Every file in `paths` as a Profile with its tables; TrickLabError, one line naming the
    file, for one that is not `tricklab profile model|step|loader --json` output."""
    profiles, seen = [], set()
    for spec in paths:
        if not str(spec).strip():
            raise TrickLabError("an empty --profile file name; give a file")
        path = Path(spec)
        if path.is_dir():
            raise TrickLabError(f"--profile {path} is a folder; give the JSON file(s) it holds")
        if path.resolve() not in seen:  # a file named twice is one profile, as a source is
            seen.add(path.resolve())
            profiles.append(load_profile(path))
    return profiles


def load_profile(path: Path) -> Profile:
    """One saved profile (see `load_profiles`)."""
    data = read_json(path)
    kind = data.get("kind")
    what = "`tricklab profile model|step|loader --json` output"
    if kind not in KINDS:
        raise TrickLabError(f"{path} is not {what}: no 'kind' of model, step or loader")
    missing = [key for key in REQUIRED[kind] if key not in data]
    if missing:
        raise TrickLabError(
            f"{path} is not whole `tricklab profile {kind} --json` output: no {', '.join(missing)}"
        )
    wrong = misfit(data, SCHEMA[kind]) or impossible(kind, data)
    if wrong:
        raise TrickLabError(f"{path} is not whole `tricklab profile {kind} --json` output: {wrong}")
    profile = Profile(path, kind, data)
    try:
        {"model": _model, "step": _step, "loader": _loader}[kind](profile)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as exc:
        reason = f"no {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise TrickLabError(
            f"{path} is not whole `tricklab profile {kind} --json` output ({reason})"
        ) from None
    return profile


def misfit(value: Any, spec: Any, where: str = "") -> str | None:
    """What in `value` does not fit `spec` (see SCHEMA): 'results[0].model is 7, not text'; None
    when it all fits. Fields the spec does not name are not looked at."""
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return _wrong(where, value, "an object")
        for key, inner in spec.items():
            name, nullable = key.rstrip("?"), key.endswith("?")
            items = value.items() if name == "*" else [(name, value.get(name, None))]
            for field_name, item in items:
                if item is None and (nullable or field_name not in value):
                    continue
                wrong = misfit(item, inner, f"{where}.{field_name}" if where else str(field_name))
                if wrong:
                    return wrong
        return None
    if isinstance(spec, list):
        if not isinstance(value, list):
            return _wrong(where, value, "a list")
        return next(
            (w for i, item in enumerate(value) if (w := misfit(item, spec[0], f"{where}[{i}]"))),
            None,
        )
    kinds = spec.split("|")
    if not any(LEAVES[kind][0](value) for kind in kinds):
        return _wrong(where, value, " or ".join(LEAVES[kind][1] for kind in kinds))
    return None


def impossible(kind: str, data: dict[str, Any]) -> str | None:
    """What a profile that fits SCHEMA says that cannot be, field by field in range but not
    together: quartiles out of order, an interval whose low end is above its high end, shares
    adding up to more than the whole; for a model profile, no model, an image shape other than
    channels × height × width, a result of a model it does not list."""
    wrong = {"model": _model_misfit, "step": _step_misfit}.get(kind, lambda _: None)(data)
    return wrong or next(
        (w for at, t in _timings(kind, data) if (w := _quartiles_misfit(at, t))), None
    )


def _timings(kind: str, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(where, timing) of each median with its quartiles that a profile holds."""
    if kind == "model":
        return [
            (f"results[{i}].{key}", row.get(key) or {})
            for i, row in enumerate(data["results"])
            for key in ("forward_ms", "train_step_ms")
        ]
    if kind == "loader":
        return [
            (f"configs[{i}].ms_per_batch", c.get("ms_per_batch") or {})
            for i, c in enumerate(data["configs"])
        ]
    return []


def _quartiles_misfit(where: str, timing: dict[str, Any]) -> str | None:
    """q1 <= median <= q3, where they are given."""
    q1, median, q3 = (timing.get(k) for k in ("q1_ms", "median_ms", "q3_ms"))
    if q1 is not None and median is not None and q1 > median:
        return _wrong(f"{where}.q1_ms", q1, f"at most the median, {num(median)}")
    if q3 is not None and median is not None and q3 < median:
        return _wrong(f"{where}.q3_ms", q3, f"at least the median, {num(median)}")
    if q1 is not None and q3 is not None and q1 > q3:
        return _wrong(f"{where}.q1_ms", q1, f"at most q3_ms, {num(q3)}")
    return None


def _step_misfit(data: dict[str, Any]) -> str | None:
    """Each interval's low end at most its high end; each list's shares adding up to at most 1
    (they are of the sum of the clipped components); a step of no component is none measured."""
    if not data["components"]:
        return "components is [], not the parts of the step measured"
    for key in ("components", "inside_forward_backward"):
        rows = data.get(key) or []
        for i, c in enumerate(rows):
            low, high = c.get("ci_low_ms"), c.get("ci_high_ms")
            if low is not None and high is not None and low > high:
                return _wrong(f"{key}[{i}].ci_low_ms", low, f"at most ci_high_ms, {num(high)}")
        total = sum(c.get("share") or 0 for c in rows)
        if total > 1 + 1e-6:
            return f"the shares in {key} add up to {total:.4g}, not at most 1 (the whole step)"
    total = sum(o.get("self_share") or 0 for o in data.get("top_operators") or [])
    if total > 1 + 1e-6:  # each a share of all self time: the top ones hold at most all of it
        return f"the self shares in top_operators add up to {total:.4g}, not at most 1"
    return None


def _model_misfit(data: dict[str, Any]) -> str | None:
    """What a model profile that fits SCHEMA says that cannot be: no model, an image shape other
    than channels × height × width, MACs other than half the FLOPs, a result of a model it does
    not list, an MFU without a peak to measure it against, time per GMAC of a model of none."""
    if not data["models"]:
        return "models is [], not a list of the models profiled"
    if len(data["image_shape"]) != 3:
        return _wrong("image_shape", data["image_shape"], "channels, height and width")
    macs = {m.get("name"): m.get("forward_macs") for m in data["models"]}
    for i, m in enumerate(data["models"]):
        flops = m.get("forward_flops")
        if flops is not None and m.get("forward_macs") not in (None, flops // 2):
            return _wrong(
                f"models[{i}].forward_macs", m["forward_macs"], f"half its FLOPs, {flops // 2}"
            )
    peaks = data.get("peak_tflops") or {}
    for i, row in enumerate(data["results"]):
        if row.get("model") not in macs:
            return _wrong(f"results[{i}].model", row["model"], "a model in models")
        if row.get("mfu") is not None and not peaks.get(row.get("precision")):
            return _wrong(
                f"results[{i}].mfu", row["mfu"], "none: no peak is given for its precision"
            )
        if not macs[row["model"]] and row.get("train_ms_per_gmac") is not None:
            return _wrong(
                f"results[{i}].train_ms_per_gmac", row["train_ms_per_gmac"], "none: 0 MACs"
            )
    return None


def _wrong(where: str, value: Any, wanted: str) -> str:
    text = json.dumps(value)
    return f"{where} is {text if len(text) <= 40 else text[:39] + '…'}, not {wanted}"


# ---------------------------------------------------------------- the three kinds
# The cells and the notes under each table are the terminal's (tricklab.profile.tables);
# the titles and the notes that explain a table to a reader of the document are the report's.


def _table(title: str, table: tables.ProfileTable) -> TableData:
    return TableData(title, table.header, table.rows, table.align, list(table.notes))


def _model(p: Profile) -> None:
    d = p.data
    c, h, w = d["image_shape"]
    size = tables.model_size(d)
    p.title = f"model cost: {', '.join(m['name'] for m in d['models'])} at {size}{c}×{h}×{w}"
    p.tables.append(_table("counted, per image", tables.model_counted(d)))
    title = f"measured ({tables.fixed_settings(d)}): {tables.model_spread_words(d)}, per batch"
    p.tables.append(_table(title, tables.model_measured(d)))
    peaks = d.get("peak_tflops") or {}
    sources = d.get("peak_source") or {}
    known = [f"{k} {num(v)} TFLOP/s ({sources.get(k) or '?'})" for k, v in peaks.items() if v]
    if known:
        p.notes.append(f"MFU against the device peak: {'; '.join(known)}.")
    p.notes.append(
        "ms per GMAC is equal across models only where MACs predict time; where it differs, "
        "MACs mislead."
    )


def _step(p: Profile) -> None:
    d = p.data
    recipe = f": {d['recipe']}" if d.get("recipe") else ""
    p.title = f"training step{recipe}, batch {d['batch_size']}"
    title = f"step {num(d['step_ms'])} ms: {tables.step_interval_words(d)}"
    p.tables.append(_table(title, tables.step_components(d)))
    operators = tables.step_operators(d)
    if operators.rows:
        title = f"top operators by self time, per step ({d.get('profiled_steps')} steps profiled)"
        p.tables.append(_table(title, operators))
    p.notes += (d.get("resolved") or {}).get("notes") or []  # what the device decided, and why
    p.notes.append(
        "Each component is the difference of two variants that each do a little less; shares are "
        "of the sum of the clipped components; 'within noise' marks an interval that holds 0."
    )


def _loader(p: Profile) -> None:
    d = p.data
    shape = "×".join(map(str, d.get("image_shape") or []))
    p.title = f"loaders: {d['dataset']}, batch {d['batch_size']}"
    per = d.get("batches_per_measurement") or "one epoch of"
    images = d.get("train_images")
    title = (
        f"{f'{images:,} ' if images else ''}train images {shape}, {per} batches per measurement, "
        f"medians of {d['repeats']} interleaved rounds"
    )
    p.tables.append(_table(title, tables.loader_configs(d)))
    augment = d.get("augment") or {}
    if augment:
        p.notes.append("Augmentations: " + ", ".join(f"{k} {v}" for k, v in augment.items()) + ".")


# ---------------------------------------------------------------- the section


def overview_table(profiles: Sequence[Profile]) -> TableData:
    """One row per file: what it profiles, where, with which torch, when."""
    rows = [[p.path.name, p.title, p.device, p.torch, p.date] for p in profiles]
    header = ["file", "profile", "device", "torch", "date (UTC)"]
    return TableData("Profiles", header, rows, ["l"] * len(header))


def profile_blocks(profiles: Sequence[Profile], level: int = 2) -> list[Any]:
    """The section's blocks: an overview, then each file's tables and notes."""
    if not profiles:
        return []
    blocks: list[Any] = [
        doc.Heading(level, "Profiles"),
        doc.Paragraph(
            "Saved output of `tricklab profile model|step|loader --json`, one subsection per file, "
            "each with the device, torch version and date the file records. Times are medians "
            "of interleaved, device-synchronised repeats after a warm-up."
        ),
        doc.TableBlock(overview_table(profiles)),
    ]
    for p in profiles:
        blocks += [
            doc.Heading(level + 1, f"{p.title} ({p.path.name})"),
            doc.Paragraph(f"On {p.device}; torch {p.torch}; {p.measured}; from {p.path}."),
        ]
        for table in p.tables:
            caption = table.title[:1].upper() + table.title[1:] + ":"
            blocks += [doc.Paragraph(caption), doc.TableBlock(table)]
            blocks += [doc.Paragraph(note) for note in table.notes]
        blocks += [doc.Paragraph(note) for note in p.notes]
    return blocks


def profile_summary(profiles: Sequence[Profile]) -> str:
    """One paragraph naming the profiles (the summary of a report of profiles only)."""
    parts = [f"{p.title} on {p.device} ({p.path.name})" for p in profiles]
    return f"{len(profiles)} profile{'' if len(profiles) == 1 else 's'}: " + "; ".join(parts) + "."
