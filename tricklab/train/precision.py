"""Numeric precision: autocast, gradient scaling, half weights with fp32 BatchNorm, channels_last."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

AUTOCAST_DTYPES = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}


def autocast_for(precision: str, device_type: str) -> contextlib.AbstractContextManager:
    """torch.autocast for the mixed precisions (ops run in fp16/bf16, weights stay fp32)."""
    dtype = AUTOCAST_DTYPES.get(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=dtype)


def grad_scaler_for(precision: str, device_type: str) -> torch.amp.GradScaler:
    """Loss scaling for fp16 autocast (fp16 gradients underflow without it); a no-op otherwise."""
    return torch.amp.GradScaler(device_type, enabled=precision == "16-mixed")


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
