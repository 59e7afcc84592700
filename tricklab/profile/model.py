"""`tricklab profile model`: what a model costs, counted (params, FLOPs, MACs) and measured (latency).

Seed report 1 found MobileNetV2, with 4x fewer MACs than ResNet-18, not 4x faster: MACs count
arithmetic, not the memory traffic and kernel launches of depthwise convolutions, norms and
activations. Here both side by side: per model its params and forward FLOPs/MACs (FlopCounterMode
on an eager copy), then per batch size x precision x compile mode x memory format the forward
(eval mode) and train-step (forward, loss, backward, SGD step) latencies: medians and spread over
repeats after a warm-up, interleaved round by round; images/s, FLOP/s, MFU against the device's
peak, ms per GMAC (alike only where MACs predict speed), load averages at start and end.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from tricklab.core.device import synchronize
from tricklab.core.errors import TrickLabError, expect_list_of, expect_type, plain
from tricklab.core.memory import available_memory_bytes
from tricklab.core.torchstate import own_torch_state
from tricklab.core.usercode import checked_if, described
from tricklab.measure.flops import count_forward_flops, count_params, eval_mode
from tricklab.measure.hardware import hardware_fingerprint, load_average
from tricklab.measure.mfu import achieved_tflops, check_peak, mfu, peak_tflops
from tricklab.measure.timing import Contender, calls_per_sample, interleave, summary_ms, timed_call
from tricklab.models import build_model, get_model_info, is_own_model
from tricklab.profile.limits import (
    MAX_REPEATS,
    check_count,
    check_precision_runs,
    is_out_of_memory,
    out_of_memory_as_error,
    resolved_once,
)
from tricklab.recipe.schema import MAX_BATCH, Recipe, TricksConfig
from tricklab.training import precision as precision_lib
from tricklab.training.backend import compiled
from tricklab.training.model_memory import check_batches_fit, check_model_fits
from tricklab.training.preflight import check_own_model
from tricklab.training.resolve import compile_for_device

MACS_NOTE = (
    "MACs = FLOPs / 2: FlopCounterMode counts 2 FLOPs per multiply-accumulate of convolutions and "
    "matrix products; norms, activations and pools are not counted"
)
TRAIN_STEP_NOTE = (
    "train step = forward + cross-entropy + backward + SGD (momentum 0.9) step on one fixed batch; "
    "train FLOP/s and MFU count 3 x forward FLOPs per image (forward + backward)"
)
DEFAULT_BATCH_SIZES = (1, 32, 256)
DEFAULT_REPEATS = 5
WARMUP_CALLS = 2
MIN_SAMPLE_SECONDS = 0.05  # a timed sample repeats a short call until it lasts this long
MAX_CALLS_PER_SAMPLE = 200
INIT_IMAGES = 512  # random images for a data-dependent init (airbench's whitening): speed only
INIT_PIXELS = INIT_IMAGES * 32 * 32  # fewer larger ones: 512 of 1024×1024 asked for 25 GB


def _choices(name: str) -> tuple[str, ...]:
    """Allowed values of a tricks.* recipe field: one list, the recipe's."""
    field = next(f for f in dataclasses.fields(TricksConfig) if f.name == name)
    return tuple(field.metadata["choices"])


PRECISIONS = _choices("precision")
COMPILE_MODES = _choices("compile")


@dataclasses.dataclass(frozen=True)
class Combination:
    batch_size: int
    precision: str
    compile: str
    channels_last: bool


def _auto_precision(precision: str, device_type: str) -> str:
    """tricks.precision=auto as a run on this device would run it; other values as given."""
    if precision != "auto":
        return precision
    capability = torch.cuda.get_device_capability() if device_type == "cuda" else None
    return precision_lib.auto_precision(device_type, capability, "sgd")


@dataclasses.dataclass(frozen=True)
class ProfileGrid:
    """What every model is timed in: each batch size x precision x compile mode x memory format
    (channels_last False/True)."""

    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES
    precisions: Sequence[str] = ("32-true",)
    compile_modes: Sequence[str] = ("off",)
    channels_last: Sequence[bool] = (False,)

    def combinations(self, device_type: str) -> list[Combination]:
        """Every combination, compile mode and precision `auto` resolved for the device."""
        return [
            Combination(b, _auto_precision(p, device_type), compile_for_device(c, device_type), cl)
            for b in self.batch_sizes
            for p in self.precisions
            for c in self.compile_modes
            for cl in self.channels_last
        ]


@dataclasses.dataclass(frozen=True)
class ModelBuild:
    """How every profiled model is built: `width` scales its channels or `widths` sets them (a
    model that does not take them is an error), for `image_size`-square RGB images and
    `num_classes` classes."""

    width: float = 1.0
    widths: Sequence[int] | None = None
    image_size: int = 32
    num_classes: int = 10


def check_options(
    models: Sequence[str], grid: ProfileGrid, repeats: int, peak: float | None
) -> None:
    """Raise TrickLabError on an empty list, an unknown name or a value out of range."""
    batch_sizes, precisions, compile_modes = grid.batch_sizes, grid.precisions, grid.compile_modes
    for option, values, kind in (
        ("models", models, str),
        ("batch sizes", batch_sizes, object),  # each checked below
        ("precisions", precisions, str),
        ("compile modes", compile_modes, str),
        ("channels-last settings", grid.channels_last, bool),
    ):
        expect_list_of(values, kind, option)  # a lone string would be read letter by letter
        if not values:
            raise TrickLabError(f"no {option} given; give at least one")
    for name in models:
        get_model_info(name)  # unknown: names the closest one
    for batch_size in batch_sizes:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise TrickLabError(f"batch sizes must be integers >= 1, got {batch_size!r}")
        if batch_size > MAX_BATCH:  # loader.batch_size's bound: beyond it, allocation fails
            raise TrickLabError(f"batch sizes must be <= {MAX_BATCH}, got {batch_size}")
    for value, allowed, option in (
        *((p, PRECISIONS, "precision") for p in precisions),
        *((c, COMPILE_MODES, "compile mode") for c in compile_modes),
    ):
        if value not in allowed:
            raise TrickLabError(f"unknown {option} {value!r}; one of {', '.join(allowed)}")
    check_count(repeats, "repeats", 1, MAX_REPEATS)
    check_peak(peak)


class _Setup:
    """One model copy made ready for one combination: its forward and its train step."""

    def __init__(self, base: nn.Module, combo: Combination, device: torch.device, shape) -> None:
        self.combo = combo
        self.policy = precision_lib.precision_policy(combo.precision, device.type)
        self.model = self.policy.prepare_model(copy.deepcopy(base).to(device))
        memory_format = torch.channels_last if combo.channels_last else torch.contiguous_format
        if combo.channels_last:
            precision_lib.apply_channels_last(self.model)
        self.forward = (
            self.model if combo.compile == "off" else compiled(self.model, combo.compile, device)
        )
        generator = torch.Generator().manual_seed(0)
        self.images = (
            torch.randn((combo.batch_size, *shape), generator=generator)
            .to(device, self.policy.compute_dtype)
            .contiguous(memory_format=memory_format)
        )
        num_classes = self._num_classes(shape, device)
        labels = torch.randint(0, num_classes, (combo.batch_size,), generator=generator)
        self.labels = labels.to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3, momentum=0.9)
        self.scaler = self.policy.grad_scaler()
        self.loss_fn = nn.CrossEntropyLoss()

    def _num_classes(self, shape, device) -> int:
        with torch.no_grad():
            self.model.eval()
            probe = torch.zeros((1, *shape), device=device, dtype=self.images.dtype)
            with self.policy.autocast():
                return int(self.model(probe).shape[-1])

    def train_mode(self) -> None:
        self.model.train()

    def eval_mode(self) -> None:
        self.model.eval()

    def train_step(self) -> None:
        with self.policy.autocast():
            loss = self.loss_fn(self.forward(self.images), self.labels)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def forward_only(self) -> None:
        with torch.inference_mode(), self.policy.autocast():
            self.forward(self.images)


def _build_base(name: str, build: ModelBuild) -> nn.Module:
    side = build.image_size
    model = build_model(
        name, num_classes=build.num_classes, image_size=side, width=build.width, widths=build.widths
    )
    if is_own_model(name):  # as a run checks it (its first forward sizes lazy modules)
        check_own_model(model, name, build.num_classes, (2, 3, side, side))
    elif any(is_lazy(p) for p in model.parameters()):  # sized by a first forward
        with torch.no_grad(), eval_mode(model):
            model(torch.zeros(2, 3, side, side))
    init = getattr(model, "init_from_data", None)
    if init is not None:  # the timings do not depend on the values, only NaN-free weights matter
        count = min(INIT_IMAGES, max(1, INIT_PIXELS // side**2))
        generator = torch.Generator().manual_seed(0)
        init(torch.randn(count, 3, side, side, generator=generator))
    return model


def _own_failure(name: str, exc: Exception) -> None:
    """A user's model failing its first training steps: one line naming it, as `train` does."""
    if is_own_model(name):
        raise TrickLabError(f"model.name={name}: its training step raised {described(exc)}")


def _warm_up(setup: _Setup, device: torch.device) -> tuple[float, float, float]:
    """(seconds of the warm-up calls, seconds per train step, seconds per forward) after them."""
    synchronize(device)
    start = time.perf_counter()
    setup.train_mode()
    for _ in range(WARMUP_CALLS):
        setup.train_step()
    setup.eval_mode()
    for _ in range(WARMUP_CALLS):
        setup.forward_only()
    synchronize(device)
    seconds = time.perf_counter() - start
    setup.train_mode()
    train = timed_call(setup.train_step, 1, device)
    setup.eval_mode()
    forward = timed_call(setup.forward_only, 1, device)
    return seconds, train, forward


def check_memory(
    models: Sequence[str], grid: ProfileGrid, build: ModelBuild, device: torch.device
) -> None:
    """TrickLabError before any model is built when one cannot fit: its training state on the
    device, or on the CPU a timed batch's activations in the memory left (the kernel would kill
    the process without a word). The same counts and check as `train`'s (model_memory)."""
    shape = (3, build.image_size, build.image_size)
    capacity = available_memory_bytes() if device.type == "cpu" else None
    batch = max(grid.batch_sizes)
    for name in models:
        for precision in grid.precisions:
            recipe = Recipe().override(
                [f"model.name={name}", f"tricks.precision={precision}", "optim.momentum=0.9"]
            )
            model = dataclasses.replace(recipe.model, width=build.width, widths=build.widths)
            recipe = dataclasses.replace(recipe, model=model)
            policy = precision_lib.precision_policy(precision, device.type)
            check_model_fits(recipe, policy, build.num_classes, shape, device)
            check_batches_fit(
                recipe,
                policy.compute_dtype,
                build.num_classes,
                shape,
                (batch, batch),
                capacity,
                ("--batch-sizes", "--batch-sizes"),
            )


def profile_models(
    models: Sequence[str],
    grid: ProfileGrid | None = None,
    *,
    build: ModelBuild | None = None,
    device: str = "auto",
    repeats: int = DEFAULT_REPEATS,
    peak_tflops_override: float | None = None,
) -> dict:
    """Count and time every model in every combination of `grid`; a JSON-ready dict (keys in the
    README), each model built as `build` says, a compile's warm-up timed as `compile_seconds`."""
    from tricklab.training.setup import resolve_device

    expect_list_of(models, str, "profile_models' models")
    expect_type(grid, (ProfileGrid, type(None)), "profile_models' grid")
    expect_type(build, (ModelBuild, type(None)), "profile_models' build")
    expect_type(device, str, "profile_models' device")
    grid = grid if grid is not None else ProfileGrid()
    grid, repeats = dataclasses.replace(grid, batch_sizes=plain(grid.batch_sizes)), plain(repeats)
    build = build if build is not None else ModelBuild()
    check_options(models, grid, repeats, peak_tflops_override)
    torch_device = resolve_device(device)
    kind = torch_device.type  # `auto` as a run on it resolves it; two values alike are refused
    resolved_once(grid.compile_modes, lambda c: compile_for_device(c, kind), "--compile", kind)
    auto = resolved_once(grid.precisions, lambda p: _auto_precision(p, kind), "--precisions", kind)
    grid = dataclasses.replace(grid, precisions=auto)
    side = f"{build.image_size}×{build.image_size}"
    subject = f"{', '.join(models)} at batch {max(grid.batch_sizes)} on {side} images"
    with own_torch_state():  # a caller's grad mode, default dtype or autocast is not the profile's
        for precision in grid.precisions:
            check_precision_runs(precision, torch_device)
        check_memory(models, grid, build, torch_device)
        with out_of_memory_as_error(subject, "lower data.image_size, --batch-sizes or model.width"):
            return _measure(models, grid, build, torch_device, repeats, peak_tflops_override)


def _measure(
    models: Sequence[str],
    grid: ProfileGrid,
    build: ModelBuild,
    torch_device: torch.device,
    repeats: int,
    peak_tflops_override: float | None,
) -> dict:
    image_size, precisions, load_start = build.image_size, grid.precisions, load_average()
    shape = (3, image_size, image_size)
    combos = grid.combinations(torch_device.type)  # auto: the device's mode
    model_rows, setups = [], []
    for name in models:
        own = is_own_model(name)  # a user's code: its init, forward and parameters walled
        with checked_if(own, f"model.name={name}"):
            base = _build_base(name, build)
            flops = count_forward_flops(copy.deepcopy(base), (1, *shape))  # eager, batch of one
            params = count_params(base)
        model_rows.append(
            {"name": name, "params": params, "forward_flops": flops, "forward_macs": flops // 2}
        )
        for combo in combos:
            setups.append((name, flops, _Setup(base, combo, torch_device, shape)))
        del base
    contenders, first_calls = [], {}
    for index, (name, _, setup) in enumerate(setups):
        try:
            seconds, train, forward = _warm_up(setup, torch_device)
        except ValueError as exc:  # torch's own argument checks, e.g. BatchNorm on one value
            raise TrickLabError(
                f"{name} cannot train at batch {setup.combo.batch_size} on {image_size}×"
                f"{image_size} images: {str(exc).splitlines()[0]}"
            ) from None
        except RuntimeError as exc:
            if is_out_of_memory(exc):
                raise  # said by out_of_memory_as_error, below
            if setup.combo.compile != "off":
                first_line = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
                raise TrickLabError(
                    f"{name}: torch.compile(mode={setup.combo.compile}) failed on this machine: "
                    f"{first_line}"
                ) from None
            _own_failure(name, exc)
            raise
        except Exception as exc:  # a TypeError of a user's model (a tuple in train mode)
            _own_failure(name, exc)
            raise
        first_calls[index] = seconds
        contenders.append(
            Contender(
                f"{index}/train",
                setup.train_step,
                calls_per_sample(train, MIN_SAMPLE_SECONDS, MAX_CALLS_PER_SAMPLE),
                before=setup.train_mode,
            )
        )
        contenders.append(
            Contender(
                f"{index}/forward",
                setup.forward_only,
                calls_per_sample(forward, MIN_SAMPLE_SECONDS, MAX_CALLS_PER_SAMPLE),
                before=setup.eval_mode,
            )
        )
    samples = interleave(contenders, repeats, torch_device)
    peaks = {p: _peak(torch_device, p, peak_tflops_override) for p in precisions}
    results = []
    for index, (name, flops, setup) in enumerate(setups):
        combo = setup.combo
        macs = flops // 2
        forward = summary_ms(samples[f"{index}/forward"])
        train = summary_ms(samples[f"{index}/train"])
        forward_ips = combo.batch_size / (forward["median_ms"] / 1e3)
        train_ips = combo.batch_size / (train["median_ms"] / 1e3)
        batch_gmacs = macs * combo.batch_size / 1e9
        peak, _ = peaks[combo.precision]
        results.append(
            {
                "model": name,
                **dataclasses.asdict(combo),
                "forward_ms": forward,
                "train_step_ms": train,
                "forward_images_per_second": forward_ips,
                "train_images_per_second": train_ips,
                "forward_tflops": flops * forward_ips / 1e12,
                "train_tflops": achieved_tflops(macs, train_ips),
                "mfu": mfu(macs, train_ips, peak),
                "forward_ms_per_gmac": forward["median_ms"] / batch_gmacs if batch_gmacs else None,
                "train_ms_per_gmac": train["median_ms"] / batch_gmacs if batch_gmacs else None,
                "compile_seconds": first_calls[index] if combo.compile != "off" else None,
                "calls_per_sample": {
                    "train": next(c.number for c in contenders if c.name == f"{index}/train"),
                    "forward": next(c.number for c in contenders if c.name == f"{index}/forward"),
                },
            }
        )
    _check_below_peak(results, peaks)
    return {
        "kind": "model",
        "device": str(torch_device),
        "hardware": hardware_fingerprint(torch_device, load_start),
        "repeats": repeats,
        "image_shape": list(shape),
        "build": {"width": build.width, "widths": build.widths and [*build.widths]},
        "macs_note": MACS_NOTE,
        "train_step_note": TRAIN_STEP_NOTE,
        "peak_tflops": {p: v for p, (v, _) in peaks.items()},
        "peak_source": {p: s for p, (_, s) in peaks.items()},
        "models": model_rows,
        "results": results,
    }


def _peak(
    device: torch.device, precision: str, override: float | None
) -> tuple[float | None, str | None]:
    if override is not None:
        return override, "--peak-tflops"
    if device.type != "cuda":
        return None, None  # no table of CPU peaks: MFU unavailable, never guessed
    compute = precision_lib.precision_policy(precision, "cuda").compute_dtype
    found = peak_tflops(torch.cuda.get_device_name(device), compute)
    return found if found is not None else (None, None)


def _check_below_peak(results: list[dict], peaks: dict) -> None:
    """An MFU above 100 % cannot be: the peak it is measured against is too low."""
    for r in results:
        if r["mfu"] is not None and r["mfu"] > 1:
            peak, source = peaks[r["precision"]]
            raise TrickLabError(
                f"{r['model']} trained at {r['train_tflops']:.3g} TFLOP/s, above the peak of "
                f"{peak:g} TFLOP/s ({source}), an MFU of {100 * r['mfu']:,.0f} %; give the "
                "device's peak (--peak-tflops)"
            )
