"""The training loop: one screen, no callbacks. Tricks are prepared around it (see setup.py)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from tricklab.core.device import synchronize
from tricklab.core.status import Status
from tricklab.recipe.schema import RunConfig
from tricklab.training import distributed
from tricklab.training.averaging import WeightAverage
from tricklab.training.tta import tta_logits

if TYPE_CHECKING:
    from tricklab.core.progress import ProgressDisplay

# With run.time_budget_seconds, how often (in steps) the loop reads the time within an epoch: a
# read synchronises with an accelerator, whose queue then drains. Without a budget the loop reads
# the time (and syncs) only at each epoch's start and end.
CHECK_EVERY_STEPS = 25

OnEpoch = Callable[[dict], None]  # called with each epoch's row as it is recorded


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
    loss_scale: float = 1.0  # loss_fn's gradients / a mean loss's (a summed loss: the batch size)
    freeze_after_epochs: dict[str, float] = field(default_factory=dict)  # param name -> epochs
    progress: ProgressDisplay | None = None  # the CLI's display: counts batches on the host only
    accumulate_steps: int = 1  # micro-batches per optimizer step (optim.accumulate_steps)
    no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext  # DDP's
    # tricks.cuda_graph: the step captured and replayed (cudagraph.GraphedStep), else train_step
    graph: Callable[[torch.Tensor, torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]] | None = (
        None
    )


@dataclass
class Outcome:
    status: str = Status.COMPLETE
    epochs: list[dict] = field(default_factory=list)
    train_seconds: float = 0.0
    images_seen: int = 0
    diverged_step: int | None = None
    error: str | None = None  # why it diverged
    stopped_epoch: int | None = None
    time_to_target_seconds: float | None = None
    time_budget_reached: bool = False  # run.time_budget_seconds ended training before run.epochs


def train_step(
    parts: Parts, images: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step over the batch in optim.accumulate_steps micro-batches (nanoGPT's
    micro-step loop; one, the whole batch, without accumulation): each backward adds to the
    gradients before it, DDP's all-reduce skipped (no_sync) on all but the last. A mean loss is
    weighted by its micro-batch's share of the batch. Returns the batch's (loss, logits), as one
    forward of the whole batch gives them, without syncing."""
    parts.optimizer.zero_grad(set_to_none=True)
    micro = micro_batches(images, labels, parts.accumulate_steps)
    loss, logits = None, []
    for index, (part_images, part_labels) in enumerate(micro):
        with parts.no_sync() if index < len(micro) - 1 else contextlib.nullcontext():
            with parts.autocast():
                logits.append(parts.forward(part_images))
                part_loss = parts.loss_fn(logits[-1], part_labels)
            if len(micro) > 1 and parts.loss_fn.reduction != "sum":
                part_loss = part_loss * (len(part_labels) / len(labels))
            parts.scaler.scale(part_loss).backward()
        loss = part_loss.detach() if loss is None else loss + part_loss.detach()
    parts.scaler.step(parts.optimizer)
    parts.scaler.update()
    parts.scheduler.step()
    return loss, (logits[0] if len(logits) == 1 else torch.cat(logits)).detach()


def micro_batches(
    images: torch.Tensor, labels: torch.Tensor, parts: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The batch in `parts` micro-batches, as Tensor.chunk splits it (the last batch of an epoch
    may give fewer); the batch itself for one."""
    if parts == 1:
        return [(images, labels)]
    return list(zip(images.chunk(parts), labels.chunk(parts)))


@torch.inference_mode()
def evaluate(parts: Parts, tta: str = "none") -> tuple[float, float]:
    """(accuracy, mean cross-entropy) over the eval loader, with the EMA weights when there are any.

    The sums stay on the device and are read once, at the end."""
    parts.model.eval()
    loss_sum = torch.zeros((), device=parts.device)
    correct = torch.zeros((), device=parts.device, dtype=torch.long)
    count = 0
    with parts.ema.swapped_in() if parts.ema else contextlib.nullcontext():
        for images, labels in parts.eval_loader:
            with parts.autocast():
                logits = tta_logits(parts.forward, images, tta).float()
            loss_sum += nn.functional.cross_entropy(logits, labels, reduction="sum")
            correct += (logits.argmax(1) == labels).sum()
            count += len(labels)
    sums = correct.to(loss_sum.dtype), loss_sum, loss_sum.new_tensor(count)
    right, loss, count = read_on_host(*distributed.sum_over_ranks(*sums))  # every rank's share
    return right / count, loss / count


def num_epochs(parts: Parts) -> int:
    """Epochs the loop starts (the last one partial when run.epochs is fractional)."""
    return math.ceil(parts.total_steps / len(parts.train_loader))


def frozen_in_epoch(parts: Parts, epoch: int) -> list[nn.Parameter]:
    """The parameters the loop no longer trains in `epoch` (0-based): model.whiten_bias_epochs."""
    return [
        param
        for name, param in parts.model.named_parameters()
        if name in parts.freeze_after_epochs and epoch >= parts.freeze_after_epochs[name]
    ]


def run_loop(parts: Parts, run: RunConfig, on_epoch: OnEpoch | None = None) -> Outcome:
    """Train for run.epochs (fractional allowed); evaluate every run.eval_every epochs and at the end."""
    out, step = Outcome(), 0
    for epoch in range(num_epochs(parts)):
        for param in frozen_in_epoch(parts, epoch):
            param.requires_grad_(False)
        parts.model.train()
        batches = iter(parts.train_loader)  # the epoch's order and draws, before the timer
        if parts.progress:
            batches = parts.progress.batches(
                batches, epoch, num_epochs(parts), len(parts.train_loader), parts.total_steps
            )
        synchronize(parts.device)
        start = time.perf_counter()
        budget = run.time_budget_seconds
        deadline = None if budget is None else start + budget - out.train_seconds
        steps = train_epoch(parts, batches, step, deadline)
        synchronize(parts.device)
        epoch_seconds = distributed.slowest(time.perf_counter() - start, parts.device)
        out.train_seconds += epoch_seconds
        totals = epoch_totals(parts, steps)  # the epoch's one read of device values
        step += len(steps.losses)
        out.images_seen += totals.images
        if totals.first_nonfinite is None:
            row = _train_row(parts, epoch, step, epoch_seconds, out.train_seconds, totals)
            if _is_last(row, run, parts.total_steps) or _evaluation_due(run, epoch):
                start = time.perf_counter()  # epoch_totals has just read the device: it is idle
                row["val_acc"], row["val_loss"] = evaluate(parts)  # ends with a read: synced
                row["eval_seconds"] = time.perf_counter() - start
            out.epochs.append(row)
            if parts.progress:
                parts.progress.epoch_done(row)
            if on_epoch:
                on_epoch(row)
        bad = totals.first_nonfinite
        diverged_step = None if bad is None else step - len(steps.losses) + bad + 1
        if end_of_epoch(out, run, parts.total_steps, diverged_step):
            break
    return out


@dataclass
class EpochSteps:
    """What an epoch's steps leave on the device, unreduced: appending costs no kernel launch."""

    losses: list[torch.Tensor] = field(default_factory=list)
    predictions: list[torch.Tensor] = field(default_factory=list)
    targets: list[torch.Tensor] = field(default_factory=list)


def train_epoch(
    parts: Parts, batches: Iterator, step: int, deadline: float | None = None
) -> EpochSteps:
    """The steps of one epoch from global step `step` (0-based), with no host sync. With a
    `deadline` (a time.perf_counter() value: the time budget), it reads the time every
    CHECK_EVERY_STEPS steps, after a sync, and ends the epoch once past it."""
    out = EpochSteps()
    for images, labels in batches:
        if parts.graph:
            loss, logits = parts.graph(images, labels, step)
        else:
            loss, logits = train_step(parts, images, labels)
        if parts.ema:
            parts.ema.update(step)
        out.losses.append(loss)
        out.predictions.append(logits.argmax(1))
        out.targets.append(labels)
        step += 1
        if step >= parts.total_steps:
            break
        if deadline is not None and step % CHECK_EVERY_STEPS == 0:
            synchronize(parts.device)
            if distributed.any_rank(time.perf_counter() >= deadline, parts.device):
                break
    return out


@dataclass
class EpochTotals:
    images: int
    loss_sum: float  # over the epoch's images
    correct: int
    first_nonfinite: int | None  # index in the epoch of the first NaN/Inf loss


def epoch_totals(parts: Parts, steps: EpochSteps) -> EpochTotals:
    """The epoch's loss sum, correct predictions and first NaN/Inf loss, read in one copy.

    The losses are batch means (weighted here by their batch sizes) or, with a summed loss
    (16-true-bn32), batch sums. The first non-finite loss is found with argmax, not nonzero,
    whose output size depends on the data and needs a sync of its own."""
    losses = torch.stack(steps.losses).float()
    if parts.loss_fn.reduction != "sum":
        sizes = torch.full_like(losses, len(steps.targets[0]))
        sizes[-1] = len(steps.targets[-1])  # only the last batch can be smaller
        losses = losses * sizes
    bad = ~torch.isfinite(losses)
    first_bad = torch.where(bad.any(), bad.float().argmax(), -1).to(losses.dtype)
    correct = (torch.cat(steps.predictions) == torch.cat(steps.targets)).sum()
    reduced = distributed.reduce_epoch(first_bad, losses.sum(), correct.to(losses.dtype))
    first, loss_sum, right = read_on_host(*reduced)  # over all ranks, whose steps are equal
    return EpochTotals(
        images=sum(len(t) for t in steps.targets) * distributed.world().world_size,
        loss_sum=loss_sum,
        correct=int(right),
        first_nonfinite=None if first < 0 else int(first),
    )


def read_on_host(*values: torch.Tensor) -> list[float]:
    """Device scalars of one dtype as Python floats, in one copy to the host (one sync)."""
    return torch.stack(values).to("cpu", copy=True).tolist()


def end_of_epoch(
    out: Outcome, run: RunConfig, total_steps: int, diverged_step: int | None = None
) -> bool:
    """Whether training stops after the epoch whose row is `out.epochs[-1]`; why, recorded in `out`.

    In order: (1) a training loss became NaN/Inf at `diverged_step` (that epoch has no row);
    (2) the time budget ran out before the last step; (3) the validation loss is NaN/Inf;
    (4) the first evaluation at run.target_accuracy gives time-to-target, and ends training with
    run.stop_at_target; (5) early stopping: run.early_stopping_patience evaluations without an
    improvement of run.early_stopping_min_delta, before the last step; (6) the last step."""
    if diverged_step is not None:
        out.status, out.stopped_epoch = Status.DIVERGED, len(out.epochs) + 1
        out.diverged_step, out.error = diverged_step, f"loss became NaN/Inf at step {diverged_step}"
        return True
    row = out.epochs[-1]
    last = _is_last(row, run, total_steps)
    if last and row["step"] < total_steps:
        out.time_budget_reached, out.stopped_epoch = True, row["epoch"]
    if row["val_loss"] is not None and not math.isfinite(row["val_loss"]):
        # Every training loss was finite, but the last updates broke the weights.
        out.status, out.stopped_epoch = Status.DIVERGED, row["epoch"]
        out.diverged_step = row["step"]
        out.error = f"validation loss became NaN/Inf after step {row['step']}"
        return True
    if row["val_acc"] is None:
        return last
    target = run.target_accuracy
    if target is not None and out.time_to_target_seconds is None and row["val_acc"] >= target:
        out.time_to_target_seconds = row["train_seconds"]
        if run.stop_at_target:
            out.status, out.stopped_epoch = Status.REACHED_TARGET, row["epoch"]
            return True
    patience = run.early_stopping_patience
    if patience > 0 and not last and _evaluations_since_best(out.epochs, run) >= patience:
        out.status, out.stopped_epoch = Status.STOPPED_EARLY, row["epoch"]
        return True
    return last


def _evaluations_since_best(rows: list[dict], run: RunConfig) -> int:
    """Evaluations since the best score of run.early_stopping_monitor (by min_delta or more)."""
    best, since = None, 0
    for row in rows:
        if row["val_acc"] is None:
            continue
        score = row["val_acc"] if run.early_stopping_monitor == "val_acc" else -row["val_loss"]
        if best is None or score > best + run.early_stopping_min_delta:
            best, since = score, 0
        else:
            since += 1
    return since


def _is_last(row: dict, run: RunConfig, total_steps: int) -> bool:
    """The row's epoch is the run's last: its last step, or the time budget spent."""
    return row["step"] >= total_steps or _over_budget(run, row["train_seconds"])


def _evaluation_due(run: RunConfig, epoch: int) -> bool:
    return run.eval_every > 0 and (epoch + 1) % run.eval_every == 0


def _train_row(
    parts: Parts,
    epoch: int,
    step: int,
    epoch_seconds: float,
    train_seconds: float,
    totals: EpochTotals,
) -> dict:
    """The epoch's row of metrics.jsonl, its validation metrics still empty."""
    return {
        "epoch": epoch + 1,
        "step": step,
        "train_loss": totals.loss_sum / totals.images,
        "train_acc": totals.correct / totals.images,
        "val_loss": None,
        "val_acc": None,
        "eval_seconds": None,  # the evaluation's, when one ran (the final one: in record_seconds)
        # for a mean loss; a device tensor under tricks.cuda_graph (read here, after the epoch's sync)
        "lr": float(parts.optimizer.param_groups[0]["lr"]) * parts.loss_scale,
        "epoch_seconds": epoch_seconds,
        "images_per_second": totals.images / epoch_seconds if epoch_seconds > 0 else None,
        "train_seconds": train_seconds,
    }


def _over_budget(run: RunConfig, train_seconds: float) -> bool:
    return run.time_budget_seconds is not None and train_seconds >= run.time_budget_seconds
