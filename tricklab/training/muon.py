"""Muon for conv filters and Nesterov SGD for everything else, stepped as one optimizer.

Muon (Keller Jordan, 2024; the optimizer of the airbench94_muon CIFAR-10 record): the momentum of
each weight matrix is orthogonalised by a few Newton–Schulz iterations before the step, so every
direction of the update has about the same size. A conv filter (out, in, kh, kw) is treated as the
(out, in·kh·kw) matrix it multiplies patches with. Biases, normalization parameters and the
classifier head are not hidden-layer matrices; they take plain Nesterov SGD, as in the record.

The filter updates run as airbench94_muon's do, with foreach kernels over all filters where it
loops (momentum, renormalisation, weight decay, the step) and `newton_schulz` per filter, compiled
with torch.compile when the recipe compiles (as airbench94_muon compiles it). The rest takes
torch's SGD, fused on CUDA (airbench94_muon's `SGD(fused=True)`), foreach elsewhere. A group's
lr may be a 0-d tensor (tricks.cuda_graph reads it from a device table): every kernel then takes it
on the device, and nothing reads it on the host. `torch.optim.Muon` (torch 2.9 and later), which loops over the filters eagerly, is kept as a
reference backend: tests check that both take the same steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

# Quintic Newton–Schulz coefficients from Jordan's Muon (also torch.optim.Muon's defaults).
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
# torch.optim.Muon's default; airbench94_muon runs 3 for speed, which leaves small singular values
# further from 1. Five steps cost a few hundred microseconds per training step for these shapes.
NS_STEPS = 5
NS_EPS = 1e-7


@dataclass(frozen=True)
class NewtonSchulz:
    """How Muon orthogonalises a filter's update: `steps` iterations of `newton_schulz`, run
    through `compile` (a function that compiles a function, e.g. torch.compile, as airbench94_muon
    compiles it) unless it is None."""

    steps: int = NS_STEPS
    compile: Callable[[Callable], Callable] | None = None


def has_torch_muon() -> bool:
    """True when the installed torch ships `torch.optim.Muon`."""
    return hasattr(torch.optim, "Muon")


def newton_schulz(
    matrix: Tensor, steps: int = NS_STEPS, eps: float = NS_EPS, dtype: torch.dtype = torch.bfloat16
) -> Tensor:
    """Approximately orthogonalise a 2-D matrix: for G = U S Vᵀ, return about U Vᵀ.

    The matrix is scaled to Frobenius norm 1 (so every singular value is at most 1), then the quintic
    X ← aX + (bA + cA²)X with A = XXᵀ pushes each singular value towards 1. The coefficients favour
    speed over exact convergence: after 5 steps the singular values lie roughly in [0.7, 1.2] rather
    than at 1, which Jordan found trains as well. Computed in bfloat16, like torch.optim.Muon
    (`dtype`; the tests use float64 to compare other parts of a step exactly).
    """
    if matrix.ndim != 2:
        raise ValueError(f"newton_schulz needs a 2-D matrix, got shape {tuple(matrix.shape)}")
    a, b, c = NS_COEFFICIENTS
    x = matrix.to(dtype)
    tall = x.size(0) > x.size(1)
    if tall:  # iterate on the smaller Gram matrix
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        # addmm rounds once per line in bfloat16 (and matches torch.optim.Muon bit for bit)
        polynomial = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, polynomial, x, beta=a)
    return x.T if tall else x


def matrix_view(tensor: Tensor) -> Tensor:
    """`tensor` as a 2-D (out, rest) view sharing its storage; conv filters in NCHW or channels_last.

    In channels_last the columns come in (kh, kw, in) order rather than (in, kh, kw). Orthogonalising
    commutes with permuting columns, so the order does not change the update as long as the weight and
    its gradient use the same one (`matrix_like`).
    """
    if tensor.ndim == 2:
        return tensor
    if tensor.is_contiguous():
        return tensor.view(tensor.shape[0], -1)
    if tensor.ndim == 4 and tensor.is_contiguous(memory_format=torch.channels_last):
        return tensor.permute(0, 2, 3, 1).view(tensor.shape[0], -1)
    raise ValueError(
        f"no 2-D view of a tensor with shape {tuple(tensor.shape)} and strides {tensor.stride()}"
    )


def matrix_like(tensor: Tensor, weight: Tensor) -> Tensor:
    """`tensor` (e.g. a gradient) as a 2-D matrix whose columns follow `matrix_view(weight)`."""
    if tensor.ndim == 2:
        return tensor
    if weight.ndim == 4 and not weight.is_contiguous():  # channels_last weight: (out, kh, kw, in)
        return tensor.permute(0, 2, 3, 1).reshape(tensor.shape[0], -1)
    return tensor.reshape(tensor.shape[0], -1)


def shape_lr_factor(rows: int, cols: int) -> float:
    """Jordan's lr adjustment for a rows×cols update, sqrt(max(1, rows/cols)) (torch's "original")."""
    return math.sqrt(max(1.0, rows / cols))


class MuonSGD(torch.optim.Optimizer):
    """Muon on the groups marked `muon=True`, Nesterov/plain SGD (PyTorch semantics) on the others.

    One optimizer, so one lr schedule, one GradScaler and one state_dict cover every parameter.
    Group keys: lr, momentum, nesterov, weight_decay and muon. For Muon groups:
    - each weight is first rescaled to Frobenius norm sqrt(rows), as
      airbench94_muon does: the filters feed BatchNorm, so their scale does not change the function,
      and fixing it keeps the relative step size equal to the lr;
    - momentum is an EMA (torch.optim.Muon's form; the orthogonalisation removes its scale);
    - weight_decay is decoupled, p ← p·(1 − lr·wd);
    - the step is lr·sqrt(max(1, rows/cols)) times the orthogonalised (Nesterov) momentum.
    `orthogonalize`: Newton–Schulz's steps and whether it is compiled (`NewtonSchulz`).
    `backend`: "own" (foreach kernels and `newton_schulz`, compiled when `orthogonalize` says)
    or "torch" (torch.optim.Muon, the reference). The other groups step with torch.optim.SGD,
    fused when every parameter is on CUDA or `fused` (the kernel that takes a tensor lr on any
    device), foreach otherwise.
    """

    def __init__(
        self,
        params: Iterable[dict[str, Any]],
        *,
        lr: float,
        momentum: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
        orthogonalize: NewtonSchulz | None = None,
        backend: str = "own",
        fused: bool = False,
    ) -> None:
        orthogonalize = orthogonalize if orthogonalize is not None else NewtonSchulz()
        ns_steps = orthogonalize.steps
        defaults = dict(
            lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay, muon=False
        )
        super().__init__(params, defaults)
        if backend not in ("own", "torch"):
            raise ValueError(f"backend must be own or torch, not {backend!r}")
        if backend == "torch" and not has_torch_muon():
            raise ValueError(
                f"torch {torch.__version__} has no torch.optim.Muon; use backend='own'"
            )
        for group in self.param_groups:
            if group["nesterov"] and group["momentum"] <= 0:
                raise ValueError("Nesterov momentum needs momentum > 0")
            if group["muon"] and any(p.ndim < 2 for p in group["params"]):
                raise ValueError("Muon groups hold matrices and conv filters only (ndim >= 2)")
        self.ns_steps = ns_steps
        # airbench94_muon compiles its Newton–Schulz function with torch.compile's defaults.
        self.newton_schulz = (
            orthogonalize.compile(newton_schulz) if orthogonalize.compile else newton_schulz
        )
        self._sgd = self._build_sgd(lr, momentum, nesterov, fused)
        self._torch_muon: torch.optim.Optimizer | None = None
        self._matrices: dict[Tensor, nn.Parameter] = {}
        if backend == "torch":
            muon_groups = []
            for group in self._muon_groups():
                views = [self._matrix_param(p) for p in group["params"]]
                muon_groups.append(
                    {"params": views, "lr": group["lr"], "momentum": group["momentum"]}
                )
            if muon_groups:
                self._torch_muon = torch.optim.Muon(
                    muon_groups,
                    weight_decay=0.0,
                    nesterov=True,
                    ns_coefficients=NS_COEFFICIENTS,
                    eps=NS_EPS,
                    ns_steps=ns_steps,
                )  # adjust_lr_fn left at its default, Jordan's "original" sqrt(max(1, rows/cols))

    @property
    def backend(self) -> str:
        """Which code orthogonalises the filter updates: "torch" or "own"."""
        return "torch" if self._torch_muon is not None else "own"

    def _muon_groups(self) -> list[dict[str, Any]]:
        return [g for g in self.param_groups if g["muon"]]

    def _sgd_groups(self) -> list[dict[str, Any]]:
        return [g for g in self.param_groups if not g["muon"]]

    @property
    def fused(self) -> bool:
        """True when every group's step takes its lr on the device (the own Muon step and a fused
        SGD, or no SGD groups): what a CUDA graph of the step needs."""
        return self._torch_muon is None and (self._sgd is None or bool(self._sgd.defaults["fused"]))

    def _build_sgd(
        self, lr: float, momentum: float, nesterov: bool, fused: bool
    ) -> torch.optim.SGD | None:
        groups = self._sgd_groups()
        if not groups:
            return None
        on_cuda = all(p.is_cuda for g in groups for p in g["params"])
        kernels = {"fused": True} if on_cuda or fused else {"foreach": True}
        return torch.optim.SGD(
            [{"params": g["params"]} for g in groups],
            lr=lr,
            momentum=momentum,
            nesterov=nesterov,
            **kernels,
        )

    def _matrix_param(self, p: Tensor) -> nn.Parameter:
        """A 2-D Parameter sharing `p`'s storage, re-pointed if `p.data` was replaced since."""
        view = self._matrices.get(p)
        if view is None:
            view = self._matrices[p] = nn.Parameter(matrix_view(p.detach()), requires_grad=False)
        elif view.data_ptr() != p.data_ptr() or view.dtype != p.dtype:
            view.data = matrix_view(p.detach())
        return view

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._sgd is not None:
            for group, inner in zip(self._sgd_groups(), self._sgd.param_groups):
                for key in ("lr", "momentum", "nesterov", "weight_decay"):
                    inner[key] = group[key]
            self._sgd.step()
        if self._torch_muon is not None:
            self._torch_muon_step()
        else:
            for group in self._muon_groups():
                self._own_muon_step(group)
        return loss

    def _normalize(self, params: list[Tensor]) -> None:
        """Each filter rescaled to Frobenius norm sqrt(rows), in a few foreach kernels."""
        if not params:
            return
        scales = torch._foreach_norm(params)
        torch._foreach_clamp_min_(scales, NS_EPS)
        torch._foreach_reciprocal_(scales)
        torch._foreach_mul_(scales, [math.sqrt(p.shape[0]) for p in params])
        torch._foreach_mul_(params, scales)

    def _own_muon_step(self, group: dict[str, Any]) -> None:
        lr, momentum, wd = group["lr"], group["momentum"], group["weight_decay"]
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        self._normalize(params)
        grads = [matrix_like(p.grad, p) for p in params]
        buffers = []
        for p, grad in zip(params, grads):
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(grad)
            buffers.append(state["momentum_buffer"])
        torch._foreach_lerp_(buffers, grads, 1 - momentum)
        updates = torch._foreach_lerp(grads, buffers, momentum) if group["nesterov"] else buffers
        weights = [matrix_view(p) for p in params]
        if wd:
            torch._foreach_mul_(weights, 1 - lr * wd)  # a 0-d tensor when lr is one
        by_factor: dict[float, tuple[list[Tensor], list[Tensor]]] = {}
        for weight, update in zip(weights, updates):
            ws, us = by_factor.setdefault(shape_lr_factor(*weight.shape), ([], []))
            ws.append(weight)
            us.append(self.newton_schulz(update, self.ns_steps))
        for factor, (ws, us) in by_factor.items():
            if isinstance(lr, Tensor):  # alpha is a host number: scale the updates on the device
                steps = torch._foreach_mul([u.to(w.dtype) for w, u in zip(ws, us)], lr * -factor)
                torch._foreach_add_(ws, steps)
            else:
                torch._foreach_add_(ws, us, alpha=-lr * factor)

    def _torch_muon_step(self) -> None:
        for group, inner in zip(self._muon_groups(), self._torch_muon.param_groups):
            inner["lr"], inner["momentum"] = group["lr"], group["momentum"]
            inner["nesterov"], inner["weight_decay"] = group["nesterov"], group["weight_decay"]
            params = [p for p in group["params"] if p.grad is not None]
            self._normalize(params)
            for p in group["params"]:
                self._matrix_param(p).grad = None if p.grad is None else matrix_like(p.grad, p)
        self._torch_muon.step()
        for view in self._matrices.values():
            view.grad = None

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self._sgd is not None:
            state["sgd"] = self._sgd.state_dict()
        if self._torch_muon is not None:
            state["torch_muon"] = self._torch_muon.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        inner = state_dict.pop("torch_muon", None)
        sgd = state_dict.pop("sgd", None)
        super().load_state_dict(state_dict)
        if self._sgd is not None and sgd is not None:
            self._sgd.load_state_dict(sgd)
        if self._torch_muon is not None:
            if inner is None:  # saved by the own backend: its buffers are in the outer state
                raise ValueError("this MuonSGD state_dict was saved by the 'own' backend")
            self._torch_muon.load_state_dict(inner)
