"""Optimizers with parameter groups, lr scaling with batch size, and decoupled weight decay."""

from __future__ import annotations

import math

import torch
from torch import nn

from tricklab.errors import TrickLabError
from tricklab.train.recipe import OptimConfig


def scaled_lr(lr: float, batch_size: int, reference_batch_size: int, rule: str) -> float:
    """lr for `batch_size` given lr at `reference_batch_size`: linear (Goyal et al. 2017) or sqrt.

    Seed report 4 scaled airbench's lr by 1.5x for a 1.5x batch (linear)."""
    ratio = batch_size / reference_batch_size
    return {"none": lr, "linear": lr * ratio, "sqrt": lr * math.sqrt(ratio)}[rule]


def split_norm_and_bias(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(filters and other weights, normalization parameters and biases), trainable ones only."""
    norm_ids = {
        id(p)
        for m in model.modules()
        if isinstance(m, (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm))
        for p in m.parameters(recurse=False)
    }
    weights, norm_bias = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_norm_bias = id(p) in norm_ids or name.endswith("bias")
        (norm_bias if is_norm_bias else weights).append(p)
    return weights, norm_bias


def param_groups(model: nn.Module, cfg: OptimConfig, lr: float) -> list[dict]:
    """Two groups: weights, and norm params + biases (own lr multiplier, optionally no decay);
    one group when both would have the same settings, as each group costs the optimizer a pass.

    With decoupled_weight_decay, a group's weight_decay is divided by its lr, so the decay applied
    per step (lr x wd) does not change when the lr is tuned (airbench's decoupled hyper-parameters)."""
    weights, norm_bias = split_norm_and_bias(model)
    groups = [
        {"params": weights, "lr": lr, "weight_decay": cfg.weight_decay},
        {
            "params": norm_bias,
            "lr": lr * cfg.bias_lr_mult,
            "weight_decay": 0.0 if cfg.no_decay_bn_bias else cfg.weight_decay,
        },
    ]
    if cfg.decoupled_weight_decay:
        for g in groups:
            g["weight_decay"] = g["weight_decay"] / g["lr"] if g["lr"] > 0 else 0.0
    if all(groups[0][k] == groups[1][k] for k in ("lr", "weight_decay")):
        groups = [{**groups[0], "params": weights + norm_bias}]
    return [g for g in groups if g["params"]]


def build_optimizer(model: nn.Module, cfg: OptimConfig, batch_size: int) -> torch.optim.Optimizer:
    """The optimizer the recipe names, at the lr scaled to `batch_size`."""
    lr = scaled_lr(cfg.lr, batch_size, cfg.reference_batch_size, cfg.lr_scaling)
    if cfg.name == "muon":
        from tricklab.train.muon import build_muon

        return build_muon(model, cfg, lr)
    groups = param_groups(model, cfg, lr)
    if cfg.name == "rmsprop":
        return torch.optim.RMSprop(groups, lr=lr)
    if cfg.name == "sgd" and cfg.nesterov and cfg.momentum <= 0:
        raise TrickLabError("optim.nesterov=true needs optim.momentum > 0")
    # fused: one kernel updates every parameter (PyTorch's default launches one per tensor, or a
    # few "foreach" kernels on CUDA). The recipe allowed it for these three only.
    fused = {"fused": True} if cfg.fused else {}
    try:
        if cfg.name == "sgd":
            return torch.optim.SGD(
                groups, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov, **fused
            )
        if cfg.name == "adam":
            return torch.optim.Adam(groups, lr=lr, **fused)
        if cfg.name == "adamw":
            return torch.optim.AdamW(groups, lr=lr, **fused)
    except RuntimeError as exc:  # fused kernels exist for some devices and dtypes only
        raise TrickLabError(f"optim.fused=true: {exc}") from None
    raise AssertionError(cfg.name)  # the recipe validated the name
