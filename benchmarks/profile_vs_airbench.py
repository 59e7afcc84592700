"""Where tricklab's speedrun94 epoch differs from airbench94's: torch.profiler over one epoch of each.

Both train 3 epochs; the profiler records epoch 2 (its training steps and the per-epoch evaluation
both scripts run after it), started and stopped at the same points of each script's own loop:
tricklab's per-epoch callback, airbench's per-epoch print. Prints, for each, the window's wall
time, the number of CUDA kernels and their summed time, and the top kernels and CPU operators;
writes a Chrome/Perfetto trace of each window (open it in https://ui.perfetto.dev).

    PYTHONPATH=.:.carry/airbench-0.1.8 python3 benchmarks/profile_vs_airbench.py --out runs/prof \\
        data.name=imagefolder data.dir=.carry

airbench reads ./cifar10/train.pt and test.pt (see benchmarks/airbench_side_by_side.py). Needs CUDA.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from tricklab.recipe.schema import load_recipe
from tricklab.training.api import train

EPOCHS = 3
WINDOW = (1, 2)  # start after epoch 1's end, stop after epoch 2's end (1-based epochs)


class Window:
    """A profiler started and stopped by epoch numbers, timing the window on the host clock."""

    def __init__(self) -> None:
        self.prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        self.seconds = None

    def at_epoch_end(self, epoch: int) -> None:
        if epoch == WINDOW[0]:
            torch.cuda.synchronize()
            self.prof.start()
            self.start = time.perf_counter()
        elif epoch == WINDOW[1]:
            torch.cuda.synchronize()
            self.seconds = time.perf_counter() - self.start
            self.prof.stop()


def profile_tricklab(recipe_name: str, overrides: list[str]) -> Window:
    recipe = load_recipe(recipe_name, [*overrides, f"run.epochs={EPOCHS}", "run.eval_every=1"])
    train(recipe.override(["run.epochs=1"]))  # warm-up: cuDNN autotuning, the data cache
    window = Window()
    train(recipe, on_epoch=lambda row: window.at_epoch_end(row["epoch"]))
    return window


def profile_airbench() -> Window:
    import airbench
    from airbench import utils

    window = Window()
    original = utils.print_training_details

    def hook(variables, is_final_entry):
        epoch = variables.get("epoch")
        if isinstance(epoch, int):
            window.at_epoch_end(epoch + 1)  # airbench counts epochs from 0
        return original(variables, is_final_entry)

    airbench.warmup94()
    utils.print_training_details = hook
    try:
        airbench.train94(epochs=EPOCHS, run=0, verbose=True)
    finally:
        utils.print_training_details = original
    return window


def report(name: str, window: Window, out: Path) -> str:
    events = window.prof.key_averages()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    kernel_us = sum(e.self_device_time_total for e in kernels)
    launches = sum(e.count for e in kernels)
    trace = out / f"trace_{name}.json"
    window.prof.export_chrome_trace(str(trace))
    with open(trace, "rb") as src, gzip.open(f"{trace}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    trace.unlink()
    lines = [
        f"## {name}: epoch 2 + its evaluation",
        f"window wall {window.seconds:.4f} s; {launches} CUDA kernels, summed {kernel_us / 1e6:.4f} s "
        f"(GPU busy {kernel_us / 1e6 / window.seconds:.0%} of the window)",
        "",
        events.table(sort_by="self_device_time_total", row_limit=25, max_name_column_width=60),
        events.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=60),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="speedrun94")
    parser.add_argument("--out", required=True)
    parser.add_argument("overrides", nargs="*", help="tricklab recipe key=value overrides")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = "\n\n".join(
        [
            f"{torch.cuda.get_device_name()}, torch {torch.__version__}; "
            f"overrides: {' '.join(args.overrides) or 'none'}",
            report("tricklab", profile_tricklab(args.recipe, args.overrides), out),
            report("airbench", profile_airbench(), out),
        ]
    )
    print(text)
    (out / "profile_vs_airbench.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
