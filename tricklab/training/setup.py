"""A run's setup, from a recipe: the device, the data, the loaders and the model with every trick
(`prepare`), and `check_setup`, which builds all that once per distinct setting before an
experiment's first run."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from tricklab.core.device import synchronize
from tricklab.core.errors import TrickLabError
from tricklab.data.augment import channel_stats, normalize
from tricklab.data.loaders import (
    AugmentSpec,
    DeviceLoader,
    LoaderSpec,
    TorchLoader,
    batch_dtypes,
)
from tricklab.data.sources import Dataset, Sampling, load_dataset
from tricklab.measure.flops import count_forward_macs, count_params
from tricklab.models import build_model, set_batchnorm_momentum
from tricklab.recipe.schema import Recipe
from tricklab.training import distributed, precision
from tricklab.training.averaging import WeightAverage
from tricklab.training.backend import backend_settings, compiled
from tricklab.training.loggers import require_packages
from tricklab.training.loop import Parts
from tricklab.training.model_memory import check_model_fits
from tricklab.training.optim import build_optimizer
from tricklab.training.preflight import (
    check_activations_fit,
    check_batchnorm_batches,
    check_step_sizes,
)
from tricklab.training.resolve import for_device
from tricklab.training.schedule import build_scheduler

# Images used to compute data-dependent initialisations (airbench's whitening layer).
INIT_FROM_DATA_IMAGES = 5000


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
        cache_dir=d.cache_dir,
        sampling=Sampling(seed=d.seed, val_fraction=d.val_fraction),
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
        LoaderSpec(
            distributed.local_batch_size(lc.batch_size, recipe.optim.accumulate_steps),
            train=True,
            augment=spec,
            drop_last=lc.drop_last,
            rank=world.rank,
            world_size=world.world_size,
            **common,
        ),
    )
    shard = slice(world.rank, None, world.world_size)
    evaluation = cls(
        dataset.test.images[shard],
        dataset.test.labels[shard],
        LoaderSpec(lc.eval_batch_size, train=False, **common),
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
    check_batchnorm_batches(model, train_loader, dataset.image_shape, recipe)  # train/preflight
    check_activations_fit(recipe, dataset, train_loader, eval_loader)  # on the CPU
    loss_scale = precision.loss_scale_for(t.precision, train_loader.batch_size)  # a rank's
    optimizer = build_optimizer(
        model,
        recipe.optim,
        recipe.loader.batch_size,
        loss_scale=loss_scale,
        grad_scaler=t.precision == "16-mixed",
        compile_mode=t.compile,
    )
    check_step_sizes(optimizer, recipe)
    forward = model if t.compile == "off" else compiled(model, t.compile, device)
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
