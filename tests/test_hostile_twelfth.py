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


# ---------------------------------------------------------------- verifying the twelfth round


def test_a_hex_number_past_4300_digits_is_one_line():
    with pytest.raises(TrickLabError, match="bits"):
        load_recipe("speedrun94", ["data.train_size=0x" + "f" * 4000])


def test_an_on_epoch_sys_exit_is_recorded_as_the_callers_not_as_a_ctrl_c(tmp_path):
    import json

    from tiny_recipe import TINY_SYNTHETIC

    def on_epoch(row):
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        tricklab.train(load_recipe(None, [*TINY_SYNTHETIC, "run.epochs=1"]), out_dir=tmp_path / "r",
                       on_epoch=on_epoch)  # fmt: skip
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert result["error"] == "stopped by on_epoch raising SystemExit: 3"


def test_minus_zero_is_zero_in_recipes_and_spaces():
    from tricklab.experiments.space import parse_space

    assert load_recipe(None, ["optim.weight_decay=-0.0"]) == load_recipe(
        None, ["optim.weight_decay=0.0"]
    )
    assert "[0.0, 0.1]" in parse_space({"optim.lr": [-0.0, 0.1]}).to_dict()["optim.lr"]
    assert (
        parse_space({"optim.lr": {"low": -0.0, "high": 0.1}}).to_dict()
        == parse_space({"optim.lr": {"low": 0.0, "high": 0.1}}).to_dict()
    )


def test_two_values_alike_in_four_figures_keep_their_full_names():
    from types import SimpleNamespace

    from tricklab.report.fmt import config_namer

    rows = [SimpleNamespace(config_id=f"optim.weight_decay={v}", overrides=[f"optim.weight_decay={v}"])
            for v in ("1.23456e-17", "1.23459e-17", "0.5")]  # fmt: skip
    name = config_namer(rows)
    assert [name(r.config_id) for r in rows] == [
        "optim.weight_decay=1.23456e-17", "optim.weight_decay=1.23459e-17", "optim.weight_decay=0.5",
    ]  # fmt: skip


def test_a_plan_holds_a_checked_copy_of_its_recipe():
    from tricklab.experiments.plan import AblationPlan

    recipe = load_recipe(None, ["data.name=synthetic"])
    plan = AblationPlan(recipe, {"optim.weight_decay": [0.0]}, seeds=1)
    recipe.optim.lr = "abc"  # plain assignment is not checked
    assert plan.baseline.optim.lr != "abc"
    with pytest.raises(TrickLabError, match="optim.lr"):
        AblationPlan(recipe, {"optim.weight_decay": [0.0]}, seeds=1)


@pytest.mark.parametrize("name", ["yes", "off", "2020-01-01", "my net"])
def test_names_an_override_reads_as_typed_are_registered(name):
    tricklab.register_model(name, lambda num_classes: None)
    assert load_recipe(None, [f"model.name={name}"]).model.name == name


@pytest.mark.parametrize("name", ["*a", "[a", "%x", "@x"])
def test_names_an_override_cannot_read_are_refused(name):
    with pytest.raises(TrickLabError, match="must read back as itself"):
        tricklab.register_model(name, lambda num_classes: None)


def test_an_abandoned_partial_is_removed_on_a_cache_hit_too(tmp_path):
    old = tmp_path / "x.partial"
    old.write_bytes(b"0")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    cache.remove_abandoned(tmp_path)
    assert not old.exists()
    cache.remove_abandoned(tmp_path / "missing")  # no folder: nothing to do, no error
