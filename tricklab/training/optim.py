"""Optimizers with parameter groups, lr scaling with batch size, and decoupled weight decay.

Every optimizer's groups are built here, Muon's too: `muon.py` holds only the optimizer."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch import nn

from tricklab.core.errors import TrickLabError
from tricklab.recipe.schema import OptimConfig
from tricklab.training.backend import compiled
from tricklab.training.muon import MuonSGD, NewtonSchulz


def scaled_lr(lr: float, batch_size: int, reference_batch_size: int, rule: str) -> float:
    """lr for `batch_size` given lr at `reference_batch_size`: linear (Goyal et al. 2017) or sqrt.

    Seed report 4 scaled airbench's lr by 1.5x for a 1.5x batch (linear)."""
    ratio = batch_size / reference_batch_size
    return {"none": lr, "linear": lr * ratio, "sqrt": lr * math.sqrt(ratio)}[rule]


def split_params(model: nn.Module) -> tuple[list[nn.Parameter], ...]:
    """(weights, normalization-layer parameters, other biases): the trainable ones, in order."""
    norm_ids = {
        id(p)
        for m in model.modules()
        if isinstance(m, (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm))
        for p in m.parameters(recurse=False)
    }
    weights, norms, biases = [], [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            kind = norms if id(p) in norm_ids else biases if name.endswith("bias") else weights
            kind.append(p)
    return weights, norms, biases


def param_groups(
    model: nn.Module, cfg: OptimConfig, lr: float, *, bias_lr_on_all_biases: bool = False
) -> list[dict]:
    """Weights at `lr`; normalization parameters at `lr × bias_lr_mult` (airbench's and Page's
    BatchNorm biases); other biases (a conv's, the head's, airbench's whitening bias) at `lr`, or
    with the norms when `bias_lr_on_all_biases` (airbench94_muon trains its whitening bias so).
    With no_decay_bn_bias, norms and biases take no weight decay (timm's no_weight_decay rule).
    Groups with the same settings are one group, as each group costs the optimizer a pass.

    With decoupled_weight_decay, a group's weight_decay is divided by its lr, so the decay applied
    per step (lr x wd) does not change when the lr is tuned (airbench's decoupled hyper-parameters)."""
    weights, norms, biases = split_params(model)
    bias_wd = 0.0 if cfg.no_decay_bn_bias else cfg.weight_decay
    bias_lr = lr * cfg.bias_lr_mult
    settings = [
        (weights, lr, cfg.weight_decay),
        (norms, bias_lr, bias_wd),
        (biases, bias_lr if bias_lr_on_all_biases else lr, bias_wd),
    ]
    groups: dict[tuple[float, float], list[nn.Parameter]] = {}
    for params, group_lr, wd in settings:
        if cfg.decoupled_weight_decay:
            wd = wd / group_lr if group_lr > 0 else 0.0
        groups.setdefault((group_lr, wd), []).extend(params)
    return [
        {"params": params, "lr": group_lr, "weight_decay": wd}
        for (group_lr, wd), params in groups.items()
        if params
    ]


def filter_params(model: nn.Module) -> list[nn.Parameter]:
    """The trainable conv filters (4-D weights) of `model`: what Muon updates."""
    return [p for p in model.parameters() if p.requires_grad and p.ndim == 4]


def muon_groups(model: nn.Module, cfg: OptimConfig, lr: float) -> list[dict]:
    """`optim.name=muon`'s groups: Muon on conv filters, Nesterov SGD on the rest.

    Filters: lr `cfg.muon_lr`, momentum `cfg.muon_momentum` (Nesterov), no weight decay (their
    norm is reset every step instead). The rest is grouped as for SGD (`param_groups`): other
    weights (the head) at `lr` (already batch-scaled), norm parameters and biases (the whitening
    bias included, as in airbench94_muon) at `lr × bias_lr_mult`. `lr_scaling` does not touch
    `muon_lr`: an orthogonalised step's size does not grow with the batch."""
    filters = filter_params(model)
    if not filters:
        raise TrickLabError(
            "optim.name=muon updates conv filters, and this model has no trainable conv filter; "
            "use optim.name=sgd or adamw"
        )
    filter_ids = {id(p) for p in filters}
    groups = []
    for group in param_groups(model, cfg, lr, bias_lr_on_all_biases=True):
        group["params"] = [p for p in group["params"] if id(p) not in filter_ids]
        if group["params"]:
            groups.append(group)
    muon = {
        "params": filters,
        "lr": cfg.muon_lr,
        "momentum": cfg.muon_momentum,
        "nesterov": cfg.muon_momentum > 0,
        "weight_decay": 0.0,
        "muon": True,
    }
    return [*groups, muon]


def build_optimizer(
    model: nn.Module,
    cfg: OptimConfig,
    batch_size: int,
    *,
    loss_scale: float = 1.0,
    grad_scaler: bool = False,
    compile_mode: str = "off",
    fused: bool = False,
) -> torch.optim.Optimizer:
    """The optimizer the recipe names, at the lr scaled to `batch_size`.

    loss_scale: how many times a mean loss's gradients the loss gives (a summed loss: the batch
        size, `precision.loss_scale_for`); the lr is divided and the (coupled) weight decay
        multiplied by it, so that every step is the mean loss's step (Muon's filters need
        neither: their update does not depend on the gradient's scale).
    grad_scaler: a GradScaler scales the loss (16-mixed): SGD, Adam and AdamW are then fused,
        the kernels that take the scale on the device (otherwise GradScaler reads found_inf on
        the host, a sync every step).
    compile_mode: the recipe's resolved tricks.compile; Muon compiles its Newton–Schulz step
        unless it is off.
    fused: torch's fused kernel is required (tricks.cuda_graph: it reads the lr on the device);
        Muon's SGD part then takes it on any device, its filter step always can."""
    lr = scaled_lr(cfg.lr, batch_size, cfg.reference_batch_size, cfg.lr_scaling)
    if cfg.name == "muon":  # the rest with cfg.momentum and cfg.nesterov, as SGD
        groups = _rescaled(muon_groups(model, cfg, lr), loss_scale)
        return MuonSGD(
            groups,
            lr=lr / loss_scale,
            momentum=cfg.momentum,
            nesterov=cfg.nesterov,
            orthogonalize=NewtonSchulz(cfg.muon_ns_steps, compile=_compiler(compile_mode, model)),
            fused=fused,
        )
    groups = _rescaled(param_groups(model, cfg, lr), loss_scale)
    lr = lr / loss_scale
    if cfg.name == "rmsprop":
        return torch.optim.RMSprop(groups, lr=lr)
    # fused: one kernel updates every parameter (PyTorch's default launches one per tensor, or a
    # few "foreach" kernels on CUDA). The recipe allowed it for these three only.
    required = cfg.fused or fused
    fused_kwargs = {"fused": True} if required or grad_scaler else {}
    try:
        if cfg.name == "sgd":
            return torch.optim.SGD(
                groups, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov, **fused_kwargs
            )
        if cfg.name == "adam":
            return torch.optim.Adam(groups, lr=lr, **fused_kwargs)
        if cfg.name == "adamw":
            return torch.optim.AdamW(groups, lr=lr, **fused_kwargs)
    except RuntimeError as exc:  # fused kernels exist for some devices and dtypes only
        if required:
            which = "optim.fused=true" if cfg.fused else "tricks.cuda_graph=on (fused SGD)"
            raise TrickLabError(f"{which}: {exc}") from None
        return build_optimizer(model, cfg, batch_size, loss_scale=loss_scale)  # syncs per step
    raise AssertionError(cfg.name)  # the recipe validated the name


def _rescaled(groups: list[dict], loss_scale: float) -> list[dict]:
    """`groups` for a loss `loss_scale` times the mean: lr / scale and weight decay x scale, so
    lr x (grad + wd x p) is unchanged; Muon's groups as they are."""
    if loss_scale == 1.0:
        return groups
    for group in groups:
        if not group.get("muon", False):
            group["lr"] /= loss_scale
            group["weight_decay"] *= loss_scale
    return groups


def _compiler(mode: str, model: nn.Module) -> Callable[[Callable], Callable] | None:
    """Muon's Newton–Schulz compiled with torch.compile's defaults (as airbench94_muon compiles
    it) when the recipe compiles, through the one door (backend.compiled); None when it does not."""
    if mode == "off":
        return None
    device = next(model.parameters()).device
    return functools.partial(compiled, mode="default", device=device)
