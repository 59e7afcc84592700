"""Will the model fit? Its training state, counted on the meta device, against free memory.

Weights, gradients, optimizer state and the weight average take memory whatever the batch, so
their sum is a lower bound of what a run needs. The model is built on PyTorch's meta device
(shapes without storage) to count it, so a net that cannot fit is refused in milliseconds with
one line, instead of failing in the allocator (a 100,000-channel conv asks for 360 GB).
"""

from __future__ import annotations

import torch
from torch import nn

from tricklab.core.errors import TrickLabError
from tricklab.core.memory import available_memory_bytes
from tricklab.models import build_model
from tricklab.recipe.schema import Recipe

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
    """The recipe's model built on the meta device (shapes, no storage), or None for your own
    factory that needs real storage (it is built for real, not counted)."""
    m = recipe.model
    try:
        with torch.device("meta"):
            return build_model(
                m.name,
                num_classes=num_classes,
                in_channels=image_shape[0],
                image_size=image_shape[1],
                width=m.width,
                widths=m.widths,
            )
    except TrickLabError:
        raise
    except Exception:
        return None


def check_model_fits(
    recipe: Recipe, num_classes: int, image_shape: tuple[int, int, int], device: torch.device
) -> None:
    """TrickLabError, before anything is allocated, when the model's training state alone is
    larger than the memory it may take on `device`. Pretrained models (fixed, known sizes) are not
    counted: their weights would be loaded."""
    m = recipe.model
    model = None if m.pretrained else meta_model(recipe, num_classes, image_shape)
    if model is None:
        return
    if recipe.tricks.precision == "16-true-bn32":
        model.half()
    needed, capacity = training_state_bytes(model, recipe), device_memory_bytes(device)
    if capacity is None or needed <= capacity:
        return
    params = sum(p.numel() for p in model.parameters())
    raise TrickLabError(
        f"{m.name} with model.widths={m.widths} and model.width={m.width} has "
        f"{params / 1e6:,.1f} M parameters and needs at least {needed / 2**30:,.1f} GiB for "
        f"weights, gradients and {recipe.optim.name}'s state; {capacity / 2**30:,.1f} GiB is "
        f"available on the {device.type}: make the model narrower"
    )
