"""Test-time augmentation: average logits over mirrored (and translated) views."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def flip_logits(
    forward: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor
) -> torch.Tensor:
    """Mean of the logits of the images and of their mirror images, in fp32.

    Each forward's logits are taken to fp32 before averaging: bf16 logits (autocast) have 8 bits
    of precision, and a mean rounded to them can flip an argmax (airbench's fp16 logits have 11).
    The first logits are copied before the second call: a forward compiled with CUDA graphs
    (tricks.compile=reduce-overhead or max-autotune) replays into the same output memory, so its
    first output would be overwritten by the second."""
    first = forward(images).to(torch.float32, copy=True)
    return 0.5 * (first + forward(images.flip(-1)).float())


def tta_logits(
    forward: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor, tta: str
) -> torch.Tensor:
    """Logits under `tta`: none, flip, or flip-translate (airbench94's level 2: half weight on the
    flip-averaged logits, half on those of the image shifted one pixel up-left and down-right).
    Averaged in fp32 (`flip_logits`); with none, the forward's own logits."""
    if tta == "none":
        return forward(images)
    logits = flip_logits(forward, images)
    if tta == "flip":
        return logits
    h, w = images.shape[-2:]
    padded = F.pad(images, (1, 1, 1, 1), mode="reflect")
    up_left, down_right = padded[..., :h, :w], padded[..., 2:, 2:]
    shifted = 0.5 * (flip_logits(forward, up_left) + flip_logits(forward, down_right))
    return 0.5 * logits + 0.5 * shifted
