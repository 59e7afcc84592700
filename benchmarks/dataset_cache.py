"""How much faster is a cached load than decoding the 60,000 CIFAR-10 JPEGs? (target: >= 10x)

Usage: python benchmarks/dataset_cache.py [--data-dir ../shared/data/cifar10-jpeg] [--repeats 3]

Uses a fresh temporary cache folder, so the first load always decodes (list the archives, decode,
write the cache). A cached load is then timed the way a user meets it, in a fresh process (the
next `tricklab` run), and again inside this process, where freshly freed memory makes it faster.
The speed-up is first decode / fresh-process cached load. Timings on a shared machine vary with
its load; the load average is printed alongside.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tricklab.data.sources import load_dataset

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cifar10-jpeg"

TIME_ONE_LOAD = """
import sys, time
from tricklab.data.sources import load_dataset
start = time.perf_counter()
load_dataset("imagefolder", sys.argv[1], cache_dir=sys.argv[2])
print(time.perf_counter() - start)
"""


def cached_load_in_fresh_process(data_dir: Path, cache_dir: str) -> float:
    """Seconds for one cached load in a new Python process (imports not counted)."""
    result = subprocess.run(
        [sys.executable, "-c", TIME_ONE_LOAD, str(data_dir), cache_dir],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="train/test archives"
    )
    parser.add_argument("--repeats", type=int, default=3, help="cached loads of each kind to time")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tricklab-cache-bench-") as cache_dir:
        start = time.perf_counter()
        decoded = load_dataset("imagefolder", args.data_dir, cache_dir=cache_dir)
        first_seconds = time.perf_counter() - start

        fresh = [
            cached_load_in_fresh_process(args.data_dir, cache_dir) for _ in range(args.repeats)
        ]
        in_process = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            cached = load_dataset("imagefolder", args.data_dir, cache_dir=cache_dir)
            in_process.append(time.perf_counter() - start)
            same = torch.equal(cached.train.images, decoded.train.images) and torch.equal(
                cached.test.images, decoded.test.images
            )
            if not same:
                raise SystemExit("cached load differs from the decoded one")
        cache_bytes = sum(p.stat().st_size for p in Path(cache_dir).rglob("*.npz"))

    def timings(seconds: list[float]) -> str:
        return f"{statistics.median(seconds):.3f} s (median of {', '.join(f'{s:.3f}' for s in seconds)})"

    n_train, n_test = len(decoded.train), len(decoded.test)
    print(f"data: {args.data_dir} ({n_train} train + {n_test} test, {decoded.image_shape})")
    print(f"machine: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}")
    print(f"cache files: {cache_bytes / 1e6:.0f} MB")
    print(f"first decode:               {first_seconds:.2f} s")
    print(f"cached load, fresh process: {timings(fresh)}")
    print(f"cached load, same process:  {timings(in_process)}")
    print(f"speed-up (fresh process):   {first_seconds / statistics.median(fresh):.1f}x")


if __name__ == "__main__":
    main()
