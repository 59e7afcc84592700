"""One process against `tricklab train --nproc 2` (2 gloo processes) on the same recipe, on a CPU.

Runs the configurations interleaved, REPEATS times each, and prints the median train seconds
(the epochs, synced; the slowest rank's under DDP), record seconds and wall seconds of the whole
command (process start, data, model, torchrun's rendezvous included), with the load before each.

    python benchmarks/data_parallel_cpu.py [REPEATS]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECIPE = [
    "speedrun94", "data.name=cifar10-sample", "model.widths=[16,64,64]",
    "tricks.precision=32-true", "tricks.tta=none", "run.epochs=1", "run.device=cpu",
]  # fmt: skip
CONFIGS = {
    "1 process": [],
    "2 gloo processes": ["--nproc", "2"],
    "2 gloo processes, sync BatchNorm": ["--nproc", "2", "tricks.sync_batchnorm=true"],
}


def main(repeats: int) -> None:
    rows: dict[str, list[tuple[float, float, float]]] = {name: [] for name in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(repeats):
            for name, extra in CONFIGS.items():
                out = Path(tmp) / f"{len(rows[name])}-{name.replace(' ', '_')}"
                load = os.getloadavg()[0]
                start = time.perf_counter()
                subprocess.run(
                    ["tricklab", "train", *RECIPE, *extra, "--quiet", "--out", str(out)],
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                wall = time.perf_counter() - start
                result = json.loads((out / "result.json").read_text())
                rows[name].append((result["train_seconds"], result["record_seconds"], wall))
                print(
                    f"{repeat} {name}: load {load:.2f}, train {result['train_seconds']:.2f} s, "
                    f"record {result['record_seconds']:.2f} s, wall {wall:.1f} s, "
                    f"val acc {result['val_acc']:.4f}, world {result['world_size']}",
                    flush=True,
                )
    base = statistics.median(r[0] for r in rows["1 process"])
    for name, runs in rows.items():
        train, record, wall = (statistics.median(r[i] for r in runs) for i in range(3))
        print(
            f"{name}: median train {train:.2f} s ({train / base:.2f}x one process's), "
            f"record {record:.2f} s, wall {wall:.1f} s over {len(runs)} runs"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
