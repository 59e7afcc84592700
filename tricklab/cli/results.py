"""`tricklab results`: the statistics of a study (rendered by report.py, as `tricklab report`
renders them), the list of its runs (`--runs`), or the studies there are."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

import tricklab.cli.report as report_cli
from tricklab.cli.common import (
    STORAGE_HELP,
    check_not_empty,
    quiet_optuna,
    real_number,
)
from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import shown


def register(subparsers: Any) -> None:
    """Add the `results` command to the main CLI's subparsers."""
    results_p = subparsers.add_parser(
        "results",
        help="statistics of an ablation or sweep: means, 95%% CIs, Welch tests, speedups",
        description=(
            "One row per configuration: complete runs, accuracy mean ± std with its 95% Student t "
            "interval, train seconds, the accuracy difference and speedup against the reference "
            "(baseline) with Welch intervals and p-values, runs reaching the target, failures."
        ),
    )
    results_p.add_argument(
        "study", nargs="?", help="the study name (ablate/sweep print it); none: list the studies"
    )
    results_p.add_argument("--storage", default=None, metavar="URL", help=STORAGE_HELP)
    results_p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="experiment folder (default runs/experiments/STUDY)",
    )
    results_p.add_argument(
        "--reference", default=None, metavar="CONFIG", help="compare against this configuration"
    )
    results_p.add_argument(
        "--target", type=real_number, default=None, help="target accuracy (fraction or %%)"
    )
    results_p.add_argument(
        "--json", action="store_true", help="print one JSON object (meta + rows) as the last line"
    )
    results_p.add_argument("--csv", default=None, metavar="FILE", help="also write the rows as CSV")
    report_cli.add_results_args(results_p)  # --format table|md|latex|csv|json, --per-seed
    results_p.add_argument(
        "--runs",
        action="store_true",
        help="list the runs (config, seed, status, accuracy, train seconds, run folder)",
    )
    results_p.set_defaults(func=run_results)


def run_results(args: argparse.Namespace) -> int:
    """`tricklab results`: the statistics (rendered by report/cli.py), or with --runs the runs."""
    _check_options(args)
    if not args.runs:
        return report_cli.run_results(args)
    if args.study is None:
        raise TrickLabError("--runs lists the runs of one study: give its name")
    if args.per_seed:
        raise TrickLabError("--runs and --per-seed list the runs two ways: give one of them")
    if args.csv is not None:
        raise TrickLabError("--csv writes the statistics; for the runs use --format csv > FILE")
    check_not_empty(args, "study", "--storage", "--out")
    with quiet_optuna():
        return _print_runs(args, "json" if args.json else args.format)


def _check_options(args: argparse.Namespace) -> None:
    """An option the output would not read is refused, not ignored (`results --csv F` listed the
    studies and wrote no F)."""
    given = {
        "--csv": args.csv is not None, "--reference": args.reference is not None,
        "--target": args.target is not None, "--per-seed": args.per_seed,
    }  # fmt: skip
    if args.study is None and (unread := [o for o, on in given.items() if on]):
        raise TrickLabError(
            f"{', '.join(unread)}: for one study's statistics; give its name (without one, "
            "results lists the studies)"
        )
    if (args.runs or args.per_seed) and (
        unread := [o for o in ("--reference", "--target") if given[o]]
    ):
        listing = "--runs" if args.runs else "--per-seed"
        raise TrickLabError(f"{listing} lists the runs; {' and '.join(unread)}: for the statistics")
    if args.out is not None and args.storage is not None:  # --out's study.db is the storage
        raise TrickLabError(
            "--out names the folder whose study.db is the storage: give it or --storage"
        )
    if args.json and args.format != "table":
        raise TrickLabError(
            f"--json is --format json: give one of --json and --format {args.format}"
        )


RUN_FIELDS = ("config_id", "seed", "status", "accuracy", "train_seconds", "run_dir")


def _print_runs(args: argparse.Namespace, output: str) -> int:
    import tricklab.report.tables as tables
    from tricklab.experiments.catalog import check_study
    from tricklab.experiments.reading import study_runs
    from tricklab.report.fmt import pct, seconds

    storage = check_study(args.study, args.storage, args.out)  # the URL of the study's storage
    meta, runs = study_runs(args.study, storage, out_dir=args.out)
    if output == "json":  # names exactly: JSON writes their control characters as escapes
        print(report_cli.json_line({**meta, "runs": runs}))
        return 0
    if output == "csv":
        # Names through `shown` too: CSV quoting keeps a newline or an escape sequence as it is,
        # for the terminal the rows are printed to; --format json gives them exactly.
        cells = [[shown(r[k]) if isinstance(r[k], str) else r[k] for k in RUN_FIELDS] for r in runs]
        print(tables.to_csv(RUN_FIELDS, cells), end="")
        return 0
    if not runs:
        report_cli.output_console().print(
            f"study {shown(args.study)} has no runs yet", highlight=False
        )
        return 0
    # Configurations, studies and run folders are named from outside (the storage, the command).
    rows = [
        [shown(r["config_id"]), str(r["seed"]), r["status"], pct(r["accuracy"]),
         seconds(r["train_seconds"]), shown(_shown_path(r["run_dir"]))]
        for r in runs
    ]  # fmt: skip
    header = ["config", "seed", "status", "acc %", "train s", "run folder"]
    title = shown(f"{meta['kind']} {meta['study']}: {len(runs)} runs")
    table = tables.TableData(title, header, rows, ["l", "r", "l", "r", "r", "l"])
    if output == "md":
        print(tables.to_markdown(table))
    elif output == "latex":
        print(tables.to_latex(table))
    else:
        out = report_cli.output_console()
        out.print(tables.to_rich(table, out.width))
    return 0


def _shown_path(folder: object) -> str:
    """A run folder as a table shows it: relative to the current folder when inside it."""
    if folder is None:
        return "-"
    path = Path(str(folder))
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)
