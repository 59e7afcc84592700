"""Confidence intervals and Welch's test with scipy, for speedrun summaries and experiment tables.

Every interval stays inside what is possible: `bounds` clips a mean's interval (an accuracy lies in
[0, 1]), and times get their interval on the log scale (`geometric_interval`), so it is never at or
below 0 s. An interval needs MIN_RUNS_FOR_INTERVAL runs on each side: with two, Student's t
quantile is 12.7 and the interval says nothing, so there is none (`too_few_words` says why).

No Optuna here: `tricklab speedrun` uses them on machines that only have torch.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95
# Fewer runs than this on a side give no interval, no test and no verdict (2 runs: t = 12.7).
MIN_RUNS_FOR_INTERVAL = 3
ACCURACY_BOUNDS = (0.0, 1.0)  # a fraction of the test images
DIFFERENCE_BOUNDS = (-1.0, 1.0)  # of two accuracies


def too_few_words(n: int) -> str:
    """What a table prints instead of an interval's numbers: 'n=2: too few runs for an interval'."""
    return f"n={n}: too few runs for an interval"


def _finite(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _clip(
    low: float | None, high: float | None, bounds: tuple[float, float] | None
) -> tuple[float | None, float | None]:
    if bounds is None or low is None or high is None:
        return low, high
    return max(low, bounds[0]), min(high, bounds[1])


def mean_interval(
    values: Sequence[float],
    confidence: float = CONFIDENCE,
    bounds: tuple[float, float] | None = None,
) -> tuple[float | None, float | None, float | None, float | None]:
    """(mean, std, ci_low, ci_high) of a sample; the interval is Student t around the mean,
    clipped to `bounds`; None below MIN_RUNS_FOR_INTERVAL values (std needs 2)."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return None, None, None, None
    mean = float(x.mean())
    if len(x) < 2:
        return mean, None, None, None
    std = float(x.std(ddof=1))
    if len(x) < MIN_RUNS_FOR_INTERVAL:
        return mean, std, None, None
    from scipy import stats as scipy_stats  # imported here: it takes seconds, --help should not

    sem = float(scipy_stats.sem(x))
    if sem == 0:
        return mean, std, mean, mean
    low, high = scipy_stats.t.interval(confidence, len(x) - 1, loc=mean, scale=sem)
    return (mean, std, *_clip(float(low), float(high), bounds))


def _exp(log_value: float | None) -> float | None:
    """e^value; past e^709 a float overflows: an interval that wide reads as unbounded (inf)."""
    if log_value is None:
        return None
    return math.exp(log_value) if log_value < 709 else math.inf


def geometric_interval(
    seconds: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float | None, float | None, float | None]:
    """(geometric mean, ci_low, ci_high) of positive times: Student t on the log times,
    exponentiated, so the interval is above 0 s (and the ratio of two geometric means is the
    speedup `speedup_interval` gives). None where a time is not positive."""
    if not len(seconds) or min(seconds) <= 0:
        return None, None, None
    mean, _, low, high = mean_interval(np.log(seconds), confidence)
    return _exp(mean), _exp(low), _exp(high)


def welch(
    a: Sequence[float],
    b: Sequence[float],
    confidence: float = CONFIDENCE,
    bounds: tuple[float, float] | None = None,
) -> tuple[float | None, float | None, float | None, float | None]:
    """(mean(a) - mean(b), ci_low, ci_high, p-value) by Welch's unequal-variance t-test; the
    interval clipped to `bounds`; no interval or p-value below MIN_RUNS_FOR_INTERVAL on a side."""
    if min(len(a), len(b)) < MIN_RUNS_FOR_INTERVAL:
        diff = float(np.mean(a) - np.mean(b)) if len(a) and len(b) else None
        return diff, None, None, None
    from scipy import stats as scipy_stats

    with warnings.catch_warnings():  # runs with (nearly) equal values: scipy warns, NaN -> None
        warnings.simplefilter("ignore", RuntimeWarning)
        result = scipy_stats.ttest_ind(a, b, equal_var=False)
        interval = result.confidence_interval(confidence)
    diff = float(np.mean(a) - np.mean(b))
    low, high = _clip(_finite(interval.low), _finite(interval.high), bounds)
    return diff, low, high, _finite(result.pvalue)


def speedup_interval(
    reference_seconds: Sequence[float], seconds: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float | None, float | None, float | None, float | None]:
    """(speedup, ci_low, ci_high, p-value): Welch on log seconds, exponentiated: the speedup is
    the ratio of the geometric means (`geometric_interval`), its interval above 0."""
    if not len(reference_seconds) or not len(seconds):
        return None, None, None, None
    if min(min(reference_seconds), min(seconds)) <= 0:
        return None, None, None, None
    diff, low, high, p = welch(np.log(reference_seconds), np.log(seconds), confidence)
    return _exp(diff), _exp(low), _exp(high), p
