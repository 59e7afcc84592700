"""Statistics of the results table against scipy reference values on fixed numbers."""

import csv
import math
import os
import warnings

import numpy as np
import optuna
import pytest
from scipy import stats

from tricklab.core.errors import TrickLabError
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
    # picked after the runs: the table says so (the winner's curse), a given reference not
    from tricklab.report.tables import PICKED_NOTE, results_table

    assert rows[0].picked_best and PICKED_NOTE in results_table(rows).notes
    given = config_stats(
        records("optim.lr=0.1", TRICK_ACC, TRICK_SECONDS)
        + records("optim.lr=0.2", BASE_ACC, BASE_SECONDS),
        reference="optim.lr=0.1",
    )
    assert not any(r.picked_best for r in given)
    assert PICKED_NOTE not in results_table(given).notes


def test_rows_round_trip_through_dicts_and_csv(tmp_path):
    rows = config_stats(
        records("baseline", BASE_ACC, BASE_SECONDS)
        + records("tricks.fast=true", TRICK_ACC, TRICK_SECONDS)
    )
    assert [ConfigStats.from_dict(r.to_dict()) for r in rows] == rows
    write_csv(rows, tmp_path / "rows.csv")
    with open(tmp_path / "rows.csv", encoding="utf-8") as handle:
        lines = list(csv.DictReader(handle))
    assert [line["config_id"] for line in lines] == ["baseline", "tricks.fast=true"]
    assert float(lines[1]["accuracy_p_value"]) == pytest.approx(rows[1].accuracy_p_value)


def test_csv_into_a_folder_is_a_user_error_and_leaves_nothing(tmp_path):
    rows = config_stats(records("baseline", BASE_ACC, BASE_SECONDS))
    (tmp_path / "rows.csv").mkdir()
    with pytest.raises(TrickLabError, match="rows.csv is not a plain file"):
        write_csv(rows, tmp_path / "rows.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.csv"]


def test_csv_over_a_read_only_file_is_a_user_error_and_leaves_it(tmp_path):
    rows = config_stats(records("baseline", BASE_ACC, BASE_SECONDS))
    target = tmp_path / "rows.csv"
    write_csv(rows, target)  # one it wrote before (a file of another kind is refused first)
    kept = target.read_text()
    target.chmod(0o444)
    with pytest.raises(TrickLabError, match="rows.csv: it is read-only"):
        write_csv(rows, target)
    assert target.read_text() == kept and sorted(p.name for p in tmp_path.iterdir()) == ["rows.csv"]


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
    trial.set_user_attr(
        "runs", [{"seed": 0, "status": "complete", "accuracy": 0.9, "train_seconds": 1.0}]
    )
    study.tell(trial, state=optuna.trial.TrialState.FAIL)  # what the stale-worker sweep records
    (record,) = collect_runs(study)
    assert record["status"] == "interrupted"


def test_a_running_trial_whose_worker_process_is_gone_reads_as_interrupted():
    import socket
    import subprocess
    import sys

    import optuna

    from tricklab.experiments.claims import WORKER_ATTR
    from tricklab.experiments.stats import collect_runs

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
    from tricklab.cli.ablate_sweep import console, stats_table

    rows = records("baseline", [0.941, 0.945, 0.930], [10.0, 11.0, 12.0])
    for row, seconds in zip(rows, [6.0, 8.0, None]):
        row["time_to_target_seconds"] = seconds
    (stat,) = config_stats(rows)
    assert stat.time_to_target_seconds_mean == pytest.approx(7.0)
    out = console()
    with out.capture() as captured:
        out.print(stats_table([stat]))
    assert "2/3, 7" in captured.get()  # the seconds as every time column gives them


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


# ---------------------------------------------------------------- paired test, BH, verdicts


def seeded(config_id, accuracies, seconds):
    rows = records(config_id, accuracies, seconds)
    for seed, row in enumerate(rows):
        row["seed"] = seed
    return rows


def test_configs_that_ran_the_same_seeds_also_get_the_paired_test():
    base = [0.900, 0.910, 0.905, 0.895, 0.915]
    trick = [a + d for a, d in zip(base, [0.004, 0.006, 0.005, 0.003, 0.007])]
    _, row = config_stats(
        seeded("baseline", base, [10.0] * 5) + seeded("t", trick, [8, 8.2, 8.1, 7.9, 8.0])
    )
    ref = stats.ttest_rel(trick, base)
    assert row.paired_n == 5
    assert row.accuracy_paired_p_value == pytest.approx(ref.pvalue)
    assert (row.accuracy_paired_diff_ci_low, row.accuracy_paired_diff_ci_high) == pytest.approx(
        tuple(ref.confidence_interval(0.95))
    )
    assert row.accuracy_paired_diff == pytest.approx(0.005)
    # the seed-to-seed spread hides the gain from Welch's test; the pairing sees it
    assert row.accuracy_p_value > 0.3 and row.accuracy_paired_p_value < 0.01
    log_ref = stats.ttest_rel(np.log([10.0] * 5), np.log([8, 8.2, 8.1, 7.9, 8.0]))
    assert row.time_paired_p_value == pytest.approx(log_ref.pvalue)


def test_the_paired_test_uses_only_the_seeds_both_configs_completed():
    base = seeded("baseline", [0.90, 0.91, 0.92, 0.94], [10.0] * 4)
    trick = seeded("t", [0.91, 0.93, 0.90, 0.96], [9.0] * 4)
    trick[2]["status"], trick[2]["accuracy"] = "diverged", None
    _, row = config_stats(base + trick)
    assert row.paired_n == 3 and row.n == 3
    assert row.accuracy_paired_p_value == pytest.approx(
        stats.ttest_rel([0.91, 0.93, 0.96], [0.90, 0.91, 0.94]).pvalue
    )


def test_unseeded_or_disjoint_seeds_give_no_paired_test():
    base = seeded("baseline", BASE_ACC, BASE_SECONDS)
    trick = seeded("t", TRICK_ACC, TRICK_SECONDS)
    for row in trick:
        row["seed"] += 100
    _, row = config_stats(base + trick)
    assert row.paired_n == 0 and row.accuracy_paired_p_value is None
    assert row.accuracy_p_value is not None  # Welch's test still stands


def test_identical_runs_seed_for_seed_are_flagged_not_tested():
    _, row = config_stats(
        seeded("baseline", BASE_ACC, BASE_SECONDS) + seeded("t", BASE_ACC, TRICK_SECONDS)
    )
    assert row.accuracy_identical_per_seed and row.accuracy_paired_diff == 0.0
    assert row.accuracy_paired_p_value == 1.0
    assert row.verdict == "within noise"
    assert row.accuracy_identical_throughout


def test_identical_paired_seeds_beside_an_unpaired_one_are_not_called_identical():
    """Eleventh hostile round: the reference had seeds 0 and 1, the change seed 0 only, equal to
    the reference's: "+4.00 (identical, seed for seed)" stood beside a difference of means."""
    from tricklab.report.conclusions import accuracy_clause
    from tricklab.report.tables import _difference_cell

    base = seeded("baseline", BASE_ACC, BASE_SECONDS)
    ref, row = config_stats(base + seeded("t", BASE_ACC[:1], TRICK_SECONDS[:1]))
    assert row.accuracy_identical_per_seed and row.paired_n == 1
    assert not row.accuracy_identical_throughout and row.accuracy_diff != 0
    assert "identical" not in _difference_cell(row, ref.n)
    assert "seed for seed" not in accuracy_clause(row, ref)


def test_more_than_three_rows_get_benjamini_hochberg_adjusted_p_values():
    table = seeded("baseline", BASE_ACC, BASE_SECONDS)
    shifts = {"a": -0.0055, "b": 0.0, "c": 0.002}
    for name, shift in shifts.items():
        table += seeded(
            name, [x + shift + 0.0004 * i for i, x in enumerate(BASE_ACC)], TRICK_SECONDS[:5]
        )
    rows = config_stats(table)
    raw = [r.accuracy_p_value for r in rows[1:]]
    expected = stats.false_discovery_control(raw, method="bh")
    assert [r.accuracy_p_adjusted for r in rows[1:]] == pytest.approx(list(expected))
    assert rows[0].accuracy_p_adjusted is None  # the reference is no comparison
    times = stats.false_discovery_control([r.time_p_value for r in rows[1:]], method="bh")
    assert [r.time_p_adjusted for r in rows[1:]] == pytest.approx(list(times))


def test_three_rows_or_fewer_are_not_adjusted():
    rows = config_stats(
        seeded("baseline", BASE_ACC, BASE_SECONDS)
        + seeded("t", TRICK_ACC, TRICK_SECONDS)
        + seeded("u", BASE_ACC, BASE_SECONDS)
    )
    assert all(r.accuracy_p_adjusted is None and r.time_p_adjusted is None for r in rows)


def test_verdicts_follow_the_intervals_and_the_adjusted_p_values():
    from tricklab.experiments.stats import _verdict

    assert _verdict(0.01, 0.005, 0.02, 0.0, None, 0.05) == "significant"
    assert _verdict(0.01, -0.005, 0.02, 0.0, None, 0.05) == "within noise"
    assert _verdict(0.01, 0.001, 0.02, 0.0, 0.08, 0.05) == "not significant after BH"
    assert _verdict(0.01, None, None, 0.0, None, 0.05) == "too few runs"
    assert _verdict(1.2, 1.1, 1.3, 1.0, 0.01, 0.05) == "significant"
    assert _verdict(None, None, None, 0.0, None, 0.05) is None
    rows = config_stats(
        seeded("baseline", BASE_ACC, BASE_SECONDS) + seeded("t", TRICK_ACC[:1], TRICK_SECONDS[:1])
    )
    assert rows[0].verdict == "reference" and rows[1].verdict == "too few runs"
    fast = config_stats(
        seeded("baseline", BASE_ACC, BASE_SECONDS) + seeded("t", TRICK_ACC, TRICK_SECONDS)
    )[1]
    assert fast.verdict == "significant" and fast.time_verdict == "significant"


# ---------------------------------------------------------------- only what is possible


def test_no_accuracy_interval_runs_outside_0_to_100_percent():
    row = config_stats(records("baseline", [1.0, 1.0, 0.55], [10.0] * 3))[0]
    assert row.accuracy_ci_high == 1.0 and 0 <= row.accuracy_ci_low < row.accuracy_mean
    _, low, high, _ = welch([1.0, 1.0, 0.1], [0.0, 0.0, 0.9], bounds=(-1.0, 1.0))
    assert -1.0 <= low and high == 1.0


def test_no_time_interval_reaches_0_seconds():
    spread = [19.0, 188.0, 25.0]  # a busy machine: the t interval of the mean goes below 0
    assert mean_interval(spread)[2] < 0
    row = config_stats(records("baseline", [0.9] * 3, spread))[0]
    assert 0 < row.train_seconds_ci_low < row.train_seconds_geomean < row.train_seconds_ci_high


def test_two_runs_a_side_give_no_interval_no_test_and_no_verdict():
    base = records("baseline", [0.30, 0.17], [19.0, 188.0])
    trick = records("t", [0.25, 0.22], [100.0, 110.0])
    base_row, row = config_stats(base + trick)
    assert base_row.accuracy_std is not None and base_row.accuracy_ci_low is None
    assert row.accuracy_diff == pytest.approx(0.0) and row.accuracy_diff_ci_low is None
    assert row.speedup is not None and row.speedup_ci_low is None and row.time_p_value is None
    assert row.verdict == row.time_verdict == "too few runs"


def test_the_speedup_is_the_ratio_of_the_tables_geometric_mean_seconds():
    base, fast = config_stats(
        records("baseline", BASE_ACC, BASE_SECONDS) + records("t", TRICK_ACC, TRICK_SECONDS)
    )
    assert base.train_seconds_geomean == pytest.approx(math.exp(np.mean(np.log(BASE_SECONDS))))
    assert fast.speedup == pytest.approx(base.train_seconds_geomean / fast.train_seconds_geomean)


# ---------------------------------------------------------------- planned vs done


def test_planned_configurations_without_runs_get_a_row_with_none_done():
    from tricklab.experiments.stats import planned_runs

    done = records("baseline", BASE_ACC[:2], BASE_SECONDS[:2])
    attrs = {"kind": "ablation", "configs": ["baseline", "t.a=1", "t.b=1"], "seeds": 5}
    rows = config_stats(done, planned=planned_runs(attrs, done))
    assert [(r.config_id, r.n, r.planned) for r in rows] == [
        ("baseline", 2, 5),
        ("t.a=1", 0, 5),
        ("t.b=1", 0, 5),
    ]


def test_a_sweep_plans_its_seeds_for_each_configuration_drawn_so_far():
    from tricklab.experiments.stats import planned_runs

    done = records("optim.lr=0.1", [0.5], [1.0])
    assert planned_runs({"kind": "sweep", "seeds": 2}, done) == {"optim.lr=0.1": 2}
    assert planned_runs({"kind": "sweep"}, done) is None  # an older study: no plan stored


def test_a_configuration_holding_more_seeds_than_the_latest_plan_is_not_done_beyond_it():
    """Eleventh hostile round: `ablate --seeds 3`, then the same with `--seeds 2`: every row
    read n 3, planned 2."""
    from tricklab.experiments.stats import planned_runs

    done = records("baseline", BASE_ACC[:3], BASE_SECONDS[:3])
    attrs = {"kind": "ablation", "configs": ["baseline", "t.a=1"], "seeds": 2}
    rows = config_stats(done, planned=planned_runs(attrs, done))
    assert [(r.config_id, r.n, r.planned) for r in rows] == [("baseline", 3, 3), ("t.a=1", 0, 2)]
    assert all(r.n <= r.planned for r in rows)


# ---------------------------------------------------------------- busy machine


def test_a_busy_machine_holds_back_the_time_verdicts_and_keeps_the_accuracy_ones():
    from tricklab.experiments.busy import NOT_JUDGED, Busy, hold_time_verdicts

    rows = config_stats(
        records("baseline", BASE_ACC, BASE_SECONDS) + records("t", TRICK_ACC, TRICK_SECONDS)
    )
    assert rows[1].time_verdict == "significant"
    hold_time_verdicts(rows, Busy(True, "the 1-minute load average was 6.00 on 2 cores"))
    assert rows[1].time_verdict == NOT_JUDGED and rows[1].verdict == "significant"
    assert rows[0].time_verdict == "reference"


def test_a_study_on_a_busy_machine_gives_no_time_verdict():
    from tricklab.experiments.busy import NOT_JUDGED, study_meta

    loaded = {"cpu_count": 2, "load_average_start": [6.0, 5.0, 4.0]}
    recs = records("baseline", BASE_ACC, BASE_SECONDS) + records("t", TRICK_ACC, TRICK_SECONDS)
    rows = config_stats(recs)
    meta = study_meta({"provenance": loaded}, recs, rows)
    assert meta["busy_machine"] and rows[1].time_verdict == NOT_JUDGED


def test_a_busy_machine_leaves_too_few_runs_as_it_is():
    from tricklab.experiments.busy import Busy, hold_time_verdicts

    rows = config_stats(records("baseline", [0.9, 0.91], [10.0, 11.0]) + records("t", [0.9], [9.0]))
    hold_time_verdicts(rows, Busy(True, "the 1-minute load average was 6.00 on 2 cores"))
    assert rows[1].time_verdict == "too few runs"


def test_a_geometric_interval_wider_than_a_float_reads_as_unbounded_not_an_overflow():
    """Fourth hostile round: 1e-300 s beside 1e9 s overflowed math.exp (a traceback)."""
    from tricklab.measure.intervals import geometric_interval, speedup_interval

    mean, low, high = geometric_interval([1e-300, 1e9, 5.0])
    assert 0 < mean < high == float("inf") and low >= 0
    assert speedup_interval([1e-300, 1e9, 3.0], [1.0, 2.0, 3.0])[2] == float("inf")
