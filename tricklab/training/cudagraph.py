"""tricks.cuda_graph: the whole training step captured once in a CUDA graph and replayed.

A step of airbench's net launches a few hundred small kernels; on an H100 the GPU waits on the
host between them (launch-bound, ~44 % busy). A CUDA graph (torch.cuda.CUDAGraph) records the
step's kernels once and launches them all with one call. What the graph holds, per step:
the learning rate of every optimizer group read from a device table at a device step counter
(the schedule as a device tensor), forward, loss, backward and torch's fused SGD step (which takes
the lr as a tensor; or Muon's, MuonSGD, whose filter step and fused SGD take it so too), then the
counter's increment. Outside it: copying the loader's batch into
the graph's input buffers (the data stays on the device) and the EMA / lookahead update, which
runs every `ema_every` steps with a step-dependent decay (two foreach kernels then).

The first WARMUP_STEPS steps of a run run eagerly on a side stream (PyTorch's rule before a
capture: lazy state such as momentum buffers and cuDNN's choices exist first); the next step is
captured and replayed. A change of the trainable parameters (the whitening bias frozen after
model.whiten_bias_epochs) or of the batch shape is captured anew; a batch of another shape than
the captured one (an epoch's last, smaller batch) runs eagerly. Nothing here syncs the host.

PyTorch's docs: https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs ("whole network
capture"); the recipe's check (TricksConfig._check_cuda_graph) refuses what a graph cannot hold."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from tricklab.core.errors import TrickLabError
from tricklab.recipe.schema import ScheduleConfig
from tricklab.training.muon import MuonSGD
from tricklab.training.schedule import lr_factor

if TYPE_CHECKING:
    from tricklab.training.loop import Parts

WARMUP_STEPS = 2  # eager steps (on a side stream) before a capture


def lr_table(
    base_lrs: list[float], schedule: ScheduleConfig, total_steps: int, device: torch.device
) -> torch.Tensor:
    """[groups, total_steps + 1] float32: group g's lr before step s, as LambdaLR sets it."""
    factors = [lr_factor(schedule, step, total_steps) for step in range(total_steps + 1)]
    rows = [[base * f for f in factors] for base in base_lrs]
    return torch.tensor(rows, dtype=torch.float32, device=device)


def reads_lr_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether every kernel of `optimizer`'s step takes the lr as a device tensor: torch's fused
    SGD, or MuonSGD with its SGD part fused."""
    if isinstance(optimizer, MuonSGD):
        return optimizer.fused
    return all(group.get("fused") for group in optimizer.param_groups)


class GraphedStep:
    """`train_step` for one process with fused SGD, captured in a CUDA graph (module docstring).

    `capture=False` runs the same graph-safe body eagerly every step (the device lr table, the
    counter, the static buffers): how the tests check on a CPU that a replay trains as the loop's
    own step does."""

    def __init__(
        self, parts: Parts, schedule: ScheduleConfig, total_steps: int, capture: bool = True
    ) -> None:
        if dist.is_initialized() and dist.get_world_size() > 1:  # a graph holds no DDP hooks
            raise TrickLabError(
                "tricks.cuda_graph=on runs in one process; drop it or --nproc for data-parallel runs"
            )
        if not reads_lr_on_device(parts.optimizer):
            raise TrickLabError(
                "tricks.cuda_graph=true needs an optimizer that reads its lr on the device: "
                "torch's fused SGD (optim.name=sgd) or Muon's (optim.name=muon)"
            )
        self.parts, self.capture = parts, capture
        device = parts.device
        base = [float(g.get("initial_lr", g["lr"])) for g in parts.optimizer.param_groups]
        self.table = lr_table(base, schedule, total_steps, device)
        self.lrs = self.table[:, 0].clone()  # the groups' lr tensors are views of it
        self.counter = torch.zeros(1, dtype=torch.long, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.key: tuple | None = None  # what the graph was captured for
        self.eager_steps = 0  # since the last capture key change
        self.captures = 0
        self.static: tuple[torch.Tensor, ...] = ()  # images, labels, loss, logits

    def reset(self) -> None:
        """Forget the graph (after the optimizer's state was replaced: warm-up's restore)."""
        self.graph, self.key, self.eager_steps, self.static = None, None, 0, ()

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, step: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Train on the batch as optimizer step `step` (0-based); (loss, logits) on the device."""
        key = tuple(p.requires_grad for p in self.parts.model.parameters())
        if key != self.key:  # a parameter frozen: its gradient leaves the step
            self.reset()
            self.key = key
        if self.graph is None and (not self.capture or self.eager_steps < WARMUP_STEPS):
            self.eager_steps += 1
            return self._eager(images, labels, step)
        if self.graph is None:
            self._capture(images, labels, step)
        static_images, static_labels, loss, logits = self.static
        if images.shape != static_images.shape or images.dtype != static_images.dtype:
            return self._eager(images, labels, step)  # an epoch's last, smaller batch
        static_images.copy_(images)
        static_labels.copy_(labels)
        self.graph.replay()
        return loss.clone(), logits

    def _start_at(self, step: int) -> None:
        """The groups' lrs and the counter at `step`, outside the graph (which keeps them in step)."""
        for index, group in enumerate(self.parts.optimizer.param_groups):
            group["lr"] = self.lrs[index]  # a 0-d view: the fused step reads it on the device
        self.counter.fill_(step)
        self._read_lrs()

    def _read_lrs(self) -> None:
        torch.index_select(self.table, 1, self.counter, out=self.lrs.view(-1, 1))

    def _body(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The step as the graph holds it: forward, loss, backward, SGD, then the counter and the
        lrs of the next step (as LambdaLR's step() leaves them)."""
        parts = self.parts
        with parts.autocast():
            logits = parts.forward(images)
            loss = parts.loss_fn(logits, labels)
        loss.backward()
        parts.optimizer.step()
        self.counter.add_(1)
        self._read_lrs()
        return loss.detach(), logits.detach()

    def _eager(self, images, labels, step):
        self._start_at(step)
        self.parts.optimizer.zero_grad(set_to_none=True)
        if not self.capture or self.parts.device.type != "cuda":
            return self._body(images, labels)
        side = torch.cuda.Stream(self.parts.device)
        side.wait_stream(torch.cuda.current_stream(self.parts.device))
        with torch.cuda.stream(side):
            out = self._body(images, labels)
        torch.cuda.current_stream(self.parts.device).wait_stream(side)
        return out

    def _capture(self, images: torch.Tensor, labels: torch.Tensor, step: int) -> None:
        self._start_at(step)
        static_images, static_labels = images.clone(), labels.clone()
        self.parts.optimizer.zero_grad(set_to_none=True)  # the graph's backward writes them
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            loss, logits = self._body(static_images, static_labels)
        # Capturing records the kernels without running them (counter and lrs still at `step`):
        # the replay that follows runs the step.
        self.graph, self.static = graph, (static_images, static_labels, loss, logits)
        self.captures += 1
