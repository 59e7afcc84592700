"""benchmarks/loop_overhead.py --blocks at a tiny size: both contenders train the same parts, in
pairs of blocks, and the table names each; the bare loop's steps really change the weights."""

import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import loop_overhead  # noqa: E402


def test_blocks_time_each_contender_once_per_pair_per_step():
    times = loop_overhead.time_blocks(blocks=3, block_steps=2, batch=8)
    assert set(times) == {"bare PyTorch loop", "tricklab"}
    assert all(len(v) == 3 and all(0 < s < 60 for s in v) for v in times.values())


def test_blocks_command_prints_the_paired_ratio_table():
    out = subprocess.run(
        [sys.executable, "benchmarks/loop_overhead.py", "--blocks", "2", "--block-steps", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "2 pairs of 2-step blocks" in out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("| tricklab"))
    ratio = float(row.split("|")[3].strip().rstrip("x"))
    assert 0.2 < ratio < 5  # a ratio of two real timings, not a constant


def test_the_bare_block_trains_the_model_tricklab_prepared(monkeypatch):
    seen = []
    real = torch.optim.SGD.step

    def step(self, *args, **kwargs):
        seen.append(id(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.SGD, "step", step)
    loop_overhead.time_blocks(blocks=2, block_steps=2, batch=8)
    # warm-up (2 + 2 steps) and two pairs (2 x (2 + 2) steps), all on one optimizer
    assert len(seen) == 12 and len(set(seen)) == 1
