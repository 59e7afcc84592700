"""`tricklab ablate | sweep`: argument parsing, progress and rich rendering of experiments.

The main CLI calls `register(subparsers)`; each `func(args)` returns the exit code. While they
run, stderr shows the progress (on a terminal, `run k/N` with elapsed time and ETA over the run's
epoch bar; in a log, a line as each run starts and each epoch ends) and each finished run prints a
line: "run k/N", the run, elapsed time and ETA (`--quiet`: neither; the summary still prints).
User mistakes raise TrickLabError (one line, exit 2); Ctrl-C (or SIGTERM) marks the running trial
interrupted and exits 130 with one line; a call whose runs left none trained exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tricklab.cli.common import (
    INTERRUPTED_EXIT_CODE,
    STORAGE_HELP,
    check_not_empty,
    echo,
    err_console,
    int_number,
    quiet_optuna,
    real_number,
    recipe_and_overrides,
)
from tricklab.cli.common import wide_console as console
from tricklab.cli.plan_notes import plan_notes, say_notes
from tricklab.core.errors import TrickLabError
from tricklab.core.progress import ProgressDisplay, clock
from tricklab.core.safeio import shown
from tricklab.core.status import COMPLETE_STATUSES, TRAINED_STATUSES
from tricklab.core.urls import shown_url
from tricklab.experiments.liveness import DEFAULT_GRACE_SECONDS, DEFAULT_HEARTBEAT_SECONDS, Liveness
from tricklab.experiments.plan import (
    NO_EARLY_STOP,
    PRUNERS,
    SAMPLERS,
    AblationPlan,
    SweepPlan,
    ablation_plan,
    budget_flags,
    normalize_target,
    parse_vary,
)
from tricklab.measure.provenance import BUSY_ADVICE, BUSY_WORDS
from tricklab.recipe.schema import load_recipe

if TYPE_CHECKING:
    from tricklab.experiments.runner import ExperimentSummary
    from tricklab.experiments.stats import ConfigStats
    from tricklab.experiments.workers import RunEvent


def register(subparsers: Any) -> None:
    """Add the `ablate` and `sweep` commands to the main CLI's subparsers."""
    ablate_p = subparsers.add_parser(
        "ablate",
        help="baseline plus one trick at a time (or the grid), many seeds, resumable",
        description=(
            "Run the baseline and every single change from it (--grid: the full product), each "
            "with seeds 0..N-1, under one fixed budget (early stopping off). Results go to an "
            "Optuna study; rerun the same command to resume, or start it several times on one "
            "storage to share the work."
        ),
    )
    _add_recipe_args(ablate_p)
    ablate_p.add_argument(
        "--vary",
        action="append",
        required=True,
        metavar="KEY=V1,V2,...",
        help="a recipe key and the values to try (repeat for more keys)",
    )
    ablate_p.add_argument(
        "--seeds", type=int_number, default=3, help="seeds per configuration, 0..N-1 (default 3)"
    )
    ablate_p.add_argument(
        "--grid", action="store_true", help="the full product of the --vary values (plus baseline)"
    )
    _add_run_args(ablate_p)
    ablate_p.set_defaults(func=run_ablate)

    sweep_p = subparsers.add_parser(
        "sweep",
        help="search recipe keys with Optuna's samplers (grid, random, TPE) and pruners",
        description=(
            "Sweep the recipe keys of SPACE.yaml (key: [choices] or {low, high, log, step}). "
            "grid: each point once per seed; random/tpe: --trials configurations, each trained "
            "with --seeds seeds and scored by their mean accuracy. --pruner median stops trials "
            "whose per-epoch validation accuracy trails the median (stored as pruned)."
        ),
    )
    _add_recipe_args(sweep_p)
    sweep_p.add_argument("--space", required=True, metavar="SPACE.yaml", help="the search space")
    sweep_p.add_argument(
        "--trials",
        type=int_number,
        default=None,
        help="configurations to try (required for random/tpe; grid: a seeded subset of the grid)",
    )
    sweep_p.add_argument("--sampler", choices=SAMPLERS, default="tpe", help="default tpe")
    sweep_p.add_argument("--pruner", choices=PRUNERS, default="none", help="default none")
    sweep_p.add_argument(
        "--seeds", type=int_number, default=1, help="seeds per configuration (default 1)"
    )
    sweep_p.add_argument(
        "--sampler-seed",
        type=int_number,
        default=None,
        help="seed of the sampler (leave unset when several workers share the study)",
    )
    _add_run_args(sweep_p)
    sweep_p.set_defaults(func=run_sweep)


def _add_recipe_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--baseline",
        nargs="+",
        default=[],
        metavar=("RECIPE", "KEY=VALUE"),
        help="recipe name or YAML file, then overrides (a first KEY=VALUE starts from defaults)",
    )


def _add_run_args(parser: argparse.ArgumentParser) -> None:
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--budget-epochs", type=real_number, default=None, help="train every run this many epochs"
    )
    budget.add_argument(
        "--budget-seconds",
        type=real_number,
        default=None,
        help="stop every run after this many train seconds (or at run.epochs)",
    )
    parser.add_argument(
        "--target",
        type=real_number,
        default=None,
        help="record each run's time to this accuracy (fraction or %%); runs are not stopped",
    )
    parser.add_argument("--study", default=None, help="study name (default: derived from the plan)")
    parser.add_argument("--storage", default=None, metavar="URL", help=STORAGE_HELP)
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="experiment folder (default runs/experiments/STUDY)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    parser.add_argument(
        "--json", action="store_true", help="print the summary as one JSON object (last line)"
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no line per finished run (the summary prints)"
    )
    parser.add_argument(
        "--heartbeat-seconds",
        type=real_number,
        default=DEFAULT_HEARTBEAT_SECONDS,
        help=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--grace-seconds",
        type=real_number,
        default=DEFAULT_GRACE_SECONDS,
        help="silence after which another machine's worker counts as dead (default %(default)s)",
    )


def _baseline(args: argparse.Namespace) -> Any:
    name, tokens = recipe_and_overrides(args.baseline)
    target = normalize_target(args.target) if args.target is not None else None
    flags = budget_flags(args.budget_epochs, args.budget_seconds, target)
    # The budget flags win over the baseline's own run.epochs (they were silently ignored); the
    # baseline may turn early stopping back on.
    baseline = load_recipe(name, [*NO_EARLY_STOP, *tokens, *flags])
    # Each run's seed replaces the baseline's: one set here would be silently ignored.
    seed_given = any(t.partition("=")[0].strip() == "run.seed" for t in tokens)
    if seed_given or baseline.get("run.seed") != 0:
        raise TrickLabError(
            "run.seed is set by --seeds (seeds 0..N-1), it cannot be set in the baseline"
        )
    return baseline


def _liveness(args: argparse.Namespace) -> Liveness:
    """The workers' liveness settings; TrickLabError for a bad --heartbeat/--grace-seconds."""
    return Liveness(heartbeat_seconds=args.heartbeat_seconds, grace_seconds=args.grace_seconds)


def _display(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """What shows on stderr while the runs train (none with --quiet): on a terminal, the bar of
    `run k/N` with elapsed time and ETA over the current run's epoch bar; in a log, a plain line
    as each run starts and each epoch ends (core/progress.py)."""
    return contextlib.nullcontext() if args.quiet else ProgressDisplay(err_console)


def _consoles(as_json: bool) -> tuple[Console, Console]:
    """(progress console, stdout): with --json, progress goes to stderr so stdout is the JSON."""
    out = console()
    return (console(stderr=True) if as_json else out), out


def _run_line(console: Console, quiet: bool) -> Any:
    """What `on_run_end` prints: one line per finished run, none when `quiet`."""
    if quiet:
        return None

    def show(event: RunEvent) -> None:
        acc = f"{event.accuracy * 100:6.2f}%" if event.accuracy is not None else "     -"
        acc += " (TTA)" if event.tta and event.accuracy is not None else ""
        secs = f"{event.train_seconds:7.1f}s" if event.train_seconds is not None else ""
        colour = "green" if event.status in COMPLETE_STATUSES else "red"
        error = f"  {event.error}" if event.error and colour == "red" else ""
        progress = f"  {clock(event.elapsed_seconds)} elapsed, eta {clock(event.eta_seconds)}"
        console.print(
            Text.assemble(
                f"run {event.runs_done}/{event.runs_total}  ",
                f"trial {event.trial:>4}  {shown(event.config_id)}  seed {event.seed}  ",
                (event.status, colour),
                f"  {acc} {secs}{progress}",
                (shown(error), "dim"),
            ),
            highlight=False,
        )

    return show


def run_ablate(args: argparse.Namespace) -> int:
    from tricklab.experiments.rundirs import check_out_dir
    from tricklab.experiments.runner import (
        ABLATION_MATCH,
        ablate,
        ablation_attrs,
        ablation_study,
        plan_ablation,
    )
    from tricklab.experiments.storage import check_storage, experiment_dir, storage_url

    check_not_empty(args, "--study", "--storage", "--out")
    liveness = _liveness(args)
    plan = AblationPlan(
        _baseline(args),
        parse_vary(args.vary),
        args.seeds,
        grid=args.grid,
        study=args.study,
        storage=args.storage,
        out_dir=args.out,
    )
    out = _consoles(args.json)[1]
    check_out_dir(plan.out_dir, "the ablation")  # as ablate() checks it, before the storage
    configs = ablation_plan(plan.baseline, plan.vary, plan.grid).configs  # or its error
    model_code = {}
    if args.dry_run:  # checks all that a real run checks before its first run
        configs, units, model_code = plan_ablation(plan)
    name = ablation_study(plan, configs)
    url = storage_url(args.storage, experiment_dir(name, args.out))
    check_storage(url, (name, ablation_attrs(plan, configs, model_code), ABLATION_MATCH))
    notes = plan_notes(plan, configs)
    if args.dry_run:
        say_notes(notes)
        shown = {
            "study": name,
            "storage": shown_url(url),
            "seeds": args.seeds,
            "units": len(units),
            "configs": [
                {"config_id": c.config_id, "overrides": list(c.overrides)} for c in configs
            ],
        }
        _print_plan(out, shown, args.json)
        return 0
    return _run_study(ablate, plan, args, liveness, notes)


def run_sweep(args: argparse.Namespace) -> int:
    from tricklab.experiments.runner import (
        check_sweep,
        grid_configs,
        sweep,
        sweep_attrs,
        sweep_match,
        sweep_study,
    )
    from tricklab.experiments.space import describe, load_space
    from tricklab.experiments.storage import check_storage, experiment_dir, storage_url

    check_not_empty(args, "--study", "--storage", "--out", "--space")
    liveness = _liveness(args)
    base = _baseline(args)
    space = load_space(args.space)
    plan = SweepPlan(
        base,
        space,
        args.trials,
        sampler=args.sampler,
        pruner=args.pruner,
        seeds=args.seeds,
        sampler_seed=args.sampler_seed,
        study=args.study,
        storage=args.storage,
        out_dir=args.out,
    )
    out = _consoles(args.json)[1]
    if args.dry_run:  # checks all that a real run checks before its first run
        model_code = check_sweep(plan)
        name = sweep_study(plan)
        url = storage_url(args.storage, experiment_dir(name, args.out))
        check_storage(url, (name, sweep_attrs(plan, model_code), sweep_match(plan.sampler)))
        shown: dict[str, Any] = {
            "study": name,
            "storage": shown_url(url),
            "sampler": args.sampler,
            "pruner": args.pruner,
            "seeds": args.seeds,
            "space": {k: describe(d) for k, d in space.distributions.items()},
        }
        if args.sampler == "grid":
            points = grid_configs(space, args.trials, args.sampler_seed)
            shown["configs"] = [
                {"config_id": c.config_id, "overrides": list(c.overrides)} for c, _ in points
            ]
            shown["units"] = len(points) * args.seeds
        else:
            shown["trials"] = args.trials
        _print_plan(out, shown, args.json)
        return 0
    return _run_study(sweep, plan, args, liveness)


def _run_study(
    run: Callable[..., ExperimentSummary],
    plan: Any,
    args: argparse.Namespace,
    liveness: Liveness,
    notes: Sequence[str] = (),
) -> int:
    """Run an ablation or sweep plan with the progress display; its summary, or one line on a stop.
    `notes` are said once the study runs (before the first run's line, or at its end), so that bad
    input met by the study's checks stays one line."""
    progress, out = _consoles(args.json)
    line, pending = _run_line(progress, args.quiet), list(notes)

    def on_run_end(event: RunEvent) -> None:
        say_notes(pending)
        pending.clear()
        if line is not None:
            line(event)

    with quiet_optuna(), _display(args):
        try:
            summary = run(plan, on_run_end=on_run_end, liveness=liveness, stop=args.stop)
        except KeyboardInterrupt as stop:
            return _interrupted(stop)
    say_notes(pending)
    _print_summary(progress, out, summary, args.json)
    trained = any(summary.status_counts.get(s.value) for s in TRAINED_STATUSES)  # as `train`
    return 1 if summary.ran and not trained else 0  # exits 1 after a failed run: none trained


def _interrupted(stop: KeyboardInterrupt) -> int:
    """The line for a stopped worker: what the storage holds now (claims.claimed said)."""
    from tricklab.experiments.claims import MARKED_ATTR, TrialNotMarked

    if isinstance(stop, TrialNotMarked):
        said = str(stop)
    elif getattr(stop, MARKED_ATTR, None) is not None:
        said = "the running trial is marked interrupted; rerun the same command to resume"
    else:  # it came between runs or after the last: nothing was running
        said = (
            "no run was in flight, every finished run is stored; rerun the same command to resume"
        )
    print(shown(f"interrupted: {said}"), file=sys.stderr)
    return INTERRUPTED_EXIT_CODE


# ---------------------------------------------------------------- rendering


def _print_plan(out: Console, plan: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(plan))
        return
    configs = plan.get("configs")
    if configs is not None:
        from tricklab.report.fmt import plural  # the report's figures: not at start-up

        counts = [plural(len(configs), "config"), plural(plan["seeds"], "seed")]
        table = Table(title=f"plan: {' × '.join(counts)} = {plural(plan['units'], 'run')}")
        table.add_column("config")
        for c in configs:
            table.add_row(shown(c["config_id"]))
        out.print(table)
    else:
        out.print(f"{plan['trials']} trials × {plan['seeds']} seeds, sampler {plan['sampler']}")
        for key, dist in plan["space"].items():
            echo(out, f"  {key}: {dist}")
    echo(out, f"study {plan['study']}  storage {plan['storage']}")


def _print_summary(
    progress: Console, out: Console, summary: ExperimentSummary, as_json: bool
) -> None:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(summary.status_counts.items()))
    line = (  # runs, or a random/TPE sweep's sampled trials (with their seeds each): said
        f"{summary.kind} {summary.study}: {summary.planned} {summary.unit} planned, "
        f"{summary.already_done} done before, {summary.ran} run now; final: {counts}"
    )
    if as_json:
        echo(progress, line)
        print(json.dumps(summary.to_dict()))
        return
    if summary.stats:
        out.print(stats_table(summary.stats, f"{summary.kind} {summary.study}", out.width))
        if any(row.is_reference and row.picked_best for row in summary.stats):
            from tricklab.report.tables import PICKED_NOTE  # the winner's curse, as `results`

            echo(out, PICKED_NOTE)
        if summary.busy_machine:  # measure/provenance.py
            busy = f"{BUSY_WORDS}: {summary.busy_reason}; {BUSY_ADVICE}"
            out.print(busy, highlight=False, style="bold yellow")
    echo(out, line)
    if summary.compile_seconds > 0:
        out.print(
            f"compile seconds (warm-ups, apart from the times above): {summary.compile_seconds:.1f} "
            f"in all, the longest {summary.compile_seconds_max:.1f}",
            highlight=False,
        )
    echo(out, f"storage {summary.storage}")


def stats_table(rows: list[ConfigStats], title: str = "", width: int | None = None) -> Any:
    """The results table as rich renders it (tricklab/report/tables.py: the same as `results`)."""
    from tricklab.report.fmt import config_namer
    from tricklab.report.tables import results_table, shown_table, to_rich

    return to_rich(shown_table(results_table(rows, title, config_namer(rows))), width)
