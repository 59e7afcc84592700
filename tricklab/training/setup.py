"""A run's setup, from a recipe: the device, the data, the loaders and the model with every trick
(`prepare`), and `check_setup`, which builds all that once per distinct setting before an
experiment's first run.

The parts worth sharing are built by functions that read nothing but their arguments
(`build_run_model(ModelInputs, ...)`, `build_loaders(LoaderInputs, ...)`), and `SetupCache` keys on
those arguments: a recipe that changes any input gets its own part."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tricklab.core.device import synchronize
from tricklab.core.errors import TrickLabError
from tricklab.core.usercode import checked_if
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
from tricklab.models import build_model, is_own_model, set_batchnorm_momentum
from tricklab.models.own import check_returned
from tricklab.recipe.schema import (
    AugConfig,
    DataConfig,
    LoaderConfig,
    ModelConfig,
    Recipe,
    TricksConfig,
)
from tricklab.training import distributed
from tricklab.training.averaging import WeightAverage
from tricklab.training.backend import backend_settings, compiled
from tricklab.training.compile_cache import check_compile_cache
from tricklab.training.cudagraph import GraphedStep
from tricklab.training.loggers import require_packages
from tricklab.training.loop import Parts
from tricklab.training.loss import training_loss
from tricklab.training.model_memory import check_model_fits, own_model_code
from tricklab.training.optim import build_optimizer
from tricklab.training.precision import PrecisionPolicy, apply_channels_last
from tricklab.training.preflight import check_own_model, check_run, check_run_forward
from tricklab.training.resolve import for_device
from tricklab.training.runlock import check_not_training
from tricklab.training.schedule import build_scheduler

# Images used to compute data-dependent initialisations (airbench's whitening layer).
INIT_FROM_DATA_IMAGES = 5000


def resolve_device(name: str) -> torch.device:
    """auto picks cuda, then mps, then cpu; asking for a missing device is an error."""
    has = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available(), "cpu": True}
    if name == "auto":
        name = next(d for d in ("cuda", "mps", "cpu") if has[d])
    if not has.get(name):  # an unknown name too (a Python caller's): none is available
        raise TrickLabError(
            f"run.device={name} but no {name} device is available; use run.device=auto"
        )
    return distributed.rank_device(torch.device(name))  # under torchrun: cuda:LOCAL_RANK


@dataclass
class _Shared:
    """What `sharing_data` shares: the last data section loaded, its dataset and train statistics."""

    key: str | None = None
    dataset: Dataset | None = None
    stats: tuple[list[float], list[float]] | None = None


_SHARED_DATA: contextvars.ContextVar[_Shared | None] = contextvars.ContextVar(
    "tricklab_shared_data", default=None
)


@contextlib.contextmanager
def sharing_data() -> Iterator[None]:
    """Within the block, `load_data` hands an equal data section the dataset it loaded last instead
    of reading the decoded cache again, and `train_stats` computes its channel statistics once (on
    an H200 machine ~0.2 s of each speedrun94 run, the cache read ~0.1 s). Nothing in tricklab
    writes into a dataset's tensors; one copy is kept, so a sweep over data settings holds no more."""
    token = _SHARED_DATA.set(_Shared())
    try:
        yield
    finally:
        _SHARED_DATA.reset(token)


def load_data(source: Recipe | DataConfig) -> Dataset:
    """The dataset of a recipe's `data` section (or of that section itself)."""
    d = source.data if isinstance(source, Recipe) else source
    shared = _SHARED_DATA.get()
    key = json.dumps(dataclasses.asdict(d), sort_keys=True, default=str)
    if shared is not None and shared.key == key:
        return shared.dataset
    dataset = load_dataset(
        d.name,
        d.dir,
        train_size=d.train_size,
        test_size=d.test_size,
        image_size=d.image_size,
        cache_dir=d.cache_dir,
        sampling=Sampling(seed=d.seed, val_fraction=d.val_fraction),
    )
    if shared is not None:
        shared.key, shared.dataset, shared.stats = key, dataset, None
    return dataset


def train_stats(dataset: Dataset) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of the train images (the inputs' normalization)."""
    shared = _SHARED_DATA.get()
    if shared is None or shared.dataset is not dataset:
        return channel_stats(dataset.train.images)
    if shared.stats is None:
        shared.stats = channel_stats(dataset.train.images)
    return shared.stats


@dataclass(frozen=True)
class ModelInputs:
    """All that `build_run_model` reads besides the data: the model's part of its cache key."""

    model: ModelConfig
    seed: int  # run.seed: the initial weights
    policy: PrecisionPolicy
    channels_last: bool
    device: torch.device

    @classmethod
    def of(cls, recipe: Recipe, policy: PrecisionPolicy, device: torch.device) -> ModelInputs:
        t = recipe.tricks
        return cls(recipe.model, recipe.run.seed, policy, t.channels_last, device)


@dataclass(frozen=True)
class LoaderInputs:
    """All that `build_loaders` reads besides the data: the loaders' part of their cache key."""

    loader: LoaderConfig
    aug: AugConfig
    policy: PrecisionPolicy  # the batches' dtype
    channels_last: bool
    seed: int  # run.seed: the order and the augmentations' draws
    accumulate_steps: int
    device: torch.device
    world: distributed.World  # each rank loads its share

    @classmethod
    def of(
        cls, recipe: Recipe, device: torch.device, policy: PrecisionPolicy | None = None
    ) -> LoaderInputs:
        """The loaders' inputs of `recipe` on `device`; `policy`: resolved from them if not given."""
        if policy is None:
            _, policy, _ = for_device(recipe, device)
        t, world = recipe.tricks, distributed.world()
        a = recipe.optim.accumulate_steps
        return cls(recipe.loader, recipe.aug, policy, t.channels_last, recipe.run.seed, a, device, world)  # fmt: skip


def build_loaders(
    inputs: LoaderInputs, dataset: Dataset, mean: list[float], std: list[float]
) -> tuple[Any, Any]:
    """Train and eval loaders of the recipe's kind, normalized with the given channel statistics,
    their batches in the dtype the model computes in."""
    lc, a, policy = inputs.loader, inputs.aug, inputs.policy
    dtype, storage = batch_dtypes(
        lc.storage_dtype if lc.kind == "device" else "auto",
        policy.compute_dtype,
        autocast=policy.autocast_dtype is not None,
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
    augment = AugmentSpec(
        flip=a.flip,
        translate=a.translate,
        pad_mode=a.pad_mode,
        cutout=a.cutout,
        cutout_inside=a.cutout_inside,
    )
    world = inputs.world  # each rank: its share of every global batch, of the eval split
    common = LoaderSpec(
        distributed.local_batch_size(lc.batch_size, inputs.accumulate_steps, world.world_size),
        mean=mean,
        std=std,
        device=inputs.device,
        dtype=dtype,
        channels_last=inputs.channels_last,
        seed=inputs.seed,
    )
    train_spec = dataclasses.replace(
        common,
        augment=augment,
        drop_last=lc.drop_last,
        rank=world.rank,
        world_size=world.world_size,
    )
    train = cls(dataset.train.images, dataset.train.labels, train_spec)
    shard = distributed.eval_shard(len(dataset.test.labels), world)
    eval_spec = dataclasses.replace(common, batch_size=lc.eval_batch_size, train=False)
    evaluation = cls(dataset.test.images[shard], dataset.test.labels[shard], eval_spec)
    return train, evaluation


def init_sample(images: torch.Tensor, seed: int) -> torch.Tensor:
    """A seeded random sample of the train split for data-dependent init (the whitening conv).

    Random, not the first images: an image folder's split is sorted by class, so its first 5,000
    images would all be one class and the whitening fitted to airplanes alone."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(images), generator=generator)[:INIT_FROM_DATA_IMAGES]
    return images[order]


class SetupCache:
    """What `prepare` built, by the arguments it was built from: a call of a function with
    arguments equal to an earlier call's returns that call's result (or raises its error again).

    The key is derived from every argument (configs field by field, objects such as a dataset or
    a tensor by identity, held here so that no other object takes their id), so a function whose
    inputs are all its arguments can never be handed a part built from other inputs."""

    def __init__(self) -> None:
        self._built: dict[tuple[Callable[..., Any], str], Any] = {}
        self._held: list[Any] = []  # the objects keyed by identity

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)`, or what an equal call of the same function returned (raised) before."""
        key = (function, json.dumps(self._key(args)))
        if key not in self._built:
            try:
                self._built[key] = function(*args)
            except Exception as exc:
                self._built[key] = exc
        if isinstance(self._built[key], Exception):
            raise self._built[key]
        return self._built[key]

    def __len__(self) -> int:
        return len(self._built)

    def _key(self, value: Any) -> Any:
        if isinstance(value, str | int | float | bool | type(None)):
            return [type(value).__name__, value]
        if isinstance(value, torch.device | torch.dtype):
            return str(value)
        if isinstance(value, list | tuple):
            return [self._key(v) for v in value]
        if isinstance(value, dict):
            return [[self._key(k), self._key(v)] for k, v in value.items()]
        if dataclasses.is_dataclass(value) and not isinstance(value, Dataset):
            fields = dataclasses.fields(value)
            return [type(value).__qualname__, *(self._key(getattr(value, f.name)) for f in fields)]
        self._held.append(value)
        return ["id", id(value)]


def prepare(
    recipe: Recipe, dataset: Dataset, device: torch.device, reuse: SetupCache | None = None
) -> tuple[Parts, dict]:
    """Model, optimizer, schedule and every trick of the recipe, ready for `run_loop`; info holds
    the model's size and what the device decided (`resolved`).

    With `reuse` (check_setup's), the statistics, model and loaders built from equal inputs by an
    earlier recipe are taken again instead of being built."""
    recipe, policy, resolved = for_device(recipe, device)
    t = recipe.tricks
    reuse = reuse if reuse is not None else SetupCache()  # a run builds everything anew
    check_model_fits(recipe, policy, dataset.num_classes, dataset.image_shape, device)
    mean, std = reuse.call(train_stats, dataset)
    model_inputs = ModelInputs.of(recipe, policy, device)
    model, info = reuse.call(build_run_model, model_inputs, dataset, mean, std)
    loaders = reuse.call(build_loaders, LoaderInputs.of(recipe, device, policy), dataset, mean, std)
    total_steps = math.ceil(recipe.run.epochs * len(loaders[0]))
    loss_scale = policy.loss_scale(loaders[0].batch_size)  # a rank's
    optimizer = build_optimizer(
        model,
        recipe.optim,
        recipe.loader.batch_size,
        loss_scale=loss_scale,
        grad_scaler=policy.grad_scaling,
        compile_mode=t.compile,
        fused=t.cuda_graph == "on",
    )
    check_run(recipe, policy, dataset, model, loaders, optimizer)
    parts = Parts(
        model=model,
        forward=model if t.compile == "off" else compiled(model, t.compile, device),
        optimizer=optimizer,
        scheduler=build_scheduler(optimizer, recipe.schedule, total_steps),
        scaler=policy.grad_scaler(),
        # a graph replays its casts: autocast's weight cache would hold copies made at capture
        autocast=functools.partial(policy.autocast, cache=t.cuda_graph != "on"),
        loss_fn=training_loss(t.label_smoothing, policy.summed_loss),
        train_loader=loaders[0],
        eval_loader=loaders[1],
        device=device,
        total_steps=total_steps,
        ema=weight_average(model, t, len(loaders[0]), total_steps),
        loss_scale=loss_scale,
        freeze_after_epochs=frozen_whitening_bias(recipe.model),
        accumulate_steps=recipe.optim.accumulate_steps,
    )
    if t.cuda_graph == "on":
        parts.graph = GraphedStep(parts, recipe.schedule, parts.total_steps)
    return parts, {**info, "resolved": resolved}


def weight_average(
    model: nn.Module, tricks: TricksConfig, steps_per_epoch: int, total_steps: int
) -> WeightAverage | None:
    """tricks.ema_*: the EMA (and lookahead) of the weights, or None when ema_decay is 0. Its
    start is in epochs, not steps, so it moves with the data size and batch (a subset, a CPU run)."""
    if tricks.ema_decay == 0:
        return None
    warmup_steps, t = math.ceil(tricks.ema_warmup_epochs * steps_per_epoch), tricks
    return WeightAverage(
        model, t.ema_decay, t.ema_every, warmup_steps, t.lookahead, t.ema_decay_power, total_steps
    )


def frozen_whitening_bias(model: ModelConfig) -> dict[str, float]:
    """model.whiten_bias_epochs: the whitening layer's bias trained for that many epochs only
    (airbench94), as the loop's {parameter name: epochs}."""
    return {"whiten.bias": model.whiten_bias_epochs} if model.whiten_bias_epochs > 0 else {}


def build_run_model(
    inputs: ModelInputs, dataset: Dataset, mean: list[float], std: list[float]
) -> tuple[nn.Module, dict]:
    """The recipe's model on its device as a run starts it (seeded weights, the whitening fitted to
    the data, BatchNorm momentum, precision, memory format), with its params and forward MACs."""
    m, device = inputs.model, inputs.device
    torch.manual_seed(inputs.seed)
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
    own = is_own_model(m.name)  # a user's code: its forward and init behind the wall
    with checked_if(own, f"model.name={m.name}: its forward"):
        macs = _forward_macs(model, m, dataset.num_classes, (1, c, h, w), own)
        if own:
            check_own_model(model, m.name, dataset.num_classes, (2, c, h, w))
        info = {"params": count_params(model), "forward_macs": macs}
        init = getattr(model, "init_from_data", None)  # a property or __getattr__ may raise
    info["whiten_seconds"] = 0.0
    if init is not None:  # timed as airbench times it: normalizing the sample and the fit
        sample = init_sample(dataset.train.images, inputs.seed).to(device)
        synchronize(device)
        start = time.perf_counter()
        with checked_if(own, f"model.name={m.name}: its init_from_data"):
            init(normalize(sample, mean, std))
        if own:  # a model it froze, moved to the meta device or made float64: one line, not later
            check_returned(model, m.name, "its init_from_data left")
        synchronize(device)
        info["whiten_seconds"] = time.perf_counter() - start
    if m.bn_momentum is not None:
        set_batchnorm_momentum(model, m.bn_momentum)
    inputs.policy.prepare_model(model)
    if inputs.channels_last:
        apply_channels_last(model)
    if own:  # as its steps will call it: in their precision and memory format
        check_run_forward(model, m.name, inputs.policy, inputs.channels_last, (3, c, h, w))
    return model, info


# A registered or timm model's forward MACs by what builds it, its class and size: counted once
# a process (the counter's forward costs a run 0.01-0.2 s; an experiment's runs share a model).
_MACS: dict[str, int] = {}


def _forward_macs(
    model: nn.Module, m: ModelConfig, classes: int, shape: tuple[int, ...], own: bool
) -> int:
    if own:  # a user's factory may build another model each call
        return count_forward_macs(model, shape)
    kind = type(model)
    key = json.dumps([kind.__module__, kind.__qualname__, count_params(model), m.name, m.width])
    key += json.dumps([m.widths, classes, shape])
    if key not in _MACS:
        _MACS[key] = count_forward_macs(model, shape)
    return _MACS[key]


def check_setup(recipes: Iterable[Recipe]) -> dict[str, str]:
    """Raise the TrickLabError that a run of any of `recipes` would meet before its first step
    (device, data, model, loaders, optimizer: all that `train` builds), so that an experiment stops
    at once instead of failing every run; other errors are left for the runs to record. Each
    distinct data source, model and loader setting is built once (seeds aside: `SetupCache`).
    Returns the hash of the code of each of your own models by name (own_model_code): a study's."""
    check_not_training()  # a study's runs would each be refused
    reuse, seen, codes = SetupCache(), set(), {}
    for recipe in recipes:
        recipe = dataclasses.replace(recipe, run=dataclasses.replace(recipe.run, seed=0))
        key = recipe.setting_key()
        if key in seen:
            continue
        seen.add(key)
        try:
            device = resolve_device(recipe.run.device)
            require_packages(recipe.run.loggers)
            check_compile_cache(recipe.tricks, device)  # before a study stores a trial
            dataset = reuse.call(load_data, recipe.data)
            with backend_settings(recipe.tricks.matmul_precision, recipe.tricks.cudnn_benchmark):
                prepare(recipe, dataset, device, reuse)
            if (name := recipe.model.name) not in codes:  # read once, however many settings
                codes[name] = own_model_code(recipe, dataset.num_classes, dataset.image_shape)
        except TrickLabError:
            raise
        except Exception:  # the run meets it and records it (oom, failed) with its message
            pass
    return {name: code for name, code in codes.items() if code}  # tricklab's own models: None
