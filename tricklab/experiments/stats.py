"""Statistics of an experiment: one row per configuration, compared with the reference.

Per configuration (complete runs only):
- accuracy mean ± std (ddof=1), its interval (Student t, `scipy.stats.t.interval`) clipped to
  [0, 1]; accuracy is the TTA accuracy when the run used TTA, else the plain validation accuracy;
- train seconds: mean ± std, and the geometric mean with its interval (Student t on the log
  times, exponentiated: above 0 s), the statistic the speedup divides;
- against the reference (an ablation's `baseline`; a sweep's best mean accuracy unless named):
  the accuracy difference with Welch's interval and p-value (`scipy.stats.ttest_ind(equal_var=
  False)`); the row is "within noise" when that interval contains 0;
- speedup = reference time / config time, as the ratio of geometric means: Welch's test on the
  log train seconds gives its point estimate exp(mean log t_ref - mean log t), its interval
  (exponentiated) and the time p-value, so the interval and p-value agree;
- where the config and the reference completed the same seeds (same initialisation, same data
  order), also the paired t-test over those seeds (`scipy.stats.ttest_rel`): the mean per-seed
  accuracy difference with its interval and p-value, and the paired p-value of the log times;
- with more than 3 rows, each family of p-values (Welch accuracy, paired accuracy, time) adjusted
  for the number of comparisons by Benjamini-Hochberg (`scipy.stats.false_discovery_control`);
- runs reaching the target accuracy, out of the runs that trained to the end or diverged
  (Page's "4/5 runs reached 94%"; `outcomes.target_counts`, as `tricklab speedrun` counts:
  a crash is no training outcome); failures by kind;
- a verdict for accuracy and one for time: "significant" when the 95% interval excludes no change
  (and, with more than 3 rows, the adjusted p-value is below 0.05), "within noise" when it
  includes it, "not significant after BH" when only the adjustment takes it back, "too few runs"
  with fewer than MIN_RUNS_FOR_INTERVAL (3) runs on a side, NO_RUN when a side has no complete
  run (the row's own, or the reference's: said which). The verdict uses Welch's interval:
  the paired test is reported beside it, not used to call a change, so a verdict never rests on
  the pairing alone;
- planned and done: with the study's plan (`planned`), how many runs each configuration was to
  make, and a row for each planned configuration that has none yet.
Intervals, tests and verdicts need 3 runs a side (at 2, Student's t quantile is 12.7): None else.

The runs come from `records.collect_runs` (re-exported here): each (configuration, seed) once.
"""

from __future__ import annotations

import csv
import math
import os
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from tricklab.core.errors import TrickLabError
from tricklab.core.outfiles import check_replaceable, file_path
from tricklab.core.paths import atomic_write
from tricklab.core.safeio import csv_cell
from tricklab.core.status import (
    COMPLETE_STATUSES,
    DONE_STATUSES,
    Status,
    fraction_at_target,
    target_counts,
)
from tricklab.experiments.plan import BASELINE
from tricklab.experiments.records import collect_runs, headline_accuracy, resolve_reference
from tricklab.measure.intervals import (
    ACCURACY_BOUNDS,
    CONFIDENCE,
    DIFFERENCE_BOUNDS,
    MIN_RUNS_FOR_INTERVAL,
    geometric_interval,
    mean_interval,
    speedup_interval,
    welch,
)

__all__ = [
    "ConfigStats",
    "collect_runs",
    "config_stats",
    "headline_accuracy",
    "planned_runs",
    "write_csv",
]

NO_RUN, NO_REFERENCE_RUN = "no complete run", "no reference run"  # the verdicts of no comparison
FAILURE_KINDS = (Status.DIVERGED, Status.OOM, Status.FAILED, Status.PRUNED, Status.INTERRUPTED)


@dataclass
class ConfigStats:
    """One configuration's row of the results table (None where there is too little data)."""

    config_id: str
    overrides: list[str]
    is_reference: bool = False
    picked_best: bool = False  # the reference: the best mean accuracy, picked after the runs
    n: int = 0  # complete runs
    planned: int | None = None  # runs the study's plan gives it (None: no plan known)
    done: int = 0  # runs with a final outcome (complete, diverged, pruned): not run again
    accuracy_mean: float | None = None
    accuracy_std: float | None = None
    accuracy_ci_low: float | None = None
    accuracy_ci_high: float | None = None
    train_seconds_mean: float | None = None
    train_seconds_std: float | None = None
    # The geometric mean and its interval: the speedup is the ratio of two of these.
    train_seconds_geomean: float | None = None
    train_seconds_ci_low: float | None = None
    train_seconds_ci_high: float | None = None
    accuracy_diff: float | None = None  # config - reference
    accuracy_diff_ci_low: float | None = None
    accuracy_diff_ci_high: float | None = None
    accuracy_p_value: float | None = None
    speedup: float | None = None  # > 1: faster than the reference
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    time_p_value: float | None = None
    within_noise: bool | None = None
    target: float | None = None
    reached_target: int = 0
    target_runs: int = 0
    fraction_reached_target: float | None = None
    time_to_target_seconds_mean: float | None = None
    failures: dict[str, int] = field(default_factory=dict)
    pending: int = 0  # runs waiting or running now
    # The paired test over the seeds this config and the reference both completed.
    paired_n: int = 0
    accuracy_paired_diff: float | None = None
    accuracy_paired_diff_ci_low: float | None = None
    accuracy_paired_diff_ci_high: float | None = None
    accuracy_paired_p_value: float | None = None
    accuracy_identical_per_seed: bool = False  # every paired seed gave exactly the same accuracy
    # ... and every run of both sides has its pair: the difference of the means is 0 too
    accuracy_identical_throughout: bool = False
    time_paired_p_value: float | None = None
    # Benjamini-Hochberg adjusted p-values (tables of more than 3 rows), one family per column.
    accuracy_p_adjusted: float | None = None
    accuracy_paired_p_adjusted: float | None = None
    time_p_adjusted: float | None = None
    verdict: str | None = None  # accuracy: reference | significant | within noise | ...
    time_verdict: str | None = None  # train time, from the speedup's interval

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfigStats:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def config_stats(
    records: Iterable[dict[str, Any]],
    *,
    reference: str | None = None,
    target: float | None = None,
    confidence: float = CONFIDENCE,
    order: str = "appearance",
    planned: Mapping[str, int] | None = None,
) -> list[ConfigStats]:
    """The results table from run records (`collect_runs`). The reference is `reference`, else
    `baseline`, else the best mean accuracy (`picked_best`: chosen after the runs). `order`:
    "appearance" (reference, then the plan's order, then as first run, however the runs were
    ordered) or "accuracy" (reference, then best first). `planned`: {config id: runs} of the
    study's plan; a planned configuration with no run yet gets a row of its own (n=0)."""
    groups: dict[str, list[dict[str, Any]]] = {cid: [] for cid in planned or {}}
    for record in records:
        groups.setdefault(record["config_id"], []).append(record)
    rows = {
        cid: _describe(cid, recs, target, confidence) if recs else ConfigStats(cid, [])
        for cid, recs in groups.items()
    }
    for cid, runs in (planned or {}).items():
        rows[cid].planned = runs
    if not rows:
        return []
    picked = reference is None and BASELINE not in rows  # the best, chosen after the runs
    if picked:
        scored = [r for r in rows.values() if r.accuracy_mean is not None]
        reference = max(scored, key=lambda r: r.accuracy_mean).config_id if scored else None
    elif reference is None:
        reference = BASELINE
    else:  # its id, or its overrides as the tables show them (`optim.lr=1e+30`)
        reference = resolve_reference(reference, list(rows))
    if reference is not None:
        ref = rows[reference]
        ref.is_reference, ref.picked_best = True, picked
        for cid, row in rows.items():
            if cid != reference:
                _compare(row, groups[cid], groups[reference], confidence)
        if len(rows) > 3:
            _adjust_p_values(list(rows.values()))
    for row in rows.values():
        row.verdict, row.time_verdict = _verdicts(row, 1 - confidence)
        if not row.is_reference and row.verdict is None:  # a side with no complete run
            row.verdict = row.time_verdict = NO_RUN if row.n == 0 else NO_REFERENCE_RUN
    ordered = list(rows.values())
    if order == "accuracy":
        ordered.sort(key=lambda r: -(r.accuracy_mean if r.accuracy_mean is not None else -1))
    ordered.sort(key=lambda r: not r.is_reference)
    return ordered


def planned_runs(
    attrs: Mapping[str, Any], records: Iterable[dict[str, Any]]
) -> dict[str, int] | None:
    """{config id: runs} of a study's plan (its user attrs `seeds` and, for an ablation, `configs`;
    a sweep's configurations are those drawn so far); None when the study stores no plan. A
    configuration holding more seeds than the latest call's `--seeds` (an earlier call asked for
    more) plans those it holds: no row is done beyond its plan."""
    seeds = attrs.get("seeds")
    if not isinstance(seeds, int) or isinstance(seeds, bool):
        return None
    configs = attrs.get("configs") if attrs.get("kind") == "ablation" else None
    ids = list(configs) if isinstance(configs, list) else []
    held = Counter(r["config_id"] for r in records)
    ids += [cid for cid in held if cid not in ids]
    return {cid: max(seeds, held[cid]) for cid in ids}


def _samples(records: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    done = [
        r for r in records if r["status"] in COMPLETE_STATUSES and r.get("accuracy") is not None
    ]
    return [float(r["accuracy"]) for r in done], [float(r["train_seconds"]) for r in done]


def _describe(
    config_id: str, records: list[dict[str, Any]], target: float | None, confidence: float
) -> ConfigStats:
    accuracies, seconds = _samples(records)
    row = ConfigStats(config_id=config_id, overrides=list(records[0].get("overrides", [])))
    row.n = len(accuracies)
    row.accuracy_mean, row.accuracy_std, row.accuracy_ci_low, row.accuracy_ci_high = mean_interval(
        accuracies, confidence, ACCURACY_BOUNDS
    )
    row.train_seconds_mean, row.train_seconds_std, _, _ = mean_interval(seconds, confidence)
    row.train_seconds_geomean, row.train_seconds_ci_low, row.train_seconds_ci_high = (
        geometric_interval(seconds, confidence)
    )
    statuses = Counter(r["status"] for r in records)
    row.done = sum(statuses[s] for s in DONE_STATUSES)
    row.failures = {kind: statuses[kind] for kind in FAILURE_KINDS if statuses[kind]}
    row.pending = statuses[Status.RUNNING] + statuses[Status.WAITING]
    targets = [r.get("target_accuracy") for r in records if r.get("target_accuracy") is not None]
    row.target = (
        target
        if target is not None
        else (Counter(targets).most_common(1)[0][0] if targets else None)
    )
    if row.target is not None:
        outcomes = [(r["status"], r.get("accuracy")) for r in records]
        row.reached_target, row.target_runs = target_counts(outcomes, row.target)
        row.fraction_reached_target = fraction_at_target(outcomes, row.target)
        # The time of the runs counted as reaching it (a run touching it mid-way, ending below: not)
        reached = [
            r for r in records if target_counts([(r["status"], r.get("accuracy"))], row.target)[0]
        ]
        times = [t for t in (_time_to(row.target, r) for r in reached) if t is not None]
        row.time_to_target_seconds_mean = float(np.mean(times)) if times else None
    return row


def _time_to(target: float, record: dict[str, Any]) -> float | None:
    """Train seconds at the first evaluation reaching `target`, from the run's epochs (so a
    `results --target` other than the recipe's is timed against itself), else as the run stored it."""
    rows = record.get("epochs")
    if not rows:
        stored = record.get("time_to_target_seconds")
        same = record.get("target_accuracy") == target
        return float(stored) if stored is not None and same else None
    return next(
        (
            float(e["train_seconds"])
            for e in rows
            if e.get("val_acc") is not None
            and e["val_acc"] >= target
            and e.get("train_seconds") is not None
        ),
        None,
    )


def _compare(
    row: ConfigStats,
    records: list[dict[str, Any]],
    ref_records: list[dict[str, Any]],
    confidence: float,
) -> None:
    accuracies, seconds = _samples(records)
    ref_acc, ref_time = _samples(ref_records)
    if not accuracies or not ref_acc:
        return
    row.accuracy_diff, row.accuracy_diff_ci_low, row.accuracy_diff_ci_high, row.accuracy_p_value = (
        welch(accuracies, ref_acc, confidence, DIFFERENCE_BOUNDS)
    )
    if row.accuracy_diff_ci_low is not None and row.accuracy_diff_ci_high is not None:
        row.within_noise = row.accuracy_diff_ci_low <= 0 <= row.accuracy_diff_ci_high
    row.speedup, row.speedup_ci_low, row.speedup_ci_high, row.time_p_value = speedup_interval(
        ref_time, seconds, confidence
    )
    _compare_paired(row, _by_seed(records), _by_seed(ref_records), confidence)


def _by_seed(records: list[dict[str, Any]]) -> dict[int, tuple[float, float]]:
    """{seed: (accuracy, train seconds)} of the complete runs."""
    return {
        int(r.get("seed", 0)): (float(r["accuracy"]), float(r["train_seconds"]))
        for r in records
        if r["status"] in COMPLETE_STATUSES and r.get("accuracy") is not None
    }


def _compare_paired(
    row: ConfigStats,
    runs: dict[int, tuple[float, float]],
    ref_runs: dict[int, tuple[float, float]],
    confidence: float,
) -> None:
    """The paired t-test over the seeds both completed (`scipy.stats.ttest_rel`)."""
    seeds = sorted(set(runs) & set(ref_runs))
    row.paired_n = len(seeds)
    if not seeds:
        return
    acc = np.array([runs[s][0] for s in seeds])
    ref_acc = np.array([ref_runs[s][0] for s in seeds])
    row.accuracy_paired_diff = float(np.mean(acc - ref_acc))
    row.accuracy_identical_per_seed = bool(np.all(acc == ref_acc))
    row.accuracy_identical_throughout = row.accuracy_identical_per_seed and (
        len(seeds) == len(runs) == len(ref_runs)
    )
    if len(seeds) < MIN_RUNS_FOR_INTERVAL:
        return
    if row.accuracy_identical_per_seed:  # no spread to test: the same numbers, seed for seed
        row.accuracy_paired_diff_ci_low = row.accuracy_paired_diff_ci_high = 0.0
        row.accuracy_paired_p_value = 1.0
    else:
        result = _ttest_rel(acc, ref_acc)
        interval = result.confidence_interval(confidence)
        low, high = _finite(interval.low), _finite(interval.high)
        row.accuracy_paired_diff_ci_low = None if low is None else max(low, DIFFERENCE_BOUNDS[0])
        row.accuracy_paired_diff_ci_high = None if high is None else min(high, DIFFERENCE_BOUNDS[1])
        row.accuracy_paired_p_value = _finite(result.pvalue)
    seconds = np.array([runs[s][1] for s in seeds])
    ref_seconds = np.array([ref_runs[s][1] for s in seeds])
    if min(seconds.min(), ref_seconds.min()) > 0:
        row.time_paired_p_value = _finite(_ttest_rel(np.log(ref_seconds), np.log(seconds)).pvalue)


def _ttest_rel(a: np.ndarray, b: np.ndarray) -> Any:
    from scipy import stats as scipy_stats

    with warnings.catch_warnings():  # equal differences: scipy warns and gives NaN -> None
        warnings.simplefilter("ignore", RuntimeWarning)
        return scipy_stats.ttest_rel(a, b)


def _finite(value: Any) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def benjamini_hochberg(p_values: Sequence[float | None]) -> list[float | None]:
    """Benjamini-Hochberg adjusted p-values (`scipy.stats.false_discovery_control`); None stays
    None and is not counted as a comparison."""
    from scipy import stats as scipy_stats

    present = [i for i, p in enumerate(p_values) if p is not None]
    adjusted: list[float | None] = [None] * len(p_values)
    if present:
        values = scipy_stats.false_discovery_control([p_values[i] for i in present], method="bh")
        for i, value in zip(present, values):
            adjusted[i] = float(value)
    return adjusted


def _adjust_p_values(rows: list[ConfigStats]) -> None:
    for raw, adjusted in (
        ("accuracy_p_value", "accuracy_p_adjusted"),
        ("accuracy_paired_p_value", "accuracy_paired_p_adjusted"),
        ("time_p_value", "time_p_adjusted"),
    ):
        for row, value in zip(rows, benjamini_hochberg([getattr(r, raw) for r in rows])):
            setattr(row, adjusted, value)


def _verdicts(row: ConfigStats, alpha: float) -> tuple[str | None, str | None]:
    """(accuracy verdict, time verdict), see the module doc."""
    if row.is_reference:
        return "reference", "reference"
    accuracy = _verdict(
        row.accuracy_diff,
        row.accuracy_diff_ci_low,
        row.accuracy_diff_ci_high,
        0.0,
        row.accuracy_p_adjusted,
        alpha,
    )
    time = _verdict(
        row.speedup, row.speedup_ci_low, row.speedup_ci_high, 1.0, row.time_p_adjusted, alpha
    )
    return accuracy, time


def _verdict(
    estimate: float | None,
    low: float | None,
    high: float | None,
    no_change: float,
    adjusted_p: float | None,
    alpha: float,
) -> str | None:
    if estimate is None:
        return None  # nothing complete on one side
    if low is None or high is None:
        return "too few runs"
    if low <= no_change <= high:
        return "within noise"
    if adjusted_p is not None and adjusted_p >= alpha:
        return "not significant after BH"
    return "significant"


# ---------------------------------------------------------------- output


def write_csv(rows: Sequence[ConfigStats], path: str | Path) -> None:
    """One line per configuration; overrides space-joined, failures one column per kind."""
    names = [f.name for f in fields(ConfigStats) if f.name != "failures"]
    header = names + [f"failures_{kind}" for kind in FAILURE_KINDS]
    path = file_path(path, "--csv")
    if not path.parent.is_dir():  # a reader makes no folder: a typo in it would go unseen
        what = "is not a folder" if path.parent.exists() else "does not exist"
        raise TrickLabError(f"cannot write the CSV file {path}: {path.parent} {what}")
    # a CSV it wrote, not a run's result.json or the study's empty lock file
    check_replaceable(path, "--csv", holds=",".join(header).encode() + b"\r\n", at_start=True)
    # A rename would replace a file the user may not write (root too: its mode says read-only).
    if path.is_file() and (not os.access(path, os.W_OK) or not path.stat().st_mode & 0o200):
        raise TrickLabError(f"cannot write the CSV file {path}: it is read-only")
    try:
        with atomic_write(path, newline="") as handle:  # whole or not at all
            writer = csv.writer(handle)
            writer.writerow(header)
            for row in rows:
                data = row.to_dict()
                data["overrides"] = " ".join(row.overrides)
                cells = [csv_cell(data[n]) for n in names]  # no formula, no line break
                writer.writerow(cells + [row.failures.get(kind, 0) for kind in FAILURE_KINDS])
    except OSError as exc:
        raise TrickLabError(f"cannot write the CSV file {path}: {exc.strerror or exc}") from None
