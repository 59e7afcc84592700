"""The tables of `tricklab profile model|step|loader`, built once from the command's JSON-able
result: header, rows of display strings, alignment and the notes printed under each table.

The terminal prints them as rich tables (profile_cli.py), the report as Markdown and HTML
(report/profiles.py); each adds its own title, since only it knows what the reader already sees.
Keys an older saved file may lack are read with .get; a key every version writes is indexed, so a
file without it is a KeyError the report turns into one line.

No torch or rich import: the main CLI imports this module through profile_cli.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tricklab.measure.provenance import BUSY_ADVICE, BUSY_WORDS, busiest_load

SETTINGS = ("precision", "compile", "channels_last")  # what profile model can vary per row
INSIDE_LABEL = "of forward + backward:"
OPERATOR_NAME_CHARS = 100  # CUDA kernel names run to hundreds of characters


@dataclass(frozen=True)
class ProfileTable:
    """A table as text cells; `align` holds 'l' or 'r' per column, `sections` the indices of rows
    that open a section (a rule in the terminal), `notes` the lines printed under it."""

    header: list[str]
    rows: list[list[str]]
    align: list[str]
    sections: tuple[int, ...] = ()
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- numbers
def num(value: float | None) -> str:
    """Three significant digits, trailing zeros kept, never an exponent: 0.0839, 2.90, 41.7,
    1,090, 0.00000157; '-' for none."""
    if value is None:
        return "-"
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if value == 0:
        return "0"
    rounded = float(f"{value:.3g}")  # 9.996 -> 10.0: the decimals of the rounded value
    return f"{rounded:.{max(0, 2 - math.floor(math.log10(abs(rounded))))}f}"


MIN_REPEATS_FOR_SPREAD = 3  # as `results` asks 3 runs a side before it gives an interval


def too_few_repeats(result: dict[str, Any]) -> bool:
    """Whether the profile's repeats are too few for a spread or an interval to mean anything."""
    return int(result["repeats"]) < MIN_REPEATS_FOR_SPREAD


def busy_notes(result: dict[str, Any]) -> list[str]:
    """'timings taken on a busy machine: ...' when the 1-minute load average, as the profile began
    or ended, was above the cores (the rule speedrun, ablate and results apply to runs)."""
    hardware = result.get("hardware") or {}
    record = {"cpu_count": hardware.get("cpu_cores"), **hardware}
    reason = busiest_load([record], "the profile")
    return [f"{BUSY_WORDS}: {reason}; {BUSY_ADVICE}"] if reason else []


def model_spread_words(result: dict[str, Any]) -> str:
    """How `profile model` summarized its repeats, for a title (the median alone from too few)."""
    n = int(result["repeats"])
    if too_few_repeats(result):
        return f"median of {n} interleaved repeats (n={n}: too few for a spread)"
    return f"median ±half the IQR of {n} interleaved repeats"


def step_interval_words(result: dict[str, Any]) -> str:
    """How `profile step` summarized its rounds, for a title (no interval from too few)."""
    n = int(result["repeats"])
    if too_few_repeats(result):
        return f"medians of {n} interleaved rounds (n={n}: too few for an interval)"
    return f"medians of {n} interleaved rounds, 95% paired-bootstrap intervals"


def spread_ms(summary: dict[str, Any], with_spread: bool = True) -> str:
    """'5.42 ±14%': the median and half the interquartile range, in % of the median (the median
    alone without `with_spread`); '30 [25, 87]', the quartiles themselves, where half the range
    is 100 % or more of the median (a skewed spread: ± would reach below 0 ms)."""
    median = float(summary["median_ms"])
    if not with_spread:
        return num(median)
    q1, q3 = float(summary["q1_ms"]), float(summary["q3_ms"])
    half_iqr = 50 * (q3 - q1) / median if median else 0
    if half_iqr >= 100:
        return f"{num(median)} [{num(q1)}, {num(q3)}]"
    return f"{num(median)} ±{half_iqr:.0f}%"


def share(fraction: float | None) -> str:
    """0.637 -> '63.7 %'."""
    return "-" if fraction is None else f"{100 * float(fraction):.1f} %"


def fixed(value: Any, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def word(value: Any) -> str:
    """on/off for switches, the value otherwise."""
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


# ---------------------------------------------------------------- model
def varying_settings(result: dict[str, Any]) -> list[str]:
    """The settings (precision, compile, channels_last) that differ between rows: one column each."""
    rows = result["results"]
    return [key for key in SETTINGS if len({r[key] for r in rows}) > 1]


def fixed_settings(result: dict[str, Any]) -> str:
    """'precision 32-true, compile off, channels_last off': the settings shared by every row."""
    rows, varying = result["results"], varying_settings(result)
    return ", ".join(f"{k} {word(rows[0][k])}" for k in SETTINGS if rows and k not in varying)


def model_size(result: dict[str, Any]) -> str:
    """'width 0.25, ' or 'widths [16, 32, 64], ' where the models were built other than at their
    full size; '' at full size and in files from before the profile recorded it."""
    build = result.get("build") or {}
    if build.get("widths"):
        return f"widths {build['widths']}, "
    return f"width {build['width']:g}, " if build.get("width", 1) != 1 else ""


def model_counted(result: dict[str, Any]) -> ProfileTable:
    """Params, forward FLOPs and MACs per image of each model."""
    rows = [
        [
            m["name"],
            f"{m['params'] / 1e6:.2f} M",
            num(m["forward_flops"] / 1e9),  # 3 figures: 0.00306 and 0.00153, MACs = FLOPs / 2
            num(m["forward_macs"] / 1e9),
        ]
        for m in result["models"]
    ]
    header = ["model", "params", "forward GFLOPs", "forward GMACs"]
    notes = [result["macs_note"]] if result.get("macs_note") else []
    return ProfileTable(header, rows, ["l", "r", "r", "r"], notes=notes)


def model_measured(result: dict[str, Any]) -> ProfileTable:
    """Per model, batch size and varying setting: latencies with their spread, img/s, TFLOP/s,
    MFU (a column where any row has one), ms per GMAC, compile seconds (where any compiled)."""
    rows = result["results"]
    varying = varying_settings(result)
    has_mfu = any(r.get("mfu") is not None for r in rows)
    compiled = any(r.get("compile_seconds") is not None for r in rows)
    spread = not too_few_repeats(result)
    header = ["model", "batch", *varying, "forward ms", "train step ms", "train img/s",
              "train TFLOP/s", *(["MFU %"] if has_mfu else []), "fwd ms/GMAC", "train ms/GMAC",
              *(["compile s"] if compiled else [])]  # fmt: skip
    cells = []
    for r in rows:
        mfu = r.get("mfu")
        cells.append(
            [
                r["model"],
                str(r["batch_size"]),
                *(word(r[k]) for k in varying),
                spread_ms(r["forward_ms"], spread),
                spread_ms(r["train_step_ms"], spread),
                f"{r['train_images_per_second']:,.0f}",
                num(r["train_tflops"]),
                *([fixed(None if mfu is None else 100 * mfu, ".1f", "n/a")] if has_mfu else []),
                num(r["forward_ms_per_gmac"]),
                num(r["train_ms_per_gmac"]),
                *([fixed(r.get("compile_seconds"), ".1f")] if compiled else []),
            ]
        )
    notes = [result["train_step_note"]] if result.get("train_step_note") else []
    notes += busy_notes(result)
    if any(v is None for v in (result.get("peak_tflops") or {}).values()):
        notes.append(
            f"MFU unavailable on {result['device']}: no peak FLOP/s known for it "
            "(tricklab.measure.mfu has a table of GPUs); give --peak-tflops"
        )
    return ProfileTable(header, cells, ["l"] + ["r"] * (len(header) - 1), notes=notes)


# ---------------------------------------------------------------- step
def _component(c: dict[str, Any], indent: str = "", interval: bool = True) -> list[str]:
    note = []
    low, high = c["ci_low_ms"], c["ci_high_ms"]
    if interval and c.get("within_noise") and low <= 0 <= high:  # what the interval says
        note.append("within noise")
    if c.get("ms_raw") is not None and c["ms_raw"] < 0:
        note.append(f"clipped from {num(c['ms_raw'])}")
    return [
        indent + str(c["name"]).replace("_", " "),
        num(c["ms"]),
        share(c["share"]),
        f"[{num(low)}, {num(high)}]" if interval else "-",
        str(c.get("measured_as", "")),
        ", ".join(note),
    ]


def step_components(result: dict[str, Any]) -> ProfileTable:
    """Each component of the step with its ms, share, 95% interval (none from too few rounds),
    what it was measured as and its notes ('within noise', 'clipped from'); the parts of forward +
    backward in a section."""
    interval = not too_few_repeats(result)
    rows = [_component(c, interval=interval) for c in result["components"]]
    sections: tuple[int, ...] = ()
    inside = result.get("inside_forward_backward") or []
    if inside:
        sections = (len(rows),)
        rows.append([INSIDE_LABEL, "", "", "", "", ""])
        rows += [_component(c, "  ", interval) for c in inside]
    header = ["component", "ms/step", "share", "95% interval ms", "measured as", "note"]
    align = ["l", "r", "r", "r", "l", "l"]
    return ProfileTable(header, rows, align, sections, _step_notes(result))


def _step_notes(result: dict[str, Any]) -> list[str]:
    notes = []
    if "replaced_modules" in result:
        replaced = ", ".join(f"{n} {k}" for k, n in result["replaced_modules"].items())
        notes.append(
            f"replaced by identity in the bare copy: {replaced or 'none'} "
            "(modules; functional calls remain)"
        )
    total = sum(float(c["ms"]) for c in result["components"])  # not a stored sum: the rows'
    if total > result["step_ms"] * 1.0001:
        notes.append(
            f"the clipped components add up to {total:,.1f} ms, above the "
            "measured step: negative differences (noise) count as 0"
        )
    e = result.get("evaluation")
    if e:
        line = f"evaluation: {num(e['seconds'])} s per pass over {e['images']:,} images"
        if e.get("tta_seconds") is not None:
            line += f"; with TTA {e.get('tta')}: {num(e['tta_seconds'])} s"
        notes.append(line)
    if result.get("compile_seconds"):
        notes.append(f"compilation and warm-up, apart: {result['compile_seconds']:.1f} s")
    return notes + busy_notes(result)


def step_operators(result: dict[str, Any]) -> ProfileTable:
    """The top torch.profiler operators by self time, per step (a device column on a GPU)."""
    operators = result.get("top_operators") or []
    on_device = any(o.get("self_device_ms_per_step") is not None for o in operators)
    header = ["operator", "calls/step", "self CPU ms/step"]
    header += ["self device ms/step"] if on_device else []
    rows = []
    for o in operators:
        name = str(o["name"])
        if len(name) > OPERATOR_NAME_CHARS:
            name = name[: OPERATOR_NAME_CHARS - 1] + "…"
        cells = [name, num(o["calls_per_step"]), num(o["self_cpu_ms_per_step"])]
        cells += [num(o.get("self_device_ms_per_step"))] if on_device else []
        rows.append([*cells, share(o["self_share"])])
    return ProfileTable([*header, "share"], rows, ["l"] + ["r"] * len(header))


# ---------------------------------------------------------------- loader
def loader_configs(result: dict[str, Any]) -> ProfileTable:
    """Images/s of each loader configuration, against the first, ms per batch, setup seconds and,
    with a recipe's step, the fraction of the step its loading would cost."""
    step = result.get("step")
    header = ["loader", "workers", "pin_memory", "images/s", "vs first", "ms/batch", "setup s"]
    header += ["of the step"] if step else []
    rows = []
    for c in result["configs"]:
        pin = c.get("pin_memory")
        cells = [
            str(c["kind"]),
            fixed(c.get("num_workers"), "d"),
            "-" if pin is None else word(bool(pin)),
            f"{c['images_per_second']:,.0f}",
            f"{num(c['vs_first'])}×",
            num((c.get("ms_per_batch") or {}).get("median_ms")),
            fixed(c.get("setup_seconds"), ".2f"),
        ]
        rows.append(cells + ([share(c.get("step_fraction"))] if step else []))
    notes = []
    if step:
        notes.append(
            f"{result.get('recipe') or 'the recipe'}'s step on a batch already on the device: "
            f"{1e3 * step['seconds']:,.1f} ms at batch {step['batch_size']}"
        )
    notes += [str(n) for n in result.get("notes") or []] + busy_notes(result)
    return ProfileTable(header, rows, ["l"] + ["r"] * (len(header) - 1), notes=notes)
