"""Torch backend flags, set in one place for a run and restored after it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


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
