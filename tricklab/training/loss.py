"""The training loss: cross-entropy with label smoothing, summed over the batch for fp16 weights."""

from __future__ import annotations

import torch
from torch import nn


class SummedCrossEntropy(nn.CrossEntropyLoss):
    """Cross-entropy summed over the batch, computed in fp32 from (fp16) logits.

    airbench's loss for its fp16 weights: the gradients of a summed loss are those of the mean
    times the batch size, far above fp16's underflow (6e-5 is its smallest normal number), where
    a mean loss's small gradients would be flushed. `PrecisionPolicy.loss_scale` gives the factor
    by which the optimizer's lr is divided to keep the step of a mean loss."""

    def __init__(self, label_smoothing: float = 0.0) -> None:
        super().__init__(reduction="sum", label_smoothing=label_smoothing)

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return super().forward(logits.float(), labels)


def training_loss(label_smoothing: float, summed: bool = False) -> nn.CrossEntropyLoss:
    """Cross-entropy with tricks.label_smoothing (Szegedy et al. 2016, "Rethinking the Inception
    Architecture": the target puts 1 - s on the label and s spread over all classes); the batch's
    mean, or its sum (`summed`: the policy's `summed_loss`, for fp16 weights)."""
    if summed:
        return SummedCrossEntropy(label_smoothing)
    return nn.CrossEntropyLoss(label_smoothing=label_smoothing)
