"""The experiment runner across real worker processes: SIGKILL and resume, two workers, Ctrl-C
(and SIGTERM, which the CLI treats alike).

Each worker is `python -m tricklab ablate ...` on the synthetic dataset (runs of about half a second).
To act on a worker in the middle of a run without racing its end, the test stops it (SIGSTOP),
checks in the storage that its trial is still RUNNING, and only then signals it.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from tiny_recipe import TINY_SYNTHETIC

from tricklab.core.errors import TrickLabError
from tricklab.experiments.claims import HEARTBEAT_ATTR, WORKER_ATTR
from tricklab.experiments.plan import ablation_plan, budget_overrides, parse_vary, plan_units
from tricklab.experiments.storage import open_storage, storage_url, trial_status
from tricklab.recipe.schema import load_recipe

TINY = TINY_SYNTHETIC
EPOCHS = 8  # about half a second of training per run on this CPU
STUDY = "procs"
# One OpenMP thread per worker (see conftest.py); unbuffered, so the logs are whole when read.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
TIMEOUT = 180  # seconds for any one worker: a hang fails the test instead of blocking the suite


def ablate_command(out_dir, vary, seeds, storage=None):
    cmd = [sys.executable, "-m", "tricklab", "ablate", "--baseline", *TINY]
    cmd += ["--vary", vary, "--seeds", str(seeds), "--budget-epochs", str(EPOCHS)]
    cmd += ["--study", STUDY, "--out", str(out_dir), "--json"]
    return cmd + (["--storage", storage] if storage else [])


def planned_units(vary, seeds):
    """The unit keys the command plans, as the CLI computes them."""
    baseline = load_recipe(None, [*budget_overrides(EPOCHS, None, None), *TINY])
    return {u.key for u in plan_units(ablation_plan(baseline, parse_vary([vary])).configs, seeds)}


@pytest.fixture
def start_worker():
    """Start a worker process logging to a file; any still alive (or stopped) at the end is killed."""
    started = []

    def start(cmd, log_path):
        with open(log_path, "w", encoding="utf-8") as log:
            started.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=ENV))
        return started[-1]

    yield start
    for worker in started:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def finish_worker(worker, log_path):
    """Wait for the worker; (exit code, its output)."""
    try:
        code = worker.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
        raise AssertionError(f"worker hung:\n{log_path.read_text()}") from None
    return code, log_path.read_text()


def summary_of(output):
    return json.loads(output.strip().splitlines()[-1])


def study_trials(spec, out_dir):
    storage = open_storage(storage_url(spec, out_dir), must_exist=True)
    return optuna.load_study(study_name=STUDY, storage=storage).get_trials()


def complete_per_unit(trials):
    return Counter(t.user_attrs["unit"] for t in trials if trial_status(t) == "complete")


def stop_mid_run(worker, log_path, out_dir, after_complete, spec=None):
    """SIGSTOP the worker while it runs a trial, once `after_complete` trials are complete.

    Returns that trial, RUNNING in the storage while the worker is stopped; its run has begun
    (the worker's heartbeat is on it) and cannot end before the worker gets a signal."""
    deadline = time.monotonic() + TIMEOUT
    study = None
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise AssertionError(f"worker exited early:\n{log_path.read_text()}")
        # The default SQLite file: the worker makes its claim lock once the database and the
        # study exist (opening them earlier would race the worker creating them). A server
        # database: the study can be looked up until it exists.
        if study is None and spec is not None:
            with contextlib.suppress(KeyError, TrickLabError):  # no study, or no tables yet
                study = optuna.load_study(
                    study_name=STUDY, storage=open_storage(spec, must_exist=True)
                )
        elif study is None and (out_dir / "study.db.claim-lock").exists():
            storage = open_storage(storage_url(None, out_dir), must_exist=True)
            study = optuna.load_study(study_name=STUDY, storage=storage)
        if study is not None:
            trials = study.get_trials()
            complete = [t for t in trials if t.state == TrialState.COMPLETE]
            running = [t for t in trials if _running_here(t, worker.pid)]
            if len(complete) >= after_complete and running:
                os.kill(worker.pid, signal.SIGSTOP)
                try:
                    still = [t for t in study.get_trials() if _running_here(t, worker.pid)]
                except optuna.exceptions.StorageInternalError:
                    still = []  # stopped inside a write, SQLite's lock held: let it finish it
                if still:
                    return still[0]
                os.kill(worker.pid, signal.SIGCONT)  # it finished meanwhile: catch the next
        time.sleep(0.05)
    worker.kill()
    raise AssertionError(f"never caught the worker mid-run:\n{log_path.read_text()}")


def _running_here(trial, pid):
    worker = trial.system_attrs.get(WORKER_ATTR)
    return (
        trial.state == TrialState.RUNNING
        and HEARTBEAT_ATTR in trial.system_attrs
        and isinstance(worker, dict)
        and worker.get("pid") == pid
    )


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_worker_killed_with_sigkill_mid_study_then_rerun_completes_each_unit_exactly_once(
    tmp_path, start_worker, request, kind
):
    vary, seeds = "optim.lr=0.4", 2
    spec = (
        request.getfixturevalue("postgres_server").new_database() if kind == "postgresql" else None
    )
    cmd = ablate_command(tmp_path, vary, seeds, storage=spec)
    worker = start_worker(cmd, tmp_path / "killed.log")
    lost = stop_mid_run(worker, tmp_path / "killed.log", tmp_path, after_complete=1, spec=spec)
    os.kill(worker.pid, signal.SIGKILL)
    assert worker.wait(timeout=TIMEOUT) == -signal.SIGKILL

    trials = study_trials(spec, tmp_path)
    assert [t.number for t in trials if t.state == TrialState.RUNNING] == [lost.number]
    done_before = len([t for t in trials if t.state == TrialState.COMPLETE])
    assert done_before >= 1

    # The same command again. The dead worker's trial is found at once (same host, its pid is
    # gone; a long grace period shows the rerun does not wait for its heartbeat to age), marked
    # interrupted, and its unit runs again; nothing else repeats.
    rerun = subprocess.run(
        [*cmd, "--grace-seconds", "600"], capture_output=True, text=True, env=ENV, timeout=TIMEOUT
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    summary = summary_of(rerun.stdout)
    units = planned_units(vary, seeds)
    assert summary["planned"] == len(units) == 4
    assert summary["already_done"] == done_before
    assert summary["ran"] == len(units) - done_before
    assert summary["status_counts"] == {"complete": 4}

    trials = study_trials(spec, tmp_path)
    assert complete_per_unit(trials) == {unit: 1 for unit in units}
    assert trial_status(trials[lost.number]) == "interrupted"
    assert sorted(trial_status(t) for t in trials) == ["complete"] * 4 + ["interrupted"]
    # The killed run's folder was replaced: it holds the rerun's whole run, nothing of the first.
    # (The worker may have been stopped before it named its folder: then there was none to replace.)
    (redone,) = [t for t in trials if t.user_attrs["unit"] == lost.user_attrs["unit"]][1:]
    folder = Path(redone.user_attrs["run_dir"])
    killed = trials[lost.number].user_attrs
    if "run_dir" in killed:
        assert killed["run_dir"] == str(folder)
    assert json.loads((folder / "result.json").read_text())["status"] == "complete"
    assert len((folder / "metrics.jsonl").read_text().splitlines()) == EPOCHS


@pytest.mark.parametrize("kind", ["journal", "postgresql"])
def test_two_worker_processes_on_one_shared_storage_cover_the_grid_exactly_once(
    tmp_path, start_worker, request, kind
):
    """The journal file for several processes on one machine; PostgreSQL for several machines
    (a real server, skipped where the machine has no PostgreSQL install or driver)."""
    vary, seeds = "optim.lr=0.05,0.4", 2  # 3 configs x 2 seeds
    if kind == "journal":
        storage = str(tmp_path / "study.journal")
    else:
        storage = request.getfixturevalue("postgres_server").new_database()
    cmd = ablate_command(tmp_path, vary, seeds, storage=storage)
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    workers = [start_worker(cmd, log) for log in logs]
    finished = [finish_worker(w, log) for w, log in zip(workers, logs)]
    for code, output in finished:
        assert code == 0, output

    units = planned_units(vary, seeds)
    trials = study_trials(storage, tmp_path)
    assert complete_per_unit(trials) == {unit: 1 for unit in units}  # none skipped, none twice
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    # A trial given up because its unit was taken is no run; every other trial is a complete one.
    assert {trial_status(t) for t in trials} <= {"complete", "skipped"}
    ran = [summary_of(output)["ran"] for _, output in finished]
    assert sum(ran) == len(units) == 6  # between them, the two workers trained each unit once
    assert all(summary_of(o)["status_counts"] == {"complete": 6} for _, o in finished)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_to_a_worker_marks_its_running_trial_interrupted_and_exits_cleanly(
    tmp_path, start_worker, signum
):
    worker = start_worker(ablate_command(tmp_path, "optim.lr=0.4", 1), tmp_path / "w.log")
    running = stop_mid_run(worker, tmp_path / "w.log", tmp_path, after_complete=0)
    os.kill(worker.pid, signum)  # delivered when it continues, in the middle of the run
    os.kill(worker.pid, signal.SIGCONT)
    code, output = finish_worker(worker, tmp_path / "w.log")

    assert code == 130, (output, study_trials(None, tmp_path)[running.number].user_attrs)
    assert "Traceback" not in output
    assert "interrupted: the running trial is marked interrupted" in output
    trials = study_trials(None, tmp_path)
    interrupted = trials[running.number]
    assert interrupted.state == TrialState.FAIL
    assert interrupted.user_attrs["status"] == "interrupted", (interrupted.user_attrs, output)
    assert "Ctrl-C" in interrupted.user_attrs["error"]
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert all(trial_status(t) == "complete" for t in trials if t.number != running.number)
