"""`tricklab report` and the output of `tricklab results` (its formats, --per-seed, the list of
studies). The main CLI calls `register(subparsers)`; results.py adds `add_results_args` to its
`results` parser and runs `run_results`. Nothing heavy is imported before a command runs."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from tricklab.cli.common import check_not_empty, echo, err_console, make_console, quiet_optuna
from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import json_safe
from tricklab.measure.provenance import BUSY_ADVICE, BUSY_WORDS

FORMATS = ("table", "md", "latex", "csv", "json")


def register(subparsers: Any) -> None:
    """Add the `report` command."""
    p = subparsers.add_parser(
        "report",
        help="write report.md, a self-contained report.html and figures from studies or runs",
        description=(
            "Report on studies (names, as `tricklab results` takes them, or experiment folders), "
            "speedrun folders (summary.json) and run folders (result.json): tables, statistics, "
            "conclusions in words, and figures as PNG and SVG. Several studies (the same ablation "
            "on two machines) are joined by configuration, one colour per study. --profile adds "
            "a section of saved `tricklab profile model|step|loader --json` output."
        ),
    )
    p.add_argument(
        "sources", nargs="*", metavar="STUDY", help="study names or folders (none: --profile only)"
    )
    p.add_argument(
        "--profile",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE",
        help="saved `tricklab profile model|step|loader --json` output: a Profiles section of "
        "its tables with the device, torch version and date each file records (name studies "
        "before --profile)",
    )
    p.add_argument(
        "--storage",
        default=None,
        metavar="URL",
        help="where the study names are stored (default: each study's own SQLite file, "
        "runs/experiments/STUDY/study.db)",
    )
    p.add_argument(
        "--out", default=None, metavar="DIR", help="report folder (default reports/<time>-<name>)"
    )
    p.add_argument("--title", default=None, help="the report's title")
    p.add_argument(
        "--json", action="store_true", help="print what was written as one JSON object (last line)"
    )
    p.set_defaults(func=run_report)


def add_results_args(parser: argparse.ArgumentParser) -> None:
    """`results`' output options (the study itself becomes optional: none lists them)."""
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (terminal), md, latex (booktabs), csv or json (as --json); default table",
    )
    parser.add_argument(
        "--per-seed",
        action="store_true",
        help="one row per run (config, seed, one column per varied key, outcome)",
    )


def json_line(data: Any) -> str:
    """`data` as one line of strict JSON: a number that is not finite (which no reader takes, and
    which the checked inputs never give) is written null, never NaN or Infinity."""
    try:
        return json.dumps(data, allow_nan=False, default=str)
    except ValueError:
        return json.dumps(json_safe(data), allow_nan=False, default=str)


def output_console() -> Console:
    """stdout as rich sees it: a terminal's width, or $COLUMNS, else 200 columns for a pipe."""
    made = make_console(markup=False)
    if made.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return made
    return Console(markup=False, width=200)


# ---------------------------------------------------------------- report


def run_report(args: argparse.Namespace) -> int:
    from tricklab.report.build import check_out_dir, default_out_dir, render_report
    from tricklab.report.collect import load_sources
    from tricklab.report.profiles import load_profiles

    check_not_empty(args, "--storage", "--out", "--title")
    if not args.sources and not args.profile:
        raise TrickLabError(
            "name at least one study, speedrun folder or run folder, or --profile FILE"
        )
    if args.out is not None:
        check_out_dir(Path(args.out))  # before reading anything
    profiles = load_profiles(args.profile)
    with quiet_optuna():
        sources = load_sources(args.sources, args.storage) if args.sources else []
    out = Path(args.out) if args.out is not None else default_out_dir(sources)
    report = render_report(sources, out, args.title, profiles, numbered=args.out is None)
    if args.json:
        print(json_line(asdict(report)))
        return 0
    console = output_console()
    echo(console, report.summary, wrap=True)  # names studies, folders, profiled models
    for sentence in report.conclusions:
        echo(console, f"- {sentence}", wrap=True)
    echo(
        err_console,
        f"report: {report.html_path} (and report.md, {len(report.figures)} figure files)",
    )
    return 0


# ---------------------------------------------------------------- results


def run_results(args: argparse.Namespace) -> int:
    check_not_empty(args, "--storage", "--out", "--reference", "--csv")
    if args.per_seed and args.csv is not None:  # it wrote the statistics' rows, not the runs'
        raise TrickLabError("--csv writes the statistics; for every run use --format csv > FILE")
    output = "json" if args.json else args.format
    with quiet_optuna():
        if args.study is None:
            return _list_studies(args, output)
        check_not_empty(args, "study")
        return _results(args, output)


def _results(args: argparse.Namespace, output: str) -> int:
    import tricklab.report.tables as tables
    from tricklab.experiments import study_results
    from tricklab.experiments.catalog import check_study
    from tricklab.experiments.plan import normalize_target
    from tricklab.experiments.stats import write_csv

    target = normalize_target(args.target) if args.target is not None else None
    storage = check_study(args.study, args.storage, args.out)  # the URL of the study's storage
    meta, rows = study_results(
        args.study, storage, out_dir=args.out, reference=args.reference, target=target
    )
    if args.csv:
        write_csv(rows, args.csv)
    title = f"{meta['kind']} {meta['study']}"
    if args.per_seed:
        from tricklab.report.collect import load_study

        records = load_study(args.study, storage, args.out).records
        runs = tables.per_seed_runs(records)
        if output == "json":
            print(json_line({**meta, "runs": runs}))
        elif output == "csv":
            print(
                tables.to_csv(list(runs[0]) if runs else [], [list(r.values()) for r in runs]),
                end="",
            )
        else:
            _print_table(
                tables.per_seed_table(records, f"{title}: every run"), output, bool(runs), meta
            )
        return 0
    if output == "json":
        print(json_line({**meta, "configs": [r.to_dict() for r in rows]}))
    elif output == "csv":
        print(tables.stats_csv(rows), end="")
    else:
        from tricklab.report.fmt import config_namer

        name = config_namer(rows)
        _print_table(tables.results_table(rows, title, name), output, bool(rows), meta)
        if args.csv and output == "table":
            echo(output_console(), f"rows written to {args.csv}")
    return 0


def _print_table(table: Any, output: str, has_rows: bool, meta: dict[str, Any]) -> None:
    import tricklab.report.tables as tables

    if not has_rows:
        echo(output_console(), f"study {meta['study']} has no runs yet")
        return
    table = tables.shown_table(table)  # configurations and studies are named from outside
    busy = f"{BUSY_WORDS}: {meta['busy_reason']}; {BUSY_ADVICE}" if meta.get("busy_machine") else ""
    notes = [busy] if busy else []
    notes += table.notes  # the verdicts' meaning; an unfinished study's plan
    if output == "md":
        print("\n\n".join([tables.to_markdown(table), *notes]))
    elif output == "latex":
        print("\n".join([tables.to_latex(table), *(f"% {note}" for note in notes)]))
    else:
        console = output_console()
        console.print(tables.to_rich(table, console.width))
        if busy:  # busy.results_busy, under the train seconds it is about
            console.print(busy, highlight=False, style="bold yellow")
        for note in table.notes:  # the verdicts' meaning; an unfinished study's plan
            console.print(note, highlight=False, style="dim")


def _list_studies(args: argparse.Namespace, output: str) -> int:
    import tricklab.report.tables as tables
    from tricklab.experiments.catalog import list_studies, where_listed

    studies = list_studies(args.storage, args.out)
    if output == "json":
        print(json_line({"studies": [asdict(s) for s in studies]}))
        return 0
    where = where_listed(args.storage, args.out)
    header = ["study", "kind", "trials", "started", "storage"]
    rows = [[s.name, s.kind or "-", str(s.trials), s.started or "-", s.storage] for s in studies]
    if output == "csv":
        print(tables.to_csv(header, rows), end="")
        return 0
    if not studies:
        echo(
            output_console(),
            f"no studies in {where}; `tricklab ablate` or `tricklab sweep` make one "
            "(or pass --storage)",
        )
        return 0
    table = tables.TableData(f"studies in {where}", header, rows, ["l", "l", "r", "l", "l"])
    _print_table(table, output, True, {"study": ""})
    return 0
