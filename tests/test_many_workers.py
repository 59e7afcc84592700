"""Many workers, one study (issue 19): three `tricklab ablate` processes on one journal file.

The same command is started three times on one journal storage, as a user would start one worker
per GPU (or per core). Every (config, seed) must run exactly once, and the three must share the
runs between them. Each worker is a real CLI process with one torch thread; a run trains about two
seconds so that no worker has claimed every run before the others have started (importing torch
and checking the setup: about 6 s of CPU each). Whether 3 workers finish sooner than 1 is measured by
benchmarks/many_workers.py, not here.
"""

import json
import os
import subprocess
import sys
import time
from collections import Counter

import optuna
import pytest
from tiny_recipe import TINY_SYNTHETIC

from tricklab.experiments.claims import WORKER_ATTR
from tricklab.experiments.plan import ablation_plan, budget_overrides, parse_vary, plan_units
from tricklab.experiments.storage import open_storage, storage_url, trial_status
from tricklab.recipe.schema import load_recipe

EPOCHS = 40  # about 2 s of training per run on one core of the 2-core VM
BASELINE = [*TINY_SYNTHETIC, "run.eval_every=0"]  # evaluate once, at the end
VARY = ["optim.lr=0.4", "tricks.label_smoothing=0.1"]  # baseline + 2 tricks
SEEDS = 3
STUDY = "many-workers"
# One intra-op thread per worker: the workers share the cores instead of fighting over them.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
TIMEOUT = 400  # seconds for a whole study: a hang fails the test instead of blocking the suite


def ablate_command(storage, out_dir):
    cmd = [sys.executable, "-m", "tricklab", "ablate", "--baseline", *BASELINE]
    for vary in VARY:
        cmd += ["--vary", vary]
    cmd += ["--seeds", str(SEEDS), "--budget-epochs", str(EPOCHS), "--study", STUDY]
    return cmd + ["--storage", storage, "--out", str(out_dir), "--json"]


def planned_pairs():
    """The (config_id, seed) pairs the command plans, as the CLI computes them."""
    baseline = load_recipe(None, [*budget_overrides(EPOCHS, None, None), *BASELINE])
    units = plan_units(ablation_plan(baseline, parse_vary(VARY)).configs, SEEDS)
    return {(u.config.config_id, u.seed) for u in units}


def run_workers(count, out_dir):
    """Start `count` copies of the command at once on one journal in `out_dir` (which holds its
    run folders and the workers' logs too) and wait for all of them.

    Returns (wall seconds from the first start to the last exit, each worker's JSON summary)."""
    out_dir.mkdir()
    cmd = ablate_command(journal_in(out_dir), out_dir)
    names = [out_dir / f"worker-{i}" for i in range(count)]
    start = time.perf_counter()
    workers = []
    try:
        for name in names:
            # A session per worker, as if started from its own terminal or machine: Linux's
            # autogroup scheduler shares the CPU between sessions, so workers in one session
            # share its one slice whenever other jobs keep the machine busy.
            with (
                open(f"{name}.out", "w", encoding="utf-8") as out,
                open(f"{name}.log", "w", encoding="utf-8") as log,
            ):
                workers.append(
                    subprocess.Popen(cmd, stdout=out, stderr=log, env=ENV, start_new_session=True)
                )
        deadline = start + TIMEOUT
        for worker, name in zip(workers, names):
            try:
                code = worker.wait(timeout=max(1.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"worker hung:\n{read(name, 'log')}") from None
            assert code == 0, read(name, "log")
        wall_seconds = time.perf_counter() - start
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    return wall_seconds, [json.loads(read(name, "out").splitlines()[-1]) for name in names]


def read(name, suffix):
    with open(f"{name}.{suffix}", encoding="utf-8") as handle:
        return handle.read()


def journal_in(out_dir):
    return str(out_dir / "study.journal")


def stored_trials(out_dir):
    opened = open_storage(storage_url(journal_in(out_dir), out_dir), must_exist=True)
    return optuna.load_study(study_name=STUDY, storage=opened).get_trials()


def runs_per_pair(trials):
    """How many times each (config_id, seed) ran, counted from the storage: every trial that is
    a run (not `skipped`, the claim protocol's give-up), whatever its status."""
    return Counter(
        (t.user_attrs["config_id"], t.user_attrs["seed"])
        for t in trials
        if trial_status(t) != "skipped"
    )


@pytest.mark.slow
def test_three_workers_on_one_journal_run_each_config_seed_once_and_share_the_runs(tmp_path):
    """Which is sooner, 1 worker or 3, is benchmarks/many_workers.py's to measure (a timing is no
    test: other jobs' load decides it)."""
    pairs = planned_pairs()
    assert len(pairs) == 9  # 3 configs x 3 seeds
    _, summaries = run_workers(3, tmp_path / "three")
    trials = stored_trials(tmp_path / "three")
    assert runs_per_pair(trials) == {pair: 1 for pair in pairs}  # each once, none twice
    assert all(trial_status(t) in ("complete", "skipped") for t in trials)
    # The workers' own counts of the runs they did add up to the plan.
    assert sum(s["ran"] for s in summaries) == len(pairs)
    assert all(s["status_counts"] == {"complete": len(pairs)} for s in summaries)
    pids = {t.system_attrs[WORKER_ATTR]["pid"] for t in trials if trial_status(t) == "complete"}
    assert len(pids) >= 2, "the runs were not shared out"
