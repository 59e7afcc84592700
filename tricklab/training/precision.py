"""Numeric precision: autocast, gradient scaling, half weights with fp32 BatchNorm, channels_last."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

AUTOCAST_DTYPES = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}
# CUDA compute capability from which GPUs have bf16 tensor cores (Ampere, A100: 8.0).
BF16_TENSOR_CORES_FROM = (8, 0)


def precision_for_device(
    precision: str, device_type: str, capability: tuple[int, int] | None
) -> str:
    """The precision a recipe runs at on a device: bf16-mixed becomes 16-mixed (fp16 autocast with
    loss scaling) on CUDA GPUs without bf16 tensor cores (T4 7.5, V100 7.0), where bf16 matmuls
    and convolutions run several times slower; every other precision as given."""
    if (
        precision == "bf16-mixed"
        and device_type == "cuda"
        and capability is not None
        and tuple(capability) < BF16_TENSOR_CORES_FROM
    ):
        return "16-mixed"
    return precision


def cuda_capability(device: torch.device) -> tuple[int, int] | None:
    """The CUDA compute capability of `device`; None for other devices."""
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def autocast_for(precision: str, device_type: str) -> contextlib.AbstractContextManager:
    """torch.autocast for the mixed precisions (ops run in fp16/bf16, weights stay fp32)."""
    dtype = AUTOCAST_DTYPES.get(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=dtype)


def grad_scaler_for(precision: str, device_type: str) -> torch.amp.GradScaler:
    """Loss scaling for fp16 autocast (fp16 gradients underflow without it); a no-op otherwise.

    GradScaler skips the steps whose gradients overflowed. With an optimizer that takes the scale
    itself (torch's fused SGD, Adam, AdamW: `build_optimizer(grad_scaler=True)` picks them), the
    unscaling and the skip happen on the device; with any other (Muon, RMSprop) `scaler.step`
    reads found_inf on the host, a sync every step."""
    return torch.amp.GradScaler(device_type, enabled=precision == "16-mixed")


class SummedCrossEntropy(nn.CrossEntropyLoss):
    """Cross-entropy summed over the batch, computed in fp32 from (fp16) logits.

    airbench's loss for its fp16 weights: the gradients of a summed loss are those of the mean
    times the batch size, far above fp16's underflow (6e-5 is its smallest normal number), where
    a mean loss's small gradients would be flushed. `loss_scale_for` gives the factor by which
    the optimizer's lr is divided to keep the step of a mean loss."""

    def __init__(self, label_smoothing: float = 0.0) -> None:
        super().__init__(reduction="sum", label_smoothing=label_smoothing)

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return super().forward(logits.float(), labels)


def loss_for(precision: str, label_smoothing: float) -> nn.CrossEntropyLoss:
    """The training loss: summed over the batch with fp16 weights (16-true-bn32), else the mean."""
    if precision == "16-true-bn32":
        return SummedCrossEntropy(label_smoothing)
    return nn.CrossEntropyLoss(label_smoothing=label_smoothing)


def loss_scale_for(precision: str, batch_size: int) -> float:
    """How many times larger than a mean loss's the loss's gradients are (`loss_for`): the batch
    size for the summed loss of 16-true-bn32, else 1."""
    return float(batch_size) if precision == "16-true-bn32" else 1.0


def half_with_fp32_batchnorm(model: nn.Module) -> nn.Module:
    """fp16 weights and activations, BatchNorm kept in fp32.

    Page ("How to train your ResNet", part 4) found half-precision BatchNorm fell back to a slow
    path; cuDNN's BatchNorm takes fp16 inputs with fp32 parameters natively."""
    model.half()
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.float()
    return model


def input_dtype(precision: str) -> torch.dtype:
    """dtype of the batches fed to the model."""
    return torch.float16 if precision == "16-true-bn32" else torch.float32


def apply_channels_last(model: nn.Module) -> nn.Module:
    """NHWC memory format for conv weights (tensor cores prefer it; seed report 0 measured it)."""
    return model.to(memory_format=torch.channels_last)
