"""A speedrun's --out: refused when it holds a speedrun (a speedrun does not resume: its runs are
kept, and the same command runs into a new folder), and cleared of what a speedrun stopped before
its first counted run made (a warm-up and a run in flight, no summary.json: a folder that no
report reads and no speedrun takes)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from tricklab.core.errors import TrickLabError
from tricklab.core.outputs import SUMMARY_FILE, check_not_another_commands
from tricklab.core.paths import check_out_folder, remove_empty_dirs
from tricklab.core.safeio import shown


def _run_folders(runs: int) -> tuple[str, ...]:
    return ("warmup", *(f"seed-{i}" for i in range(runs)))


def check_speedrun_folder(out: Path, runs: int) -> None:
    """TrickLabError for an --out that cannot be a folder to write in, or holds a speedrun,
    finished or interrupted."""
    check_out_folder(out, "the speedrun")
    check_not_another_commands(out, "a speedrun")
    taken = [f for f in (SUMMARY_FILE, *_run_folders(runs)) if (out / f).exists()]
    if taken:
        summary = out / SUMMARY_FILE
        if SUMMARY_FILE in taken and not summary.is_file():  # a folder, a FIFO, /dev/zero
            then = f"its {SUMMARY_FILE} is no file `tricklab report` reads: delete the folder"
        elif SUMMARY_FILE in taken:
            then = f"`tricklab report {shown(out)}` reads its runs"
        else:
            then = "it holds no counted run (no summary.json): delete it"
        raise TrickLabError(
            f"--out {shown(out)} already holds a speedrun ({', '.join(taken[:3])}); a speedrun "
            f"does not resume ({then}): give another folder"
        )


def remove_unsummarized(out: Path, runs: int, created: Path | None) -> None:
    """Remove the run folders a speedrun made in `out` (check_speedrun_folder found none there
    before it), and `out` up to `created` if it made it, when it wrote no summary.json."""
    if (out / SUMMARY_FILE).exists():
        return
    for name in _run_folders(runs):
        with contextlib.suppress(OSError):
            shutil.rmtree(out / name)
    remove_empty_dirs(out, created)
