"""What a storage file or database must be before Optuna opens it: Optuna would append to any
file, add its tables to another program's database, or write the tables a partial schema lacks,
and only then fail; these checks read, never write (SQLite opened read-only)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tricklab.core.errors import TrickLabError
from tricklab.core.paths import not_a_file, resolved
from tricklab.core.safeio import parse_json
from tricklab.experiments.journal import looks_like_record_start

VERSION_TABLES = ("version_info", "alembic_version")  # Optuna writes their row when it is missing


def optuna_tables() -> list[str]:
    """Every table Optuna's RDBStorage makes: its models' and alembic's revision table."""
    from optuna.storages._rdb import models

    return sorted([*models.BaseModel.metadata.tables, "alembic_version"])


def check_whole_schema(where: str, tables: list[str], rows: Callable[[str], int]) -> None:
    """TrickLabError unless a database holding `tables` holds all of Optuna's, its version rows
    written (`rows(table)` counts them): else Optuna, opening it, would write what is missing."""
    if "studies" not in tables:
        raise TrickLabError(f"{where} holds no study (it has no Optuna tables)")
    missing = [table for table in optuna_tables() if table not in tables]
    if not missing:
        missing = [f"row in {table}" for table in VERSION_TABLES if rows(table) == 0]
    if missing:
        raise TrickLabError(
            f"{where} holds only part of an Optuna database (no {', '.join(missing)}), and a "
            "reader adds nothing: a writer stopped while making it? rerun that ablate or sweep "
            "(it adds the rest), or give another --storage"
        )


def check_journal(path: Path) -> None:
    """TrickLabError unless `path` is missing, empty, or starts with an Optuna journal record:
    Optuna would append to any file and only then fail to read it."""
    try:
        with path.open("rb") as handle:
            first = handle.readline(1 << 20)  # a record is short; never read a whole big file
    except FileNotFoundError:
        return
    except OSError as exc:
        raise TrickLabError(f"cannot open storage journal:{path}: {exc.strerror or exc}") from None
    if not first or (not first.endswith(b"\n") and looks_like_record_start(first)):
        return  # empty, or its first record torn: set aside before the first append (journal.py)
    try:
        record = parse_json(first)
    except ValueError:  # not JSON, not UTF-8, or nested beyond any record
        record = None
    if not isinstance(record, dict) or "op_code" not in record:
        raise TrickLabError(f"{path} is not an Optuna journal file; give another --storage path")


def sqlite_tables(path: Path) -> list[str] | None:
    """The table names of an SQLite file, read-only ([] for none or an empty file); None when
    it cannot be read as one (a folder, a device)."""
    if not_a_file(path):  # never opened: a pipe would block the open for good
        return None
    if not path.is_file() or path.stat().st_size == 0:
        return []
    rows = _sqlite_rows(path, "SELECT name FROM sqlite_master WHERE type='table'")
    return None if rows is None else sorted(row[0] for row in rows)


def _sqlite_rows(path: Path, sql: str) -> list[Any] | None:
    """The rows of one query on an SQLite file opened read-only; None when it cannot be read."""
    try:
        with contextlib.closing(
            sqlite3.connect(f"{resolved(path).as_uri()}?mode=ro", uri=True)
        ) as db:
            return db.execute(sql).fetchall()
    except sqlite3.Error:  # not a database, locked, ...: opening it says why
        return None


def check_sqlite_schema(path: Path) -> None:
    """`_check_whole_schema` for an SQLite file, read-only; what cannot be read (not a database,
    locked) is left to Optuna, which says why without writing."""

    def rows(table: str) -> int:
        found = _sqlite_rows(path, f"SELECT count(*) FROM {table}")  # a name of VERSION_TABLES
        return found[0][0] if found else 1

    tables = sqlite_tables(path)
    if tables is not None:
        check_whole_schema(str(path), tables, rows)


def check_sqlite(path: Path) -> None:
    """TrickLabError if `path` is an SQLite database with tables but none of Optuna's: Optuna
    would add its tables to another program's database."""
    tables = sqlite_tables(path)
    if tables and "studies" not in tables:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise TrickLabError(
            f"{path} is an SQLite database without Optuna's tables (it has {shown}); "
            "give another --storage path"
        )
