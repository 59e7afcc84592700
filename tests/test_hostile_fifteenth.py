"""The fifteenth hostile round: each case is one clear error before anything is written, or a
profile that says what it measured."""

import json
import os
import subprocess
import sys

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


HOSTILE = """
import sys
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, num_classes)

    def forward(self, x):
        return self.fc(self.conv(x).mean((2, 3)))


class IntParameters(Net):
    def parameters(self, recurse=True):
        yield 5


class StateDictRaises(Net):
    def state_dict(self, *args, **kwargs):
        raise RuntimeError("no state")


class HoldsItself(Net):
    def __init__(self, num_classes):
        super().__init__(num_classes)
        self.me = self


class InitFreezes(Net):
    def init_from_data(self, images):
        for p in self.parameters():
            p.requires_grad_(False)


class InitDoubles(Net):
    def init_from_data(self, images):
        self.double()


class InitToMeta(Net):
    def init_from_data(self, images):
        self.to("meta")


class NoStr(Exception):
    def __str__(self):
        raise ValueError("no str")


class Later(Net):
    calls = 0
    exc = RuntimeError("\\x1b[2K\\x1b[1Arun complete\\nerror: forged line")

    def forward(self, x):
        type(self).calls += 1
        if self.training and type(self).calls > 6:
            raise self.exc
        return super().forward(x)


class LaterNoStr(Later):
    exc = NoStr()


class DelRaises(Net):
    def __del__(self):
        raise RuntimeError("boom\\nerror: forged line")


def make(cls):
    return lambda num_classes: globals()[cls](num_classes)


params_int, sd_raises, holds_itself = make("IntParameters"), make("StateDictRaises"), make("HoldsItself")
init_freezes, init_doubles, init_meta = make("InitFreezes"), make("InitDoubles"), make("InitToMeta")
late_nostr, late_escape, del_raises = make("LaterNoStr"), make("Later"), make("DelRaises")
"""
OWN = [item for item in TINY if not item.startswith("model.")]


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    (tmp_path / "hostilemodels.py").write_text(HOSTILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    "factory, says",
    [
        ("params_int", "its parameters() or buffers() give int, not tensors"),
        ("sd_raises", "its state_dict() raised RuntimeError: no state"),
        ("holds_itself", "its factory returned a model holding itself among its submodules"),
        ("init_freezes", "its init_from_data left a model with no trainable parameter"),
        ("init_doubles", "its init_from_data left torch.float64 weights"),
        ("init_meta", "its init_from_data left a model on the meta device"),
    ],
)
def test_a_model_that_cannot_train_is_one_line_before_the_run_not_a_failed_run(
    hostile, capsys, factory, says
):
    """Each was a traceback and a failed run recorded (exit 1); `models` too for the first."""
    out = hostile / "run"
    argv = ["train", *OWN, f"model.name=hostilemodels:{factory}", "--out", str(out)]
    assert main(argv) == 2
    assert says in one_error_line(capsys)
    assert not out.exists()
    if not factory.startswith("init_"):
        assert main(["models", f"hostilemodels:{factory}"]) == 2
        assert says in one_error_line(capsys)


def test_a_run_whose_error_has_no_readable_message_is_recorded_failed(hostile, capsys):
    """str() of the model's exception raised inside tricklab's own handler: the run was lost."""
    out = hostile / "run"
    assert main(["train", *OWN, "model.name=hostilemodels:late_nostr", "--out", str(out)]) == 1
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "failed"
    assert result["error"] == "NoStr: (its message could not be read)"


def test_a_failed_runs_traceback_cannot_reach_the_terminal_or_forge_a_line(hostile, capsys):
    argv = ["train", *OWN, "model.name=hostilemodels:late_escape", "--out", str(hostile / "r")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2K" in err
    assert "Traceback (most recent call last)" in err
    assert not [line for line in err.splitlines() if line.startswith("error:")]
    assert "  error: forged line" in err  # indented: a line of the traceback, not tricklab's


def test_an_error_python_ignores_is_one_warning_line_not_a_traceback(hostile):
    """A model's __del__ raising printed "Exception ignored in" tracebacks after a run that went
    well, each with its forged line; through the console script's way out (cli.main.run)."""
    env = {**os.environ, "PYTHONPATH": str(hostile)}
    done = subprocess.run(
        [sys.executable, "-m", "tricklab", "models", "hostilemodels:del_raises"],
        capture_output=True, text=True, env=env, cwd=hostile, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines and all(
        line == "warning: an error was ignored (RuntimeError: boom)" for line in lines
    ), done.stderr


def test_models_out_of_memory_counting_macs_is_one_line(monkeypatch, capsys):
    """`models airbench model.widths=[8192,8192,8192] data.image_size=1024`: 85 lines."""
    from tricklab.measure import flops

    def no_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't "
                           "allocate memory: you tried to allocate 34292662272 bytes")  # fmt: skip

    monkeypatch.setattr(flops, "count_forward_macs", no_memory)
    assert main(["models", "airbench", "data.image_size=64"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("error: airbench at 64×64: no memory to count its MACs (")
    assert line.endswith("); lower model.width(s) or data.image_size")


@pytest.mark.parametrize(
    "mark, what, commands",
    [
        ("study.db", "a study", ["train", "speedrun"]),
        ("runs/baseline/seed-0/result.json", "a study", ["train", "speedrun"]),
        ("result.json", "a run", ["ablate", "sweep", "speedrun"]),
        ("summary.json", "a speedrun", ["train", "ablate", "sweep"]),
    ],
)
def test_one_commands_out_folder_is_refused_by_the_others(mark, what, commands, tmp_path, capsys):
    """`train --out` an ablation's folder (or `ablate --out` a run's) ran and mixed the two:
    a report of the folder read a study and a run as one."""
    out = tmp_path / "o"
    (out / mark).parent.mkdir(parents=True)
    (out / mark).write_text("{}")
    space = tmp_path / "space.yaml"
    space.write_text("optim.lr: {low: 0.01, high: 0.1, log: true}\n")
    argv = {
        "train": ["train", *TINY, "--out", str(out)],
        "speedrun": ["speedrun", *TINY, "--runs", "1", "--out", str(out)],
        "ablate": ["ablate", "--baseline", *TINY, "--vary", "tricks.label_smoothing=0.1",
                   "--seeds", "1", "--out", str(out), "--dry-run"],
        "sweep": ["sweep", "--baseline", *TINY, "--space", str(space), "--trials", "1",
                  "--out", str(out), "--dry-run"],
    }  # fmt: skip
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    for command in commands:
        assert main(argv[command]) == 2, command
        line = one_error_line(capsys)
        assert line.startswith(f"error: --out {out} holds {what} ("), line
        assert line.endswith("another command's output; give a new folder")
    if mark == "study.db":  # `train --out` a study's own runs/ folder: runs of a study
        (out / "runs" / "baseline" / "seed-0").mkdir(parents=True)
        (out / "runs" / "baseline" / "seed-0" / "result.json").write_text("{}")
        assert main(["train", *TINY, "--out", str(out / "runs")]) == 2
        assert "holds runs (baseline), another command's output" in one_error_line(capsys)
    else:
        assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
