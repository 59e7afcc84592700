"""Conclusions in words, one sentence per configuration against its reference, from the verdicts of
`stats.config_stats` and never beyond them:

- a change is called higher/lower accuracy or faster/slower only when its verdict is "significant"
  (the 95% interval excludes no change and, with more than 3 rows, the Benjamini-Hochberg adjusted
  p-value is below 0.05);
- otherwise the sentence says "no significant change" and gives the estimate, the interval, the
  p-values (naming the test) and n, so a reader sees how large an effect the runs could have missed;
- with fewer than 3 runs on a side it says there are too few runs to test;
- on a busy machine it judges no train time (the accuracy verdicts stay) and says what to do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import tricklab.report.fmt as fmt
from tricklab.core.status import COMPLETE_STATUSES
from tricklab.experiments.busy import NOT_JUDGED
from tricklab.measure.intervals import MIN_RUNS_FOR_INTERVAL, too_few_words
from tricklab.measure.provenance import BUSY_ADVICE
from tricklab.report.collect import Source
from tricklab.report.tables import unfinished


def _n(row: Any, reference: Any) -> str:
    return f"n={row.n}" if row.n == reference.n else f"n={row.n} vs {reference.n}"


def _accuracy_tests(row: Any) -> str:
    parts = [f"Welch {fmt.p_equals(row.accuracy_p_value)}"]
    if row.accuracy_p_adjusted is not None:
        parts.append(f"BH-adjusted {fmt.p_equals(row.accuracy_p_adjusted)}")
    if row.accuracy_paired_p_value is not None:
        parts.append(
            f"paired over {row.paired_n} seeds {fmt.p_equals(row.accuracy_paired_p_value)}"
        )
    return ", ".join(parts)


def accuracy_clause(row: Any, reference: Any) -> str:
    """What the runs say about accuracy, as a clause."""
    if row.accuracy_diff is None:
        return "no complete run to compare accuracy with"
    diff = f"{fmt.pp(row.accuracy_diff)} pp"
    if row.verdict == "too few runs":
        return f"too few runs to test accuracy ({diff}, {_n(row, reference)})"
    if row.accuracy_identical_throughout:
        return f"the same accuracy, seed for seed ({_n(row, reference)})"
    ci = f"95% CI {fmt.pp(row.accuracy_diff_ci_low)}..{fmt.pp(row.accuracy_diff_ci_high)}"
    evidence = f"({diff}, {ci}, {_accuracy_tests(row)}, {_n(row, reference)})"
    if row.verdict == "significant":
        direction = "higher" if row.accuracy_diff > 0 else "lower"
        return f"{direction} accuracy {evidence}"
    if row.verdict == "not significant after BH":
        return f"no significant change in accuracy after correcting for multiple comparisons {evidence}"
    return f"no significant change in accuracy {evidence}"


def time_clause(row: Any, reference: Any) -> str:
    """What the runs say about train time, as a clause."""
    if row.speedup is None:
        return "no train time to compare"
    if row.time_verdict == "too few runs":
        return f"too few runs to test train time ({fmt.ratio(row.speedup)}×)"
    if row.time_verdict == NOT_JUDGED:
        return f"train time {NOT_JUDGED} ({fmt.ratio(row.speedup)}× measured)"
    low, high = row.speedup_ci_low, row.speedup_ci_high
    ci = f"95% CI {fmt.ratio(low)}..{fmt.ratio(high)}×: {fmt.time_change_range(low, high)} time"
    p = f"Welch {fmt.p_equals(row.time_p_value)}" if row.time_p_value is not None else ""
    evidence = "; ".join(filter(None, [ci, p]))
    if row.time_verdict == "significant":
        faster = row.speedup > 1
        factor = row.speedup if faster else 1 / row.speedup
        word = "faster" if faster else "slower"
        return f"trains {fmt.ratio(factor)}× {word}, {fmt.time_change(row.speedup)} ({evidence})"
    if row.time_verdict == "not significant after BH":
        return (
            f"no significant change in train time after correcting for multiple comparisons "
            f"({fmt.ratio(row.speedup)}×, {evidence})"
        )
    return f"no significant change in train time ({fmt.ratio(row.speedup)}×, {evidence})"


def conclusions(sources: Sequence[Source]) -> list[str]:
    """One sentence per configuration compared with its source's reference."""
    out = []
    for source in sources:
        reference = next((r for r in source.rows if r.is_reference), None)
        if reference is None:
            continue
        prefix = f"[{source.name}] " if len(sources) > 1 else ""
        for row in source.rows:
            if row.is_reference:
                continue
            name = source.name_of(row.config_id)
            sentence = f"{prefix}{name}: {accuracy_clause(row, reference)}"
            if row.accuracy_diff is not None:
                sentence += f"; {time_clause(row, reference)}"
            failed = sum(row.failures.values())
            if failed:
                kinds = ", ".join(f"{k} {v}" for k, v in row.failures.items())
                sentence += f"; {fmt.plural(failed, 'run')} did not complete ({kinds})"
            out.append(sentence + ".")
    return out


def _names(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def source_summary(source: Source) -> str:
    """A few sentences on one source."""
    runs = len(source.records)
    if not source.rows or runs == 0:
        return f"{source.name} has no runs yet: there is nothing to conclude."
    statuses = Counter(r["status"] for r in source.records)
    complete = sum(row.n for row in source.rows)
    reference = next((r for r in source.rows if r.is_reference), None)
    seeds = sorted({row.n for row in source.rows if row.n})
    none = sum(row.n == 0 for row in source.rows)
    text = f"{source.name} ({source.kind} on {source.machine}): {len(source.rows)} configuration"
    text += "s" if len(source.rows) > 1 else ""
    if seeds:
        seed_text = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]} to {seeds[-1]}"
        text += f", {seed_text} complete run{'' if seeds == [1] else 's'}"
        if none:  # "3 complete runs each (1 with none)" said both
            text += f" for each of {len(source.rows) - none}, none for {none}"
        elif len(source.rows) > 1:
            text += " each"
    plan = unfinished(source.rows)
    if plan:  # the runs still to come count too: 6 of 7 attempted would hide 2 never started
        text += f" ({complete} of {fmt.plural(plan[1], 'planned run')} complete)."
    else:
        text += f" ({complete} of {fmt.plural(runs, 'run')} complete)."

    failed = {k: v for k, v in statuses.items() if k not in COMPLETE_STATUSES}
    if failed:
        text += " Not complete: " + ", ".join(f"{v} {k}" for k, v in sorted(failed.items())) + "."
    if reference is None or reference.accuracy_mean is None:
        return text + " No configuration completed a run to compare against."
    text += (
        f" The reference, {source.name_of(reference.config_id)}, reached "
        f"{fmt.pct(reference.accuracy_mean)}% accuracy"
    )
    if reference.accuracy_ci_low is not None:
        low, high = fmt.pct(reference.accuracy_ci_low), fmt.pct(reference.accuracy_ci_high)
        text += f" (95% CI {low}..{high}%)"
    elif 0 < reference.n < MIN_RUNS_FOR_INTERVAL:
        text += f" ({too_few_words(reference.n)})"
    if reference.train_seconds_geomean is not None:
        geomean = fmt.seconds(reference.train_seconds_geomean)
        text += f" in {geomean} s of training per run (geometric mean)"
    else:  # a run recorded 0 s: the log times, and so their mean, have none
        text += " (a run of it recorded 0 s of training: no geometric mean of its train seconds)"
    if reference.target is not None and reference.target_runs:
        text += (
            f"; {reference.reached_target} of its {fmt.plural(reference.target_runs, 'run')} "
            "reached the target"
            f" accuracy of {fmt.target(reference.target)}%"
        )
    text += "."

    others = [r for r in source.rows if not r.is_reference and r.accuracy_diff is not None]
    if not others:
        return text + (
            " There is no other configuration to compare with it." if len(source.rows) == 1 else ""
        )
    accuracy = [r for r in others if r.verdict == "significant"]
    speed = [r for r in others if r.time_verdict == "significant"]
    few = [r for r in others if r.verdict == "too few runs"]
    if len(few) == len(others):
        return text + (
            f" With fewer than {MIN_RUNS_FOR_INTERVAL} runs on a side, none of the {len(others)}"
            f" change{'s' if len(others) > 1 else ''} can be tested: run more seeds"
            f" ({MIN_RUNS_FOR_INTERVAL} or more)."
        )
    if accuracy:
        shown = [f"{source.name_of(r.config_id)} ({fmt.pp(r.accuracy_diff)} pp)" for r in accuracy]
        changes = fmt.plural(len(others), "change")
        text += f" {len(accuracy)} of {changes} moved accuracy significantly: {_names(shown)}."
    elif len(others) == 1:
        text += " The change did not move accuracy significantly."
    else:
        text += f" None of the {len(others)} changes moved accuracy significantly."
    text += _taken_back(source, others, "verdict", lambda r: f"{fmt.pp(r.accuracy_diff)} pp")
    if any(r.time_verdict == NOT_JUDGED for r in others):
        text += f" Train time is {NOT_JUDGED}, {source.busy.reason}; {BUSY_ADVICE}."
    else:
        if speed:
            shown = [f"{source.name_of(r.config_id)} ({fmt.ratio(r.speedup)}×)" for r in speed]
            text += f" {len(speed)} changed train time significantly: {_names(shown)}."
        else:
            text += " None changed train time significantly."
        text += _taken_back(source, others, "time_verdict", lambda r: f"{fmt.ratio(r.speedup)}×")
    if few:
        text += f" {len(few)} had too few runs to test."
    return text


def _taken_back(source: Source, rows: list[Any], verdict: str, effect: Any) -> str:
    """The changes whose own test was significant but not after Benjamini-Hochberg: said, so that
    an interval that excludes no change beside "none moved" is not read as a contradiction."""
    taken = [r for r in rows if getattr(r, verdict) == "not significant after BH"]
    if not taken:
        return ""
    shown = [f"{source.name_of(r.config_id)} ({effect(r)})" for r in taken]
    return (
        f" {_names(shown)} {'was' if len(taken) == 1 else 'were'} significant alone, but not "
        f"after correcting for the {len(rows)} comparisons (Benjamini-Hochberg)."
    )


def summary(sources: Sequence[Source]) -> str:
    """The one-paragraph conclusion of a report."""
    if not sources:
        return "There is nothing to report."
    text = " ".join(source_summary(s) for s in sources)
    for source in sources:  # experiments/busy.py; a held-back verdict says it in its sentence
        if source.busy.busy and not any(r.time_verdict == NOT_JUDGED for r in source.rows):
            text += f" {source.name}: {source.busy.note()}; {BUSY_ADVICE}."
    if any(
        r.verdict in ("within noise", "not significant after BH") for s in sources for r in s.rows
    ):
        text += (
            ' "No significant change" means these runs cannot tell the change from noise at 95%'
            " confidence, not that it has no effect: the intervals give the effects they leave open."
        )
    return text
