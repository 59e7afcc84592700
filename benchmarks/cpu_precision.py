"""Which precision a CPU should train in: fp32 against bf16 autocast, speed and accuracy.

    python benchmarks/cpu_precision.py [--seeds 3] [--epochs 3] [--out FILE.json]

Trains the demo's baseline (`speedrun94` at quarter width on the 10,000 CIFAR-10 sample images,
JPEG q75; batch 256, a fixed budget of `--epochs`) with `tricks.precision=32-true` and
`bf16-mixed`, interleaved seed by seed in one process (each precision's first run is warmed
apart, as every eager run is), with the machine's threads. It prints, per precision, the
accuracy mean ± std over the seeds and the median train seconds, and the ratio of the medians;
with `--out`, writes them with the machine, its bf16 instructions and the load as JSON. This is
what `tricks.precision: auto` on a CPU rests on (docs/precision.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PRECISIONS = ("32-true", "bf16-mixed")


def measure(seeds: int, epochs: float, train_size: int | None) -> dict:
    import torch

    import tricklab
    from tricklab.demo import DemoPlan

    plan = DemoPlan(epochs=epochs, train_size=train_size)
    base = [o for o in plan.baseline_overrides("cpu") if not o.startswith("tricks.precision=")]
    runs: dict[str, list[dict]] = {p: [] for p in PRECISIONS}
    for seed in range(seeds):
        for precision in PRECISIONS if seed % 2 == 0 else reversed(PRECISIONS):
            overrides = [*base, f"tricks.precision={precision}", f"run.seed={seed}"]
            result = tricklab.train(tricklab.load_recipe("speedrun94", overrides))
            accuracy = result.val_acc_tta if result.val_acc_tta is not None else result.val_acc
            runs[precision].append(
                {"seed": seed, "accuracy": accuracy, "train_seconds": result.train_seconds}
            )
            print(f"{precision:>10} seed {seed}: {accuracy:.4f} in {result.train_seconds:.2f} s",
                  flush=True)  # fmt: skip
    rows = {}
    for precision, done in runs.items():
        accuracies = [r["accuracy"] for r in done]
        rows[precision] = {
            "runs": done,
            "accuracy_mean": statistics.mean(accuracies),
            "accuracy_std": statistics.stdev(accuracies) if len(accuracies) > 1 else None,
            "train_seconds_median": statistics.median(r["train_seconds"] for r in done),
        }
    ratio = rows["bf16-mixed"]["train_seconds_median"] / rows["32-true"]["train_seconds_median"]
    return {"rows": rows, "bf16_over_fp32_seconds": ratio, "threads": torch.get_num_threads()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--train-size", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from demo_record import cpu_model

    load_start = os.getloadavg()[0]
    measured = measure(args.seeds, args.epochs, args.train_size)
    name, bf16 = cpu_model()
    record = {
        "benchmark": "cpu-precision",
        "date": datetime.date.today().isoformat(),
        "cpu": name,
        "bf16": bf16,
        "cores": os.cpu_count(),
        "load_average_start": load_start,
        "load_average_end": os.getloadavg()[0],
        "seeds": args.seeds,
        "epochs": args.epochs,
        **measured,
    }
    for precision, row in measured["rows"].items():
        std = row["accuracy_std"]
        print(f"{precision:>10}: accuracy {row['accuracy_mean']:.2%} ± {std or 0:.2%}, "
              f"median train {row['train_seconds_median']:.2f} s")  # fmt: skip
    print(f"bf16-mixed / 32-true train seconds (medians): {measured['bf16_over_fp32_seconds']:.2f}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
