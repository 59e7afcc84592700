"""The recipe's sections: every field of a run, grouped (data, model, optim, schedule, loader, aug,
tricks, run), each with its one-line doc, its allowed values and its bounds, and the rules between
fields beside them (each section's `check`, given the whole recipe). `schema.Recipe` holds one of
each; `tricklab tricks` prints them all.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from tricklab.core.errors import TrickLabError
from tricklab.core.sizes import MAX_SEED, MAX_WIDTH, MAX_WIDTH_SCALE
from tricklab.data.limits import MAX_IMAGE_SIZE
from tricklab.data.names import DATASET_NAMES, STORAGE_DTYPE_NAMES
from tricklab.recipe.coerce import shown

# Bounds of sizes that no CIFAR-scale run needs and that would otherwise fail at allocation (a
# 100,000-channel conv is 360 GB); a parameter-memory estimate checks what they let through.
MAX_BATCH = 65536
MAX_EPOCHS = 100_000
# model.name=package.module:factory (attribute path allowed) or timm:NAME
_MODEL_REFERENCE = re.compile(r"timm:\S+|[A-Za-z_][\w.]*(?<!\.):[A-Za-z_][\w.]*(?<!\.)")


def _f(
    default: Any,
    doc: str,
    choices: tuple | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    min_exclusive: bool = False,
    max_exclusive: bool = False,
) -> Any:
    """A recipe field with its doc, allowed values and bounds (inclusive, unless `min_exclusive`
    or `max_exclusive` leaves that end out: what coerce refuses is what `tricklab tricks` shows)."""
    meta = {"doc": doc, "choices": choices, "minimum": minimum, "maximum": maximum,
            "min_exclusive": min_exclusive, "max_exclusive": max_exclusive}  # fmt: skip
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class DataConfig:
    name: str = _f("cifar10", "dataset source", DATASET_NAMES)
    dir: str | None = _f(None, "folder holding the dataset files (default ~/.cache/tricklab/data)")
    train_size: int | None = _f(None, "seeded class-balanced subset of the train split", minimum=1)
    test_size: int | None = _f(None, "seeded class-balanced subset of the test split", minimum=1)
    image_size: int | None = _f(
        None, "resize images to this side length", minimum=1, maximum=MAX_IMAGE_SIZE
    )
    val_fraction: float = _f(
        0.1, "held-out fraction when the source has no test split", minimum=0, maximum=1
    )
    cache_dir: str | None = _f(None, "decoded-dataset cache (default ~/.cache/tricklab)")
    seed: int = _f(
        0,
        "seed of the subsets, the held-out split and synthetic images; apart from run.seed, so "
        "runs of every seed are trained and scored on the same images",
        minimum=0,
        maximum=MAX_SEED,
    )


@dataclass
class ModelConfig:
    name: str = _f(
        "resnet18",
        "a name from `tricklab models`, your package.module:factory, or timm:NAME (tricklab[timm])",
    )
    width: float = _f(1.0, "channel width multiplier", minimum=0, maximum=MAX_WIDTH_SCALE)
    widths: list[int] | None = _f(
        None, "explicit per-stage widths (airbench nets)", minimum=1, maximum=MAX_WIDTH
    )
    pretrained: bool = _f(False, "load ImageNet weights (torchvision families, timm:NAME)")
    bn_momentum: float | None = _f(
        None,
        "BatchNorm running-statistics momentum, PyTorch's meaning (weight of the new batch); "
        "unset: the model's own (0.1; airbench nets 0.4)",
        minimum=0,
        maximum=1,
    )
    whiten_bias_epochs: float = _f(
        0.0,
        "train the whitening conv's bias for this many whole epochs, then freeze it (airbench)",
        minimum=0,
        maximum=MAX_EPOCHS,
    )

    def check(self, recipe: Any) -> None:  # the whole Recipe
        _check_whole_epochs("model.whiten_bias_epochs", self.whiten_bias_epochs)
        if ":" in self.name and not _MODEL_REFERENCE.fullmatch(self.name):  # imported at build
            raise TrickLabError(
                f"model.name={self.name!r}: a name with ':' is package.module:factory or timm:NAME"
            )


@dataclass
class OptimConfig:
    name: str = _f("sgd", "optimizer", ("sgd", "adam", "adamw", "rmsprop", "muon"))
    lr: float = _f(
        0.1,
        "peak learning rate at reference_batch_size, before lr_scaling scales it to the batch",
        minimum=0,
    )
    momentum: float = _f(
        0.9,
        "momentum (sgd, muon; rmsprop and adam(w) keep PyTorch's defaults)",
        minimum=0,
        maximum=1,
    )
    nesterov: bool = _f(False, "Nesterov momentum (sgd)")
    weight_decay: float = _f(0.0, "L2 weight decay as PyTorch applies it", minimum=0)
    decoupled_weight_decay: bool = _f(
        False, "divide weight_decay by each group's lr so the decay per step ignores lr (airbench)"
    )
    no_decay_bn_bias: bool = _f(False, "no weight decay on normalization parameters and biases")
    bias_lr_mult: float = _f(
        1.0,
        "lr multiplier for normalization parameters (airbench's BatchNorm biases: 64); with "
        "optim.name=muon for every bias",
        minimum=0,
    )
    lr_scaling: str = _f(
        "none",
        "scale lr with batch size relative to reference_batch_size",
        ("none", "linear", "sqrt"),
    )
    reference_batch_size: int = _f(128, "batch size at which lr is given", minimum=1)
    muon_lr: float = _f(
        0.02, "Muon lr for conv filters (optim.name=muon; speedrun94-muon: 0.24)", minimum=0
    )
    muon_momentum: float = _f(0.95, "Muon momentum (optim.name=muon)", minimum=0, maximum=1)
    muon_ns_steps: int = _f(
        5,
        "Newton-Schulz iterations per Muon update (optim.name=muon; airbench94_muon: 3)",
        minimum=1,
        maximum=20,
    )
    fused: bool = _f(
        False, "fused optimizer step: one kernel for all parameters (sgd, adam, adamw)"
    )
    accumulate_steps: int = _f(
        1,
        "micro-batches per optimizer step: loader.batch_size (the global batch) runs as this "
        "many parts whose gradients add up, for a batch larger than memory allows",
        minimum=1,
        maximum=MAX_BATCH,
    )

    def check(self, recipe: Any) -> None:  # the whole Recipe
        if self.nesterov and self.momentum <= 0 and self.name in ("sgd", "muon"):
            raise TrickLabError("optim.nesterov=true needs optim.momentum > 0")
        if self.fused and self.name not in ("sgd", "adam", "adamw"):
            raise TrickLabError(
                f"optim.fused=true needs optim.name sgd, adam or adamw (PyTorch has no fused "
                f"{self.name})"
            )
        if recipe.loader.batch_size % self.accumulate_steps:
            raise TrickLabError(
                f"optim.accumulate_steps={self.accumulate_steps} must divide loader.batch_size="
                f"{recipe.loader.batch_size} (each micro-batch is an equal part of it)"
            )


@dataclass
class ScheduleConfig:
    name: str = _f(
        "constant",
        "lr schedule, stepped per iteration",
        ("constant", "step", "cosine", "piecewise-linear"),
    )
    warmup_fraction: float = _f(0.0, "linear warm-up from 0 over this fraction of steps", minimum=0)
    start_factor: float = _f(0.0, "piecewise-linear: lr factor at step 0", minimum=0)
    peak_fraction: float = _f(
        0.25, "piecewise-linear: fraction of steps at which lr peaks", minimum=0
    )
    final_factor: float = _f(0.0, "piecewise-linear/cosine: lr factor at the last step", minimum=0)
    milestones: list[float] = _f([0.5, 0.75], "step: fractions of training at which lr drops")
    gamma: float = _f(0.1, "step: lr factor at each milestone", minimum=0)

    def check(self, recipe: Any) -> None:  # the whole Recipe
        if not 0 <= self.peak_fraction <= 1 or not 0 <= self.warmup_fraction <= 1:
            raise TrickLabError("schedule fractions must lie in [0, 1]")
        if not all(0 <= m <= 1 for m in self.milestones):
            raise TrickLabError(
                f"schedule.milestones={shown(self.milestones)} must be fractions of training "
                "in [0, 1]"
            )


@dataclass
class LoaderConfig:
    kind: str = _f(
        "torch", "device: whole split on the device; torch: DataLoader", ("device", "torch")
    )
    batch_size: int = _f(128, "training batch size", minimum=1, maximum=MAX_BATCH)
    eval_batch_size: int = _f(1024, "evaluation batch size", minimum=1, maximum=MAX_BATCH)
    num_workers: int = _f(0, "torch loader worker processes", minimum=0, maximum=256)
    pin_memory: bool = _f(False, "torch loader: page-locked host memory")
    persistent_workers: bool = _f(False, "torch loader: keep workers between epochs")
    prefetch_factor: int | None = _f(
        None, "torch loader: batches prefetched per worker", minimum=1, maximum=64
    )
    drop_last: bool = _f(False, "drop the last incomplete training batch")
    storage_dtype: str = _f(
        "auto",
        "device loader: dtype the split is kept in, normalized, and its batches come out in; "
        "auto: tricks.precision's compute dtype as it runs (bf16-mixed: bfloat16, 16-mixed and "
        "16-true-bn32: float16, 32-true: float32); uint8: a quarter of float32's memory, "
        "normalized per batch",
        ("auto", *STORAGE_DTYPE_NAMES),
    )


@dataclass
class AugConfig:
    flip: str = _f("none", "horizontal flip", ("none", "random", "alternating"))
    translate: int = _f(
        0, "random crop from images padded by this many pixels", minimum=0, maximum=64
    )
    pad_mode: str = _f("reflect", "padding for translate", ("reflect", "zeros"))
    cutout: int = _f(
        0, "side of the zeroed square (Cutout), 0 = off", minimum=0, maximum=MAX_IMAGE_SIZE
    )
    cutout_inside: bool = _f(
        False, "Cutout square wholly inside the image (airbench96), not clipped at the border"
    )


@dataclass
class TricksConfig:
    label_smoothing: float = _f(0.0, "label smoothing of the cross-entropy", minimum=0, maximum=1)
    precision: str = _f(
        "32-true",
        "numeric precision; auto: decided from the device (docs/precision.md): 16-true-bn32 on "
        "CUDA GPUs with fp16 tensor cores (compute capability 7.0+; autocast for adam, adamw, "
        "rmsprop), bf16-mixed on CPUs with AMX (measured 1.9x faster), 32-true elsewhere; the run records "
        "what it ran as (result.json resolved.precision)",
        ("auto", "32-true", "16-mixed", "bf16-mixed", "16-true-bn32"),
    )
    channels_last: bool = _f(False, "NHWC memory format for model and inputs")
    compile: str = _f(
        "off",
        "torch.compile mode, compiled in warm-up steps timed apart; auto: max-autotune on CUDA "
        "(as the records compiled; its kernels inside tricks.cuda_graph's graph where that runs: "
        "max-autotune-no-cudagraphs), off elsewhere (a CPU does not gain); "
        "max-autotune-no-cudagraphs: max-autotune's kernels without its CUDA graphs, so that "
        "tricks.cuda_graph can capture them (as it captures default's)",
        ("off", "auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
    )
    matmul_precision: str = _f(
        "highest", "torch.set_float32_matmul_precision", ("highest", "high", "medium")
    )
    cudnn_benchmark: bool = _f(False, "cuDNN autotuning of convolution algorithms")
    sync_batchnorm: bool = _f(
        False,
        "data-parallel runs: BatchNorm statistics over the global batch, not each process's "
        "part (nn.SyncBatchNorm); no effect in one process",
    )
    ema_decay: float = _f(  # 1 would never move the average
        0.0, "EMA of weights, decay per update (0 = off)", minimum=0, maximum=1, max_exclusive=True
    )
    ema_every: int = _f(1, "update the EMA every k steps", minimum=1)
    ema_warmup_epochs: float = _f(
        0.0,
        "epochs before the EMA starts (it copies the weights then; airbench94: 0)",
        minimum=0,
        maximum=MAX_EPOCHS,
    )
    ema_decay_power: float = _f(
        0.0,
        "ramp the EMA decay as ema_decay x (step/total_steps)^power (airbench: 3); 0 = constant",
        minimum=0,
    )
    lookahead: bool = _f(False, "copy the EMA back into the model at each update (lookahead)")
    tta: str = _f("none", "test-time augmentation", ("none", "flip", "flip-translate"))
    cuda_graph: str = _f(
        "off",
        "capture the whole training step (lr schedule, forward, loss, backward, fused SGD or "
        "Muon) once in a CUDA graph and replay it (training/cudagraph.py; true = on). It needs "
        "optim.name=sgd or muon, one micro-batch per step, no GradScaler (not 16-mixed), one "
        "process. "
        "on: off with a note where no CUDA GPU runs; auto: on where it can be, else off, silently",
        ("off", "on", "auto"),
    )

    def check(self, recipe: Any) -> None:  # the whole Recipe
        if self.lookahead and self.ema_decay == 0:
            raise TrickLabError(
                "tricks.lookahead=true needs tricks.ema_decay > 0 (the slow-weight decay)"
            )
        optimizer = recipe.optim.name
        if self.cuda_graph == "on" and (why := cuda_graph_refusal(recipe)):
            raise TrickLabError(f"tricks.cuda_graph=on: {why}")
        if self.precision == "16-true-bn32" and optimizer in ("adam", "adamw", "rmsprop"):
            raise TrickLabError(
                f"tricks.precision=16-true-bn32 keeps {optimizer}'s state in fp16, where its eps "
                "(1e-8) rounds to 0 and the step divides by zero; use optim.name=sgd or muon, "
                "or tricks.precision=16-mixed / bf16-mixed"
            )


def cuda_graph_refusal(recipe: Any) -> str | None:
    """Why a CUDA graph cannot hold the recipe's training step (on any device), or None."""
    if recipe.optim.name not in ("sgd", "muon"):
        return (
            f"optim.name={recipe.optim.name} reads its lr on the host; the graph needs an "
            "optimizer that reads it on the device (optim.name=sgd or muon)"
        )
    if recipe.optim.accumulate_steps != 1:
        return "optim.accumulate_steps > 1 is not captured (one micro-batch per step)"
    if recipe.tricks.precision == "16-mixed":
        return "16-mixed's GradScaler skips steps on overflow; use 16-true-bn32 or bf16-mixed"
    return None


@dataclass
class RunConfig:
    epochs: float = _f(  # 0 would train nothing
        10.0,
        "training epochs (fractional allowed)",
        minimum=0,
        maximum=MAX_EPOCHS,
        min_exclusive=True,
    )
    seed: int = _f(0, "seed of weights, data order and augmentation", minimum=0, maximum=MAX_SEED)
    device: str = _f("auto", "where to train", ("auto", "cuda", "mps", "cpu"))
    eval_every: float = _f(
        1.0,
        "evaluate every this many whole epochs (the last epoch always; 0: only the last)",
        minimum=0,
        maximum=MAX_EPOCHS,
    )
    target_accuracy: float | None = _f(None, "record time-to-target at this val accuracy (0..1)")
    stop_at_target: bool = _f(False, "stop training when target_accuracy is reached")
    time_budget_seconds: float | None = _f(
        None,
        "stop training after this many train seconds (the time is read every 25 steps and at "
        "epoch ends: a sync on a GPU, made only when a budget is set)",
    )
    early_stopping_monitor: str = _f(
        "val_acc", "metric early stopping watches", ("val_acc", "val_loss")
    )
    early_stopping_patience: int = _f(
        0, "evaluations without improvement before stopping (0 = off)", minimum=0
    )
    early_stopping_min_delta: float = _f(
        0.0, "smallest change that counts as improvement", minimum=0
    )
    checkpoint: bool = _f(False, "write checkpoint.pt (weights) to the run directory")
    dist_timeout_seconds: float = _f(
        600.0,
        "data-parallel runs: how long a process waits for the others in a collective before it "
        "fails (a dead or hung process ends the run instead of hanging it); at most 7 days",
        minimum=1,
        maximum=7 * 24 * 3600,  # torch's timedelta overflows past about 1e14 s
    )
    loggers: list[str] = _f(
        ["jsonl"],
        "where each epoch's metrics go in the run folder: jsonl (metrics.jsonl), csv "
        "(metrics.csv), tensorboard (tensorboard/; tricklab[tensorboard]), wandb (wandb/; "
        "tricklab[wandb])",
    )
    wandb_project: str | None = _f(
        None, "W&B project of the wandb logger (unset: $WANDB_PROJECT, else tricklab)"
    )

    def check(self, recipe: Any) -> None:  # the whole Recipe
        target = self.target_accuracy
        if target is not None and not 0 < target <= 1:
            hint = f" ({target:g} % is {target / 100:g})" if 1 < target <= 100 else ""
            raise TrickLabError(f"run.target_accuracy={target} must be a fraction in (0, 1]{hint}")
        if self.stop_at_target and target is None:
            raise TrickLabError("run.stop_at_target=true needs run.target_accuracy")
        check_logger_names(self.loggers)
        _check_whole_epochs("run.eval_every", self.eval_every)
        if self.early_stopping_patience > 0 and self.eval_every == 0:
            raise TrickLabError(
                "run.early_stopping_patience needs evaluations to watch; set run.eval_every >= 1"
            )
        budget = self.time_budget_seconds
        if budget is not None and not budget > 0:
            raise TrickLabError(f"run.time_budget_seconds={budget} must be > 0 (or empty: none)")


def _check_whole_epochs(key: str, value: float) -> None:
    """The loop acts on these at epoch ends."""
    if value != int(value):
        raise TrickLabError(f"{key}={value} must be a whole number of epochs")


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "optim": OptimConfig,
    "schedule": ScheduleConfig,
    "loader": LoaderConfig,
    "aug": AugConfig,
    "tricks": TricksConfig,
    "run": RunConfig,
}


LOGGER_NAMES = ("jsonl", "csv", "tensorboard", "wandb")


def check_logger_names(names: list[str]) -> None:
    """TrickLabError for a name that is no logger (with a did-you-mean) or one given twice."""
    for name in names:
        if name not in LOGGER_NAMES:
            close = difflib.get_close_matches(name, LOGGER_NAMES, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise TrickLabError(
                f"run.loggers={shown(names)}: {shown(name)} is no logger; {hint}"
                f"choose from {', '.join(LOGGER_NAMES)}"
            )
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise TrickLabError(f"run.loggers={shown(names)} names {twice} twice")
