"""Where experiments live: Optuna storages and studies, and what their trials hold.

One Optuna study per experiment. `--storage` takes
- nothing: an SQLite file `<experiment dir>/study.db` (embedded; one worker at a time);
- `journal:PATH` (a PATH is required), or a path ending in `.journal`/`.log`: Optuna's journal
  file, for several worker processes on one machine (or a shared file system with working locks);
- any SQLAlchemy URL Optuna accepts (`postgresql+psycopg://user@host/db`, `sqlite:///file.db`): for
  several machines use PostgreSQL (`pip install "tricklab[postgres]"` installs the psycopg driver);
- a path ending in `.db`/`.sqlite`/`.sqlite3`: that SQLite file.
A URL's password is shown as `***` (urls.py). Refused: in-memory SQLite (`sqlite://`: nothing to
resume), an SQLite URL with a query (`?mode=ro`: SQLAlchemy ignores it), a file storage's path that
is a folder, a pipe or a device, and a journal file that does not start with an Optuna journal
record (no other file is appended to; a last line a writer never finished is set aside before the
next append: journal.py). A reader opens only a whole Optuna database (every table, its version
rows written), so Optuna writes nothing into it, and refuses what tricklab cannot show (a study
name that is no text). A row Optuna cannot parse is one line for all (contents.py), as is a full disk.

Trial states: COMPLETE for complete / stopped-early / reached-target runs, PRUNED for pruned ones,
FAIL for diverged / oom / failed / interrupted (the `status` user attr says which, `error` why);
one without a `status` was left RUNNING by a worker that died and was failed later: `interrupted`.
`skipped`: a trial claimed and given up at once, its unit taken (claims.py: the claim protocol).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tricklab.core.errors import TrickLabError
from tricklab.core.outputs import STUDY_FILE
from tricklab.core.paths import first_missing, not_a_file, remove_empty_dirs, resolved
from tricklab.core.safeio import shown
from tricklab.core.status import COMPLETE_STATUSES, FAIL_STATE_STATUSES, Status
from tricklab.core.urls import SQLITE_PREFIX, file_of, shown_url, sqlite_url, without_password
from tricklab.experiments.contents import RowCheckedStorage, check_contents, full_disk, one_line
from tricklab.experiments.journal import journal_backend
from tricklab.experiments.storage_files import (
    VERSION_TABLES,
    check_journal,
    check_sqlite,
    check_sqlite_schema,
    check_whole_schema,
)

EXPERIMENTS_ROOT = Path("runs") / "experiments"
SCHEMA_RETRIES = 5
RUN_KEY = re.compile(r"run-(0|[1-9][0-9]*)")  # a sampled trial's run of one seed: `run-3`
METRIC_NAMES = ["accuracy"]  # a study's objective: a trial's mean validation accuracy
LATEST_CALL_ATTRS = ("seeds",)  # the latest call's plan (stats.planned_runs): each call stores its


def experiment_dir(study: str, root: str | Path | None = None) -> Path:
    """The folder of an experiment: `runs/experiments/<study>` unless told otherwise."""
    return Path(root) if root is not None else EXPERIMENTS_ROOT / study


def storage_url(spec: str | None, exp_dir: Path) -> str:
    """The storage as one string (journal files as `journal:PATH`): what `open_storage` connects
    to; messages and records show it as `shown_url(url)` does, without its password."""
    if spec is None:
        return sqlite_url(resolved(exp_dir / STUDY_FILE))
    if "\0" in spec:  # a Python caller's: no command line holds one
        raise TrickLabError(f"the storage {shown(spec)} holds a NUL character")
    if spec.startswith("journal:"):
        if not spec.removeprefix("journal:").strip():
            raise TrickLabError("--storage journal: names no file; give journal:PATH")
        return spec
    if "://" in spec:
        _check_database_url(spec)
        return spec
    path = Path(spec)
    if path.suffix in (".journal", ".log"):
        return f"journal:{path}"
    if path.suffix in (".db", ".sqlite", ".sqlite3"):
        return sqlite_url(resolved(path))
    raise TrickLabError(
        f"--storage '{spec}' is neither a database URL (sqlite:///x.db, postgresql://...) "
        "nor a journal file (journal:PATH or a path ending in .journal)"
    )


def _check_database_url(url: str) -> None:
    """TrickLabError for a URL SQLAlchemy cannot parse or has no dialect for (connects to nothing)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
        parsed.get_dialect()
    except Exception as exc:  # ArgumentError (unparsable), NoSuchModuleError (unknown kind)
        raise _cannot_open(url, one_line(exc)) from None
    alone = url.partition("?")[0].partition("#")[0]
    if parsed.get_backend_name() == "sqlite" and alone != url:
        # SQLAlchemy warns of ?mode=ro and ignores it; the claim lock beside the file
        # (claims.claim_lock) would be named after the URL, not the file: two workers not excluded
        raise TrickLabError(
            f"--storage {shown_url(url)}: an SQLite URL takes no query string or fragment; "
            f"give the path alone: {alone}"
        )
    if parsed.get_backend_name() == "sqlite" and not url.startswith("sqlite:"):
        # sqlite+pysqlite:///x.db: the file's checks and claim lock key on the sqlite:/// form
        raise TrickLabError(f"--storage {shown_url(url)}: give an SQLite file as sqlite:///PATH "
                            "(no driver name)")  # fmt: skip
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise TrickLabError(
            f"--storage {shown_url(url)} is an in-memory database: nothing would be stored or "
            "resumed; give a file (sqlite:///PATH.db)"
        )


def _cannot_open(url: str, why: str) -> TrickLabError:
    """The error for a storage that cannot be opened, its URL and the reason without a password."""
    return TrickLabError(without_password(f"cannot open storage {url}: {why}", url))


def open_storage(url: str, *, must_exist: bool = False) -> optuna.storages.BaseStorage:
    """An Optuna storage for a URL from `storage_url`. With `must_exist` (every reader: `results`,
    `report`) it never creates a file or a table: a file or database without Optuna's whole
    schema (an empty study.db, a table dropped) is one TrickLabError line, as Optuna would write
    the rest into it; so is one holding what tricklab cannot show (`contents.check_contents`)."""
    if url.startswith("journal:"):
        path = storage_file(url)
        if must_exist and not path.is_file():
            raise TrickLabError(f"journal file {path} does not exist")  # a reader makes none
        _make_parent(path, url)
        if not must_exist and not os.access(path.parent, os.W_OK):  # its lock file goes there
            raise _cannot_open(url, "its folder is read-only (a writer locks beside it)")
        check_journal(path)
        try:  # reads the whole journal: a damaged line fails here, before anything is written
            storage = optuna.storages.JournalStorage(journal_backend(path))
        except Exception as exc:
            raise TrickLabError(f"cannot open journal {path}: {one_line(exc)}") from None
        if must_exist:  # held in memory: its trials are checked too
            check_contents(storage, f"journal {path}", trials=True)
        return storage
    kwargs: dict[str, Any] = {}
    fresh = created = None  # the SQLite file and folder this call makes: taken back on failure
    if url.startswith(SQLITE_PREFIX):
        path = storage_file(url)
        if must_exist and not path.is_file():
            raise TrickLabError(f"no study database at {shown(path)}; --storage says where it is")
        created = first_missing(path.parent)
        _make_parent(path, url)
        check_sqlite(path)
        if must_exist:
            check_sqlite_schema(path)
        fresh = None if path.exists() else path
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}  # readers wait for a lock
    elif must_exist:
        check_whole_schema(shown_url(url), *_server_schema(url))
    for attempt in range(SCHEMA_RETRIES):
        try:
            storage = optuna.storages.get_storage(RowCheckedStorage(url, **kwargs))
        except ImportError as exc:
            raise _driver_missing(url, exc) from None
        except BaseException as exc:  # SQLAlchemy's many kinds for a bad URL or a lost server
            # Workers starting together race to create the tables; the loser finds them made.
            racing = "IntegrityError" in type(exc).__name__ or "already exists" in str(exc)
            if attempt + 1 == SCHEMA_RETRIES or not racing or not isinstance(exc, Exception):
                _take_back(fresh, created)  # a full disk, a stop while it made the tables
                if not isinstance(exc, Exception):
                    raise
                raise full_disk(exc, url) or _cannot_open(url, one_line(exc)) from None
            time.sleep(0.2 * (attempt + 1))
            continue
        if must_exist:  # its studies only: reading every trial here would double the queries
            check_contents(storage, shown_url(url), trials=False)
        return storage
    raise AssertionError("unreachable")


def _driver_missing(url: str, exc: ImportError) -> TrickLabError:
    missing = getattr(exc, "name", None) or getattr(exc.__cause__, "name", None) or "its driver"
    postgres = '; for PostgreSQL: pip install "tricklab[postgres]" and a postgresql+psycopg:// URL'
    hint = postgres if url.startswith("postgresql") else ""
    return TrickLabError(
        f"storage {shown_url(url)} needs a database driver: {missing} is not installed{hint}"
    )


def check_storage(url: str, study: tuple[str, dict, tuple[str, ...]] | None = None) -> None:
    """What `open_storage(url)`, then `open_study` of `study` (name, attrs, must_match), would
    refuse, found leaving nothing behind (for --dry-run): a file storage is read if it exists, else
    its folder must be one we can write in; a database server is connected to once (driver,
    address, credentials), its study read if Optuna's tables are there, and nothing created."""
    if file_of(url) is not None:
        path = storage_file(url)
        if path.exists():
            if url.startswith(SQLITE_PREFIX):
                check_sqlite(path)
                try:
                    check_sqlite_schema(path)
                except TrickLabError:  # no tables, or not all: opening it would add Optuna's
                    return
            _check_stored_study(open_storage(url, must_exist=True), study)
            return
        folder = next(p for p in path.parents if p.exists())
        try:
            tempfile.TemporaryDirectory(dir=folder).cleanup()
        except OSError as exc:
            raise _cannot_open(url, f"{folder}: {exc.strerror or exc}") from None
        return
    if "studies" in _server_schema(url)[0]:  # Optuna's tables there: opening it creates nothing
        _check_stored_study(open_storage(url), study)


def _server_schema(url: str) -> tuple[list[str], Callable[[str], int]]:
    """The tables of the database server at `url`, and how many rows each of its VERSION_TABLES
    holds (as `_check_whole_schema` asks), read without writing anything (one connection: driver,
    address and credentials checked; TrickLabError when one fails)."""
    import sqlalchemy

    try:
        # A server that never answers (a firewall) fails in 10 s rather than hanging the dry run.
        timeout = {"connect_timeout": 10} if url.startswith(("postgresql", "mysql")) else {}
        engine = sqlalchemy.create_engine(url, connect_args=timeout)
        try:
            with engine.connect() as connection:
                tables = sqlalchemy.inspect(connection).get_table_names()
                count = sqlalchemy.select(sqlalchemy.func.count())
                rows = {
                    table: connection.execute(count.select_from(sqlalchemy.table(table))).scalar()
                    for table in VERSION_TABLES
                    if table in tables
                }
        finally:
            engine.dispose()
    except ImportError as exc:
        raise _driver_missing(url, exc) from None
    except Exception as exc:
        raise _cannot_open(url, one_line(exc)) from None
    return tables, lambda table: rows.get(table) or 0


def _check_stored_study(
    storage: optuna.storages.BaseStorage, study: tuple[str, dict, tuple[str, ...]] | None
) -> None:
    if study is not None:
        name, attrs, must_match = study
        with contextlib.suppress(KeyError):  # KeyError: no such study yet
            check_study(
                name, optuna.load_study(study_name=name, storage=storage), attrs, must_match
            )


def check_study(
    name: str, study: optuna.Study, attrs: dict[str, Any], must_match: tuple[str, ...]
) -> None:
    """TrickLabError, before anything is written to it, unless study `name` is tricklab's (one
    objective, maximized; trials only with tricklab's attrs) and holds this experiment: its
    stored attrs in a key of `must_match` equal `attrs`."""
    stored, objectives = study.user_attrs, len(study.directions)
    if objectives != 1 or study.direction != optuna.study.StudyDirection.MAXIMIZE:
        what = f"{objectives} objectives" if objectives != 1 else "an objective to minimize"
        not_ours = f"it has {what}, where tricklab's maximize accuracy"
    elif not {"kind", "tricklab_version"} <= set(stored) and study.get_trials(deepcopy=False):
        not_ours = "it holds trials without tricklab's attrs"
    else:
        not_ours = None
    if not_ours:
        raise TrickLabError(
            f"study '{name}' was not written by tricklab ({not_ours}); give another --study name"
        )
    for key in must_match:
        if key in stored and key in attrs and stored[key] != attrs[key]:
            now = attrs[key] if key == "model_code" else {}  # a hash by model name
            was = stored[key] if isinstance(stored[key], dict) else {}
            code = ", ".join(sorted(m for m, c in now.items() if was.get(m) != c))
            what = f"model {shown(code)}'s code" if code else key
            raise TrickLabError(
                f"study '{name}' already holds another experiment (its {what} differs); give "
                f"a new --study name or {'put the code back' if code else 'the original command'}"
            )


def storage_file(url: str) -> Path:
    """The file of a journal: or sqlite:/// URL, refused if anything but a file is there."""
    path = file_of(url)  # a pipe hangs Optuna, a device fails its fsync
    assert path is not None, url
    if problem := not_a_file(path):
        raise _cannot_open(url, f"it is {problem}, not a file")
    return path


def _take_back(fresh: Path | None, created: Path | None) -> None:
    """Remove the SQLite file (and its journal) and the folders `open_storage` made."""
    for made in (fresh, Path(f"{fresh}-journal")) if fresh is not None else ():
        with contextlib.suppress(OSError):  # a read-only folder: nothing was made
            made.unlink(missing_ok=True)
    if fresh is not None:
        remove_empty_dirs(fresh.parent, created)


def _make_parent(path: Path, url: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot_open(url, exc.strerror or str(exc)) from None


def open_study(
    storage: optuna.storages.BaseStorage,
    name: str,
    *,
    where: str = "the storage",
    attrs: dict[str, Any] | None = None,
    must_match: tuple[str, ...] = (),
    sampler: optuna.samplers.BaseSampler | None = None,
    pruner: optuna.pruners.BasePruner | None = None,
) -> optuna.Study:
    """Load the study or create it (several workers may race to create it: Optuna settles that).
    `check_study` refuses another program's study, or another experiment's (`attrs` and
    `must_match`), before anything is written; `attrs` are then stored where missing (or changed,
    LATEST_CALL_ATTRS). A failing storage (damaged, lost): one TrickLabError naming `where`."""
    try:
        try:
            study = optuna.load_study(
                study_name=name, storage=storage, sampler=sampler, pruner=pruner
            )
        except KeyError:  # not there yet
            study = optuna.create_study(
                storage=storage, study_name=name, direction="maximize", load_if_exists=True,
                sampler=sampler, pruner=pruner,
            )  # fmt: skip
        check_study(name, study, attrs or {}, must_match)
        if study.metric_names != METRIC_NAMES:  # optuna-dashboard labels the objective with it
            with warnings.catch_warnings():  # experimental since Optuna 3.2
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.set_metric_names(METRIC_NAMES)
        stored = study.user_attrs
        for key, value in (attrs or {}).items():
            if key not in stored or (key in LATEST_CALL_ATTRS and stored[key] != value):
                study.set_user_attr(key, value)
    except optuna.exceptions.StorageInternalError as exc:
        raise TrickLabError(
            f"cannot use storage {where}: {one_line(exc.__cause__ or exc)}"
        ) from None
    return study


def load_study(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study:
    """An existing study; TrickLabError lists the ones the storage has when it is not there."""
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        have = ", ".join(s.study_name for s in optuna.get_all_study_summaries(storage)) or "none"
        raise TrickLabError(f"no study '{name}' in this storage (it has: {have})") from None


def seed_runs(trial: FrozenTrial) -> dict[int, Any]:
    """Seed → the run a sampled trial stored as `run-<seed>` (workers.py writes the seed in ASCII
    digits, no leading 0); another program's `run-00` or `run-²` names no seed and is not read."""
    keys = ((k, RUN_KEY.fullmatch(k)) for k in trial.user_attrs)
    return {int(found[1]): trial.user_attrs[k] for k, found in keys if found}


def stored_runs(trial: FrozenTrial) -> list[dict[str, Any]]:
    """The run records a trial stored: all of them once it finished (`runs`), else those a sampled
    trial stored one seed at a time as each ended (`run-<seed>`)."""
    if "runs" in trial.user_attrs:
        return list(trial.user_attrs["runs"])
    return [run for _, run in sorted(seed_runs(trial).items())]


def trial_status(trial: FrozenTrial) -> Status:
    """complete | stopped-early | reached-target | diverged | oom | failed | pruned | interrupted |
    skipped, or running | waiting for unfinished trials."""
    status = trial.user_attrs.get("status")
    if trial.state == TrialState.WAITING:
        return Status.WAITING
    if trial.state == TrialState.RUNNING:
        return Status.RUNNING
    if trial.state == TrialState.COMPLETE:
        return Status(status) if status in COMPLETE_STATUSES else Status.COMPLETE
    if trial.state == TrialState.PRUNED:
        return Status.PRUNED
    return Status(status) if status in FAIL_STATE_STATUSES else Status.INTERRUPTED
