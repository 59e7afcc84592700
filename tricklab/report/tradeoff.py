"""Figure 1 of a report: accuracy against train time, and the Pareto front only where it is real.

Each configuration is a point at its mean accuracy and its geometric-mean train seconds, with the
95% intervals of its row (stats.config_stats: the accuracy's clipped to 0..100%, the time's from
the log times, above 0 s), so the figure shows the numbers of the results table. The Pareto front
joins the configurations no other one beats on both axes; a step of it is drawn as a front only
when it is significant: the slower configuration is more accurate and slower by Welch's 95%
intervals (accuracy, and log train seconds). A step the runs cannot tell from noise is dotted grey,
and the figure says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tricklab.measure.intervals import speedup_interval, welch
from tricklab.report.style import Styles, complete_runs, legend_below, new_figure

FRONT = "0.25"
NOT_SIGNIFICANT = "0.6"


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both time (lower) and accuracy (higher), by time."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or y > front[-1][1]:
            front.append((x, y))
    return front


def significant_step(fast: Sequence[dict[str, Any]], slow: Sequence[dict[str, Any]]) -> bool:
    """Whether the runs of `slow` are significantly more accurate and significantly slower than
    those of `fast` (both Welch 95% intervals exclude no change; 3 runs a side at least)."""
    _, low, _, _ = welch([r["accuracy"] for r in slow], [r["accuracy"] for r in fast])
    _, _, high, _ = speedup_interval(
        [r["train_seconds"] for r in fast], [r["train_seconds"] for r in slow]
    )
    return low is not None and low > 0 and high is not None and high < 1


def accuracy_vs_time(styles: Styles) -> Any | None:
    fig = new_figure(7.0, 4.8)
    ax = fig.subplots()
    drawn: set[str] = set()
    steps = {True: 0, False: 0}  # significant steps of the fronts drawn, and the others
    times: list[float] = []
    for si, source in enumerate(styles.sources):
        points: dict[tuple[float, float], str] = {}
        for row in source.rows:
            if row.n == 0 or row.train_seconds_geomean is None or row.accuracy_mean is None:
                continue
            x, y = row.train_seconds_geomean, row.accuracy_mean * 100
            xerr = _bar(x, row.train_seconds_ci_low, row.train_seconds_ci_high, 1)
            yerr = _bar(y, row.accuracy_ci_low, row.accuracy_ci_high, 100)
            _point(ax, (x, y, xerr, yerr), styles.colour(si, row.config_id), row, styles)
            points[(x, y)] = row.config_id
            times.append(x)
            drawn.add(row.config_id)
        front = pareto_front(list(points))
        for a, b in zip(front, front[1:]):
            real = significant_step(
                complete_runs(source, points[a]), complete_runs(source, points[b])
            )
            steps[real] += 1
            colour = (styles.colour(si, "") if styles.multi else FRONT) if real else NOT_SIGNIFICANT
            ax.plot(*zip(a, b), ls="--" if real else ":", lw=1.2 if real else 1, color=colour)
    if not drawn:
        return None
    if times and max(times) / min(times) > 10:  # configurations 10x apart in time: a log axis
        from matplotlib.ticker import FuncFormatter

        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    else:
        ax.set_xlim(left=0)
    low, high = ax.get_ylim()
    ax.set_ylim(max(low, 0), min(high, 100))
    ax.set_xlabel("train time per run (s, geometric mean)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy against train time (each configuration with its 95% CIs)")
    if steps[True] + steps[False] and not steps[True]:
        ax.text(
            0.02,
            0.02,
            "No Pareto front: no configuration is significantly more accurate and slower than\n"
            "a faster one (Welch 95%); the dotted line only joins the means.",
            transform=ax.transAxes,
            fontsize=8,
            color="0.3",
        )
    handles, labels = styles.legend(drawn=drawn)
    _front_legend(handles, labels, steps)
    legend_below(fig, handles, labels)
    return fig


def _bar(value: float, low: float | None, high: float | None, scale: float) -> Any:
    return None if low is None or high is None else [[value - low * scale], [high * scale - value]]


def _point(ax: Any, where: tuple[Any, ...], colour: str, row: Any, styles: Styles) -> None:
    x, y, xerr, yerr = where
    ref = row.is_reference
    ax.errorbar(
        x,
        y,
        xerr=xerr,
        yerr=yerr,
        fmt="*" if ref else styles.marker(row.config_id),
        ms=15 if ref else 7,
        color=colour,
        mec="black" if ref else colour,
        mew=0.8 if ref else 0.5,
        ecolor=colour,
        elinewidth=1.2,
        capsize=3,
        zorder=4 if ref else 3,
    )


def _front_legend(handles: list[Any], labels: list[str], steps: dict[bool, int]) -> None:
    from matplotlib.lines import Line2D

    if steps[True]:
        handles.append(Line2D([], [], ls="--", lw=1.2, color=FRONT))
        labels.append("Pareto front: each step significantly more accurate and slower (Welch 95%)")
    if steps[False]:
        handles.append(Line2D([], [], ls=":", lw=1, color=NOT_SIGNIFICANT))
        labels.append("not significant: the runs cannot tell these two apart on both axes")
