"""A run records what ran however it ends, under torchrun too: a stop arriving while the run's end
is recorded waits for result.json; a rank killed mid-run leaves rank 0's epochs, seconds, backend
and command in result.json (marked failed by `--nproc`'s launcher); data-parallel runs say their
processes in the summary and the report (hostile round: rank 0's record was lost to torchrun's
SIGTERM and the folder held a result.json of 0 epochs and no backend)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from test_distributed import BASE, TESTS, tricklab
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli import train as cli_train
from tricklab.core.stopping import stop_on_signals
from tricklab.experiments.stats import config_stats
from tricklab.recipe.schema import load_recipe
from tricklab.report.collect import Source
from tricklab.report.document import _fingerprint_table
from tricklab.training import api, loop
from tricklab.training.result import RunResult, launch_record, record_failed_rank

TINY = load_recipe(None, [*TINY_SYNTHETIC, "run.epochs=3"])
DYING = ["model.name=test_distributed:dying_net", "run.epochs=40"]  # 5 forwards an epoch a rank


def test_a_sigterm_while_a_failed_run_is_recorded_waits_for_its_result_json(tmp_path, monkeypatch):
    """As rank 0 under torchrun: its collective fails (the other rank died), and torchrun's
    SIGTERM lands while that failure is recorded. The record is kept, then the run stops."""
    epochs, real_step, real_collect = [], loop.train_step, api.gc.collect

    def step(*args):
        if epochs:  # in epoch 2
            raise RuntimeError("[gloo] Connection closed by peer")
        return real_step(*args)

    def collect(*args):
        os.kill(os.getpid(), signal.SIGTERM)  # what torchrun sends, mid-record
        return real_collect(*args)

    monkeypatch.setattr(loop, "train_step", step)
    monkeypatch.setattr(api.gc, "collect", collect)
    with stop_on_signals() as stop, pytest.raises(api.RunInterrupted) as raised:
        api.train(TINY, out_dir=tmp_path, on_epoch=epochs.append, stop=stop)
    result = raised.value.result
    assert result.status == "failed" and "Connection closed" in result.error
    recorded = json.loads((tmp_path / "result.json").read_text())
    assert recorded["status"] == "failed" and recorded["epochs_completed"] == 1
    assert len(recorded["epochs"]) == 1 and recorded["train_seconds"] > 0
    assert (tmp_path / "recipe.yaml").is_file() and (tmp_path / "metrics.jsonl").is_file()


def test_a_failed_rank_keeps_what_rank_0_recorded(tmp_path):
    """rank 0 recorded `interrupted` with its epochs when torchrun stopped it: they stay."""
    run = RunResult(
        status="interrupted", error="stopped by Ctrl-C or SIGTERM", epochs_completed=2,
        epochs=[{"epoch": 1, "train_seconds": 0.5}, {"epoch": 2, "train_seconds": 1.0}],
        train_seconds=1.0, wall_seconds=3.0, world_size=2, dist_backend="gloo",
        provenance={"command": "tricklab train"}, recipe=TINY.to_dict(),
    )  # fmt: skip
    (tmp_path / "result.json").write_text(json.dumps(run.to_dict()))
    record_failed_rank(tmp_path, launch_record(TINY, torch.device("cpu"), 2), "rank 1 was killed")
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "failed"
    assert result["error"] == "rank 1 was killed; torchrun stopped the other ranks"
    assert (result["epochs_completed"], result["train_seconds"], result["wall_seconds"]) == (
        2, 1.0, 3.0
    )  # fmt: skip
    assert result["provenance"] == {"command": "tricklab train"}


def test_a_killed_rank_0_leaves_the_launchers_record_with_its_logged_epochs(tmp_path):
    """rank 0 itself killed: no result.json; its metrics.jsonl rows, the launcher's command,
    processes and backend make the record."""
    rows = [{"epoch": e, "train_seconds": 0.5 * e, "val_acc": 0.1} for e in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "recipe.yaml").write_text(TINY.to_yaml())
    launched = launch_record(TINY, torch.device("cpu"), 2)
    launched.wall_seconds = 7.0
    record_failed_rank(tmp_path, launched, "rank 0 was killed by SIGKILL")
    result = json.loads((tmp_path / "result.json").read_text())
    assert (result["status"], result["error"]) == ("failed", "rank 0 was killed by SIGKILL")
    assert result["epochs"] == rows and result["epochs_completed"] == 3
    assert (result["train_seconds"], result["wall_seconds"]) == (1.5, 7.0)
    assert (result["world_size"], result["dist_backend"]) == (2, "gloo")
    assert result["provenance"]["command"] and result["provenance"]["dist_backend"] == "gloo"
    assert result["recipe"] == TINY.to_dict() and result["hardware"]


def test_a_rank_killed_mid_run_under_nproc_leaves_the_epochs_rank_0_finished(tmp_path):
    out = tmp_path / "run"
    args = ["train", *BASE, *DYING, "--nproc", "2", "--out", str(out), "--quiet"]
    run = tricklab(*args, env_extra={"DIE_AT": "18"}, timeout=300)  # in epoch 3 or 4
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        f"error: data-parallel run failed: rank 1 was killed by SIGKILL; run directory: {out}"
    ), run.stderr  # the last word: the failure
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "failed" and result["error"].startswith("rank 1 was killed")
    assert result["epochs_completed"] == len(result["epochs"]) >= 2
    assert result["train_seconds"] > 0 and result["wall_seconds"] > 0
    assert (result["world_size"], result["dist_backend"]) == (2, "gloo")
    assert result["provenance"]["command"]
    assert (out / "recipe.yaml").is_file() and (out / "metrics.jsonl").is_file()


def test_a_rank_killed_under_torchrun_by_hand_leaves_rank_0s_record(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(TESTS), "OMP_NUM_THREADS": "1", "DIE_AT": "18"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    argv += ["-m", "tricklab", "train", *BASE, *DYING, "--out", str(out), "--quiet"]
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode != 0
    result = json.loads((out / "result.json").read_text())
    assert result["status"] in ("failed", "interrupted"), result["error"]
    assert result["epochs_completed"] == len(result["epochs"]) >= 2
    assert (result["world_size"], result["dist_backend"]) == (2, "gloo")
    assert (out / "metrics.jsonl").is_file() and (out / "recipe.yaml").is_file()


def test_the_summary_of_a_data_parallel_run_says_its_processes_and_backend(capsys):
    for size, backend, shown in [(2, "gloo", True), (1, None, False)]:
        run = RunResult(status="complete", world_size=size, dist_backend=backend, recipe={})
        cli_train.print_result(run)
        said = " ".join(capsys.readouterr().out.replace("│", " ").split())
        assert ("processes 2 (gloo)" in said) is shown, said


def _record(epochs: float, status: str, done: int, world: int = 1) -> dict:
    return {
        "config_id": "c0", "seed": 0, "status": status, "accuracy": 0.5,
        "train_seconds": 1.0, "recipe": {"run": {"epochs": epochs}}, "epochs_completed": done,
        "world_size": world, "dist_backend": "gloo" if world > 1 else None,
    }  # fmt: skip


def _hardware_rows(records: list[dict]) -> dict[str, str]:
    source = Source("runs", "runs", "-", records, config_stats(records))
    return {row[0]: row[1] for row in _fingerprint_table([source]).rows}


def test_the_reports_epochs_per_run_say_planned_and_finished_when_a_run_stopped_short():
    """Hostile round: "epochs per run 2.0" beside a run of 400 killed after 62."""
    rows = _hardware_rows([_record(2.0, "complete", 2), _record(400.0, "failed", 62, world=2)])
    assert rows["epochs per run"] == "2 and 400 planned; 2 and 62 finished"
    assert rows["processes per run"] == "1, 2 (gloo)"
    rows = _hardware_rows([_record(2.0, "complete", 2), _record(2.0, "complete", 2)])
    assert rows["epochs per run"] == "2" and "processes per run" not in rows
