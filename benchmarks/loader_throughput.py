"""Loader throughput on real CIFAR-10: DeviceLoader vs the classic DataLoader + torchvision baseline.

Both loaders apply the same training augmentations (random flip, translate 2 with reflect
padding, cutout 8) and normalization, batch 512, in this one process on the CPU (TorchLoader's
workers are extra processes). Each measurement times one full epoch after a warm-up batch; the
loaders take turns, round after round (DeviceLoader --repeats epochs, each TorchLoader
--torch-repeats), so a change in the machine's load reaches all of them; the table gives medians.
TorchLoader uses persistent workers so worker start-up is not counted against it.

    python benchmarks/loader_throughput.py [--data-dir DIR] [--cache-dir DIR] [--workers 0 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from tricklab.data.augment import channel_stats
from tricklab.data.loaders import AugmentSpec, DeviceLoader, TorchLoader
from tricklab.data.sources import load_dataset

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data" / "cifar10-jpeg"


def epoch_images_per_second(loader) -> float:
    """Images per second over one full epoch, after one warm-up batch of the previous epoch."""
    next(iter(loader))
    loader.set_epoch(loader.epoch + 1)
    count = 0
    start = time.perf_counter()
    for images, _ in loader:
        count += images.shape[0]
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="decode cache (default: tricklab's)"
    )
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3, help="DeviceLoader epochs (median)")
    parser.add_argument("--torch-repeats", type=int, default=1, help="TorchLoader epochs (median)")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[0, 2], help="TorchLoader num_workers"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads in this process")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    start = time.perf_counter()
    train = load_dataset("imagefolder", args.data_dir, cache_dir=args.cache_dir).train
    load_seconds = time.perf_counter() - start
    mean, std = channel_stats(train.images)
    spec = AugmentSpec(flip="random", translate=2, pad_mode="reflect", cutout=8)
    common = dict(batch_size=args.batch_size, augment=spec, mean=mean, std=std, seed=0)

    # (name, workers, loader, setup seconds, repeats, rates), all built first so turns interleave
    contenders = []
    start = time.perf_counter()
    device_loader = DeviceLoader(train.images, train.labels, **common)
    setup = time.perf_counter() - start
    contenders.append(("DeviceLoader", "-", device_loader, setup, args.repeats, []))
    for workers in args.workers:
        extra = dict(num_workers=workers, persistent_workers=workers > 0)
        start = time.perf_counter()
        torch_loader = TorchLoader(train.images, train.labels, **common, **extra)
        setup = time.perf_counter() - start
        contenders.append(
            ("TorchLoader", str(workers), torch_loader, setup, args.torch_repeats, [])
        )
    for round_number in range(max(c[4] for c in contenders)):
        for _, _, loader, _, repeats, rates in contenders:
            if round_number < repeats:
                rates.append(epoch_images_per_second(loader))
    rows = [  # (loader, workers, images/s, setup seconds)
        (name, workers, statistics.median(rates), setup)
        for name, workers, _, setup, _, rates in contenders
    ]
    del contenders, torch_loader

    baseline = next((rate for name, w, rate, _ in rows if name == "TorchLoader" and w == "2"), None)
    print(
        f"CIFAR-10 train from {args.data_dir}: {len(train)} images {tuple(train.images.shape[1:])}, "
        f"loaded in {load_seconds:.1f} s; torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"batch {args.batch_size}; flip random, translate 2 (reflect), cutout 8"
    )
    print()
    print("| loader | workers | images/s | vs TorchLoader(num_workers=2) | setup s |")
    print("|---|---|---:|---:|---:|")
    for name, workers, rate, setup in rows:
        ratio = f"{rate / baseline:.1f}×" if baseline else "n/a"
        print(f"| {name} | {workers} | {rate:,.0f} | {ratio} | {setup:.2f} |")


if __name__ == "__main__":
    main()
