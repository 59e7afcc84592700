"""The tables of `tricklab results` and of a report, built once as text cells (TableData) and
written by table_writers.py (rich, Markdown, LaTeX, CSV; re-exported here) or html.py.

Columns that are empty in every row are left out (no target, no failures, no BH adjustment).
No interval is printed outside what is possible (measure/intervals.py clips and times them), and
with fewer than 3 runs on a side a cell says so in words instead of numbers. The train seconds
shown are geometric means, so the speedup is the ratio of two numbers in the table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import Any

import tricklab.report.fmt as fmt
from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import shown
from tricklab.core.status import Status
from tricklab.experiments.busy import NOT_JUDGED
from tricklab.experiments.stats import NO_REFERENCE_RUN, NO_RUN
from tricklab.measure.intervals import MIN_RUNS_FOR_INTERVAL, too_few_words
from tricklab.recipe.yamlio import read_value
from tricklab.report.table_writers import (
    TableData,
    latex_escape,
    to_csv,
    to_latex,
    to_markdown,
    to_rich,
)

__all__ = [
    "TableData",
    "latex_escape",
    "per_seed_table",
    "results_table",
    "stats_csv",
    "to_csv",
    "to_latex",
    "to_markdown",
    "to_rich",
]

VERDICT_WORDS = {
    "reference": ("reference", "reference"),
    "within noise": ("within noise", "within noise"),
    "not significant after BH": ("n.s. after BH", "n.s. after BH"),
    "too few runs": ("too few runs", "too few runs"),
    NOT_JUDGED: ("", NOT_JUDGED),
    NO_RUN: (NO_RUN, NO_RUN),
    NO_REFERENCE_RUN: (NO_REFERENCE_RUN, NO_REFERENCE_RUN),
}
PICKED_NOTE = (
    "reference: the configuration with the best mean accuracy, picked after the runs; the others' "
    "Δacc against it lean negative (the winner's curse): `--reference CONFIG` compares against "
    "one chosen beforehand, and a new ablation of the winner against it confirms a gain."
)
VERDICT_NOTE = (
    "higher/lower, faster/slower: the 95% interval excludes no change (and, with more than 3 rows, "
    "the Benjamini-Hochberg adjusted p < 0.05); within noise: it includes no change; n.s. after "
    f"BH: only the adjustment for many comparisons takes it back; too few runs: fewer than "
    f"{MIN_RUNS_FOR_INTERVAL} on a side; no complete run, no reference run: nothing to compare. "
    "acc: with test-time augmentation where the "
    "configuration's recipe has it (tricks.tta), else the plain validation accuracy. train s: "
    "geometric mean over the complete runs; speedup: the reference's train s / the configuration's."
)
# The columns a terminal too narrow for the whole table keeps (table_writers.to_rich).
ABRIDGED = ("config", "n", "acc %", "Δacc pp", "train s", "speedup", "acc verdict", "time verdict")


# ---------------------------------------------------------------- the tables


def accuracy_verdict(row: Any) -> str:
    if row.verdict == "significant":
        return "higher" if (row.accuracy_diff or 0) > 0 else "lower"
    return VERDICT_WORDS.get(row.verdict or "", ("", ""))[0]


def time_verdict(row: Any) -> str:
    if row.time_verdict == "significant":
        return "faster" if (row.speedup or 1) > 1 else "slower"
    return VERDICT_WORDS.get(row.time_verdict or "", ("", ""))[1]


def _p_cells(row: Any) -> tuple[str, str]:
    """('Welch 0.20 · paired 0.05', 'BH 0.41 · 0.10') for the accuracy difference."""
    tests, adjusted = [], []
    if row.accuracy_p_value is not None:
        tests.append(f"Welch {fmt.p_value(row.accuracy_p_value)}")
        if row.accuracy_p_adjusted is not None:
            adjusted.append(f"Welch {fmt.p_value(row.accuracy_p_adjusted)}")
    if row.accuracy_paired_p_value is not None:
        tests.append(f"paired {fmt.p_value(row.accuracy_paired_p_value)} (n={row.paired_n})")
        if row.accuracy_paired_p_adjusted is not None:
            adjusted.append(f"paired {fmt.p_value(row.accuracy_paired_p_adjusted)}")
    return " · ".join(tests), " · ".join(adjusted)


def _or_words(interval: str, n: int) -> str:
    """An interval's text, or with too few runs the words that say so."""
    if interval:
        return interval
    return f"({too_few_words(n)})" if 0 < n < MIN_RUNS_FOR_INTERVAL else ""


def _accuracy_cell(row: Any) -> str:
    if row.accuracy_mean is None:
        return "-"
    text = fmt.pct(row.accuracy_mean)
    if row.accuracy_std is not None:
        text += f" ± {fmt.pct(row.accuracy_std)}"
    ci = fmt.interval(row.accuracy_ci_low, row.accuracy_ci_high, fmt.pct)
    return " ".join(filter(None, [text, _or_words(ci, row.n)]))


def _seconds_cell(row: Any) -> str:
    if row.train_seconds_geomean is None:
        return "-"
    ci = fmt.interval(row.train_seconds_ci_low, row.train_seconds_ci_high, fmt.seconds)
    return " ".join(filter(None, [fmt.seconds(row.train_seconds_geomean), _or_words(ci, row.n)]))


def _difference_cell(row: Any, reference_n: int) -> str:
    if row.accuracy_diff is None:
        return ""
    if row.accuracy_identical_throughout:
        return f"{fmt.pp(row.accuracy_diff)} (identical, seed for seed)"
    ci = fmt.interval(row.accuracy_diff_ci_low, row.accuracy_diff_ci_high, fmt.pp)
    ci = _or_words(ci, min(row.n, reference_n))
    return " ".join(filter(None, [fmt.pp(row.accuracy_diff), ci]))


def _speedup_cell(row: Any, reference_n: int) -> str:
    if row.speedup is None:
        return ""
    text = fmt.ratio_interval(
        row.speedup, row.speedup_ci_low, row.speedup_ci_high, min(row.n, reference_n)
    )
    if row.time_p_value is not None:
        text += f", Welch p {fmt.p_value(row.time_p_value)}"
        if row.time_p_adjusted is not None:
            text += f" (BH {fmt.p_value(row.time_p_adjusted)})"
    if row.time_paired_p_value is not None:
        text += f" · paired p {fmt.p_value(row.time_paired_p_value)}"
    return text


def _failures_cell(row: Any) -> str:
    text = ", ".join(f"{kind} {count}" for kind, count in row.failures.items())
    if row.pending:
        text = (text + ", " if text else "") + f"{row.pending} pending"
    return text


def target_words(rows: Sequence[Any]) -> str | None:
    """'55.00%' when every row has that target, 'per row' when they differ, None for none."""
    targets = {r.target for r in rows if r.target is not None}
    if not targets:
        return None
    return f"{fmt.target(targets.pop())}%" if len(targets) == 1 else "per row"


def _target_cell(row: Any, one_target: bool) -> str:
    if row.target is None:
        return "-"
    text = f"{row.reached_target}/{row.target_runs}"
    if not one_target:
        text += f" of {fmt.target(row.target)}%"
    if row.time_to_target_seconds_mean is not None:
        text += f", {fmt.seconds(row.time_to_target_seconds_mean)}"
    return text


def unfinished(rows: Sequence[Any]) -> tuple[int, int] | None:
    """(runs done, runs planned) of a study whose plan is not done yet; None when it is done or
    has no plan."""
    planned = sum(r.planned or 0 for r in rows)
    done = sum(min(r.done, r.planned or 0) for r in rows)
    return (done, planned) if any(r.planned for r in rows) and done < planned else None


RESUME_WORDS = "rerun the same command to finish"  # a study's (ablate, sweep)
NO_RESUME_WORDS = "a speedrun does not resume: run it again into a new folder for more runs"


def results_table(
    rows: Sequence[Any],
    title: str = "",
    name: Callable[[str], str] | None = None,
    finish: str = RESUME_WORDS,
) -> TableData:
    """The results table of `stats.config_stats` rows (ConfigStats), with its `abridged` form;
    `finish` says how to finish what is unfinished."""
    reference_n = next((r.n for r in rows if r.is_reference), 0)
    target = target_words(rows)
    plan = unfinished(rows)
    header = [
        "config",
        "n",
        "runs done/planned",
        "acc % mean ± std [95% CI]",
        "Δacc pp [95% CI]",
        "Δacc p (test)",
        "Δacc p, BH-adjusted",
        "train s geometric mean [95% CI]",
        "speedup (ratio of train s) [95% CI], p (test)",
        f"≥ target {target}: runs, mean s to it" if target else "≥ target, s to it",
        "failures",
        "acc verdict",
        "time verdict",
    ]
    cells, short = [], []
    for r in rows:
        p_cell, adjusted_cell = _p_cells(r)
        shown = name(r.config_id) if name else r.config_id
        progress = f"{r.done}/{r.planned}" if plan and r.planned else ""
        accuracy, speedup = fmt.pct(r.accuracy_mean), fmt.ratio(r.speedup) + "×"
        cells.append(
            [
                shown,
                str(r.n),
                progress,
                _accuracy_cell(r),
                _difference_cell(r, reference_n),
                p_cell,
                adjusted_cell,
                _seconds_cell(r),
                _speedup_cell(r, reference_n),
                _target_cell(r, target != "per row"),
                _failures_cell(r),
                accuracy_verdict(r),
                time_verdict(r),
            ]
        )
        short.append(
            [
                shown,
                str(r.n),
                progress,  # done (complete or not run again) of planned, as the note says
                accuracy,
                fmt.pp(r.accuracy_diff) if r.accuracy_diff is not None else "",
                fmt.seconds(r.train_seconds_geomean),
                speedup if r.speedup is not None else "",
                accuracy_verdict(r),
                time_verdict(r),
            ]
        )
    notes = [VERDICT_NOTE]
    if any(r.is_reference and r.picked_best for r in rows):
        notes.append(PICKED_NOTE)
    if plan:
        notes.append(
            f"Unfinished: {plan[0]} of {plan[1]} planned runs done (runs done/planned, per "
            f"configuration); {finish}."
        )
    align = ["l", "r", "r", "r", "r", "r", "r", "r", "r", "r", "l", "l", "l"]
    abridged = TableData(
        title,
        [*ABRIDGED[:2], "done/planned", *ABRIDGED[2:]],  # its note says: runs, per configuration
        short,
        ["l", "r", "r", "r", "r", "r", "r", "l", "l"],
        [
            "Abridged to fit the terminal (point estimates and verdicts): `--format md` or a "
            "wider terminal shows the intervals and p-values.",
            *notes,
        ],
    ).without_empty_columns()
    table = TableData(title, header, cells, align, notes, abridged)
    return table.without_empty_columns()


def varied_keys(records: Sequence[dict[str, Any]]) -> list[str]:
    """The recipe keys the configurations change, sorted (the same columns whatever order the
    runs ran in)."""
    return sorted({o.partition("=")[0] for r in records for o in r.get("overrides") or []})


def _recipe_value(record: dict[str, Any], key: str) -> Any:
    group, _, name = key.partition(".")
    values = (record.get("recipe") or {}).get(group)
    return values.get(name) if isinstance(values, dict) else None


def _override_value(text: str) -> Any:
    """`0.0` for the override `key=0.0`, read as the command line reads it (text if it cannot)."""
    try:
        return read_value(text)
    except TrickLabError:
        return text


def per_seed_runs(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per run: config, seed, one entry per varied key (its value in that run), outcome."""
    keys = varied_keys(records)
    baseline_values: dict[str, Any] = {}
    for record in records:  # a key a config leaves alone has the baseline's value
        changed = {o.partition("=")[0] for o in record.get("overrides") or []}
        for key in keys:
            if key not in changed and record.get("recipe"):
                baseline_values.setdefault(key, _recipe_value(record, key))
    out = []
    for record in records:
        given = dict(o.partition("=")[::2] for o in record.get("overrides") or [])
        run = {"config_id": record["config_id"], "seed": record.get("seed")}
        for key in keys:
            value = _recipe_value(record, key) if record.get("recipe") else None
            if value is None:  # a run with no recipe stored: its override, else the baseline's
                value = _override_value(given[key]) if key in given else baseline_values.get(key)
            run[key] = value
        run.update(
            {
                k: record.get(k)
                for k in (
                    "status",
                    "accuracy",
                    "train_seconds",
                    "peak_memory_bytes",
                    "images_per_second",
                    "error",
                )
            }
        )
        if (record.get("hardware") or {}).get("device_type") == "cpu":
            # on a CPU the figure is the worker's lifetime peak RSS (core/memory.py), not this
            # run's: a later run would show an earlier one's peak, so no column rather than a wrong one
            run["peak_memory_bytes"] = None
        out.append(run)
    # the baseline first, then as the configurations first appear
    appearance = sorted(
        dict.fromkeys(r["config_id"] for r in records), key=lambda c: c != "baseline"
    )
    order = {cid: i for i, cid in enumerate(appearance)}

    return sorted(
        out, key=lambda r: (order[r["config_id"]], r["seed"] if r["seed"] is not None else -1)
    )


def _value(value: Any) -> str:
    from tricklab.experiments.plan import format_value

    if value is None:
        return "-"
    if isinstance(value, float):
        return fmt.short_number(value)
    return fmt.short_override(f"k={format_value(value)}")[2:]


def per_seed_table(records: Sequence[dict[str, Any]], title: str = "") -> TableData:
    """One row per run, one column per varied key."""
    keys = varied_keys(records)
    header = [
        "config",
        "seed",
        *keys,
        "status",
        "acc %",
        "train s",
        "peak MiB",
        "images/s",
        "error",
    ]
    rows = []
    for run in per_seed_runs(records):
        error = (run["error"] or "").strip().splitlines()
        rows.append(
            [
                run["config_id"],
                str(run["seed"]),
                *(_value(run[k]) for k in keys),
                run["status"],
                fmt.pct(run["accuracy"]),
                fmt.seconds(run["train_seconds"]) if run["status"] != Status.WAITING else "-",
                fmt.mib(run["peak_memory_bytes"]),
                fmt.rate(run["images_per_second"]),
                error[0][:200] if error else "",
            ]
        )
    align = ["l", "r", *("l" * len(keys)), "l", "r", "r", "r", "r", "l"]
    return TableData(title, header, rows, align).without_empty_columns(keep=2)


# ---------------------------------------------------------------- CSV of the statistics


def stats_csv(rows: Sequence[Any]) -> str:
    """The rows as `stats.write_csv` writes them (raw numbers, fractions, seconds)."""
    from tricklab.experiments.stats import FAILURE_KINDS, ConfigStats

    names = [f.name for f in fields(ConfigStats) if f.name != "failures"]
    out = []
    for row in rows:
        data = row.to_dict()
        data["overrides"] = " ".join(row.overrides)
        out.append([data[n] for n in names] + [row.failures.get(k, 0) for k in FAILURE_KINDS])
    return to_csv(names + [f"failures_{k}" for k in FAILURE_KINDS], out)


def shown_table(table: TableData | None) -> TableData | None:
    """`table` with its title, header, cells and notes as one-line text (core/safeio.shown): a
    configuration, study or machine named from outside cannot break it, forge a line or reach a
    terminal or a report with an escape sequence."""
    if table is None:
        return None
    return replace(
        table,
        title=shown(table.title),
        header=[shown(cell) for cell in table.header],
        rows=[[shown(cell) for cell in row] for row in table.rows],
        notes=[shown(note) for note in table.notes],
        abridged=shown_table(table.abridged),
    )
