"""The reproducibility record (measure/provenance.py) in result.json, speedrun's summary.json and
results' JSON, and the busy-machine flag: a load above the cores, or train seconds that spread
across seeds by more than the difference reported."""

import json
import math
import os
import shutil
import subprocess

import pytest
import torch
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main
from tricklab.experiments import busy
from tricklab.experiments.busy import (
    BUSY_WORDS,
    SPREAD_LIMIT,
    busy_machine,
    comparison_timings,
    results_busy,
    speedrun_busy,
)
from tricklab.experiments.stats import config_stats
from tricklab.measure import provenance
from tricklab.measure.provenance import git_state
from tricklab.recipe.schema import load_recipe
from tricklab.training.api import train

FIELDS = {
    "command", "started_at", "git_commit", "git_dirty", "versions", "cuda", "cudnn", "device",
    "device_name", "torch_threads", "cpu_count", "world_size", "dist_backend",
    "load_average_start", "load_average_end",
}  # fmt: skip
PACKAGES = {"python", "torch", "torchvision", "numpy", "optuna", "tricklab"}
TINY = [*TINY_SYNTHETIC, "run.epochs=1"]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def load(value):
    """os.getloadavg replaced: the same 1-, 5- and 15-minute load."""
    return lambda: (value, value, value)


def assert_full_record(record, device="cpu"):
    assert set(record) == FIELDS
    assert set(record["versions"]) == PACKAGES
    assert torch.__version__.startswith(record["versions"]["torch"])
    assert record["command"]
    assert record["device"] == device and record["device_name"]
    assert record["torch_threads"] == torch.get_num_threads()
    assert (record["world_size"], record["dist_backend"]) == (1, None)  # no torchrun
    assert record["cpu_count"] == os.cpu_count()
    for when in ("start", "end"):
        assert len(record[f"load_average_{when}"]) == 3


# ---------------------------------------------------------------- the record


def test_result_json_holds_every_field_of_the_record(tmp_path):
    result = train(load_recipe(None, TINY), out_dir=tmp_path / "run")
    stored = json.loads((tmp_path / "run" / "result.json").read_text())
    assert_full_record(stored["provenance"])
    assert stored["provenance"] == result.provenance
    assert stored["provenance"]["cuda"] == torch.version.cuda


def test_command_line_is_argv_joined_or_python_api(monkeypatch):
    monkeypatch.setattr("sys.argv", ["/venv/bin/tricklab", "train", "run.epochs=2", "a b"])
    assert provenance.command_line() == "/venv/bin/tricklab train run.epochs=2 'a b'"
    monkeypatch.setattr("sys.argv", [""])
    assert provenance.command_line() == "python API"


def git(folder, *args):
    return subprocess.run(
        ["git", "-C", str(folder), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@needs_git
def test_git_commit_and_dirty_flag_in_a_repository(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    git(tmp_path, "init", "-q")
    (tmp_path / "train.py").write_text("print(1)\n")
    git(tmp_path, "add", "train.py")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert git_state(tmp_path) == (head, False)
    (tmp_path / "runs").mkdir()  # what a run writes beside the code is not a change to it
    (tmp_path / "runs" / "result.json").write_text("{}")
    assert git_state(tmp_path) == (head, False)
    (tmp_path / "train.py").write_text("print(2)\n")
    assert git_state(tmp_path) == (head, True)
    assert git_state(tmp_path / "runs") == (head, True)  # a folder inside the work tree


@needs_git
def test_the_record_names_the_working_folders_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    git(tmp_path, "init", "-q")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
        "-m", "first")  # fmt: skip
    monkeypatch.chdir(tmp_path)
    record = provenance.start_record("cpu")
    assert record["git_commit"] == git(tmp_path, "rev-parse", "HEAD")
    assert record["git_dirty"] is False


@needs_git
def test_git_fields_are_null_outside_a_repository(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert git_state(tmp_path) == (None, None)
    assert git_state(tmp_path / "missing") == (None, None)
    git(tmp_path, "init", "-q")  # a repository without a commit has no commit to name
    assert git_state(tmp_path) == (None, None)


def test_git_fields_are_null_without_git(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on it
    assert git_state(tmp_path) == (None, None)


def test_no_load_average_is_null_not_an_error(monkeypatch):
    def unsupported():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", unsupported)
    record = provenance.finish_record(provenance.start_record())
    assert record["load_average_start"] is None and record["load_average_end"] is None
    assert not busy_machine([record]).busy


# ---------------------------------------------------------------- speedrun


def speedrun_cli(out, *extra):
    args = ["speedrun", *TINY, "data.train_size=100", "data.test_size=64"]
    return main([*args, "--runs", "1", "--warmup-epochs", "0", "--out", str(out), *extra])


def test_speedrun_on_a_busy_machine_says_so_in_the_table_and_summary_json(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(os, "getloadavg", load(9.0))
    assert speedrun_cli(tmp_path / "sr") == 0
    out = capsys.readouterr().out
    assert BUSY_WORDS in " ".join(out.split())
    summary = json.loads((tmp_path / "sr" / "summary.json").read_text())
    assert summary["busy_machine"] is True
    assert summary["busy_reason"].startswith("the 1-minute load average was 9.00 on")
    assert_full_record(summary["provenance"])
    run = json.loads((tmp_path / "sr" / "seed-0" / "result.json").read_text())
    assert run["provenance"]["load_average_start"] == [9.0, 9.0, 9.0]

    from tricklab.report.build import write_report

    report = write_report([tmp_path / "sr"], tmp_path / "report")
    assert report.busy_machine and "9.00" in report.busy_reason
    assert BUSY_WORDS in report.summary
    assert BUSY_WORDS in report.md_path.read_text().lower()


def test_speedrun_on_an_idle_machine_has_no_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "getloadavg", load(0.1))
    assert speedrun_cli(tmp_path / "sr", "--json") == 0
    out = capsys.readouterr().out
    assert BUSY_WORDS not in " ".join(out.split())
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["busy_machine"] is False and summary["busy_reason"] is None
    assert summary["provenance"]["load_average_end"] == [0.1, 0.1, 0.1]


def test_speedrun_times_spread_past_the_limit_are_busy():
    quiet = [{"cpu_count": 2, "load_average_start": [0.5] * 3, "load_average_end": [0.5] * 3}]
    steady = [10.0, 10.2, 9.9, 10.1]
    assert not speedrun_busy(quiet, steady).busy
    spread = [10.0, 13.0, 9.0, 12.0]
    assert math.expm1(busy.log_spread(spread)) > SPREAD_LIMIT
    verdict = speedrun_busy(quiet, spread)
    assert verdict.busy and "spread by 18% across 4 seeds" in verdict.reason
    assert not speedrun_busy(quiet, [10.0]).busy  # one run has no spread


# ---------------------------------------------------------------- results


def ablate_cli(out):
    args = ["ablate", "--baseline", *TINY, "data.train_size=100", "data.test_size=64"]
    args += ["--vary", "aug.flip=random", "--seeds", "1", "--budget-epochs", "1"]
    return main([*args, "--study", "busy", "--out", str(out), "--json"])


@pytest.mark.parametrize("busy", [True, False])
def test_results_flag_a_busy_machine_in_the_table_and_json(busy, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "getloadavg", load(9.0 if busy else 0.1))
    assert ablate_cli(tmp_path) == 0  # one seed a config: no spread, the load alone decides
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["busy_machine"] is busy
    assert_full_record(summary["provenance"], device=None)

    monkeypatch.setenv("COLUMNS", "200")
    assert main(["results", "busy", "--out", str(tmp_path)]) == 0
    assert (BUSY_WORDS in capsys.readouterr().out) is busy
    assert main(["results", "busy", "--out", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert data["busy_machine"] is busy
    assert (data["busy_reason"] is not None) is busy
    assert_full_record(data["provenance"], device=None)


def runs(config_id, seconds):
    return [
        {"config_id": config_id, "seed": seed, "status": "complete", "accuracy": 0.9,
         "train_seconds": s, "overrides": [] if config_id == "baseline" else [config_id]}
        for seed, s in enumerate(seconds)
    ]  # fmt: skip


def alternating(center, half_width, n=12):
    """n train seconds alternating exp(±half_width) around `center`."""
    return [center * math.exp(half_width if i % 2 else -half_width) for i in range(n)]


def test_a_significant_speedup_smaller_than_the_spread_is_busy():
    # 12 seeds a side, log times ±0.105 around each mean (std 0.11), config 1.11x faster.
    records = runs("baseline", alternating(10.0, 0.105)) + runs("fast", alternating(9.0, 0.105))
    rows = config_stats(records)
    assert rows[1].time_verdict == "significant" and rows[1].speedup == pytest.approx(1.111, 1e-3)
    verdict = results_busy(records, rows)
    assert verdict.busy
    assert "across 12 seeds, more than the 1.11x speedup of fast over baseline" in verdict.reason


def test_a_speedup_larger_than_the_spread_is_not_busy():
    records = runs("baseline", alternating(10.0, 0.03)) + runs("fast", alternating(9.0, 0.03))
    rows = config_stats(records)
    assert rows[1].time_verdict == "significant"
    assert not results_busy(records, rows).busy


def test_a_change_within_noise_reports_no_difference_to_compare_the_spread_with():
    records = runs("baseline", alternating(10.0, 0.3, 4)) + runs("same", alternating(10.0, 0.3, 4))
    rows = config_stats(records)
    assert rows[1].time_verdict == "within noise"
    assert comparison_timings(records, rows) == []
    assert not results_busy(records, rows).busy


def test_the_load_rule_reads_start_and_end_against_each_records_cores():
    def record(start, end, cores=4):
        return {
            "cpu_count": cores,
            "load_average_start": [start, 0, 0],
            "load_average_end": [end, 0, 0],
        }

    assert not busy_machine([record(4.0, 4.0), None, {}]).busy  # at the cores: not above them
    # a run alone, a thread per core, reads a little above them (the demo alone on 2 cores: 2.05)
    assert not busy_machine([record(4.4, 2.05 * 2)]).busy
    assert not busy_machine([record(1.0, 2.05, cores=2)]).busy
    verdict = busy_machine([record(1.0, 4.5), record(6.0, 1.0, cores=8)])
    assert (
        verdict.busy
        and verdict.reason == "the 1-minute load average was 4.50 on 4 cores (end of a run)"
    )
    assert busy_machine([record(5.0, 0.0)]).note() == (
        f"{BUSY_WORDS}: the 1-minute load average was 5.00 on 4 cores (start of a run)"
    )
    assert busy_machine([record(1.0, 1.0)]).note() == ""
