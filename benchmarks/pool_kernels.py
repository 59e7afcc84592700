"""The max-pools of airbench's net, forward + backward, as PyTorch's pooling kernels and as amax.

Issue 32's profiles (benchmarks/RESULTS.md) found PyTorch's channels-last max-pool kernels the
largest cost of the graphed eager step: max_pool_backward_nhwc, max_pool_forward_nhwc and the
global adaptive max-pool's forward and atomic backward, about 37 % of the kernel time of
speedrun94-muon's epoch. This script times the alternatives on the net's own shapes, fp16 in
channels_last (what speedrun94 runs on a GPU), forward and backward together:

- max_pool2d       F.max_pool2d(x, 2) (the net's nn.MaxPool2d(2));
- amax             the 2x2 windows as two split dimensions of the NHWC tensor, reduced by amax
                   (same values; on ties amax's backward splits the gradient, max-pool's picks one);
- nchw             x made NCHW-contiguous, pooled, and made channels-last again;
- global_adaptive  F.adaptive_max_pool2d(x, 1) (PyTorch's; GlobalMaxPool under torch.compile) /
                   global_amax x.amax((2, 3)) (GlobalMaxPool eager) / global_indices the map
                   flattened and max'ed with its indices (a backward that follows the argmax, as
                   the adaptive pool's, without its atomics: GlobalMaxPool since 2026-11-28).

On a GPU each forward + backward is captured in a CUDA graph and replayed (the kernels' own time,
as inside tricks.cuda_graph's step), timed with CUDA events: the median of 5 blocks of 50 replays.
On a CPU, eager, timed with perf_counter (a rehearsal). Prints and writes JSON:

    python3 benchmarks/pool_kernels.py --json pool.json --batch 1024
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def amax_pool_2x2(x: torch.Tensor) -> torch.Tensor:
    """F.max_pool2d(x, 2) as amax over the 2x2 windows of the NHWC view (odd rows/cols dropped)."""
    h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
    y = x.permute(0, 2, 3, 1)[:, :h, :w]
    y = y.unflatten(2, (w // 2, 2)).unflatten(1, (h // 2, 2)).amax(dim=(2, 4))
    return y.permute(0, 3, 1, 2)


def nchw_pool_2x2(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(x.contiguous(), 2).contiguous(memory_format=torch.channels_last)


VARIANTS = {
    "max_pool2d": lambda x: F.max_pool2d(x, 2),
    "amax": amax_pool_2x2,
    "nchw": nchw_pool_2x2,
}
GLOBAL = {
    "global_adaptive": lambda x: F.adaptive_max_pool2d(x, 1),
    "global_amax": lambda x: x.amax((2, 3), keepdim=True),
    "global_indices": lambda x: x.flatten(2).max(dim=2, keepdim=True).values.unsqueeze(3),
}


def shapes(batch: int) -> list[tuple[str, tuple[int, ...], dict]]:
    """(name, input shape, variants): the three group pools and the global pool of a 32x32 image
    (the 2x2 whitening conv leaves 31x31)."""
    return [
        ("group1 64x31x31", (batch, 64, 31, 31), VARIANTS),
        ("group2 256x15x15", (batch, 256, 15, 15), VARIANTS),
        ("group3 256x7x7", (batch, 256, 7, 7), VARIANTS),
        ("final 256x3x3", (batch, 256, 3, 3), GLOBAL),
    ]


def time_fn(fn, x: torch.Tensor, repeats: int, blocks: int) -> float:
    """Median microseconds of one forward + backward of `fn` at `x`."""
    grad_out = torch.randn_like(fn(x.detach()))

    def step():
        return torch.autograd.grad(fn(x), x, grad_out)[0]

    if x.is_cuda:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        times = []
        for _ in range(blocks):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(repeats):
                graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / repeats)
        return statistics.median(times)
    step()
    times = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(repeats):
            step()
        times.append((time.perf_counter() - start) * 1e6 / repeats)
    return statistics.median(times)


def measure(batch: int, device: torch.device, repeats: int = 50, blocks: int = 5) -> dict:
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    out: dict = {"batch": batch, "device": str(device), "dtype": str(dtype), "microseconds": {}}
    for name, shape, variants in shapes(batch):
        x = torch.randn(shape, device=device, dtype=dtype).to(memory_format=torch.channels_last)
        x.requires_grad_(True)
        reference = next(iter(variants.values()))(x.detach())
        row = {}
        for label, fn in variants.items():
            same = torch.equal(fn(x.detach()), reference)  # the values, before any timing
            row[label] = {"us": time_fn(fn, x, repeats, blocks), "same_values": same}
        out["microseconds"][name] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    result = measure(args.batch, device, args.repeats)
    print(json.dumps(result, indent=1))
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
