"""Render `tricklab speedrun` summaries as one markdown table (what gpu_acceptance.md holds).

Usage: python benchmarks/speedrun_table.py OUT/speedrun94/summary.json [OUT/speedrun96 ...]

Each argument is a summary.json written by `tricklab speedrun --out DIR` (or the DIR holding it).
One row per summary: recipe, data, device, torch, date, runs, accuracy mean ± std (the counted
accuracy: with TTA when the recipe has it), the fraction of runs at or above the target, record
seconds mean / median (min–max) (airbench's definition: whitening fit + epochs + final TTA
evaluation) next to airbench's own figure for the recipe, train seconds (the epochs alone) mean /
median (min–max), compile seconds, MFU and peak memory. Needs only the standard library, so it runs
anywhere the JSON files are, with or without tricklab installed; a summary written before record
seconds existed shows "-" for them.

Accuracy measured on the JPEG q75 copy of CIFAR-10 (data.name=imagefolder) is labelled
"CIFAR-10 (JPEG q75 copy)": it runs lower than on the official files and is never a CIFAR-10 record.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

JPEG_LABEL = "CIFAR-10 (JPEG q75 copy)"
COLUMNS = (
    "recipe",
    "data",
    "device",
    "torch",
    "date",
    "n",
    "accuracy mean ± std",
    "runs ≥ target",
    "record s mean / median (min–max)",
    "airbench record s",
    "train s mean / median (min–max)",
    "compile s (warm-up / runs)",
    "MFU",
    "peak memory GiB",
)


def _pct(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def spread(summary: dict[str, Any], time: str) -> str:
    """`mean / median (min–max)` of summary's `<time>_...` keys, as many as it has."""
    mean, median, low, high = (summary.get(f"{time}_{s}") for s in ("mean", "median", "min", "max"))
    if mean is None and median is None:
        return "-"
    text = f"{_num(mean, 2)} / {_num(median, 2)}"
    return text if low is None or high is None else f"{text} ({low:.2f}–{high:.2f})"


def airbench_cell(summary: dict[str, Any]) -> str:
    """airbench's own figure for the recipe (same definition as record seconds) and ours against it."""
    record = summary.get("airbench")
    if not record:
        return "-"
    text = f"{record['seconds']:g} on {record['device']} ({record['file']})"
    if not summary.get("airbench_comparable"):
        return f"{text}; not comparable: recipe or data changed"
    median = summary.get("record_seconds_median")
    return text if median is None else f"{text}; median here {median / record['seconds']:.2f}×"


def data_label(dataset: dict[str, Any]) -> str:
    """Which data the accuracy was measured on, with the subset sizes when not the full splits."""
    name = dataset.get("name")
    label = {"imagefolder": JPEG_LABEL, "cifar10": "CIFAR-10"}.get(name, str(name))
    sizes = [dataset.get("train_size"), dataset.get("test_size")]
    if any(size is not None for size in sizes):
        train, test = (str(s) if s is not None else "all" for s in sizes)
        label += f", subset {train} train / {test} test"
    return label


def load_summary(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        path = path / "summary.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"error: cannot read a speedrun summary from {path}: {exc}") from None


def row(summary: dict[str, Any]) -> list[str]:
    hardware = summary.get("hardware") or {}
    torch_version = hardware.get("torch") or "-"
    if hardware.get("cuda"):
        torch_version += f" (CUDA {hardware['cuda']})"
    n, failed = summary.get("n", len(summary.get("runs", []))), summary.get("failed", 0)
    target = summary.get("target_accuracy")
    at_target = _pct(summary.get("fraction_at_target"), 0)
    if target is not None:
        at_target += f" (target {_pct(target, 1)})"
    mfu = _pct(summary.get("mfu_mean"), 1)
    if summary.get("mfu_mean") is not None:
        mfu += f" of {_num(summary.get('peak_tflops'), 1)} TFLOP/s ({summary.get('peak_tflops_source')})"
    memory = summary.get("peak_memory_bytes")
    return [
        str(summary.get("recipe_name", "-")),
        data_label(summary.get("dataset") or {}),
        str(summary.get("device_name") or "-"),
        torch_version,
        str(summary.get("date") or "-")[:10],
        f"{n}" + (f" ({failed} failed)" if failed else ""),
        f"{_pct(summary.get('accuracy_mean'))} ± {_pct(summary.get('accuracy_std'))}",
        at_target,
        spread(summary, "record_seconds"),
        airbench_cell(summary),
        spread(summary, "train_seconds"),
        f"{_num(summary.get('warmup_compile_seconds'), 2)} / {_num(summary.get('compile_seconds_mean'), 2)}",
        mfu,
        "-" if memory is None else f"{memory / 2**30:.2f}",
    ]


def render(summaries: list[dict[str, Any]]) -> str:
    """The markdown table, and a note on the JPEG copy when any row was measured on it."""
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    for summary in summaries:
        cells = [cell.replace("|", "\\|") for cell in row(summary)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "Accuracy: the counted one (with test-time augmentation where the recipe has it), over "
        "the runs with seeds 0..n-1; a warm-up run is not counted. Record seconds: the "
        "whitening layer's fit on 5,000 training images + the training epochs + the final "
        "evaluation with the recipe's TTA, each device-synchronised, as airbench's "
        "total_time_seconds (the figure its records quote, shown beside them: measured on its "
        "GPU, not this one); no dataset decoding, compilation or warm-up run. Train seconds: the "
        "training epochs alone, with each batch's loading and augmentation."
    )
    if any((s.get("dataset") or {}).get("name") == "imagefolder" for s in summaries):
        lines.append(
            f"Accuracies labelled {JPEG_LABEL} were measured on CIFAR-10 re-encoded as JPEG at "
            "quality 75; they run lower than on the official files and are not CIFAR-10 records."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("summaries", nargs="+", help="summary.json files (or their folders)")
    args = parser.parse_args(argv)
    sys.stdout.write(render([load_summary(path) for path in args.summaries]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
