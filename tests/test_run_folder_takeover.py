"""A folder holding an unfinished run (failed, oom, interrupted, killed) is taken over by the same
recipe run again, with a note, and refused to another recipe (hostile round: `train --out D`
replaced an interrupted run of another recipe without a word)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tiny_recipe import TINY_SYNTHETIC

from tricklab.core.errors import TrickLabError
from tricklab.core.paths import CLAIM_NAME
from tricklab.core.stopping import StopRequest
from tricklab.recipe.schema import load_recipe
from tricklab.training import api, runfiles

TINY = load_recipe(None, [*TINY_SYNTHETIC, "run.epochs=3"])


def interrupted_run(out, recipe=TINY) -> str:
    """A run of `recipe` in `out` stopped by a Ctrl-C after an epoch: `N of 3 epochs`."""
    stop = StopRequest()
    with pytest.raises(api.RunInterrupted):
        api.train(recipe, out_dir=out, on_epoch=lambda row: stop.request(), stop=stop)
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "interrupted" and 1 <= result["epochs_completed"] < 3
    return f"{result['epochs_completed']} of 3 epochs"


def test_the_same_recipe_run_again_replaces_its_interrupted_run(tmp_path):
    done = interrupted_run(tmp_path)
    left = runfiles.check_run_dir(tmp_path, TINY)
    assert (left.status, left.epochs_text()) == ("interrupted", done)
    assert api.train(TINY, out_dir=tmp_path).status == "complete"
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3  # the new run's only


def test_where_metrics_go_or_weights_are_saved_is_no_other_recipe(tmp_path):
    interrupted_run(tmp_path)
    same = TINY.override(["run.checkpoint=true", "run.dist_timeout_seconds=30"])
    assert api.train(same, out_dir=tmp_path).status == "complete"


def test_another_recipe_into_a_folder_holding_an_unfinished_run_is_refused(tmp_path):
    done = interrupted_run(tmp_path)
    before = (tmp_path / "result.json").read_text()
    other = TINY.override(["run.epochs=1", "model.widths=[8,8,8]"])
    for refuse in (lambda: runfiles.check_run_dir(tmp_path, other),
                   lambda: api.train(other, out_dir=tmp_path)):  # fmt: skip
        with pytest.raises(TrickLabError) as raised:
            refuse()
        message = str(raised.value)
        assert message.startswith(f"run directory {tmp_path} holds an unfinished run of another")
        assert f"(interrupted, {done}; it differs in model.widths, run.epochs)" in message
        assert "give another --out, or remove the folder" in message
    assert (tmp_path / "result.json").read_text() == before  # the old run left as it was


def test_a_killed_run_is_replaced_by_its_recipe_and_kept_from_another(tmp_path):
    """Killed: its claim file left with a process that is gone, recipe.yaml, no result.json."""
    (tmp_path / "recipe.yaml").write_text(TINY.to_yaml())
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1}\n{"epoch": 2}\n')
    (tmp_path / CLAIM_NAME).write_text("999999999\n")  # no such process
    left = runfiles.check_run_dir(tmp_path, TINY)
    assert (left.status, left.epochs_text()) == ("killed", "2 of 3 epochs")
    with pytest.raises(TrickLabError, match="killed, 2 of 3 epochs; it differs in run.seed"):
        api.train(TINY.override(["run.seed=1"]), out_dir=tmp_path)
    assert (tmp_path / "metrics.jsonl").is_file()  # refused: left as it was, still a killed run's
    assert runfiles.check_run_dir(tmp_path, TINY).status == "killed"
    assert api.train(TINY, out_dir=tmp_path).status == "complete"


def test_the_cli_notes_what_it_replaces_and_refuses_another_recipe_in_one_line(tmp_path):
    out = tmp_path / "run"
    done = interrupted_run(out)
    args = [sys.executable, "-m", "tricklab", "train", *TINY_SYNTHETIC, "--out", str(out)]
    other = subprocess.run([*args, "run.epochs=1", "--quiet"], capture_output=True, text=True)
    assert other.returncode == 2
    (line,) = other.stderr.strip().splitlines()
    assert line.startswith(f"error: run directory {out} holds an unfinished run of another")
    same = subprocess.run([*args, "run.epochs=3", "--quiet"], capture_output=True, text=True)
    assert same.returncode == 0, same.stderr
    assert same.stderr.splitlines()[0] == (
        f"note: replacing the interrupted run in {out} ({done}; a run starts again from epoch 1)"
    )
    assert json.loads((out / "result.json").read_text())["status"] == "complete"
