"""The command line: listings, train, data show, and one clear line with exit code 2 for mistakes."""

import json
import subprocess
import sys

import pytest

from tricklab.cli.main import main

TINY = [
    "data.name=synthetic",
    "data.train_size=200",
    "data.test_size=100",
    "model.name=airbench",
    "model.widths=[8, 16, 16]",
    "loader.kind=device",
    "loader.batch_size=50",
    "run.epochs=1",
    "run.device=cpu",
]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tricklab", *args], capture_output=True, text=True)


def test_version_and_help():
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("tricklab ")
    assert "train" in run_cli("--help").stdout


def test_every_command_is_registered():
    from tricklab.cli.main import build_parser

    (commands,) = [a for a in build_parser()._actions if a.dest == "command"]
    assert set(commands.choices) == {
        "data", "train", "tricks", "recipes", "models", "speedrun", "ablate", "sweep", "results",
        "profile", "demo", "report",
    }  # fmt: skip


def _imports(path):
    """The tricklab modules a source file imports, at any level (function bodies included)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {name for name in found if name.startswith("tricklab")}


def test_no_two_modules_import_each_other_even_inside_functions():
    """An import cycle hidden behind a function-level import is still a cycle."""
    from pathlib import Path

    import tricklab

    root = Path(tricklab.__file__).parent
    modules = {}
    for path in root.rglob("*.py"):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imports(path):
            while imported and imported not in modules:  # `from pkg import name`: the module
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets

    def reachable(start):
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    cycles = sorted(name for name in graph if name in reachable(name))
    assert cycles == []


def test_light_commands_do_not_load_torch():
    """--help, --version, `tricks`, `recipes` and a bad override answer without importing torch
    (seconds of start-up); `tricklab.train` is still the function once asked for."""
    probe = (
        "import sys, tricklab; from tricklab.cli.main import main\n"
        "assert main(['tricks']) == 0 and main(['recipes']) == 0\n"
        "assert main(['train', 'optim.lrr=1']) == 2\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "from tricklab.training import loop\n"
        "assert callable(tricklab.train) and tricklab.train.__module__ == 'tricklab.training.api'\n"
        "assert 'torch' in sys.modules\n"
        "assert callable(tricklab.speedrun.speedrun) and callable(tricklab.experiments.ablate)\n"
        "assert callable(tricklab.report.write_report) and callable(tricklab.demo.run_demo)\n"
        "assert callable(tricklab.progress.ProgressDisplay)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "optim.lr" in out.stderr  # the bad key's error named the closest valid one


def test_train_json_prints_result_last(tmp_path, capsys):
    assert main(["train", *TINY, "--out", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["status"] == "complete"
    assert (tmp_path / "result.json").is_file()


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "live-view"])
def test_a_run_broken_by_an_unexpected_error_reports_failed_and_exits_1(
    tmp_path, capsys, monkeypatch, as_json
):
    from tricklab.training import loop

    def broken_step(*args):
        raise ValueError("a bug in a trick")

    monkeypatch.setattr(loop, "train_step", broken_step)
    code = main(["train", *TINY, "--out", str(tmp_path), *(["--json"] if as_json else [])])
    out, err = capsys.readouterr()
    assert code == 1
    assert "Traceback" in err and "ValueError: a bug in a trick" in err  # where it broke
    stored = json.loads((tmp_path / "result.json").read_text())
    assert stored["status"] == "failed" and stored["error"] == "ValueError: a bug in a trick"
    if as_json:
        assert json.loads(out.strip().splitlines()[-1]) == stored
    else:
        assert "run failed" in out and "a bug in a trick" in out


def test_train_live_view_renders(tmp_path, capsys):
    assert main(["train", *TINY, "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "val acc" in captured.out


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "optim.lrr=0.1"], "did you mean 'optim.lr'"),
        (["train", "tricks.precision=fp8"], "choose one of"),
        (["train", "no-such-recipe"], "unknown recipe"),
        (["train", "synthetic", "oops"], "key=value"),
        (["data", "show", "imagefolder", "--data-dir", "/no/such/dir"], "/no/such/dir"),
        (["data", "show", "nosuchset"], "unknown dataset"),
        (
            ["train", "model.widths=[8,x]"],
            "expected list[int] | None",
        ),  # brackets printed as they are
        (["data", "show", "imagefolder", "--data-dir", "/no/[such]/dir"], "/no/[such]/dir"),
        (["train", "optim.lr=[1"], "optim.lr='[1' is not valid YAML"),
        (["train", "optim.name=="], "optim.name='=' is not valid YAML"),
        (["speedrun", "optim.lr=[1"], "is not valid YAML"),
        (
            ["ablate", "--baseline", "optim.lr=0.1", "--vary", "optim.lr=[1", "--dry-run"],
            "is not valid YAML",
        ),
        (["train", ""], "empty recipe name"),
        (["train", "."], "is a folder"),
        (["train", "data.train_size=100000000000000000000"], "must be <= 2147483647"),
        (["train", "loader.num_workers=100000"], "must be <= 256"),
        (["train", "run.time_budget_seconds=0"], "must be > 0"),
        (["train", "schedule.milestones=[2,-1]"], "fractions of training in [0, 1]"),
        (["train", "tricks.ema_decay=1"], "tricks.ema_decay=1 must be < 1"),
        (["train", "--out", "/etc/hostname/run"], "/etc/hostname is a file, not a folder"),
        (["train", "--out", ""], "--out is empty"),
        (["speedrun", "--out", " "], "--out is empty"),
        (["speedrun", "--warmup-epochs", "-1"], "--warmup-epochs must be a number >= 0"),
        # fifteenth round: a warm-up longer than a run trained the recipe's length, silently
        (
            ["speedrun", "run.epochs=2", "--warmup-epochs", "2.5"],
            "--warmup-epochs 2.5 is more than the recipe's run.epochs 2",
        ),
        # seventh round: the shell's bytes that are no UTF-8 read as "not valid YAML"
        (["train", "data.dir=/x/img\udcff"], "holds bytes that are not UTF-8 text"),
        (
            ["ablate", "--vary", "optim.lr=0.1", "--study", "s\udcff", "--dry-run"],
            "bytes that are not UTF-8",
        ),
        (["models", "--num-classes", "99999999999"], "--num-classes must be in 1..100000"),
    ],
)
def test_user_mistakes_give_one_line_and_exit_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert message in lines[0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--out", "x", "--bogus"], "unrecognized arguments: --bogus"),
        (
            ["ablate", "--seeds", "1", "--vary", "optim.lr=1", "stray"],
            "unrecognized arguments: stray",
        ),
    ],
)
def test_unknown_arguments_give_one_line_and_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_overrides_may_follow_options(tmp_path, capsys):
    # as users type them: options first, then the recipe and its key=value words
    assert main(["train", "--out", str(tmp_path / "a"), "--json", *TINY, "run.epochs=0.5"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (
        result["recipe"]["run"]["epochs"] == 0.5 and result["recipe"]["data"]["name"] == "synthetic"
    )


def test_speedrun_with_bad_setup_prints_one_line_and_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "sr" / "x"
    bad = ["data.name=imagefolder", f"data.dir={tmp_path / 'missing'}"]
    assert main(["speedrun", "--runs", "1", "--out", str(out), *TINY, *bad]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_mistake_through_the_console_script_has_no_traceback():
    out = run_cli("train", "optim.lrr=0.1")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: override: unknown recipe key 'optim.lrr'; did you mean 'optim.lr'?"
    ]


def test_tricks_lists_every_field(capsys):
    assert main(["tricks", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    keys = {r["key"] for r in rows}
    assert {"tricks.precision", "optim.lr_scaling", "run.early_stopping_patience"} <= keys


def test_recipes_lists_builtins(capsys):
    assert main(["recipes", "--json"]) == 0
    assert "speedrun94" in json.loads(capsys.readouterr().out)


def test_data_show_json(capsys):
    assert main(["data", "show", "synthetic", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert set(info) >= {"name", "classes", "image_shape", "train", "test"}
    assert info["train"]["size"] == sum(info["train"]["per_class"])


def test_data_show_real_cifar10(cifar10_jpeg_dir, tricklab_cache_dir, capsys):
    args = [
        "data",
        "show",
        "imagefolder",
        "--data-dir",
        str(cifar10_jpeg_dir),
        "--cache-dir",
        str(tricklab_cache_dir),
        "--json",
    ]
    assert main(args) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["image_shape"] == [3, 32, 32]
    assert info["train"] == {"size": 50000, "per_class": [5000] * 10}
    assert info["test"] == {"size": 10000, "per_class": [1000] * 10}


def test_cli_import_leaves_torchvision_for_later():
    """torchvision takes about a second to import; only torchvision models and TorchLoader need it."""
    code = "import sys, tricklab.cli.main; print('torchvision' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_model_named_twice_is_listed_once(capsys):
    assert main(["models", "airbench", "airbench", "--json"]) == 0
    assert [m["name"] for m in json.loads(capsys.readouterr().out)] == ["airbench"]


@pytest.mark.parametrize("words", [[], ["data"], ["profile"]])
def test_a_command_without_its_sub_command_prints_its_help_and_one_error_line(capsys, words):
    """Eleventh hostile round: exit 2 with nothing on stderr."""
    assert main(words) == 2
    captured = capsys.readouterr()
    assert f"usage: {' '.join(['tricklab', *words])}" in captured.out
    assert captured.err.startswith("error: tricklab") and len(captured.err.splitlines()) == 1


def test_output_into_a_closed_pipe_ends_quietly():
    cmd = [sys.executable, "-m", "tricklab", "tricks", "--json"]
    reader_gone = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader_gone.stdout.close()  # like `tricklab tricks --json | head -c 0`
    assert reader_gone.wait(timeout=120) == 1
    assert b"Traceback" not in reader_gone.stderr.read()


@pytest.mark.parametrize(
    "env",
    [{"PYTHONIOENCODING": "ascii"}, {"PYTHONUTF8": "0", "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0"}],
    ids=["ascii-streams", "c-locale-without-utf8-mode"],
)
def test_a_terminal_that_cannot_show_unicode_gets_escapes_not_a_traceback(env):
    """Seventh hostile round: `×`, `±`, `—` in a table under PYTHONIOENCODING=ascii were a
    UnicodeEncodeError; a built-in recipe read in the C locale's ASCII one too."""
    import os

    full = {**os.environ, **env}
    for args in (["recipes"], ["tricks", "optim"], ["models", "airbench"]):
        out = subprocess.run([sys.executable, "-m", "tricklab", *args], capture_output=True,
                             env=full, timeout=300)  # fmt: skip
        assert out.returncode == 0 and out.stdout, (args, out.stderr[-2000:])
    listed = subprocess.run([sys.executable, "-m", "tricklab", "recipes"], capture_output=True,
                            env=full, timeout=300).stdout  # fmt: skip
    assert b"\\u2014" in listed  # the em dash of a recipe's description, escaped


@pytest.mark.parametrize(
    "args, message",
    [
        (["speedrun", "--runs", "abc"], "argument --runs: 'abc' is not a whole number in ASCII"),
        # number flags read numbers as recipe fields do: not Python's int()/float() spellings
        (["ablate", "--seeds", "1_0"], "argument --seeds: '1_0' is not a whole number in ASCII"),
        (["demo", "--seeds", "\u0663"], "argument --seeds: '\u0663' is not a whole number"),
        (["speedrun", "--warmup-epochs", "nan"], "'nan' is not a number such as 0.5 or 1e-3"),
        (["results", "x", "--target", "inf"], "'inf' is not a number such as 0.5 or 1e-3"),
        (["speedrun", "--peak-tflops", "nan"], "'nan' is not a number such as 0.5 or 1e-3"),
        (["ablate", "--grace-seconds", "nan"], "'nan' is not a number such as 0.5 or 1e-3"),
        (["ablate", "--budget-epochs", "NaN"], "'NaN' is not a number such as 0.5 or 1e-3"),
        (["sweep", "--space", "s.yaml", "--sampler", "bogus"], "invalid choice: 'bogus'"),
        (["nosuchcommand"], "invalid choice: 'nosuchcommand'"),
    ],
)
def test_usage_mistakes_give_one_line_and_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_recipe_file_that_is_not_text_gives_one_line(tmp_path, capsys):
    (tmp_path / "r.yaml").write_bytes(b"\xff\xfe\x00")
    assert main(["train", str(tmp_path / "r.yaml")]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    "bad",
    [
        ["data.name=imagefolder", "data.dir=NOPE"],
        ["model.name=nosuchnet"],
        ["loader.batch_size=1000", "loader.drop_last=true"],
    ],
)
def test_train_with_bad_data_or_model_leaves_nothing_behind(tmp_path, capsys, bad, as_json):
    bad = [b.replace("NOPE", str(tmp_path / "nope")) for b in bad]
    args = [
        "train",
        "data.name=synthetic",
        "data.train_size=64",
        *bad,
        "--out",
        str(tmp_path / "run"),
    ]
    assert main(args + ["--json"] * as_json) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured.err
    assert captured.err.startswith("error: ")
    assert not (tmp_path / "run").exists()


def test_train_without_out_makes_a_new_folder_named_after_the_recipe_file_for_each_run(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "tiny.yaml").write_text("run:\n  epochs: 1\n")
    for _ in range(2):  # within a second or two: the second gets its own numbered folder
        assert main(["train", "cfg/tiny.yaml", *TINY, "--json"]) == 0
    capsys.readouterr()
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(folders) == 2 and all(f.split("-", 2)[2].startswith("tiny") for f in folders), (
        folders
    )
    assert all((tmp_path / "runs" / f / "result.json").exists() for f in folders)


def test_train_with_bad_setup_and_no_out_leaves_no_runs_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *TINY, "model.name=nosuchnet"]) == 2
    assert "nosuchnet" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_train_into_a_folder_that_holds_a_run_is_refused_and_leaves_it_as_it_was(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY, "run.checkpoint=true", "--out", str(out), "--json"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main(["train", *TINY, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run directory") and "already holds a run" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_sigterm_stops_a_training_run_like_ctrl_c(tmp_path):
    import signal
    import time

    cmd = [sys.executable, "-m", "tricklab", "train", "data.name=synthetic", "model.name=airbench",
           "model.widths=[8,16,16]", "data.train_size=2000", "data.test_size=500",
           "loader.kind=device", "run.epochs=100000",
           "--out", str(tmp_path / "run"), "--json"]  # fmt: skip
    worker = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        metrics, deadline = tmp_path / "run" / "metrics.jsonl", time.monotonic() + 120
        while not (metrics.exists() and metrics.read_text().strip()):  # wait for its first epoch
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=120)
    finally:  # a failed wait must not leave the worker training for 100,000 epochs
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "interrupted"
    assert json.loads(out.strip().splitlines()[-1]) == result  # --json: the result, last line
    epochs = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert result["epochs"] == epochs and result["epochs_completed"] == len(epochs) >= 1
    assert result["train_seconds"] == epochs[-1]["train_seconds"] > 0


def test_new_numbered_dir_gives_each_caller_its_own_folder(tmp_path):
    from tricklab.core.paths import new_numbered_dir

    made = [new_numbered_dir(tmp_path / "runs" / "x") for _ in range(3)]
    assert [p.name for p in made] == ["x", "x-2", "x-3"] and all(p.is_dir() for p in made)


def test_atomic_write_leaves_the_old_file_whole_when_writing_fails(tmp_path):
    from tricklab.core.paths import atomic_write

    path = tmp_path / "result.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(path) as handle:
        handle.write("half of the new")
        raise RuntimeError("disk full")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["result.json"]
    with atomic_write(path) as handle:
        handle.write("new")
    assert path.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["result.json"]


# ---------------------------------------------------------------- standard streams that fail


def tricklab(args, env=None, **streams):
    import os

    full = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    run = subprocess.run([sys.executable, "-m", "tricklab", *args], env=full, timeout=300,
                         **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **streams})  # fmt: skip
    return run.returncode, run.stdout or b"", run.stderr or b""


def test_a_run_whose_stderr_is_a_closed_pipe_or_full_trains_and_keeps_its_result(tmp_path):
    """Seventh hostile round: the progress lines' failed writes ended the run (rich's closed-pipe
    SystemExit(1), recorded as the model's sys.exit, stdout sent to /dev/null; a full disk read
    as the run folder's and the run deleted)."""
    with open("/dev/full", "w", encoding="utf-8") as full:
        code, out, _ = tricklab(["train", *TINY, "--out", str(tmp_path / "full")], stderr=full)
    assert code == 0 and b"run complete" in out
    cmd = [sys.executable, "-m", "tricklab", "train", *TINY, "--out", str(tmp_path / "pipe")]
    closed = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    closed.stderr.close()  # like `2> >(head -c1)`: the reader gone
    out = closed.stdout.read()
    assert closed.wait(timeout=300) == 0 and b"run complete" in out
    for run in ("full", "pipe"):
        result = json.loads((tmp_path / run / "result.json").read_text())
        assert result["status"] == "complete", result.get("error")


def test_a_full_stdout_is_one_line_naming_it_and_the_trained_run_is_kept(tmp_path):
    with open("/dev/full", "w", encoding="utf-8") as full:
        code, _, err = tricklab(["train", *TINY, "--out", str(tmp_path / "r"), "-q"], stdout=full)
        assert (code, err.decode().strip()) == (
            2, "error: cannot write the standard output: No space left on device"
        )  # fmt: skip
        assert json.loads((tmp_path / "r" / "result.json").read_text())["status"] == "complete"
        for args in (["--version"], ["demo", "--help"]):
            code, _, err = tricklab(args, stdout=full)
            assert code == 2 and err.count(b"\n") == 1 and b"standard output" in err
        code, _, _ = tricklab(["tricks", "nosuch"], stderr=full)  # nowhere to say it: still 2
        assert code == 2


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "1"}, "unknown recipe key 'nosuch.key'"),  # a stray RANK is no launch
        ({"RANK": "0", "WORLD_SIZE": "abc"}, "MASTER_ADDR and MASTER_PORT are not set"),
        (
            {"RANK": "3", "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"},
            "no whole numbers with RANK below WORLD_SIZE",
        ),
    ],
    ids=["rank-alone", "world-size-no-number", "rank-past-the-world"],
)
def test_torchrun_variables_left_in_the_environment_are_one_line(tmp_path, env, message):
    """Seventh hostile round: RANK=1 alone silenced every error (rank 0 speaks, and no launcher
    was there to); WORLD_SIZE=abc and a group nobody started were torch's tracebacks."""
    bad = ["nosuch.key=1"] if "WORLD_SIZE" not in env else []
    code, _, err = tricklab(["train", *TINY, *bad, "--out", str(tmp_path / "r")], env=env)
    lines = err.decode().strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "r").exists()


def test_a_torch_compile_cache_folder_torch_cannot_use_is_one_line_before_the_run(tmp_path):
    """Seventh hostile round: TORCHINDUCTOR_CACHE_DIR naming a file failed every run with
    torch._dynamo's FileExistsError at the model's first forward, compiled or not."""
    (tmp_path / "file").write_text("x")
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "file")}
    for args in (["train", *TINY, "--out", str(tmp_path / "r")], ["models", "airbench"]):
        code, _, err = tricklab(args, env=env)
        lines = err.decode().strip().splitlines()
        assert code == 2 and len(lines) == 1, lines
        assert "TORCHINDUCTOR_CACHE_DIR=" in lines[0] and "cannot be made a folder" in lines[0]
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("threads", ["abc", "0", "-1", "1.5", ""])
def test_an_omp_num_threads_openmp_cannot_take_is_one_line(tmp_path, threads):
    """Seventh hostile round: libgomp printed a blank line and its own warning before every
    command's output, two lines more than the one promised."""
    code, _, err = tricklab(["train", *TINY, "--out", str(tmp_path / "r")],
                            env={"OMP_NUM_THREADS": threads})  # fmt: skip
    lines = err.decode().strip().splitlines()
    assert code == 2 and len(lines) == 1 and "is no whole number from 1 to" in lines[0], lines
    assert not (tmp_path / "r").exists()


def test_a_cache_path_too_long_for_the_file_system_is_one_line_not_a_damaged_file(tmp_path):
    code, _, err = tricklab(["data", "show", "cifar10-sample"],
                            env={"TRICKLAB_CACHE": str(tmp_path / ("x" * 300))})  # fmt: skip
    lines = err.decode().strip().splitlines()
    assert code == 2 and len(lines) == 1 and "File name too long" in lines[0], lines
