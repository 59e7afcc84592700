"""The experiment runner in-process: statuses, resume, exactly-once claims, sweeps, the CLI.

Failures other than NaN are injected through the `train_fn` parameter; the end-to-end ablation and
the diverging run use the real engine on the synthetic dataset.
"""

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter

import optuna
import pytest
import torch
from optuna.trial import TrialState
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.experiments import (
    AblationPlan,
    Liveness,
    SweepPlan,
    ablate,
    parse_space,
    results,
    sweep,
)
from tricklab.experiments.claims import HEARTBEAT_ATTR, WORKER_ATTR, is_stale
from tricklab.experiments.reading import study_runs
from tricklab.experiments.stats import ConfigStats
from tricklab.experiments.storage import open_storage, storage_url, trial_status
from tricklab.recipe.schema import load_recipe
from tricklab.training.api import RunResult

TINY = [*TINY_SYNTHETIC, "optim.lr=0.2", "optim.nesterov=true", "run.epochs=1"]
FAST = Liveness(poll_seconds=0.05)


def fake_train(recipe, *, on_epoch=None, out_dir=None, stop=None):
    """A stand-in engine: accuracy grows with lr and seed, two epochs, no training."""
    accuracy = 0.5 + 0.1 * recipe.optim.lr + 0.01 * recipe.run.seed
    rows = [
        {"epoch": epoch, "val_acc": accuracy * epoch / 2, "train_seconds": epoch}
        for epoch in (1, 2)
    ]
    for row in rows:
        if on_epoch is not None:
            on_epoch(row)
    return RunResult(
        status="complete", val_acc=accuracy, val_loss=1.0, train_seconds=1.0 + 0.01 * recipe.run.seed,
        recipe=recipe.to_dict(), epochs=rows,
    )  # fmt: skip


def unit_trials(study_name, out_dir):
    storage = open_storage(storage_url(None, out_dir), must_exist=True)
    return optuna.load_study(study_name=study_name, storage=storage).get_trials()


def complete_per_unit(trials):
    return Counter(t.user_attrs["unit"] for t in trials if trial_status(t) == "complete")


@pytest.fixture
def baseline():
    return load_recipe(None, ["data.name=synthetic"])


def test_tiny_ablation_runs_end_to_end_and_results_json_round_trips(tmp_path, capsys):
    args = ["ablate", "--baseline", *TINY, "--vary", "aug.flip=random", "--seeds", "2"]
    args += ["--budget-epochs", "1", "--target", "0.5", "--out", str(tmp_path), "--json"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["planned"] == 4 and summary["ran"] == 4
    assert summary["status_counts"] == {"complete": 4}
    rows = [ConfigStats.from_dict(r) for r in summary["stats"]]
    assert [(r.config_id, r.n) for r in rows] == [("baseline", 2), ("aug.flip=random", 2)]
    assert all(0 <= r.accuracy_mean <= 1 and r.train_seconds_mean > 0 for r in rows)
    assert rows[0].target == 0.5
    # 2 runs a side: too few for a test (Student's t at 1 df is 12.7), said in words, no p-value
    assert rows[1].verdict == "too few runs" and rows[1].accuracy_p_value is None

    trial = unit_trials(summary["study"], tmp_path)[0]
    run = trial.user_attrs["runs"][0]
    assert (
        run["recipe"]["run"]["epochs"] == 1 and run["recipe"]["run"]["early_stopping_patience"] == 0
    )
    assert len(run["epochs"]) == 1 and run["hardware"] and run["tricklab_version"]
    assert trial.value == pytest.approx(run["val_acc"])

    assert main(["results", summary["study"], "--out", str(tmp_path), "--json"]) == 0
    table = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert table["reference"] == "baseline"
    assert [ConfigStats.from_dict(r) for r in table["configs"]] == rows

    assert main(args) == 0  # the same command again: everything is done, nothing runs
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["ran"] == 0 and again["already_done"] == 4


def test_nan_loss_gives_diverged_and_the_study_goes_on(tmp_path):
    summary = ablate(
        AblationPlan(load_recipe(None, TINY), {"optim.lr": [1e12]}, 1, out_dir=tmp_path),
        liveness=FAST,
    )
    assert summary.status_counts == {"complete": 1, "diverged": 1}
    (diverged,) = [t for t in unit_trials(summary.study, tmp_path) if trial_status(t) == "diverged"]
    assert diverged.state == TrialState.FAIL
    assert "NaN" in diverged.user_attrs["error"]
    assert summary.stats[1].failures == {"diverged": 1}


def test_out_of_memory_gives_oom_and_the_next_config_goes_on(baseline, tmp_path):
    def train(recipe, **kwargs):
        if recipe.optim.lr == 0.4:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return fake_train(recipe, **kwargs)

    summary = ablate(
        AblationPlan(baseline, {"optim.lr": [0.4, 0.8]}, 1, out_dir=tmp_path),
        train_fn=train,
        liveness=FAST,
    )
    assert summary.status_counts == {"complete": 2, "oom": 1}
    (oom,) = [t for t in unit_trials(summary.study, tmp_path) if trial_status(t) == "oom"]
    assert oom.state == TrialState.FAIL and "out of memory" in oom.user_attrs["error"]


def test_any_other_exception_gives_failed_with_its_message(baseline, tmp_path):
    def train(recipe, **kwargs):
        if recipe.optim.lr == 0.4:
            raise ValueError("bad batch")
        return fake_train(recipe, **kwargs)

    summary = ablate(
        AblationPlan(baseline, {"optim.lr": [0.4]}, 2, out_dir=tmp_path),
        train_fn=train,
        liveness=FAST,
    )
    assert summary.status_counts == {"complete": 2, "failed": 2}
    failed = [t for t in unit_trials(summary.study, tmp_path) if trial_status(t) == "failed"]
    assert {t.user_attrs["error"] for t in failed} == {"ValueError: bad batch"}
    assert summary.stats[1].failures == {"failed": 2}
    (run,) = failed[0].user_attrs["runs"]
    assert run["hardware"]["device_type"] == "cpu" and run["recipe"]["optim"]["lr"] == 0.4
    # fifth hostile round: `results --runs` as CSV or JSON gave them 0.0 s, the table "-"
    runs = study_runs(summary.study, out_dir=str(tmp_path))[1]
    assert {r["status"]: r["train_seconds"] for r in runs if r["status"] == "failed"} == {
        "failed": None
    }


def test_rerun_skips_completed_units_and_runs_failed_ones_again(baseline, tmp_path):
    broken = {"on": True}

    def train(recipe, **kwargs):
        if broken["on"] and recipe.run.seed == 1:
            raise RuntimeError("flaky disk")
        return fake_train(recipe, **kwargs)

    first = ablate(
        AblationPlan(baseline, {"optim.lr": [0.4]}, 2, out_dir=tmp_path),
        train_fn=train,
        liveness=FAST,
    )
    assert first.status_counts == {"complete": 2, "failed": 2}
    broken["on"] = False
    second = ablate(
        AblationPlan(baseline, {"optim.lr": [0.4]}, 2, out_dir=tmp_path),
        train_fn=train,
        liveness=FAST,
    )
    assert second.ran == 2 and second.already_done == 2
    assert second.status_counts == {"complete": 4}
    assert set(complete_per_unit(unit_trials(second.study, tmp_path)).values()) == {1}


def test_ctrl_c_marks_the_running_trial_interrupted_and_a_rerun_finishes(baseline, tmp_path):
    calls = []

    def train(recipe, **kwargs):
        calls.append(recipe)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return fake_train(recipe, **kwargs)

    with pytest.raises(KeyboardInterrupt):
        ablate(
            AblationPlan(baseline, {"optim.lr": [0.4]}, 2, out_dir=tmp_path),
            train_fn=train,
            liveness=FAST,
        )
    summary = ablate(
        AblationPlan(baseline, {"optim.lr": [0.4]}, 2, out_dir=tmp_path),
        train_fn=train,
        liveness=FAST,
    )
    trials = unit_trials(summary.study, tmp_path)
    assert [trial_status(t) for t in trials].count("interrupted") == 1
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert summary.status_counts == {"complete": 4}
    assert set(complete_per_unit(trials).values()) == {1}


def _a_handler_of_its_own(signum, frame):
    raise AssertionError("the worker's own handler should have been in place")


# What a test run may start with: Python's default, ignored (a background job, `trap '' INT`),
# the OS default, or a handler some other code installed.
FOUND_HANDLERS = {
    "python-default": signal.default_int_handler,
    "ignored": signal.SIG_IGN,
    "os-default": signal.SIG_DFL,
    "another-handler": _a_handler_of_its_own,
}


@pytest.fixture(params=list(FOUND_HANDLERS), ids=list(FOUND_HANDLERS))
def found_handler(request):
    """SIGINT and SIGTERM set to one of FOUND_HANDLERS for the test, whatever pytest started with."""
    handler = FOUND_HANDLERS[request.param]
    before = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    yield handler
    for signum, previous in before.items():
        signal.signal(signum, previous)


@pytest.mark.parametrize("library_error", [False, True], ids=["dropped", "turned-into-an-error"])
def test_a_ctrl_c_that_python_drops_still_stops_the_worker(
    tmp_path, capsys, monkeypatch, library_error, found_handler
):
    """A signal handler's KeyboardInterrupt raised inside __del__ is dropped ("Exception ignored
    in ..."); one raised inside a library callback may come back as another error. Either way the
    run in flight ends interrupted, the worker stops after it and prints no traceback. Whatever
    handlers it found for SIGINT and SIGTERM are back in place afterwards."""
    from tricklab.training import api, loop

    class SignalsWhileCollected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here, inside __del__

    runs, real_step = [], loop.train_step

    def train(recipe, **kwargs):
        runs.append(recipe)
        return api.train(recipe, **kwargs)

    def step(*args):
        if len(runs) == 2 and not hasattr(step, "signalled"):
            step.signalled = True
            SignalsWhileCollected()  # collected at once: the interrupt is dropped
            if library_error:
                raise RuntimeError("a callback raised KeyboardInterrupt")
        return real_step(*args)

    monkeypatch.setattr(loop, "train_step", step)
    with pytest.raises(KeyboardInterrupt):
        ablate(
            AblationPlan(
                load_recipe(None, TINY), {"optim.lr": [0.4]}, 2, study="s", out_dir=tmp_path
            ),
            train_fn=train,
            liveness=FAST,
        )
    assert len(runs) == 2  # the worker stopped after the run in flight
    assert "Traceback" not in capsys.readouterr().err
    trials = unit_trials("s", tmp_path)
    assert sorted(trial_status(t) for t in trials) == ["complete", "interrupted"]
    assert signal.getsignal(signal.SIGINT) is found_handler  # restored, whatever it was
    assert signal.getsignal(signal.SIGTERM) is found_handler


@pytest.mark.parametrize("write", ["heartbeat", "finish_trial"])
def test_a_signal_during_a_workers_storage_write_lets_the_write_finish_then_stops(
    baseline, tmp_path, monkeypatch, write
):
    """A SIGTERM raised inside a storage write could leave a lock it held held (a worker hung
    once with no output, its trial claimed): between runs the signal waits for the next safe
    point. The write in flight finishes; the worker stops before another run."""
    from tricklab.experiments import workers

    real = getattr(workers, write)
    done = []

    def signalled(*args, **kwargs):
        if not done:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0.2)  # the handler runs here: it must not raise
        done.append(write)
        return real(*args, **kwargs)

    monkeypatch.setattr(workers, write, signalled)
    with pytest.raises(KeyboardInterrupt):  # ablate() handles the signals, as the CLI does
        ablate(
            AblationPlan(baseline, {"optim.lr": [0.4]}, 2, study="s", out_dir=tmp_path),
            train_fn=fake_train,
            liveness=FAST,
        )
    assert done[:1] == [write]  # the write went on past the signal
    trials = unit_trials("s", tmp_path)
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    # a signal in the heartbeat's start stops the run it begins; in finish_trial, after the
    # trial is stored complete
    expected = ["interrupted"] if write == "heartbeat" else ["complete"]
    assert sorted(trial_status(t) for t in trials) == expected


def test_a_unit_enqueued_twice_runs_once(baseline, tmp_path):
    ablate(
        AblationPlan(baseline, {"optim.lr": [0.4]}, 1, study="s", out_dir=tmp_path),
        train_fn=fake_train,
    )
    study = optuna.load_study(study_name="s", storage=open_storage(storage_url(None, tmp_path)))
    attrs = {"unit": "optim.lr=0.4 seed=1", "config_id": "optim.lr=0.4"}
    attrs |= {"overrides": ["optim.lr=0.4"], "seed": 1}
    study.enqueue_trial({}, user_attrs=attrs)  # as two workers starting together would
    study.enqueue_trial({}, user_attrs=attrs)
    summary = ablate(
        AblationPlan(baseline, {"optim.lr": [0.4]}, 2, study="s", out_dir=tmp_path),
        train_fn=fake_train,
        liveness=FAST,
    )
    trials = unit_trials("s", tmp_path)
    assert summary.status_counts == {"complete": 4}
    assert set(complete_per_unit(trials).values()) == {1}
    assert [trial_status(t) for t in trials].count("skipped") == 1


def test_a_trial_whose_worker_died_is_run_again(baseline, tmp_path):
    ablate(
        AblationPlan(baseline, {"optim.lr": [0.4]}, 1, study="s", out_dir=tmp_path),
        train_fn=fake_train,
    )
    storage = open_storage(storage_url(None, tmp_path))
    study = optuna.load_study(study_name="s", storage=storage)
    attrs = {"unit": "baseline seed=1", "config_id": "baseline", "overrides": [], "seed": 1}
    study.enqueue_trial({}, user_attrs=attrs)
    lost = study.ask()  # claimed by a worker that then died
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    storage.set_trial_system_attr(lost._trial_id, WORKER_ATTR, {"host": _host(), "pid": dead.pid})
    summary = ablate(
        AblationPlan(baseline, {"optim.lr": [0.4]}, 2, study="s", out_dir=tmp_path),
        train_fn=fake_train,
        liveness=FAST,
    )
    assert summary.status_counts == {"complete": 4}
    assert trial_status(storage.get_trial(lost._trial_id)) == "interrupted"


def test_a_claimed_trial_names_its_worker_before_anything_else():
    from tricklab.experiments.claims import pop_waiting_trial, worker_identity

    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    study.enqueue_trial({}, user_attrs={"unit": "baseline seed=0"})
    trial_id = pop_waiting_trial(study, storage)
    assert storage.get_trial(trial_id).state == TrialState.RUNNING
    assert storage.get_trial(trial_id).system_attrs[WORKER_ATTR] == worker_identity()


def _host():
    import socket

    return socket.gethostname()


def test_a_worker_on_another_host_is_stale_only_after_its_heartbeat_goes_silent():
    trial = optuna.trial.create_trial(state=TrialState.RUNNING)
    trial.system_attrs = {WORKER_ATTR: {"host": "elsewhere", "pid": 1}, HEARTBEAT_ATTR: 1000.0}
    assert not is_stale(trial, grace_seconds=60, now=1050.0)
    assert is_stale(trial, grace_seconds=60, now=1061.0)


def test_a_study_name_holding_another_baseline_is_a_user_error(baseline, tmp_path):
    ablate(
        AblationPlan(baseline, {"optim.lr": [0.4]}, 1, study="s", out_dir=tmp_path),
        train_fn=fake_train,
    )
    other = baseline.override(["model.width=0.5"])
    with pytest.raises(TrickLabError, match="another experiment"):
        ablate(
            AblationPlan(other, {"optim.lr": [0.4]}, 1, study="s", out_dir=tmp_path),
            train_fn=fake_train,
        )


def test_sampled_sweep_runs_the_requested_trials_each_with_every_seed(baseline, tmp_path):
    space = parse_space(
        {"optim.lr": {"low": 0.01, "high": 1.0, "log": True}, "optim.name": ["sgd", "adam"]}
    )
    plan = SweepPlan(baseline, space, trials=4, sampler="tpe", seeds=2, out_dir=tmp_path)
    run = dict(train_fn=fake_train, liveness=FAST)
    summary = sweep(plan, **run)
    assert summary.planned == summary.ran == 4  # trials, each with its 2 seeds
    trials = unit_trials(summary.study, tmp_path)
    assert len(trials) == 4 and all(t.state == TrialState.COMPLETE for t in trials)
    assert all(len(t.user_attrs["runs"]) == 2 for t in trials)
    assert all(0.01 <= t.params["optim.lr"] <= 1.0 for t in trials)
    mean = sum(r["accuracy"] for r in trials[0].user_attrs["runs"]) / 2
    assert trials[0].value == pytest.approx(mean)
    assert sweep(plan, **run).ran == 0  # resumed: the study has its 4 trials


def test_median_pruner_stops_hopeless_trials_and_records_them_pruned(baseline, tmp_path):
    space = parse_space({"optim.lr": [0.1, 0.9, 1.0]})
    summary = sweep(
        SweepPlan(
            baseline, space, 12, sampler="random", pruner="median", sampler_seed=9, out_dir=tmp_path
        ),  # seed 9 draws lr 0.1 first as the 7th trial, past the pruner's 5 startup trials
        train_fn=fake_train,
        liveness=FAST,
    )
    trials = unit_trials(summary.study, tmp_path)
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    # The best lr (1.0) never falls below the median of earlier trials; worse ones may.
    assert pruned and all(t.params["optim.lr"] < 1.0 for t in pruned)
    assert any(t.params["optim.lr"] == 1.0 and t.state == TrialState.COMPLETE for t in trials)
    assert all(t.user_attrs["status"] == "pruned" for t in pruned)
    reused = [t for t in trials if any("reused_from_trial" in r for r in t.user_attrs["runs"])]
    assert reused  # lr 1.0 drawn again: its run is reused, its curve reported to the pruner again
    assert all(t.intermediate_values for t in trials)
    for t in reused:
        (source,) = [s for s in trials if s.number == t.user_attrs["runs"][0]["reused_from_trial"]]
        assert t.intermediate_values == source.intermediate_values
    assert summary.status_counts["pruned"] == len(pruned)


def epochs_fake_train(recipe, *, on_epoch=None, out_dir=None, stop=None):
    """fake_train's accuracies over the recipe's run.epochs epochs, reported as they end."""
    accuracy = 0.5 + 0.1 * recipe.optim.lr + 0.01 * recipe.run.seed
    epochs = int(recipe.run.epochs)
    for epoch in range(1, epochs + 1):
        if on_epoch is not None:
            on_epoch({"epoch": epoch, "val_acc": accuracy * epoch / epochs, "train_seconds": epoch})
    return RunResult(
        status="complete",
        val_acc=accuracy,
        val_loss=1.0,
        train_seconds=1.0,
        recipe=recipe.to_dict(),
    )


@pytest.mark.parametrize("epochs", [1, 3])
def test_the_pruner_stops_runs_between_epochs_never_one_that_has_finished(tmp_path, epochs):
    base = load_recipe(None, ["data.name=synthetic", f"run.epochs={epochs}"])
    space = parse_space({"optim.lr": {"low": 0.01, "high": 1.0}})
    summary = sweep(
        SweepPlan(
            base, space, 16, sampler="random", pruner="median", sampler_seed=0, out_dir=tmp_path
        ),
        train_fn=epochs_fake_train,
        liveness=FAST,
    )
    pruned = [t for t in unit_trials(summary.study, tmp_path) if t.state == TrialState.PRUNED]
    if epochs == 1:
        assert not pruned and summary.status_counts == {"complete": 16}
    else:
        assert pruned and all(max(t.intermediate_values) < epochs for t in pruned)


def test_a_sampled_point_drawn_again_reuses_its_seeded_runs_and_counts_them_once(
    baseline, tmp_path
):
    calls = []

    def train_fn(recipe, **kwargs):
        calls.append(recipe.run.seed)
        return fake_train(recipe, **kwargs)

    space = parse_space({"optim.lr": [0.3]})
    summary = sweep(
        SweepPlan(baseline, space, 3, sampler="random", seeds=2, out_dir=tmp_path),
        train_fn=train_fn,
        liveness=FAST,
    )
    assert calls == [0, 1]  # the 2nd and 3rd trials drew the same point: no seed runs twice
    trials = unit_trials(summary.study, tmp_path)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert len({t.value for t in trials}) == 1
    (row,) = results(summary.study, out_dir=tmp_path)
    assert row.n == 2  # two seeded runs, not six


def test_a_sampled_trial_whose_worker_dies_mid_way_keeps_its_finished_seeds(baseline, tmp_path):
    calls = []

    def train_fn(recipe, **kwargs):
        calls.append(recipe.run.seed)
        return fake_train(recipe, **kwargs)

    def die_after_seed_0(event):  # nothing after this runs: no tell, no stored list of runs
        if event.seed == 0:
            raise SystemExit("worker lost")

    space = parse_space({"optim.lr": [0.3]})
    plan = SweepPlan(baseline, space, trials=1, sampler="random", seeds=3, out_dir=tmp_path)
    run = dict(train_fn=train_fn, liveness=FAST)
    with pytest.raises(SystemExit):
        sweep(plan, **run, on_run_end=die_after_seed_0)
    summary = sweep(plan, **run)
    assert calls == [0, 1, 2]  # seed 0 was stored as it ended: not trained again
    (row,) = results(summary.study, out_dir=tmp_path)
    assert row.n == 3


def test_a_sampled_trial_interrupted_keeps_its_finished_seeds_and_the_rerun_runs_the_rest(
    baseline, tmp_path
):
    calls = []

    def train_fn(recipe, **kwargs):
        calls.append(recipe.run.seed)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return fake_train(recipe, **kwargs)

    space = parse_space({"optim.lr": [0.3]})
    plan = SweepPlan(baseline, space, trials=1, sampler="random", seeds=3, out_dir=tmp_path)
    run = dict(train_fn=train_fn, liveness=FAST)
    with pytest.raises(KeyboardInterrupt):
        sweep(plan, **run)
    summary = sweep(plan, **run)
    assert calls == [0, 1, 1, 2]  # seed 0 is kept from the interrupted try
    (row,) = results(summary.study, out_dir=tmp_path)
    assert row.n == 3 and summary.status_counts == {"complete": 1}


def test_grid_sweep_runs_each_point_once_per_seed_with_its_params(baseline, tmp_path):
    space = parse_space({"optim.lr": [0.1, 0.2], "optim.name": ["sgd", "adam"]})
    summary = sweep(
        SweepPlan(baseline, space, sampler="grid", seeds=2, out_dir=tmp_path),
        train_fn=fake_train,
        liveness=FAST,
    )
    trials = unit_trials(summary.study, tmp_path)
    assert summary.planned == 8 and summary.status_counts == {"complete": 8}
    assert Counter((t.params["optim.lr"], t.params["optim.name"]) for t in trials) == {
        (lr, name): 2 for lr in (0.1, 0.2) for name in ("sgd", "adam")
    }
    rows = results(summary.study, out_dir=tmp_path)
    assert len(rows) == 4 and rows[0].is_reference and rows[0].n == 2


@pytest.mark.parametrize("sampler", ["grid", "random"])
def test_a_list_field_is_swept_over_list_choices(baseline, tmp_path, sampler):
    widths_seen = []

    def train_fn(recipe, **kwargs):
        widths_seen.append(recipe.model.widths)
        return fake_train(recipe, **kwargs)

    space = parse_space({"model.widths": [[8, 16, 16], [16, 32, 32]], "optim.lr": [0.1]})
    summary = sweep(
        SweepPlan(
            baseline,
            space,
            trials=None if sampler == "grid" else 6,
            sampler=sampler,
            sampler_seed=0,
            out_dir=tmp_path,
        ),
        train_fn=train_fn,
        liveness=FAST,
    )
    assert summary.status_counts["complete"] == (2 if sampler == "grid" else 6)
    assert {tuple(w) for w in widths_seen} == {(8, 16, 16), (16, 32, 32)}
    trials = unit_trials(summary.study, tmp_path)
    assert {t.params["model.widths"] for t in trials} == {"[8, 16, 16]", "[16, 32, 32]"}
    labels = {row.config_id for row in results(summary.study, out_dir=tmp_path)}
    assert any("model.widths=[16, 32, 32]" in label for label in labels)


def test_grid_sweep_of_a_continuous_range_is_a_user_error(baseline, tmp_path):
    space = parse_space({"optim.lr": {"low": 0.01, "high": 1.0}})
    with pytest.raises(TrickLabError, match="finite space"):
        sweep(SweepPlan(baseline, space, sampler="grid", out_dir=tmp_path), train_fn=fake_train)


def test_a_bad_value_anywhere_in_the_space_fails_before_any_run(baseline, tmp_path, capsys):
    space = parse_space({"optim.name": ["sgd", "bogus"]})
    calls = []
    with pytest.raises(TrickLabError, match="optim.name='bogus' is not allowed"):
        sweep(
            SweepPlan(baseline, space, sampler="grid", out_dir=tmp_path),
            train_fn=lambda recipe, **kw: calls.append(recipe),
        )
    assert calls == []
    (tmp_path / "space.yaml").write_text("optim.momentum: {low: 0.5, high: 5.0}\n")  # top end > 1
    args = ["sweep", "--space", str(tmp_path / "space.yaml"), "--trials", "2", "--dry-run"]
    assert main(args) == 2
    assert "optim.momentum=5.0 must be <= 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    "make, extra, message",
    [
        (lambda d: None, ["--storage", "journal:/proc/no/x.journal"], "cannot open storage"),
        (lambda d: (d / "adir").mkdir(), ["--storage", "journal:{d}/adir"], "it is a folder"),
        (lambda d: (d / "afile").touch(), ["--out", "{d}/afile"], "afile is a file, not a folder"),
        (lambda d: (d / "s.yaml").write_bytes(b"\xff\xfe\x00"), ["--space", "{d}/s.yaml"], "not valid YAML"),
        (lambda d: (d / "x.journal").write_text("notes\n"), ["--storage", "{d}/x.journal"],
         "not an Optuna journal file"),
        (lambda d: sqlite3.connect(d / "x.db").execute("CREATE TABLE notes (t TEXT)").connection.commit(),
         ["--storage", "{d}/x.db"], "without Optuna's tables"),
        (lambda d: None, ["--storage", "postgresql+psycopg://u@127.0.0.1:1/db"],
         "cannot open storage postgresql+psycopg://u@127.0.0.1:1/db"),
    ],
    ids=["unwritable-journal", "journal-is-a-folder", "out-is-a-file", "space-not-utf8", "not-a-journal",
         "another-programs-sqlite", "no-server"],
)  # fmt: skip
@pytest.mark.parametrize("dry_run", [False, True])
def test_bad_storage_out_or_space_file_gives_one_line_and_exit_2(
    tmp_path, capsys, make, extra, message, dry_run
):
    if "postgresql" in message:
        pytest.importorskip("psycopg")
    make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    extra = [word.format(d=tmp_path) for word in extra]
    if "--space" in extra:
        args = ["sweep", *extra, "--trials", "1"]
    else:
        args = [
            "ablate",
            "--baseline",
            *TINY,
            "--vary",
            "optim.lr=0.2",
            "--budget-epochs",
            "0.01",
            *extra,
        ]
    assert main(args + ["--dry-run"] * dry_run) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert sorted(tmp_path.rglob("*")) == before  # nothing made


@pytest.mark.parametrize("dry_run", [False, True])
@pytest.mark.parametrize(
    "args, message",
    [
        (["ablate", "--baseline", *TINY, "data.name=imagefolder", "data.dir={d}/none", "--vary",
          "optim.lr=0.3"], "image folder {d}/none does not exist"),
        (["ablate", "--baseline", *TINY, "--vary", "model.pretrained=true"], "pretrained"),
        (["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.3", "--storage", "foo://bar"],
         "cannot open storage foo://bar"),
        (["sweep", "--baseline", *TINY, "--space", "{d}/space.yaml", "--trials", "1",
          "--sampler-seed", "-1"], "--sampler-seed -1 must lie in"),
        (["sweep", "--baseline", *TINY, "--space", "{d}/space.yaml", "--sampler", "random"],
         "needs --trials N"),
        (["sweep", "--baseline", *TINY, "--space", "{d}/space.yaml", "--trials", "0"],
         "--trials 0 must be at least 1"),
        (["sweep", "--baseline", *TINY, "--space", "{d}/space.yaml", "--trials", "1", "--seeds", "0"],
         "--seeds 0 must be at least 1"),
        (["sweep", "--baseline", *TINY, "--space", "{d}/space.yaml", "--trials", "1"],
         "unknown model 'nosuchnet'"),
    ],
    ids=["missing-data", "pretrained-offline", "unknown-storage", "sampler-seed", "no-trials",
         "zero-trials", "zero-seeds", "unknown-model-in-space"],
)  # fmt: skip
def test_bad_input_stops_an_experiment_before_any_run(tmp_path, capsys, args, message, dry_run):
    """Every run would fail on it: one line, exit 2, no run and no storage, with or without --dry-run."""
    (tmp_path / "space.yaml").write_text(
        "model.name: [airbench, nosuchnet]\n"
        if "nosuchnet" in message
        else "optim.lr: [0.1, 0.2]\n"
    )
    args = (
        [a.format(d=tmp_path) for a in args]
        + ["--out", str(tmp_path / "exp")]
        + ["--dry-run"] * dry_run
    )
    assert main(args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and message.format(d=tmp_path) in err[0], err
    assert not (tmp_path / "exp").exists()


def test_dry_run_leaves_an_sqlite_file_without_tables_untouched(tmp_path, capsys):
    db = tmp_path / "empty.db"
    with contextlib.closing(sqlite3.connect(db)) as con:
        con.execute("PRAGMA user_version = 7")  # a valid database file with no tables
    before = db.read_bytes()
    args = [
        "ablate",
        "--baseline",
        *TINY,
        "--vary",
        "optim.lr=0.3",
        "--storage",
        str(db),
        "--dry-run",
    ]
    assert main(args) == 0
    assert db.read_bytes() == before


def test_dry_run_prints_the_plan_and_creates_no_storage(tmp_path, capsys):
    args = [
        "ablate",
        "--baseline",
        *TINY,
        "--vary",
        "optim.lr=0.3,0.4",
        "--vary",
        "aug.flip=none,random",
        "--grid",
    ]
    args += ["--seeds", "3", "--out", str(tmp_path / "exp"), "--dry-run", "--json"]
    assert main(args) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plan["units"] == 5 * 3 and len(plan["configs"]) == 5
    assert not (tmp_path / "exp").exists()


def test_results_of_a_missing_study_is_a_user_error(tmp_path, capsys):
    assert main(["results", "nope", "--out", str(tmp_path)]) == 2
    assert "no study database" in capsys.readouterr().err


def test_the_summary_says_the_compile_seconds_the_study_paid(baseline, tmp_path, capsys):
    """Each run's warm-up (torch.compile, cuDNN autotuning) is timed apart; the study's summary
    sums them and names the longest: the first compile, which a warm cache leaves alone."""
    paid = iter([30.0, 2.0, 1.5, 1.0])

    def compiling(recipe, **kwargs):
        result = fake_train(recipe, **kwargs)
        result.compile_seconds = next(paid)
        return result

    summary = ablate(
        AblationPlan(baseline, {"optim.lr": [0.4, 0.8, 1.6]}, 1, out_dir=tmp_path),
        train_fn=compiling,
        liveness=FAST,
    )
    assert summary.compile_seconds == pytest.approx(34.5)
    assert summary.compile_seconds_max == 30.0
    from tricklab.cli.ablate_sweep import _print_summary
    from tricklab.cli.common import console

    _print_summary(console, console, summary, as_json=False)
    said = " ".join(capsys.readouterr().out.split())  # as one line, however the terminal wraps
    assert (
        "compile seconds (warm-ups, apart from the times above): 34.5 in all, the longest 30.0"
        in said
    )


def test_a_rerun_asking_more_seeds_plans_them_even_when_it_is_stopped_part_way(tmp_path):
    """Twelfth hostile round: the study kept its first call's `seeds`, so an ablation stopped
    after a rerun with more seeds said "10 of 11 planned runs done" where 14 were planned."""
    from tricklab.core.stopping import Interrupted, StopRequest

    recipe = load_recipe(None, TINY)

    def plan(seeds):
        return AblationPlan(recipe, {"optim.lr": [0.1]}, seeds, study="s", out_dir=tmp_path)

    ablate(plan(1), train_fn=fake_train, liveness=FAST)
    stop = StopRequest()
    with pytest.raises(Interrupted):
        ablate(
            plan(3),
            train_fn=fake_train,
            liveness=FAST,
            stop=stop,
            on_run_end=lambda _: stop.request(),
        )
    rows = results("s", out_dir=str(tmp_path))
    assert sorted(r.n for r in rows) == [1, 2] and [r.planned for r in rows] == [3, 3]
    storage = open_storage(storage_url(None, tmp_path), must_exist=True)
    assert optuna.load_study(study_name="s", storage=storage).user_attrs["seeds"] == 3
