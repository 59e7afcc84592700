"""torchvision model families, adapted to 28×28 / 32×32 inputs, any channel count and class count.

Each builder creates the torchvision model (with its ImageNet weights when `pretrained`), then swaps
the layers that would shrink a small image to nothing (stem, pools) and the first conv / the head
when the channel or class count differs. A swapped layer with a new shape starts from a fresh init;
one that only changes stride or pooling keeps its pretrained weights.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import logging
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tricklab.core.errors import TrickLabError

log = logging.getLogger(__name__)

VGG16_LAYOUT = (
    64,
    64,
    "M",
    128,
    128,
    "M",
    256,
    256,
    256,
    "M",
    512,
    512,
    512,
    "M",
    512,
    512,
    512,
    "M",
)


def torchvision_models():
    """torchvision.models, imported when a torchvision family is first built (the import takes
    about a second, which every CLI start would otherwise pay)."""
    import torchvision.models

    return torchvision.models


def load_torchvision_model(
    name: str, constructor: Callable[..., nn.Module], weights: Any, **kwargs: Any
) -> nn.Module:
    """`constructor(**kwargs)` with the ImageNet `weights` loaded (none when `weights` is None).

    The model is built without weights and the state dict loaded here, by `imagenet_state_dict`,
    with torch.load's weights_only=True: torchvision's own builders load the hub cache's file
    with weights_only=False, so a pickle planted there would run its code."""
    if weights is None:
        return constructor(weights=None, **kwargs)
    state = imagenet_state_dict(name, weights)
    model = constructor(weights=None, num_classes=len(weights.meta["categories"]), **kwargs)
    try:
        model.load_state_dict(_renamed_legacy_keys(state))
    except RuntimeError as err:  # a loadable file of other keys or shapes
        raise TrickLabError(_cannot_load_message(name, weights, err)) from err
    return model


def imagenet_state_dict(name: str, weights: Any) -> dict[str, torch.Tensor]:
    """The state dict of torchvision's `weights`, from the torch hub cache (downloaded there first
    if missing, hash checked, no progress bar), unpickled with weights_only=True: tensors and
    containers only.

    A failed download or a file that will not load that way is one TrickLabError naming the file.
    Library code prints nothing: the download is one INFO record on this module's logger, marked
    `notice` for a CLI to show (clitools.say_notices), and torch.load's warnings go to the log.
    torch.hub's own loader is not used: it writes "Downloading: ..." to stdout or stderr."""
    cached = weights_file(weights)
    try:
        if not cached.exists():
            _download(name, weights, cached)
        _check_hash(cached, cached.stat().st_size, cached.stat().st_mtime_ns)
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            state = torch.load(cached, map_location="cpu", weights_only=True)
    except (OSError, http.client.HTTPException) as err:  # URLError, HTTPError, socket, SSL; a
        # proxy variable that names no URL (http.client.InvalidURL)
        if cached.exists():  # downloaded, or there already, and unreadable
            raise TrickLabError(_cannot_load_message(name, weights, err)) from err
        raise TrickLabError(
            f"could not download the ImageNet weights of {name} from {weights.url} "
            f"({_first_line(err)}); "
            f"put {cached.name} in the torch hub cache {cached.parent} "
            f"(torch.hub.get_dir() = {torch.hub.get_dir()}) or build it with pretrained=False"
        ) from err
    except Exception as err:  # not a plain tensor file (corrupt, truncated, planted), or a bad hash
        if not cached.exists():  # torch.hub removes a download whose hash is wrong
            raise TrickLabError(
                f"could not download the ImageNet weights of {name} from {weights.url} "
                f"({_first_line(err)}); try again, or build it with pretrained=False"
            ) from err
        raise TrickLabError(_cannot_load_message(name, weights, err)) from err
    for warning in warned:
        log.info("loading %s: %s", cached, warning.message)
    if not isinstance(state, dict):
        raise TrickLabError(
            _cannot_load_message(name, weights, TypeError(f"it holds a {type(state).__name__}"))
        )
    return state


@functools.cache  # once per file as it is: an ablation builds the model for every run
def _check_hash(cached: Path, size: int, mtime_ns: int) -> None:
    """ValueError unless the file's SHA-256 begins with the prefix its name carries, as torch.hub
    checks a download: a file damaged or replaced in the cache since (NaN weights that load)."""
    if not cached.is_file():  # a FIFO or a link to /dev/zero: read for ever
        raise ValueError("it is not a regular file")
    found = torch.hub.HASH_REGEX.search(cached.name)
    if found is None:
        return
    digest = hashlib.sha256()
    with cached.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if not digest.hexdigest().startswith(found.group(1)):
        raise ValueError(f"its SHA-256 does not begin with {found.group(1)}, as its name says")


def _download(name: str, weights: Any, cached: Path) -> None:
    """`weights`' file into the hub cache, as torch.hub would fetch it (the SHA-256 prefix in its
    name checked, a partial file never left at `cached`), without its progress bar or line."""
    cached.parent.mkdir(parents=True, exist_ok=True)
    found = torch.hub.HASH_REGEX.search(cached.name)
    log.info(
        "Downloading the ImageNet weights of %s from %s to %s (once: the hub cache keeps them)",
        name,
        weights.url,
        cached,
        extra={"notice": True},
    )
    torch.hub.download_url_to_file(
        weights.url, str(cached), found.group(1) if found else None, progress=False
    )


def weights_file(weights: Any) -> Path:
    """Where torch.hub keeps (or will keep) `weights`' file: <hub dir>/checkpoints/<url's name>."""
    return Path(torch.hub.get_dir()) / "checkpoints" / weights.url.rsplit("/", 1)[-1]


def _cannot_load_message(name: str, weights: Any, err: BaseException) -> str:
    reason = _first_line(err)
    # torch's weights_only refusal is a paragraph; its reason follows "WeightsUnpickler error:"
    if "WeightsUnpickler error:" in str(err):
        reason = "not plain weights: " + _first_line(str(err).split("WeightsUnpickler error:")[1])
    cached = weights_file(weights)
    what, rm = ("folder", "rm -r") if cached.is_dir() else ("file", "rm")
    return (
        f"the cached ImageNet weights of {name} ({cached}) cannot be loaded ({reason}); "
        f"delete that {what} to download it again: {rm} '{cached}'"
    )


def _first_line(err: BaseException | str) -> str:
    text = str(err)
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line or (type(err).__name__ if isinstance(err, BaseException) else "no reason given")


def _renamed_legacy_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """DenseNet's ImageNet file names its layers `norm.1`, `conv.2`, ...: module names from before
    PyTorch forbade dots in them; the model's are `norm1`, `conv2`. Other files pass unchanged."""
    legacy = re.compile(r"(denselayer\d+\.(?:norm|relu|conv))\.([12]\.)")
    return {legacy.sub(r"\1\2", key): value for key, value in state.items()}


def adapt_input_channels(conv: nn.Conv2d, in_channels: int, keep_weights: bool) -> nn.Conv2d:
    """`conv` itself if it already takes `in_channels`, else a copy of it that does.

    With `keep_weights` the new filters are the old ones averaged over input channels and scaled by
    old/new channel count, so a gray image gives the response the RGB filters gave its RGB copy.
    """
    if conv.in_channels == in_channels:
        return conv
    new = nn.Conv2d(
        in_channels,
        conv.out_channels,
        conv.kernel_size,
        stride=conv.stride,
        padding=conv.padding,
        dilation=conv.dilation,
        bias=conv.bias is not None,
    )
    if keep_weights:
        with torch.no_grad():
            mean = conv.weight.mean(dim=1, keepdim=True)
            new.weight.copy_(mean.expand_as(new.weight) * (conv.in_channels / in_channels))
            if conv.bias is not None:
                new.bias.copy_(conv.bias)
    return new


def _new_head(old: nn.Linear, num_classes: int) -> nn.Linear:
    """`old` when it already has `num_classes` outputs (a pretrained ImageNet head), else a fresh one."""
    if old.out_features == num_classes:
        return old
    return nn.Linear(old.in_features, num_classes, bias=old.bias is not None)


def _require_unit_width(name: str, width: float, pretrained: bool) -> None:
    if pretrained and width != 1.0:
        raise TrickLabError(
            f"{name}: ImageNet weights exist only at width 1.0, got width={width}; "
            "drop the width or set pretrained=False"
        )


def resnet18_tv(*, num_classes: int, in_channels: int = 3, pretrained: bool = False) -> nn.Module:
    """torchvision's ResNet-18 unchanged, ImageNet stem included (7×7 stride-2 conv + max-pool).

    A 32×32 image reaches the last stage at 1×1. Only the first conv (other channel counts; keeps
    channel-averaged pretrained filters) and the fc head (other class counts; fresh) are swapped.
    """
    weights = torchvision_models().ResNet18_Weights.DEFAULT if pretrained else None
    model = load_torchvision_model("resnet18-tv", torchvision_models().resnet18, weights)
    model.conv1 = adapt_input_channels(model.conv1, in_channels, keep_weights=pretrained)
    model.fc = _new_head(model.fc, num_classes)
    return model


def _vgg16_features(width: float) -> nn.Sequential:
    """VGG-16's conv stack (conv-BN-ReLU, max-pools) with channels × `width`, initialised as
    torchvision does; the same layer order, so torchvision's `features` weights fit at width 1."""
    layers: list[nn.Module] = []
    channels = 3
    for item in VGG16_LAYOUT:
        if item == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            out = max(1, round(item * width))
            conv = nn.Conv2d(channels, out, 3, padding=1)
            nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(conv.bias)
            layers += [conv, nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
            channels = out
    return nn.Sequential(*layers)


class SmallImageVGG(nn.Module):
    """VGG conv stack → global average pool → one linear layer (torchvision's attribute names)."""

    def __init__(self, features: nn.Sequential, num_classes: int):
        super().__init__()
        self.features = features
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        last_conv = [m for m in features if isinstance(m, nn.Conv2d)][-1]
        self.classifier = nn.Linear(last_conv.out_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


def vgg16_bn(
    *, num_classes: int, in_channels: int = 3, width: float = 1.0, pretrained: bool = False
) -> nn.Module:
    """torchvision's VGG-16 with BatchNorm, channels × `width`, with a small-image head.

    Adaptations: the five max-pools use ceil_mode so 28×28 survives (28→14→7→4→2→1; 32 ends at 1×1);
    the 7×7 avg-pool and 4096-wide classifier become a global average pool and one linear layer
    (fresh, also when pretrained). Conv layers keep their ImageNet weights when pretrained; without
    them the conv stack is built here in torchvision's layout, so the 120M-parameter ImageNet
    classifier is never allocated.
    """
    _require_unit_width("vgg16-bn", width, pretrained)
    if pretrained:
        weights = torchvision_models().VGG16_BN_Weights.DEFAULT
        features = load_torchvision_model(
            "vgg16-bn", torchvision_models().vgg16_bn, weights
        ).features
    else:
        features = _vgg16_features(width)
    for module in features:
        if isinstance(module, nn.MaxPool2d):
            module.ceil_mode = True
    features[0] = adapt_input_channels(features[0], in_channels, keep_weights=pretrained)
    return SmallImageVGG(features, num_classes)


def alexnet(*, num_classes: int, in_channels: int = 3, pretrained: bool = False) -> nn.Module:
    """torchvision's AlexNet with a small-image stem.

    The 11×11 stride-4 first conv becomes a 3×3 stride-1 conv (64 filters; fresh, also when
    pretrained), so the three 3×3 stride-2 max-pools leave 3×3 of a 32×32 image and 2×2 of a
    28×28 one. The 6×6 adaptive avg-pool and the classifier are kept (pretrained FC layers load);
    only the last linear layer is replaced for other class counts.
    """
    weights = torchvision_models().AlexNet_Weights.DEFAULT if pretrained else None
    model = load_torchvision_model("alexnet", torchvision_models().alexnet, weights)
    model.features[0] = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1)
    model.classifier[-1] = _new_head(model.classifier[-1], num_classes)
    return model


def squeezenet(*, num_classes: int, in_channels: int = 3, pretrained: bool = False) -> nn.Module:
    """torchvision's SqueezeNet 1.1 (the cheaper of the two versions, same ImageNet accuracy).

    Adaptations: the 3×3 stem conv runs at stride 1 with padding 1 instead of stride 2 (keeps its
    pretrained weights), so its three ceil-mode max-pools take 32×32 to 4×4 and 28×28 to 3×3. The
    final 1×1 classifier conv is replaced (init normal(0, 0.01) as torchvision's) for other class
    counts; torchvision's ReLU before the global average pool stays, so logits are non-negative.
    """
    weights = torchvision_models().SqueezeNet1_1_Weights.DEFAULT if pretrained else None
    model = load_torchvision_model("squeezenet", torchvision_models().squeezenet1_1, weights)
    stem = adapt_input_channels(model.features[0], in_channels, keep_weights=pretrained)
    stem.stride, stem.padding = (1, 1), (1, 1)
    model.features[0] = stem
    old = model.classifier[1]
    if old.out_channels != num_classes:
        new = nn.Conv2d(old.in_channels, num_classes, kernel_size=1)
        nn.init.normal_(new.weight, std=0.01)
        nn.init.zeros_(new.bias)
        model.classifier[1] = new
    return model


def densenet121(
    *, num_classes: int, in_channels: int = 3, width: float = 1.0, pretrained: bool = False
) -> nn.Module:
    """torchvision's DenseNet-121 (blocks 6, 12, 24, 16) with a CIFAR stem.

    Adaptations: the 7×7 stride-2 stem conv becomes 3×3 stride 1 (fresh, also when pretrained) and
    the stem max-pool is removed, so the three transitions take 32×32 to 4×4. `width` scales the
    growth rate (32) and the stem channels (64). The classifier is replaced for other class counts.
    """
    _require_unit_width("densenet121", width, pretrained)
    if pretrained:
        model = load_torchvision_model(
            "densenet121",
            torchvision_models().densenet121,
            torchvision_models().DenseNet121_Weights.DEFAULT,
        )
    else:
        model = torchvision_models().DenseNet(
            growth_rate=max(1, round(32 * width)),
            block_config=(6, 12, 24, 16),
            num_init_features=max(1, round(64 * width)),
        )
    stem_channels = model.features.conv0.out_channels
    model.features.conv0 = nn.Conv2d(in_channels, stem_channels, 3, padding=1, bias=False)
    nn.init.kaiming_normal_(model.features.conv0.weight)
    model.features.pool0 = nn.Identity()
    model.classifier = _new_head(model.classifier, num_classes)
    return model


def mobilenetv2(
    *, num_classes: int, in_channels: int = 3, width: float = 1.0, pretrained: bool = False
) -> nn.Module:
    """torchvision's MobileNetV2 (inverted residuals, linear bottlenecks); `width` = width_mult.

    Adaptations, as common CIFAR ports do: the stem conv and the first 24-channel stage run at
    stride 1 instead of 2, so the total stride is 8 (32×32 → 4×4, 28×28 → 4×4). Strides do not
    change weight shapes, so pretrained weights load everywhere except a replaced first conv (other
    channel counts: channel-averaged filters) and the classifier (other class counts: fresh).
    """
    _require_unit_width("mobilenetv2", width, pretrained)
    # (expansion t, channels c, repeats n, stride s) per stage; torchvision's second stage has s=2.
    stages = [
        [1, 16, 1, 1],
        [6, 24, 2, 1],
        [6, 32, 3, 2],
        [6, 64, 4, 2],
        [6, 96, 3, 1],
        [6, 160, 3, 2],
        [6, 320, 1, 1],
    ]
    weights = torchvision_models().MobileNet_V2_Weights.DEFAULT if pretrained else None
    model = load_torchvision_model(
        "mobilenetv2",
        torchvision_models().mobilenet_v2,
        weights,
        width_mult=width,
        inverted_residual_setting=stages,
    )
    stem = adapt_input_channels(model.features[0][0], in_channels, keep_weights=pretrained)
    stem.stride = (1, 1)
    model.features[0][0] = stem
    old = model.classifier[-1]
    if old.out_features != num_classes:
        new = nn.Linear(old.in_features, num_classes)
        nn.init.normal_(new.weight, std=0.01)
        nn.init.zeros_(new.bias)
        model.classifier[-1] = new
    return model
