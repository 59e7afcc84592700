"""The fifteenth hostile round: each case is one clear error before anything is written, or a
profile that says what it measured."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from tiny_recipe import TINY_SYNTHETIC

import tricklab
from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.experiments import ablate, sweep
from tricklab.experiments.recordfields import number_problem
from tricklab.experiments.speedrun import SpeedrunPlan, speedrun
from tricklab.experiments.stats import write_csv
from tricklab.profile.loader import profile_loader
from tricklab.profile.model import ModelBuild, ProfileGrid, profile_models
from tricklab.profile.step import profile_step
from tricklab.report.build import write_report
from tricklab.report.profiles import load_profile, load_profiles
from tricklab.report.table_writers import to_csv

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


@pytest.mark.parametrize("name", ["t.json/", "sub/t.json//", "t.json/.", "sub/t.json/.."])
def test_a_trace_or_csv_name_ending_in_a_slash_is_refused_not_written_as_a_file(
    name, tmp_path, monkeypatch, capsys
):
    """`--trace t.json/` wrote the file t.json: Path drops the slash a folder's name ends in."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    assert main(["profile", "step", *TINY_SYNTHETIC, "--repeats", "2", "--trace", name]) == 2
    assert "names a folder (it ends in a slash, . or ..): give a file" in one_error_line(capsys)
    with pytest.raises(TrickLabError, match="names a folder"):
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
        assert "is inside another command's folder (" in one_error_line(capsys)
    else:
        assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_a_loss_a_run_records_below_the_float32_range_is_read_back(tmp_path, capsys):
    """An lr of 1e10 trained to a loss of 1.6e28, stored complete; every reader then refused the
    study, the run folder and the speedrun ("more than any run records (1e+18)")."""
    assert number_problem("epochs[0].train_loss", 1.6e28) is None
    assert number_problem("val_loss", 3.4e38) is None
    assert "more than any run records (1e+39)" in number_problem("val_loss", 1e40)
    assert "more than any run records (1e+18)" in number_problem("params", 1e19)  # as it was
    out = tmp_path / "run"
    assert main(["train", *TINY, "--out", str(out), "--json"]) == 0
    result = json.loads((out / "result.json").read_text())
    for row in result["epochs"]:
        row["train_loss"] = 1.6e28
    (out / "result.json").write_text(json.dumps(result))
    capsys.readouterr()
    assert main(["report", str(out), "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "report.md").is_file()


@pytest.mark.parametrize(
    "argv",
    [
        ["results", "--storage", "sqlite:///%00.db"],
        ["results", "s", "--storage", "sqlite:///x%00y.db"],
        ["ablate", *TINY, "--vary", "tricks.label_smoothing=0", "--seeds", "1", "--dry-run",
         "--storage", "sqlite:///%00.db"],
    ],
)  # fmt: skip
def test_a_nul_in_an_sqlite_url_is_one_line(argv, capsys):
    """`%00` decodes to a NUL, which os.stat refuses with a ValueError: a 25-line traceback."""
    assert main(argv) == 2
    assert "a file's path cannot hold a NUL (%00)" in one_error_line(capsys)


def test_csv_output_writes_a_text_cell_on_one_line_without_its_control_characters():
    """`results --per-seed --format csv` printed a varied value's newline, ESC and CR raw."""
    text = to_csv(["config", "seed"], [['run.wandb_project="a\nFORGED\x1b[31m\r"', 0]])
    assert text == 'config,seed\n"run.wandb_project=""a\\nFORGED\\x1b[31m\\r""",0\n'


def test_a_study_in_a_folder_named_otherwise_opens_by_the_name_the_listing_shows(
    tmp_path, monkeypatch, capsys
):
    """`ablate --study foo --out runs/experiments/bar`: the listing showed foo, and `results foo`
    answered "no study 'foo' ...; did you mean 'foo'?"."""
    monkeypatch.chdir(tmp_path)
    bar = tmp_path / "runs" / "experiments" / "bar"
    argv = ["ablate", *TINY, "--vary", "tricks.label_smoothing=0.1", "--seeds", "1", "--study",
            "foo", "--out", str(bar), "-q"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["results", "foo", "--format", "json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["study"] == "foo" and meta["storage"].endswith("bar/study.db")
    assert main(["results", "foo", "--per-seed", "--format", "csv"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3  # a header, two runs
    assert main(["report", "foo", "--out", str(tmp_path / "r")]) == 0
    shutil.copytree(bar, bar.with_name("baz"))
    capsys.readouterr()
    assert main(["results", "foo"]) == 2
    assert "study 'foo' is in 2 databases (" in one_error_line(capsys)


def test_python_callers_wrong_types_are_type_errors_naming_the_argument():
    recipe = tricklab.load_recipe(None, TINY)
    cases = [
        (lambda: ablate("x"), "ablate's plan takes AblationPlan"),
        (lambda: sweep(5), "sweep's plan takes SweepPlan"),
        (lambda: speedrun("x"), "speedrun's plan takes SpeedrunPlan"),
        (lambda: profile_models(["airbench"], peak_tflops_override="1"), "peak_tflops takes a"),
        (lambda: profile_step(recipe, trace=5), "profile_step's trace takes"),
        (lambda: profile_step(recipe, recipe_name=5), "profile_step's recipe_name takes"),
        (lambda: profile_loader(recipe, with_step="yes"), "profile_loader's with_step takes"),
    ]
    for call, says in cases:
        with pytest.raises(TypeError, match=re.escape(says)):
            call()


def test_a_step_profile_whose_operator_shares_pass_the_whole_is_refused(tmp_path):
    result = profile_step(tricklab.load_recipe(None, TINY_SYNTHETIC), repeats=2)
    for operator in result["top_operators"]:
        operator["self_share"] = 0.9
    saved = tmp_path / "p.json"
    saved.write_text(json.dumps(result))
    with pytest.raises(TrickLabError, match="self shares in top_operators add up to"):
        load_profile(saved)


def test_a_speedrun_shows_a_tiny_target_and_its_summary_plans_at_least_one_run(tmp_path, capsys):
    out = tmp_path / "s"
    argv = ["speedrun", *TINY, "--runs", "1", "--warmup-epochs", "0", "--target", "1e-5",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert "runs ≥ target 0.001%" in capsys.readouterr().out  # it read 0.00%
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").write_text(json.dumps({**summary, "runs_planned": 0}))
    with pytest.raises(TrickLabError, match="'runs_planned' is 0, not a whole number from 1"):
        write_report([out], tmp_path / "r")


def test_a_profile_named_twice_is_one_profile(tmp_path):
    saved = tmp_path / "m.json"
    build = ModelBuild(widths=[8, 16, 16], image_size=16)
    result = profile_models(["airbench"], ProfileGrid([2]), build=build, device="cpu", repeats=2)
    saved.write_text(json.dumps(result))
    assert len(load_profiles([saved, tmp_path / "." / "m.json"])) == 1


@pytest.mark.parametrize("command", ["results", "report"])
def test_a_study_named_in_a_storage_that_is_a_device_says_so(command, tmp_path, capsys):
    """`report s1 --storage sqlite:////dev/null` said "no study database at /dev/null", where
    `results --storage` alone said it is a device."""
    argv = [command, "s1", "--storage", "sqlite:////dev/null"]
    assert main([*argv, "--out", str(tmp_path / "r")] if command == "report" else argv) == 2
    assert one_error_line(capsys) == (
        "error: cannot open storage sqlite:////dev/null: it is a device, not a file"
    )


SECOND_PASS = """
import torch
from torch import nn


def no_state(num_classes):
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, num_classes))
    net.state_dict = lambda *args, **kwargs: None
    return net


def text_state(num_classes):
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, num_classes))
    net.state_dict = lambda *args, **kwargs: {"x": "s"}
    return net


class Shared(nn.Module):  # one module in two places is no cycle
    def __init__(self, num_classes):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.again, self.fc = self.conv, nn.Linear(8, num_classes)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def get_extra_state(self):
        return {"note": "any object"}

    def set_extra_state(self, state):
        pass

    def forward(self, x):
        return self.fc(self.conv(x).mean((2, 3)))
"""


@pytest.mark.parametrize("factory", ["no_state", "text_state"])
def test_a_state_dict_without_the_weights_is_one_line_before_the_run(
    factory, tmp_path, monkeypatch, capsys
):
    """Second pass: a state_dict() giving None or text passed the check, then the EMA failed."""
    (tmp_path / "secondpass.py").write_text(SECOND_PASS)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["train", *OWN, f"model.name=secondpass:{factory}", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    assert "its state_dict() gives" in one_error_line(capsys)
    assert not (tmp_path / "r").exists()


def test_shared_submodules_extra_state_and_whole_number_buffers_train(tmp_path, monkeypatch):
    (tmp_path / "secondpass.py").write_text(SECOND_PASS)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["train", *OWN, "model.name=secondpass:Shared", "tricks.ema_decay=0.9", "--out",
            str(tmp_path / "r"), "-q"]  # fmt: skip
    assert main(argv) == 0


def test_the_folders_above_an_out_are_looked_at_too(tmp_path, capsys):
    """Second pass: `train --out STUDY/runs/extra` and `--out SPEEDRUN/seed-5`, and `ablate --out
    STUDY/runs`, were taken."""
    (tmp_path / "ab" / "runs" / "baseline" / "seed-0").mkdir(parents=True)
    (tmp_path / "ab" / "study.db").write_bytes(b"")
    (tmp_path / "ab" / "runs" / "baseline" / "seed-0" / "result.json").write_text("{}")
    (tmp_path / "sp").mkdir()
    (tmp_path / "sp" / "summary.json").write_text("{}")
    for out, holds in (
        (tmp_path / "ab" / "runs" / "extra", "study.db"),
        (tmp_path / "sp" / "seed-5", "summary.json"),
    ):
        assert main(["train", *TINY, "--out", str(out)]) == 2
        line = one_error_line(capsys)
        assert line.endswith(f"holds {holds}); give a folder outside it"), line
        assert not out.exists()
    argv = ["ablate", "--baseline", *TINY, "--vary", "tricks.label_smoothing=0.1", "--seeds", "1",
            "--out", str(tmp_path / "ab" / "runs"), "--dry-run"]  # fmt: skip
    assert main(argv) == 2
    assert "is inside another command's folder" in one_error_line(capsys)


def test_csv_keeps_text_that_is_no_control_character_as_it_is():
    """Second pass: a no-break space and an emoji's zero-width joiner came out escaped."""
    text = to_csv(["config"], [["café\xa0x"], ["👨\u200d👩"], ["a\u2028b"]])
    assert text.splitlines() == ["config", "café\xa0x", "👨\u200d👩", "a\\u2028b"]


def test_a_warm_up_is_quoted_as_typed_and_a_loss_below_0_is_no_reading(capsys):
    assert main(["speedrun", *TINY, "--warmup-epochs", "1.0000001", "--runs", "1"]) == 2
    assert "--warmup-epochs 1.0000001 is more than the recipe's run.epochs 1:" in one_error_line(
        capsys
    )
    assert "below 0" in number_problem("val_loss", -1e38)


def test_a_folder_of_runs_is_no_study_folder(tmp_path, capsys):
    (tmp_path / "many" / "r1").mkdir(parents=True)
    (tmp_path / "many" / "r1" / "result.json").write_text("{}")
    argv = ["ablate", "--baseline", *TINY, "--vary", "tricks.label_smoothing=0.1", "--seeds", "1",
            "--out", str(tmp_path / "many"), "--dry-run"]  # fmt: skip
    assert main(argv) == 2
    assert "holds runs (r1), another command's output" in one_error_line(capsys)


def test_a_data_parallel_run_keeps_its_loggers_in_rank_0s_folder(tmp_path, capsys):
    """Round D: any logger but jsonl failed every --nproc run ("rank 1 refused: run.loggers csv
    write into the run folder and this run has none"), and left a failed run's folder."""
    out = tmp_path / "d"
    argv = ["train", *TINY, "run.loggers=[jsonl,csv]", "--nproc", "2", "--out", str(out), "-q"]
    assert main(argv) == 0, capsys.readouterr().err
    assert json.loads((out / "result.json").read_text())["status"] == "complete"
    assert len((out / "metrics.csv").read_text().splitlines()) == 2  # a header, one epoch


def test_a_logger_package_that_raises_at_import_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "wandb").mkdir()
    (tmp_path / "wandb" / "__init__.py").write_text('raise RuntimeError("broken install")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "wandb", raising=False)
    assert main(["train", *TINY, "run.loggers=[wandb]", "--out", str(tmp_path / "r")]) == 2
    assert one_error_line(capsys) == (
        "error: run.loggers: wandb's package wandb cannot be imported (RuntimeError: broken "
        "install); reinstall it or drop wandb"
    )
    assert not (tmp_path / "r").exists()
