"""Memory of a device: a run's peak (CUDA allocator peaks, or the process's peak RSS on the CPU),
and what can still be allocated. Each function takes the device; the CPU path is the fallback."""

from __future__ import annotations

import resource
import sys

import torch

from tricklab.data.limits import available_memory_bytes


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict:
    """{"peak_memory_bytes", ...}: CUDA max allocated (and reserved, % of device total);
    on the CPU the process's peak resident set size (a lifetime peak: it includes earlier runs)."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        allocated = torch.cuda.max_memory_allocated(device)
        return {
            "peak_memory_bytes": allocated,
            "peak_memory_reserved_bytes": torch.cuda.max_memory_reserved(device),
            "peak_memory_pct": 100.0 * allocated / total,
        }
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_memory_bytes": rss if sys.platform == "darwin" else rss * 1024}


def free_memory_bytes(device: torch.device) -> int | None:
    """What can still be allocated on `device`: free CUDA memory (the driver's count, other
    processes' use included); on the CPU what this process may still allocate (available memory,
    cgroup and `ulimit -v` headroom); None where it cannot be told (MPS)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return available_memory_bytes() if device.type == "cpu" else None
