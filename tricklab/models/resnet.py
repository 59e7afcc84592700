"""ResNets for 32×32 images, written for tricklab: Page's DAWNBench ResNet-9 and a CIFAR ResNet-18."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from tricklab.models.airbench import GlobalMaxPool, resolve_widths

RESNET9_WIDTHS = (64, 128, 256, 512)
# Page's ResNet-9 multiplies its logits by 0.125 (a fixed temperature for the cross-entropy).
RESNET9_LOGIT_SCALE = 0.125
RESNET18_WIDTHS = (64, 128, 256, 512)


def conv_bn_relu(in_channels: int, out_channels: int, stride: int = 1) -> nn.Sequential:
    """3×3 conv (no bias; the BatchNorm has one) → BatchNorm → ReLU."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class Residual(nn.Module):
    """x + body(x)."""

    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x)


class ResNet9(nn.Module):
    """Page's ResNet-9 (DAWNBench 2018): prep → layer1 + residual → layer2 → layer3 + residual.

    Each layer is conv-BN-ReLU then MaxPool2d(2); each residual is two conv-BN-ReLU added to their
    input. A global max-pool, a bias-free linear head and logits × 0.125 finish it.
    """

    def __init__(
        self, num_classes: int, in_channels: int = 3, widths: Sequence[int] = RESNET9_WIDTHS
    ):
        super().__init__()
        prep, c1, c2, c3 = widths
        self.features = nn.Sequential(
            conv_bn_relu(in_channels, prep),
            conv_bn_relu(prep, c1),
            nn.MaxPool2d(2),
            Residual(nn.Sequential(conv_bn_relu(c1, c1), conv_bn_relu(c1, c1))),
            conv_bn_relu(c1, c2),
            nn.MaxPool2d(2),
            conv_bn_relu(c2, c3),
            nn.MaxPool2d(2),
            Residual(nn.Sequential(conv_bn_relu(c3, c3), conv_bn_relu(c3, c3))),
        )
        self.pool = GlobalMaxPool()
        self.head = nn.Linear(c3, num_classes, bias=False)
        self.logit_scale = RESNET9_LOGIT_SCALE

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.pool(self.features(x)).flatten(1)) * self.logit_scale


class BasicBlock(nn.Module):
    """Two 3×3 conv-BN layers plus a shortcut (1×1 conv-BN when the shape changes), then ReLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class CifarResNet18(nn.Module):
    """ResNet-18 for small images: 3×3 stride-1 stem, no max-pool, BasicBlocks [2, 2, 2, 2] at
    strides 1, 2, 2, 2, global average pool, linear head."""

    def __init__(
        self, num_classes: int, in_channels: int = 3, widths: Sequence[int] = RESNET18_WIDTHS
    ):
        super().__init__()
        self.stem = conv_bn_relu(in_channels, widths[0])
        stages = []
        c_in = widths[0]
        for c_out, stride in zip(widths, (1, 2, 2, 2)):
            stages.append(nn.Sequential(BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out)))
            c_in = c_out
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(c_in, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.pool(self.stages(self.stem(x))).flatten(1))


def resnet9(
    *,
    num_classes: int,
    in_channels: int = 3,
    width: float = 1.0,
    widths: Sequence[int] | None = None,
) -> ResNet9:
    """Page's ResNet-9; `widths` = (prep, layer1, layer2, layer3), default (64, 128, 256, 512)."""
    return ResNet9(
        num_classes, in_channels, resolve_widths("resnet9", RESNET9_WIDTHS, width, widths)
    )


def resnet18(
    *,
    num_classes: int,
    in_channels: int = 3,
    width: float = 1.0,
    widths: Sequence[int] | None = None,
) -> CifarResNet18:
    """CIFAR ResNet-18; `widths` = the four stages' channels, default (64, 128, 256, 512)."""
    return CifarResNet18(
        num_classes, in_channels, resolve_widths("resnet18", RESNET18_WIDTHS, width, widths)
    )
