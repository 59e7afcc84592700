"""Which studies a storage holds: `tricklab results` without a study lists them, and a study name
that is not there names the closest one (difflib).

Without `--storage` each study has its own SQLite file, `runs/experiments/<study>/study.db`, so the
default "storage" is every such file under `runs/experiments` (or the one in `--out DIR`).
Nothing here creates a file or a table.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from tricklab.core.errors import TrickLabError
from tricklab.core.outputs import STUDY_FILE
from tricklab.core.safeio import shown
from tricklab.core.urls import SQLITE_PREFIX, file_of, shown_url
from tricklab.experiments.storage import EXPERIMENTS_ROOT, experiment_dir, storage_file, storage_url


@dataclass
class StudyInfo:
    """One stored study, as listed."""

    name: str
    kind: str | None  # ablation | sweep (None: not made by tricklab)
    trials: int
    started: str | None  # when its first trial started (local time), if any
    storage: str  # its URL as shown: without a password


def _studies_in(url: str) -> list[StudyInfo]:
    import optuna

    from tricklab.experiments.storage import open_storage
    from tricklab.experiments.storage_files import sqlite_tables

    if url.startswith(SQLITE_PREFIX) and sqlite_tables(file_of(url)) == []:
        return []  # an empty study.db holds no study, and reading must not give it tables
    storage = open_storage(url, must_exist=True)
    infos = []
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        start = summary.datetime_start
        kind = summary.user_attrs.get("kind")  # tricklab writes text; other Optuna users anything
        infos.append(
            StudyInfo(
                name=summary.study_name,
                kind=kind if isinstance(kind, str) else None,
                trials=summary.n_trials,
                started=start.strftime("%Y-%m-%d %H:%M") if start else None,
                storage=shown_url(url),
            )
        )
    return infos


def _default_databases(out_dir: str | None) -> list[Path]:
    if out_dir is not None:
        db = Path(out_dir) / STUDY_FILE
        return [db] if db.is_file() else []
    if not EXPERIMENTS_ROOT.is_dir():
        return []
    return sorted(p for p in EXPERIMENTS_ROOT.glob(f"*/{STUDY_FILE}") if p.is_file())


def list_studies(storage: str | None = None, out_dir: str | None = None) -> list[StudyInfo]:
    """The studies of `storage`, or, without one, of every default study database (see above)."""
    if storage is not None:
        return _studies_in(storage_url(storage, Path(".")))
    infos: list[StudyInfo] = []
    for db in _default_databases(out_dir):
        infos.extend(_studies_in(storage_url(None, db.parent)))
    return infos


def where_listed(storage: str | None, out_dir: str | None) -> str:
    """Where `list_studies` looked, for messages (a URL without its password)."""
    if storage is not None:
        return shown_url(storage_url(storage, Path(".")))
    return str(Path(out_dir) / STUDY_FILE) if out_dir is not None else f"{EXPERIMENTS_ROOT}/*/"


def check_study(name: str, storage: str | None = None, out_dir: str | None = None) -> str:
    """The storage URL holding study `name`; TrickLabError naming the closest study when it is not
    there (or listing where it looked)."""
    url = storage_url(storage, experiment_dir(name, out_dir))
    where = where_listed(storage, out_dir)
    path = file_of(url) if url.startswith(SQLITE_PREFIX) else None
    if path is not None and not path.is_file():  # read-only: no database is made here
        storage_file(url)  # a device, a pipe or a folder is said as such, as `results` alone says
        listed = list_studies(None, out_dir) if storage is None else []
        names = [s.name for s in listed]
        if storage is None and out_dir is None and name in names:  # in a folder named otherwise
            return _the_one_holding(name, listed)
        where = f"{where} (no study database at {shown(path)})"
    else:
        names = [s.name for s in _studies_in(url)]
        if name in names:
            return url
    raise TrickLabError(_unknown(name, names, where))


def _the_one_holding(name: str, listed: list[StudyInfo]) -> str:
    """The URL of the default database holding study `name` in a folder of another name (as
    `listed` by list_studies, which shows each URL as shown_url does); TrickLabError where
    several do."""
    urls = {
        shown_url(u): u for u in (storage_url(None, db.parent) for db in _default_databases(None))
    }
    holding = [urls[s.storage] for s in listed if s.name == name and s.storage in urls]
    if len(holding) > 1:
        raise TrickLabError(
            f"study '{shown(name)}' is in {len(holding)} databases ({shown(file_of(holding[0]))}, "
            f"{shown(file_of(holding[1]))}{', ...' if len(holding) > 2 else ''}): pass --out "
            "with its folder, or --storage"
        )
    return holding[0]


def _unknown(name: str, names: list[str], where: str) -> str:
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    if close:
        return f"no study '{name}' in {where}; did you mean '{close[0]}'?"
    if names:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        return f"no study '{name}' in {where}; it has {shown} (`tricklab results` lists them)"
    return f"no study '{name}' in {where}, nor any other; pass --storage to say where it is"
