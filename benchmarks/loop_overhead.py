"""Loop overhead: tricklab's training loop vs a bare hand-written PyTorch loop vs Lightning's Trainer.

Same model (a tiny airbench net), same data path (the same DeviceLoader batches of synthetic
images), same optimizer and number of steps, on the CPU. Each is timed over its training steps only
(no evaluation, no setup), repeated, interleaved in an order rotated each repeat, and the medians
compared. The model is tiny on purpose: the loop's own cost per step shows only when a step is
short (as on a GPU).

    python benchmarks/loop_overhead.py [--repeats 9] [--epochs 2] [--threads 1] [--batch-size 32]
                                       [--same-metrics] [--device cpu|cuda] [--progress]
    python benchmarks/loop_overhead.py --blocks 200 [--block-steps 40] [--threads 1]

On CUDA each contender's clock starts and stops after `torch.cuda.synchronize()`.

By default the bare loop and Lightning only step (no metric at all) while tricklab also keeps each
epoch's train loss and accuracy. --same-metrics gives all three that work, each in its own idiom:
the bare loop sums loss and correct predictions on the device and reads them once per epoch;
Lightning logs both with `self.log(..., on_epoch=True)`, as its users do.

Lightning sets torch's thread count when it starts a Trainer; the thread count is set again before
every timed run, so all three run with --threads.

--progress adds a fourth contender: tricklab with the CLI's progress bars drawn as on a terminal
(into a string), compared with tricklab without them.

--blocks N measures the loop alone, with the noise of a shared VM taken out: one model, optimizer
and loader as tricklab prepares them; N pairs of blocks of --block-steps steps each, tricklab's
epoch (`train_epoch`, then `epoch_totals`: its metrics and its one read of the device) against the
bare loop over the same batches, alternating which goes first; the median of the paired ratios.
Whole runs (the default) also time each contender's own setup and its first steps, and single runs
on a shared VM spread by +-15 %, wider than the 3 % goal.

Needs `pip install -e ".[bench]"` for Lightning (not for --blocks). Goal: tricklab <= 1.03x bare and <= 0.9x Lightning.
"""

from __future__ import annotations

import argparse
import io
import math
import statistics
import time

import torch
from rich.console import Console
from torch import nn

from tricklab.core.progress import ProgressDisplay
from tricklab.data.augment import channel_stats, normalize
from tricklab.data.loaders import DeviceLoader, LoaderSpec
from tricklab.data.sources import load_dataset
from tricklab.measure.intervals import mean_interval
from tricklab.models import build_model
from tricklab.recipe.schema import load_recipe
from tricklab.training.api import init_sample, train

WIDTHS = [4, 8, 8]
BATCH = 32
IMAGE_SIZE = 16  # with the widths and batch 32: about 3 ms per step on one idle CPU thread
TRAIN_SIZE = 5120
LR = 0.05


DEVICE = "cpu"  # --device


def sync() -> None:
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def recipe(epochs: int, batch: int):
    return load_recipe(
        None,
        [
            "data.name=synthetic",
            f"data.train_size={TRAIN_SIZE}",
            f"data.image_size={IMAGE_SIZE}",
            "data.test_size=256",
            "model.name=airbench",
            f"model.widths={WIDTHS}",
            "loader.kind=device",
            f"loader.batch_size={batch}",
            "loader.drop_last=true",
            f"optim.lr={LR}",
            "optim.momentum=0.9",
            f"run.epochs={epochs}",
            "run.eval_every=0",
            f"run.device={DEVICE}",
        ],
    )


def parts(batch: int):
    """Model, optimizer and loader exactly as tricklab builds them for `recipe(epochs, batch)`."""
    ds = load_dataset("synthetic", train_size=TRAIN_SIZE, test_size=256, image_size=IMAGE_SIZE)
    torch.manual_seed(0)
    model = build_model("airbench", num_classes=10, widths=WIDTHS, image_size=IMAGE_SIZE)
    mean, std = channel_stats(ds.train.images)
    model.init_from_data(normalize(init_sample(ds.train.images, seed=0), mean, std))
    model.to(DEVICE)
    loader = DeviceLoader(
        ds.train.images,
        ds.train.labels,
        LoaderSpec(batch, mean=mean, std=std, drop_last=True, device=DEVICE),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    return model, optimizer, loader


def time_tricklab(epochs: int, batch: int, metrics: bool) -> float:
    # The loop always keeps each epoch's train loss and accuracy (and checks each loss for NaN).
    return train(recipe(epochs, batch)).train_seconds


def time_tricklab_progress(epochs: int, batch: int, metrics: bool) -> float:
    # --progress: the CLI's display drawn as on a terminal (bars, redrawn by rich's thread), into
    # a string; the loop counts each batch for it on the host.
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    with ProgressDisplay(console, animate=True):
        return train(recipe(epochs, batch)).train_seconds


def time_bare(epochs: int, batch: int, metrics: bool) -> float:
    model, optimizer, loader = parts(batch)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    history = []  # (train loss, train accuracy) per epoch, with metrics
    sync()
    start = time.perf_counter()
    for _ in range(epochs):
        loss_sum = torch.zeros((), device=DEVICE)
        correct, seen = torch.zeros((), dtype=torch.long, device=DEVICE), 0
        for images, labels in loader:
            logits = model(images)
            loss = loss_fn(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if metrics:
                loss_sum += loss.detach() * len(labels)
                correct += (logits.detach().argmax(1) == labels).sum()
                seen += len(labels)
        if metrics:
            history.append((loss_sum.item() / seen, correct.item() / seen))
    sync()
    return time.perf_counter() - start


def time_lightning(epochs: int, batch: int, metrics: bool) -> float:
    import lightning as L

    model, optimizer, loader = parts(batch)

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model
            self.loss_fn = nn.CrossEntropyLoss()

        def training_step(self, batch, batch_idx):
            images, labels = batch
            logits = self.net(images)
            loss = self.loss_fn(logits, labels)
            if metrics:
                accuracy = (logits.argmax(1) == labels).float().mean()
                self.log("train_loss", loss, on_step=False, on_epoch=True)
                self.log("train_acc", accuracy, on_step=False, on_epoch=True)
            return loss

        def configure_optimizers(self):
            return optimizer

    class EpochTimer(L.Callback):
        seconds = 0.0

        def on_train_epoch_start(self, trainer, pl_module):
            sync()
            self.start = time.perf_counter()

        def on_train_epoch_end(self, trainer, pl_module):
            sync()
            EpochTimer.seconds += time.perf_counter() - self.start

    class Batches:  # the same DeviceLoader batches, re-iterable per epoch
        def __iter__(self):
            return iter(loader)

        def __len__(self):
            return len(loader)

    EpochTimer.seconds = 0.0
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="gpu" if DEVICE.startswith("cuda") else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        callbacks=[EpochTimer()],
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(Module(), train_dataloaders=Batches())
    return EpochTimer.seconds


def time_blocks(blocks: int, block_steps: int, batch: int) -> dict[str, list[float]]:
    """Seconds per step of tricklab's epoch and of the bare loop over the same parts, in pairs."""
    from tricklab.training.loop import epoch_totals, train_epoch
    from tricklab.training.setup import load_data, prepare, resolve_device

    parts, _ = prepare(recipe(1, batch), load_data(recipe(1, batch)), resolve_device(DEVICE))
    parts.total_steps = 10**9  # blocks, not the recipe's epochs, decide the length
    batches = list(parts.train_loader)[:block_steps]
    model, optimizer, loss_fn = parts.model, parts.optimizer, nn.CrossEntropyLoss()
    model.train()

    def bare() -> None:
        for images, labels in batches:
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    def tricklab() -> None:
        epoch_totals(parts, train_epoch(parts, iter(batches), 0))

    times: dict[str, list[float]] = {"bare PyTorch loop": [], "tricklab": []}
    contenders = [("bare PyTorch loop", bare), ("tricklab", tricklab)]
    bare(), tricklab()  # warm-up: first-call costs in neither block
    for block in range(blocks):
        for name, step in contenders[block % 2 :] + contenders[: block % 2]:
            sync()
            start = time.perf_counter()
            step()
            sync()
            times[name].append((time.perf_counter() - start) / len(batches))
    return times


def print_blocks(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    times = time_blocks(args.blocks, args.block_steps, args.batch_size)
    bare, trick = times["bare PyTorch loop"], times["tricklab"]
    ratios = [t / b for t, b in zip(trick, bare)]
    print(
        f"{device_name()}, {torch.get_num_threads()} thread(s), torch {torch.__version__}; widths "
        f"{WIDTHS}, batch {args.batch_size}; {args.blocks} pairs of {args.block_steps}-step blocks "
        "on one model, optimizer and loader, alternating which goes first"
    )
    print()
    print("| loop | median ms/step | vs bare (median of paired ratios) | 95% CI |")
    print("|---|---:|---:|---:|")
    print(f"| bare PyTorch loop | {1000 * statistics.median(bare):.3f} | 1.000x | - |")
    print(
        f"| tricklab (train_epoch + epoch_totals) | {1000 * statistics.median(trick):.3f} | "
        f"{statistics.median(ratios):.4f}x | {ratio_interval(ratios)} |"
    )


def device_name() -> str:
    if DEVICE.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(DEVICE))
    return "CPU"


def ratio_interval(ratios: list[float]) -> str:
    """95% Student-t interval of the geometric mean of paired ratios: how precise this run is."""
    _, _, low, high = mean_interval([math.log(r) for r in ratios])
    return "-" if low is None else f"{math.exp(low):.3f}-{math.exp(high):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--batch-size", type=int, default=BATCH, help="smaller: shorter steps")
    parser.add_argument(
        "--same-metrics",
        action="store_true",
        help="bare and Lightning also keep each epoch's train loss and accuracy, as tricklab does",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument(
        "--progress",
        action="store_true",
        help="also time tricklab with the CLI's progress bars drawn (tricklab.core.progress)",
    )
    parser.add_argument(
        "--blocks",
        type=int,
        default=0,
        help="instead of whole runs: this many pairs of blocks of the loop alone, on shared parts",
    )
    parser.add_argument("--block-steps", type=int, default=40, help="steps per block (--blocks)")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if args.blocks:
        print_blocks(args)
        return
    runners = {
        "bare PyTorch loop": time_bare,
        "tricklab": time_tricklab,
        "Lightning Trainer": time_lightning,
    }
    if args.progress:
        runners["tricklab + progress bars"] = time_tricklab_progress
    times = {name: [] for name in runners}
    names = list(runners)
    for repeat in range(args.repeats):
        # Interleaved, so drifts in machine load hit all three alike, and in an order rotated each
        # repeat, so no contender always runs first or right after the same other one.
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            torch.set_num_threads(args.threads)
            times[name].append(runners[name](args.epochs, args.batch_size, args.same_metrics))
    # Ratios are taken within each repeat (paired), then their median: a slow spell of a shared
    # machine then slows both sides of a ratio instead of one contender's median.
    bare, lightning = times["bare PyTorch loop"], times["Lightning Trainer"]
    steps = args.epochs * (TRAIN_SIZE // args.batch_size)
    print(
        f"{device_name()}, {torch.get_num_threads()} thread(s), torch {torch.__version__}; widths {WIDTHS}, "
        f"{TRAIN_SIZE} synthetic 3x{IMAGE_SIZE}x{IMAGE_SIZE} images, batch {args.batch_size}, {steps} steps, "
        f"SGD momentum 0.9; {args.repeats} interleaved repeats; "
        + (
            "all keep train loss/acc per epoch"
            if args.same_metrics
            else "only tricklab keeps metrics"
        )
    )
    print()
    print(
        "| loop | median s | ms/step | vs bare (median of paired ratios) | 95% CI | vs Lightning | 95% CI |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, values in times.items():
        med = statistics.median(values)
        cells = []
        for reference in (bare, lightning):
            ratios = [v / r for v, r in zip(values, reference)]
            cells += [f"{statistics.median(ratios):.3f}x", ratio_interval(ratios)]
        print(f"| {name} | {med:.3f} | {1000 * med / steps:.2f} | " + " | ".join(cells) + " |")
    if args.progress:
        ratios = [p / t for p, t in zip(times["tricklab + progress bars"], times["tricklab"])]
        print()
        print(
            f"tricklab + progress bars vs tricklab: {statistics.median(ratios):.3f}x "
            f"(median of paired ratios; 95% CI {ratio_interval(ratios)})"
        )
    print()
    for name, values in times.items():
        print(f"{name}: " + ", ".join(f"{v:.2f}" for v in values) + " s")


if __name__ == "__main__":
    main()
