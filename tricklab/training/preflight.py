"""Checks `prepare` makes once the model, loaders and optimizer exist, for recipes whose fields are
each valid but which together would fail mid-run with a traceback instead of one line:

- a training batch (or micro-batch) of one image where a BatchNorm layer then sees one value per
  channel (1×1 maps: small images, deep nets), which PyTorch refuses in training mode;
- a step size or weight decay that the parameters' dtype cannot hold (PyTorch converts them to it
  and stops with "value cannot be converted ... without overflow");
- on the CPU, a batch whose activations alone are more than the memory left, which would get the
  process killed by the kernel (no traceback, no line, a half-written run folder).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from tricklab.core.errors import TrickLabError
from tricklab.core.memory import available_memory_bytes, format_bytes
from tricklab.training import precision
from tricklab.training.model_memory import meta_model

# PyTorch's optimizers scale the lr by up to this much within a step (Adam's bias correction is
# 1 / (1 - 0.9) = 10 at its first step), so the bound leaves this margin below the dtype's maximum.
STEP_MARGIN = 16


def micro_batch_sizes(num_samples: int, batch_size: int, drop_last: bool, parts: int) -> set[int]:
    """The sizes of the micro-batches a training epoch gives: each batch of `batch_size` (and the
    last, smaller one unless `drop_last`) split as `Tensor.chunk(parts)` splits it."""
    batches = {batch_size} if num_samples >= batch_size else set()
    if not drop_last and num_samples % batch_size:
        batches.add(num_samples % batch_size)
    sizes = set()
    for size in batches:
        chunk = math.ceil(size / parts)
        count = math.ceil(size / chunk)
        sizes |= {chunk, size - chunk * (count - 1)}
    return sizes


def single_value_batchnorm(
    model: nn.Module, image_shape: tuple[int, ...], dtype: torch.dtype, recipe_precision: str
) -> Any:
    """(name, input shape) of the first BatchNorm layer that normalizes one value per channel for
    a batch of one image, or None; found with one evaluation-mode forward (nothing changes)."""
    norms = [
        (n, m) for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
    ]
    if not norms:
        return None
    seen: list[tuple[str, tuple[int, ...]]] = []

    def hook(name: str):
        def record(module: nn.Module, args: tuple) -> None:
            shape = tuple(args[0].shape)
            if not seen and math.prod(shape[2:]) == 1:
                seen.append((name, shape))

        return record

    handles = [m.register_forward_pre_hook(hook(n)) for n, m in norms]
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad(), precision.autocast_for(recipe_precision, device.type):
            model(torch.zeros((1, *image_shape), dtype=dtype, device=device))
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return seen[0] if seen else None


def check_batchnorm_batches(
    model: nn.Module, train_loader: Any, image_shape: tuple[int, ...], recipe: Any
) -> None:
    """TrickLabError when a training micro-batch of one image meets a BatchNorm layer that would
    then normalize a single value per channel (PyTorch's "Expected more than 1 value per channel
    when training", mid-run)."""
    loader, k = recipe.loader, recipe.optim.accumulate_steps
    n, b = train_loader.num_samples, train_loader.batch_size
    if 1 not in micro_batch_sizes(n, b, train_loader.drop_last, k):
        return
    found = single_value_batchnorm(model, image_shape, train_loader.dtype, recipe.tricks.precision)
    if found is None:
        return
    name, shape = found
    if n >= b and b // k == 1:
        where = f"loader.batch_size={loader.batch_size}"
        where += f" in optim.accumulate_steps={k} micro-batches" if k > 1 else ""
        fix = "use larger batches"
    else:
        where = f"the last batch of each epoch ({n % b or n} of {n} train images"
        where += f", in {k} micro-batches)" if k > 1 else f" with loader.batch_size={b})"
        fix = "set loader.drop_last=true, or change loader.batch_size or data.train_size"
    maps = "x".join(map(str, shape[2:])) or "1"
    raise TrickLabError(
        f"{where} gives a training batch of 1 image, where BatchNorm layer '{name}' of "
        f"{recipe.model.name} sees one value per channel ({maps} maps) and PyTorch cannot "
        f"normalize it; {fix}"
    )


def peak_schedule_factor(schedule: Any) -> float:
    """The largest factor the schedule multiplies the lr by (warm-up only lowers it)."""
    if schedule.name == "step":
        try:
            return max(1.0, schedule.gamma ** len(schedule.milestones))
        except OverflowError:
            return math.inf
    if schedule.name == "cosine":
        return max(1.0, schedule.final_factor)
    if schedule.name == "piecewise-linear":
        return max(1.0, schedule.start_factor, schedule.final_factor)
    return 1.0


def check_step_sizes(optimizer: torch.optim.Optimizer, recipe: Any) -> None:
    """TrickLabError when a parameter group's peak lr, weight decay or their product is more than
    its parameters' dtype holds (with STEP_MARGIN to spare)."""
    peak = peak_schedule_factor(recipe.schedule)
    lr_from = "optim.lr (optim.muon_lr) x bias_lr_mult x lr_scaling x the schedule's peak factor"
    decay_from = "optim.weight_decay" + (
        " / the lr (optim.decoupled_weight_decay)" if recipe.optim.decoupled_weight_decay else ""
    )
    for group in optimizer.param_groups:
        dtypes = {p.dtype for p in group["params"] if p.is_floating_point()}
        if not dtypes:
            continue
        dtype = min(dtypes, key=lambda d: torch.finfo(d).max)
        limit = torch.finfo(dtype).max / STEP_MARGIN
        lr, decay = float(group["lr"]), float(group.get("weight_decay", 0.0))
        lr = lr * peak if lr else 0.0  # an lr of 0 stays 0 whatever the schedule
        for what, value, source in (
            ("lr", lr, lr_from),
            ("weight decay", decay, decay_from),
            ("lr x weight decay", lr * decay, f"{lr_from}, times {decay_from}"),
        ):
            if not value <= limit:
                raise TrickLabError(
                    f"a parameter group's peak {what} would be {value:.3g} ({source}), more than "
                    f"its {str(dtype).removeprefix('torch.')} parameters take (at most "
                    f"{limit:.3g}); lower it"
                )


def activation_bytes(recipe: Any, num_classes: int, image_shape: tuple[int, ...]) -> Any:
    """(bytes of the distinct outputs of the model's leaf modules, bytes of the largest one) for
    one image, from a forward on PyTorch's meta device (no memory); None where that cannot run."""
    outputs: dict[int, torch.Tensor] = {}  # by id, held: an in-place op returns its input

    def record(module: nn.Module, args: tuple, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            outputs[id(output)] = output

    try:
        model = meta_model(recipe, num_classes, image_shape)
        if model is None:
            return None
        for module in model.modules():
            if not list(module.children()):
                module.register_forward_hook(record)
        with torch.no_grad():
            model.eval()(torch.empty((1, *image_shape), device="meta"))
    except Exception:  # a model that needs real storage, a meta kernel PyTorch lacks: not counted
        return None
    size = 2 if recipe.tricks.precision != "32-true" else 4  # the compute dtype's
    counts = [t.numel() for t in outputs.values()]
    return sum(counts) * size, max(counts, default=0) * size


def check_activations_fit(recipe: Any, dataset: Any, train_loader: Any, eval_loader: Any) -> None:
    """On the CPU, TrickLabError when the activations a training batch keeps for its backward
    (about the sum of the leaf modules' outputs), or the two largest outputs of an evaluation
    batch, are more than the memory this process may still take: the kernel would kill it."""
    if train_loader.device.type != "cpu" or recipe.model.pretrained:
        return
    capacity = available_memory_bytes()
    image_shape = dataset.image_shape
    found = activation_bytes(recipe, dataset.num_classes, image_shape) if capacity else None
    if found is None:
        return
    per_image, largest = found
    k = recipe.optim.accumulate_steps
    train = max(micro_batch_sizes(train_loader.num_samples, train_loader.batch_size, False, k))
    evaluation = min(eval_loader.batch_size, eval_loader.num_samples)
    side = "x".join(map(str, image_shape[1:]))
    for kind, batch, need, options in (
        ("a training", train, per_image * train, "loader.batch_size (or optim.accumulate_steps)"),
        ("an eval", evaluation, 2 * largest * evaluation, "loader.eval_batch_size"),
    ):
        if need > capacity:
            raise TrickLabError(
                f"{kind} batch of {batch} images of {side} needs about {format_bytes(need)} for "
                f"{recipe.model.name}'s activations, more than the {format_bytes(capacity)} of "
                f"memory left (the kernel would kill the run); lower {options}, data.image_size "
                "or the model's width"
            )
