"""Learning-rate schedules as pure functions of the step, applied per iteration."""

from __future__ import annotations

import math

import torch

from tricklab.recipe.schema import ScheduleConfig


def lr_factor(cfg: ScheduleConfig, step: int, total_steps: int) -> float:
    """Multiplier of the peak lr at `step` (0-based) of `total_steps`.

    piecewise-linear is the one-cycle / triangular schedule of Page's ResNet-9 and airbench:
    start_factor at step 0, 1.0 at peak_fraction, final_factor at the last step.
    A linear warm-up from 0 (warmup_fraction > 0) multiplies any schedule.
    """
    total = max(total_steps, 1)
    t = min(step / total, 1.0)
    if cfg.name == "constant":
        factor = 1.0
    elif cfg.name == "step":
        factor = cfg.gamma ** sum(t >= m for m in cfg.milestones)
    elif cfg.name == "cosine":
        factor = cfg.final_factor + (1 - cfg.final_factor) * 0.5 * (1 + math.cos(math.pi * t))
    elif cfg.name == "piecewise-linear":
        peak = cfg.peak_fraction
        if t < peak:
            factor = cfg.start_factor + (1 - cfg.start_factor) * t / peak
        else:
            factor = 1 + (cfg.final_factor - 1) * (t - peak) / max(1 - peak, 1e-12)
    else:  # the recipe validated the name
        raise AssertionError(cfg.name)
    if cfg.warmup_fraction > 0 and t < cfg.warmup_fraction:
        factor *= t / cfg.warmup_fraction
    return factor


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: ScheduleConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR over `lr_factor`; call `.step()` once per training iteration."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(cfg, step, total_steps)
    )
