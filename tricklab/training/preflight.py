"""Checks `prepare` makes once the model, loaders and optimizer exist (`check_run`), for recipes
whose fields are each valid but which together would fail mid-run with a traceback instead of one
line:

- a whitening bias to freeze (model.whiten_bias_epochs) in a model that has no whitening layer;
- run.epochs so small that it gives no training step;

- a training batch (or micro-batch) of one image where a BatchNorm layer then sees one value per
  channel (1×1 maps: small images, deep nets), which PyTorch refuses in training mode;
- a step size or weight decay that the parameters' dtype cannot hold (PyTorch converts them to it
  and stops with "value cannot be converted ... without overflow");
- on the CPU, a batch whose activations alone are more than the memory left, which would get the
  process killed by the kernel (no traceback, no line, a half-written run folder);
- a user's own model (`check_own_model`) with no trainable parameter, or whose forward does not
  give one score per class for each image (a tuple, a dict, the wrong number of classes), which
  would fail at the loss of the first step.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from tricklab.core.errors import TrickLabError
from tricklab.core.memory import available_memory_bytes
from tricklab.core.usercode import described
from tricklab.measure.flops import eval_mode
from tricklab.training.model_memory import (  # noqa: F401 (activation_bytes: reached here)
    activation_bytes,
    check_batches_fit,
    meta_model,
)
from tricklab.training.precision import PrecisionPolicy

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


def check_run(
    recipe: Any,
    policy: PrecisionPolicy,
    dataset: Any,
    model: nn.Module,
    loaders: tuple[Any, Any],
    optimizer: torch.optim.Optimizer,
) -> None:
    """TrickLabError for the first of the checks above that the run would fail."""
    m, (train_loader, eval_loader) = recipe.model, loaders
    if m.whiten_bias_epochs > 0 and "whiten.bias" not in dict(model.named_parameters()):
        raise TrickLabError(
            f"model.whiten_bias_epochs={m.whiten_bias_epochs:g} trains the bias of a whitening "
            f"layer `whiten` (airbench's), and {m.name} has none; set model.whiten_bias_epochs=0"
        )
    if math.ceil(recipe.run.epochs * len(train_loader)) < 1:
        raise TrickLabError(f"run.epochs={recipe.run.epochs} gives no training step; raise it")
    check_batchnorm_batches(model, train_loader, dataset.image_shape, recipe, policy)
    check_activations_fit(recipe, policy, dataset, train_loader, eval_loader)  # on the CPU
    check_step_sizes(optimizer, recipe)


def single_value_batchnorm(
    model: nn.Module, image_shape: tuple[int, ...], dtype: torch.dtype, policy: PrecisionPolicy
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
        with torch.no_grad(), policy.autocast():
            model(torch.zeros((1, *image_shape), dtype=dtype, device=device))
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return seen[0] if seen else None


def check_batchnorm_batches(
    model: nn.Module,
    train_loader: Any,
    image_shape: tuple[int, ...],
    recipe: Any,
    policy: PrecisionPolicy,
) -> None:
    """TrickLabError when a training micro-batch of one image meets a BatchNorm layer that would
    then normalize a single value per channel (PyTorch's "Expected more than 1 value per channel
    when training", mid-run)."""
    loader, k = recipe.loader, recipe.optim.accumulate_steps
    n, b = train_loader.num_samples, train_loader.batch_size
    if 1 not in micro_batch_sizes(n, b, train_loader.drop_last, k):
        return
    found = single_value_batchnorm(model, image_shape, train_loader.dtype, policy)
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


def check_activations_fit(
    recipe: Any, policy: PrecisionPolicy, dataset: Any, train_loader: Any, eval_loader: Any
) -> None:
    """On the CPU, TrickLabError when the activations a training batch keeps for its backward
    (about the sum of the leaf modules' outputs), or the two largest outputs of an evaluation
    batch, are more than the memory this process may still take: the kernel would kill it."""
    if train_loader.device.type != "cpu" or recipe.model.pretrained:
        return
    k = recipe.optim.accumulate_steps
    train = max(micro_batch_sizes(train_loader.num_samples, train_loader.batch_size, False, k))
    check_batches_fit(
        recipe,
        policy.compute_dtype,
        dataset.num_classes,
        dataset.image_shape,
        (train, min(eval_loader.batch_size, eval_loader.num_samples)),
        available_memory_bytes(),
        ("loader.batch_size (or optim.accumulate_steps)", "loader.eval_batch_size"),
    )


def check_own_model(model: nn.Module, name: str, num_classes: int, shape: tuple[int, ...]) -> None:
    """A user's model must have a trainable parameter and map a batch of `shape` (zeros, in eval
    mode, no grad: no statistic or random number is used) to (batch, num_classes) scores, and a
    batch of one image more to such scores in train mode too, as a run calls it (Inception-like
    nets give a tuple there), its buffers and random state kept as they were."""
    if not any(p.requires_grad for p in model.parameters()):
        raise TrickLabError(f"model.name={name}: the model has no trainable parameter")
    reference = next(p for p in model.parameters() if p.requires_grad)
    with eval_mode(model), torch.enable_grad():  # a batch of 2: its graph costs nothing
        out = model(torch.zeros(shape, device=reference.device, dtype=reference.dtype))
    _check_scores(out, name, shape[0], num_classes, "")
    more = (shape[0] + 1, *shape[1:])
    try:
        zeros = torch.zeros(more, device=reference.device, dtype=reference.dtype)
        trained = _train_mode_output(model, zeros)
    except Exception as exc:  # what a training step would meet at once (OOM aside: batch of 3)
        raise TrickLabError(
            f"model.name={name}: its forward in train mode raised {described(exc)}"
        ) from None
    _check_scores(trained, name, more[0], num_classes, " in train mode")
    if not out.is_floating_point():
        raise TrickLabError(
            f"model.name={name}: its forward gives {out.dtype} scores; a classifier's scores "
            "must be floating point (a loss needs them, and their gradients)"
        )
    if not out.requires_grad:
        raise TrickLabError(
            f"model.name={name}: its forward's scores do not depend on the model's trainable "
            "parameters (no gradient reaches them: detached, made under torch.no_grad, or new)"
        )


def _check_scores(out: object, name: str, batch: int, num_classes: int, mode: str) -> None:
    want = (batch, num_classes)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise TrickLabError(
            f"model.name={name}: its forward{mode} gives {got} for a batch of {batch} images; a "
            f"classifier of this data must give a tensor of shape {want} (one score per class)"
        )


def check_run_forward(
    model: nn.Module, name: str, policy: PrecisionPolicy, channels_last: bool, shape: tuple
) -> None:
    """A user's forward as a run's step calls it, once its precision and memory format are set:
    zeros in the compute dtype and memory format, under the precision's autocast, in train mode.
    A `.view` that channels_last breaks, or a float32 tensor of its own meeting fp16 weights, is
    one line before the run (a failed run with a 27-line traceback otherwise)."""
    param = next(p for p in model.parameters() if p.requires_grad)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    zeros = torch.zeros(shape, device=param.device, dtype=policy.compute_dtype)
    try:
        with policy.autocast():
            _train_mode_output(model, zeros.contiguous(memory_format=layout))
    except Exception as exc:
        as_run = f"tricks.precision={policy.name}" + " tricks.channels_last=true" * channels_last
        raise TrickLabError(
            f"model.name={name}: its forward in train mode, as the run calls it ({as_run}), "
            f"raised {described(exc)}"
        ) from None


def _train_mode_output(model: nn.Module, inputs: torch.Tensor) -> object:
    """The forward's output in train mode for `inputs`, without grad; the buffers it updates
    (BatchNorm's statistics) and the random numbers it draws (dropout) are put back."""
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    modes = {module: module.training for module in model.modules()}
    devices = [inputs.device] if inputs.device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            model.train()
            return model(inputs)
    finally:
        for module, training in modes.items():
            module.training = training
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)
