"""Torch backend flags, set in one place for a run and restored after it; torch.compile as the
run's device needs it."""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable, Iterator

import torch
from torch import nn

# Inductor imports it to find a CUDA toolkit; it logs "No CUDA runtime is found" where a toolkit
# (nvcc) is installed but no GPU is.
CUDA_TOOLKIT_MODULE = "torch.utils.cpp_extension"


@contextlib.contextmanager
def backend_settings(matmul_precision: str, cudnn_benchmark: bool) -> Iterator[None]:
    """Set float32 matmul precision (TF32 on Ampere+ for 'high') and cuDNN autotuning; restore after."""
    saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark)
    torch.set_float32_matmul_precision(matmul_precision)
    torch.backends.cudnn.benchmark = cudnn_benchmark
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.benchmark = saved[1]


def compiled(model: nn.Module | Callable, mode: str, device: torch.device) -> Callable:
    """torch.compile(model, mode=mode), the one door to it. A CPU run needs no CUDA toolkit: on a
    CPU, the module that looks for one is imported first with its notice quiet (its answer is
    never used)."""
    if device.type == "cpu":
        notices = logging.getLogger(CUDA_TOOLKIT_MODULE)
        level = notices.level
        notices.setLevel(logging.ERROR)
        try:
            importlib.import_module(CUDA_TOOLKIT_MODULE)
        finally:
            notices.setLevel(level)
    return torch.compile(model, mode=mode)
