"""The model registry: every network tricklab can train, by name, and `build_model` to make one.

A model that needs training data before training (airbench's whitening) has
`init_from_data(images)`; the training engine calls it when present.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import nn

from tricklab.errors import TrickLabError
from tricklab.models import airbench, resnet, zoo


@dataclass(frozen=True)
class ModelInfo:
    """A registered model: its name, a one-line description and the function that builds it.

    `options` names which of `width`, `widths`, `pretrained` the builder accepts; `min_image_size`
    is the smallest square input the net can take (below it a pool or stride empties the map).
    """

    name: str
    doc: str
    builder: Callable[..., nn.Module]
    options: tuple[str, ...] = ()
    min_image_size: int = 1


MODELS: dict[str, ModelInfo] = {
    info.name: info
    for info in (
        ModelInfo(
            "airbench",
            "airbench94 net: frozen 2×2 patch whitening, 3 conv groups (64, 256, 256), Dirac init",
            airbench.airbench,
            options=("width", "widths"),
            min_image_size=9,
        ),
        ModelInfo(
            "airbench-residual",
            "airbench with 3 convs per group and a residual around the last two (airbench96 layout)",
            airbench.airbench_residual,
            options=("width", "widths"),
            min_image_size=9,
        ),
        ModelInfo(
            "resnet9",
            "Page's DAWNBench ResNet-9 (64, 128, 256, 512), logits × 0.125",
            resnet.resnet9,
            options=("width", "widths"),
            min_image_size=8,
        ),
        ModelInfo(
            "resnet18",
            "ResNet-18 for 32×32 images: 3×3 stride-1 stem, no max-pool, BasicBlocks [2, 2, 2, 2]",
            resnet.resnet18,
            options=("width", "widths"),
        ),
        ModelInfo(
            "resnet18-tv",
            "torchvision ResNet-18 as-is (ImageNet stem); ImageNet weights available",
            zoo.resnet18_tv,
            options=("pretrained",),
        ),
        ModelInfo(
            "vgg16-bn",
            "torchvision VGG-16 with BatchNorm, ceil-mode pools, global-pool linear head",
            zoo.vgg16_bn,
            options=("width", "pretrained"),
        ),
        ModelInfo(
            "alexnet",
            "torchvision AlexNet with a 3×3 stride-1 stem for small images",
            zoo.alexnet,
            options=("pretrained",),
            min_image_size=15,
        ),
        ModelInfo(
            "squeezenet",
            "torchvision SqueezeNet 1.1 with a stride-1 stem",
            zoo.squeezenet,
            options=("pretrained",),
            min_image_size=8,
        ),
        ModelInfo(
            "densenet121",
            "torchvision DenseNet-121 with a 3×3 stride-1 stem and no stem max-pool",
            zoo.densenet121,
            options=("width", "pretrained"),
            min_image_size=8,
        ),
        ModelInfo(
            "mobilenetv2",
            "torchvision MobileNetV2 (inverted residuals), total stride 8 for small images",
            zoo.mobilenetv2,
            options=("width", "pretrained"),
        ),
    )
}


def list_models() -> list[ModelInfo]:
    """All registered models, in registry order."""
    return list(MODELS.values())


def get_model_info(name: str) -> ModelInfo:
    """The registry entry for `name`; an unknown name raises TrickLabError with the closest match."""
    if name in MODELS:
        return MODELS[name]
    close = difflib.get_close_matches(name, MODELS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise TrickLabError(f"unknown model {name!r}; {hint}known models: {', '.join(MODELS)}")


def build_model(
    name: str,
    *,
    num_classes: int,
    in_channels: int = 3,
    image_size: int = 32,
    width: float = 1.0,
    widths: Sequence[int] | None = None,
    pretrained: bool = False,
) -> nn.Module:
    """Build the registered model `name` for `in_channels`×`image_size`² inputs and `num_classes`.

    `width` scales every stage's channels; `widths` sets them outright (own models only);
    `pretrained` loads torchvision's ImageNet weights (torchvision families only). An option the
    model does not have raises TrickLabError rather than being ignored.
    """
    info = get_model_info(name)
    if num_classes < 1 or in_channels < 1:
        raise TrickLabError(
            f"{name}: num_classes and in_channels must be >= 1, got {num_classes} and {in_channels}"
        )
    if image_size < info.min_image_size:
        raise TrickLabError(
            f"{name} needs images of at least {info.min_image_size}×{info.min_image_size} pixels, "
            f"got {image_size}×{image_size}"
        )
    if not width > 0:
        raise TrickLabError(f"{name}: width must be > 0, got {width}")
    if widths is not None and width != 1.0:
        raise TrickLabError(f"{name}: give either width or widths, not both")
    requested = {}
    if width != 1.0:
        requested["width"] = width
    if widths is not None:
        requested["widths"] = tuple(widths)
    if pretrained:
        requested["pretrained"] = True
    for option in requested:
        if option not in info.options:
            raise TrickLabError(_unsupported_option_message(info, option))
    return info.builder(num_classes=num_classes, in_channels=in_channels, **requested)


def set_batchnorm_momentum(model: nn.Module, momentum: float) -> nn.Module:
    """Every BatchNorm's running-statistics momentum (PyTorch's meaning: the new batch's weight),
    as timm's --bn-momentum sets it; airbench writes 0.6 for the old statistics, i.e. 0.4 here."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.momentum = momentum
    return model


def _unsupported_option_message(info: ModelInfo, option: str) -> str:
    having = [m.name for m in MODELS.values() if option in m.options]
    if option == "pretrained":
        return (
            f"no pretrained weights exist for {info.name!r} (tricklab's own implementation); "
            f"set pretrained=False, or pick one with ImageNet weights: {', '.join(having)}"
        )
    return f"{info.name!r} does not take {option!r}; models that do: {', '.join(having)}"
