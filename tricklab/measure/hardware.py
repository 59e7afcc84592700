"""Hardware fingerprint stored with every result, so numbers are never separated from their machine."""

from __future__ import annotations

import os
import platform

import torch

from tricklab.core.version import __version__


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages; None where the system has none (Windows)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def hardware_fingerprint(device: torch.device, load_start: list[float] | None = None) -> dict:
    """Device name, CUDA/driver versions, torch version, CPU model and core count; the load
    averages as the measurement began (`load_start`, `load_average()` then) and now."""
    info = {
        "device_type": device.type,
        "device_name": cpu_model() if device.type == "cpu" else device.type,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tricklab": __version__,
        "load_average_start": load_start,
        "load_average_end": load_average(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["device_name"] = props.name
        info["device_memory_bytes"] = props.total_memory
        info["compute_capability"] = f"{props.major}.{props.minor}"
        info["cudnn"] = torch.backends.cudnn.version()
        info["driver"] = _nvidia_driver()
    return info


def _nvidia_driver() -> str | None:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            return f.readline().strip()
    except OSError:
        return None
