"""The twelfth hostile round's smaller cases (the compile cache's are in
test_compile_cache_hostile.py): each is one clear line, or no longer happens."""

import os
import time

import pytest

import tricklab
from tricklab.core.errors import TrickLabError
from tricklab.data import cache
from tricklab.experiments.speedrun_folder import check_speedrun_folder
from tricklab.recipe.schema import load_recipe


@pytest.mark.parametrize("name", ["null", "true", "~", "-", "[a]", "{}", "'q'"])
def test_a_model_name_no_override_can_select_is_refused(name):
    """`register_model("null", f)` was accepted, then `model.name=null` said the name was empty."""
    with pytest.raises(TrickLabError, match="must read back as itself"):
        tricklab.register_model(name, lambda num_classes: None)


def test_a_number_of_5000_digits_is_said_as_such_not_as_a_tag():
    with pytest.raises(TrickLabError, match="a number of 5,000 digits is longer than"):
        load_recipe("speedrun94", [f"run.epochs={'9' * 5000}"])
    with pytest.raises(TrickLabError, match="a tagged value is not what its tag says"):
        load_recipe("speedrun94", ["run.epochs=!!int 1e3"])


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_speedrun_folder_whose_summary_is_no_file_is_not_sent_to_report(tmp_path, kind):
    """`speedrun --out` said "`tricklab report X` reads its runs" of a folder whose summary.json
    was a folder or a FIFO; `report X` then said it held no summary.json."""
    summary = tmp_path / "summary.json"
    summary.mkdir() if kind == "folder" else os.mkfifo(summary)
    with pytest.raises(TrickLabError) as refused:
        check_speedrun_folder(tmp_path, 3)
    assert "is no file `tricklab report` reads" in str(refused.value)
    assert "reads its runs" not in str(refused.value)


def test_partial_cache_files_of_killed_writers_are_removed_and_a_live_ones_kept(tmp_path):
    """A dataset cache write killed by a signal (SIGUSR1's default) left 20 MB for good."""
    old = tmp_path / "imagefolder-abc-train.x1.partial"
    fresh = tmp_path / "imagefolder-abc-train.x2.partial"
    old.write_bytes(b"0" * 100)
    fresh.write_bytes(b"0" * 100)
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    cache.ensure_writable(tmp_path)
    assert not old.exists() and fresh.exists()
    assert list(tmp_path.glob("*.partial")) == [fresh]  # its own probe file is gone too


def test_a_speedrun_whose_output_breaks_before_a_counted_run_leaves_no_folder(tmp_path):
    """`tricklab speedrun ... | head -1`: the closed pipe ended it after the warm-up, leaving a
    folder the same command refused and `report` could not read (a Ctrl-C removed it)."""
    from tiny_recipe import TINY_SYNTHETIC

    from tricklab.experiments.speedrun import SpeedrunPlan, speedrun

    def on_run(run):
        raise BrokenPipeError(32, "Broken pipe")

    recipe = load_recipe(None, [*TINY_SYNTHETIC, "run.epochs=1"])
    plan = SpeedrunPlan(recipe, 2, warmup_epochs=0.5, out_dir=tmp_path / "s")
    with pytest.raises(BrokenPipeError):
        speedrun(plan, on_run=on_run)
    assert not (tmp_path / "s").exists()
