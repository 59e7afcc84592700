"""airbench-style networks from Keller Jordan's CIFAR-10 speedruns (airbench94 / airbench96).

The net: a frozen 2×2 patch-whitening conv computed from training images, GELU, three conv groups
(conv → max-pool → BatchNorm → GELU, then more conv → BatchNorm → GELU), a global max-pool and a
bias-free linear head whose logits are scaled down. Convs start as Dirac (identity) filters and the
BatchNorms train only their bias. Written for tricklab from the published design, not copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tricklab.core.errors import TrickLabError

DEFAULT_WIDTHS = (64, 256, 256)
# airbench94 divides the logits by 9: a fixed temperature that suits its label-smoothed loss.
DEFAULT_LOGIT_SCALE = 1 / 9
# airbench writes its BatchNorm momentum as 0.6 for the *old* statistics; torch's momentum weighs
# the *new* batch, so the same running average is torch momentum 1 - 0.6 = 0.4.
DEFAULT_BN_MOMENTUM = 0.4
# airbench uses eps=1e-12 (practically none); torch's 1e-5 is invisible next to the per-channel
# variances here but keeps an all-constant channel (e.g. a blank image batch) from blowing up.
DEFAULT_BN_EPS = 1e-5
# Added to the patch second-moment eigenvalues so near-zero directions are not amplified to noise
# (airbench's 5e-4).
DEFAULT_WHITEN_EPS = 5e-4


def dirac_init_(conv: nn.Conv2d) -> nn.Conv2d:
    """Make the first `in_channels` filters of `conv` identities (airbench's init); returns `conv`.

    With 'same' padding the conv then copies its input to output channels [:in_channels]; the other
    filters keep their random init. Zeroes the bias if there is one.
    """
    with torch.no_grad():
        nn.init.dirac_(conv.weight[: conv.in_channels])
        if conv.bias is not None:
            conv.bias.zero_()
    return conv


def _patch_columns(images: Tensor) -> Tensor:
    """Every 2×2 patch of N×C×H×W `images` as a column, each ordered (channel, row, col) as the
    conv weight and F.unfold order it: a (C·4) × (N·(H-1)·(W-1)) matrix. Built from four shifted
    views, the same numbers as F.unfold's, which is 1.6-2.7x slower on a CPU in float64 for 600 to
    5,000 images (benchmarks/whitening_fit.py)."""
    n, c, h, w = images.shape
    shifted = [images[:, :, i : h - 1 + i, j : w - 1 + j] for i in (0, 1) for j in (0, 1)]
    return torch.stack(shifted, dim=2).reshape(n, c * 4, -1).transpose(0, 1).reshape(c * 4, -1)


class PatchWhitening(nn.Conv2d):
    """A 2×2 conv (no padding) whose frozen filters whiten the 2×2 patches of the training images.

    `init_from_data` sets the filters as airbench94 does: the eigenvectors of the patches' second
    moment, largest eigenvalue first, each scaled by 1/sqrt(eigenvalue + eps) and followed by its
    negation (so after a GELU both signs of every whitened direction survive): out_channels =
    2 × (in_channels × 4). The filters never train; the bias starts at zero (as airbench's) and
    trains until the training loop freezes it (`whiten.bias.requires_grad_(False)`).
    """

    def __init__(self, in_channels: int, eps: float = DEFAULT_WHITEN_EPS):
        patch_dim = in_channels * 2 * 2
        super().__init__(in_channels, 2 * patch_dim, kernel_size=2, padding=0, bias=True)
        self.eps = eps
        self.weight.requires_grad_(False)
        with torch.no_grad():
            self.bias.zero_()

    @torch.no_grad()
    def init_from_data(self, images: Tensor, chunk_size: int = 256) -> None:
        """Compute the whitening filters from `images` (N×C×H×W, normalized like training input).

        The second moment is not centred (the inputs are normalized, so their mean is near zero),
        and the filters come strongest direction first: the next conv's Dirac init passes its
        first channels on, so a first block narrower than out_channels keeps the directions that
        carry the most of the image, not the noisiest ones. The bias is left as it is.
        """
        if images.ndim != 4 or images.shape[1] != self.in_channels:
            raise TrickLabError(
                f"whitening needs images shaped N×{self.in_channels}×H×W, got {tuple(images.shape)}"
            )
        if images.shape[0] == 0 or min(images.shape[2:]) < 2:
            raise TrickLabError("whitening needs at least one image of at least 2×2 pixels")
        patch_dim = self.in_channels * 4
        outer = torch.zeros(patch_dim, patch_dim, dtype=torch.float64, device=images.device)
        count = 0
        # Chunked so a few thousand images never materialise all their patches in float64 at once.
        for chunk in images.split(chunk_size):
            columns = _patch_columns(chunk.double())
            outer += columns @ columns.T
            count += columns.shape[1]
        eigenvalues, eigenvectors = torch.linalg.eigh(outer / count)  # ascending
        eigenvalues, eigenvectors = eigenvalues.flip(0), eigenvectors.flip(1)
        filters = eigenvectors.T / torch.sqrt(eigenvalues.clamp_min(0) + self.eps)[:, None]
        self.weight.copy_(torch.cat([filters, -filters]).reshape_as(self.weight))


class FixedScaleBatchNorm(nn.BatchNorm2d):
    """BatchNorm whose scale stays 1 (requires_grad=False) and whose bias trains, as in airbench."""

    def __init__(
        self, num_features: int, momentum: float = DEFAULT_BN_MOMENTUM, eps: float = DEFAULT_BN_EPS
    ):
        super().__init__(num_features, eps=eps, momentum=momentum)
        self.weight.requires_grad_(False)


class GlobalMaxPool(nn.Module):
    """Each channel's maximum over its whole map, (N, C, H, W) -> (N, C, 1, 1): what
    nn.AdaptiveMaxPool2d(1) computes, values and gradient (to the maximum's position), as the map
    flattened and max'ed with its indices. PyTorch's adaptive kernel is slow on a GPU in
    channels-last (its backward scatters with atomics): on an H200, fp16, forward + backward
    captured in a CUDA graph at batch 1024 on the net's 256x3x3 map, 355 us adaptive, 49 us amax,
    19 us this (benchmarks/pool_kernels.py, 2026-11-28, the same figures in two calls).

    Not amax: where positions tie, amax splits the gradient, and under torch.compile in float16
    inductor may recompute the pool's input in the backward at a higher precision than it stored,
    so amax's mask (input == maximum) came out empty and the gradient NaN (H200 and CPU, torch
    2.11 and 2.14, 2026-11-26). The indices are the forward's own, so no comparison is redone."""

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(2).max(dim=2, keepdim=True).values.unsqueeze(3)


class ConvGroup(nn.Module):
    """conv3×3 → MaxPool2d(2) → BN → GELU, then (depth − 1) × (conv3×3 → BN → GELU).

    With `residual`, the output of the first block is added back just before the last GELU
    (as airbench96 does with its three-conv groups since its 06/2024 revision; the PyPI package's
    older lib_airbench96 adds it after the GELU).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        depth: int = 2,
        residual: bool = False,
        bn_momentum: float = DEFAULT_BN_MOMENTUM,
        bn_eps: float = DEFAULT_BN_EPS,
    ):
        super().__init__()
        channels = [in_channels] + [out_channels] * depth
        self.convs = nn.ModuleList(
            dirac_init_(nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False))
            for c_in, c_out in zip(channels, channels[1:])
        )
        self.norms = nn.ModuleList(
            FixedScaleBatchNorm(out_channels, bn_momentum, bn_eps) for _ in range(depth)
        )
        self.pool = nn.MaxPool2d(2)
        self.activation = nn.GELU()
        self.residual = residual

    def forward(self, x: Tensor) -> Tensor:
        x = self.activation(self.norms[0](self.pool(self.convs[0](x))))
        shortcut = x
        last = len(self.convs) - 1
        for i in range(1, len(self.convs)):
            x = self.norms[i](self.convs[i](x))
            if self.residual and i == last:
                x = x + shortcut
            x = self.activation(x)
        return x


@dataclass(frozen=True)
class AirbenchNorms:
    """The net's normalization constants: BatchNorm momentum (torch's, weighing the new batch) and
    eps, and the eps added to the whitening eigenvalues."""

    bn_momentum: float = DEFAULT_BN_MOMENTUM
    bn_eps: float = DEFAULT_BN_EPS
    whiten_eps: float = DEFAULT_WHITEN_EPS


class AirbenchNet(nn.Module):
    """Patch whitening → GELU → three ConvGroups → global max-pool → bias-free linear × logit_scale.

    Call `init_from_data(images)` before training to compute the whitening filters.
    """

    def __init__(
        self,
        num_classes: int,
        in_channels: int = 3,
        widths: Sequence[int] = DEFAULT_WIDTHS,
        *,
        depth: int = 2,
        residual: bool = False,
        logit_scale: float = DEFAULT_LOGIT_SCALE,
        norms: AirbenchNorms | None = None,
    ):
        super().__init__()
        if depth < 1 or (residual and depth < 2):
            raise TrickLabError(
                f"airbench depth must be >= 1 (>= 2 with residual groups), got {depth}"
            )
        norms = norms if norms is not None else AirbenchNorms()
        self.whiten = PatchWhitening(in_channels, eps=norms.whiten_eps)
        group_inputs = [self.whiten.out_channels, *widths[:-1]]
        self.groups = nn.Sequential(
            *(
                ConvGroup(
                    c_in,
                    c_out,
                    depth=depth,
                    residual=residual,
                    bn_momentum=norms.bn_momentum,
                    bn_eps=norms.bn_eps,
                )
                for c_in, c_out in zip(group_inputs, widths)
            )
        )
        self.pool = GlobalMaxPool()
        self.head = nn.Linear(widths[-1], num_classes, bias=False)
        self.logit_scale = logit_scale

    def init_from_data(self, images: Tensor) -> None:
        """Data-dependent init: compute the whitening filters from a few thousand training images."""
        self.whiten.init_from_data(images)

    def forward(self, x: Tensor) -> Tensor:
        x = self.groups(F.gelu(self.whiten(x)))
        return self.head(self.pool(x).flatten(1)) * self.logit_scale


def resolve_widths(
    model_name: str, default: Sequence[int], width: float, widths: Sequence[int] | None
) -> tuple[int, ...]:
    """Per-stage channel counts: `widths` as given, else `default` scaled by `width` (at least 1)."""
    if widths is None:
        return tuple(max(1, round(c * width)) for c in default)
    if len(widths) != len(default) or any(int(c) != c or c < 1 for c in widths):
        raise TrickLabError(
            f"{model_name} needs widths as {len(default)} positive integers "
            f"(default {list(default)}), got {list(widths)}"
        )
    return tuple(int(c) for c in widths)


def airbench(
    *,
    num_classes: int,
    in_channels: int = 3,
    width: float = 1.0,
    widths: Sequence[int] | None = None,
    depth: int = 2,
    residual: bool = False,
    logit_scale: float = DEFAULT_LOGIT_SCALE,
) -> AirbenchNet:
    """airbench94's net: whitening + three two-conv groups of widths (64, 256, 256) × `width`.

    Differences from airbench94: BatchNorm eps 1e-5 instead of 1e-12 (see DEFAULT_BN_EPS); the final
    pool is a global max-pool (GlobalMaxPool), the same as airbench's MaxPool2d(3) on the 3×3 map
    a 32×32 image leaves, so that 28×28 inputs work too.
    """
    return AirbenchNet(
        num_classes,
        in_channels,
        resolve_widths("airbench", DEFAULT_WIDTHS, width, widths),
        depth=depth,
        residual=residual,
        logit_scale=logit_scale,
    )


def airbench_residual(
    *,
    num_classes: int,
    in_channels: int = 3,
    width: float = 1.0,
    widths: Sequence[int] | None = None,
) -> AirbenchNet:
    """airbench with three convs per group and a residual connection around the last two.

    The airbench96 layout at airbench94's widths (64, 256, 256) × `width`; airbench96 itself
    (legacy/airbench96.py, the 96.03 % record) uses widths (128, 384, 512), which a recipe passes
    as `widths` (speedrun96).
    """
    return airbench(
        num_classes=num_classes,
        in_channels=in_channels,
        width=width,
        widths=widths,
        depth=3,
        residual=True,
    )
