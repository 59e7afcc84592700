"""The model registry: every network tricklab can train, by name, and `build_model` to make one.

Three kinds of name: a registered one (tricklab's own nets, and yours after `register_model`);
`package.module:factory`, any importable callable that takes `num_classes`, `in_channels`,
`image_size` and returns an nn.Module; `timm:NAME`, a timm model (the `tricklab[timm]` extra).
Those two are imported when the model is built, not when a recipe is read.

A model that needs training data before training (airbench's whitening) has
`init_from_data(images)`; the training engine calls it when present.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import nn

from tricklab.core.device import out_of_memory_error
from tricklab.core.errors import TrickLabError, expect_number, expect_type
from tricklab.core.sizes import MAX_CLASSES, MAX_WIDTH, MAX_WIDTH_SCALE
from tricklab.models import airbench, resnet, zoo
from tricklab.models.own import TIMM_PREFIX, build_own, import_factory
from tricklab.models.timm_source import create_timm, import_timm

FACTORY_ARGUMENTS = ("num_classes", "in_channels", "image_size")


@dataclass(frozen=True)
class ModelInfo:
    """A model: its name, a one-line description and the function that builds it.

    `options` names which of `width`, `widths`, `pretrained` the builder accepts; `min_image_size`
    is the smallest square input the net can take (below it a pool or stride empties the map).
    `source` says where it comes from: "tricklab" (its builder takes num_classes, in_channels
    and the options), or "registered", "module", "timm" (its builder also takes image_size).
    """

    name: str
    doc: str
    builder: Callable[..., nn.Module]
    options: tuple[str, ...] = ()
    min_image_size: int = 1
    source: str = "tricklab"


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


BUILTIN_MODELS = tuple(MODELS)


def register_model(name: str, factory: Callable[..., nn.Module], doc: str | None = None) -> None:
    """Make `factory` trainable as `model.name=<name>`, listed by `list_models()`.

    `factory(num_classes=..., in_channels=..., image_size=...)` returns an nn.Module (it may leave
    out the arguments it has no use for, but not num_classes). `doc` defaults to the first line of
    its docstring. Registering a name again replaces it; tricklab's own names cannot be replaced.
    The registry lives in this process: experiments that start other processes (several workers)
    need a `package.module:factory` name instead, which any process can import."""
    bad = not isinstance(name, str) or not name.strip() or name != name.strip() or ":" in name
    if bad or not name.isprintable():  # a newline would forge a line of `tricklab models`
        raise TrickLabError(
            f"a model name must be a non-empty string without ':', control characters or "
            f"surrounding spaces, got {name!r} (':' is for package.module:factory and timm:NAME)"
        )
    if unicodedata.normalize("NFKC", name) != name:  # 'cafe\u0301' and 'café' listed alike
        raise TrickLabError(
            f"a model name must be in Unicode's normal form (NFKC), or it lists as another: "
            f"{ascii(name)} reads as {unicodedata.normalize('NFKC', name)!r}; register that"
        )
    if not _selectable(name):  # `model.name=null` (or true, ~, [a], 'q', *a) reads otherwise
        raise TrickLabError(f"a model name must read back as itself in model.name={name}, "
                            "which reads as null, a bool, a list or another text; rename it")  # fmt: skip
    if doc is not None and not isinstance(doc, str):
        raise TypeError(f"register_model's doc takes str or None, got {doc!r:.60}")
    if name in BUILTIN_MODELS:
        raise TrickLabError(
            f"{name!r} is one of tricklab's own models; register under another name"
        )
    if not callable(factory):
        raise TrickLabError(f"register_model({name!r}, ...) needs a callable, got {factory!r}")
    MODELS[name] = ModelInfo(
        name,
        doc if doc is not None else _first_doc_line(factory),
        functools.partial(build_own, name, factory),
        source="registered",
    )


def _selectable(name: str) -> bool:
    """Whether `model.name=<name>` reads back as `name`: YAML reads it as text, a number, a date
    or a YAML 1.1 bool (`yes`: recipes read YAML 1.2 bools), which a text field keeps as typed."""
    import yaml

    try:
        value = yaml.safe_load(name)
    except yaml.YAMLError:  # `*a`, `[a`, `%x`: no override reads these as typed
        return False
    if isinstance(value, (str, bool)):
        return value == name if isinstance(value, str) else name.lower() not in ("true", "false")
    return value is not None and not isinstance(value, (list, dict))


def list_models() -> list[ModelInfo]:
    """All registered models: tricklab's own in registry order, then those register_model added."""
    return list(MODELS.values())


def is_own_model(name: str) -> bool:
    """Whether `name` is a user's model: a `package.module:factory` or one `register_model` added
    (its code runs behind core/usercode's wall and is checked before a run), not tricklab's own
    nets or timm's."""
    if name in MODELS:
        return MODELS[name].source == "registered"
    return ":" in name and not name.startswith(TIMM_PREFIX)


def get_model_info(name: str) -> ModelInfo:
    """The entry for `name`: registered, `package.module:factory` (imported now) or `timm:NAME`.

    A name that is none of these, a module that cannot be imported, an attribute it lacks, timm
    missing or not knowing NAME: TrickLabError, with the closest match where there is one."""
    if name in MODELS:
        return MODELS[name]
    if name.startswith(TIMM_PREFIX):
        return _timm_info(name)
    if ":" in name:
        factory = import_factory(name)
        return ModelInfo(
            name,
            _first_doc_line(factory),
            functools.partial(build_own, name, factory),
            source="module",
        )
    close = difflib.get_close_matches(name, MODELS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise TrickLabError(
        f"unknown model {name!r}; {hint}known models: {', '.join(MODELS)}; "
        "or your own as package.module:factory, or timm:NAME"
    )


def check_image_size(name: str, height: int, width: int) -> None:
    """TrickLabError when the model `name` cannot take height×width images: its downsampling
    needs both sides at least its `min_image_size` (a 64×1 image is as small as a 1×1 one)."""
    smallest = get_model_info(name).min_image_size
    if min(height, width) < smallest:
        raise TrickLabError(
            f"{name} needs images of at least {smallest}×{smallest} pixels, got {height}×{width} "
            "(height×width); resize them (data.image_size=N) or pick another model"
        )


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
    """Build the model `name` for `in_channels`×`image_size`² inputs and `num_classes`.

    `width` scales every stage's channels; `widths` sets them outright (own models only);
    `pretrained` loads ImageNet weights (torchvision families, timm). An option the model does
    not have raises TrickLabError rather than being ignored.
    """
    expect_type(name, str, "build_model's name")
    for value, what in ((num_classes, "num_classes"), (in_channels, "in_channels")):
        expect_number(value, f"build_model's {what}", whole=True)
    expect_number(image_size, "build_model's image_size", whole=True)
    expect_number(width, "build_model's width")
    if widths is not None:
        expect_type(widths, (list, tuple), "build_model's widths")
        for w in widths:
            expect_number(w, "each of build_model's widths", whole=True)
    info = get_model_info(name)
    if num_classes < 1 or in_channels < 1:
        raise TrickLabError(
            f"{name}: num_classes and in_channels must be >= 1, got {num_classes} and {in_channels}"
        )
    check_image_size(name, image_size, image_size)
    if not 0 < width <= MAX_WIDTH_SCALE or any(w < 1 or w > MAX_WIDTH for w in widths or ()):
        raise TrickLabError(
            f"{name}: width must be in (0, {MAX_WIDTH_SCALE}] and widths in 1..{MAX_WIDTH} "
            f"(model.width's and model.widths' bounds), got {width} and {widths}"
        )
    if num_classes > MAX_CLASSES or in_channels > MAX_WIDTH:
        raise TrickLabError(
            f"{name}: num_classes must be at most {MAX_CLASSES:,} and in_channels {MAX_WIDTH:,}, "
            f"got {num_classes:.6g} and {in_channels:.6g}"
        )
    if widths is not None and width != 1.0:
        raise TrickLabError(f"{name}: give either width or widths, not both")
    given = {"width": width != 1.0, "widths": widths is not None, "pretrained": pretrained}
    values = {"width": width, "widths": tuple(widths or ()), "pretrained": True}
    requested = {option: values[option] for option, on in given.items() if on}
    for option in requested:
        if option not in info.options:
            raise TrickLabError(_unsupported_option_message(info, option))
    sizes = {} if info.source == "tricklab" else {"image_size": image_size}
    try:
        return info.builder(num_classes=num_classes, in_channels=in_channels, **sizes, **requested)
    except (RuntimeError, MemoryError) as exc:  # its weights past the memory left
        if (oom := out_of_memory_error(exc)) is None or info.source in ("registered", "module"):
            raise  # a user's code: its own wall (core/usercode) says what it raised
        raise TrickLabError(f"{name}: its weights do not fit in memory ({oom})") from None


def set_batchnorm_momentum(model: nn.Module, momentum: float) -> nn.Module:
    """Every BatchNorm's running-statistics momentum (PyTorch's meaning: the new batch's weight),
    as timm's --bn-momentum sets it; airbench writes 0.6 for the old statistics, i.e. 0.4 here.
    A model without BatchNorm raises TrickLabError: the setting would silently do nothing."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        raise TrickLabError(
            f"model.bn_momentum={momentum} sets BatchNorm momentum, and this model "
            f"({type(model).__name__}) has no BatchNorm layer; leave model.bn_momentum unset"
        )
    for module in norms:
        module.momentum = momentum
    return model


def _unsupported_option_message(info: ModelInfo, option: str) -> str:
    having = [m.name for m in MODELS.values() if option in m.options]
    if info.source in ("registered", "module"):
        what = "load your weights" if option == "pretrained" else "set its size"
        return (
            f"{info.name!r} is built by your own factory, which tricklab calls with "
            f"{', '.join(FACTORY_ARGUMENTS)} only: {what} in the factory and drop model.{option}"
        )
    if info.source == "timm":
        return (
            f"timm models take no {option!r}: pick the timm variant of the size you want "
            "(`timm.list_models('resnet*')`) and drop model." + option
        )
    if option == "pretrained":
        return (
            f"no pretrained weights exist for {info.name!r} (tricklab's own implementation); "
            f"set pretrained=False, or pick one with ImageNet weights: {', '.join(having)}"
        )
    return f"{info.name!r} does not take {option!r}; models that do: {', '.join(having)}"


def _first_doc_line(obj: object) -> str:
    own = obj.__dict__.get("__doc__") if isinstance(obj, type) else inspect.getdoc(obj)
    doc = inspect.cleandoc(own or "")  # a class's own, not nn.Module's "Base class for all ..."
    return doc.strip().splitlines()[0] if doc.strip() else getattr(obj, "__qualname__", repr(obj))


def _timm_info(name: str) -> ModelInfo:
    """timm's model `name` (after "timm:"): its builder passes num_classes, in_chans, pretrained
    and, to models that take it (vision transformers), img_size."""
    arch = name[len(TIMM_PREFIX) :]
    timm = import_timm()
    if not arch or not timm.is_model(arch):
        close = difflib.get_close_matches(arch, timm.list_models(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise TrickLabError(f"timm has no model {arch!r}{hint} (timm.list_models() lists them all)")
    builder = functools.partial(build_own, name, functools.partial(create_timm, timm, arch))
    return ModelInfo(name, f"timm {arch}", builder, options=("pretrained",), source="timm")
