"""Will the model fit? Its training state and a batch's activations, counted on the meta device,
against free memory (`core.memory.check_fits`: one check, one message).

Weights, gradients, optimizer state and the weight average take memory whatever the batch, so
their sum is a lower bound of what a run needs. The model is built on PyTorch's meta device
(shapes without storage) to count it, so a net that cannot fit is refused in milliseconds with
one line, instead of failing in the allocator (a 100,000-channel conv asks for 360 GB). A
batch's activations are counted the same way, from one forward on the meta device; `train`
(training/preflight.py) and `profile model` check them on the CPU, where the kernel would
otherwise kill the process without a word.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from tricklab.core.errors import TrickLabError
from tricklab.core.memory import available_memory_bytes, check_fits
from tricklab.models import build_model, check_image_size, get_model_info, is_own_model
from tricklab.models.code_identity import factory_of, model_code_id
from tricklab.recipe.schema import Recipe
from tricklab.training.precision import PrecisionPolicy

# Per-parameter state tensors each optimizer keeps (SGD's momentum buffer only with momentum).
OPTIMIZER_STATE_SLOTS = {"adam": 2, "adamw": 2, "rmsprop": 1, "muon": 1}


def training_state_bytes(model: nn.Module, recipe: Recipe) -> int:
    """Bytes of `model`'s weights and buffers, its gradients, the optimizer's state and the EMA."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    optim = recipe.optim
    slots = OPTIMIZER_STATE_SLOTS.get(optim.name, 1 if optim.momentum > 0 else 0)
    average = params + buffers if recipe.tricks.ema_decay > 0 else 0
    return params * (2 + slots) + buffers + average


def device_memory_bytes(device: torch.device) -> int | None:
    """What the model may take on `device`: on CUDA all its memory, on the CPU what this process
    may still allocate (after the dataset: the least of available memory, the cgroup's and
    `ulimit -v`'s headroom); None where it cannot be told."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return available_memory_bytes() if device.type == "cpu" else None


def meta_model(recipe: Recipe, num_classes: int, image_shape: tuple[int, ...]) -> nn.Module | None:
    """The recipe's model built on the meta device (shapes, no storage), a fresh copy the caller
    may change, or None for your own factory that needs real storage (it is built for real, not
    counted). The last one built is kept (`_built_meta`): the memory checks of a run, and the runs
    of a study with the same model, call your own factory once between them, not once each."""
    m = recipe.model
    builder = get_model_info(m.name).builder  # a name registered again is built again
    if isinstance(builder, functools.partial):  # a module's factory: a new partial of the same
        builder = (builder.func, builder.args)
    widths = None if m.widths is None else tuple(m.widths)
    built = _built_meta(builder, m.name, m.width, widths, num_classes, tuple(image_shape))
    return None if built is None else copy.deepcopy(built)


def own_model_code(recipe: Recipe, num_classes: int, image_shape: tuple[int, ...]) -> str | None:
    """The hash of your model's code and structure (models/code_identity.py) that a study keeps,
    or None for tricklab's and timm's models (their code is the installed version's)."""
    if not is_own_model(recipe.model.name):
        return None
    factory = factory_of(get_model_info(recipe.model.name).builder)
    return model_code_id(factory, meta_model(recipe, num_classes, image_shape))


@functools.lru_cache(maxsize=1)
def _built_meta(
    builder: Any,  # part of the cache key only: what `name` builds now
    name: str,
    width: float,
    widths: tuple[int, ...] | None,
    num_classes: int,
    image_shape: tuple[int, ...],
) -> nn.Module | None:
    try:
        with torch.device("meta"):
            return build_model(
                name,
                num_classes=num_classes,
                in_channels=image_shape[0],
                image_size=image_shape[1],
                width=width,
                widths=widths,
            )
    except TrickLabError:
        raise
    except Exception:
        return None


def check_model_fits(
    recipe: Recipe,
    policy: PrecisionPolicy,
    num_classes: int,
    image_shape: tuple[int, int, int],
    device: torch.device,
) -> None:
    """TrickLabError, before anything is allocated, when the model's training state alone is
    larger than the memory it may take on `device`. Pretrained models (fixed, known sizes) are not
    counted: their weights would be loaded. Images the model cannot take are refused first."""
    m = recipe.model
    check_image_size(m.name, *image_shape[1:])
    model = None if m.pretrained else meta_model(recipe, num_classes, image_shape)
    if model is None or any(is_lazy(p) for p in model.parameters()):
        return  # a lazy module's size is known at its first forward only
    policy.prepare_model(model)
    params = sum(p.numel() for p in model.parameters())
    check_fits(
        f"{m.name} with model.widths={m.widths} and model.width={m.width}",
        training_state_bytes(model, recipe),
        device_memory_bytes(device),
        what=f"the weights, gradients and {recipe.optim.name}'s state of its "
        f"{params / 1e6:,.1f} M parameters",
        where=f"in the {device.type}'s memory",
        advice="make the model narrower (model.width=, model.widths=)",
    )


def check_weights_fit(recipe: Recipe, num_classes: int, image_shape: tuple[int, int, int]) -> None:
    """TrickLabError, before anything is allocated, when the model's weights alone are more than
    this process may allocate on the CPU (where `tricklab models` builds it to count it)."""
    m = recipe.model
    model = None if m.pretrained else meta_model(recipe, num_classes, image_shape)
    if model is None or any(is_lazy(p) for p in model.parameters()):
        return  # a lazy module's size is known at its first forward only
    tensors = [*model.parameters(), *model.buffers()]
    params = sum(p.numel() for p in model.parameters())
    check_fits(
        f"{m.name} with model.widths={m.widths} and model.width={m.width}",
        sum(t.numel() * t.element_size() for t in tensors),
        device_memory_bytes(torch.device("cpu")),
        what=f"the weights of its {params / 1e6:,.1f} M parameters",
        advice="make the model narrower (model.width=, model.widths=)",
    )


def activation_bytes(
    recipe: Recipe, num_classes: int, image_shape: tuple[int, ...], dtype: torch.dtype
) -> Any:
    """(bytes of the distinct outputs of the model's leaf modules, bytes of the largest one) for
    one image computed in `dtype`, from a forward on PyTorch's meta device (no memory); None
    where that cannot run."""
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
    counts = [t.numel() for t in outputs.values()]
    return sum(counts) * dtype.itemsize, max(counts, default=0) * dtype.itemsize


def check_batches_fit(
    recipe: Recipe,
    dtype: torch.dtype,
    num_classes: int,
    image_shape: tuple[int, ...],
    batches: tuple[int, int],
    capacity: int | None,
    options: tuple[str, str],
) -> None:
    """TrickLabError when the activations a training batch keeps for its backward (about the sum
    of the leaf modules' outputs), or the two largest outputs of an evaluation batch, are more
    than `capacity` (None: unknown, nothing checked). `batches`: (training, eval) batch sizes;
    `options`: what the user lowers for each."""
    found = activation_bytes(recipe, num_classes, image_shape, dtype) if capacity else None
    if found is None:
        return
    (per_image, largest), (train, evaluation) = found, batches
    side = "x".join(map(str, image_shape[1:]))
    for kind, batch, need, option in (
        ("a training", train, per_image * train, options[0]),
        ("an eval", evaluation, 2 * largest * evaluation, options[1]),
    ):
        check_fits(
            f"{kind} batch of {batch} images of {side}",
            need,
            capacity,
            what=f"{recipe.model.name}'s activations",
            where="in the memory left (the kernel would kill the process)",
            advice=f"lower {option}, data.image_size or the model's width",
        )
