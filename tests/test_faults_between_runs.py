"""The eighth hostile round's faults between and after runs: a study database whose disk fills
between runs, a claim-lock file that cannot be opened, a speedrun killed (SIGKILL) after counted
runs, and a SIGTERM or SIGHUP landing once a command's work is saved."""

import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from sqlalchemy import event
from test_cli import TINY, tricklab

from tricklab.core.errors import TrickLabError
from tricklab.core.paths import DiskFullError
from tricklab.experiments.storage import open_storage


def test_a_study_database_whose_disk_fills_between_runs_is_one_line_naming_it(tmp_path):
    """The disk filling as an ablation enqueued its next trial was three chained tracebacks
    (SQLite's "database or disk is full", SQLAlchemy's, Optuna's StorageInternalError), exit 1;
    SQLite's page limit makes the same SQLITE_FULL here without a small disk."""
    db = tmp_path / "study.db"
    storage = open_storage(f"sqlite:///{db}")
    study = optuna.create_study(storage=storage, study_name="s", direction="maximize")
    engine = storage._backend.engine

    def no_room(connection, record):
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {pages}")

    event.listen(engine, "connect", no_room)
    engine.dispose()  # every connection from now on is a full disk
    with pytest.raises(DiskFullError) as caught:
        for _ in range(100):
            study.enqueue_trial({"x": 1}, user_attrs={"pad": "x" * 4000})
    message = str(caught.value)
    assert message.startswith(f"cannot write {db}: No space left on device")
    assert message.endswith("free some space and run again") and "\n" not in message


def test_a_study_database_whose_disk_is_full_as_it_is_made_is_one_line(tmp_path):
    """Ninth hostile round: a disk that filled as the study database got its tables said
    "cannot open storage ...: OperationalError: (sqlite3.OperationalError) database or disk is
    full", not what a full disk says everywhere else."""
    from sqlalchemy.engine import Engine

    def no_room(connection, record):
        connection.execute("PRAGMA max_page_count = 1")

    event.listen(Engine, "connect", no_room)  # every engine made from now on
    try:
        with pytest.raises(DiskFullError) as caught:
            open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    finally:
        event.remove(Engine, "connect", no_room)
    assert str(caught.value).startswith(f"cannot write {tmp_path / 'study.db'}: No space left")


def test_a_claim_lock_that_cannot_be_opened_is_one_line(tmp_path):
    """A folder named study.db.claim-lock (or a read-only study folder) was an IsADirectoryError
    (OSError) traceback from the claim before every trial."""
    from tricklab.experiments.claims import claim_lock

    db = tmp_path / "study.db"
    lock = tmp_path / "study.db.claim-lock"
    for make in (lock.mkdir, lambda: os.mkfifo(lock), lambda: lock.symlink_to("/dev/null")):
        make()  # a FIFO blocked the open for ever, deaf to Ctrl-C (ninth round)
        with pytest.raises(TrickLabError, match="lock file beside the storage .*remove what is"):
            with claim_lock(f"sqlite:///{db}"):
                pytest.fail("claimed without its lock")
        lock.rmdir() if lock.is_dir() and not lock.is_symlink() else lock.unlink()
    lock.mkdir()
    code, _, err = tricklab(["ablate", "--baseline", "speedrun94", *TINY, "--vary",
                             "tricks.label_smoothing=0,0.1", "--out", str(tmp_path), "--study",
                             "study"])  # fmt: skip
    lines = err.decode().strip().splitlines()
    assert code == 2 and len(lines) == 1 and "study.db.claim-lock" in lines[0], lines


def test_a_speedrun_killed_after_counted_runs_keeps_them_for_report(tmp_path):
    """A SIGKILL (or a lost machine) after the first counted run left no summary.json: the
    finished runs could be neither reported nor resumed. The summary is now written after every
    counted run, as interrupted until the last; `report` reads it, and the folder is refused by a
    new speedrun with words saying so."""
    out = tmp_path / "sr"
    args = [sys.executable, "-m", "tricklab", "speedrun", *TINY, "--runs", "50",
            "--warmup-epochs", "0", "--out", str(out), "-q"]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not (out / "seed-2").exists() and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["runs_planned"] == 50
    assert [r["seed"] for r in summary["runs"]] == list(range(summary["n"])) and summary["n"] >= 2
    code, _, err = tricklab(["report", str(out), "--out", str(tmp_path / "rep")])
    assert code == 0, err
    text = (tmp_path / "rep" / "report.md").read_text()
    assert f"({summary['n']} of 50 planned runs complete)" in text
    assert "a speedrun does not resume: run it again into a new folder" in text
    assert "rerun the same command" not in text
    code, _, err = tricklab(["speedrun", *TINY, "--runs", "50", "--out", str(out)])
    assert code == 2 and f"`tricklab report {out}` reads its runs" in err.decode()


LATE_SIGNAL = """
import atexit, os, signal, sys, time
import tricklab.cli.main as cli

def shutting_down():  # runs as Python shuts down, after the command returned {code}
    os.kill(os.getpid(), {signum})
    time.sleep(30)

atexit.register(shutting_down)
sys.argv = ["tricklab", *{argv!r}]  # a command of that exit code, run as `tricklab` runs it
cli.run()
"""


@pytest.mark.parametrize("code", [0, 2])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_after_the_work_is_saved_leaves_the_commands_own_exit_code(signum, code):
    """A SIGTERM landing after `train` printed its run folder killed the process while Python
    shut down: exit 143 (129 for SIGHUP), as if killed, though everything was saved."""
    argv = ["recipes", "--json"] if code == 0 else ["tricks", "nosuchgroup"]
    script = LATE_SIGNAL.format(code=code, signum=int(signum), argv=argv)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert run.returncode == code, run
