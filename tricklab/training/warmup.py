"""The warm-up: every graph and kernel a timed run will meet, run once before it and timed apart."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import time
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from tricklab.core.device import synchronize
from tricklab.training.loop import (
    Parts,
    epoch_totals,
    evaluate,
    frozen_in_epoch,
    num_epochs,
    train_epoch,
)
from tricklab.training.resolve import compile_for_device


def needs_warm_up(tricks: Any, device: torch.device) -> bool:
    """Whether the first steps of each shape do one-off work that must stay out of train_seconds:
    torch.compile compiling; on CUDA, always: kernels loaded on their first call (lazy module
    loading), cuBLAS/cuDNN handles and workspaces made, the caching allocator growing, and cuDNN
    autotuning (tricks.cudnn_benchmark) timing its convolution algorithms; on a CPU too: oneDNN's
    kernels made for each shape and layout, thread pools started, memory first touched (a study's
    first run took 1.75x to 5x the train seconds of its later ones). An eager run warms up once
    per recipe and process (`warm_up_run`)."""
    return compile_for_device(tricks.compile, device.type) != "off" or device.type in (
        "cuda",
        "cpu",
    )


# Eager CUDA runs this process warmed: their device and recipe less run.seed (warm_up_run).
_WARMED: set[str] = set()


def warm_up_run(parts: Parts, recipe: Any) -> float:
    """`warm_up` before a run of `recipe`, unless this process warmed an eager run of an equal
    recipe (its run section aside: seed, epochs, targets) on the same device: its kernels are loaded, cuDNN's algorithms chosen
    and the allocator grown, so a second warm-up would only add ~0.1 s to each run of a study.
    Compiled runs always warm up (a new model's compile guards are checked there, and its
    compile_seconds is the record's). 0.0 when skipped."""
    key = None
    if compile_for_device(recipe.tricks.compile, parts.device.type) == "off":
        # the run section (epochs, seed, targets, loggers) changes no kernel: a speedrun's
        # shortened warm-up run warms its counted runs too
        key = f"{parts.device} {json.dumps({**recipe.to_dict(), 'run': None}, sort_keys=True, default=str)}"
        if key in _WARMED:
            return 0.0
    seconds = warm_up(parts, recipe.tricks.tta)
    if key is not None:
        _WARMED.add(key)
    return seconds


def warm_up(parts: Parts, tta: str = "none") -> float:
    """Run what a timed run runs, through the same functions, then restore every state; returns
    its seconds, so that compiling stays out of train_seconds.

    torch.compile guards on input shapes and strides, on requires_grad, on grad and inference
    mode: each kind below compiles once. Training: a full batch and the last, smaller batch of an
    epoch when the loader keeps it, both again with the parameters the loop freezes (the
    whitening bias after model.whiten_bias_epochs) frozen; each through the loop's own
    `train_epoch` (step, EMA and lookahead update, argmax) and `epoch_totals` (the finiteness
    check), twice, since CUDA graphs (compile modes reduce-overhead, max-autotune) are recorded
    on a function's second call. Evaluation, in each freeze state: `evaluate` on the first and
    last eval batches, made inside inference mode as in a timed evaluation, and again with the
    final evaluation's `tta` (its reflect-padded views have other strides)."""
    saved = copy.deepcopy(
        (
            parts.model.state_dict(),
            parts.optimizer.state_dict(),
            parts.scheduler.state_dict(),
            parts.scaler.state_dict(),
        )
    )
    loader = parts.train_loader
    # Freezing only grows with the epoch: the last epoch has every parameter the loop will freeze.
    frozen = [p for p in frozen_in_epoch(parts, num_epochs(parts) - 1) if p.requires_grad]
    synchronize(parts.device)
    start = time.perf_counter()
    images, labels = next(iter(loader))
    batches = [(images, labels)]
    rest = 0 if loader.drop_last else loader.num_samples % loader.batch_size
    if rest:
        batches.append((images[:rest], labels[:rest]))
    evaluation = dataclasses.replace(parts, eval_loader=FirstAndLast(parts.eval_loader))
    graph, parts.graph = parts.graph, None  # the run captures its own, after the restore below
    step = _first_average_step(parts)
    for freeze in (False, True) if frozen else (False,):
        for param in frozen:
            param.requires_grad_(not freeze)
        for batch in batches:
            for _ in range(2):
                parts.model.train()
                epoch_totals(parts, train_epoch(parts, iter([batch]), step))
                step += parts.ema.every if parts.ema else 1
        evaluate(evaluation)
        if tta != "none":
            evaluate(evaluation, tta)
    for param in frozen:
        param.requires_grad_(True)
    synchronize(parts.device)
    seconds = time.perf_counter() - start
    parts.model.load_state_dict(saved[0])
    parts.optimizer.load_state_dict(saved[1])
    parts.scheduler.load_state_dict(saved[2])
    parts.scaler.load_state_dict(saved[3])
    if parts.ema:
        parts.ema.average = None
    parts.graph = graph
    loader.set_epoch(0)
    return seconds


def _first_average_step(parts: Parts) -> int:
    """The first step (0-based) after which the EMA updates, so that warm-up steps reach it."""
    if parts.ema is None:
        return 0
    every = parts.ema.every
    return every * math.ceil((parts.ema.warmup_steps + 1) / every) - 1


class FirstAndLast:
    """The first and the last batch of a loader, drawn as its iteration draws them."""

    def __init__(self, loader: Iterable) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator:
        last = None
        for index, batch in enumerate(self.loader):
            if index == 0:
                yield batch
            else:
                last = batch
        if last is not None:
            yield last
