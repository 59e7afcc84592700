"""The `tricklab demo` command: its flags, its plan printed, its result rendered."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tricklab.experiments.runner import RunEvent

from tricklab.cli.common import int_number
from tricklab.core.errors import TrickLabError
from tricklab.demo import (
    BASELINE_RECIPE,
    DemoInterrupted,
    DemoPlan,
    check_out_dir,
    check_seeds,
    run_demo,
)


def describe_plan(plan: DemoPlan, seeds: int, device_type: str) -> str:
    """One line saying what the demo is about to train."""
    from tricklab.experiments.plan import format_value

    tricks = ", ".join(f"{k}={'/'.join(map(format_value, vs))}" for k, vs in plan.vary.items())
    data = f"{plan.train_size or 10_000:,} train / {plan.test_size or 2_000:,} test images"
    precision = plan.cpu_precision
    if precision == "auto":  # said as it resolves on this CPU
        from tricklab.training.precision import auto_precision

        precision = f"{auto_precision('cpu', None, 'sgd')} (auto)"
    scaled = f", widths {list(plan.cpu_widths)}, {precision}" if device_type == "cpu" else ""
    return (
        f"demo: {BASELINE_RECIPE}{scaled} on cifar10-sample ({data}), {plan.epochs:g} epochs, "
        f"baseline + {tricks} one at a time, {seeds} seeds each, on {device_type}"
    )


def _check_data(plan: DemoPlan) -> None:
    """A dataset cache that cannot be written is one line before the plan is printed, not after
    it; a read-only cache that already holds the sample still serves it."""
    from tricklab.data.cache import dataset_cache_dir, ensure_writable

    try:
        ensure_writable(dataset_cache_dir(plan.cache_dir))
    except TrickLabError:
        from tricklab.recipe.schema import load_recipe
        from tricklab.training.setup import load_data, resolve_device

        load_data(load_recipe("speedrun94", plan.baseline_overrides(resolve_device("auto").type)))


def cmd_demo(args: argparse.Namespace) -> int:

    from tricklab.cli.common import (
        INTERRUPTED_EXIT_CODE,
        check_not_empty,
        echo,
        make_console,
        quiet_optuna,
    )
    from tricklab.core.progress import ProgressDisplay
    from tricklab.training.setup import resolve_device

    check_not_empty(args, "--out")
    plan = DemoPlan()
    if args.out is not None:
        check_out_dir(Path(args.out))  # before torch's start-up, not after it
    check_seeds(args.seeds)  # before the plan is printed
    _check_data(plan)
    err = make_console(stderr=True, markup=False, highlight=False)
    if not args.quiet:
        err.print(describe_plan(plan, args.seeds, resolve_device("auto").type))

    def show(event: RunEvent) -> None:
        acc = "-" if event.accuracy is None else f"{100 * event.accuracy:.2f}%"
        secs = "-" if event.train_seconds is None else f"{event.train_seconds:.1f} s"
        echo(err, f"  {event.config_id:<28} seed {event.seed}  {event.status:<9} {acc:>7}  {secs}")

    display = contextlib.nullcontext() if args.quiet else ProgressDisplay(err)  # batch bars
    try:
        with quiet_optuna(), display:
            result = run_demo(
                args.out, args.seeds, plan=plan, on_run_end=None if args.quiet else show
            )
    except DemoInterrupted as stop:
        echo(err, f"interrupted; finished runs are kept: rerun with --out {stop.out_dir} to resume")
        return INTERRUPTED_EXIT_CODE
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    out = make_console(markup=False, highlight=False, soft_wrap=True)
    echo(out, f"report: {result.report.html_path}  (and {result.report.md_path.name})")
    out.print(f"took {result.wall_seconds:.0f} s on {result.device}")
    out.print()
    echo(out, result.report.summary)
    return 0


def register(subparsers: Any) -> None:
    """Add `tricklab demo` to the main CLI."""
    p = subparsers.add_parser(
        "demo",
        help="a small study on the real CIFAR-10 sample shipped with tricklab, written up as a report",
        description=(
            "Train the scaled speedrun94 baseline and three of its tricks switched off one at a "
            "time (channels_last, BatchNorm-bias lr, label smoothing) on the CIFAR-10 sample "
            "shipped with tricklab, each over the same seeds with the same fixed budget, then "
            "write report.md and report.html and print the conclusion. Under 5 minutes on a "
            "2-core CPU; rerun on the same --out to resume an interrupted demo."
        ),
    )
    p.add_argument("--out", help="folder for the study and the report (default runs/<time>-demo)")
    p.add_argument(
        "--seeds", type=int_number, default=3, help="seeds per configuration (default 3)"
    )
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument(
        "-q", "--quiet", action="store_true", help="no progress: the report and errors only"
    )
    p.set_defaults(func=cmd_demo)
