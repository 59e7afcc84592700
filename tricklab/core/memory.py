"""Memory of the machine and of a device (importable without torch): a run's peak (CUDA allocator
peaks, or the process's peak RSS on the CPU), what can still be allocated, and `check_fits`, the
one check (and message) of every estimate against it: a dataset while it is decoded, a split on
its device, a model's training state, a batch's activations. Each function takes the device; the
CPU path is the fallback."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

try:
    import resource
except ImportError:  # not on Windows
    resource = None

from tricklab.core.errors import TrickLabError

if TYPE_CHECKING:
    import torch


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict:
    """{"peak_memory_kind", "peak_memory_bytes", ...}: CUDA max allocated (and reserved, % of device total);
    on the CPU the process's peak resident set size (a lifetime peak: it includes earlier runs)."""
    if device.type == "cuda":
        import torch

        total = torch.cuda.get_device_properties(device).total_memory
        allocated = torch.cuda.max_memory_allocated(device)
        return {
            "peak_memory_kind": "CUDA max allocated",
            "peak_memory_bytes": allocated,
            "peak_memory_reserved_bytes": torch.cuda.max_memory_reserved(device),
            "peak_memory_pct": 100.0 * allocated / total,
        }
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "peak_memory_kind": "process peak RSS (lifetime: earlier runs in the process included)",
        "peak_memory_bytes": rss if sys.platform == "darwin" else rss * 1024,
    }


def free_memory_bytes(device: torch.device) -> int | None:
    """What can still be allocated on `device`: free CUDA memory (the driver's count, other
    processes' use included); on the CPU what this process may still allocate (available memory,
    cgroup and `ulimit -v` headroom); None where it cannot be told (MPS)."""
    if device.type == "cuda":
        import torch

        return torch.cuda.mem_get_info(device)[0]
    return available_memory_bytes() if device.type == "cpu" else None


_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a number near 2**63


_CGROUP_ROOT = Path("/sys/fs/cgroup")


def format_bytes(count: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def check_fits(
    subject: str,
    needed_bytes: int,
    available_bytes: int | None,
    *,
    what: str,
    where: str = "in memory",
    advice: str,
) -> None:
    """TrickLabError, before anything is allocated, when `needed_bytes` is more than
    `available_bytes` (None: not known, nothing is checked), in one format: "{subject} does not
    fit {where}: {what} need about N, M available; {advice}"."""
    if available_bytes is not None and needed_bytes > available_bytes:
        raise TrickLabError(
            f"{subject} does not fit {where}: {what} need about {format_bytes(needed_bytes)}, "
            f"{format_bytes(available_bytes)} available; {advice}"
        )


def available_memory_bytes() -> int | None:
    """What this process may still allocate: the least of the machine's available memory, its
    cgroup's headroom and its address-space limit's headroom; None where none is known."""
    known = [
        n
        for n in (_meminfo_available(), cgroup_headroom_bytes(), _address_space_headroom())
        if n is not None
    ]
    return max(0, min(known)) if known else None


def _meminfo_available() -> int | None:
    try:
        match = re.search(
            r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(encoding="utf-8"), re.M
        )
    except OSError:
        match = None
    if match:
        return int(match[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def cgroup_headroom_bytes(folder: Path | None = None) -> int | None:
    """The memory cgroup's limit less what it uses (page cache counted as free: it is reclaimed
    first), from `folder` or this process's own cgroup; None without a limit."""
    for candidate in [folder] if folder is not None else _own_cgroup_folders():
        for limit_file, usage_file, cache_key in (
            ("memory.max", "memory.current", "file"),  # cgroup v2
            ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_cache"),  # cgroup v1
        ):
            try:
                limit = (candidate / limit_file).read_text(encoding="utf-8").strip()
                usage = int((candidate / usage_file).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if limit == "max" or int(limit) >= _UNLIMITED:
                return None
            return int(limit) - usage + _stat_value(candidate / "memory.stat", cache_key)
    return None


def _own_cgroup_folders() -> list[Path]:
    """This process's memory cgroup folder(s), most specific first (v2, then v1)."""
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    folders = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            folders.append(_CGROUP_ROOT / path.lstrip("/"))
        elif "memory" in controllers.split(","):
            folders += [_CGROUP_ROOT / "memory" / path.lstrip("/"), _CGROUP_ROOT / "memory"]
    return folders


def _stat_value(path: Path, key: str) -> int:
    try:
        match = re.search(rf"^{key} (\d+)$", path.read_text(encoding="utf-8"), re.M)
    except OSError:
        return 0
    return int(match[1]) if match else 0


def _address_space_headroom() -> int | None:
    """RLIMIT_AS (ulimit -v) less the address space already mapped; None without a limit."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft == resource.RLIM_INFINITY:
            return None
        status = Path("/proc/self/status").read_text(encoding="utf-8")
    except (AttributeError, OSError, ValueError):  # no resource module, no RLIMIT_AS, no /proc
        return None
    match = re.search(r"^VmSize:\s+(\d+) kB", status, re.M)
    return soft - int(match[1]) * 1024 if match else None
