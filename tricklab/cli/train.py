"""`tricklab train`: one run in this process, or `--nproc N` processes under torchrun; its epoch
table and summary."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from tricklab.cli.common import (
    check_not_empty,
    console,
    echo,
    err_console,
    new_run_folder,
    print_error,
    recipe_and_overrides,
    recipe_stem,
)
from tricklab.core.errors import RANK_ERRORS_ENV, another_rank_failed, leave_rank_error
from tricklab.core.paths import remove_empty_dirs
from tricklab.core.progress import ProgressDisplay, percent
from tricklab.core.safeio import shown
from tricklab.core.status import FAILED_STATUSES, Status
from tricklab.recipe.schema import load_recipe


class EpochView:
    """A table row per epoch, drawn above the progress bars (tricklab.core.progress) and printed
    whole when the run ends (not at all when it failed before its first epoch)."""

    def __init__(self) -> None:
        self.table = Table()
        # val acc of an epoch is without TTA (the run's end adds it); lr is the epoch's last step's
        columns = ("epoch", "train loss", "train acc", "val loss", "val acc\nno TTA", "end lr")
        for col in (*columns, "s", "img/s"):
            self.table.add_column(col, justify="right")

    def __call__(self, row: dict) -> None:
        def fmt(v, spec):
            return "-" if v is None else format(v, spec)

        self.table.add_row(
            str(row["epoch"]),
            fmt(row["train_loss"], ".4f"),
            percent(row["train_acc"]),  # as the progress line shows it
            fmt(row["val_loss"], ".4f"),
            percent(row["val_acc"]),
            fmt(row["lr"], ".4g"),
            fmt(row["epoch_seconds"], ".2f"),
            fmt(row["images_per_second"], ",.0f"),
        )


def _device_type(result: Any) -> str | None:
    return (getattr(result, "hardware", None) or {}).get("device_type")


def _processes(result: Any) -> str | None:
    """`2 (gloo)` for a data-parallel run; None for one process."""
    size = getattr(result, "world_size", 1) or 1
    return f"{size} ({result.dist_backend or 'no backend'})" if size > 1 else None


def print_result(result, recipe_name: str | None = None) -> None:
    """The run's summary table; record seconds (airbench's definition) only for a recipe that
    has an airbench script to compare with (experiments/airbench_records.py)."""
    from tricklab.experiments.airbench_records import AIRBENCH_RECORDS

    table = Table(title=f"run {result.status}", show_header=False)
    tta = result.recipe.get("tricks", {}).get("tta", "none")
    final_lr = result.epochs[-1].get("lr") if result.epochs else None
    airbench = recipe_name in AIRBENCH_RECORDS
    rows = [
        ("val acc (no TTA)", result.val_acc, percent),
        (f"val acc (TTA {tta})", result.val_acc_tta, percent),
        ("val loss", result.val_loss, ".4f"),
        ("train seconds", result.train_seconds, ".2f"),
        ("record seconds (airbench's)", result.record_seconds if airbench else None, ".2f"),
        ("compile seconds", result.compile_seconds, ".2f"),
        ("precision (as it ran)", result.resolved.get("precision"), str),
        ("wall seconds", result.wall_seconds, ".2f"),
        ("time to target s", result.time_to_target_seconds, ".2f"),
        ("images/s", result.images_per_second, ",.0f"),
        (  # a CPU's: the process's peak resident set (Python and torch included)
            "peak memory MiB" + ("" if _device_type(result) == "cuda" else " (RSS)"),
            result.peak_memory_bytes and result.peak_memory_bytes / 2**20,
            ",.0f",
        ),
        ("processes", _processes(result), str),  # a data-parallel run's ranks and backend
        ("params", result.params, ","),
        ("forward MACs", result.forward_macs, ","),
        ("final lr", final_lr, ".4g"),
    ]
    for name, value, spec in rows:
        if value is not None:
            table.add_row(name, spec(value) if callable(spec) else format(value, spec))
    if result.error:  # may name a file of the user's
        table.add_row("error", shown(result.error))
    if result.stopped_epoch:
        table.add_row("stopped at epoch", str(result.stopped_epoch))
    console.print(table)
    for note in result.resolved.get("notes", []):  # what the device decided, and why
        echo(console, f"note: {note}")


def cmd_train(args: argparse.Namespace) -> int:
    name, overrides = recipe_and_overrides(args.words)
    check_not_empty(args, "--out")
    recipe = load_recipe(name, overrides)  # before torch's import: a bad key answers at once
    from tricklab.training import distributed
    from tricklab.training.setup import resolve_device

    device = resolve_device(recipe.run.device)
    if args.nproc is not None:  # torchrun for you: this command in --nproc processes
        return _launch_train(args, recipe, name, device)
    with distributed.process_group(device, recipe.run.dist_timeout_seconds) as world:
        return _train_here(args, recipe, name, world.is_main)


def _launch_train(args: argparse.Namespace, recipe, name: str | None, device) -> int:
    """`train --nproc N`: checks what it can here, then torchrun; a rank that failed or died
    leaves result.json recorded `failed` with the reason (and what rank 0 recorded: its epochs),
    and the folder reruns."""
    from tricklab.training import distributed
    from tricklab.training.result import launch_record, record_failed_rank
    from tricklab.training.runfiles import check_run_dir
    from tricklab.training.setup import check_setup

    distributed.check_launch(args.nproc, device, recipe)
    with distributed.checked_as(args.nproc - 1, args.nproc):  # the last rank's share: the least
        check_setup([recipe])  # bad data or model: one line here, not one per process
    out, made = (Path(args.out), None) if args.out else new_run_folder(recipe_stem(name))
    try:
        check_run_dir(out, recipe)  # a folder that holds a run: one line, before any process
        argv = ["train", *args.words, "--out", str(out)]
        argv += [flag for flag in ("--json", "--quiet") if getattr(args, flag[2:])]
        launched, start = launch_record(recipe, device, args.nproc), time.perf_counter()
        code, failure = distributed.launch(args.nproc, argv)
        if failure is not None:
            launched.wall_seconds = time.perf_counter() - start
            record_failed_rank(out, launched, failure)
            print_error(f"data-parallel run failed: {failure}; run directory: {out}")
        return code
    finally:
        if made is not None:
            remove_empty_dirs(out, made)


def _train_here(args: argparse.Namespace, recipe, name: str | None, main: bool) -> int:
    """`tricklab train` in this process (under torchrun: one rank; only rank 0 shows and writes)."""
    from tricklab.training import distributed
    from tricklab.training.api import RunInterrupted, train

    if not main:
        result = train(recipe, stop=args.stop)
        if result.status not in FAILED_STATUSES:
            return 0
        # Its reason for the launcher's record; and no closing barrier, which the other ranks,
        # waiting in this step's collective, would never reach: they hung for the group's timeout.
        leave_rank_error(f"its run {result.status}: {result.error}")
        distributed.abandon_group()
        return 1
    out, made = (Path(args.out), None) if args.out else new_run_folder(recipe_stem(name))
    # A stop held from the run's recorded end until its output is printed: the run stands as
    # recorded (a complete run said "interrupted" and printed no --json; its rerun was refused).
    with args.stop.held():
        try:
            result = _run(args, recipe, out, made)
        except RunInterrupted as stopped:
            if stopped.result.status == Status.INTERRUPTED:  # said in _run; main() exits 130
                raise
            # A stop landed once the run's end was recorded: the run stands as it ended. One
            # that had failed before the stop came: under --nproc its collective found a rank
            # dead, torchrun then stopped this one, and the launcher's line says what failed.
            if stopped.result.status == Status.FAILED and RANK_ERRORS_ENV in os.environ:
                return 1
            result = stopped.result
        if result.status in FAILED_STATUSES:  # as another rank's failed run (above)
            distributed.abandon_group()
        return _print_run(args, result, name, out)


def _run(args: argparse.Namespace, recipe, out: Path, made: Path | None):
    from tricklab.training.api import RunInterrupted, train
    from tricklab.training.runfiles import check_run_dir

    try:
        left = check_run_dir(out, recipe) if made is None else None  # another recipe's: refused
        if left is not None:
            echo(
                err_console,
                f"note: replacing the {left.status} run in {out} ({left.epochs_text()}; "
                "a run starts again from epoch 1)",
            )
        with args.stop.deferred(False):  # the run: a stop ends it at once
            if args.json or args.quiet:  # --json: stdout and stderr as without a display
                return train(recipe, out_dir=out, stop=args.stop)
            view = EpochView()
            with ProgressDisplay(err_console, header=view.table):
                return train(recipe, out_dir=out, on_epoch=view, stop=args.stop)
    except RunInterrupted as stopped:  # recorded in result.json; main() exits 130
        if stopped.result.status != Status.INTERRUPTED:
            raise  # its own end recorded: printed as a run that was not stopped
        if args.json:
            print(json.dumps(stopped.result.to_dict()))
        if not args.json and not another_rank_failed():  # else the launcher's line names it
            echo(err_console, f"run directory: {out}")
        raise
    finally:
        if made is not None:  # a run that never started (bad data, ...) leaves no empty folder
            remove_empty_dirs(out, made)


def _print_run(args: argparse.Namespace, result, name: str | None, out: Path) -> int:
    if result.traceback:  # not a user mistake (those exit 2): a bug or a broken environment
        # indented and escaped: a model's message cannot reach the terminal or pass as a line of
        # tricklab's own ("error: ...")
        print("".join(f"  {shown(line)}\n" for line in result.traceback.splitlines()), end="",
              file=sys.stderr)  # fmt: skip
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print_result(result, name)
        echo(err_console, f"run directory: {out}")
    return 0 if result.status not in FAILED_STATUSES else 1
