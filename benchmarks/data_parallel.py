"""One process against the same training under DistributedDataParallel (`tricklab train --nproc N`).

On a CPU (`--device cpu`, the default): one process against 2 gloo processes, with and without
sync BatchNorm, on a small speedrun94 (`cifar10-sample`, widths 16/64/64, fp32, one epoch).
On a GPU (`--device cuda`): one process against `--nproc 1`, DDP over nccl with a world of one
(what DDP's wrapper, gradient bucketing and all-reduce cost on one GPU), and with
`tricks.sync_batchnorm=true`, on speedrun94 as it is; extra `key=value` arguments go to every run
(e.g. `data.name=imagefolder data.dir=DIR`).

The configurations run interleaved, REPEATS times each after one untimed warm-up run (it fills
the decoded-dataset cache); it prints the median train seconds (the epochs, synced; the slowest
rank's under DDP), record seconds and wall seconds of the whole command (process start, data,
model, torchrun's rendezvous included), with the load before each.

    python benchmarks/data_parallel.py [--device cpu|cuda] [--repeats 3] [key=value ...]
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

SETUPS = {
    "cpu": (
        [
            "speedrun94", "data.name=cifar10-sample", "model.widths=[16,64,64]",
            "tricks.precision=32-true", "tricks.tta=none", "run.epochs=1", "run.device=cpu",
        ],
        {
            "1 process": [],
            "2 gloo processes": ["--nproc", "2"],
            "2 gloo processes, sync BatchNorm": ["--nproc", "2", "tricks.sync_batchnorm=true"],
        },
    ),
    "cuda": (
        ["speedrun94", "run.device=cuda"],
        {
            "1 process": [],
            "DDP, 1 nccl process": ["--nproc", "1"],
            "DDP, 1 nccl process, sync BatchNorm": ["--nproc", "1", "tricks.sync_batchnorm=true"],
        },
    ),
}  # fmt: skip


def train(args: list[str], out: Path) -> tuple[dict, float]:
    """`tricklab train ARGS --out OUT` in a fresh process: its result.json and wall seconds."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tricklab", "train", *args, "--quiet", "--out", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return json.loads((out / "result.json").read_text()), time.perf_counter() - start


def main(device: str, repeats: int, overrides: list[str]) -> None:
    recipe, configs = SETUPS[device]
    recipe = recipe + overrides
    rows: dict[str, list[tuple[float, float, float]]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as tmp:
        result, wall = train(recipe, Path(tmp) / "warm-up")
        print(f"warm-up: {wall:.1f} s, val acc {result['val_acc']:.4f}", flush=True)
        for repeat in range(repeats):
            for name, extra in configs.items():
                out = Path(tmp) / f"{repeat}-{name.replace(' ', '_').replace(',', '')}"
                load = os.getloadavg()[0]
                result, wall = train(recipe + extra, out)
                rows[name].append((result["train_seconds"], result["record_seconds"], wall))
                print(
                    f"{repeat} {name}: load {load:.2f}, train {result['train_seconds']:.3f} s, "
                    f"record {result['record_seconds']:.3f} s, wall {wall:.1f} s, "
                    f"val acc {result['val_acc']:.4f}, world {result['world_size']} "
                    f"{result.get('dist_backend')}",
                    flush=True,
                )
    base = statistics.median(r[0] for r in next(iter(rows.values())))
    for name, runs in rows.items():
        train_s, record, wall = (statistics.median(r[i] for r in runs) for i in range(3))
        print(
            f"{name}: median train {train_s:.3f} s ({train_s / base:.3f}x one process's), "
            f"record {record:.3f} s, wall {wall:.1f} s over {len(runs)} runs"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=sorted(SETUPS), default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="key=value for every run")
    args = parser.parse_args()
    main(args.device, args.repeats, args.overrides)
