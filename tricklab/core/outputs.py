"""What each command leaves in its --out folder, named once, and the check that one command's
folder is not taken for another's: a run's files written into an ablation's folder (or a study
into a run's) mixed the two, and a report of the folder read both as one."""

from __future__ import annotations

import itertools
from pathlib import Path

from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import shown

CLAIM_NAME = ".tricklab-claim"  # one writer per folder (core/paths.claim_folder)
RESULT_FILE = "result.json"
RUN_FILES = ("recipe.yaml", "metrics.jsonl", RESULT_FILE, "checkpoint.pt")  # `train`'s
STUDY_FILE = "study.db"  # `ablate` and `sweep`'s SQLite storage, beside...
RUNS_FOLDER = "runs"  # ...the folder of its runs, runs/<config>/seed-<n>/
SUMMARY_FILE = "summary.json"  # `speedrun`'s, beside warmup/ and seed-<n>/
REPORT_FILES = ("report.md", "report.html", "figures")  # `report`'s (and the demo's)

MARKS = {
    "a run": (RESULT_FILE, "recipe.yaml", "metrics.jsonl"),
    "a study": (STUDY_FILE, RUNS_FOLDER),
    "a speedrun": (SUMMARY_FILE, "warmup"),
}  # a report may go into any of these folders (`report STUDY --out` its folder): no mark
LOOKED_AT = 200  # entries of a folder looked into for runs one or two levels down


def check_not_another_commands(out: Path, mine: str, above: bool = True) -> None:
    """TrickLabError when the folder `out` holds what another command than `mine` ('a run',
    'a study', 'a speedrun') writes, or runs one or two folders down (a study's runs/ folder, a
    speedrun's); with `above`, also when it lies inside a study's or a speedrun's folder (up to
    three folders up: a study's runs/<config>/<new>), where the command was not asked to run
    there by that study or speedrun itself (their own runs are checked without `above`)."""
    if above:  # a study's folder holds its runs/ too (not a --storage file in a project folder)
        for parent in list(out.absolute().parents)[:3]:
            study = (parent / STUDY_FILE).is_file() and (parent / RUNS_FOLDER).is_dir()
            found = (
                STUDY_FILE if study else SUMMARY_FILE if (parent / SUMMARY_FILE).is_file() else None
            )
            if found is not None:
                raise TrickLabError(
                    f"--out {shown(out)} is inside another command's folder ({shown(parent)} "
                    f"holds {found}); give a folder outside it"
                )
    if not out.is_dir():
        return
    for what, names in MARKS.items():
        found = next((name for name in names if (out / name).exists()), None)
        if what != mine and found is not None:
            _refuse(out, found, what)
    for entry in _folders(out) if mine != "a speedrun" else []:  # a speedrun's are its own
        inner = [entry, *_folders(entry)]
        if any((folder / RESULT_FILE).exists() for folder in inner):
            _refuse(out, entry.name, "runs")


def _folders(folder: Path) -> list[Path]:
    """Up to LOOKED_AT folders in `folder` (not links); none where it cannot be read."""
    try:
        entries = itertools.islice(folder.iterdir(), LOOKED_AT)
        return [entry for entry in entries if entry.is_dir() and not entry.is_symlink()]
    except OSError:  # a folder it may not read: the write will say so
        return []


def _refuse(out: Path, found: str, what: str) -> None:
    raise TrickLabError(
        f"--out {shown(out)} holds {what} ({shown(found)}), another command's output; give a "
        "new folder"
    )
