"""The timed loop does no host sync inside a training step and a fixed few per epoch.

On a GPU a host sync (reading a device value on the host) stalls the queue of kernels, so the
device idles until the host catches up. On the CPU nothing is queued, but the operators that
would force a sync still pass through PyTorch's dispatcher, where a TorchDispatchMode sees them:
`aten._local_scalar_dense` (`.item()`, `float()`, `int()`, `bool()`), `aten.nonzero` and boolean
masked indexing (data-dependent shapes), `aten.is_nonzero`, and copies to the host.
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tricklab.recipe.schema import load_recipe
from tricklab.training import api, loop

# Small enough for a second or two on a shared 2-core CPU; 200 images in batches of 64: three full
# batches and one of 8, the whitening bias frozen from the second epoch, lookahead every 2 steps.
TINY = [
    "data.name=synthetic",
    "data.train_size=200",
    "data.test_size=100",
    "data.image_size=16",
    "model.name=airbench",
    "model.widths=[8, 16, 16]",
    "model.whiten_bias_epochs=1",
    "loader.kind=device",
    "loader.batch_size=64",
    "loader.eval_batch_size=64",
    "aug.flip=alternating",
    "aug.translate=2",
    "aug.cutout=4",
    "optim.lr=0.2",
    "optim.momentum=0.9",
    "optim.nesterov=true",
    "tricks.label_smoothing=0.2",
    "tricks.ema_decay=0.9",
    "tricks.ema_every=2",
    "tricks.ema_decay_power=3",
    "tricks.lookahead=true",
    "run.epochs=3",
    "run.device=cpu",
]
EPOCHS = 3
# What an epoch may read: the epoch's metrics and finiteness in one copy, the evaluation's in one.
READS_PER_EPOCH = 2


class SyncRecorder(TorchDispatchMode):
    """Records the operators that would make the host wait for a GPU, with where they happened."""

    def __init__(self) -> None:
        super().__init__()
        self.where = "loop"  # "step" while a training step runs
        self.syncs: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.where != "read" and self._forces_sync(func, args, kwargs):
            self.syncs.append((self.where, str(func)))
        return func(*args, **kwargs)

    @staticmethod
    def _forces_sync(func, args, kwargs) -> bool:
        name = func.overloadpacket.__name__
        if name in ("_local_scalar_dense", "nonzero", "is_nonzero", "masked_select"):
            return True
        if name in ("index", "index_put", "index_put_"):  # masked indexing: x[mask]
            indices = args[1] if len(args) > 1 else kwargs.get("indices", [])
            return any(i is not None and i.dtype == torch.bool for i in indices)
        if name in ("_to_copy", "to", "copy_"):  # .cpu(), .to("cpu"): a device-to-host copy
            source, target = args[0], kwargs.get("device")
            if name == "copy_":
                source, target = args[1], args[0].device
            target = next((a for a in args[1:] if isinstance(a, torch.device)), target)
            return target is not None and torch.device(target).type == "cpu" != source.device.type
        return False


def recorded_run(monkeypatch, *overrides: str) -> tuple[SyncRecorder, object]:
    """Train the tiny recipe; record the syncs of run_loop (not of the set-up or the warm-up)."""
    recorder = SyncRecorder()
    real_step, real_loop, real_read = loop.train_step, api.run_loop, loop.read_on_host

    def recorded_read(*values):  # the loop's sanctioned reads: counted once each
        recorder.syncs.append((recorder.where, "read_on_host"))
        where, recorder.where = recorder.where, "read"
        try:
            return real_read(*values)
        finally:
            recorder.where = where

    def recorded_step(*args):
        recorder.where = "step"
        try:
            return real_step(*args)
        finally:
            recorder.where = "loop"

    def recorded_loop(*args, **kwargs):
        with recorder:
            return real_loop(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", recorded_step)
    monkeypatch.setattr(loop, "read_on_host", recorded_read)
    monkeypatch.setattr(api, "run_loop", recorded_loop)
    monkeypatch.setattr(api, "needs_warm_up", lambda tricks, device: False)  # its reads aside
    result = api.train(load_recipe(None, [*TINY, *overrides]))
    assert result.status == "complete" and result.epochs_completed == EPOCHS
    return recorder, result


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param([], id="sgd-lookahead"),
        pytest.param(["optim.name=muon", "optim.muon_lr=0.05"], id="muon"),
        pytest.param(["tricks.precision=16-mixed", "tricks.ema_decay=0"], id="16-mixed-scaler"),
        pytest.param(["tricks.precision=16-true-bn32"], id="16-true-bn32"),
    ],
)
def test_no_training_step_syncs_and_an_epoch_syncs_a_fixed_few_times(monkeypatch, overrides):
    if "tricks.ema_decay=0" in overrides:
        overrides = [*overrides, "tricks.lookahead=false"]
    recorder, _ = recorded_run(monkeypatch, *overrides)
    assert [op for where, op in recorder.syncs if where == "step"] == []
    # and between steps: the epoch's reads only, read_on_host's copies of a few device values
    assert {op for _, op in recorder.syncs} == {"read_on_host"}
    assert len(recorder.syncs) <= READS_PER_EPOCH * EPOCHS


def test_the_recorder_sees_the_grad_scalers_read_with_an_optimizer_that_cannot_take_the_scale(
    monkeypatch,
):
    """Muon (like RMSprop) cannot unscale on the device: GradScaler reads found_inf on the host
    every step, as PrecisionPolicy.grad_scaler says. This also shows the recorder catches syncs."""
    recorder, result = recorded_run(
        monkeypatch, "tricks.precision=16-mixed", "optim.name=muon", "optim.muon_lr=0.05"
    )
    in_steps = [op for where, op in recorder.syncs if where == "step"]
    assert len(in_steps) == result.epochs[-1]["step"]
    assert set(in_steps) == {"aten._local_scalar_dense.default"}


def test_the_loop_synchronises_only_where_it_reads_a_time(monkeypatch):
    """Without a time budget: at each epoch's start and end, nowhere else."""
    calls = []
    monkeypatch.setattr(loop, "synchronize", lambda device: calls.append(device))
    recorded_run(monkeypatch)
    assert len(calls) == 2 * EPOCHS


def test_a_time_budget_reads_the_time_every_few_steps(monkeypatch):
    calls = []
    monkeypatch.setattr(loop, "CHECK_EVERY_STEPS", 2)
    monkeypatch.setattr(loop, "synchronize", lambda device: calls.append(device))
    _, result = recorded_run(monkeypatch, "run.time_budget_seconds=1000")
    steps = result.epochs[-1]["step"]  # 12: a read after steps 2, 4, ..., 10; the epoch ends
    assert len(calls) == 2 * EPOCHS + (steps - 1) // 2  # read the time after step 12


def test_the_epochs_order_is_drawn_before_its_timer_starts(monkeypatch):
    """The sample order (a CPU randperm copied to the device) and the augmentation draws of an
    epoch are made when the loader is iterated, before the synchronised start of the epoch."""
    from tricklab.data import device_loader

    events = []
    real_order = device_loader.epoch_order
    monkeypatch.setattr(loop, "synchronize", lambda device: events.append("sync"))
    monkeypatch.setattr(
        device_loader,
        "epoch_order",
        lambda *a, **k: (k["shuffle"] and events.append("order")) or real_order(*a, **k),
    )
    recorded_run(monkeypatch)
    assert events == ["order", "sync", "sync"] * EPOCHS
