"""The report's figures, drawn with matplotlib's object API (no pyplot, no global backend: PNG through
Agg) and saved as PNG and SVG:

1. accuracy against train time (tradeoff.py): every configuration a point with 95% CI bars on both
   axes, the Pareto front where its steps are significant, the baseline a star;
2. each change's effect against the baseline: accuracy difference (pp) and speedup (×) with 95%
   CIs, greyed where the interval includes no change (or there are too few runs);
3. training curves: validation accuracy and loss per epoch and per second of training, mean over
   seeds with a ±1 std band;
4. peak memory (on a GPU: the CUDA allocator's peak of the run; left out on a CPU, whose peak RSS
   is the process's over its whole life) and training throughput per configuration.

Colours, markers, legends and ticks are style.py's.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from tricklab.report.collect import Source
from tricklab.report.fmt import MIB
from tricklab.report.style import (
    NOISE,
    PALETTE,
    PNG_DPI,
    RC,
    Styles,
    complete_runs,
    geometric_ci,
    legend_below,
    mean_ci,
    new_figure,
    ratio_ticks,
    wrap_label,
)
from tricklab.report.tradeoff import accuracy_vs_time


@dataclass
class Figure:
    """One saved figure: its files and what the report says about it."""

    stem: str
    title: str
    caption: str
    files: list[Path] = field(default_factory=list)

    @property
    def png(self) -> Path:
        return next(p for p in self.files if p.suffix == ".png")

    @property
    def svg(self) -> Path:
        return next(p for p in self.files if p.suffix == ".svg")


# ---------------------------------------------------------------- 1. accuracy vs time: tradeoff.py


# ---------------------------------------------------------------- 2. effects vs baseline


def _comparisons(styles: Styles) -> list[tuple[str, list[tuple[int, Any]]]]:
    """(config id, [(source index, row)]) for every configuration compared with a reference."""
    out: dict[str, list[tuple[int, Any]]] = {}
    for si, source in enumerate(styles.sources):
        for row in source.rows:
            if not row.is_reference and row.accuracy_diff is not None:
                out.setdefault(row.config_id, []).append((si, row))
    return [(cid, out[cid]) for cid in styles.configs if cid in out]


def effects(styles: Styles) -> Any | None:
    compared = _comparisons(styles)
    if not compared:
        return None
    per_row = 0.38 + 0.16 * (len(styles.sources) - 1)
    fig = new_figure(8.0, 1.9 + per_row * len(compared))
    ax_acc, ax_speed = fig.subplots(1, 2, sharey=True)
    step = 0.6 / max(len(styles.sources), 1)
    for i, (cid, entries) in enumerate(compared):
        for si, row in entries:
            y = i + (si - (len(styles.sources) - 1) / 2) * step
            colour = styles.colour(si, cid)
            _effect_point(
                ax_acc,
                y,
                row.accuracy_diff * 100,
                row.accuracy_diff_ci_low,
                row.accuracy_diff_ci_high,
                100,
                row.verdict == "significant",
                colour,
                styles.marker(cid),
            )
            if row.speedup is not None:
                _effect_point(
                    ax_speed,
                    y,
                    row.speedup,
                    row.speedup_ci_low,
                    row.speedup_ci_high,
                    1,
                    row.time_verdict == "significant",
                    colour,
                    styles.marker(cid),
                )
    ax_acc.axvline(0, color="0.2", lw=0.9, zorder=1)
    ax_speed.axvline(1, color="0.2", lw=0.9, zorder=1)
    ax_speed.set_xscale("log")
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    speedups = [row.speedup for _, entries in compared for _, row in entries if row.speedup]
    if speedups:  # a wide interval runs off the axis; the points stay inside it, off its edges
        low, high = ax_speed.get_xlim()
        low, high = min(low, min(speedups) / 1.05), max(high, max(speedups) * 1.05)
        ax_speed.set_xlim(
            max(low, min(min(speedups) / 3, 0.8)), min(high, max(max(speedups) * 3, 1.25))
        )
    ax_speed.xaxis.set_major_locator(FixedLocator(ratio_ticks(*ax_speed.get_xlim())))
    ax_speed.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))

    ax_speed.xaxis.set_minor_locator(NullLocator())
    ax_speed.xaxis.set_minor_formatter(NullFormatter())
    ax_acc.set_yticks(range(len(compared)))
    ax_acc.set_yticklabels([wrap_label(styles.configs[cid]) for cid, _ in compared])
    ax_acc.set_ylim(len(compared) - 0.5, -0.5)
    ax_acc.set_xlabel("accuracy change (percentage points)")
    ax_speed.set_xlabel("speedup (×, log scale)")
    ax_acc.set_title("Accuracy vs the reference")
    ax_speed.set_title("Speed vs the reference (> 1×: faster)")
    for ax in (ax_acc, ax_speed):
        ax.grid(axis="y", visible=False)
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], marker="o", color="0.25", ls="-", lw=1.2),
        Line2D([], [], marker="o", color=NOISE, mfc="white", ls="-", lw=1.2),
    ]
    labels = [
        "95% CI excludes no change (significant)",
        "not significant (grey, hollow): 95% CI includes no change, too few runs,"
        " or not after the Benjamini-Hochberg correction",
    ]
    if styles.multi:
        for i in range(len(styles.sources)):
            handles.append(Line2D([], [], color=PALETTE[i % len(PALETTE)], lw=2.5))
            labels.append(styles.source_label(i))
    legend_below(fig, handles, labels)
    return fig


def _effect_point(
    ax: Any,
    y: float,
    value: float,
    low: float | None,
    high: float | None,
    scale: float,
    significant: bool,
    colour: str,
    marker: str,
) -> None:
    shown = colour if significant else NOISE
    xerr = None
    if low is not None and high is not None:
        xerr = [[value - low * scale], [high * scale - value]]
    ax.errorbar(
        value,
        y,
        xerr=xerr,
        fmt=marker,
        ms=7,
        color=shown,
        mfc=shown if significant else "white",
        mec=shown,
        ecolor=shown,
        elinewidth=1.6,
        capsize=3,
        zorder=3,
    )


# ---------------------------------------------------------------- 3. training curves


MAX_CURVE_POINTS = 500  # per line: far more than a figure 8 inches wide can tell apart


def _curve(runs: list[dict[str, Any]], metric: str) -> tuple[np.ndarray, ...] | None:
    """(epoch, mean seconds, mean, std) per epoch over the runs that evaluated it."""
    by_epoch: dict[int, list[tuple[float, float]]] = {}
    for run in runs:
        for row in run.get("epochs") or []:
            value, secs = row.get(metric), row.get("train_seconds")
            if value is None or secs is None or not math.isfinite(value):
                continue
            by_epoch.setdefault(int(row.get("epoch", 0)), []).append((float(value), float(secs)))
    if not by_epoch:
        return None
    epochs = sorted(by_epoch)
    if len(epochs) > MAX_CURVE_POINTS:  # 700,000 rows drew a 220 MB SVG; a line shows no more
        picks = np.unique(np.linspace(0, len(epochs) - 1, MAX_CURVE_POINTS).round().astype(int))
        epochs = [epochs[i] for i in picks]
    values = [np.array([v for v, _ in by_epoch[e]]) for e in epochs]
    return (
        np.array(epochs, dtype=float),
        np.array([np.mean([s for _, s in by_epoch[e]]) for e in epochs]),
        np.array([v.mean() for v in values]),
        np.array([v.std(ddof=1) if len(v) > 1 else 0.0 for v in values]),
    )


def curves(styles: Styles) -> Any | None:
    fig = new_figure(8.0, 6.4)
    axes = fig.subplots(2, 2)
    drawn: set[str] = set()
    for si, source in enumerate(styles.sources):
        for row in source.rows:
            runs = complete_runs(source, row.config_id)
            colour = styles.colour(si, row.config_id)
            style = {"color": colour, "marker": styles.marker(row.config_id), "ms": 3.5, "lw": 1.4}
            for line, (metric, scale) in enumerate((("val_acc", 100.0), ("val_loss", 1.0))):
                curve = _curve(runs, metric)
                if curve is None:
                    continue
                epochs, secs, mean, std = curve
                for col, x in enumerate((epochs, secs)):
                    ax = axes[line][col]
                    ax.plot(x, mean * scale, **style)
                    drawn.add(row.config_id)
                    ax.fill_between(
                        x,
                        (mean - std) * scale,
                        (mean + std) * scale,
                        color=colour,
                        alpha=0.15,
                        lw=0,
                    )
    if not drawn:
        return None
    from matplotlib.ticker import MaxNLocator

    for line, label in enumerate(("validation accuracy (%)", "validation loss")):
        axes[line][0].set_ylabel(label)
        axes[line][0].set_xlabel("epoch")
        axes[line][0].xaxis.set_major_locator(MaxNLocator(integer=True))
        axes[line][1].set_xlabel("train time (s, mean over seeds)")
    axes[0][0].set_title("per epoch")
    axes[0][1].set_title("per second of training")
    fig.suptitle("Training curves (mean over seeds, band ±1 std)", fontsize=10)
    handles, labels = styles.legend(reference=False, drawn=drawn)
    legend_below(fig, handles, labels)
    return fig


# ---------------------------------------------------------------- 4. memory and throughput


def _on_cpu(source: Source) -> bool:
    return source.hardware.get("device_type") == "cpu"


def memory_throughput(styles: Styles) -> Any | None:
    bars = []  # (y label config id, source index, memory MiB runs, images/s runs)
    for si, source in enumerate(styles.sources):
        for row in source.rows:
            runs = complete_runs(source, row.config_id)
            # a CPU's peak RSS is the process's whole life, earlier runs included: not one run's
            memory = [
                r["peak_memory_bytes"] / MIB
                for r in runs
                if r.get("peak_memory_bytes") and not _on_cpu(source)
            ]
            speed = [r["images_per_second"] for r in runs if r.get("images_per_second")]
            if memory or speed:
                bars.append((row.config_id, si, memory, speed))
    if not bars:
        return None
    with_memory = any(b[2] for b in bars)
    configs = [cid for cid in styles.configs if any(b[0] == cid for b in bars)]
    per_row = 0.36 + 0.16 * (len(styles.sources) - 1)
    fig = new_figure(8.0 if with_memory else 7.0, 1.7 + per_row * len(configs))
    axes = list(fig.subplots(1, 2, sharey=True)) if with_memory else [None, fig.subplots()]
    height = 0.7 / len(styles.sources)
    for cid, si, memory, speed in bars:
        y = configs.index(cid) + (si - (len(styles.sources) - 1) / 2) * height
        for ax, values, centre in zip(axes, (memory, speed), (mean_ci, geometric_ci)):
            if ax is None:
                continue
            mean, low, high = centre(values)
            if mean is None:
                continue
            xerr = None if low is None else [[mean - low], [high - mean]]
            ax.barh(
                y,
                mean,
                height=height * 0.9,
                color=styles.colour(si, cid),
                xerr=xerr,
                capsize=3,
                error_kw={"elinewidth": 1, "ecolor": "0.2"},
            )
            end = mean if high is None else high
            ax.text(end, y, f"  {mean:,.0f}", va="center", ha="left", fontsize=8)
    from matplotlib.ticker import FuncFormatter

    shown = [ax for ax in axes if ax is not None]
    for ax in shown:
        ax.set_xlim(0, ax.get_xlim()[1] * 1.25)  # room for the value labels
        ax.grid(axis="y", visible=False)
        ax.xaxis.set_major_formatter(
            FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}")
        )
    shown[0].set_yticks(range(len(configs)))
    shown[0].set_yticklabels([wrap_label(styles.configs[cid]) for cid in configs])
    shown[0].set_ylim(len(configs) - 0.5, -0.5)
    if with_memory:
        axes[0].set_xlabel("peak memory (MiB, CUDA allocator's peak of the run)")
        axes[0].set_title("Peak memory")
    axes[1].set_xlabel("training throughput (images/s, geometric mean, as the speed-ups)")
    axes[1].set_title("Throughput")
    if styles.multi:
        from matplotlib.patches import Patch

        handles = [Patch(color=PALETTE[i % len(PALETTE)]) for i in range(len(styles.sources))]
        legend_below(fig, handles, [styles.source_label(i) for i in range(len(styles.sources))])
    return fig


# ---------------------------------------------------------------- all of them


def _memory_caption(styles: Styles) -> str:
    text = (
        "Over complete runs: throughput the geometric mean (as the speed-ups), peak memory the"
        " mean; error bars the 95% CI where there are three runs or more."
    )
    if any(_on_cpu(s) for s in styles.sources):
        text += (
            " Peak memory is left out for runs on a CPU: there it is the process's peak resident"
            " set size over its whole life, earlier runs included, not the peak of one run."
        )
    return text


FIGURES = (
    (
        "accuracy_vs_time",
        "Accuracy against train time",
        accuracy_vs_time,
        "Each point is one configuration: mean accuracy (with TTA where the recipe has it) and"
        " geometric-mean train seconds over its complete runs (the results table's numbers), bars"
        " the 95% CIs (none with fewer than 3 runs). The star is the reference. The dashed line"
        " (Pareto front) joins configurations no other one beats on both accuracy and time, drawn"
        " only where the slower one is significantly more accurate and significantly slower"
        " (Welch 95%); a dotted grey step is one the runs cannot tell from noise.",
    ),
    (
        "effects",
        "Effect of each change against the reference",
        effects,
        "Accuracy difference (percentage points, Welch 95% CI) and speedup (reference time /"
        " configuration time, ratio of geometric means with its Welch 95% CI on log seconds)."
        " Grey hollow points are not significant: the interval includes no change, there are too"
        " few runs, or the Benjamini-Hochberg adjustment takes the change back.",
    ),
    (
        "training_curves",
        "Training curves",
        curves,
        "Validation accuracy and loss after each epoch, against the epoch and against the train"
        " seconds elapsed, mean over the seeds of each configuration with a band of ±1 standard"
        " deviation. Per-epoch evaluations are without TTA, so a change that acts only on the final"
        " evaluation (tricks.tta) trains the same weights seed for seed: its curve lies on the"
        " reference's and hides it.",
    ),
    ("memory_throughput", "Peak memory and throughput", memory_throughput, None),
)


def _quiet_matplotlib() -> ModuleType:
    """matplotlib, imported without its warnings about a config or cache folder it cannot use
    (MPLCONFIGDIR or XDG_CONFIG_HOME naming a file): it then uses a temporary one, which serves
    a report as well, so its two lines on stderr would only alarm. MPLBACKEND is set aside: a
    report draws on Figure objects into files, with no backend of pyplot's (a name matplotlib
    does not know was a ValueError traceback)."""
    logger = logging.getLogger("matplotlib")
    level, logger.level = logger.level, logging.ERROR
    backend = os.environ.pop("MPLBACKEND", None)
    try:
        import matplotlib
        import matplotlib.font_manager  # noqa: F401 (builds its font cache: warns there too)
    finally:
        logger.setLevel(level)
        if backend is not None:
            os.environ["MPLBACKEND"] = backend
    return matplotlib


def render_figures(sources: Sequence[Source], folder: Path) -> list[Figure]:
    """Draw and save every figure the data allows into `folder`; figures without data are left
    out (the report says why)."""
    matplotlib = _quiet_matplotlib()
    styles = Styles(sources)
    made = []
    # matplotlib's defaults and tricklab's style, whatever a matplotlibrc (the folder's, the
    # user's, $MATPLOTLIBRC) says: text.usetex without LaTeX, an empty color cycle or a missing
    # font failed or flooded the report
    defaults = {k: v for k, v in matplotlib.rcParamsDefault.items() if not k.startswith("backend")}
    with matplotlib.rc_context({**defaults, **RC}):
        for stem, title, draw, caption in FIGURES:
            fig = draw(styles)
            if fig is None:
                continue
            folder.mkdir(parents=True, exist_ok=True)
            files = [folder / f"{stem}.png", folder / f"{stem}.svg"]
            fig.savefig(files[0], dpi=PNG_DPI, metadata={"Software": None})
            fig.savefig(files[1], metadata={"Date": None, "Creator": None})
            if stem == "memory_throughput" and len(fig.axes) == 1:  # memory left out (a CPU)
                title = "Throughput"
            made.append(Figure(stem, title, caption or _memory_caption(styles), files))
    return made
