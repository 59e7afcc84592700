"""Progress of long commands in a log (stderr not a terminal), and a CPU run's stderr without
torch's notices about accelerators it does not use (issue 30 §2)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from tiny_recipe import TINY_SYNTHETIC

TINY = [*TINY_SYNTHETIC, "run.epochs=1"]
RUN_START = re.compile(r"^run (\d+)/(\d+): (.+) starts; \d+:\d\d:\d\d elapsed, eta (\S+)$")


def tricklab(*args: str, cwd) -> subprocess.CompletedProcess:
    """The command as a user runs it into a log: stdout and stderr to pipes, not a terminal."""
    return subprocess.run(
        [sys.executable, "-m", "tricklab", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def run_starts(stderr: str) -> list[tuple[str, str, str]]:
    """(k/N, the run, its ETA) of each `run k/N: ... starts` line, in order."""
    found = [RUN_START.match(line) for line in stderr.splitlines()]
    return [(f"{m[1]}/{m[2]}", m[3], m[4]) for m in found if m]


def test_ablate_in_a_log_says_run_k_of_n_with_an_eta_as_each_run_starts(tmp_path):
    done = tricklab(
        "ablate", "--baseline", *TINY, "--vary", "aug.flip=random", "--seeds", "2",
        "--budget-epochs", "1", "--out", str(tmp_path / "study"), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    starts = run_starts(done.stderr)
    assert [k for k, _, _ in starts] == ["1/4", "2/4", "3/4", "4/4"]
    assert {run for _, run, _ in starts} == {
        f"{config} seed {seed}" for config in ("baseline", "aug.flip=random") for seed in (0, 1)
    }
    assert starts[0][2] == "-:--:--"  # nothing to estimate from before the first run ends
    assert all(re.fullmatch(r"\d+:\d\d:\d\d", eta) for _, _, eta in starts[1:])
    assert "\r" not in done.stderr and "\x1b" not in done.stderr  # plain lines in a log


def test_sweep_in_a_log_says_run_k_of_n_with_an_eta_as_each_run_starts(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("optim.lr: [0.1, 0.3]\n")
    done = tricklab(
        "sweep", "--baseline", *TINY, "--space", str(space), "--sampler", "grid",
        "--out", str(tmp_path / "study"), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    starts = run_starts(done.stderr)
    assert [k for k, _, _ in starts] == ["1/2", "2/2"]
    assert {run for _, run, _ in starts} == {"optim.lr=0.1 seed 0", "optim.lr=0.3 seed 0"}
    assert re.fullmatch(r"\d+:\d\d:\d\d", starts[1][2])


def test_quiet_ablate_prints_no_progress(tmp_path):
    done = tricklab(
        "ablate", "--baseline", *TINY, "--vary", "aug.flip=random", "--seeds", "1",
        "--budget-epochs", "1", "--out", str(tmp_path / "study"), "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert run_starts(done.stderr) == [] and "epoch 1/1" not in done.stderr


def test_a_cpu_run_with_pin_memory_leaves_no_accelerator_notice(tmp_path):
    done = tricklab(
        "train", *TINY, "loader.kind=torch", "loader.pin_memory=true",
        "--out", str(tmp_path / "run"), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "'pin_memory' argument" not in done.stderr  # "... is set as true but no accelerator"


def test_more_loader_workers_than_cores_leave_no_torch_warning(tmp_path):
    """Eleventh hostile round: loader.num_workers above the cores printed torch's 4-line
    "This DataLoader will create N worker processes" warning at each loader and epoch."""
    workers = (os.cpu_count() or 1) + 1
    done = tricklab(
        "train", *TINY, "loader.kind=torch", f"loader.num_workers={workers}", "-q",
        "--out", str(tmp_path / "run"), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "This DataLoader will create" not in done.stderr and "Warning" not in done.stderr


COMPILE_ON_CPU = """
import torch
from tricklab.training.backend import compiled
step = compiled(lambda x: (x * 2).sum(), "default", torch.device("cpu"))
print(float(step(torch.ones(3))))
"""


def test_torch_compile_on_a_cpu_leaves_no_cuda_toolkit_notice():
    """Inductor looks for a CUDA toolkit when it first compiles; where one is installed (nvcc)
    and no GPU is, torch logs "No CUDA runtime is found". Every compile goes through
    backend.compiled, which looks first with the notice quiet (the next test checks the door)."""
    done = subprocess.run(
        [sys.executable, "-c", COMPILE_ON_CPU], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip() == "6.0", done.stderr
    assert "No CUDA runtime" not in done.stderr, done.stderr


def test_every_torch_compile_goes_through_the_one_door():
    package = Path(__file__).resolve().parents[1] / "tricklab"
    calls = [
        f"{path.relative_to(package)}:{node.func.value.id}.compile"
        for path in sorted(package.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "compile"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "torch"
    ]
    assert calls == ["training/backend.py:torch.compile"], calls
