"""timm's models as tricklab builds them (`model.name=timm:NAME`): the package imported when asked
for, and a model made for tricklab's inputs."""

from __future__ import annotations

from torch import nn

from tricklab.core.errors import TrickLabError


def import_timm() -> object:
    """The timm package; TrickLabError saying how to install it."""
    try:
        import timm
    except ImportError:
        raise TrickLabError(
            "model.name=timm:... needs the timm package, which is not installed: "
            "pip install 'tricklab[timm]' (or pip install timm)"
        ) from None
    return timm


def create_timm(
    timm: object,
    arch: str,
    *,
    num_classes: int,
    in_channels: int,
    image_size: int,
    pretrained: bool = False,
) -> nn.Module:
    """timm's `arch` for tricklab's inputs (img_size only to the models that take it)."""
    kwargs = dict(pretrained=pretrained, num_classes=num_classes, in_chans=in_channels)
    try:
        return timm.create_model(arch, img_size=image_size, **kwargs)
    except TypeError as err:  # a CNN: its size follows the input
        if "img_size" not in str(err):
            raise
    return timm.create_model(arch, **kwargs)
