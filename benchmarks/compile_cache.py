"""Compile once across processes: the compile seconds of a process whose compile cache is warm,
against one whose cache is cold (issue 31, goal <= 0.2x).

Each pair: a fresh, empty TRICKLAB_CACHE folder; `tricklab train` with tricks.compile=default in a
new process (cold: compiles everything), then the same command in another new process on the
same folder (warm: Inductor's FX graph cache and AOTAutograd's cache hold the graphs; Dynamo still
traces). The compile seconds are each run's `compile_seconds` (its warm-up, timed apart from
training). Pairs repeat; the ratio is taken within each pair, and the median reported.

    python benchmarks/compile_cache.py [--pairs 2] [--out benchmarks/results/<date>-cpu/compile-cache.json]

The recipe is speedrun94 at quarter width on synthetic data (512 train images, batch 256, one
epoch), on the CPU. Needs nothing beyond tricklab.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OVERRIDES = [
    "data.name=synthetic",
    "data.train_size=512",
    "data.test_size=256",
    "model.widths=[16, 64, 64]",
    "loader.batch_size=256",
    "loader.eval_batch_size=256",
    "tricks.compile=default",
    "tricks.tta=none",
    "run.epochs=1",
    "run.device=cpu",
]


def one_process(cache: Path, out: Path) -> dict:
    env = {**os.environ, "TRICKLAB_CACHE": str(cache)}
    command = [sys.executable, "-m", "tricklab", "train", "speedrun94", *OVERRIDES]
    start = time.perf_counter()
    done = subprocess.run(
        [*command, "--out", str(out), "--json", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"error: {' '.join(command)} exited {done.returncode}: {done.stderr[-500:]}"
        )
    result = json.loads((out / "result.json").read_text())
    return {
        "compile_seconds": result["compile_seconds"],
        "train_seconds": result["train_seconds"],
        "wall_seconds": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--out", help="write the JSON here too")
    args = parser.parse_args()
    pairs = []
    load_before = os.getloadavg()[0]
    for k in range(args.pairs):
        with tempfile.TemporaryDirectory(prefix="tricklab-compile-cache-") as tmp:
            cache, runs = Path(tmp) / "cache", Path(tmp) / "runs"
            cold = one_process(cache, runs / "cold")
            warm = one_process(cache, runs / "warm")
        pair = {
            "cold": cold,
            "warm": warm,
            "ratio": warm["compile_seconds"] / cold["compile_seconds"],
        }
        pairs.append(pair)
        print(
            f"pair {k}: cold {cold['compile_seconds']:.1f} s, warm {warm['compile_seconds']:.1f} s "
            f"compile: {pair['ratio']:.3f}x",
            flush=True,
        )
    import platform

    import torch

    summary = {
        "benchmark": "compile_cache",
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "load_average_before_after": [load_before, os.getloadavg()[0]],
        "overrides": OVERRIDES,
        "pairs": pairs,
        "median_ratio": statistics.median(p["ratio"] for p in pairs),
        "goal": "<= 0.2x",
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
