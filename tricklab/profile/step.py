"""`tricklab profile step`: where a recipe's training step spends its time, by Page's method.

David Page ("How to train your ResNet", 2018) found half of each step lost in a slow half-precision
BatchNorm path by removing parts of the computation one at a time and timing what was left. Here
the recipe's own step (its data, loader, model, precision, optimizer and EMA, built by `prepare`)
is timed in variants, each doing less than the one before:

    full                   next batch from the recipe's loader, train step, EMA/lookahead update
    no_loading             the same on one batch already on the device
    no_ema                 train step alone (only when the recipe has an EMA)
    forward_backward       forward, loss, backward: no optimizer step, no schedule step
    forward                forward and loss in train mode (autograd records, as in training)
    forward_backward_bare  forward_backward of a copy whose BatchNorm and activation modules are
                           replaced by identity (functional calls such as F.gelu stay)

Each component is the difference of two neighbours (loading = full - no_loading, ...), so the
components add up to the full step; its interval is a paired bootstrap over rounds (every variant
takes one turn per round, in a rotated order). A component whose interval holds 0 is marked within
noise; negative ones (noise) are clipped at 0 and the shares are of the clipped sum. BatchNorm +
activations (forward_backward - forward_backward_bare) is a part of forward + backward, given
apart. Evaluation (with and without the recipe's TTA) is timed per pass, compilation apart, and a
few full steps run under torch.profiler for the top operators (and a Chrome/Perfetto trace).
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn

from tricklab.core.device import synchronize
from tricklab.core.errors import expect_type, plain
from tricklab.core.progress import stage
from tricklab.measure.hardware import hardware_fingerprint, load_average
from tricklab.measure.timing import (
    Contender,
    calls_per_sample,
    interleave,
    paired_difference,
    summary_ms,
    timed_call,
)
from tricklab.profile.limits import MAX_REPEATS, check_count, recipe_does_not_fit
from tricklab.profile.trace import check_trace_path, write_trace
from tricklab.recipe.schema import Recipe

DEFAULT_REPEATS = 10
WARMUP_STEPS = 2
MIN_SAMPLE_SECONDS = 0.05
MAX_CALLS_PER_SAMPLE = 100
EVAL_REPEATS = 3
PROFILED_STEPS = 3
TOP_OPERATORS = 10

ACTIVATIONS = (
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.PReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Hardswish,
    nn.Hardtanh,
)

VARIANTS = {
    "full": "next batch from the recipe's loader + train step + EMA/lookahead update",
    "no_loading": "train step + EMA/lookahead update on a batch already on the device",
    "no_ema": "train step on a batch already on the device",
    "forward_backward": "forward + loss + backward (no optimizer or schedule step)",
    "forward": "forward + loss in train mode",
    "forward_backward_bare": "forward + loss + backward with BatchNorm and activations as identity",
}
# (component, minuend, subtrahend): component = minuend - subtrahend; None is zero.
CHAIN = (
    ("loading", "full", "no_loading"),
    ("ema_update", "no_loading", "no_ema"),
    ("optimizer_step", "no_ema", "forward_backward"),
    ("backward", "forward_backward", "forward"),
    ("forward", "forward", None),
)
INSIDE = (
    ("batchnorm_and_activations", "forward_backward", "forward_backward_bare"),
    ("rest_of_forward_backward", "forward_backward_bare", None),
)
COMPONENT_DOCS = {
    "loading": "taking the next batch from the loader (augmentation included)",
    "ema_update": "EMA/lookahead weight update, per step (amortised over tricks.ema_every)",
    "optimizer_step": "optimizer step, gradient scaler and LR schedule step",
    "backward": "backward pass",
    "forward": "forward pass and loss",
    "batchnorm_and_activations": "BatchNorm and activation modules, forward and backward",
    "rest_of_forward_backward": "forward + backward without them (convs, linear, pools, loss)",
}


def strip_batchnorm_and_activations(model: nn.Module) -> dict[str, int]:
    """Replace every BatchNorm and activation module of `model` by nn.Identity, in place; returns
    how many of each type were replaced. Functional calls in `forward` (F.relu) are not reached."""
    replaced: dict[str, int] = {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, (nn.modules.batchnorm._BatchNorm, *ACTIVATIONS)):
                kind = type(child).__name__
                replaced[kind] = replaced.get(kind, 0) + 1
                setattr(parent, name, nn.Identity())
    return replaced


class StepBench:
    """The recipe's parts, built as `train` builds them, and one function per variant.

    Use as a context manager: backend flags (matmul precision, cuDNN autotuning) are set for the
    recipe on entry and restored on exit."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> StepBench:
        try:
            return self._build()
        except BaseException:
            self._stack.close()  # backend flags back as they were
            raise

    def _build(self) -> StepBench:
        from tricklab.core.torchstate import own_torch_state
        from tricklab.training.backend import backend_settings
        from tricklab.training.setup import load_data, prepare, resolve_device
        from tricklab.training.warmup import needs_warm_up, warm_up

        recipe = self.recipe
        self.device = resolve_device(recipe.run.device)
        dataset = load_data(recipe)
        self.eval_images = len(dataset.test.labels)
        self._stack.enter_context(own_torch_state())  # a caller's grad mode, dtype or autocast
        self._stack.enter_context(
            backend_settings(recipe.tricks.matmul_precision, recipe.tricks.cudnn_benchmark)
        )
        self._stack.enter_context(warnings.catch_warnings())
        # Steps run past the schedule's end here; GradScaler's skipped steps make torch warn.
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")
        self.parts, self.info = prepare(recipe, dataset, self.device)
        self.compile_seconds = 0.0
        if needs_warm_up(recipe.tricks, self.device):
            with stage("compiling and warming up the step (apart from its times)"):
                self.compile_seconds = warm_up(self.parts)
        self.images, self.labels = next(iter(self.parts.train_loader))
        self.batches = self._endless_batches()
        ema = self.parts.ema
        # EMA updates come every ema_every steps once warmed up: count from there, so each sample
        # (a multiple of ema_every steps) holds its exact share of updates.
        self.ema_every = ema.every if ema is not None else 1
        self._ema_steps = {"full": 0, "no_loading": 0}
        self.bare = None
        self.replaced: dict[str, int] = {}
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def _endless_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield from self.parts.train_loader

    def make_bare(self) -> float:
        """The BatchNorm- and activation-free copy (compiled as the recipe compiles); returns the
        seconds its compilation took (0 uncompiled)."""
        self.bare = copy.deepcopy(self.parts.model)
        self.replaced = strip_batchnorm_and_activations(self.bare)
        from tricklab.training.backend import compiled

        mode = self.info["resolved"]["compile"]  # as the run's model was compiled
        self.bare_forward = self.bare if mode == "off" else compiled(self.bare, mode, self.device)
        if mode == "off":
            return 0.0
        synchronize(self.device)
        start = time.perf_counter()
        for _ in range(WARMUP_STEPS):
            self.forward_backward_bare()
        synchronize(self.device)
        return time.perf_counter() - start

    # ---------------------------------------------------------------- the variants
    def _ema_update(self, variant: str) -> None:
        ema = self.parts.ema
        if ema is not None:
            ema.update(ema.warmup_steps + self._ema_steps[variant])
            self._ema_steps[variant] += 1

    def full(self) -> None:
        from tricklab.training.loop import train_step

        images, labels = next(self.batches)
        train_step(self.parts, images, labels)
        self._ema_update("full")

    def no_loading(self) -> None:
        from tricklab.training.loop import train_step

        train_step(self.parts, self.images, self.labels)
        self._ema_update("no_loading")

    def no_ema(self) -> None:
        from tricklab.training.loop import train_step

        train_step(self.parts, self.images, self.labels)

    def _forward_backward(self, model: nn.Module, forward: Callable) -> None:
        p = self.parts
        with p.autocast():
            loss = p.loss_fn(forward(self.images), self.labels)
        model.zero_grad(set_to_none=True)
        p.scaler.scale(loss).backward()

    def forward_backward(self) -> None:
        self._forward_backward(self.parts.model, self.parts.forward)

    def forward_backward_bare(self) -> None:
        self._forward_backward(self.bare, self.bare_forward)

    def forward(self) -> None:
        p = self.parts
        with p.autocast():
            p.loss_fn(p.forward(self.images), self.labels)

    def train_mode(self) -> None:
        self.parts.model.train()
        if self.bare is not None:
            self.bare.train()

    def time_variants(
        self, names: list[str], repeats: int
    ) -> tuple[dict[str, list[float]], dict[str, int]]:
        """Seconds per step of each named variant over `repeats` interleaved rounds, and the
        steps each sample holds."""
        self.train_mode()
        contenders = []
        for name in names:
            fn = getattr(self, name)
            for _ in range(WARMUP_STEPS):
                fn()
            seconds = min(timed_call(fn, 1, self.device) for _ in range(2))
            number = calls_per_sample(seconds, MIN_SAMPLE_SECONDS, MAX_CALLS_PER_SAMPLE)
            if name in self._ema_steps:  # whole EMA periods per sample
                number = math.ceil(number / self.ema_every) * self.ema_every
            contenders.append(Contender(name, fn, number, before=self.train_mode))
        samples = interleave(contenders, repeats, self.device)
        return samples, {c.name: c.number for c in contenders}


def _component(name: str, samples: dict[str, list[float]], high: str, low: str | None) -> dict:
    a = samples[high]
    b = samples[low] if low is not None else [0.0] * len(a)
    point, ci_low, ci_high = paired_difference(a, b)
    within_noise = low is not None and ci_low <= 0 <= ci_high
    return {
        "name": name,
        "doc": COMPONENT_DOCS[name],
        "measured_as": f"{high} - {low}" if low else high,
        "ms_raw": point * 1e3,
        "ms": max(point, 0.0) * 1e3,
        "ci_low_ms": ci_low * 1e3,
        "ci_high_ms": ci_high * 1e3,
        "within_noise": bool(within_noise),
    }


def step_components(samples: dict[str, list[float]]) -> tuple[list[dict], list[dict]]:
    """(components of the step, parts of forward + backward) from per-variant samples in seconds;
    each with ms (clipped at 0), its raw difference, a 95 % interval and its share of the step."""
    has_ema = "no_ema" in samples
    chain = []
    for name, high, low in CHAIN:
        if not has_ema and name == "ema_update":
            continue
        if not has_ema and name == "optimizer_step":
            high = "no_loading"
        chain.append((name, high, low))
    components = [_component(name, samples, high, low) for name, high, low in chain]
    total = sum(c["ms"] for c in components)
    for c in components:
        c["share"] = c["ms"] / total if total > 0 else 0.0
    inside = []
    if "forward_backward_bare" in samples:
        inside = [_component(n, samples, hi, lo) for n, hi, lo in INSIDE]
        whole = sum(c["ms"] for c in components if c["name"] in ("forward", "backward"))
        for c in inside:  # noise can make the bare copy seem slower than forward + backward:
            c["ms"] = min(c["ms"], whole)  # a part is shown no larger than its whole (raw kept)
            c["share"] = c["ms"] / total if total > 0 else 0.0
    return components, inside


def top_operators(prof, device: torch.device, count: int, steps: int) -> list[dict]:
    """The `count` operators with the most self time (device time on a GPU), per step."""
    events = [e for e in prof.key_averages() if not e.key.startswith(("tricklab.", "ProfilerStep"))]
    on_device = device.type == "cuda"

    def self_device_us(e) -> float:  # torch < 2.4 names it after CUDA
        name = (
            "self_device_time_total"
            if hasattr(e, "self_device_time_total")
            else "self_cuda_time_total"
        )
        return float(getattr(e, name, 0))

    key = self_device_us if on_device else (lambda e: float(e.self_cpu_time_total))
    total = sum(max(key(e), 0.0) for e in events) or 1.0  # a self time is below 0 now and then
    rows = []
    for e in sorted(events, key=key, reverse=True)[:count]:
        rows.append(
            {
                "name": e.key,
                "calls_per_step": e.count / steps,
                "self_cpu_ms_per_step": e.self_cpu_time_total / 1e3 / steps,
                "self_device_ms_per_step": self_device_us(e) / 1e3 / steps if on_device else None,
                "self_share": max(key(e), 0.0) / total,
            }
        )
    return rows


def _profile_steps(bench: StepBench, steps: int, trace: Path | None) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile, record_function

    from tricklab.training.loop import train_step

    activities = [ProfilerActivity.CPU]
    if bench.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    bench.train_mode()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            with record_function("tricklab.load"):
                images, labels = next(bench.batches)
            with record_function("tricklab.train_step"):
                train_step(bench.parts, images, labels)
            with record_function("tricklab.ema_update"):
                bench._ema_update("full")
        synchronize(bench.device)
    if trace is not None:
        write_trace(prof, trace)
    return top_operators(prof, bench.device, TOP_OPERATORS, steps)


def profile_step(
    recipe: Recipe,
    *,
    recipe_name: str | None = None,
    repeats: int = DEFAULT_REPEATS,
    trace: str | Path | None = None,
) -> dict:
    """Page's breakdown of `recipe`'s training step; a JSON-ready dict (keys in the README).

    With `trace`, the profiled steps are written there as a Chrome/Perfetto trace (JSON)."""
    expect_type(recipe, Recipe, "profile_step's recipe")
    recipe = recipe.checked()  # a field set by hand, checked as train checks it
    expect_type(recipe_name, (str, type(None)), "profile_step's recipe_name")
    expect_type(trace, (str, os.PathLike, type(None)), "profile_step's trace")
    repeats = plain(repeats)  # numpy's integers as Python's
    check_count(repeats, "repeats", 2, MAX_REPEATS, " (an interval needs two)")
    trace_path, load_start = check_trace_path(trace), load_average()
    with recipe_does_not_fit(recipe, recipe_name), StepBench(recipe) as bench:
        compile_seconds = bench.compile_seconds + bench.make_bare()
        names = ["full", "no_loading", "forward_backward", "forward", "forward_backward_bare"]
        if bench.parts.ema is not None:
            names.insert(2, "no_ema")
        samples, steps_per_sample = bench.time_variants(names, repeats)
        components, inside = step_components(samples)
        evaluation = _time_evaluation(bench, recipe.tricks.tta)
        profiled_steps = math.ceil(PROFILED_STEPS / bench.ema_every) * bench.ema_every
        operators = _profile_steps(bench, profiled_steps, trace_path)
        result = {
            "kind": "step",
            "recipe": recipe_name,
            "device": str(bench.device),
            "hardware": hardware_fingerprint(bench.device, load_start),
            "batch_size": int(bench.images.shape[0]),
            "repeats": repeats,
            "steps_per_sample": steps_per_sample,
            "variants": {
                name: {"doc": VARIANTS[name], **summary_ms(values)}
                for name, values in samples.items()
            },
            "step_ms": summary_ms(samples["full"])["median_ms"],
            "components": components,
            "components_sum_ms": sum(c["ms"] for c in components),
            "inside_forward_backward": inside,
            "replaced_modules": bench.replaced,
            "compile_seconds": compile_seconds,
            "evaluation": evaluation,
            "profiled_steps": profiled_steps,
            "top_operators": operators,
            "trace": str(trace_path) if trace_path is not None else None,
            "params": bench.info["params"],
            "forward_macs": bench.info["forward_macs"],
            "recipe_resolved": recipe.to_dict(),
            "resolved": bench.info["resolved"],  # what the device decided, with its notes
        }
    return result


def _time_evaluation(bench: StepBench, tta: str) -> dict:
    """Seconds of one pass over the eval split, with and (if the recipe has it) without TTA."""
    from tricklab.training.loop import evaluate

    contenders = [Contender("plain", lambda: evaluate(bench.parts))]
    if tta != "none":
        contenders.append(Contender("tta", lambda: evaluate(bench.parts, tta)))
    for c in contenders:
        c.fn()  # warm-up: first batches of each shape
    samples = interleave(contenders, EVAL_REPEATS, bench.device)
    seconds = summary_ms(samples["plain"])["median_ms"] / 1e3
    out = {"images": bench.eval_images, "seconds": seconds, "tta": tta, "tta_seconds": None}
    if "tta" in samples:
        out["tta_seconds"] = summary_ms(samples["tta"])["median_ms"] / 1e3
    bench.train_mode()
    return out


def device_step_seconds(recipe: Recipe, repeats: int, name: str | None = None) -> tuple[float, int]:
    """(median seconds of the recipe's step on a batch already on the device, batch size): the
    no_loading variant, for the loader profile's 'fraction of the step loading would cost'."""
    with recipe_does_not_fit(recipe, name), StepBench(recipe) as bench:
        samples, _ = bench.time_variants(["no_loading"], repeats)
        return summary_ms(samples["no_loading"])["median_ms"] / 1e3, int(bench.images.shape[0])
