"""Timing contenders fairly: warm-up apart, device-synchronised, interleaved round by round.

Shared by `tricklab profile` (model, step, loader). On a shared machine the load drifts; when every
contender takes one turn per round, in an order rotated each round, a drift reaches all of them,
and the ratios (or differences) taken within a round stay sound. Summaries are medians, with the
interquartile range and min..max as the spread, as torch.utils.benchmark reports them.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from tricklab.core.device import synchronize
from tricklab.core.errors import TrickLabError
from tricklab.core.progress import stage

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000


def timed_call(fn: Callable[[], object], number: int, device: torch.device) -> float:
    """Seconds per call of `fn`, called `number` times back to back between two syncs."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(number):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / number


def calls_per_sample(seconds_per_call: float, min_sample_seconds: float, max_calls: int) -> int:
    """How many calls make one timed sample last at least `min_sample_seconds` (timer resolution
    and launch jitter then weigh little), at most `max_calls`."""
    if seconds_per_call <= 0:
        return max_calls
    return max(1, min(max_calls, math.ceil(min_sample_seconds / seconds_per_call)))


@dataclass(frozen=True)
class Contender:
    """One thing to time: `fn` does one call (a step, a forward, a batch); `number` calls a sample;
    `before`, untimed, puts things as `fn` needs them (a model's train/eval mode)."""

    name: str
    fn: Callable[[], object]
    number: int = 1
    before: Callable[[], object] | None = None


def interleave(
    contenders: Sequence[Contender], repeats: int, device: torch.device
) -> dict[str, list[float]]:
    """Seconds per call of each contender, one sample per round, `repeats` rounds; the order is
    rotated each round so no contender always runs first (after a pause) or last."""
    if repeats < 1:
        raise TrickLabError(f"repeats must be >= 1, got {repeats}")
    samples: dict[str, list[float]] = {c.name: [] for c in contenders}
    calls = repeats * len(contenders)
    with stage(f"timing {len(contenders)} × {repeats} rounds", calls) as timed:  # the CLI's bar
        for round_number in range(repeats):
            shift = round_number % len(contenders) if contenders else 0
            for contender in [*contenders[shift:], *contenders[:shift]]:
                if contender.before is not None:
                    contender.before()
                samples[contender.name].append(timed_call(contender.fn, contender.number, device))
                timed()
    return samples


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """Median, quartiles and min..max of per-call seconds, in milliseconds."""
    ms = np.asarray(seconds, dtype=float) * 1e3
    q1, median, q3 = np.percentile(ms, [25, 50, 75])
    return {
        "median_ms": float(median),
        "q1_ms": float(q1),
        "q3_ms": float(q3),
        "min_ms": float(ms.min()),
        "max_ms": float(ms.max()),
    }


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def paired_difference(
    a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE, seed: int = 0
) -> tuple[float, float, float]:
    """(median(a) - median(b), low, high): a percentile bootstrap over rounds, resampling the pairs
    (a[i], b[i]) of the same round together, so the load both saw cancels. Medians, not means: a
    shared machine's stalls are outliers, and the medians' differences add up along a chain of
    contenders (full - a, a - b, b - c, ...) to exactly median(full) - median(last)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) != len(y) or len(x) == 0:
        raise ValueError("paired samples need the same, non-zero length")
    point = float(np.median(x) - np.median(y))
    if len(x) < 2:
        return point, point, point
    rounds = np.random.default_rng(seed).integers(0, len(x), size=(BOOTSTRAP_RESAMPLES, len(x)))
    diffs = np.median(x[rounds], axis=1) - np.median(y[rounds], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(diffs, [tail, 100 - tail])
    return point, float(low), float(high)
