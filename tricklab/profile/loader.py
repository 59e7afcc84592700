"""`tricklab profile loader`: images/s of loader configurations with a recipe's augmentations.

Seed reports 0 and 3 judged num_workers and pin_memory only through end-to-end training time. Here
each configuration (loader.kind device | torch; for torch every num_workers x pin_memory) is built
from the recipe as `train` builds it (`build_loaders`: its augmentations, batch size, precision,
memory format, device) and timed alone: one measurement takes `batches` batches (default one
epoch) from a fresh epoch, device-synchronised; the configurations take turns round by round and
report medians. A fresh epoch, so that no batch is prefetched while another configuration runs;
its start (the device loader's draws for the epoch, the workers' first batches) then counts once
per measurement, which weighs more than in training when `batches` is less than an epoch. Worker processes are persistent and started before timing (their start-up is
`setup_seconds`), as the loader benchmark had them.

With `with_step`, the recipe's step on a batch already on the device is timed too (the step
profile's `no_loading` variant) and each configuration gets the fraction of the step its loading
would cost: load / (load + step) per batch. That holds when a batch is loaded before each step, as
the device loader does; worker processes overlap loading with the step, so for them it is an
upper bound (on a CPU-only machine they also take cores from the step).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tricklab.core.device import synchronize
from tricklab.core.errors import TrickLabError, expect_type, plain
from tricklab.measure.hardware import hardware_fingerprint, load_average
from tricklab.measure.timing import Contender, interleave, summary_ms
from tricklab.profile.limits import MAX_BATCHES, MAX_REPEATS, check_count, out_of_memory_as_error
from tricklab.recipe.schema import MAX_BATCH, LoaderConfig, Recipe

DEFAULT_REPEATS = 3
WARMUP_BATCHES = 2
KINDS = tuple(
    next(f for f in dataclasses.fields(LoaderConfig) if f.name == "kind").metadata["choices"]
)
NO_ACCELERATOR_PIN_NOTE = (
    "pin_memory pins host memory for copies to an accelerator; with the batches on the CPU it "
    "changes nothing, only a GPU shows its effect"
)
OVERLAP_NOTE = (
    "step fraction = load / (load + step) per batch, loading before each step; worker processes "
    "overlap loading with the step, so for them it is an upper bound"
)


class _Measurement:
    """One timed pass: `batches` batches from a fresh epoch of `loader` (into the next if needed)."""

    def __init__(self, loader, batches: int, device: torch.device) -> None:
        self.loader, self.batches, self.device = loader, batches, device
        self.images = 0  # in the `batches` taken: fewer than batches x batch size in a short split

    def __call__(self) -> None:
        taken = images = 0
        while taken < self.batches:
            for batch, _ in self.loader:
                images += batch.shape[0]
                taken += 1
                if taken == self.batches:
                    break
        synchronize(self.device)
        self.images = images


def check_options(
    kinds: Sequence[str],
    num_workers: Sequence[int],
    pin_memory: Sequence[bool],
    batch_size: int | None,
    batches: int | None,
    repeats: int,
) -> None:
    """Raise TrickLabError on an empty list or a value out of range."""
    if not kinds:
        raise TrickLabError("no loader kinds given; give device, torch or both")
    for kind in kinds:
        if kind not in KINDS:
            raise TrickLabError(f"unknown loader kind {kind!r}; one of {', '.join(KINDS)}")
    if "torch" in kinds and (not num_workers or not pin_memory):
        raise TrickLabError("the torch loader needs at least one num_workers and pin_memory value")
    for workers in num_workers:
        if isinstance(workers, bool) or not isinstance(workers, int) or not 0 <= workers <= 256:
            raise TrickLabError(f"num_workers must be integers in 0..256, got {workers!r}")
    for name, value, most in (
        ("batch size", batch_size, MAX_BATCH),
        ("batches", batches, MAX_BATCHES),
    ):
        if value is not None:
            check_count(value, name, 1, most)
    check_count(repeats, "repeats", 1, MAX_REPEATS)


def configurations(
    kinds: Sequence[str], num_workers: Sequence[int], pin_memory: Sequence[bool]
) -> list[dict]:
    """{kind, num_workers, pin_memory} of each configuration; the device loader has neither."""
    out = []
    for kind in dict.fromkeys(kinds):
        if kind == "device":
            out.append({"kind": "device", "num_workers": None, "pin_memory": None})
        else:
            for workers in dict.fromkeys(num_workers):
                for pin in dict.fromkeys(pin_memory):
                    out.append({"kind": "torch", "num_workers": workers, "pin_memory": pin})
    return out


def _recipe_for(recipe: Recipe, config: dict) -> Recipe:
    overrides = [f"loader.kind={config['kind']}"]
    if config["kind"] == "torch":
        workers = config["num_workers"]
        overrides += [
            f"loader.num_workers={workers}",
            f"loader.pin_memory={str(config['pin_memory']).lower()}",
            f"loader.persistent_workers={str(workers > 0).lower()}",
        ]
        if workers == 0:
            overrides.append("loader.prefetch_factor=null")
    return recipe.override(overrides)


@dataclass(frozen=True)
class LoaderGrid:
    """The loader configurations measured: each kind (device, torch); for torch every
    num_workers x pin_memory."""

    kinds: Sequence[str] = KINDS
    num_workers: Sequence[int] = (0, 2)
    pin_memory: Sequence[bool] = (False,)


def profile_loader(
    recipe: Recipe,
    grid: LoaderGrid | None = None,
    *,
    recipe_name: str | None = None,
    batch_size: int | None = None,
    batches: int | None = None,
    repeats: int = DEFAULT_REPEATS,
    with_step: bool = False,
) -> dict:
    """Images/s of every loader configuration of `grid`; a JSON-ready dict (keys in the README).

    `batch_size` overrides the recipe's loader.batch_size (for the step too); `batches` is the
    batches per measurement (default: one epoch)."""
    from tricklab.training.setup import load_data, resolve_device

    expect_type(recipe, Recipe, "profile_loader's recipe")
    recipe = recipe.checked()  # a field set by hand, checked as train checks it
    expect_type(grid, (LoaderGrid, type(None)), "profile_loader's grid")
    expect_type(with_step, bool, "profile_loader's with_step")
    grid = grid if grid is not None else LoaderGrid()
    batch_size, batches, repeats = plain([batch_size, batches, repeats])  # numpy's ints: Python's
    check_options(grid.kinds, grid.num_workers, grid.pin_memory, batch_size, batches, repeats)
    if batch_size is not None:
        recipe = recipe.override([f"loader.batch_size={batch_size}"])
    device, load_start = resolve_device(recipe.run.device), load_average()
    size = recipe.data.image_size
    subject = f"a batch of {recipe.loader.batch_size}" + (
        f" of {size}×{size} images" if size else ""
    )
    with out_of_memory_as_error(subject, "lower --batch-size or data.image_size"):
        dataset = load_data(recipe)
        configs, notes = _measure_configs(recipe, dataset, device, grid, batches, repeats)
    train_images = len(dataset.train.labels)
    if train_images < recipe.loader.batch_size:
        notes.append(
            f"the {train_images:,} train images make batches of {train_images:,}, not "
            f"{recipe.loader.batch_size:,}: ms/batch is per batch taken"
        )
    step = None
    if with_step:
        from tricklab.profile.step import device_step_seconds

        seconds, step_batch = device_step_seconds(recipe, max(repeats, 3), recipe_name)
        step = {"seconds": seconds, "batch_size": step_batch}
        for config in configs:  # per image: the step's batch and a loaded one may differ in size
            load = 1 / config["images_per_second"]
            config["step_fraction"] = load / (load + seconds / step_batch)
        notes.append(OVERLAP_NOTE)
    return {
        "kind": "loader",
        "recipe": recipe_name,
        "dataset": recipe.data.name,
        "device": str(device),
        "hardware": hardware_fingerprint(device, load_start),
        "train_images": train_images,
        "image_shape": list(dataset.image_shape),
        "batch_size": recipe.loader.batch_size,
        "batches_per_measurement": batches,
        "repeats": repeats,
        "augment": dataclasses.asdict(recipe.aug),
        "configs": configs,
        "step": step,
        "notes": notes,
    }


def _measure_configs(
    recipe: Recipe,
    dataset,
    device: torch.device,
    grid: LoaderGrid,
    batches: int | None,
    repeats: int,
) -> tuple[list[dict], list[str]]:
    """(each configuration of `grid` with its images/s and ms per batch taken, notes)."""
    from tricklab.data.augment import channel_stats
    from tricklab.training.setup import LoaderInputs, build_loaders

    mean, std = channel_stats(dataset.train.images)
    configs = configurations(grid.kinds, grid.num_workers, grid.pin_memory)
    notes, contenders, measurements = [], [], []
    for index, config in enumerate(configs):
        start = time.perf_counter()
        inputs = LoaderInputs.of(_recipe_for(recipe, config), device)
        loader = build_loaders(inputs, dataset, mean, std)[0]
        _Measurement(loader, min(WARMUP_BATCHES, len(loader)), device)()  # starts workers
        config["setup_seconds"] = time.perf_counter() - start
        if config["pin_memory"] and device.type == "cpu":  # the loader pins nothing there
            if NO_ACCELERATOR_PIN_NOTE not in notes:
                notes.append(NO_ACCELERATOR_PIN_NOTE)
        config["batches_per_epoch"] = len(loader)
        measurement = _Measurement(loader, batches or len(loader), device)
        measurements.append(measurement)
        contenders.append(Contender(str(index), measurement))
    samples = interleave(contenders, repeats, device)
    for index, (config, measurement) in enumerate(zip(configs, measurements)):
        rates = [measurement.images / seconds for seconds in samples[str(index)]]
        config["images_per_measurement"] = measurement.images
        config["images_per_second"] = statistics.median(rates)
        config["images_per_second_all"] = rates
        # Per batch taken: one of 8 images is not timed as if it held the batch size's 1000.
        config["ms_per_batch"] = summary_ms([s / measurement.batches for s in samples[str(index)]])
    base = configs[0]["images_per_second"]
    for config in configs:
        config["vs_first"] = config["images_per_second"] / base
    return configs, notes  # the loaders and their workers go with this frame
