"""Numeric precision, decided once: `resolve_precision` turns tricks.precision and the device into a
`PrecisionPolicy` (autocast, gradient scaling, loss scale, input dtype, model preparation), and
everything else asks the policy. channels_last lives here too (a memory format, not a dtype)."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
from torch import nn

from tricklab.core.errors import TrickLabError

# CUDA compute capability from which GPUs have fp16 tensor cores (Volta, V100: 7.0) and bf16 ones
# (Ampere, A100: 8.0).
FP16_TENSOR_CORES_FROM = (7, 0)
BF16_TENSOR_CORES_FROM = (8, 0)
# Optimizers whose state fp16 weights would hold in fp16 (their eps rounds to 0): the recipe refuses
# 16-true-bn32 with them, and `auto` picks autocast for them instead.
FP32_STATE_OPTIMIZERS = ("adam", "adamw", "rmsprop")


@dataclass(frozen=True)
class PrecisionPolicy:
    """How a run computes, from tricks.precision as it runs on its device (`name`).

    32-true: fp32 everything. 16-mixed / bf16-mixed: fp32 weights, ops under torch.autocast in
    fp16 / bf16 (fp16 with loss scaling: its gradients underflow). 16-true-bn32: airbench's fp16
    weights and activations with BatchNorm kept fp32 and the loss summed over the batch."""

    name: str
    device_type: str
    autocast_dtype: torch.dtype | None = None  # ops under torch.autocast in this dtype
    weight_dtype: torch.dtype = torch.float32  # every weight but BatchNorm's
    grad_scaling: bool = False  # a GradScaler scales the loss (fp16 autocast)
    summed_loss: bool = False  # the loss is summed over the batch (fp16 weights: no underflow)

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype activations are computed in; the batches the model is fed come in it."""
        return self.autocast_dtype or self.weight_dtype

    def autocast(self, cache: bool = True) -> contextlib.AbstractContextManager:
        """A fresh torch.autocast for the mixed precisions (a no-op context otherwise); `cache`:
        autocast's cache of weight casts (off inside a CUDA graph capture, as PyTorch asks)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(
            device_type=self.device_type, dtype=self.autocast_dtype, cache_enabled=cache
        )

    def grad_scaler(self) -> torch.amp.GradScaler:
        """Loss scaling for fp16 autocast; a no-op scaler otherwise.

        GradScaler skips the steps whose gradients overflowed. With an optimizer that takes the
        scale itself (torch's fused SGD, Adam, AdamW: `build_optimizer(grad_scaler=True)` picks
        them), the unscaling and the skip happen on the device; with any other (Muon, RMSprop)
        `scaler.step` reads found_inf on the host, a sync every step."""
        return torch.amp.GradScaler(self.device_type, enabled=self.grad_scaling)

    def loss_scale(self, batch_size: int) -> float:
        """How many times larger than a mean loss's the loss's gradients are: the batch size for
        a summed loss, else 1 (build_optimizer divides the lr by it)."""
        return float(batch_size) if self.summed_loss else 1.0

    def prepare_model(self, model: nn.Module) -> nn.Module:
        """The weights in `weight_dtype`, BatchNorm kept in fp32 (in place; returns `model`)."""
        if self.weight_dtype == torch.float16:
            half_with_fp32_batchnorm(model)
        return model


# What each precision name means; the one place a precision string is read.
_POLICIES = {
    "32-true": {},
    "16-mixed": {"autocast_dtype": torch.float16, "grad_scaling": True},
    "bf16-mixed": {"autocast_dtype": torch.bfloat16},
    "16-true-bn32": {"weight_dtype": torch.float16, "summed_loss": True},
}
PRECISIONS = tuple(_POLICIES)


def precision_policy(name: str, device_type: str) -> PrecisionPolicy:
    """The policy of a concrete precision name (no `auto`) on a device type."""
    if name not in _POLICIES:
        raise TrickLabError(f"unknown precision {name!r}; one of {', '.join(PRECISIONS)}")
    return PrecisionPolicy(name, device_type, **_POLICIES[name])


def auto_precision(device_type: str, capability: tuple[int, int] | None, optimizer: str) -> str:
    """What tricks.precision=auto runs as (docs/precision.md has the figures behind each row):
    on CUDA GPUs with fp16 tensor cores (7.0+), airbench's fp16 weights with fp32 BatchNorm
    (16-true-bn32), or autocast for the optimizers whose state it cannot hold in fp16 (bf16 from
    8.0, else fp16); on a CPU with native bf16 matrix units (AMX: `native_cpu_bf16`), bf16
    autocast, measured 1.9x faster than fp32 at the demo's size and within noise of its
    accuracy; fp32 elsewhere (a CPU without them emulates bf16, 5-12x slower)."""
    if device_type == "cpu":
        return "bf16-mixed" if native_cpu_bf16() else "32-true"
    if device_type != "cuda" or capability is None or tuple(capability) < FP16_TENSOR_CORES_FROM:
        return "32-true"
    if optimizer not in FP32_STATE_OPTIMIZERS:
        return "16-true-bn32"
    return "bf16-mixed" if tuple(capability) >= BF16_TENSOR_CORES_FROM else "16-mixed"


@functools.cache
def native_cpu_bf16() -> bool:
    """Whether this CPU has AMX tiles, on which oneDNN runs bf16 convolutions and matmuls
    natively (torch.cpu's probe; False on a torch without it). AVX-512 BF16 alone is not
    counted: no CPU of that kind was measured."""
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    try:
        return bool(probe()) if probe is not None else False
    except Exception:  # a probe that cannot run on this build: counted as none
        return False


def resolve_precision(
    requested: str, device_type: str, capability: tuple[int, int] | None, optimizer: str = "sgd"
) -> tuple[PrecisionPolicy, str | None]:
    """(the policy tricks.precision runs with on the device, a note when it differs from the
    recipe's explicit value). An explicit value wins, except bf16-mixed on CUDA GPUs without bf16
    tensor cores (T4 7.5, V100 7.0), where bf16 matmuls and convolutions run several times slower:
    it runs as 16-mixed (fp16 autocast with loss scaling)."""
    if requested == "auto":
        return precision_policy(
            auto_precision(device_type, capability, optimizer), device_type
        ), None
    if (
        requested == "bf16-mixed"
        and device_type == "cuda"
        and capability is not None
        and tuple(capability) < BF16_TENSOR_CORES_FROM
    ):
        major, minor = capability
        note = (
            f"tricks.precision={requested} ran as 16-mixed: compute capability {major}.{minor} "
            "has no bf16 tensor cores (from 8.0), where bf16 runs several times slower than fp16"
        )
        return precision_policy("16-mixed", device_type), note
    return precision_policy(requested, device_type), None


def cuda_capability(device: torch.device) -> tuple[int, int] | None:
    """The CUDA compute capability of `device`; None for other devices."""
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def half_with_fp32_batchnorm(model: nn.Module) -> nn.Module:
    """fp16 weights and activations, BatchNorm kept in fp32.

    Page ("How to train your ResNet", part 4) found half-precision BatchNorm fell back to a slow
    path; cuDNN's BatchNorm takes fp16 inputs with fp32 parameters natively."""
    model.half()
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.float()
    return model


def apply_channels_last(model: nn.Module) -> nn.Module:
    """NHWC memory format for conv weights (tensor cores prefer it; seed report 0 measured it)."""
    return model.to(memory_format=torch.channels_last)
