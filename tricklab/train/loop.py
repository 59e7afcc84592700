"""The training loop: one screen, no callbacks. Tricks are prepared around it (see api.py)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from tricklab.train.averaging import WeightAverage
from tricklab.train.tta import tta_logits

# How often the loop syncs with an accelerator to check for a NaN loss and the time budget. A
# per-step check would stall the GPU's queue; the step a NaN first appeared is still recorded
# exactly. On the CPU, where nothing is queued, it checks every step.
CHECK_EVERY_STEPS = 25


@dataclass
class Parts:
    """Everything the loop touches, built from the recipe by `api.prepare`."""

    model: nn.Module  # the weights
    forward: Callable[[torch.Tensor], torch.Tensor]  # model, or torch.compile(model)
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    autocast: Callable[[], object]  # returns a fresh autocast context
    loss_fn: nn.Module
    train_loader: object
    eval_loader: object
    device: torch.device
    total_steps: int
    ema: WeightAverage | None = None
    freeze_after_epochs: dict[str, float] = field(default_factory=dict)  # param name -> epochs


@dataclass
class Outcome:
    status: str = "complete"
    epochs: list[dict] = field(default_factory=list)
    train_seconds: float = 0.0
    images_seen: int = 0
    diverged_step: int | None = None
    error: str | None = None  # why it diverged
    stopped_epoch: int | None = None
    time_to_target_seconds: float | None = None
    time_budget_reached: bool = False  # run.time_budget_seconds ended training before run.epochs


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step(
    p: Parts, images: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step; returns (loss, logits) without syncing."""
    with p.autocast():
        logits = p.forward(images)
        loss = p.loss_fn(logits, labels)
    p.optimizer.zero_grad(set_to_none=True)
    p.scaler.scale(loss).backward()
    p.scaler.step(p.optimizer)
    p.scaler.update()
    p.scheduler.step()
    return loss.detach(), logits.detach()


@torch.inference_mode()
def evaluate(p: Parts, tta: str = "none") -> tuple[float, float]:
    """(accuracy, mean cross-entropy) over the eval loader, with the EMA weights when there are any."""
    p.model.eval()
    loss_sum = torch.zeros((), device=p.device)
    correct = torch.zeros((), device=p.device, dtype=torch.long)
    count = 0
    with p.ema.swapped_in() if p.ema else contextlib.nullcontext():
        for images, labels in p.eval_loader:
            with p.autocast():
                logits = tta_logits(p.forward, images, tta).float()
            loss_sum += nn.functional.cross_entropy(logits, labels, reduction="sum")
            correct += (logits.argmax(1) == labels).sum()
            count += len(labels)
    return correct.item() / count, loss_sum.item() / count


def num_epochs(p: Parts) -> int:
    """Epochs the loop starts (the last one partial when run.epochs is fractional)."""
    return math.ceil(p.total_steps / len(p.train_loader))


def frozen_in_epoch(p: Parts, epoch: int) -> list[nn.Parameter]:
    """The parameters the loop no longer trains in `epoch` (0-based): model.whiten_bias_epochs."""
    return [
        param
        for name, param in p.model.named_parameters()
        if name in p.freeze_after_epochs and epoch >= p.freeze_after_epochs[name]
    ]


def run_loop(p: Parts, run, on_epoch: Callable[[dict], None] | None = None) -> Outcome:
    """Train for run.epochs (fractional allowed); evaluate every run.eval_every epochs and at the end."""
    out = Outcome()
    step, best, evals_since_best = 0, None, 0
    check_every = 1 if p.device.type == "cpu" else CHECK_EVERY_STEPS
    for epoch in range(num_epochs(p)):
        for param in frozen_in_epoch(p, epoch):
            param.requires_grad_(False)
        p.model.train()
        # Per-step results stay on the device, unreduced: appending costs no kernel launch, and
        # the epoch's sums take a few at its end.
        losses, predictions, targets = [], [], []
        checked, bad_step = 0, None  # losses[:checked] are known finite
        sync(p.device)
        start = time.perf_counter()
        for images, labels in p.train_loader:
            loss, logits = train_step(p, images, labels)
            if p.ema:
                p.ema.update(step)
            losses.append(loss)
            predictions.append(logits.argmax(1))
            targets.append(labels)
            step += 1
            if step % check_every == 0 or step == p.total_steps:
                bad_step, checked = _first_nonfinite(losses, checked), len(losses)
                if bad_step is not None:
                    break
                sync(p.device)
                if _over_budget(run, out.train_seconds + time.perf_counter() - start):
                    break
            if step >= p.total_steps:
                break
        if bad_step is None:
            bad_step = _first_nonfinite(losses, checked)
        sync(p.device)
        epoch_seconds = time.perf_counter() - start
        out.train_seconds += epoch_seconds
        seen = sum(len(t) for t in targets)
        out.images_seen += seen
        if bad_step is not None:
            out.status, out.stopped_epoch = "diverged", epoch + 1
            out.diverged_step = step - len(losses) + bad_step + 1
            out.error = f"loss became NaN/Inf at step {out.diverged_step}"
            break
        over_budget = _over_budget(run, out.train_seconds)
        if over_budget and step < p.total_steps:
            out.time_budget_reached, out.stopped_epoch = True, epoch + 1
        last = step >= p.total_steps or over_budget
        row = {
            "epoch": epoch + 1,
            "step": step,
            "train_loss": _weighted_sum(losses, targets) / seen,
            "train_acc": (torch.cat(predictions) == torch.cat(targets)).sum().item() / seen,
            "val_loss": None,
            "val_acc": None,
            "lr": p.optimizer.param_groups[0]["lr"],
            "epoch_seconds": epoch_seconds,
            "images_per_second": seen / epoch_seconds if epoch_seconds > 0 else None,
            "train_seconds": out.train_seconds,
        }
        if last or (run.eval_every > 0 and (epoch + 1) % run.eval_every == 0):
            row["val_acc"], row["val_loss"] = evaluate(p)
        out.epochs.append(row)
        if on_epoch:
            on_epoch(row)
        if row["val_loss"] is not None and not math.isfinite(row["val_loss"]):
            # Every training loss was finite, but the last updates broke the weights.
            out.status, out.diverged_step, out.stopped_epoch = "diverged", step, epoch + 1
            out.error = f"validation loss became NaN/Inf after step {step}"
            break
        if row["val_acc"] is not None:
            target = run.target_accuracy
            if (
                target is not None
                and out.time_to_target_seconds is None
                and row["val_acc"] >= target
            ):
                out.time_to_target_seconds = out.train_seconds
                if run.stop_at_target:
                    out.status, out.stopped_epoch = "reached-target", epoch + 1
                    break
            if run.early_stopping_patience > 0:
                score = (
                    row["val_acc"] if run.early_stopping_monitor == "val_acc" else -row["val_loss"]
                )
                if best is None or score > best + run.early_stopping_min_delta:
                    best, evals_since_best = score, 0
                else:
                    evals_since_best += 1
                if evals_since_best >= run.early_stopping_patience and not last:
                    out.status, out.stopped_epoch = "stopped-early", epoch + 1
                    break
        if last:
            break
    return out


def _first_nonfinite(losses: list[torch.Tensor], start: int) -> int | None:
    """Index of the first NaN/Inf in losses[start:] (one device sync), or None."""
    if start >= len(losses):
        return None
    if start == len(losses) - 1:  # one loss: a scalar read is cheaper than stacking
        return None if math.isfinite(losses[start].item()) else start
    bad = (~torch.isfinite(torch.stack(losses[start:]))).nonzero()
    return start + int(bad[0]) if len(bad) else None


def _weighted_sum(losses: list[torch.Tensor], targets: list[torch.Tensor]) -> float:
    """Sum over the epoch's images of their batch's mean loss."""
    sizes = torch.tensor([len(t) for t in targets], device=losses[0].device)
    return (torch.stack(losses).float() * sizes).sum().item()


def _over_budget(run, train_seconds: float) -> bool:
    return run.time_budget_seconds is not None and train_seconds >= run.time_budget_seconds
