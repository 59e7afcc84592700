"""`train(recipe) -> RunResult`: build data, model and tricks from a recipe, run the loop, measure."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import io
import json
import math
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

import tricklab
from tricklab.data.augment import channel_stats, normalize
from tricklab.data.loaders import AugmentSpec, DeviceLoader, TorchLoader, batch_dtypes
from tricklab.data.sources import Dataset, load_dataset
from tricklab.errors import TrickLabError
from tricklab.measure.flops import count_forward_macs, count_params
from tricklab.measure.hardware import hardware_fingerprint
from tricklab.measure.memory import peak_memory, reset_peak_memory
from tricklab.measure.provenance import finish_record, start_record
from tricklab.measure.timing import synchronize
from tricklab.models import build_model, set_batchnorm_momentum
from tricklab.paths import (
    FolderClaim,
    atomic_write,
    claim_folder,
    claim_holder,
    disk_full_error,
    first_missing,
    is_disk_full,
    remove_empty_dirs,
)
from tricklab.progress import current as current_progress
from tricklab.stopping import INTERRUPTED_ERROR, Interrupted, StopRequest, is_interrupt
from tricklab.train import distributed, precision
from tricklab.train.averaging import WeightAverage
from tricklab.train.backend import backend_settings
from tricklab.train.loggers import RunLoggers, require_packages
from tricklab.train.loop import Outcome, Parts, evaluate, run_loop
from tricklab.train.model_memory import check_model_fits
from tricklab.train.optim import build_optimizer
from tricklab.train.recipe import Recipe
from tricklab.train.resolve import for_device
from tricklab.train.schedule import build_scheduler
from tricklab.train.warmup import needs_warm_up, warm_up

# Images used to compute data-dependent initialisations (airbench's whitening layer).
INIT_FROM_DATA_IMAGES = 5000
# What a run writes in its directory; a directory holding any of them is not reused.
RUN_FILES = ("recipe.yaml", "metrics.jsonl", "result.json", "checkpoint.pt")


@dataclass
class RunResult:
    """What one training run measured. `to_dict()` is what result.json holds."""

    status: str  # complete | stopped-early | reached-target | diverged | oom | failed | interrupted
    val_acc: float | None = None
    val_loss: float | None = None
    val_acc_tta: float | None = None
    val_loss_tta: float | None = None
    train_seconds: float = 0.0  # training epochs with batch loading, synced; no eval, no compile
    # airbench's total_time_seconds, each part synced and timed apart (no warm-up, no decoding):
    whiten_seconds: float = 0.0  # the whitening layer's fit on 5,000 train images (0: no layer)
    final_eval_seconds: float | None = None  # the final evaluation, with the recipe's TTA
    record_seconds: float | None = None  # whiten + train + final_eval; None: no final evaluation
    compile_seconds: float = 0.0  # warm-up (torch.compile, cuDNN autotuning), measured apart
    # what the device decided: tricks.compile (auto), tricks.precision (bf16 without bf16
    # tensor cores runs as 16-mixed), and in `notes` why anything differs from the recipe
    resolved: dict = field(default_factory=dict)
    wall_seconds: float = 0.0  # everything, data loading included
    time_to_target_seconds: float | None = None
    peak_memory_bytes: int | None = None
    peak_memory: dict = field(default_factory=dict)
    images_per_second: float | None = None
    epochs_completed: int = 0
    stopped_epoch: int | None = None
    time_budget_reached: bool = False  # run.time_budget_seconds stopped it (at stopped_epoch)
    diverged_step: int | None = None
    error: str | None = None
    traceback: str | None = None  # where a failed run broke
    params: int | None = None
    forward_macs: int | None = None
    epochs: list[dict] = field(default_factory=list)
    hardware: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)  # measure/provenance.py: command, git, load
    world_size: int = 1  # processes of a data-parallel run (torchrun), each on its batch share
    dist_backend: str | None = None  # their process group's: nccl, gloo; None: one process
    tricklab_version: str = tricklab.__version__
    recipe: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return json_safe(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def resolve_device(name: str) -> torch.device:
    """auto picks cuda, then mps, then cpu; asking for a missing device is an error."""
    has = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available(), "cpu": True}
    if name == "auto":
        name = next(d for d in ("cuda", "mps", "cpu") if has[d])
    if not has[name]:
        raise TrickLabError(
            f"run.device={name} but no {name} device is available; use run.device=auto"
        )
    return distributed.rank_device(torch.device(name))  # under torchrun: cuda:LOCAL_RANK


def load_data(recipe: Recipe) -> Dataset:
    d = recipe.data
    return load_dataset(
        d.name,
        d.dir,
        train_size=d.train_size,
        test_size=d.test_size,
        image_size=d.image_size,
        val_fraction=d.val_fraction,
        seed=d.seed,
        cache_dir=d.cache_dir,
    )


def build_loaders(
    recipe: Recipe, dataset: Dataset, device: torch.device, mean: list[float], std: list[float]
) -> tuple[Any, Any]:
    """Train and eval loaders of the recipe's kind, normalized with the given channel statistics."""
    lc, a, p = recipe.loader, recipe.aug, recipe.tricks.precision
    autocast = precision.AUTOCAST_DTYPES.get(p)  # batches in the dtype the model computes in
    dtype, storage = batch_dtypes(
        lc.storage_dtype if lc.kind == "device" else "auto",
        autocast or precision.input_dtype(p),
        autocast=autocast is not None,
    )
    common = dict(
        mean=mean,
        std=std,
        device=device,
        dtype=dtype,
        channels_last=recipe.tricks.channels_last,
        seed=recipe.run.seed,
    )
    if lc.kind == "device":
        cls = functools.partial(DeviceLoader, storage_dtype=storage)
    else:
        cls = functools.partial(
            TorchLoader,
            num_workers=lc.num_workers,
            pin_memory=lc.pin_memory,
            persistent_workers=lc.persistent_workers and lc.num_workers > 0,
            prefetch_factor=lc.prefetch_factor if lc.num_workers > 0 else None,
        )
    spec = AugmentSpec(
        flip=a.flip,
        translate=a.translate,
        pad_mode=a.pad_mode,
        cutout=a.cutout,
        cutout_inside=a.cutout_inside,
    )
    world = distributed.world()  # each rank: its share of every global batch, of the eval split
    train = cls(
        dataset.train.images,
        dataset.train.labels,
        distributed.local_batch_size(lc.batch_size, recipe.optim.accumulate_steps),
        train=True,
        augment=spec,
        drop_last=lc.drop_last,
        rank=world.rank,
        world_size=world.world_size,
        **common,
    )
    shard = slice(world.rank, None, world.world_size)
    evaluation = cls(
        dataset.test.images[shard],
        dataset.test.labels[shard],
        lc.eval_batch_size,
        train=False,
        **common,
    )
    return train, evaluation


def init_sample(images: torch.Tensor, seed: int) -> torch.Tensor:
    """A seeded random sample of the train split for data-dependent init (the whitening conv).

    Random, not the first images: an image folder's split is sorted by class, so its first 5,000
    images would all be one class and the whitening fitted to airplanes alone."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(images), generator=generator)[:INIT_FROM_DATA_IMAGES]
    return images[order]


class SetupCache:
    """What `prepare` built, by what it read: recipes that build a part alike share it (a part
    that failed fails again without being rebuilt)."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def get(self, part: str, *reads: Any, make: Callable[[], Any]) -> Any:
        key = json.dumps([part, *reads], sort_keys=True, default=str)
        if key not in self._built:
            try:
                self._built[key] = make()
            except Exception as exc:
                self._built[key] = exc
        if isinstance(self._built[key], Exception):
            raise self._built[key]
        return self._built[key]


def prepare(
    recipe: Recipe, dataset: Dataset, device: torch.device, reuse: SetupCache | None = None
) -> tuple[Parts, dict]:
    """Model, optimizer, schedule and every trick of the recipe, ready for `run_loop`; info holds
    the model's size and what the device decided (`resolved`).

    With `reuse` (check_setup's), the model and loaders of an earlier recipe that builds them alike
    are taken again instead of being built."""
    recipe, resolved = for_device(recipe, device)
    t, m = recipe.tricks, recipe.model
    reuse = reuse if reuse is not None else SetupCache()  # a run builds everything anew
    reuse.get(
        "fits",  # what check_model_fits reads
        m, recipe.data, t.precision, t.ema_decay, recipe.optim.name, recipe.optim.momentum, device,
        make=lambda: check_model_fits(recipe, dataset.num_classes, dataset.image_shape, device),
    )  # fmt: skip
    mean, std = reuse.get("stats", recipe.data, make=lambda: channel_stats(dataset.train.images))
    built_with = (recipe.data, recipe.run.seed, t.precision, t.channels_last, device)
    model, info = reuse.get(
        "model", m, *built_with, make=lambda: build_run_model(recipe, dataset, device, mean, std)
    )
    info = {**info, "resolved": resolved}
    train_loader, eval_loader = reuse.get(
        "loaders",
        recipe.loader,
        recipe.aug,
        *built_with,
        make=lambda: build_loaders(recipe, dataset, device, mean, std),
    )
    freeze = {}
    if m.whiten_bias_epochs > 0:
        if "whiten.bias" not in dict(model.named_parameters()):  # what the loop freezes
            raise TrickLabError(
                f"model.whiten_bias_epochs={m.whiten_bias_epochs:g} trains the bias of a whitening "
                f"layer `whiten` (airbench's), and {m.name} has none; set model.whiten_bias_epochs=0"
            )
        freeze["whiten.bias"] = m.whiten_bias_epochs
    total_steps = math.ceil(recipe.run.epochs * len(train_loader))
    if total_steps < 1:
        raise TrickLabError(f"run.epochs={recipe.run.epochs} gives no training step; raise it")
    loss_scale = precision.loss_scale_for(t.precision, train_loader.batch_size)  # a rank's
    optimizer = build_optimizer(
        model,
        recipe.optim,
        recipe.loader.batch_size,
        loss_scale=loss_scale,
        grad_scaler=t.precision == "16-mixed",
        compile_mode=t.compile,
    )
    forward = model if t.compile == "off" else torch.compile(model, mode=t.compile)
    ema = None
    if t.ema_decay > 0:
        # In epochs, not steps, so the start moves with the data size and batch (a subset, a CPU run).
        warmup_steps = math.ceil(t.ema_warmup_epochs * len(train_loader))
        ema = WeightAverage(
            model,
            t.ema_decay,
            t.ema_every,
            warmup_steps,
            t.lookahead,
            t.ema_decay_power,
            total_steps,
        )
    parts = Parts(
        model=model,
        forward=forward,
        optimizer=optimizer,
        scheduler=build_scheduler(optimizer, recipe.schedule, total_steps),
        scaler=precision.grad_scaler_for(t.precision, device.type),
        autocast=functools.partial(precision.autocast_for, t.precision, device.type),
        loss_fn=precision.loss_for(t.precision, t.label_smoothing),
        train_loader=train_loader,
        eval_loader=eval_loader,
        device=device,
        total_steps=total_steps,
        ema=ema,
        loss_scale=loss_scale,
        freeze_after_epochs=freeze,
        accumulate_steps=recipe.optim.accumulate_steps,
    )
    return parts, info


def build_run_model(
    recipe: Recipe, dataset: Dataset, device: torch.device, mean: list[float], std: list[float]
) -> tuple[nn.Module, dict]:
    """The recipe's model on `device` as a run starts it (seeded weights, the whitening fitted to
    the data, BatchNorm momentum, precision, memory format), with its params and forward MACs.
    It reads the data, `model`, `run.seed` and `tricks.precision`/`channels_last` only."""
    t, m = recipe.tricks, recipe.model
    torch.manual_seed(recipe.run.seed)
    c, h, w = dataset.image_shape
    model = build_model(
        m.name,
        num_classes=dataset.num_classes,
        in_channels=c,
        image_size=h,
        width=m.width,
        widths=m.widths,
        pretrained=m.pretrained,
    ).to(device)
    info = {"params": count_params(model), "forward_macs": count_forward_macs(model, (1, c, h, w))}
    init = getattr(model, "init_from_data", None)
    info["whiten_seconds"] = 0.0
    if init is not None:  # timed as airbench times it: normalizing the sample and the fit
        sample = init_sample(dataset.train.images, recipe.run.seed).to(device)
        synchronize(device)
        start = time.perf_counter()
        init(normalize(sample, mean, std))
        synchronize(device)
        info["whiten_seconds"] = time.perf_counter() - start
    if m.bn_momentum is not None:
        set_batchnorm_momentum(model, m.bn_momentum)
    if t.precision == "16-true-bn32":
        precision.half_with_fp32_batchnorm(model)
    if t.channels_last:
        precision.apply_channels_last(model)
    return model, info


def check_setup(recipes: Iterable[Recipe]) -> None:
    """Raise the TrickLabError that a run of any of `recipes` would meet before its first step
    (device, data, model, loaders, optimizer: all that `train` builds). Experiments call it before
    their first run, so that bad input stops them at once instead of failing every run. Other
    errors are left for the runs to meet and record.

    Each distinct data source, model and loader setting is built once, however many recipes share
    it (seeds aside); the optimizer, schedule and averaging are set up for each distinct recipe."""
    reuse, seen = SetupCache(), set()
    for recipe in recipes:
        recipe = dataclasses.replace(recipe, run=dataclasses.replace(recipe.run, seed=0))
        key = json.dumps(recipe.to_dict(), sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        try:
            device = resolve_device(recipe.run.device)
            require_packages(recipe.run.loggers)
            dataset = reuse.get("data", recipe.data, make=functools.partial(load_data, recipe))
            with backend_settings(recipe.tricks.matmul_precision, recipe.tricks.cudnn_benchmark):
                prepare(recipe, dataset, device, reuse)
        except TrickLabError:
            raise
        except Exception:  # the run meets it and records it (oom, failed) with its message
            pass


def train(
    recipe: Recipe,
    *,
    out_dir: str | Path | None = None,
    on_epoch: Callable[[dict], None] | None = None,
    stop: StopRequest | None = None,
) -> RunResult:
    """Train one model as the recipe says and return what was measured.

    With `out_dir`, writes recipe.yaml (resolved), metrics.jsonl (a line per epoch), result.json and,
    with run.checkpoint, checkpoint.pt. How the run ended is decided here, once (`run_end`), and
    is the result's status: complete (or stopped-early, reached-target), diverged (NaN loss), oom,
    failed (an unexpected error: its message in `error`, its traceback in `traceback`), all
    returned; interrupted (Ctrl-C, SIGTERM, or `stop` requested) raises RunInterrupted, which
    carries the result. `stop` is checked at each epoch end and when the run ends, so a stop whose
    KeyboardInterrupt Python dropped still ends the run. Exceptions raised by `on_epoch` (e.g.
    optuna.TrialPruned) propagate, with result.json recording the epochs so far. Bad input
    (TrickLabError) found while setting up (data, model, tricks) propagates with nothing written:
    no run directory is left behind. The run directory is claimed before anything is written
    (one run at a time: a second one is refused); a full disk raises TrickLabError naming the
    disk, with the files this run wrote removed, so the same call runs again once there is space."""
    wall_start = time.perf_counter()
    if isinstance(out_dir, str) and not out_dir.strip():
        raise TrickLabError("the run directory name is empty")
    main = distributed.world().is_main  # under torchrun, rank 0 alone writes the run folder
    out = Path(out_dir) if out_dir is not None and main else None
    device = resolve_device(recipe.run.device)
    # a missing package, a logger without a folder: refused before the folder is made
    loggers = RunLoggers(recipe, out, has_folder=out_dir is not None)
    created = first_missing(out) if out is not None else None  # what to remove if setup fails
    claim = None
    try:
        claim = _make_run_dir(out) if out is not None else None
        return _train(recipe, out, device, on_epoch, stop, wall_start, loggers)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        if out is not None:  # nothing half kept: the folder is as it was before the run
            for name in RUN_FILES:
                with contextlib.suppress(OSError):
                    (out / name).unlink(missing_ok=True)
        raise disk_full_error(exc, out) from None
    finally:
        loggers.close()  # however the run ended: files flushed, the W&B run finished
        if claim is not None:
            claim.release()
        if out is not None:
            remove_empty_dirs(out, created)


def _train(
    recipe: Recipe,
    out: Path | None,
    device: torch.device,
    on_epoch: Callable[[dict], None] | None,
    stop: StopRequest | None,
    wall_start: float,
    loggers: RunLoggers,
) -> RunResult:
    """`train` in a claimed run directory (or none)."""
    result = RunResult(
        status="failed",
        recipe=recipe.to_dict(),
        hardware=hardware_fingerprint(device),
        provenance=start_record(device),
        world_size=distributed.world().world_size,
        dist_backend=distributed.world().backend,
    )
    started = False
    callback_error: list[BaseException] = []  # what the caller's on_epoch raised, if anything

    def record_epoch(row: dict) -> None:
        result.epochs.append(row)
        loggers.log_epoch(json_safe(row))  # as metrics.jsonl holds it: NaN as None
        if stop is not None:
            stop.check()
        if on_epoch is not None:
            try:
                on_epoch(row)
            except Exception as exc:
                callback_error.append(exc)
                raise

    try:
        dataset = load_data(recipe)
        reset_peak_memory(device)
        with (
            backend_settings(recipe.tricks.matmul_precision, recipe.tricks.cudnn_benchmark),
            warnings.catch_warnings(),
        ):
            # GradScaler skips the steps whose fp16 gradients overflow (the first ones, while it
            # finds its scale); the schedule steps anyway, and torch warns as if it were a mistake.
            warnings.filterwarnings(
                "ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before"
            )
            parts, info = prepare(recipe, dataset, device)
            parts = distributed.data_parallel(
                parts, recipe.tricks.sync_batchnorm, info["resolved"]["compile"]
            )
            result.params, result.forward_macs = info["params"], info["forward_macs"]
            result.whiten_seconds = info["whiten_seconds"]
            result.resolved = info["resolved"]
            if out is not None:
                with atomic_write(out / "recipe.yaml") as handle:
                    handle.write(recipe.to_yaml())
            started = True
            loggers.open(result)  # run.loggers: metrics.jsonl, ...
            if needs_warm_up(recipe.tricks, device):
                result.compile_seconds = warm_up(parts, recipe.tricks.tta)
            parts.progress = current_progress()  # the CLI's display; None: silent
            outcome = run_loop(parts, recipe.run, record_epoch)
            _finish(result, parts, outcome, recipe)
            if recipe.run.checkpoint and out is not None and outcome.status != "diverged":
                save_checkpoint(parts.model, recipe, out / "checkpoint.pt")
        if stop is not None:
            stop.check()  # a stop whose KeyboardInterrupt Python dropped during the last epoch
        _record_peak_memory(result, device)
    except BaseException as exc:
        if (isinstance(exc, TrickLabError) and not started) or is_disk_full(exc):
            raise  # nothing recorded: train() removes what was written and the folders it made
        _record_peak_memory(result, device)  # for an oom run, the number that matters most
        result.status, result.error = run_end(exc, stop)
        if result.status == "failed":
            result.traceback = "".join(traceback.format_exception(exc))
        result.epochs_completed = len(result.epochs)
        if result.epochs:
            result.train_seconds = result.epochs[-1]["train_seconds"]
        # Raised on: the caller's own exception, a user mistake met mid-run, and a stop (the
        # caller must stop too). An oom or a failed run is returned; its memory is freed below,
        # outside `except`, whose traceback keeps the run's tensors alive.
        raised = isinstance(exc, TrickLabError) or exc in callback_error
        if raised or result.status == "interrupted":
            result.wall_seconds = time.perf_counter() - wall_start
            result.provenance = finish_record(result.provenance)
            if out is not None:
                _write_json_atomic(out / "result.json", result.to_dict())
            if result.status == "interrupted" and not isinstance(exc, SystemExit):
                raise RunInterrupted(result) from exc
            raise
    if result.status in ("oom", "failed"):  # free what the run held, so the next run can go on
        parts = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    result.wall_seconds = time.perf_counter() - wall_start
    result.provenance = finish_record(result.provenance)
    if out is not None:
        _write_json_atomic(out / "result.json", result.to_dict())
    return result


class RunInterrupted(Interrupted):
    """A run stopped by Ctrl-C or SIGTERM; `result` is its RunResult, status interrupted, with the
    epochs it finished (and result.json holds it when the run had a directory)."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(result.error)
        self.result = result


def run_end(exc: BaseException, stop: StopRequest | None = None) -> tuple[str, str]:
    """How a run that raised `exc` ended, as (status, error): `interrupted` for Ctrl-C, SIGTERM or
    an exit, and for any error once a stop was requested (a library may turn the KeyboardInterrupt
    into an error of its own); `oom` for out of memory; `failed` for anything else."""
    if is_interrupt(exc) or (stop is not None and stop.requested):
        return "interrupted", INTERRUPTED_ERROR
    if oom := out_of_memory_error(exc):
        return "oom", oom
    return "failed", f"{type(exc).__name__}: {exc}"


def _record_peak_memory(result: RunResult, device: torch.device) -> None:
    result.peak_memory = peak_memory(device)
    result.peak_memory_bytes = result.peak_memory["peak_memory_bytes"]


def out_of_memory_error(exc: BaseException) -> str | None:
    """The one-line error of an out-of-memory (torch.cuda.OutOfMemoryError, a CUDA error from a
    library such as cuBLAS or cuDNN: `CUDA error: out of memory`, the CPU allocator's `can't
    allocate memory`); None for other errors."""
    text = str(exc).lower()
    oom = isinstance(exc, torch.cuda.OutOfMemoryError) or (
        isinstance(exc, RuntimeError)
        and ("out of memory" in text or "can't allocate memory" in text)  # CPU: DefaultCPUAllocator
    )
    if not oom:
        return None
    return str(exc).splitlines()[0] if str(exc) else "out of memory"


def json_safe(value: Any) -> Any:
    """`value` with NaN and infinities as None: strict JSON (RFC 8259) has no such numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _finish(result: RunResult, parts: Parts, outcome: Outcome, recipe: Recipe) -> None:
    """Fill the result from the loop's outcome; the final TTA evaluation happens here, timed as
    airbench times it (record_seconds: whitening fit + epochs + this evaluation, or without TTA
    the last epoch's evaluation, which is then the final one)."""
    result.status = outcome.status
    result.epochs = outcome.epochs
    result.epochs_completed = len(outcome.epochs)
    result.train_seconds = outcome.train_seconds
    result.images_per_second = (
        outcome.images_seen / outcome.train_seconds if outcome.train_seconds > 0 else None
    )
    result.stopped_epoch, result.diverged_step = outcome.stopped_epoch, outcome.diverged_step
    result.time_to_target_seconds = outcome.time_to_target_seconds
    result.time_budget_reached = outcome.time_budget_reached
    if outcome.status == "diverged":
        result.error = outcome.error
        return
    evaluated = [row for row in outcome.epochs if row["val_acc"] is not None]
    if evaluated:
        result.val_acc, result.val_loss = evaluated[-1]["val_acc"], evaluated[-1]["val_loss"]
    synchronize(parts.device)
    start = time.perf_counter()
    if parts.ema is not None:
        parts.ema.copy_to_model()
        parts.ema = None
    if recipe.tricks.tta != "none":
        result.val_acc_tta, result.val_loss_tta = evaluate(parts, recipe.tricks.tta)
        synchronize(parts.device)
        result.final_eval_seconds = time.perf_counter() - start
    elif outcome.epochs:
        result.final_eval_seconds = outcome.epochs[-1].get("eval_seconds")
    if result.final_eval_seconds is not None:
        result.record_seconds = (
            result.whiten_seconds + result.train_seconds + result.final_eval_seconds
        )


def _make_run_dir(out: Path) -> FolderClaim:
    """Make `out` and claim it for this run (paths.claim_folder: one run at a time), refusing it
    when another run writes there or a run is already in it."""
    blocking = next((f for f in [out, *out.parents] if f.exists() and not f.is_dir()), None)
    if blocking is not None:
        raise TrickLabError(
            f"cannot make the run directory {out}: {blocking} is a file, not a folder"
        )
    try:
        for attempt in range(3):  # a run whose setup failed may remove the folder meanwhile
            out.mkdir(parents=True, exist_ok=True)
            try:
                claim = claim_folder(out)  # also proves the folder writable
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(exc, out) from None
        raise TrickLabError(f"cannot write the run directory {out}: {exc.strerror}") from None
    if claim is None:
        raise TrickLabError(
            f"run directory {out} is being written by another run ({claim_holder(out)}); "
            "give another one"
        )
    previous = [name for name in RUN_FILES if (out / name).exists()]
    if previous:
        claim.release()
        raise TrickLabError(
            f"run directory {out} already holds a run ({', '.join(previous)}); "
            "give another one or remove it"
        )
    return claim


def _write_json_atomic(path: Path, data: dict) -> None:
    with atomic_write(path) as handle:
        handle.write(json.dumps(data, indent=2))


def save_checkpoint(model: nn.Module, recipe: Recipe, path: str | Path) -> None:
    """Weights and the resolved recipe, written atomically (temp file, fsync, rename). Serialised
    in memory first: torch's writer turns a full disk into a RuntimeError without its errno."""
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "recipe": recipe.to_dict()}, buffer)
    with atomic_write(Path(path), "wb") as handle:
        handle.write(buffer.getbuffer())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """A checkpoint written by `save_checkpoint`, loaded with weights_only=True (no code runs)."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise TrickLabError(f"checkpoint {path} does not exist") from None
    except Exception as exc:  # torch raises several kinds for a corrupt file
        raise TrickLabError(f"checkpoint {path} cannot be loaded: {type(exc).__name__}") from None
