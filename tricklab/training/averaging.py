"""Weight averaging: EMA of the weights, and airbench's lookahead variant that copies it back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


class WeightAverage:
    """Exponential moving average of a model's floating-point state (weights and BN statistics).

    After every optimizer step whose count (from the start of training) is a multiple of `every`,
    once more than `warmup_steps` steps are done: avg = decay * avg + (1 - decay) * weights; the
    first update copies the weights. With `lookahead`, the average is then copied back into the
    model (Zhang et al. 2019's slow weights; airbench94's "lookahead" EMA with decay 0.95^5 after
    steps 5, 10, 15, ...). With `decay_power` > 0 the decay ramps up as
    decay * ((step + 1) / total_steps) ** decay_power: airbench94 uses power 3, so training moves
    fast early and averages strongly at the end. airbench's first update blends in its initial
    weights at a decay of 0.95^5 x (5/476)^3 < 1e-6 where this one copies.
    """

    def __init__(
        self,
        model: nn.Module,
        decay: float,
        every: int = 1,
        warmup_steps: int = 0,
        lookahead: bool = False,
        decay_power: float = 0.0,
        total_steps: int = 1,
    ) -> None:
        self.decay, self.every, self.warmup_steps, self.lookahead = (
            decay,
            every,
            warmup_steps,
            lookahead,
        )
        self.decay_power, self.total_steps = decay_power, max(total_steps, 1)
        state = model.state_dict().values()  # a module's extra state may hold any object
        self.live = [t for t in state if isinstance(t, torch.Tensor) and t.is_floating_point()]
        self.average: list[torch.Tensor] | None = None

    @torch.no_grad()
    def update(self, step: int) -> None:
        """Call after optimizer step number `step` (0-based)."""
        done = step + 1
        if done <= self.warmup_steps or done % self.every:
            return
        if self.average is None:
            self.average = [t.detach().clone() for t in self.live]
        else:
            decay = self.decay
            if self.decay_power > 0:
                decay *= min((step + 1) / self.total_steps, 1.0) ** self.decay_power
            torch._foreach_lerp_(self.average, self.live, 1 - decay)
        if self.lookahead:
            torch._foreach_copy_(self.live, self.average)

    @contextlib.contextmanager
    @torch.no_grad()
    def swapped_in(self) -> Iterator[None]:
        """Evaluate with the averaged weights, then restore the live ones.

        Also with lookahead: between copy-backs the live weights drift from the average, and the
        model keeps the average at the end (airbench copies it back before its final evaluations),
        so every evaluation scores the weights the run ends with."""
        if self.average is None:
            yield
            return
        saved = [t.clone() for t in self.live]
        torch._foreach_copy_(self.live, self.average)
        try:
            yield
        finally:
            torch._foreach_copy_(self.live, saved)

    @torch.no_grad()
    def copy_to_model(self) -> None:
        """End of training: the model keeps the averaged weights."""
        if self.average is not None:
            torch._foreach_copy_(self.live, self.average)
