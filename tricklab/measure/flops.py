"""Forward-pass FLOPs, MACs and parameter counts of a model, via torch's FlopCounterMode.

FlopCounterMode counts matrix products and convolutions (2 FLOPs per multiply-accumulate); norms,
activations and pools are not counted, the usual convention for reported GMACs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def count_forward_flops(model: nn.Module, input_shape: tuple[int, ...]) -> int:
    """FLOPs of one forward pass on a zero batch of `input_shape` (batch dimension included).

    Runs in eval mode without grad on the model's device and dtype; every module's train/eval mode
    is restored afterwards, so BatchNorm statistics and the caller's mode are left untouched.
    """
    reference = next(iter(model.parameters()), None)
    if reference is None:
        reference = next(iter(model.buffers()), None)
    device = reference.device if reference is not None else torch.device("cpu")
    dtype = reference.dtype if reference is not None and reference.is_floating_point() else None
    inputs = torch.zeros(input_shape, device=device, dtype=dtype)
    with eval_mode(model), _environment_kept(), FlopCounterMode(display=False) as counter:
        model(inputs)
    return int(counter.get_total_flops())


@contextlib.contextmanager
def _environment_kept() -> Iterator[None]:
    """The process environment as it was: FlopCounterMode's first use imports torch's compiler,
    which writes its default TORCHINDUCTOR_CACHE_DIR into os.environ (the caller's, inherited by
    its subprocesses, and read later as if the user had chosen it)."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(before):
            del os.environ[name]


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """`model` in eval mode without grad for the block; every module's own train/eval mode is
    restored afterwards (BatchNorm statistics and the caller's mode are left untouched)."""
    modes = {module: module.training for module in model.modules()}
    try:
        model.eval()
        with torch.no_grad():
            yield
    finally:
        for module, training in modes.items():
            module.training = training


def count_forward_macs(model: nn.Module, input_shape: tuple[int, ...]) -> int:
    """Multiply-accumulates of one forward pass: `count_forward_flops` // 2."""
    return count_forward_flops(model, input_shape) // 2


def count_params(model: nn.Module, *, trainable_only: bool = False) -> int:
    """Number of parameter elements; with `trainable_only`, only those with requires_grad."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
