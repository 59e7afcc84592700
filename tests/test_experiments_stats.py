"""Statistics of the results table against scipy reference values on fixed numbers."""

import csv
import math
import os
import warnings

import numpy as np
import optuna
import pytest
from scipy import stats

from tricklab.errors import TrickLabError
from tricklab.experiments.stats import (
    ConfigStats,
    collect_runs,
    config_stats,
    mean_interval,
    speedup_interval,
    welch,
    write_csv,
)

BASE_ACC = [0.940, 0.942, 0.938, 0.941, 0.939]
TRICK_ACC = [0.935, 0.937, 0.936, 0.933, 0.934, 0.932]
BASE_SECONDS = [10.0, 10.4, 9.8, 10.1, 10.2]
TRICK_SECONDS = [8.1, 8.0, 8.3, 7.9, 8.2, 8.0]


def records(config_id, accuracies, seconds, status="complete", target=0.94):
    return [
        {
            "config_id": config_id,
            "overrides": [] if config_id == "baseline" else [config_id],
            "status": status,
            "accuracy": acc,
            "train_seconds": secs,
            "target_accuracy": target,
            "time_to_target_seconds": None,
        }
        for acc, secs in zip(accuracies, seconds)
    ]


def test_mean_interval_is_student_t_around_the_mean():
    mean, std, low, high = mean_interval(BASE_ACC)
    ref = stats.t.interval(
        0.95, len(BASE_ACC) - 1, loc=np.mean(BASE_ACC), scale=stats.sem(BASE_ACC)
    )
    assert mean == pytest.approx(0.94)
    assert std == pytest.approx(np.std(BASE_ACC, ddof=1))
    assert (low, high) == pytest.approx(ref)
    assert (low, high) == pytest.approx((0.9380367568, 0.9419632432))


def test_welch_difference_interval_and_p_value_match_scipy():
    diff, low, high, p = welch(TRICK_ACC, BASE_ACC)
    ref = stats.ttest_ind(TRICK_ACC, BASE_ACC, equal_var=False)
    assert diff == pytest.approx(np.mean(TRICK_ACC) - np.mean(BASE_ACC))
    assert (low, high) == pytest.approx(tuple(ref.confidence_interval(0.95)))
    assert p == pytest.approx(ref.pvalue)
    assert p == pytest.approx(0.000506245006, rel=1e-6)
    assert (low, high) == pytest.approx((-0.0078549526, -0.0031450474))


def test_speedup_is_the_ratio_of_geometric_means_with_a_welch_interval_on_log_times():
    speedup, low, high, p = speedup_interval(BASE_SECONDS, TRICK_SECONDS)
    assert speedup == pytest.approx(
        math.exp(np.mean(np.log(BASE_SECONDS)) - np.mean(np.log(TRICK_SECONDS)))
    )
    assert speedup == pytest.approx(1.2494115621)
    assert (low, high) == pytest.approx((1.214099, 1.28575121), rel=1e-6)
    assert p == pytest.approx(1.2697369709e-07, rel=1e-6)


def test_fewer_than_two_runs_give_no_interval():
    assert mean_interval([0.9]) == (0.9, None, None, None)
    diff, low, high, p = welch([0.9], BASE_ACC)
    assert diff == pytest.approx(0.9 - 0.94) and (low, high, p) == (None, None, None)


def test_table_compares_each_config_with_the_baseline():
    rows = config_stats(
        records("baseline", BASE_ACC, BASE_SECONDS)
        + records("tricks.fast=true", TRICK_ACC, TRICK_SECONDS)
        + records("tricks.same=true", [0.941, 0.939, 0.940], [10.0, 10.1, 10.2])
        + records("tricks.fast=true", [None], [0.0], status="diverged")
        + records("tricks.close=true", [0.936, 0.938, 0.935, 0.939, 0.937], [10.0] * 5)
    )
    base, fast, same, close = rows
    assert base.is_reference and base.config_id == "baseline" and base.n == 5
    assert fast.n == 6 and fast.failures == {"diverged": 1}
    assert fast.accuracy_p_value == pytest.approx(0.000506245006, rel=1e-6)
    assert fast.within_noise is False
    assert fast.speedup == pytest.approx(1.2494115621)
    assert same.within_noise is True
    # p = 0.017: the interval of the difference ends below 0, so it is a real (small) loss
    assert close.accuracy_p_value == pytest.approx(0.0170716812, rel=1e-6)
    assert close.accuracy_diff_ci_high < 0 and close.within_noise is False


def test_fraction_reaching_the_target_counts_diverged_runs_as_misses():
    rows = config_stats(
        records("baseline", [0.941, 0.945, 0.939, 0.940, 0.950], [1.0] * 5)
        + records("baseline", [None], [0.0], status="diverged")
    )
    assert rows[0].reached_target == 4 and rows[0].target_runs == 6
    assert rows[0].fraction_reached_target == pytest.approx(4 / 6)


def test_without_a_baseline_the_best_config_is_the_reference():
    rows = config_stats(
        records("optim.lr=0.1", TRICK_ACC, TRICK_SECONDS)
        + records("optim.lr=0.2", BASE_ACC, BASE_SECONDS),
        order="accuracy",
    )
    assert [r.config_id for r in rows] == ["optim.lr=0.2", "optim.lr=0.1"]
    assert rows[0].is_reference and rows[1].accuracy_diff < 0


def test_rows_round_trip_through_dicts_and_csv(tmp_path):
    rows = config_stats(
        records("baseline", BASE_ACC, BASE_SECONDS)
        + records("tricks.fast=true", TRICK_ACC, TRICK_SECONDS)
    )
    assert [ConfigStats.from_dict(r.to_dict()) for r in rows] == rows
    write_csv(rows, tmp_path / "rows.csv")
    with open(tmp_path / "rows.csv") as handle:
        lines = list(csv.DictReader(handle))
    assert [line["config_id"] for line in lines] == ["baseline", "tricks.fast=true"]
    assert float(lines[1]["accuracy_p_value"]) == pytest.approx(rows[1].accuracy_p_value)


def test_csv_into_a_folder_is_a_user_error_and_leaves_nothing(tmp_path):
    rows = config_stats(records("baseline", BASE_ACC, BASE_SECONDS))
    (tmp_path / "rows.csv").mkdir()
    with pytest.raises(TrickLabError, match="cannot write the CSV file"):
        write_csv(rows, tmp_path / "rows.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.csv"]


def test_csv_over_a_read_only_file_is_a_user_error_and_leaves_it(tmp_path):
    rows = config_stats(records("baseline", BASE_ACC, BASE_SECONDS))
    target = tmp_path / "rows.csv"
    target.write_text("kept\n")
    target.chmod(0o444)
    with pytest.raises(TrickLabError, match="rows.csv: it is read-only"):
        write_csv(rows, target)
    assert target.read_text() == "kept\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "rows.csv"
    ]


def test_welch_on_identical_runs_gives_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert welch([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])[0] == 0.0
        diff, low, high, p = welch([0.5, 0.5, 0.5000001], [0.5, 0.5, 0.5])
    assert low < diff < high and 0 < p < 1


def test_a_unit_whose_worker_died_after_storing_its_run_counts_as_interrupted():
    import optuna

    from tricklab.experiments.stats import collect_runs

    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    trial = study.ask()
    trial.set_user_attr("unit", "baseline seed=0")
    trial.set_user_attr("config_id", "baseline")
    trial.set_user_attr("runs", [{"seed": 0, "status": "complete", "accuracy": 0.9}])
    study.tell(trial, state=optuna.trial.TrialState.FAIL)  # what the stale-worker sweep records
    (record,) = collect_runs(study)
    assert record["status"] == "interrupted"


def test_a_running_trial_whose_worker_process_is_gone_reads_as_interrupted():
    import socket
    import subprocess
    import sys

    import optuna

    from tricklab.experiments.stats import collect_runs
    from tricklab.experiments.storage import WORKER_ATTR

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid of this host with no process behind it
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    for pid in (gone.pid, os.getpid()):
        trial = study.ask()
        trial.set_user_attr("unit", f"baseline seed={pid}")
        trial.set_user_attr("config_id", "baseline")
        trial.set_user_attr("seed", pid)
        study._storage.set_trial_system_attr(
            trial._trial_id, WORKER_ATTR, {"host": socket.gethostname(), "pid": pid}
        )
    statuses = {r["seed"]: r["status"] for r in collect_runs(study)}
    assert statuses == {gone.pid: "interrupted", os.getpid(): "running"}


def test_the_table_shows_runs_at_the_target_and_the_mean_seconds_to_reach_it():
    from tricklab.experiments.cli import console, stats_table

    rows = records("baseline", [0.941, 0.945, 0.930], [10.0, 11.0, 12.0])
    for row, seconds in zip(rows, [6.0, 8.0, None]):
        row["time_to_target_seconds"] = seconds
    (stat,) = config_stats(rows)
    assert stat.time_to_target_seconds_mean == pytest.approx(7.0)
    out = console()
    with out.capture() as captured:
        out.print(stats_table([stat]))
    assert "2/3, 7.0" in captured.get()


def test_results_against_another_target_time_it_from_each_runs_epochs():
    rows = records("baseline", [0.95, 0.95], [10.0, 10.0], target=0.93)
    for row in rows:  # stored: reached 0.93 at 4 s; 0.94 only at the epoch ending at 8 s
        row["time_to_target_seconds"] = 4.0
        row["epochs"] = [
            {"val_acc": 0.935, "train_seconds": 4.0},
            {"val_acc": 0.945, "train_seconds": 8.0},
        ]
    assert config_stats(rows)[0].time_to_target_seconds_mean == pytest.approx(4.0)
    assert config_stats(rows, target=0.94)[0].time_to_target_seconds_mean == pytest.approx(8.0)
    assert config_stats(rows, target=0.96)[0].time_to_target_seconds_mean is None


# ---------------------------------------------------------------- one record per (config, seed)


def sampled_trial(number, runs, state, status, per_seed=False, config_id="optim.lr=0.3"):
    attrs = {
        "unit": f"sample-{number}",
        "config_id": config_id,
        "overrides": [config_id],
        "status": status,
    }
    if per_seed:  # stored seed by seed, never told
        attrs.update({f"run-{r['seed']}": r for r in runs})
    else:
        attrs["runs"] = runs
    complete = [r["accuracy"] for r in runs if r["status"] == "complete"]
    value = sum(complete) / len(complete) if state == optuna.trial.TrialState.COMPLETE else None
    return optuna.trial.create_trial(state=state, value=value, user_attrs=attrs)


def run(seed, status="complete", accuracy=0.5, **extra):
    return {
        "seed": seed,
        "status": status,
        "accuracy": accuracy,
        "train_seconds": 1.0 + seed,
        **extra,
    }


def test_a_complete_run_of_a_config_and_seed_stands_over_an_earlier_pruned_or_diverged_try():
    study = optuna.create_study()
    study.set_user_attr("seeds", 2)
    S = optuna.trial.TrialState
    study.add_trial(sampled_trial(0, [run(0, "pruned", None)], S.PRUNED, "pruned"))
    study.add_trial(
        sampled_trial(1, [run(0, "diverged", None)], S.FAIL, "diverged", config_id="optim.lr=9")
    )
    study.add_trial(sampled_trial(2, [run(0), run(1, accuracy=0.6)], S.COMPLETE, "complete"))
    # drawn again: its seeds are reused, short records naming trial 2, counted once
    reused = [run(s, reused_from_trial=2) for s in (0, 1)]
    study.add_trial(sampled_trial(3, reused, S.COMPLETE, "complete"))
    records = collect_runs(study)
    by_config = {(r["config_id"], r["seed"]): (r["status"], r["trial"]) for r in records}
    assert by_config == {
        ("optim.lr=0.3", 0): ("complete", 2),
        ("optim.lr=0.3", 1): ("complete", 2),
        ("optim.lr=9", 0): ("diverged", 1),
    }
    (row,) = [r for r in config_stats(records) if r.config_id == "optim.lr=0.3"]
    assert row.n == 2 and row.failures == {} and row.accuracy_mean == pytest.approx(0.55)


def test_a_sampled_trial_that_stopped_mid_way_keeps_its_stored_seeds_and_shows_the_one_it_was_on():
    study = optuna.create_study()
    study.set_user_attr("seeds", 3)
    stopped = sampled_trial(0, [run(0)], optuna.trial.TrialState.FAIL, "interrupted", per_seed=True)
    study.add_trial(stopped)
    records = collect_runs(study)
    assert [(r["seed"], r["status"]) for r in records] == [(0, "complete"), (1, "interrupted")]
    (row,) = config_stats(records)
    assert row.n == 1 and row.failures == {"interrupted": 1}
