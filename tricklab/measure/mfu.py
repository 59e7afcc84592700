"""Model FLOPs utilisation (MFU): the training FLOP/s a run achieved over the device's peak.

The FLOPs are those of the model, not of the kernels that ran: forward MACs (FlopCounterMode, see
`flops.py`) × 2 FLOPs per MAC × 3 for forward + backward (the backward pass costs about twice the
forward: one product for the input gradient, one for the weight gradient), per image trained.
Norms, activations, the optimizer and data augmentation are not counted, and a frozen first layer
is counted as if it were trained, so MFU is an approximation; it is the usual one (Chowdhery et al.
2022, PaLM appendix B) and is comparable between runs of the same model.

Peaks are dense (no structured sparsity) tensor-core figures from the vendors' data sheets, per
numeric precision. A device not in the table gives no MFU (None), never a guessed one; pass
`peak_tflops` to supply the figure yourself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tricklab.core.errors import TrickLabError, expect_number

if TYPE_CHECKING:  # torch stays unimported until a run: the CLI answers bad input at once
    import torch

# FLOPs per multiply-accumulate (2) times forward + backward (3).
TRAIN_FLOPS_PER_FORWARD_MAC = 6


@dataclass(frozen=True)
class DevicePeak:
    """Dense peak TFLOP/s of one device per precision; None where it has no such tensor cores."""

    name: str
    pattern: str  # regular expression searched in torch.cuda.get_device_name(), case-insensitive
    fp32: float
    tf32: float | None
    fp16: float
    bf16: float | None


# From NVIDIA's data sheets (dense figures: the sheets print twice these "with sparsity").
# More specific patterns first: "H100 PCIe" before "H100", "A10" must not match "A100" or "A10G".
# FP16/BF16 are tensor-core figures with FP32 accumulation (what PyTorch uses).
DEVICE_PEAKS: tuple[DevicePeak, ...] = (
    DevicePeak("H200 NVL", r"H200.*NVL", fp32=60.0, tf32=417.5, fp16=835.5, bf16=835.5),
    DevicePeak("H200 SXM", r"H200", fp32=67.0, tf32=494.7, fp16=989.4, bf16=989.4),
    DevicePeak("H100 NVL", r"H100.*NVL", fp32=60.0, tf32=417.5, fp16=835.5, bf16=835.5),
    DevicePeak("H100 PCIe", r"H100.*PCIe", fp32=51.0, tf32=378.0, fp16=756.0, bf16=756.0),
    DevicePeak("H100 SXM", r"H100", fp32=67.0, tf32=494.7, fp16=989.4, bf16=989.4),
    DevicePeak("A100", r"A100", fp32=19.5, tf32=156.0, fp16=312.0, bf16=312.0),
    DevicePeak("L40S", r"L40S", fp32=91.6, tf32=183.0, fp16=362.05, bf16=362.05),
    DevicePeak("L4", r"\bL4\b", fp32=30.3, tf32=60.0, fp16=121.0, bf16=121.0),
    DevicePeak("A10", r"\bA10\b", fp32=31.2, tf32=62.5, fp16=125.0, bf16=125.0),
    DevicePeak("RTX 4090", r"RTX 4090", fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2),
    DevicePeak("RTX 3090", r"RTX 3090", fp32=35.6, tf32=35.6, fp16=71.0, bf16=71.0),
    DevicePeak("V100S", r"V100S", fp32=16.4, tf32=None, fp16=130.0, bf16=None),
    DevicePeak("V100 PCIe", r"V100.*PCIe", fp32=14.0, tf32=None, fp16=112.0, bf16=None),
    DevicePeak("V100 SXM2", r"V100", fp32=15.7, tf32=None, fp16=125.0, bf16=None),
    DevicePeak("T4", r"\bT4\b", fp32=8.1, tf32=None, fp16=65.0, bf16=None),
)

# Which peak a run's compute dtype (PrecisionPolicy.compute_dtype: the one place a precision name
# is read) runs at. fp32 counts at the TF32 peak where the device has one: cuDNN runs fp32
# convolutions on TF32 tensor cores by default (torch.backends.cudnn.allow_tf32).
DTYPE_PEAKS = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "tf32"}


def find_device_peak(device_name: str) -> DevicePeak | None:
    """The table entry for a CUDA device name (e.g. "NVIDIA H100 80GB HBM3"), or None."""
    for peak in DEVICE_PEAKS:
        if re.search(peak.pattern, device_name, flags=re.IGNORECASE):
            return peak
    return None


def peak_tflops(device_name: str, compute_dtype: torch.dtype) -> tuple[float, str] | None:
    """(dense peak TFLOP/s, "H100 SXM bf16") for a device computing in `compute_dtype` (a run's
    `PrecisionPolicy.compute_dtype`), or None."""
    peak = find_device_peak(device_name)
    if peak is None:
        return None
    dtype = DTYPE_PEAKS.get(str(compute_dtype), "fp32")
    value = getattr(peak, dtype)
    if value is None and dtype == "tf32":
        dtype, value = "fp32", peak.fp32
    if value is None:  # e.g. bf16 on a V100: it runs, but on no bf16 tensor cores
        dtype, value = "fp32", peak.fp32
    return value, f"{peak.name} {dtype}"


def train_flops_per_image(forward_macs: int) -> int:
    """Approximate training FLOPs per image: 2 FLOPs per MAC × 3 (forward + backward)."""
    return TRAIN_FLOPS_PER_FORWARD_MAC * forward_macs


def achieved_tflops(forward_macs: int | None, images_per_second: float | None) -> float | None:
    """Training TFLOP/s achieved: `train_flops_per_image(forward_macs)` × images per train second."""
    if not forward_macs or not images_per_second:
        return None
    return train_flops_per_image(forward_macs) * images_per_second / 1e12


PEAK_TFLOPS_RANGE = (1e-6, 1e6)  # a device's peak TFLOP/s: a microcontroller's to many GPUs


def check_peak(peak: float | None) -> None:
    """TrickLabError for a --peak-tflops outside PEAK_TFLOPS_RANGE (1e-320 gave an infinite MFU,
    which tricklab's own JSON refuses)."""
    low, high = PEAK_TFLOPS_RANGE
    if peak is not None:  # a Python caller's text: a TypeError naming it, not one from `<=`
        expect_number(peak, "peak_tflops")
    if peak is not None and not low <= peak <= high:
        raise TrickLabError(
            f"--peak-tflops must be a device's peak TFLOP/s, from {low:g} to {high:g}, got {peak:g}"
        )


def mfu(
    forward_macs: int | None, images_per_second: float | None, peak: float | None
) -> float | None:
    """Achieved training FLOP/s over `peak` TFLOP/s, as a fraction (0.4 = 40 %); None if unknown."""
    achieved = achieved_tflops(forward_macs, images_per_second)
    if achieved is None or not peak:
        return None
    return achieved / peak
