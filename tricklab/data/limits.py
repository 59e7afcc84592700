"""Limits on what a dataset may ask for, checked before memory is allocated (importable without torch).

A decoded dataset lives in memory as uint8 arrays, so what it needs is known before decoding:
images × channels × height × width bytes. `check_fits_in_memory` compares such an estimate with
what this process may still allocate (the machine's available memory, its cgroup's limit, its
address-space limit), so an impossible request is one clear error instead of the kernel's
out-of-memory killer. Files are bounded apiece: an image file or archive member above
`MAX_IMAGE_FILE_BYTES` is refused by its size, before it is read.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tricklab.errors import TrickLabError

try:
    import resource
except ImportError:  # not on Windows
    resource = None

MAX_IMAGE_SIZE = 1024  # data.image_size: side of the square images are resized to
MAX_IMAGE_FILE_BYTES = 64 << 20  # one image file or archive member
MAX_IMAGE_PIXELS = 8192 * 8192  # one source image, read from its header before decoding
MAX_CIFAR_FILE_BYTES = 256 << 20  # one file of the CIFAR release (cifar-100's train is 148 MiB)

_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a number near 2**63
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def format_bytes(count: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def check_fits_in_memory(name: str, needed_bytes: int, what: str, advice: str) -> None:
    """Raise a TrickLabError when `needed_bytes` is more than this process may still allocate.

    `what` says what needs it ("60000 images of 3x32x32"), `advice` what to ask for instead.
    """
    available = available_memory_bytes()
    if available is not None and needed_bytes > available:
        raise TrickLabError(
            f"dataset {name} does not fit in memory: {what} need about "
            f"{format_bytes(needed_bytes)} while decoding, {format_bytes(available)} available; "
            f"{advice}"
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
        match = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
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
                limit = (candidate / limit_file).read_text().strip()
                usage = int((candidate / usage_file).read_text())
            except (OSError, ValueError):
                continue
            if limit == "max" or int(limit) >= _UNLIMITED:
                return None
            return int(limit) - usage + _stat_value(candidate / "memory.stat", cache_key)
    return None


def _own_cgroup_folders() -> list[Path]:
    """This process's memory cgroup folder(s), most specific first (v2, then v1)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
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
        match = re.search(rf"^{key} (\d+)$", path.read_text(), re.M)
    except OSError:
        return 0
    return int(match[1]) if match else 0


def _address_space_headroom() -> int | None:
    """RLIMIT_AS (ulimit -v) less the address space already mapped; None without a limit."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft == resource.RLIM_INFINITY:
            return None
        status = Path("/proc/self/status").read_text()
    except (AttributeError, OSError, ValueError):  # no resource module, no RLIMIT_AS, no /proc
        return None
    match = re.search(r"^VmSize:\s+(\d+) kB", status, re.M)
    return soft - int(match[1]) * 1024 if match else None
