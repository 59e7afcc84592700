"""Device synchronisation, the one place that waits for queued device work."""

from __future__ import annotations

import torch


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so a timer reads finished work (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
