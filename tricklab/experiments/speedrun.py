"""`tricklab speedrun`: repeat a record-class recipe over seeds and report time and accuracy honestly.

One warm-up run that is not counted (cuDNN autotuning, compilation, allocator growth, the data
cache), then N runs with seeds 0..N-1. The summary: mean ± std accuracy with a 95 % t-interval,
the fraction of runs at or above the target (`status.fraction_at_target`: a crash is left out),
mean/median/min/max of two times, compile seconds, peak memory and MFU. The times, each
device-synchronised, none holding dataset decoding, compilation or the warm-up run:
- record_seconds, airbench's `total_time_seconds` (the figure its records quote): the whitening
  layer's fit on 5,000 train images + the training epochs + the final evaluation with the recipe's
  TTA; compared with airbench's own figure for the recipe (airbench_records.py);
- train_seconds: the training epochs alone, each batch's loading and augmentation included.
The accuracy counted is the test-time-augmented one when the recipe has TTA, as airbench reports it.
`speedrun(SpeedrunPlan(recipe, runs))` is the library call; cli/speedrun.py is `tricklab speedrun`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tricklab.core.errors import (
    TrickLabError,
    call_hook,
    expect_callback,
    expect_number,
    expect_type,
)
from tricklab.core.outputs import SUMMARY_FILE
from tricklab.core.paths import atomic_write, first_missing, folder_arg
from tricklab.core.status import FAILED_STATUSES, fraction_at_target
from tricklab.core.stopping import Interrupted, StopRequest, stop_request
from tricklab.experiments.airbench_records import (
    AIRBENCH_RECORDS,
    AirbenchRecord,
    as_airbench_ran_it,
)
from tricklab.experiments.busy import speedrun_busy
from tricklab.experiments.plan import MAX_SEEDS as MAX_RUNS  # one bound: a typo is hours of runs
from tricklab.experiments.plan import normalize_target
from tricklab.experiments.speedrun_folder import check_speedrun_folder, remove_unsummarized
from tricklab.measure.mfu import achieved_tflops, check_peak, mfu, peak_tflops
from tricklab.measure.provenance import finish_record, start_record
from tricklab.recipe.schema import Recipe

DEFAULT_RECIPE = "speedrun94"
DEFAULT_RUNS = 10
# The warm-up's seed lies outside the counted seeds 0..N-1, so it never duplicates a counted run.
WARMUP_SEED = 1_000_000


@dataclass
class SpeedrunRun:
    """One run of a speedrun: its seed and what it measured."""

    seed: int
    status: str
    # The counted accuracy: val_acc_tta when the recipe has TTA, else val_acc.
    accuracy: float | None
    val_acc: float | None
    val_acc_tta: float | None
    train_seconds: float  # the epochs alone
    whiten_seconds: float  # the whitening layer's fit (0: the model has none)
    final_eval_seconds: float | None  # the final evaluation, with the recipe's TTA
    record_seconds: float | None  # whiten + train + final eval: airbench's total_time_seconds
    compile_seconds: float
    time_to_target_seconds: float | None
    images_per_second: float | None
    peak_memory_bytes: int | None
    achieved_tflops: float | None
    mfu: float | None
    warmup: bool = False
    error: str | None = None
    out_dir: str | None = None


@dataclass
class SpeedrunSummary:
    """The runs of a speedrun (warm-up apart) and their statistics. `to_dict()` is the JSON form."""

    recipe_name: str
    runs: list[SpeedrunRun]
    warmup: SpeedrunRun | None
    target_accuracy: float | None
    accuracy_mean: float | None
    accuracy_std: float | None
    accuracy_ci95: tuple[float, float] | None
    accuracy_min: float | None
    accuracy_max: float | None
    fraction_at_target: float | None
    train_seconds_mean: float | None
    train_seconds_median: float | None
    train_seconds_min: float | None
    train_seconds_max: float | None
    record_seconds_mean: float | None
    record_seconds_median: float | None
    record_seconds_min: float | None
    record_seconds_max: float | None
    compile_seconds_mean: float
    warmup_compile_seconds: float | None
    mfu_mean: float | None
    achieved_tflops_mean: float | None
    peak_tflops: float | None
    peak_tflops_source: str | None
    peak_memory_bytes: int | None
    peak_memory_pct: float | None
    forward_macs: int | None
    params: int | None
    device_name: str | None
    hardware: dict = field(default_factory=dict)
    dataset: dict = field(default_factory=dict)
    date: str = ""
    recipe: dict = field(default_factory=dict)
    runs_planned: int = 0
    interrupted: bool = False  # stopped by Ctrl-C / SIGTERM: the statistics cover the runs before
    airbench: AirbenchRecord | None = None  # airbench's own figure for the recipe, if it has one
    airbench_comparable: bool = False  # the recipe as airbench ran it (`as_airbench_ran_it`)
    provenance: dict = field(default_factory=dict)  # the speedrun's record (measure/provenance.py)
    busy_machine: bool = False  # busy.speedrun_busy: load above the cores, or times spread
    busy_reason: str | None = None

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def failed(self) -> int:
        return sum(run.status in FAILED_STATUSES for run in self.runs)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["n"], data["failed"] = self.n, self.failed
        return data


def accuracy_ci95(values: list[float]) -> tuple[float, float] | None:
    """Two-sided 95 % Student-t confidence interval of the mean, within 0..1; None for fewer than
    MIN_RUNS_FOR_INTERVAL (3) values (measure/intervals.py)."""
    # numpy: kept out of `tricklab --help`
    from tricklab.measure.intervals import ACCURACY_BOUNDS, mean_interval

    _, _, low, high = mean_interval(values, 0.95, ACCURACY_BOUNDS)
    return None if low is None else (low, high)


def _resolve_peak(
    hardware: dict, precision: str, override: float | None
) -> tuple[float | None, str | None]:
    """The device's peak TFLOP/s for a run's precision, and where the figure came from."""
    if override is not None:
        return override, "--peak-tflops"
    if hardware.get("device_type") != "cuda":
        return None, None
    from tricklab.training.precision import precision_policy  # torch: imported when runs are done

    compute = precision_policy(precision, "cuda").compute_dtype
    found = peak_tflops(hardware.get("device_name", ""), compute)
    return (found[0], found[1]) if found else (None, None)


def _peak_of(result, recipe: Recipe, override: float | None) -> tuple[float | None, str | None]:
    precision = result.resolved.get("precision", recipe.tricks.precision)
    return _resolve_peak(result.hardware, precision, override)


def _run_record(
    result, seed: int, peak: float | None, warmup: bool, out: Path | None
) -> SpeedrunRun:
    accuracy = result.val_acc_tta if result.val_acc_tta is not None else result.val_acc
    return SpeedrunRun(
        seed=seed,
        status=result.status,
        accuracy=accuracy,
        val_acc=result.val_acc,
        val_acc_tta=result.val_acc_tta,
        train_seconds=result.train_seconds,
        whiten_seconds=result.whiten_seconds,
        final_eval_seconds=result.final_eval_seconds,
        record_seconds=result.record_seconds,
        compile_seconds=result.compile_seconds,
        time_to_target_seconds=result.time_to_target_seconds,
        images_per_second=result.images_per_second,
        peak_memory_bytes=result.peak_memory_bytes,
        achieved_tflops=achieved_tflops(result.forward_macs, result.images_per_second),
        # images/s of all processes of a data-parallel run, each on its own device
        mfu=mfu(result.forward_macs, result.images_per_second, peak and peak * result.world_size),
        warmup=warmup,
        error=result.error,
        out_dir=str(out) if out is not None else None,
    )


def _mean(values: list[float | None]) -> float | None:
    return statistics.fmean(present) if (present := [v for v in values if v is not None]) else None


def _spread(values: list[float | None]) -> tuple[float | None, ...]:
    """(mean, median, min, max) of the values present; Nones when there is none."""
    if not (present := [v for v in values if v is not None]):
        return None, None, None, None
    return statistics.fmean(present), statistics.median(present), min(present), max(present)


def check_arguments(
    runs: int, peak_tflops: float | None, target: float | None, warmup_epochs: float | None
) -> None:
    """Refuse bad speedrun arguments before anything runs or prints."""
    if runs < 1:
        raise TrickLabError(f"--runs must be at least 1, got {runs}")
    if runs > MAX_RUNS:  # a typo: as ablate's --seeds, hours of runs
        raise TrickLabError(f"--runs {runs} is too many; at most {MAX_RUNS:,}")
    check_peak(peak_tflops)
    if target is not None and not 0 < target <= 1:
        raise TrickLabError(f"--target must be an accuracy in (0, 1], got {target}")
    if warmup_epochs is not None and not 0 <= warmup_epochs < math.inf:
        raise TrickLabError(f"--warmup-epochs must be a number >= 0, got {warmup_epochs}")


def check_warmup(warmup_epochs: float | None, recipe: Recipe) -> None:
    """A warm-up longer than the recipe's runs is refused: it would train the recipe's length."""
    if warmup_epochs is not None and warmup_epochs > recipe.run.epochs:
        raise TrickLabError(
            f"--warmup-epochs {warmup_epochs:.15g} is more than the recipe's run.epochs "
            f"{recipe.run.epochs:.15g}: a warm-up is at most one run (leave it out for a whole run)"
        )


@dataclass(frozen=True)
class SpeedrunPlan:
    """A speedrun: `recipe` trained once to warm up (not counted), then `runs` times.

    `peak_tflops` overrides the device's peak from the table in `tricklab.measure.mfu` (needed for
    MFU on a device the table lacks, the CPU included). `target_accuracy` defaults to the recipe's
    run.target_accuracy. `warmup_epochs`: None trains the warm-up for the recipe's full length,
    0 skips it, a number shortens it (one epoch meets every batch shape, which cuDNN autotunes;
    with tricks.compile each run compiles in its own warm-up steps, timed apart). With `out_dir`,
    each run writes its directory (warmup/, seed-0/, ...) and summary.json goes beside them.
    `recipe_name` names the recipe in the summary (and finds airbench's figure for it)."""

    recipe: Recipe
    runs: int = DEFAULT_RUNS
    peak_tflops: float | None = None
    target_accuracy: float | None = None
    warmup_epochs: float | None = None
    recipe_name: str = "recipe"
    out_dir: str | Path | None = None

    def __post_init__(self) -> None:
        """A Python caller's wrong type is a TypeError naming the field, as AblationPlan's; the
        recipe checked as a file's, in the plan's own copy; numpy's numbers as Python's."""
        expect_type(self.recipe, Recipe, "SpeedrunPlan's recipe")
        object.__setattr__(self, "recipe", self.recipe.checked())
        expect_number(self.runs, "SpeedrunPlan's runs", whole=True)
        object.__setattr__(self, "runs", int(self.runs))
        for name in ("peak_tflops", "target_accuracy", "warmup_epochs"):
            if (value := getattr(self, name)) is not None:
                expect_number(value, f"SpeedrunPlan's {name}")
                object.__setattr__(self, name, float(value))
        if self.target_accuracy is not None:  # a fraction or a percentage, as --target takes it
            object.__setattr__(self, "target_accuracy", normalize_target(self.target_accuracy))
        expect_type(self.recipe_name, str, "SpeedrunPlan's recipe_name")
        if not self.recipe_name.strip():  # the summary and its table name the recipe by it
            raise TrickLabError("SpeedrunPlan's recipe_name is empty: give the recipe a name")
        out = folder_arg(self.out_dir, "SpeedrunPlan's out_dir")  # absolute: chdir is no change
        object.__setattr__(self, "out_dir", None if out is None else str(out))


def speedrun(
    plan: SpeedrunPlan,
    *,
    on_run: Callable[[SpeedrunRun], None] | None = None,
    stop: StopRequest | None = None,
) -> SpeedrunSummary:
    """Run a speedrun (SpeedrunPlan): one warm-up run, then seeds 0..runs-1; their summary.

    `on_run` is called with each finished run, the warm-up included (its `warmup` is True).
    Ctrl-C or SIGTERM (or `stop`, see tricklab.core.stopping) after some counted runs raises
    SpeedrunInterrupted with their summary (also written to summary.json); before the first
    counted run, KeyboardInterrupt, with the folders it made removed (the same --out runs again)."""
    expect_type(plan, SpeedrunPlan, "speedrun's plan")
    expect_callback(on_run, "speedrun's on_run")
    expect_type(stop, (StopRequest, type(None)), "speedrun's stop")
    plan.__post_init__()  # again: a field set by hand past `frozen` is refused as when made
    check_arguments(plan.runs, plan.peak_tflops, plan.target_accuracy, plan.warmup_epochs)
    check_warmup(plan.warmup_epochs, plan.recipe)
    out = Path(plan.out_dir) if plan.out_dir is not None else None
    if out is not None:  # refused now, not after a warm-up run has trained
        check_speedrun_folder(out, plan.runs)
    created = first_missing(out) if out is not None else None
    with stop_request(stop) as stop:
        try:
            return _speedrun(plan, on_run, stop)
        except BaseException as exc:  # a stop, or the caller's `on_run` (stdout a closed pipe)
            # Ended before a counted run or its summary (a full disk, `ulimit -f`): a folder
            # without summary.json no command reads or resumes: the rerun finds it as it was.
            if out and not isinstance(exc, SpeedrunInterrupted):
                remove_unsummarized(out, plan.runs, created)
            raise


def _speedrun(
    plan: SpeedrunPlan, on_run: Callable[[SpeedrunRun], None] | None, stop: StopRequest
) -> SpeedrunSummary:
    from tricklab.training.api import train, train_to_its_end

    recipe, runs, warmup_epochs = plan.recipe, plan.runs, plan.warmup_epochs
    target = recipe.run.target_accuracy if plan.target_accuracy is None else plan.target_accuracy
    out = Path(plan.out_dir) if plan.out_dir is not None else None
    peak, peak_source = plan.peak_tflops, None
    provenance = start_record(recipe.run.device)

    warmup = None
    if warmup_epochs is None or warmup_epochs > 0:
        changes = [f"run.seed={WARMUP_SEED}"]
        if warmup_epochs is not None and warmup_epochs < recipe.run.epochs:  # at most (checked)
            changes.append(f"run.epochs={warmup_epochs}")
        run_out = out / "warmup" if out is not None else None
        result = train(recipe.override(changes), out_dir=run_out, stop=stop)
        peak, peak_source = _peak_of(result, recipe, plan.peak_tflops)
        warmup = _run_record(result, WARMUP_SEED, peak, True, run_out)
        if on_run is not None:
            call_hook(on_run, "speedrun's on_run", warmup)

    records, results, interrupted = [], [], False

    def summary_of(interrupted: bool) -> SpeedrunSummary:
        """The summary of the runs so far, also to summary.json with --out: written after each
        counted run too (as interrupted), so a SIGKILL or a lost machine keeps what finished."""
        summary = summarize(
            records, results, recipe, plan.recipe_name, target, peak, peak_source, warmup
        )
        cut_short = interrupted or (stop.requested and len(records) < runs)  # a run left to do
        summary.runs_planned, summary.interrupted = runs, cut_short
        summary.provenance = finish_record(provenance)
        seconds = [r.train_seconds for r in records if r.status not in FAILED_STATUSES]
        busy = speedrun_busy([summary.provenance, *(r.provenance for r in results)], seconds)
        summary.busy_machine, summary.busy_reason = busy.busy, busy.reason
        if out is not None:
            with atomic_write(out / SUMMARY_FILE) as handle:
                handle.write(json.dumps(summary.to_dict(), indent=2))
        return summary

    with stop.held():  # a stop between runs or after the last waits for the summary below
        try:
            for seed in range(runs):
                run_out = out / f"seed-{seed}" if out is not None else None
                # a stop once its end was recorded: counted, then the speedrun stops
                result = train_to_its_end(recipe.override([f"run.seed={seed}"]), run_out, stop)
                if warmup is None and seed == 0:
                    peak, peak_source = _peak_of(result, recipe, plan.peak_tflops)
                record = _run_record(result, seed, peak, False, run_out)
                records.append(record)
                results.append(result)
                if out is not None and seed < runs - 1:
                    summary_of(interrupted=True)
                if on_run is not None:
                    call_hook(on_run, "speedrun's on_run", record)
        except KeyboardInterrupt:
            if not records:
                raise
            interrupted = True
        summary = summary_of(interrupted)
    if summary.interrupted:
        raise SpeedrunInterrupted(summary)
    return summary


class SpeedrunInterrupted(Interrupted):
    """Ctrl-C (or SIGTERM) after some counted runs; `summary` holds their statistics (and went to
    summary.json with --out). Still a KeyboardInterrupt for callers that only stop."""

    def __init__(self, summary: SpeedrunSummary) -> None:
        super().__init__(f"interrupted after {summary.n} of {summary.runs_planned} runs")
        self.summary = summary


def summarize(
    records: list[SpeedrunRun],
    results: list,
    recipe: Recipe,
    recipe_name: str,
    target: float | None,
    peak: float | None,
    peak_source: str | None,
    warmup: SpeedrunRun | None,
) -> SpeedrunSummary:
    """Statistics over the counted runs. A failed run has no accuracy; the fraction at the target
    is `status.fraction_at_target`'s, as `tricklab results` counts it (a diverged run is a miss,
    a crash, failed or oom, is left out)."""
    accs = [r.accuracy for r in records if r.accuracy is not None]
    finished = [r for r in records if r.status not in FAILED_STATUSES]
    train_mean, train_median, train_min, train_max = _spread([r.train_seconds for r in finished])
    record_mean, record_median, record_min, record_max = _spread(
        [r.record_seconds for r in finished]
    )
    memories = [r.peak_memory_bytes for r in records if r.peak_memory_bytes is not None]
    first = results[0]
    memory_pcts = [res.peak_memory.get("peak_memory_pct") for res in results]
    memory_pcts = [p for p in memory_pcts if p is not None]
    hardware = first.hardware
    return SpeedrunSummary(
        recipe_name=recipe_name,
        runs=records,
        warmup=warmup,
        target_accuracy=target,
        accuracy_mean=statistics.fmean(accs) if accs else None,
        accuracy_std=statistics.stdev(accs) if len(accs) > 1 else None,
        accuracy_ci95=accuracy_ci95(accs),
        accuracy_min=min(accs) if accs else None,
        accuracy_max=max(accs) if accs else None,
        fraction_at_target=fraction_at_target([(r.status, r.accuracy) for r in records], target),
        train_seconds_mean=train_mean,
        train_seconds_median=train_median,
        train_seconds_min=train_min,
        train_seconds_max=train_max,
        record_seconds_mean=record_mean,
        record_seconds_median=record_median,
        record_seconds_min=record_min,
        record_seconds_max=record_max,
        compile_seconds_mean=statistics.fmean(r.compile_seconds for r in records),
        warmup_compile_seconds=warmup.compile_seconds if warmup is not None else None,
        mfu_mean=_mean([r.mfu for r in records]),
        achieved_tflops_mean=_mean([r.achieved_tflops for r in records]),
        peak_tflops=peak,
        peak_tflops_source=peak_source,
        peak_memory_bytes=max(memories) if memories else None,
        peak_memory_pct=max(memory_pcts) if memory_pcts else None,
        forward_macs=first.forward_macs,
        params=first.params,
        device_name=hardware.get("device_name"),
        hardware=hardware,
        dataset={
            "name": recipe.data.name,
            "dir": recipe.data.dir,
            "train_size": recipe.data.train_size,
            "test_size": recipe.data.test_size,
        },
        date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        recipe=recipe.to_dict(),
        airbench=AIRBENCH_RECORDS.get(recipe_name),
        airbench_comparable=as_airbench_ran_it(recipe, recipe_name),
    )
