"""Is the machine busy? Flags on timings taken while other work competed for the cores."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tricklab.core.status import COMPLETE_STATUSES
from tricklab.measure.provenance import BUSY_WORDS, busiest_load

# A row's time verdict on a busy machine: the speedup stays a measurement, not a finding.
NOT_JUDGED = "not judged: busy machine"

# Repeated runs of one recipe on an idle machine agree within a few percent; a speedrun whose train
# seconds spread by more than this (std of the log times, about std / mean) was shared with other work.
SPREAD_LIMIT = 0.10


@dataclass(frozen=True)
class Busy:
    """Whether timings were taken on a busy machine, and why (the first rule that fired)."""

    busy: bool
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"busy_machine": self.busy, "busy_reason": self.reason}

    def note(self) -> str:
        """'timings taken on a busy machine: REASON', or '' when it was not busy."""
        return f"{BUSY_WORDS}: {self.reason}" if self.busy else ""


@dataclass(frozen=True)
class Timings:
    """One configuration's train seconds across seeds, and the relative difference reported about
    them (|log speedup|, or log(1 + SPREAD_LIMIT) for a speedrun's own mean), in words in `what`."""

    label: str
    seconds: Sequence[float]
    reported: float
    what: str


def log_spread(seconds: Iterable[float | None]) -> float | None:
    """The standard deviation of the log times (about std / mean); None with fewer than 2."""
    logs = [math.log(s) for s in seconds if s is not None and s > 0]
    return statistics.stdev(logs) if len(logs) > 1 else None


def busy_machine(
    records: Iterable[Mapping[str, Any] | None], timings: Iterable[Timings] = ()
) -> Busy:
    """Busy when a record's 1-minute load average (start or end) was above its cores (LOAD_MARGIN),
    or when some configuration's train seconds spread across seeds (`log_spread`) by more than the
    difference reported about them. The run's own threads count in the load: a run alone on the
    machine stays at or below its cores."""
    loaded = busiest_load(records, "a run")
    if loaded is not None:
        return Busy(True, loaded)
    for item in timings:
        spread = log_spread(item.seconds)
        if spread is not None and spread > item.reported:
            return Busy(
                True,
                f"{item.label}'s train seconds spread by {math.expm1(spread):.0%} across "
                f"{len(item.seconds)} seeds, more than {item.what}",
            )
    return Busy(False)


def speedrun_busy(records: Iterable[Mapping[str, Any] | None], seconds: Sequence[float]) -> Busy:
    """A speedrun's verdict: its records' load, and its runs' train seconds against SPREAD_LIMIT."""
    limit = Timings(
        "the speedrun",
        seconds,
        math.log1p(SPREAD_LIMIT),
        f"the {SPREAD_LIMIT:.0%} an idle machine allows",
    )
    return busy_machine(records, [limit])


def comparison_timings(records: Iterable[Mapping[str, Any]], rows: Sequence[Any]) -> list[Timings]:
    """For each configuration whose speedup the results table reports as a change (its verdict is
    not 'within noise'), its train seconds and the reference's against |log speedup|. Records are
    run records (`stats.collect_runs`); rows are `stats.config_stats` rows."""
    seconds: dict[str, list[float]] = {}
    for record in records:
        if record.get("status") in COMPLETE_STATUSES:
            if record.get("accuracy") is not None and record.get("train_seconds") is not None:
                seconds.setdefault(record["config_id"], []).append(float(record["train_seconds"]))
    reference = next((r.config_id for r in rows if r.is_reference), None)
    out = []
    for row in rows:
        if row.is_reference or row.speedup is None or row.speedup <= 0:
            continue
        if row.time_verdict in (None, "within noise"):
            continue
        what = f"the {row.speedup:.2f}x speedup of {row.config_id} over {reference}"
        reported = abs(math.log(row.speedup))
        out.append(Timings(row.config_id, seconds.get(row.config_id, []), reported, what))
        out.append(Timings(str(reference), seconds.get(str(reference), []), reported, what))
    return out


def results_busy(
    records: Sequence[Mapping[str, Any]],
    rows: Sequence[Any],
    speedrun: bool = False,
    summaries: Iterable[Mapping[str, Any] | None] = (),
) -> Busy:
    """The verdict on a results table: the runs' load (and that of `summaries`, the records of
    the calls that ran them) and the spread against each reported speedup; with `speedrun`, also
    each configuration's spread against SPREAD_LIMIT."""
    if not any(record.get("train_seconds") is not None for record in records):
        return Busy(False)  # no timing to flag (every run failed before its first epoch ended)
    timings = comparison_timings(records, rows)
    if speedrun:
        by_config: dict[str, list[float]] = {}
        for record in records:
            if record.get("status") in COMPLETE_STATUSES:
                if record.get("train_seconds") is not None:
                    by_config.setdefault(record["config_id"], []).append(record["train_seconds"])
        limit, what = math.log1p(SPREAD_LIMIT), f"the {SPREAD_LIMIT:.0%} an idle machine allows"
        timings += [Timings(cid, s, limit, what) for cid, s in by_config.items()]
    return busy_machine([*summaries, *(r.get("provenance") for r in records)], timings)


def hold_time_verdicts(rows: Sequence[Any], busy: Busy) -> None:
    """On a busy machine, every row's time verdict from a test becomes NOT_JUDGED ("too few runs"
    stays: no test ran); the accuracy verdicts stay: load slows a run, not what it learns."""
    if not busy.busy:
        return
    for row in rows:
        if not row.is_reference and row.time_verdict not in (None, "too few runs"):
            row.time_verdict = NOT_JUDGED


def study_meta(
    attrs: Mapping[str, Any], records: Sequence[Mapping[str, Any]], rows: Sequence[Any]
) -> dict[str, Any]:
    """What a study's results carry: the record of the latest ablate/sweep call on it that ran a
    run (its user attr `provenance`) and the busy-machine verdict (`busy_machine`, `busy_reason`); on a busy
    machine the rows' time verdicts are held back (`hold_time_verdicts`)."""
    summary = attrs.get("provenance")
    busy = results_busy(records, rows, summaries=[summary])
    hold_time_verdicts(rows, busy)
    return {"provenance": summary, **busy.to_dict()}
