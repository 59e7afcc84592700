"""Device synchronisation, the one place that waits for queued device work, and the one test of
whether an error is the device running out of memory."""

from __future__ import annotations

import torch


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so a timer reads finished work (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def out_of_memory_error(exc: BaseException) -> str | None:
    """The one-line error of an out-of-memory (torch.cuda.OutOfMemoryError, a CUDA error from a
    library such as cuBLAS or cuDNN: `CUDA error: out of memory`, the CPU allocator's `can't
    allocate memory`); None for other errors."""
    try:
        text = str(exc).lower()
    except Exception:  # an exception of a model's code whose __str__ itself fails
        return None
    oom = isinstance(exc, torch.cuda.OutOfMemoryError) or (
        isinstance(exc, RuntimeError)
        and ("out of memory" in text or "can't allocate memory" in text)  # CPU: DefaultCPUAllocator
    )
    if isinstance(exc, MemoryError):  # Python's own: host memory, or `ulimit -v` (a late import)
        return f"out of host memory (MemoryError{': ' + str(exc) if str(exc) else ''})"
    if not oom:
        return None
    return str(exc).splitlines()[0] if str(exc) else "out of memory"
