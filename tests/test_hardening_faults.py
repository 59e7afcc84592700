"""The harness, part 2: fault injection at every write (tests/faults.py), swept over N.

For each command a clean run first counts its write points (M). Then the command runs again with
the N-th point failing (ENOSPC, EIO, EACCES), killed (SIGKILL) or stopped (SIGINT, SIGTERM). The
property: the outcome is one of the promised ones (a complete run; one line and exit 2 with the
folder as before; a run recorded failed or interrupted), nothing half written is left where it
would be read, and the rerun of the same command succeeds with the clean run's results: no run
lost or counted twice. The suite samples N (first, last and two between, one mode each);
TRICKLAB_FAULT_SWEEP=all sweeps every N with every mode (minutes per command)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny_recipe import TINY_SYNTHETIC

from tricklab.core.safeio import parse_json

FAULTS = Path(__file__).with_name("faults.py")
MODES = ("enospc", "kill", "eio", "sigint", "eacces", "sigterm")
SWEEP_ALL = os.environ.get("TRICKLAB_FAULT_SWEEP") == "all"
TRAIN = [*TINY_SYNTHETIC, "run.epochs=2", "run.loggers=[jsonl,csv]"]
TIMEOUT = 600


def faulted(root: Path, n: int, mode: str, *args: str) -> subprocess.CompletedProcess:
    """`tricklab ARGS` from `root` with its n-th write point faulted by `mode`."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200"}
    command = [sys.executable, str(FAULTS), str(n), mode, str(root), "--", *args]
    return subprocess.run(
        command, cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )


def points(root: Path) -> list[str]:
    log = root / ".fault-log"
    return log.read_text().splitlines() if log.exists() else []


def sampled(count: int, picks: int = 4) -> list[tuple[int, str]]:
    """The (N, mode) pairs to try for a command with `count` write points: `picks` of them spread
    from the first to the last (3: first, middle, last)."""
    if SWEEP_ALL:
        return [(n, mode) for n in range(1, count + 1) for mode in MODES]
    picks = sorted({max(1, round(1 + k * (count - 1) / (picks - 1))) for k in range(picks)})
    return [(n, MODES[i % len(MODES)]) for i, n in enumerate(picks)]


def assert_whole(folder: Path) -> None:
    """Every file a reader would read is whole: JSON parses, each JSONL line parses, YAML loads."""
    for path in folder.rglob("*"):
        if path.name.endswith(".json"):
            parse_json(path.read_text())
        elif path.name.endswith(".jsonl"):
            for line in path.read_text().splitlines():
                parse_json(line)
        elif path.name.endswith(".yaml"):
            yaml.safe_load(path.read_text())


def assert_promised_outcome(done: subprocess.CompletedProcess, context: str) -> None:
    err = done.stderr
    if done.returncode == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("error:"), context + err
    elif done.returncode != -9:  # a killed process says nothing
        assert done.returncode in (0, 1, 130), context + err
        assert "Traceback" not in err or done.returncode == 1, context + err


# ---------------------------------------------------------------- train


@pytest.fixture(scope="module")
def clean_train(tmp_path_factory):
    root = tmp_path_factory.mktemp("clean")
    done = faulted(root, 0, "count", "train", *TRAIN, "--out", "run", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), len(points(root))


def test_train_survives_a_fault_at_every_sampled_write_and_reruns_to_the_same_result(
    tmp_path, clean_train
):
    clean, count = clean_train
    assert count >= 10  # the claim, recipe.yaml, metrics per epoch, result.json
    for n, mode in sampled(count):
        root = tmp_path / f"{n}-{mode}"
        root.mkdir()
        done = faulted(root, n, mode, "train", *TRAIN, "--out", "run", "--json")
        context = f"fault {mode} at point {n} ({points(root)[n - 1 : n]}): "
        assert_promised_outcome(done, context)
        run = root / "run"
        assert_whole(run) if run.exists() else None
        if done.returncode == 2:  # one line: the folder as it was, so the same command runs
            assert not run.exists() or not [p for p in run.iterdir() if p.name != ".fault-log"]
        # a folder whose run did not end as it records (killed, failed, interrupted) reruns
        ended = (run / "result.json").exists() and json.loads((run / "result.json").read_text())[
            "status"
        ] not in ("failed", "interrupted")
        again = "run-again" if ended else "run"
        rerun = faulted(root, 0, "count", "train", *TRAIN, "--out", again, "--json")
        assert rerun.returncode == 0, context + rerun.stderr
        result = json.loads(rerun.stdout.splitlines()[-1])
        assert result["val_acc"] == clean["val_acc"], context


# ---------------------------------------------------------------- ablate and speedrun

ABLATE = ["ablate", "--baseline", *TINY_SYNTHETIC, "run.epochs=1", "--vary", "optim.lr=0.05"]
ABLATE += ["--seeds", "1", "--out", "exp", "--json", "-q"]
SPEEDRUN = ["speedrun", *TINY_SYNTHETIC, "run.epochs=1", "--runs", "2", "--warmup-epochs", "0"]
SPEEDRUN += ["--json", "--quiet"]
SWEEP = ["sweep", "--baseline", *TINY_SYNTHETIC, "run.epochs=1", "--space", "space.yaml"]
SWEEP += ["--sampler", "grid", "--seeds", "1", "--out", "exp", "--json", "-q"]


def accuracies(done: subprocess.CompletedProcess) -> list:
    """The runs' accuracies of a command's --json summary (its last line), in order."""
    summary = json.loads(done.stdout.splitlines()[-1])
    if summary.get("kind") in ("ablation", "sweep"):  # every configuration's runs, none twice
        return [(c["config_id"], c["n"], c["accuracy_mean"]) for c in summary["stats"]]
    return [(summary["n"], summary["accuracy_mean"], summary["accuracy_min"])]


@pytest.mark.parametrize("command", ["ablate", "sweep", "speedrun"])
def test_studies_and_speedrun_survive_a_sampled_fault_and_rerun_to_the_same_results(
    tmp_path, command
):
    """ablate and sweep rerun into their study (resume: the run in flight is run again, none
    twice); speedrun, whose folder holds a finished speedrun only at its end, reruns into a new
    one. Three points each (first, middle, last): each try is two processes of several runs."""
    args = {"ablate": ABLATE, "sweep": SWEEP, "speedrun": [*SPEEDRUN, "--out", "sr"]}[command]
    space = "optim.lr: [0.05, 0.1]\n"  # the sweep's grid: two points
    clean_root = tmp_path / "clean"
    clean_root.mkdir()
    (clean_root / "space.yaml").write_text(space)
    clean = faulted(clean_root, 0, "count", *args)
    assert clean.returncode == 0, clean.stderr
    count = len(points(clean_root))
    for n, mode in sampled(count, picks=3):
        root = tmp_path / f"{n}-{mode}"
        root.mkdir()
        (root / "space.yaml").write_text(space)
        done = faulted(root, n, mode, *args)
        context = f"{command}: fault {mode} at point {n} ({points(root)[n - 1 : n]}): "
        assert_promised_outcome(done, context)
        for folder in (root / "exp", root / "sr"):
            assert_whole(folder) if folder.exists() else None
        rerun_args = args if command != "speedrun" else [*SPEEDRUN, "--out", "sr-again"]
        rerun = faulted(root, 0, "count", *rerun_args)
        assert rerun.returncode == 0, context + rerun.stderr
        assert accuracies(rerun) == accuracies(clean), context


# ---------------------------------------------------------------- report


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    done = faulted(root, 0, "count", "train", *TRAIN, "--out", "run")
    assert done.returncode == 0, done.stderr
    return root / "run"


def test_report_survives_a_fault_at_every_sampled_write_and_reruns(tmp_path, run_folder):
    clean = tmp_path / "clean"
    clean.mkdir()
    assert faulted(clean, 0, "count", "report", str(run_folder), "--out", "r").returncode == 0
    count = len(points(clean))
    for n, mode in sampled(count):
        root = tmp_path / f"{n}-{mode}"
        root.mkdir()
        done = faulted(root, n, mode, "report", str(run_folder), "--out", "r")
        context = f"fault {mode} at point {n} ({points(root)[n - 1 : n]}): "
        assert_promised_outcome(done, context)
        if (root / "r" / "report.md").exists():
            continue  # the fault came after the report was whole
        assert not (root / "r").exists() or not list((root / "r").iterdir()), context
        rerun = faulted(root, 0, "count", "report", str(run_folder), "--out", "r")
        assert rerun.returncode == 0, context + rerun.stderr
        assert (root / "r" / "report.md").read_text().count("\n") > 5


# ---------------------------------------------------------------- profile step

PROFILE = ["profile", "step", *TINY_SYNTHETIC, "run.epochs=1", "--repeats", "2"]
PROFILE += ["--trace", "t.json", "--json"]


def test_profile_step_survives_a_fault_at_its_trace_write_and_keeps_the_trace_before(tmp_path):
    """The trace is written to a temporary file and renamed over the path: a fault at either point
    leaves the trace a previous run wrote, whole, or the new one; the rerun writes it."""
    clean = tmp_path / "clean"
    clean.mkdir()
    done = faulted(clean, 0, "count", *PROFILE)
    assert done.returncode == 0, done.stderr
    before = (clean / "t.json").read_text()
    assert "traceEvents" in parse_json(before)
    count = len(points(clean))
    assert count >= 2  # the temporary file, the rename
    for n, mode in sampled(count):
        root = tmp_path / f"{n}-{mode}"
        root.mkdir()
        (root / "t.json").write_text(before)  # a trace an earlier run wrote
        done = faulted(root, n, mode, *PROFILE)
        context = f"profile step: fault {mode} at point {n} ({points(root)[n - 1 : n]}): "
        assert_promised_outcome(done, context)
        trace = (root / "t.json").read_text()
        assert trace == before or "traceEvents" in parse_json(trace), context
        assert done.returncode != 0 or trace != before, context  # a complete run wrote its own
    rerun = faulted(root, 0, "count", *PROFILE)
    assert rerun.returncode == 0, rerun.stderr
    assert "traceEvents" in parse_json((root / "t.json").read_text())


# ---------------------------------------------------------------- demo

DEMO = ["demo", "--out", "d", "--seeds", "1", "--json", "--quiet"]


def demo_accuracies(done: subprocess.CompletedProcess) -> list:
    """Each configuration's runs and mean accuracy of a demo's --json result."""
    stats = json.loads(done.stdout.splitlines()[-1])["study"]["stats"]
    return [(s["config_id"], s["n"], s["accuracy_mean"]) for s in stats]


def test_demo_survives_a_sampled_fault_and_reruns_on_its_folder_to_the_same_results(
    tmp_path, tricklab_cache_dir, monkeypatch
):
    """The demo's plan shrunk to seconds (tests/tiny_demo.py), its decode cache shared outside
    the faulted folder. A demo stopped anywhere resumes on the same --out: each configuration
    trained once in all, the same accuracies, the report whole; a folder whose report was whole
    before the fault is refused by the rerun, as promised, and is left as it was."""
    monkeypatch.setenv("FAULTS_PRELUDE", str(Path(__file__).with_name("tiny_demo.py")))
    monkeypatch.setenv("TRICKLAB_CACHE", str(tricklab_cache_dir))
    clean_root = tmp_path / "clean"
    clean_root.mkdir()
    clean = faulted(clean_root, 0, "count", *DEMO)
    assert clean.returncode == 0, clean.stderr
    count = len(points(clean_root))
    for n, mode in sampled(count, picks=3):
        root = tmp_path / f"{n}-{mode}"
        root.mkdir()
        done = faulted(root, n, mode, *DEMO)
        context = f"demo: fault {mode} at point {n} ({points(root)[n - 1 : n]}): "
        assert_promised_outcome(done, context)
        folder = root / "d"
        assert_whole(folder) if folder.exists() else None
        if (folder / "report.md").exists():  # whole before the fault: the rerun refuses it
            again = faulted(root, 0, "count", *DEMO)
            assert again.returncode == 2 and "already holds a report" in again.stderr, context
            continue
        rerun = faulted(root, 0, "count", *DEMO)
        assert rerun.returncode == 0, context + rerun.stderr
        assert demo_accuracies(rerun) == demo_accuracies(clean), context
        assert (folder / "report.md").read_text().count("\n") > 5, context
