"""tricklab's speedrun94 and airbench's own airbench94, interleaved in one process on one GPU.

One warm-up of each (not counted), then N pairs: tricklab run k (`tricklab.experiments.speedrun`, seed k),
then airbench run k (`train94` of the PyPI package airbench 0.1.8, its `lib_airbench94`), so a
drift of the machine hits both alike. Both read the same images: tricklab the image folder's
train.tar.gz / test.tar.gz, airbench the train.pt / test.pt made from them by
../shared/gpu/jpeg-to-airbench.py (airbench reads them from ./cifar10, relative to the current
folder, as its code does).

The time compared is airbench's own `total_time_seconds` (whitening fit on 5,000 images + the
training epochs + the final TTA evaluation, each timed with CUDA events), read from the values its
code prints at the end of each run, against tricklab's record_seconds, the same three parts, each
device-synchronised. Peak memory is `torch.cuda.max_memory_allocated` over each run.

    PYTHONPATH=.:.carry/airbench-0.1.8 python3 benchmarks/airbench_side_by_side.py \\
        --runs 25 --out runs/side-by-side data.name=imagefolder data.dir=.carry

Writes OUT/tricklab/ (the speedrun's run folders and summary.json), OUT/side_by_side.json and
OUT/side_by_side.md (the table it prints). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import time
from pathlib import Path

import torch

from tricklab.experiments.speedrun import (
    SpeedrunInterrupted,
    SpeedrunPlan,
    accuracy_ci95,
    speedrun,
)
from tricklab.recipe.schema import load_recipe

TARGET = 0.94


def airbench_runner():
    """airbench's warm-up and one-run functions, each returning what its code measured."""
    import airbench
    from airbench import utils

    captured = {}
    original = utils.print_training_details

    def capture(variables, is_final_entry):
        if is_final_entry:
            captured["accuracy"] = float(variables["tta_val_acc"])
            captured["total_time_seconds"] = float(variables["total_time_seconds"])
        return original(variables, is_final_entry)

    utils.print_training_details = capture

    def one_run(run: int) -> dict:
        captured.clear()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        airbench.train94(run=run, verbose=True)
        torch.cuda.synchronize()
        return {
            "run": run,
            **captured,
            "wall_seconds": time.perf_counter() - start,
            "peak_memory_bytes": torch.cuda.max_memory_allocated(),
        }

    return airbench.warmup94, one_run


def stats(accuracies: list[float], seconds: list[float]) -> dict:
    ci = accuracy_ci95(accuracies)
    return {
        "n": len(accuracies),
        "accuracy_mean": statistics.fmean(accuracies),
        "accuracy_std": statistics.stdev(accuracies) if len(accuracies) > 1 else None,
        "accuracy_ci95": list(ci) if ci else None,
        "fraction_at_94": sum(a >= TARGET for a in accuracies) / len(accuracies),
        "seconds_mean": statistics.fmean(seconds),
        "seconds_median": statistics.median(seconds),
        "seconds_min": min(seconds),
        "seconds_max": max(seconds),
    }


def table(rows: dict[str, dict], ratio: dict) -> str:
    lines = [
        "| | runs | accuracy mean ± std | 95% CI | >= 94% | record s mean | median | min | max |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in rows.items():
        ci = s["accuracy_ci95"]
        lines.append(
            f"| {name} | {s['n']} | {100 * s['accuracy_mean']:.2f} ± {100 * (s['accuracy_std'] or 0):.2f} % "
            f"| {100 * ci[0]:.2f}-{100 * ci[1]:.2f} | {100 * s['fraction_at_94']:.0f}% "
            f"| {s['seconds_mean']:.3f} | {s['seconds_median']:.3f} | {s['seconds_min']:.3f} "
            f"| {s['seconds_max']:.3f} |"
        )
    lines.append("")
    lines.append(
        f"tricklab / airbench record seconds: ratio of means {ratio['of_means']:.3f}, "
        f"median of paired ratios {ratio['median_paired']:.3f}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--recipe", default="speedrun94")
    parser.add_argument("--warmup-epochs", type=float, default=1.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("overrides", nargs="*", help="tricklab recipe key=value overrides")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    warmup94, one_run = airbench_runner()
    recipe = load_recipe(args.recipe, args.overrides)
    airbench_runs: list[dict] = []

    def after_tricklab_run(record) -> None:
        if record.warmup:
            print(f"tricklab warm-up: {record.status}, record {record.record_seconds:.3f} s")
            warmup94()
            return
        print(
            f"tricklab seed {record.seed}: {record.status} acc {record.accuracy:.4f} "
            f"record {record.record_seconds:.3f} s train {record.train_seconds:.3f} s",
            flush=True,
        )
        airbench_runs.append(one_run(record.seed))
        a = airbench_runs[-1]
        print(
            f"airbench run {record.seed}: acc {a['accuracy']:.4f} "
            f"total_time_seconds {a['total_time_seconds']:.3f}",
            flush=True,
        )

    def stop(signum, frame):  # SIGTERM (e.g. `timeout`): keep the pairs finished so far
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        plan = SpeedrunPlan(
            recipe,
            args.runs,
            warmup_epochs=args.warmup_epochs,
            recipe_name=args.recipe,
            out_dir=out / "tricklab",
        )
        summary = speedrun(plan, on_run=after_tricklab_run)
    except SpeedrunInterrupted as exc:
        summary = exc.summary
        print(f"interrupted after {len(airbench_runs)} pairs")
    pairs = list(zip(summary.runs, airbench_runs))
    ours = [r for r, _ in pairs if r.record_seconds is not None and r.accuracy is not None]
    rows = {
        f"tricklab {args.recipe}": stats(
            [r.accuracy for r in ours], [r.record_seconds for r in ours]
        ),
        "airbench94 (airbench 0.1.8)": stats(
            [a["accuracy"] for a in airbench_runs], [a["total_time_seconds"] for a in airbench_runs]
        ),
    }
    paired = [
        r.record_seconds / a["total_time_seconds"] for r, a in pairs if r.record_seconds is not None
    ]
    ratio = {
        "of_means": rows[f"tricklab {args.recipe}"]["seconds_mean"]
        / rows["airbench94 (airbench 0.1.8)"]["seconds_mean"],
        "median_paired": statistics.median(paired),
    }
    text = (
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}; "
        f"{len(pairs)} interleaved pairs after one warm-up each; "
        f"overrides: {' '.join(args.overrides) or 'none'}\n\n" + table(rows, ratio)
    )
    print(text)
    (out / "side_by_side.md").write_text(text + "\n")
    (out / "side_by_side.json").write_text(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "recipe": args.recipe,
                "overrides": args.overrides,
                "stats": rows,
                "ratio": ratio,
                "airbench_runs": airbench_runs,
                "tricklab_peak_memory_bytes": summary.peak_memory_bytes,
                "airbench_peak_memory_bytes": max(a["peak_memory_bytes"] for a in airbench_runs),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
