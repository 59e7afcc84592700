"""The report's profile section: saved `tricklab profile model|step|loader --json` output, each file
as the tables its command prints (report.md and report.html; the cells and the notes under each
table from tricklab.profile.tables, as the terminal's), with the device, torch version and
date it records.

A file is checked and its tables built when it is loaded, before anything is written: a file that
cannot be read, is not JSON, is not a profile output, or holds a field the tables read with a value
of the wrong type (SCHEMA) is one TrickLabError naming it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tricklab.profile.tables as tables
import tricklab.report.document as doc
from tricklab.core.errors import TrickLabError
from tricklab.profile.tables import num
from tricklab.report.collect import machine_name, read_json
from tricklab.report.inputs import is_number
from tricklab.report.tables import TableData

KINDS = ("model", "step", "loader")
# What each kind must hold for its tables (the rest is read where present).
REQUIRED = {
    "model": ("device", "hardware", "repeats", "image_shape", "models", "results"),
    "step": ("device", "hardware", "batch_size", "repeats", "step_ms", "components"),
    "loader": ("device", "hardware", "dataset", "batch_size", "repeats", "configs"),
}

# The type of every field the tables, titles and notes read, where it is present: a leaf is
# "text", "number" or "switch" (or several, "text|switch"); {...} an object checked field by field
# ("*": each of its values), [spec] a list whose every item fits spec. A key ending in "?" may
# also be null. Only these fields reach a renderer; a file of another type is one line, not a
# traceback (an int as a model's name broke the Markdown writer).
TIMING = {"median_ms": "number", "q1_ms": "number", "q3_ms": "number"}
HARDWARE = {
    "device_type?": "text", "device_name?": "text", "cpu_model?": "text", "cpu_cores?": "number",
    "torch_threads?": "number", "torch?": "text", "cuda?": "text",
}  # fmt: skip
COMMON = {"device": "text", "hardware": HARDWARE, "repeats": "number", "date?": "text"}
COMPONENT = {
    "name": "text", "ms?": "number", "ms_raw?": "number", "share?": "number",
    "ci_low_ms?": "number", "ci_high_ms?": "number", "measured_as?": "text",
    "within_noise?": "switch",
}  # fmt: skip
SETTING = "text|switch"  # precision, compile, channels_last: a word or on/off
SCHEMA: dict[str, dict[str, Any]] = {
    "model": {
        **COMMON, "image_shape": ["number"], "macs_note?": "text", "train_step_note?": "text",
        "peak_tflops?": {"*?": "number"}, "peak_source?": {"*?": "text"},
        "models": [
            {"name": "text", "params": "number", "forward_flops": "number",
             "forward_macs": "number"},
        ],
        "results": [
            {"model": "text", "batch_size": "number", "precision": SETTING, "compile": SETTING,
             "channels_last": SETTING, "forward_ms": TIMING, "train_step_ms": TIMING,
             "train_images_per_second": "number", "train_tflops?": "number", "mfu?": "number",
             "forward_ms_per_gmac?": "number", "train_ms_per_gmac?": "number",
             "compile_seconds?": "number"},
        ],
    },
    "step": {
        **COMMON, "recipe?": "text", "batch_size": "number", "step_ms": "number",
        "components": [COMPONENT], "inside_forward_backward?": [COMPONENT],
        "top_operators?": [
            {"name": "text", "calls_per_step?": "number", "self_cpu_ms_per_step?": "number",
             "self_device_ms_per_step?": "number", "self_share?": "number"},
        ],
        "profiled_steps?": "number", "replaced_modules?": {"*": "number"},
        "components_sum_ms?": "number", "compile_seconds?": "number",
        "evaluation?": {"seconds?": "number", "images": "number", "tta?": "text",
                        "tta_seconds?": "number"},
    },
    "loader": {
        **COMMON, "recipe?": "text", "dataset": "text", "batch_size": "number",
        "image_shape?": ["number"], "train_images?": "number",
        "batches_per_measurement?": "number", "augment?": {"*?": "text|number|switch"},
        "configs": [
            {"kind": "text", "num_workers?": "number", "pin_memory?": "switch",
             "images_per_second": "number", "vs_first?": "number",
             "ms_per_batch?": {"median_ms?": "number"}, "setup_seconds?": "number",
             "step_fraction?": "number"},
        ],
        "step?": {"seconds": "number", "batch_size": "number"}, "notes?": ["text"],
    },
}  # fmt: skip
_LEAVES = {
    "text": lambda v: isinstance(v, str),
    # a number float() takes: an int past the float range (10**400) is no measurement
    "number": lambda v: is_number(v) and abs(v) <= sys.float_info.max,
    "switch": lambda v: isinstance(v, bool),
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
    profiles = []
    for spec in paths:
        if not str(spec).strip():
            raise TrickLabError("an empty --profile file name; give a file")
        path = Path(spec)
        if path.is_dir():
            raise TrickLabError(f"--profile {path} is a folder; give the JSON file(s) it holds")
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
    wrong = misfit(data, SCHEMA[kind])
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
    if not any(_LEAVES[kind](value) for kind in spec.split("|")):
        return _wrong(where, value, " or ".join(spec.split("|")))
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
    p.title = f"model cost: {', '.join(m['name'] for m in d['models'])} at {c}×{h}×{w}"
    p.tables.append(_table("counted, per image", tables.model_counted(d)))
    title = (
        f"measured ({tables.fixed_settings(d)}): median ±half the IQR of {d['repeats']} "
        "interleaved repeats, per batch"
    )
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
    title = (
        f"step {num(d['step_ms'])} ms: medians of {d['repeats']} interleaved rounds, 95% "
        "paired-bootstrap intervals"
    )
    p.tables.append(_table(title, tables.step_components(d)))
    operators = tables.step_operators(d)
    if operators.rows:
        title = f"top operators by self time, per step ({d.get('profiled_steps')} steps profiled)"
        p.tables.append(_table(title, operators))
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
