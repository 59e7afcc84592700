"""How the report's figures look: colours, markers, legends, ticks, the same in every figure.

A configuration has one colour (and, across several sources, one marker) in every figure; with
several sources the colour is the source's (its machine). Legends sit below the axes, over no data.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

from tricklab.core.safeio import shown
from tricklab.core.status import COMPLETE_STATUSES
from tricklab.measure.intervals import geometric_interval, mean_interval
from tricklab.report.collect import Source

PALETTE = [  # matplotlib's tab10 without its grey (grey means "within noise"), then tab20's light half
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
    "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2",
]  # fmt: skip
NOISE = "#a0a0a0"
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "p", "*"]
RC = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.35,
    "grid.linewidth": 0.6,
    "legend.fontsize": 8.5,
    "legend.frameon": False,
    "svg.hashsalt": "tricklab",  # the same SVG for the same data
    "svg.fonttype": "path",  # text as outlines: the SVG needs no font
}
PNG_DPI = 150  # 1050 px wide for a 7-inch figure; the SVG is there for print


class Styles:
    """Colours, markers and names of (source, configuration) pairs, the same in every figure."""

    def __init__(self, sources: Sequence[Source]) -> None:
        self.sources = list(sources)
        self.multi = len(self.sources) > 1
        self.configs: dict[str, str] = {}  # config id -> display name, in order of appearance
        for source in self.sources:
            for row in source.rows:
                self.configs.setdefault(row.config_id, shown(source.name_of(row.config_id)))
        self.index = {cid: i for i, cid in enumerate(self.configs)}

    def colour(self, source: int, config_id: str) -> str:
        return PALETTE[(source if self.multi else self.index[config_id]) % len(PALETTE)]

    def marker(self, config_id: str) -> str:
        return MARKERS[self.index[config_id] % len(MARKERS)] if self.multi else "o"

    def source_label(self, source: int) -> str:
        src = self.sources[source]
        return shown(f"{src.name} ({src.machine})")

    def legend(
        self, reference: bool = True, drawn: set[str] | None = None
    ) -> tuple[list[Any], list[str]]:
        """Legend entries: one per configuration (single source), or one per source (colour) and
        one per configuration (marker); only the configurations `drawn`, when given."""
        from matplotlib.lines import Line2D

        handles, labels = [], []
        if self.multi:
            for i in range(len(self.sources)):
                handles.append(Line2D([], [], color=PALETTE[i % len(PALETTE)], lw=2.5))
                labels.append(self.source_label(i))
        refs = {s.reference for s in self.sources}
        for cid, name in self.configs.items():
            if drawn is not None and cid not in drawn:
                continue
            is_ref = reference and cid in refs
            colour = "0.25" if self.multi else PALETTE[self.index[cid] % len(PALETTE)]
            marker = "*" if is_ref else self.marker(cid)
            handles.append(
                Line2D([], [], color=colour, marker=marker, ms=11 if is_ref else 6, ls="none")
            )
            labels.append(f"{name} (reference)" if is_ref and name != "baseline" else name)
        return handles, labels


def new_figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure as MplFigure

    return MplFigure(figsize=(width, height), layout="constrained")


MAX_LEGEND = 24  # entries: past it the legend outgrows the figure (200 configs were clipped)
MAX_LABEL = 60  # characters of a legend entry; a 10,000-character value ran off the figure


def legend_below(fig: Any, handles: list[Any], labels: list[str]) -> None:
    """The legend under the axes: each entry cut to MAX_LABEL characters, at most MAX_LEGEND
    entries (the last then says how many more: the tables name every configuration)."""
    from matplotlib.lines import Line2D

    labels = [
        label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "…" for label in labels
    ]
    if len(labels) > MAX_LEGEND:
        more = len(labels) - MAX_LEGEND + 1
        handles = [*handles[: MAX_LEGEND - 1], Line2D([], [], ls="none")]
        labels = [*labels[: MAX_LEGEND - 1], f"... and {more} more (the tables name each)"]
    longest = max((len(label) for label in labels), default=0)
    ncol = 1 if longest > 48 else 2 if longest > 28 else 3
    fig.legend(handles, labels, loc="outside lower center", ncol=min(ncol, len(labels)))


def complete_runs(source: Source, config_id: str) -> list[dict[str, Any]]:
    return [
        r
        for r in source.records
        if r["config_id"] == config_id
        and r["status"] in COMPLETE_STATUSES
        and r.get("accuracy") is not None
    ]


def mean_ci(values: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """(mean, ci_low, ci_high) of a quantity that cannot be negative (MiB, images/s): the
    interval stops at 0; none with fewer than 3 values (measure/intervals.py)."""
    mean, _, low, high = mean_interval([v for v in values if v is not None], bounds=(0, math.inf))
    return mean, low, high


def geometric_ci(values: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """(geometric mean, ci_low, ci_high) of a rate (images/s): the statistic the speed-ups are
    ratios of, so a bar's order is the table's (the arithmetic mean of rates is not)."""
    return geometric_interval([v for v in values if v is not None and v > 0])


def wrap_label(name: str, width: int = 34, lines: int = 3) -> str:
    """`name` wrapped at `width`, at most `lines` lines (cut with '…': a long value filled the
    axis with its letters over every other label)."""
    if len(name) > width * lines:
        name = name[: width * lines - 1] + "…"
    return textwrap.fill(name, width, break_long_words=True, break_on_hyphens=False)


RATIO_TICKS = (0.1, 0.2, 0.25, 0.5, 0.67, 0.8, 0.9, 0.95, 0.98, 0.99, 1.0, 1.01, 1.02, 1.05,
               1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0, 50.0, 100.0, 1000.0)  # fmt: skip


def ratio_ticks(low: float, high: float, most: int = 6) -> list[float]:
    """Readable speedup ticks within [low, high] on a log axis: 1× and, going out from it, those at
    least 1/`most` of the axis apart."""
    inside = [t for t in RATIO_TICKS if low <= t <= high]
    gap = math.log10(high / low) / most
    kept = [1.0]
    for side in ([t for t in inside if t > 1], [t for t in reversed(inside) if t < 1]):
        last = 1.0
        for tick in side:
            if abs(math.log10(tick / last)) >= gap:
                kept.append(tick)
                last = tick
    return sorted(kept)
