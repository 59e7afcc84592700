"""Numbers and names as a report prints them: short, with units, the same in every table and figure.

Accuracies are fractions in the data and percent on the page; differences are percentage points
(pp); a speedup is reference time / config time (> 1: faster). Minus signs are ASCII, so a number
pasted into a spreadsheet stays a number.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from tricklab.profile.tables import num

MIB = 2**20


def short_number(value: float) -> str:
    """0.1 -> '0.1', 0.30000000000000004 -> '0.3', 0.0123456 -> '0.01235', 2.0 -> '2.0'."""
    text = repr(float(value))
    if len(text) <= 7:
        return text
    short = f"{value:.4g}"
    return short if any(c in short for c in ".en") else short + ".0"


def short_override(override: str) -> str:
    """`optim.lr=0.30000000000000004` -> `optim.lr=0.3`; lists of floats too; the rest as given."""
    key, sep, text = override.partition("=")
    if not sep:
        return override
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return override

    def show(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, (int, float, list)):
            return None
        if isinstance(v, float):
            return short_number(v)
        if isinstance(v, int):
            return str(v)
        parts = [show(x) for x in v]
        return None if None in parts else "[" + ", ".join(parts) + "]"

    shown = show(value)
    return f"{key}={shown}" if shown is not None and shown != text else override


def config_name(config_id: str, overrides: Sequence[str]) -> str:
    """What changed from the baseline, with short numbers (`baseline` for none)."""
    if not overrides:
        return config_id
    joined = " ".join(overrides)
    prefix = config_id[: -len(joined)].strip() if config_id.endswith(joined) else ""  # a recipe
    return " ".join([prefix, *(short_override(o) for o in overrides)]).strip()


def plural(count: int, word: str) -> str:
    """'1 run', '3 runs', '0 runs'."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def config_namer(rows: Sequence[Any]) -> Callable[[str], str]:
    """config id -> its display name (`config_name`) for rows of ConfigStats: one name for a
    configuration in `ablate`'s, `sweep`'s and `results`' tables and in the report."""
    overrides = {r.config_id: r.overrides for r in rows}
    short = {cid: config_name(cid, o) for cid, o in overrides.items()}
    twice = {name for name, n in Counter(short.values()).items() if n > 1}
    # two values alike in 4 figures (1.23456e-17, 1.23459e-17): their full names, told apart
    return lambda cid: cid if short.get(cid) in twice else config_name(cid, overrides.get(cid, []))


def pct(fraction: float | None, digits: int = 2) -> str:
    """A fraction as percent, no sign: 0.4958 -> '49.58'."""
    return "-" if fraction is None else f"{fraction * 100:.{digits}f}"


def target(fraction: float) -> str:
    """A target accuracy as percent, as pct() writes it unless that would read 0.00 (a target of
    none): 1e-9 -> '1e-07'."""
    text = pct(fraction)
    return f"{fraction * 100:.2g}" if fraction > 0 and float(text) == 0 else text


def pp(fraction: float | None, digits: int = 2) -> str:
    """A difference of fractions as signed percentage points: 0.0114 -> '+1.14'."""
    return "-" if fraction is None else f"{fraction * 100:+.{digits}f}"


def interval(low: float | None, high: float | None, show: Any, sep: str = ", ") -> str:
    return "" if low is None or high is None else f"[{show(low)}{sep}{show(high)}]"


def p_value(p: float | None) -> str:
    """0.6123 -> '0.61', 0.0123 -> '0.012', 0.00004 -> '<0.001'."""
    if p is None:
        return "-"
    if p >= 0.01:
        return f"{p:.2f}"
    if p >= 0.001:
        return f"{p:.3f}"
    return "<0.001"


def p_equals(p: float) -> str:
    """'p=0.61' or 'p<0.001'."""
    text = p_value(p)
    return f"p{text}" if text.startswith("<") else f"p={text}"


def ratio(value: float | None) -> str:
    """A speedup: '1.25', '0.98', '12.3', '250'."""
    if value is None:
        return "-"
    if value >= 10:
        return f"{value:.3g}" if value < 1000 else f"{value:,.0f}"
    if value >= 0.1:
        return f"{value:.2f}"
    text = f"{value:.2g}"
    return f"{float(text):.12f}".rstrip("0") if "e" in text else text  # no exponent in a table


def ratio_interval(
    value: float | None, low: float | None, high: float | None, n: int | None = None
) -> str:
    """'1.25× [1.21×, 1.29×]'; with too few runs for an interval (n = 2) the words instead:
    '1.20× (n=2: too few runs for an interval)'."""
    from tricklab.measure.intervals import MIN_RUNS_FOR_INTERVAL, too_few_words

    if value is None:
        return "-"
    text = f"{ratio(value)}×"
    if low is not None and high is not None:
        text += f" [{ratio(low)}×, {ratio(high)}×]"
    elif n is not None and 0 < n < MIN_RUNS_FOR_INTERVAL:
        text += f" ({too_few_words(n)})"
    return text


def time_change(speedup: float) -> str:
    """A speedup in words about train time: 1.25 -> '20% less train time'."""
    change = 1 / speedup - 1
    if abs(change) < 0.0005:
        return "the same train time"
    return f"{_percent(change)} {'less' if change < 0 else 'more'} train time"


def _percent(change: float) -> str:
    """A time change's size in percent: a time cut by nearly all reads 99.9% or >99.9%, never
    100% (that is no time at all)."""
    p = abs(change) * 100
    if change < 0 and round(p) >= 100:
        return f"{p:.1f}%" if p < 99.95 else ">99.9%"
    return f"{p:.0f}%"


def time_change_range(low: float, high: float) -> str:
    """A speedup interval in words: [1.21, 1.29] -> '17% to 22% less'; [0.9, 1.1] -> '9% less to
    11% more'."""
    a, b = 1 / high - 1, 1 / low - 1  # time change, low to high

    def word(x: float) -> str:
        return "less" if x < 0 else "more"

    if a < 0 and b < 0:
        return f"{_percent(b)} to {_percent(a)} less"
    if a > 0 and b > 0:
        return f"{_percent(a)} to {_percent(b)} more"
    return f"{_percent(a)} {word(a)} to {_percent(b)} {word(b)}"


def seconds(value: float | None) -> str:
    """Train seconds: 3 significant figures, at most 1 decimal above 10 s."""
    # 3 significant figures, trailing zeros kept (1.00 beside 1.02, not 1), with no exponent: a
    # pasted table keeps plain numbers (0.00000157, not 1.57e-06)
    return num(value)


def mib(num_bytes: float | None) -> str:
    return "-" if num_bytes is None else f"{num_bytes / MIB:,.0f}"


def rate(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:,.0f}"
