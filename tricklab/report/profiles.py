"""The report's profile section: saved `tricklab profile model|step|loader --json` output, each file
as the tables its command prints (report.md and report.html), with the device, torch version and
date it records.

A file is checked and its tables built when it is loaded, before anything is written: a file that
cannot be read, is not JSON, or is not a profile output is one TrickLabError naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tricklab.report.document as doc
from tricklab.errors import TrickLabError
from tricklab.report.collect import machine_name, read_json
from tricklab.report.tables import TableData

KINDS = ("model", "step", "loader")
# What each kind must hold for its tables (the rest is read where present).
REQUIRED = {
    "model": ("device", "hardware", "repeats", "image_shape", "models", "results"),
    "step": ("device", "hardware", "batch_size", "repeats", "step_ms", "components"),
    "loader": ("device", "hardware", "dataset", "batch_size", "repeats", "configs"),
}
OPERATOR_NAME_CHARS = 100  # CUDA kernel names run to hundreds of characters


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
    profile = Profile(path, kind, data)
    try:
        {"model": _model, "step": _step, "loader": _loader}[kind](profile)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as exc:
        reason = f"no {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise TrickLabError(
            f"{path} is not whole `tricklab profile {kind} --json` output ({reason})"
        ) from None
    return profile


# ---------------------------------------------------------------- numbers


def num(value: float | None) -> str:
    """Three significant digits, no exponent: 0.0839, 2.97, 41.7, 1,090; '-' for none."""
    if value is None:
        return "-"
    value = float(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if value == 0:
        return "0"
    text = f"{value:.3g}"
    return f"{float(text):.12f}".rstrip("0").rstrip(".") if "e" in text else text


def spread_ms(summary: dict[str, Any]) -> str:
    """'5.42 ±14%': the median and half the interquartile range, in % of the median."""
    median = float(summary["median_ms"])
    half_iqr = 50 * (float(summary["q3_ms"]) - float(summary["q1_ms"])) / median if median else 0
    return f"{num(median)} ±{half_iqr:.0f}%"


def _switch(value: Any) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def _pct(fraction: float | None, digits: int = 1) -> str:
    return "-" if fraction is None else f"{100 * float(fraction):.{digits}f}"


# ---------------------------------------------------------------- the three kinds


def _model(p: Profile) -> None:
    d = p.data
    c, h, w = d["image_shape"]
    p.title = f"model cost: {', '.join(m['name'] for m in d['models'])} at {c}×{h}×{w}"
    counted = [
        [
            m["name"],
            f"{m['params'] / 1e6:.2f}",
            f"{m['forward_flops'] / 1e9:.3f}",
            f"{m['forward_macs'] / 1e9:.3f}",
        ]
        for m in d["models"]
    ]
    header = ["model", "params M", "forward GFLOPs", "forward GMACs"]
    p.tables.append(TableData("counted, per image", header, counted, ["l", "r", "r", "r"]))
    rows = d["results"]
    varying = [
        k for k in ("precision", "compile", "channels_last") if len({r[k] for r in rows}) > 1
    ]
    has_mfu = any(r.get("mfu") is not None for r in rows)
    compiled = any(r.get("compile_seconds") is not None for r in rows)
    header = ["model", "batch", *varying, "forward ms", "train step ms", "train img/s",
              "train TFLOP/s", *(["MFU %"] if has_mfu else []), "fwd ms/GMAC", "train ms/GMAC",
              *(["compile s"] if compiled else [])]  # fmt: skip
    measured = []
    for r in rows:
        cells = [r["model"], str(r["batch_size"]), *(_switch(r[k]) for k in varying)]
        cells += [
            spread_ms(r["forward_ms"]),
            spread_ms(r["train_step_ms"]),
            f"{r['train_images_per_second']:,.0f}",
            num(r["train_tflops"]),
            *([_pct(r.get("mfu"))] if has_mfu else []),
            num(r["forward_ms_per_gmac"]),
            num(r["train_ms_per_gmac"]),
            *([num(r.get("compile_seconds"))] if compiled else []),
        ]
        measured.append(cells)
    fixed = ", ".join(
        f"{k} {_switch(rows[0][k])}"
        for k in ("precision", "compile", "channels_last")
        if rows and k not in varying
    )
    title = (
        f"measured ({fixed}): median ±half the IQR of {d['repeats']} interleaved repeats, per batch"
    )
    align = ["l", "r", *("l" * len(varying))]
    p.tables.append(TableData(title, header, measured, align + ["r"] * (len(header) - len(align))))
    p.notes += [d[k] for k in ("macs_note", "train_step_note") if d.get(k)]
    peaks = d.get("peak_tflops") or {}
    sources = d.get("peak_source") or {}
    known = [f"{k} {num(v)} TFLOP/s ({sources.get(k) or '?'})" for k, v in peaks.items() if v]
    if known:
        p.notes.append(f"MFU against the device peak: {'; '.join(known)}.")
    if any(v is None for v in peaks.values()):
        p.notes.append(f"MFU unavailable on {d['device']}: no peak FLOP/s known for it.")
    p.notes.append(
        "ms per GMAC is equal across models only where MACs predict time; where it differs, "
        "MACs mislead."
    )


def _component_row(c: dict[str, Any], prefix: str = "") -> list[str]:
    note = []
    if c.get("within_noise"):
        note.append("within noise")
    if c.get("ms_raw") is not None and c["ms_raw"] < 0:
        note.append(f"clipped from {num(c['ms_raw'])}")
    return [
        prefix + str(c["name"]).replace("_", " "),
        num(c["ms"]),
        _pct(c["share"]),
        f"[{num(c['ci_low_ms'])}, {num(c['ci_high_ms'])}]",
        str(c.get("measured_as", "")),
        ", ".join(note),
    ]


def _step(p: Profile) -> None:
    d = p.data
    recipe = f": {d['recipe']}" if d.get("recipe") else ""
    p.title = f"training step{recipe}, batch {d['batch_size']}"
    rows = [_component_row(c) for c in d["components"]]
    inside = d.get("inside_forward_backward") or []
    rows += [_component_row(c, "of forward + backward: ") for c in inside]
    title = (
        f"step {num(d['step_ms'])} ms: medians of {d['repeats']} interleaved rounds, 95% "
        "paired-bootstrap intervals"
    )
    header = ["component", "ms/step", "share %", "95% interval ms", "measured as", "note"]
    p.tables.append(TableData(title, header, rows, ["l", "r", "r", "r", "l", "l"]))
    operators = d.get("top_operators") or []
    if operators:
        on_device = any(o.get("self_device_ms_per_step") is not None for o in operators)
        header = ["operator", "calls/step", "self CPU ms/step"]
        header += ["self device ms/step"] if on_device else []
        ops = []
        for o in operators:
            name = str(o["name"])
            if len(name) > OPERATOR_NAME_CHARS:
                name = name[: OPERATOR_NAME_CHARS - 1] + "…"
            cells = [name, num(o["calls_per_step"]), num(o["self_cpu_ms_per_step"])]
            cells += [num(o.get("self_device_ms_per_step"))] if on_device else []
            ops.append([*cells, _pct(o["self_share"])])
        steps = d.get("profiled_steps")
        title = f"top operators by self time, per step ({steps} steps profiled)"
        p.tables.append(TableData(title, [*header, "share %"], ops, ["l"] + ["r"] * len(header)))
    replaced = d.get("replaced_modules") or {}
    if replaced:
        modules = ", ".join(f"{n} {k}" for k, n in replaced.items())
        p.notes.append(f"Replaced by identity in the bare copy: {modules} (modules only).")
    e = d.get("evaluation")
    if e:
        line = f"Evaluation: {num(e['seconds'])} s per pass over {e['images']:,} images"
        if e.get("tta_seconds") is not None:
            line += f"; with TTA {e.get('tta')}: {num(e['tta_seconds'])} s"
        p.notes.append(line + ".")
    if d.get("compile_seconds"):
        p.notes.append(f"Compilation and warm-up, apart: {num(d['compile_seconds'])} s.")
    p.notes.append(
        "Each component is the difference of two variants that each do a little less; shares are "
        "of the sum of the clipped components; 'within noise' marks an interval that holds 0."
    )


def _loader(p: Profile) -> None:
    d = p.data
    shape = "×".join(map(str, d.get("image_shape") or []))
    p.title = f"loaders: {d['dataset']}, batch {d['batch_size']}"
    step = d.get("step")
    header = ["loader", "workers", "pin_memory", "images/s", "vs first", "ms/batch", "setup s"]
    header += ["of the step %"] if step else []
    rows = []
    for c in d["configs"]:
        pin = c.get("pin_memory")
        cells = [
            str(c["kind"]),
            "-" if c.get("num_workers") is None else str(c["num_workers"]),
            "-" if pin is None else _switch(bool(pin)),
            f"{c['images_per_second']:,.0f}",
            f"{num(c['vs_first'])}×",
            num((c.get("ms_per_batch") or {}).get("median_ms")),
            num(c.get("setup_seconds")),
        ]
        cells += [_pct(c.get("step_fraction"))] if step else []
        rows.append(cells)
    per = d.get("batches_per_measurement") or "one epoch of"
    images = d.get("train_images")
    title = (
        f"{f'{images:,} ' if images else ''}train images {shape}, {per} batches per measurement, "
        f"medians of {d['repeats']} interleaved rounds"
    )
    p.tables.append(TableData(title, header, rows, ["l"] + ["r"] * (len(header) - 1)))
    augment = d.get("augment") or {}
    if augment:
        p.notes.append("Augmentations: " + ", ".join(f"{k} {v}" for k, v in augment.items()) + ".")
    if step:
        p.notes.append(
            f"{d.get('recipe') or 'The recipe'}'s step on a batch already on the device: "
            f"{num(1e3 * step['seconds'])} ms at batch {step['batch_size']}."
        )
    p.notes += [str(n) for n in d.get("notes") or []]


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
        blocks += [doc.Paragraph(note) for note in p.notes]
    return blocks


def profile_summary(profiles: Sequence[Profile]) -> str:
    """One paragraph naming the profiles (the summary of a report of profiles only)."""
    parts = [f"{p.title} on {p.device} ({p.path.name})" for p in profiles]
    return f"{len(profiles)} profile{'' if len(profiles) == 1 else 's'}: " + "; ".join(parts) + "."
