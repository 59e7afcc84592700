"""`tricklab speedrun`: argument parsing, the line printed per run and the summary table (the runs
and their statistics are speedrun.py's)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from tricklab.cli.common import (
    INTERRUPTED_EXIT_CODE,
    add_nproc,
    check_not_empty,
    console,
    echo,
    err_console,
    int_number,
    new_run_folder,
    print_error,
    real_number,
    recipe_stem,
)
from tricklab.core.errors import TrickLabError
from tricklab.core.paths import remove_empty_dirs
from tricklab.core.progress import ProgressDisplay, percent
from tricklab.core.safeio import shown
from tricklab.core.status import FAILED_STATUSES
from tricklab.experiments.plan import normalize_target
from tricklab.experiments.speedrun import (
    DEFAULT_RECIPE,
    DEFAULT_RUNS,
    SpeedrunInterrupted,
    SpeedrunPlan,
    SpeedrunRun,
    SpeedrunSummary,
    check_arguments,
    check_speedrun_folder,
    check_warmup,
    speedrun,
)
from tricklab.measure.provenance import BUSY_ADVICE, BUSY_WORDS
from tricklab.profile.tables import num
from tricklab.recipe.schema import load_recipe
from tricklab.report.fmt import plural
from tricklab.report.fmt import target as target_text


def _pct(value: float | None, digits: int = 2) -> str:
    """An accuracy as every line shows it (core.progress.percent), or an MFU with `digits`."""
    return percent(value) if digits == 2 else "-" if value is None else f"{100 * value:.{digits}f}%"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


# Fits an 80-column terminal; the warm-up line is marked "warm-up" (it is never counted).
RUN_COLUMNS = (
    ("seed", 7),
    ("status", 14),
    ("val acc", 7),
    ("TTA acc", 7),
    ("train s", 7),
    ("record s", 8),
    ("compile s", 9),
    ("img/s", 7),
    ("MFU", 5),
)


def run_line(run: SpeedrunRun | None) -> str:
    """One fixed-width line per run (None: the header), printed as each run finishes."""
    if run is None:
        cells = [name for name, _ in RUN_COLUMNS]
    else:
        cells = [
            "warm-up" if run.warmup else str(run.seed),
            run.status,
            _pct(run.val_acc),
            _pct(run.val_acc_tta),
            _num(run.train_seconds, ".2f"),
            _num(run.record_seconds, ".2f"),
            _num(run.compile_seconds, ".2f"),
            _num(run.images_per_second, ",.0f"),
            _pct(run.mfu, 1),
        ]
    return " ".join(cell.rjust(width) for cell, (_, width) in zip(cells, RUN_COLUMNS))


def render_summary(summary: SpeedrunSummary) -> Any:
    """A rich table of the summary statistics."""
    world = summary.provenance.get("world_size") or 1
    processes = f" x {world} processes ({summary.provenance.get('dist_backend')})"
    airbench = summary.airbench is not None  # record seconds are airbench's: only next to it
    table = Table(
        title=shown(
            f"speedrun {summary.recipe_name}: {plural(summary.n, 'run')} on {summary.device_name}"
        )
        + (processes if world > 1 else "")
        + (f" (interrupted: {summary.n} of {summary.runs_planned})" if summary.interrupted else ""),
        caption=(
            "record seconds: whitening fit + epochs + final evaluation (with the recipe's TTA), "
            "as airbench's total_time_seconds; "
            if airbench
            else ""
        )
        + "train seconds: the epochs alone",
        show_header=False,
    )
    ci = summary.accuracy_ci95
    tta = (summary.recipe.get("tricks") or {}).get("tta", "none") != "none"  # as airbench counts
    target = summary.target_accuracy
    memory = summary.peak_memory_bytes
    rows = [
        (
            "accuracy" + (" (with TTA)" if tta else "") + " mean ± std",
            f"{_pct(summary.accuracy_mean)} ± {_pct(summary.accuracy_std)}",
        ),
        ("95% CI of the mean", f"[{_pct(ci[0])}, {_pct(ci[1])}]" if ci else _no_ci(summary.n)),
        ("min / max", f"{_pct(summary.accuracy_min)} / {_pct(summary.accuracy_max)}"),
        (
            f"runs ≥ target {target_text(target)}%" if target else "runs ≥ target",
            _pct(summary.fraction_at_target, 0),
        ),
        *(_record_rows(summary) if airbench else []),
        *_airbench_rows(summary),
        (
            "train seconds mean / median",
            f"{_num(summary.train_seconds_mean, '.3f')} / {_num(summary.train_seconds_median, '.3f')}",
        ),
        (
            "train seconds min / max",
            f"{_num(summary.train_seconds_min, '.3f')} / {_num(summary.train_seconds_max, '.3f')}",
        ),
        *_busy_rows(summary),
        (
            "compile seconds (warm-up / runs)",
            f"{_num(summary.warmup_compile_seconds, '.2f')} / {_num(summary.compile_seconds_mean, '.2f')}",
        ),
        (
            "MFU",
            f"{_pct(summary.mfu_mean, 1)} of {num(summary.peak_tflops)} TFLOP/s"
            + (f" x {world} devices" if world > 1 else "")
            + f" ({summary.peak_tflops_source or 'device peak unknown: --peak-tflops'})",
        ),
        ("achieved TFLOP/s", num(summary.achieved_tflops_mean)),  # 3 figures: 0.000840, not 0.00
        (
            "peak memory"  # a CPU's: the process's peak resident set, over all its runs
            + ("" if summary.hardware.get("device_type") == "cuda" else " (RSS, all runs)"),
            "-"
            if memory is None
            else f"{memory / 2**30:.2f} GiB"
            + (f" ({summary.peak_memory_pct:.1f}% of device)" if summary.peak_memory_pct else ""),
        ),
        (
            "forward MACs / params",
            f"{_num(summary.forward_macs, ',')} / {_num(summary.params, ',')}",
        ),
        ("failed runs", str(summary.failed)),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def _no_ci(n: int) -> str:
    """What the CI row says without an interval: too few runs, in words."""
    from tricklab.measure.intervals import MIN_RUNS_FOR_INTERVAL, too_few_words  # numpy: lazily

    return f"- ({too_few_words(n)}; {MIN_RUNS_FOR_INTERVAL} or more give one)"


def _record_rows(summary: SpeedrunSummary) -> list[tuple[str, str]]:
    mean, median = summary.record_seconds_mean, summary.record_seconds_median
    low, high = summary.record_seconds_min, summary.record_seconds_max
    return [
        ("record seconds mean / median", f"{_num(mean, '.3f')} / {_num(median, '.3f')}"),
        ("record seconds min / max", f"{_num(low, '.3f')} / {_num(high, '.3f')}"),
    ]


def _busy_rows(summary: SpeedrunSummary) -> list[tuple[str, str]]:
    """'timings taken on a busy machine', why, and what to do, under the times (busy.py)."""
    if not summary.busy_machine:
        return []
    return [(BUSY_WORDS, summary.busy_reason or ""), ("what to do", BUSY_ADVICE)]


def _airbench_rows(summary: SpeedrunSummary) -> list[tuple[str, str]]:
    """airbench's figure for the recipe, and the median record seconds over it."""
    record = summary.airbench
    if record is None:
        return [("airbench's record seconds", "- (no airbench script for this recipe)")]
    median = summary.record_seconds_median
    if not summary.airbench_comparable:
        ratio = "not comparable: recipe or data changed"
    else:
        ratio = "-" if median is None else f"{median / record.seconds:.2f}×"
    return [
        (
            f"airbench ({record.file})",
            f"{record.seconds:g} s on an {record.device}, {_pct(record.accuracy)} over "
            f"{record.runs:,} runs",
        ),
        ("median record s / airbench's", ratio),
    ]


def cmd_speedrun(args: argparse.Namespace) -> int:
    from tricklab.training.setup import check_setup

    bad = [w for w in args.overrides if "=" not in w]
    if bad:
        raise TrickLabError(
            f"expected key=value overrides, got '{bad[0]}' (the recipe goes after --recipe)"
        )
    check_not_empty(args, "--out")
    target = normalize_target(args.target) if args.target is not None else None
    check_arguments(args.runs, args.peak_tflops, target, args.warmup_epochs)
    if args.out:  # before anything is printed (the header, the data's decoding)
        check_speedrun_folder(Path(args.out), args.runs)
    recipe = load_recipe(args.recipe, args.overrides)
    check_warmup(args.warmup_epochs, recipe)
    from tricklab.training import distributed
    from tricklab.training.setup import resolve_device

    device = resolve_device(recipe.run.device)
    if args.nproc is not None:  # torchrun for you: this command in --nproc processes
        distributed.check_launch(args.nproc, device, recipe)
        with distributed.checked_as(args.nproc - 1, args.nproc):  # the last rank's share
            check_setup([recipe])  # bad data or model: one line here, not one per process
        code, failure = distributed.launch(args.nproc, _speedrun_argv(args))
        if failure is not None:  # the runs recorded before it stand; the one in flight is lost
            print_error(f"data-parallel speedrun failed: {failure}")
        return code
    with distributed.process_group(device, recipe.run.dist_timeout_seconds) as world:
        return _speedrun_here(args, recipe, target, world.is_main)


def _speedrun_argv(args: argparse.Namespace) -> list[str]:
    """The command line of `args` without --nproc (what each process of --nproc runs)."""
    argv = ["speedrun", *args.overrides, "--recipe", args.recipe, "--runs", str(args.runs)]
    for flag in ("--target", "--peak-tflops", "--warmup-epochs", "--out"):
        value = getattr(args, flag[2:].replace("-", "_"))
        argv += [flag, str(value)] if value is not None else []
    return argv + [flag for flag in ("--json", "--quiet") if getattr(args, flag[2:])]


def _speedrun_here(args: argparse.Namespace, recipe, target: float | None, main: bool) -> int:
    """`tricklab speedrun` in this process (under torchrun: one rank; rank 0 shows and writes)."""
    from tricklab.training.setup import check_setup

    if not main:
        plan = _plan(args, recipe, target, out_dir=None)
        return 1 if speedrun(plan, stop=args.stop).failed else 0
    display = None if args.quiet else ProgressDisplay(err_console)  # bars or plain lines
    with display or contextlib.nullcontext():  # a bar while the data is decoded
        check_setup([recipe])  # bad data, model or device: one line before anything is printed
    # Without --out the runs are kept all the same: a 25-run job is never lost.
    out, made = (
        (Path(args.out), None)
        if args.out
        else new_run_folder(f"speedrun-{recipe_stem(args.recipe)}")
    )
    # With --json, stdout carries only the summary object; progress goes to stderr.
    out_console = err_console if args.json else console
    err = err_console
    say = functools.partial(echo, err) if display else _silent  # --quiet: summary and errors only
    runs = plural(args.runs, "run")
    say(
        f"speedrun {args.recipe}: 1 warm-up run (not counted) + {runs}, seeds 0..{args.runs - 1}"
        if args.warmup_epochs != 0
        else f"speedrun {args.recipe}: {runs} (no warm-up)"
    )

    say(f"runs: {out}")
    if display:
        out_console.print(run_line(None), highlight=False, style="bold")

    def show(run: SpeedrunRun) -> None:
        style = "red" if run.status in FAILED_STATUSES else ("dim" if run.warmup else None)
        if display:
            out_console.print(run_line(run), highlight=False, style=style)
            display.run_done(counted=not run.warmup)
        # The traceback of a failed run is in its result.json.
        if run.status in FAILED_STATUSES and run.error:
            echo(err, f"  seed {run.seed}: {run.error}", style="red")

    try:
        with display or contextlib.nullcontext():
            if display:
                display.start_runs(args.runs, warmup=args.warmup_epochs != 0)
            summary = speedrun(_plan(args, recipe, target, out), on_run=show, stop=args.stop)
    except SpeedrunInterrupted as stop:  # the runs that finished are summarized all the same
        summary = stop.summary
        err.print(f"interrupted after {summary.n} of {summary.runs_planned} runs", highlight=False)
    finally:
        if made is not None:  # stopped before its first run wrote anything: no empty folder
            remove_empty_dirs(out, made)
    if not (args.json and args.quiet):  # then stdout's object is the summary, stderr is quiet
        out_console.print(render_summary(summary))
        echo(err, f"summary: {out / 'summary.json'}")
    if args.json:
        print(json.dumps(summary.to_dict()))
    if summary.interrupted:
        return INTERRUPTED_EXIT_CODE
    return 1 if summary.failed else 0


def _plan(
    args: argparse.Namespace, recipe, target: float | None, out_dir: Path | None
) -> SpeedrunPlan:
    """The speedrun the arguments ask for (in `out_dir`; ranks > 0 of --nproc write none)."""
    return SpeedrunPlan(
        recipe,
        args.runs,
        peak_tflops=args.peak_tflops,
        target_accuracy=target,
        warmup_epochs=args.warmup_epochs,
        recipe_name=args.recipe,
        out_dir=out_dir,
    )


def _silent(*args: Any, **kwargs: Any) -> None:
    pass


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `tricklab speedrun` to the main CLI."""
    p = subparsers.add_parser(
        "speedrun",
        help="repeat a record recipe over seeds: accuracy mean ± std, record and train seconds, MFU",
        description="One warm-up run (not counted), then N runs with seeds 0..N-1 of a recipe; "
        "prints each run and the summary (mean ± std accuracy, 95% CI, fraction ≥ target, "
        "record seconds as airbench times its records (whitening fit + epochs + final TTA "
        "evaluation) next to airbench's own figure, train seconds (the epochs alone), "
        "compile seconds, MFU).",
    )
    p.add_argument(
        "overrides", nargs="*", metavar="key=value", help="recipe overrides, e.g. data.dir=..."
    )
    p.add_argument(
        "--recipe",
        default=DEFAULT_RECIPE,
        help=f"built-in recipe or YAML file (default {DEFAULT_RECIPE})",
    )
    p.add_argument(
        "--runs",
        type=int_number,
        default=DEFAULT_RUNS,
        help=f"counted runs (default {DEFAULT_RUNS})",
    )
    p.add_argument(
        "--target",
        type=real_number,
        help="accuracy target, fraction or %% (default: the recipe's run.target_accuracy)",
    )
    p.add_argument(
        "--peak-tflops",
        type=real_number,
        help="device peak TFLOP/s for MFU (default: table of GPUs)",
    )
    p.add_argument(
        "--warmup-epochs",
        type=real_number,
        default=None,
        help="epochs of the warm-up run (default: the recipe's; 0 = no warm-up)",
    )
    p.add_argument(
        "--out",
        help="folder for each run's directory and summary.json "
        "(default: a new runs/<date>-<time>-speedrun-<recipe>)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the summary object as the last line of stdout"
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress and no per-run lines: the summary only",
    )
    add_nproc(p, "runs")
    p.set_defaults(func=cmd_speedrun)
