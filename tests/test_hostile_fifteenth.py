"""The fifteenth hostile round: each case is one clear error before anything is written, or a
profile that says what it measured."""

import json

import pytest
from tiny_recipe import TINY_SYNTHETIC

import tricklab
from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.experiments.speedrun import SpeedrunPlan, speedrun
from tricklab.experiments.stats import write_csv
from tricklab.profile.model import ModelBuild, ProfileGrid, profile_models
from tricklab.profile.step import profile_step
from tricklab.report.profiles import load_profile

TINY = [*TINY_SYNTHETIC, "run.epochs=1", "tricks.precision=32-true"]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_warm_up_longer_than_the_recipe_is_refused_before_any_run(tmp_path, capsys):
    """It trained the recipe's length, silently; from Python too, and nothing is written."""
    out = tmp_path / "s"
    argv = ["speedrun", *TINY, "--runs", "1", "--warmup-epochs", "3", "--out", str(out)]
    assert main(argv) == 2
    assert "--warmup-epochs 3 is more than the recipe's run.epochs 1" in one_error_line(capsys)
    plan = SpeedrunPlan(tricklab.load_recipe(None, TINY), 1, warmup_epochs=1.5, out_dir=out)
    with pytest.raises(TrickLabError, match="more than the recipe's run.epochs 1"):
        speedrun(plan)
    assert not out.exists()


@pytest.mark.parametrize("name", ["t.json/", "sub/t.json//"])
def test_a_trace_or_csv_name_ending_in_a_slash_is_refused_not_written_as_a_file(
    name, tmp_path, monkeypatch, capsys
):
    """`--trace t.json/` wrote the file t.json: Path drops the slash a folder's name ends in."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    assert main(["profile", "step", *TINY_SYNTHETIC, "--repeats", "2", "--trace", name]) == 2
    assert "ends in a slash, as a folder does: give a file" in one_error_line(capsys)
    with pytest.raises(TrickLabError, match="ends in a slash"):
        write_csv([], name.replace("t.json", "t.csv"))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["sub"]


def test_a_model_profile_records_the_width_it_built_and_says_it_in_both_titles(tmp_path, capsys):
    argv = ["profile", "model", "airbench", "model.width=0.25", "data.image_size=16",
            "--batch-sizes", "2", "--repeats", "2", "--device", "cpu"]  # fmt: skip
    assert main([*argv, "--json", "-q"]) == 0
    saved = tmp_path / "m.json"
    saved.write_text(capsys.readouterr().out.strip().splitlines()[-1])
    assert json.loads(saved.read_text())["build"] == {"width": 0.25, "widths": None}
    assert load_profile(saved).title == "model cost: airbench at width 0.25, 3×16×16"
    assert main([*argv, "-q"]) == 0
    assert "models (width 0.25, 3×16×16 input, per image)" in capsys.readouterr().out
    build = ModelBuild(widths=[8, 16, 16], image_size=16)
    result = profile_models(["airbench"], ProfileGrid([2]), build=build, device="cpu", repeats=2)
    assert result["build"] == {"width": 1.0, "widths": [8, 16, 16]}
    saved.write_text(json.dumps(result))
    assert load_profile(saved).title == "model cost: airbench at widths [8, 16, 16], 3×16×16"
    del result["build"]  # a profile saved before it recorded the size: at its full one
    saved.write_text(json.dumps(result))
    assert load_profile(saved).title == "model cost: airbench at 3×16×16"


def test_a_step_profile_says_what_the_device_turned_off_as_train_does(tmp_path, capsys):
    """tricks.cuda_graph=on on a CPU profiled a step without a graph and said nothing."""
    recipe = tricklab.load_recipe(None, [*TINY_SYNTHETIC, "tricks.cuda_graph=on"])
    result = profile_step(recipe, repeats=2)
    assert result["resolved"]["cuda_graph"] is False
    (note,) = result["resolved"]["notes"]
    assert note == "tricks.cuda_graph is off: CUDA graphs need a CUDA GPU (this run: cpu)"
    saved = tmp_path / "s.json"
    saved.write_text(json.dumps(result))
    assert note in load_profile(saved).notes
    assert main(["profile", "step", *TINY_SYNTHETIC, "tricks.cuda_graph=on", "--repeats", "2"]) == 0
    assert f"note: {note}" in capsys.readouterr().out
