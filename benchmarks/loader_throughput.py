"""Loader throughput on real CIFAR-10: DeviceLoader vs the classic DataLoader + torchvision baseline.

Both loaders apply the same training augmentations (random flip, translate 2 with reflect
padding, cutout 8) and normalization, batch 512, in this one process on the CPU (TorchLoader's
workers are extra processes). Each measurement times one full epoch after a warm-up batch; the
loaders take turns, round after round (DeviceLoader --repeats epochs, each TorchLoader
--torch-repeats), so a change in the machine's load reaches all of them; the table gives medians.
TorchLoader uses persistent workers so worker start-up is not counted against it.

    python benchmarks/loader_throughput.py [--data-dir DIR] [--cache-dir DIR] [--workers 0 2]

`--count-ops` instead counts, for the device loader that `train()` builds from each of
`--recipes` (on the CPU, the same ops a GPU would run), the aten ops of one batch (and the
cast autocast then applies to it) under a TorchDispatchMode: kernels (views and bare allocations
are not), and the bytes they write and read; and the same for the once-per-epoch preparation.
These counts do not depend on the machine's load.

The same measurement, for any recipe's augmentations, loader kinds, workers and pin_memory, is a
command: `tricklab profile loader imagefolder --data-dir DIR aug.flip=random aug.translate=2
aug.cutout=8 --batch-size 512 --num-workers 0,2` (every contender the same number of rounds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tricklab.data.augment import channel_stats
from tricklab.data.loaders import AugmentSpec, DeviceLoader, LoaderSpec, TorchLoader
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


# ---------------------------------------------------------------- ops and bytes per batch

# In-place ops that write only the elements an index selects, and gathers that read only those.
INDEXED_WRITES = {"index_fill_", "scatter_", "index_put_", "masked_fill_"}
GATHERS = {"index_select", "index", "gather"}


def _distinct_bytes(tensor: torch.Tensor) -> int:
    """Bytes of the elements a tensor spans, an expanded (stride 0) dimension counted once."""
    count = 1
    for size, stride in zip(tensor.shape, tensor.stride()):
        count *= size if stride else 1
    return count * tensor.element_size()


def op_cost(func, args, kwargs, out) -> tuple[str, bool, int, int]:
    """(name, is a kernel, bytes written, bytes read) of one dispatched aten op.

    Views and bare allocations (empty*) launch no kernel and move nothing. Out-of-place ops write
    their outputs; in-place ops their whole `self`, except indexed fills and scatters, which write
    the elements their index selects. Gathers read the elements they gather and their index;
    other ops read every tensor argument (an expanded dimension once)."""
    name = func._overloadpacket.__name__
    returns = func._schema.returns
    if name.startswith(("empty", "new_empty")) or any(
        r.alias_info is not None and not r.alias_info.is_write for r in returns
    ):
        return name, False, 0, 0
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    outputs = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if torch.is_tensor(o)]
    if name == "index_put_":  # self[indices] = values: the broadcast indices × unindexed dims
        self, indices = args[0], list(args[1])
        given = [i for i in indices if i is not None]
        count = torch.broadcast_shapes(*(i.shape for i in given)).numel()
        for dim, size in enumerate(self.shape):
            count *= size if dim >= len(indices) or indices[dim] is None else 1
        return name, True, count * self.element_size(), sum(map(_distinct_bytes, given))
    if name in INDEXED_WRITES:
        self, index = args[0], next(t for t in tensors[1:] if not t.is_floating_point())
        per_index = self.numel() // max(self.shape[args[1]], 1) if name == "index_fill_" else 1
        return name, True, index.numel() * per_index * self.element_size(), _distinct_bytes(index)
    written = sum(o.numel() * o.element_size() for o in outputs)
    if name in GATHERS:
        source = tensors[0]
        indices = sum(_distinct_bytes(t) for t in tensors[1:])
        return (
            name,
            True,
            written,
            sum(o.numel() for o in outputs) * source.element_size() + indices,
        )
    return name, True, written, sum(_distinct_bytes(t) for t in tensors)


class OpCounter(TorchDispatchMode):
    """Records (name, is a kernel, bytes written, bytes read) of every aten op run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, bool, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.ops.append(op_cost(func, args, kwargs, out))
        return out

    def totals(self) -> tuple[int, int, int, int]:
        """(ops, kernels, bytes written, bytes read)."""
        return (
            len(self.ops),
            sum(k for _, k, _, _ in self.ops),
            sum(w for _, _, w, _ in self.ops),
            sum(r for _, _, _, r in self.ops),
        )


def count_loader_ops(loader, model_dtype: torch.dtype, batches: int = 5) -> dict:
    """Per-batch and per-epoch-preparation costs of a loader, each batch followed by the cast
    to `model_dtype` that autocast (or the model) applies to it at the first convolution."""
    with OpCounter() as first:  # the epoch's preparation (at iter() or the first batch) + a batch
        iterator = iter(loader)
        images, _ = next(iterator)
        images.to(model_dtype)
    counters = []
    for _ in range(batches):
        with OpCounter() as counter:
            images, _ = next(iterator)
            images.to(model_dtype)
        counters.append(counter)
    per_batch = [c.totals() for c in counters]
    typical = tuple(statistics.median(column) for column in zip(*per_batch))
    return {
        "batch": typical,
        "epoch": tuple(f - b for f, b in zip(first.totals(), typical)),
        "kernels": [name for name, kernel, _, _ in counters[-1].ops if kernel],
        "batch_shape": tuple(images.shape),
        "batch_dtype": images.dtype,
    }


def count_ops(recipes: list[str], dataset, repeats: int) -> None:
    """Print the op and byte table for the train loader each recipe builds, on the CPU, with its
    images/s (median over `repeats` epochs, loaders taking turns)."""
    from tricklab.recipe.schema import load_recipe
    from tricklab.training.api import LoaderInputs, build_loaders

    mean, std = channel_stats(dataset.train.images)
    print(
        "| recipe | batch | kernels/batch | ops/batch (with views) | MB written/batch "
        "| MB read/batch | epoch preparation: kernels, MB written | stored split MB | images/s "
        "| kernels of one batch |"
    )
    print("|---|---|---:|---:|---:|---:|---|---:|---:|---|")
    loaders, inputs = {}, {}
    for name in recipes:
        inputs[name] = LoaderInputs.of(load_recipe(name), torch.device("cpu"))
        loaders[name] = build_loaders(inputs[name], dataset, mean, std)[0]
    rates = {name: [] for name in recipes}
    for _ in range(repeats):
        for name, loader in loaders.items():
            rates[name].append(epoch_images_per_second(loader))
    for name, loader in loaders.items():
        costs = count_loader_ops(loader, inputs[name].policy.compute_dtype)
        ops, kernels, written, read = costs["batch"]
        _, epoch_kernels, epoch_written, _ = costs["epoch"]
        shape = "×".join(map(str, costs["batch_shape"]))
        dtype = str(costs["batch_dtype"]).removeprefix("torch.")
        print(
            f"| {name} | {shape} {dtype} | {kernels:g} | {ops:g} | {written / 1e6:.2f} "
            f"| {read / 1e6:.2f} | {epoch_kernels:g}, {epoch_written / 1e6:.2f} "
            f"| {loader.storage_bytes / 1e6:.0f} | {statistics.median(rates[name]):,.0f} "
            f"| {', '.join(costs['kernels'])} |"
        )


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
    parser.add_argument(
        "--count-ops", action="store_true", help="count ops and bytes per batch instead of timing"
    )
    parser.add_argument(
        "--recipes", nargs="+", default=["speedrun94", "speedrun96"], help="for --count-ops"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    start = time.perf_counter()
    dataset = load_dataset("imagefolder", args.data_dir, cache_dir=args.cache_dir)
    train = dataset.train
    load_seconds = time.perf_counter() - start
    if args.count_ops:
        count_ops(args.recipes, dataset, args.repeats)
        return
    mean, std = channel_stats(train.images)
    spec = AugmentSpec(flip="random", translate=2, pad_mode="reflect", cutout=8)
    loader_spec = LoaderSpec(args.batch_size, augment=spec, mean=mean, std=std, seed=0)

    # (name, workers, loader, setup seconds, repeats, rates), all built first so turns interleave
    contenders = []
    start = time.perf_counter()
    device_loader = DeviceLoader(train.images, train.labels, loader_spec)
    setup = time.perf_counter() - start
    contenders.append(("DeviceLoader", "-", device_loader, setup, args.repeats, []))
    for workers in args.workers:
        extra = dict(num_workers=workers, persistent_workers=workers > 0)
        start = time.perf_counter()
        torch_loader = TorchLoader(train.images, train.labels, loader_spec, **extra)
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
