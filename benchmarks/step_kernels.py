"""ATen operators one training step dispatches: tricklab's speedrun94 (and speedrun94-muon) against
airbench94's own network and step (the `airbench` package 0.1.8 from PyPI), in each precision.

Every operator PyTorch's dispatcher runs is counted under a TorchDispatchMode on the CPU, by phase:
forward, loss, backward, optimizer, schedule, EMA/lookahead. Both sides step over one lookahead
period (5 steps: airbench's lookahead runs every 5th) after 5 warm-up steps (the optimizer's state
made), and the counts are per step (the period's sum / 5). `casts` counts the dtype conversions
(aten._to_copy) of a step; `weight casts` those whose input is a parameter.

airbench94 runs fp16 weights with fp32 BatchNorm (16-true-bn32); its 32-true row is its net in
fp32, its bf16-mixed row that net under bf16 autocast, both with its own step. airbench's net is
built by its own make_net94 (its `.cuda()` a no-op here: the count is the CPU's).

    pip install airbench==0.1.8
    python benchmarks/step_kernels.py [--width 0.25] [--batch 64] [--image-size 32]

Writes benchmarks/results/step-kernels-<date>.json and prints a Markdown table. Goal: tricklab <=
airbench in every row.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

PERIOD = 5  # airbench's lookahead every 5 steps: count over one period, report per step
PRECISIONS = ("32-true", "bf16-mixed", "16-true-bn32")
PHASES = ("forward", "loss", "backward", "optimizer", "schedule", "ema")
RESULTS = Path(__file__).parent / "results"


class OpCounter(TorchDispatchMode):
    """Counts each ATen operator dispatched, under the phase the step is in."""

    def __init__(self, params: set[int]) -> None:
        super().__init__()
        self.phase = "other"
        self.counts: collections.Counter = collections.Counter()
        self.casts = 0
        self.weight_casts = 0
        self.params = params  # ids of the parameters' tensors

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[self.phase] += 1
        if func.overloadpacket is torch.ops.aten._to_copy:
            self.casts += 1
            if args and id(args[0]) in self.params:
                self.weight_casts += 1
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def in_phase(self, phase: str, after: str = "other") -> Iterator[None]:
        self.phase = phase
        try:
            yield
        finally:
            self.phase = after


def phased(counter_box: list, phase: str, fn: Callable, after: str = "other") -> Callable:
    """`fn`, its operators counted under `phase` while a counter is active (counter_box[0])."""

    def call(*args, **kwargs):
        counter = counter_box[0]
        if counter is None:
            return fn(*args, **kwargs)
        with counter.in_phase(phase, after):
            return fn(*args, **kwargs)

    return call


def count(step: Callable[[int], None], params: list[torch.Tensor], box: list) -> dict:
    """Per-step operator counts of `step(i)` over one period after PERIOD warm-up steps."""
    for i in range(PERIOD):
        step(i)
    counter = OpCounter({id(p) for p in params})
    box[0] = counter
    with counter:
        for i in range(PERIOD, 2 * PERIOD):
            step(i)
    box[0] = None
    per_step = {phase: counter.counts[phase] / PERIOD for phase in (*PHASES, "other")}
    per_step["total"] = sum(counter.counts.values()) / PERIOD
    per_step["casts"] = counter.casts / PERIOD
    per_step["weight_casts"] = counter.weight_casts / PERIOD
    return per_step


# ---------------------------------------------------------------- tricklab


class _PhasedLoss(nn.Module):
    def __init__(self, loss_fn: nn.Module, box: list) -> None:
        super().__init__()
        self.loss_fn, self.reduction, self.box = loss_fn, loss_fn.reduction, box

    def forward(self, logits, labels):
        counter = self.box[0]
        if counter is None:
            return self.loss_fn(logits, labels)
        with counter.in_phase("loss", after="backward"):  # what follows, to the optimizer
            return self.loss_fn(logits, labels)


def tricklab_counts(recipe_name: str, precision: str, args: argparse.Namespace) -> dict:
    """tricklab's loop.train_step and EMA update, as run_loop calls them, on the recipe's setup."""
    from tricklab.recipe.schema import load_recipe
    from tricklab.training import api, loop

    overrides = [
        "data.name=synthetic",
        f"data.train_size={args.batch * 4 * PERIOD}",
        "data.test_size=64",
        f"data.image_size={args.image_size}",
        f"model.widths=[{','.join(str(round(w * args.width)) for w in (64, 256, 256))}]",
        f"loader.batch_size={args.batch}",
        "loader.drop_last=true",
        f"tricks.precision={precision}",
        "tricks.compile=off",
        "run.device=cpu",
        "run.epochs=1",
    ]
    recipe = load_recipe(recipe_name, overrides)
    parts, _ = api.prepare(recipe, api.load_data(recipe), torch.device("cpu"))
    box: list = [None]
    parts.forward = phased(box, "forward", parts.forward)
    parts.loss_fn = _PhasedLoss(parts.loss_fn, box)
    parts.optimizer.step = phased(box, "optimizer", parts.optimizer.step)
    parts.scheduler.step = phased(box, "schedule", parts.scheduler.step)
    ema_update = phased(box, "ema", parts.ema.update) if parts.ema else None
    batches = list(parts.train_loader)
    parts.model.train()

    def step(i: int) -> None:
        images, labels = batches[i % len(batches)]
        loop.train_step(parts, images, labels)
        if ema_update:
            ema_update(i)

    return count(step, list(parts.model.parameters()), box)


# ---------------------------------------------------------------- airbench94


@contextlib.contextmanager
def cuda_as_noop() -> Iterator[None]:
    """nn.Module.cuda returns the module as it is: airbench's make_net94 on the CPU."""
    real = nn.Module.cuda
    nn.Module.cuda = lambda self, *a, **k: self
    try:
        yield
    finally:
        nn.Module.cuda = real


def airbench_counts(precision: str, args: argparse.Namespace) -> dict:
    """airbench94's step (airbench/utils.py `train`): forward, summed label-smoothed loss,
    zero_grad, backward, Nesterov SGD step, LambdaLR step, lookahead every 5th step."""
    from airbench import lib_airbench94 as ab
    from airbench.utils import LookaheadState

    widths = {k: round(v * args.width) for k, v in ab.hyp["net"]["widths"].items()}
    with cuda_as_noop():
        model = ab.make_net94(widths=widths)
    dtype = torch.float16
    if precision != "16-true-bn32":  # airbench's own choice is 16-true-bn32
        model.float()
        dtype = torch.float32 if precision == "32-true" else torch.bfloat16
    autocast = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if precision == "bf16-mixed"
        else contextlib.nullcontext()
    )
    hyp = ab.hyp["opt"]
    momentum, batch = hyp["momentum"], args.batch
    kilostep_scale = 1024 * (1 + 1 / (1 - momentum))
    lr = hyp["lr"] / kilostep_scale
    wd = hyp["weight_decay"] * batch / kilostep_scale
    lr_biases = lr * hyp["bias_scaler"]
    norm_biases = [p for k, p in model.named_parameters() if "norm" in k and p.requires_grad]
    others = [p for k, p in model.named_parameters() if "norm" not in k and p.requires_grad]
    optimizer = torch.optim.SGD(
        [
            dict(params=norm_biases, lr=lr_biases, weight_decay=wd / lr_biases),
            dict(params=others, lr=lr, weight_decay=wd / lr),
        ],
        momentum=momentum,
        nesterov=True,
    )
    total = 10 * PERIOD
    schedule = torch.linspace(0.2, 1.0, total + 1)  # values do not change the operators
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: schedule[min(i, total)])
    alpha = 0.95**5 * (torch.arange(total + 1) / total) ** 3
    lookahead = LookaheadState(model)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=hyp["label_smoothing"], reduction="none")
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(batch, 3, args.image_size, args.image_size, generator=generator)
    images = images.to(dtype=torch.float16 if dtype == torch.float16 else torch.float32)
    images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (batch,), generator=generator)
    box: list = [None]
    forward = phased(box, "forward", model)
    loss_of = phased(box, "loss", lambda out: loss_fn(out, labels).sum(), after="backward")
    opt_step = phased(box, "optimizer", optimizer.step)
    sched_step = phased(box, "schedule", scheduler.step)
    update = phased(box, "ema", lookahead.update)
    model.train()

    def step(i: int) -> None:
        with autocast:
            outputs = forward(images)
        loss = loss_of(outputs)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        opt_step()
        sched_step()
        if (i + 1) % 5 == 0:
            update(model, decay=alpha[i + 1].item())

    return count(step, list(model.parameters()), box)


# ---------------------------------------------------------------- table


def table(rows: list[dict]) -> str:
    head = "| precision | contender | " + " | ".join(PHASES) + " | total | casts | weight casts |"
    lines = [head, "|" + "---|" * (len(PHASES) + 5)]
    for row in rows:
        c = row["counts"]
        cells = [f"{c[p]:g}" for p in PHASES]
        lines.append(
            f"| {row['precision']} | {row['contender']} | {' | '.join(cells)} | {c['total']:g} "
            f"| {c['casts']:g} | {c['weight_casts']:g} |"
        )
    return "\n".join(lines)


def measure(args: argparse.Namespace) -> list[dict]:
    rows = []
    for precision in args.precisions:
        for contender in args.contenders:
            if contender == "airbench94":
                counts = airbench_counts(precision, args)
            else:
                counts = tricklab_counts(contender, precision, args)
            rows.append({"precision": precision, "contender": contender, "counts": counts})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=float, default=0.25, help="of airbench's 64/256/256")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--contenders", default="speedrun94,airbench94,speedrun94-muon")
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default: results/)")
    parser.add_argument("--label", default="", help="stored with the rows (e.g. 'before')")
    args = parser.parse_args(argv)
    args.precisions = args.precisions.split(",")
    args.contenders = args.contenders.split(",")
    torch.manual_seed(0)
    rows = measure(args)
    print(table(rows))
    out = args.out or RESULTS / f"step-kernels-{datetime.date.today()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": "step_kernels",
        "label": args.label,
        "torch": torch.__version__,
        "width": args.width,
        "batch": args.batch,
        "image_size": args.image_size,
        "period_steps": PERIOD,
        "rows": rows,
    }
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\n{out}")
    return 0 if all(math.isfinite(r["counts"]["total"]) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
