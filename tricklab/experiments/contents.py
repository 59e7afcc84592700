"""What a storage holds that tricklab cannot read, as one line: a database row Optuna cannot
parse (`RowCheckedStorage`), and what Optuna stores without looking that tricklab cannot show
(`check_contents`, for readers: a study name that is no text, attrs that are no mapping, ...).

Optuna parses a study's rows as it reads them: a trial state or value type that is no word it
knows, JSON cut short in an attr, a date that is no date, a parameter's distribution that is not
one (or out of its own range), a categorical choice past the end, a value type that contradicts
its value. Each ends in its own exception deep inside Optuna or SQLAlchemy (LookupError,
JSONDecodeError, ValueError, IndexError, TypeError, a bare AssertionError, RecursionError); an
attr nested deeper than any JSON tricklab reads (safeio.MAX_JSON_DEPTH) runs Optuna's deepcopy
out of stack. `RowCheckedStorage` is Optuna's RDBStorage whose every read and write turns those
into one TrickLabError naming the storage, for readers (`results`, `report`) and writers
(`ablate`, `sweep` resuming) alike.

Not taken for a damaged row: SQLAlchemy's own errors (a lost connection, a file locked for long;
`check_contents` says them as such), Optuna's answers (KeyError or ValueError "Record does not
exist." raised by its storage code: no such study or trial; RuntimeError for a finished trial),
and a call with the wrong arguments (our bug).
"""

from __future__ import annotations

import errno
import functools
import os
import sqlite3
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage, RDBStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.study._frozen import FrozenStudy
from optuna.trial import FrozenTrial

from tricklab.core.errors import TrickLabError
from tricklab.core.paths import DiskFullError, disk_full_error
from tricklab.core.safeio import check_depth, shown
from tricklab.core.urls import file_of, shown_url

# What parsing a damaged row raises (JSONDecodeError is a ValueError; KeyError and IndexError
# are LookupErrors; JSON nested too deep a RecursionError): never SQLAlchemy's connection errors.
ROW_ERRORS = (ValueError, LookupError, AssertionError, TypeError, RecursionError)
_OPTUNA_STORAGES = str(Path(optuna.storages.__file__).parent)
# Methods Optuna's cached storage calls on its backend besides the public ones.
_BACKEND_CALLS = ("_get_trials", "_create_new_trial", "_set_trial_param", "_get_best_trial_id",
                  "_get_stale_trial_ids")  # fmt: skip


def one_line(exc: BaseException) -> str:
    """An exception as one line: SQLAlchemy adds the SQL and a web link on lines of their own."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def is_damaged_row(exc: BaseException) -> bool:
    """Whether `exc`, raised by a storage method, comes from parsing a row: not Optuna's own
    KeyError or ValueError saying a record is not there, nor the call itself failing."""
    if not isinstance(exc, ROW_ERRORS):
        return False
    frames = list(traceback.walk_tb(exc.__traceback__))
    if len(frames) < 2:  # raised in the wrapper's frame: the call's arguments did not bind
        return False
    raised_in = frames[-1][0].f_code.co_filename
    said_by_optuna = raised_in.startswith(_OPTUNA_STORAGES) and type(exc) in (KeyError, ValueError)
    return not said_by_optuna


def _row_checked(name: str) -> Callable[..., Any]:
    """RDBStorage's method `name`, what its rows hold that Optuna cannot parse as TrickLabError."""

    def checked(self: RDBStorage, *args: Any, **kwargs: Any) -> Any:
        # looked up at each call: a patch of RDBStorage (tests/faults.py) is kept
        method = getattr(RDBStorage, name)
        try:
            result = method(self, *args, **kwargs)
        except ROW_ERRORS as exc:
            if not is_damaged_row(exc):
                raise
            raise _damaged(self.url, one_line(exc)) from None
        except optuna.exceptions.StorageInternalError as exc:
            orig = getattr(exc.__cause__, "orig", None)  # a disk full, a lock: another subclass
            full = full_disk(exc, self.url)  # a write between runs, as a run's would
            if full is not None:
                raise full from None
            if type(orig) is not sqlite3.DatabaseError:  # "database disk image is malformed"
                raise
            raise _damaged(self.url, one_line(orig)) from None
        try:  # deeper: Optuna's deepcopy of it runs out of stack
            check_depth(_attrs_in(result))
        except ValueError as exc:
            raise _damaged(self.url, f"an attr {exc}") from None
        return result

    return functools.update_wrapper(checked, getattr(RDBStorage, name))


def full_disk(exc: BaseException, url: str) -> DiskFullError | None:
    """The one line for a full disk (as a run's own files say it) when `exc`, an error of
    Optuna's or SQLAlchemy's, or its cause, is SQLite's SQLITE_FULL; None otherwise."""
    orig = getattr(exc, "orig", None) or getattr(exc.__cause__, "orig", None)
    code = getattr(orig, "sqlite_errorcode", None)  # Python >= 3.11
    full = isinstance(orig, sqlite3.OperationalError) and (
        code == sqlite3.SQLITE_FULL if code is not None else "disk is full" in str(orig)
    )
    # SQLite says a write past the file-size limit (EFBIG, `ulimit -f`) as "disk I/O error"
    too_large = (
        isinstance(orig, sqlite3.OperationalError)
        and _size_limited()
        and ("disk I/O error" in str(orig))
    )
    if not (full or too_large):
        return None
    database = file_of(url) or Path(".")
    number = errno.EFBIG if too_large else errno.ENOSPC
    return disk_full_error(OSError(number, os.strerror(number)), database, name_path=True)


def _size_limited() -> bool:
    """Whether this process runs under a limit on the size of a file it writes (ulimit -f)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return False
    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY


def _damaged(url: str, why: str) -> TrickLabError:
    return TrickLabError(
        f"storage {shown_url(url)} holds a damaged row ({shown(why)}); was it changed by another "
        "program? Give another --storage, or a copy made before the damage"
    )


def _attrs_in(result: Any) -> list[Any]:
    """The attrs of the trials and studies (or the attrs) a storage method returned."""
    attrs: list[Any] = []
    for item in result if isinstance(result, list) else [result]:
        if isinstance(item, (FrozenTrial, FrozenStudy)):
            attrs += [item.user_attrs, item.system_attrs]
        elif isinstance(item, dict):
            attrs.append(item)
    return attrs


def _rows_checked(cls: type[RDBStorage]) -> type[RDBStorage]:
    """`cls` with every storage method (BaseStorage's, BaseHeartbeat's, `_BACKEND_CALLS`)
    wrapped by `_row_checked`."""
    public = {n for base in (BaseStorage, BaseHeartbeat) for n in vars(base) if n[0] != "_"}
    for name in [*sorted(public), *_BACKEND_CALLS]:
        if callable(getattr(RDBStorage, name, None)):
            setattr(cls, name, _row_checked(name))
    return cls


@_rows_checked
class RowCheckedStorage(RDBStorage):
    """Optuna's RDBStorage; a row it cannot parse is one TrickLabError naming the storage."""


def check_contents(storage: optuna.storages.BaseStorage, where: str, *, trials: bool) -> None:
    """TrickLabError naming `where` for what Optuna stores without looking and tricklab cannot
    show: a study name that is no text, attrs that are no mapping of names or nest deeper than
    any JSON tricklab reads, and (`trials`) values and intermediate values that are no numbers."""
    try:
        problem = _contents_problem(storage, trials)
    except ROW_ERRORS as exc:  # Optuna failing on what it stored (a database's rows: above)
        problem = one_line(exc)
    except optuna.exceptions.StorageInternalError as exc:  # a lost server, a file locked for long
        why = one_line(exc.__cause__ or exc)
        raise TrickLabError(f"cannot read storage {where}: {why}") from None
    if problem is not None:
        raise TrickLabError(f"{where} is not a storage tricklab can read: {shown(problem)}")


def _contents_problem(storage: optuna.storages.BaseStorage, trials: bool) -> str | None:
    for study in storage.get_all_studies():
        if not isinstance(study.study_name, str):
            return f"a study's name is {type(study.study_name).__name__}, not text"
        held = [(f"study {study.study_name!r}", [study.user_attrs, study.system_attrs], None, {})]
        for t in storage.get_all_trials(study._study_id, deepcopy=False) if trials else []:
            where = f"study {study.study_name!r}, trial {t.number}"
            held.append((where, [t.user_attrs, t.system_attrs], t.values, t.intermediate_values))
        for where, attrs, values, steps in held:
            if not all(isinstance(a, dict) and all(isinstance(k, str) for k in a) for a in attrs):
                return f"{where}: its attrs are no mapping of names"
            if values is not None and not (isinstance(values, list) and _numbers(values)):
                return f"{where}: its values are no list of numbers"
            if not (isinstance(steps, dict) and _numbers([*steps.values(), *steps])):
                return f"{where}: its intermediate values are no numbers by step"
            try:
                check_depth(attrs)
            except ValueError as exc:
                return f"{where}: an attr is {exc}"
    return None


def _numbers(items: list[Any]) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items)
