"""Confidence intervals and Welch's test with scipy, for speedrun summaries and experiment tables.

No Optuna here: `tricklab speedrun` uses them on machines that only have torch.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95


def _finite(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def mean_interval(
    values: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float | None, float | None, float | None, float | None]:
    """(mean, std, ci_low, ci_high) of a sample; the interval is Student t around the mean."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return None, None, None, None
    mean = float(x.mean())
    if len(x) < 2:
        return mean, None, None, None
    from scipy import stats as scipy_stats  # imported here: it takes seconds, --help should not

    std = float(x.std(ddof=1))
    sem = float(scipy_stats.sem(x))
    if sem == 0:
        return mean, std, mean, mean
    low, high = scipy_stats.t.interval(confidence, len(x) - 1, loc=mean, scale=sem)
    return mean, std, float(low), float(high)


def welch(
    a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float | None, float | None, float | None, float | None]:
    """(mean(a) - mean(b), ci_low, ci_high, p-value) by Welch's unequal-variance t-test."""
    if len(a) < 2 or len(b) < 2:
        diff = float(np.mean(a) - np.mean(b)) if len(a) and len(b) else None
        return diff, None, None, None
    from scipy import stats as scipy_stats

    with warnings.catch_warnings():  # runs with (nearly) equal values: scipy warns, NaN -> None
        warnings.simplefilter("ignore", RuntimeWarning)
        result = scipy_stats.ttest_ind(a, b, equal_var=False)
        interval = result.confidence_interval(confidence)
    diff = float(np.mean(a) - np.mean(b))
    return diff, _finite(interval.low), _finite(interval.high), _finite(result.pvalue)


def speedup_interval(
    reference_seconds: Sequence[float], seconds: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float | None, float | None, float | None, float | None]:
    """(speedup, ci_low, ci_high, p-value): Welch on log seconds, exponentiated (see module doc)."""
    if not len(reference_seconds) or not len(seconds):
        return None, None, None, None
    if min(min(reference_seconds), min(seconds)) <= 0:
        return None, None, None, None
    diff, low, high, p = welch(np.log(reference_seconds), np.log(seconds), confidence)
    exp = lambda v: None if v is None else math.exp(v)  # noqa: E731
    return exp(diff), exp(low), exp(high), p
