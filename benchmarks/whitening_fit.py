"""The whitening fit's patch reading: F.unfold (before 2026-11-26) against the four shifted views
`PatchWhitening.init_from_data` reads now, interleaved, median of --repeats, on random images.

    python benchmarks/whitening_fit.py --sizes 600 5000 --repeats 7

Both give the same second moment bit for bit (tests/test_models.py checks it); this times the
reading alone, on the CPU, in float64 as the fit computes it.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from tricklab.models.airbench import PatchWhitening


def unfold_moment(images: torch.Tensor, chunk_size: int = 256) -> torch.Tensor:
    """The second moment of the 2x2 patches as the fit read them with F.unfold."""
    dim = images.shape[1] * 4
    outer, count = torch.zeros(dim, dim, dtype=torch.float64), 0
    for chunk in images.split(chunk_size):
        patches = F.unfold(chunk.double(), kernel_size=2).transpose(1, 2).reshape(-1, dim)
        outer += patches.T @ patches
        count += patches.shape[0]
    return outer / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[600, 5000])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    whiten = PatchWhitening(3)
    for size in args.sizes:
        images = torch.randn(size, 3, 32, 32, generator=torch.Generator().manual_seed(0))
        times: dict[str, list[float]] = {"unfold": [], "shifted": []}
        for _ in range(args.repeats):
            for name, call in (("unfold", unfold_moment), ("shifted", whiten.init_from_data)):
                start = time.perf_counter()
                call(images)
                times[name].append(time.perf_counter() - start)
        old, new = (statistics.median(times[k]) for k in ("unfold", "shifted"))
        print(
            f"{size:>6} images: F.unfold {old:.3f} s, shifted views {new:.3f} s, {old / new:.1f}x"
        )


if __name__ == "__main__":
    main()
