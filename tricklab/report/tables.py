"""The tables of `tricklab results` and of a report, built once as text cells and written as a rich
terminal table, Markdown, LaTeX (booktabs) or HTML (html.py).

Columns that are empty in every row are left out (no target, no failures, no BH adjustment).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import tricklab.report.fmt as fmt
from tricklab.core.status import Status

VERDICT_WORDS = {
    "reference": ("reference", "reference"),
    "within noise": ("within noise", "within noise"),
    "not significant after BH": ("n.s. after BH", "n.s. after BH"),
    "too few runs": ("too few runs", "too few runs"),
}
VERDICT_NOTE = (
    "higher/lower, faster/slower: the 95% interval excludes no change (and, with more than 3 rows, "
    "the Benjamini-Hochberg adjusted p < 0.05); within noise: it includes no change; n.s. after "
    "BH: only the adjustment for many comparisons takes it back."
)


@dataclass
class TableData:
    """A table as text cells: `align` holds 'l' or 'r' per column."""

    title: str
    header: list[str]
    rows: list[list[str]]
    align: list[str]
    notes: list[str] = field(default_factory=list)

    def without_empty_columns(self, keep: int = 1) -> TableData:
        """The table without columns that are empty or '-' in every row (the first `keep` stay)."""
        used = [
            i
            for i in range(len(self.header))
            if i < keep or any(row[i] not in ("", "-") for row in self.rows)
        ]
        return TableData(
            self.title,
            [self.header[i] for i in used],
            [[row[i] for i in used] for row in self.rows],
            [self.align[i] for i in used],
            list(self.notes),
        )


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


def _accuracy_cell(row: Any) -> str:
    if row.accuracy_mean is None:
        return "-"
    text = fmt.pct(row.accuracy_mean)
    if row.accuracy_std is not None:
        ci = fmt.interval(row.accuracy_ci_low, row.accuracy_ci_high, fmt.pct)
        text += f" ± {fmt.pct(row.accuracy_std)} {ci}"
    return text


def _difference_cell(row: Any) -> str:
    if row.accuracy_diff is None:
        return ""
    if row.accuracy_identical_per_seed and row.paired_n == row.n:
        return f"{fmt.pp(row.accuracy_diff)} (identical, seed for seed)"
    ci = fmt.interval(row.accuracy_diff_ci_low, row.accuracy_diff_ci_high, fmt.pp)
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


def results_table(
    rows: Sequence[Any], title: str = "", name: Callable[[str], str] | None = None
) -> TableData:
    """The results table of `stats.config_stats` rows (ConfigStats)."""
    reference_n = next((r.n for r in rows if r.is_reference), 0)
    header = [
        "config",
        "n",
        "acc % mean ± std [95% CI]",
        "Δacc pp [95% CI]",
        "Δacc p (test)",
        "Δacc p, BH-adjusted",
        "train s mean ± std",
        "speedup [95% CI], p (test)",
        "≥ target, s to it",
        "failures",
        "acc verdict",
        "time verdict",
    ]

    cells = []
    for r in rows:
        secs = fmt.seconds(r.train_seconds_mean)
        if r.train_seconds_std is not None:
            secs += f" ± {fmt.seconds(r.train_seconds_std)}"
        reached = f"{r.reached_target}/{r.target_runs}" if r.target is not None else "-"
        if r.time_to_target_seconds_mean is not None:
            reached += f", {r.time_to_target_seconds_mean:.1f}"
        p_cell, adjusted_cell = _p_cells(r)
        cells.append(
            [
                name(r.config_id) if name else r.config_id,
                str(r.n),
                _accuracy_cell(r),
                _difference_cell(r),
                p_cell,
                adjusted_cell,
                secs,
                _speedup_cell(r, reference_n),
                reached,
                _failures_cell(r),
                accuracy_verdict(r),
                time_verdict(r),
            ]
        )
    align = ["l", "r", "r", "r", "r", "r", "r", "r", "r", "l", "l", "l"]
    return TableData(title, header, cells, align, [VERDICT_NOTE]).without_empty_columns()


def varied_keys(records: Sequence[dict[str, Any]]) -> list[str]:
    """The recipe keys the configurations change, sorted (the same columns whatever order the
    runs ran in)."""
    return sorted({o.partition("=")[0] for r in records for o in r.get("overrides") or []})


def _recipe_value(record: dict[str, Any], key: str) -> Any:
    group, _, name = key.partition(".")
    values = (record.get("recipe") or {}).get(group)
    return values.get(name) if isinstance(values, dict) else None


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
            run[key] = value if value is not None else given.get(key, baseline_values.get(key))
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


# ---------------------------------------------------------------- writers


def to_markdown(table: TableData) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in table.header) + " |"]
    lines.append("|" + "|".join("---:" if a == "r" else "---" for a in table.align) + "|")
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "×": r"$\times$",
    "Δ": r"$\Delta$",
    "≥": r"$\geq$",
    "·": r"$\cdot$",
    "<": r"$<$",
    ">": r"$>$",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX.get(c, c) for c in text)


def to_latex(table: TableData) -> str:
    """A booktabs table (needs \\usepackage{booktabs})."""
    lines = [
        "% needs \\usepackage{booktabs}",
        "\\begin{table}[ht]",
        "\\centering",
        "\\small",
    ]
    if table.title:
        lines.append(f"\\caption{{{latex_escape(table.title)}}}")
    lines += [
        f"\\begin{{tabular}}{{{''.join(table.align)}}}",
        "\\toprule",
        " & ".join(latex_escape(h) for h in table.header) + " \\\\",
        "\\midrule",
        *(" & ".join(latex_escape(c) for c in row) + " \\\\" for row in table.rows),
        "\\bottomrule",
        "\\end{tabular}",
        "\\end{table}",
    ]
    return "\n".join(lines)


def to_csv(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])
    return buffer.getvalue()


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


def _word_widths(table: TableData) -> tuple[list[int], list[int]]:
    """Per column: (longest word, longest cell): the narrowest it can be with no word broken, and
    the widest it needs."""
    columns = [[table.header[i]] + [row[i] for row in table.rows] for i in range(len(table.header))]
    words = [max((len(w) for text in col for w in text.split()), default=1) for col in columns]
    cells = [max((len(text) for text in col), default=1) for col in columns]
    return words, cells


def _fit(minimum: list[int], maximum: list[int], available: int) -> list[int]:
    """Column widths within `available`: each at least its minimum; the spare shared max-min fairly
    (columns that want little get it all, so short cells stay on one line)."""
    wants = [max(mx - mn, 0) for mn, mx in zip(minimum, maximum)]
    widths = list(minimum)
    spare = available - sum(minimum)
    order = sorted(range(len(wants)), key=lambda i: wants[i])
    for done, i in enumerate(order):
        give = min(wants[i], spare // (len(order) - done))
        widths[i] += give
        spare -= give
    return widths


def to_rich(table: TableData, width: int | None = None) -> Any:
    """A rich renderable: the table, or, where the terminal is too narrow for it, one small
    two-column table per row ('stacked'). Cells wrap at spaces and fold inside a word; never '…'."""
    from rich.console import Group
    from rich.table import Table

    minimum, maximum = _word_widths(table)
    borders = 3 * len(minimum) + 1  # a space of padding each side and a rule between columns
    if width is None or sum(minimum) + borders <= width:
        widths = maximum if width is None else _fit(minimum, maximum, width - borders)
        wide = Table(title=table.title or None, title_justify="left")
        for name, align, column_width in zip(table.header, table.align, widths):
            justify = "right" if align == "r" else "left"
            wide.add_column(name, justify=justify, overflow="fold", width=column_width)
        for row in table.rows:
            wide.add_row(*row)
        return wide
    parts: list[Any] = [table.title] if table.title else []
    for row in table.rows:
        block = Table(title=row[0], title_justify="left", show_header=False, show_lines=False)
        block.add_column("field", overflow="fold", style="dim")
        block.add_column("value", overflow="fold")
        for name, value in zip(table.header[1:], row[1:]):
            if value not in ("", "-"):
                block.add_row(name, value)
        parts.append(block)
    return Group(*parts)
