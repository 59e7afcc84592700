"""With tricks.compile on, the warm-up compiles every graph a timed run meets: nothing compiles
after it, neither in the epochs, nor in the evaluations (inside inference mode, with the last
smaller batch), nor in the final TTA (reflect-padded views with other strides).

Compiled with a backend that runs the captured graphs eagerly and counts them (`backend="eager"`
in spirit): what is checked is what dynamo captures and guards on, not inductor's kernels, so the
test runs in seconds on a CPU."""

import pytest
import torch

from tricklab.recipe.schema import load_recipe
from tricklab.training import api

# 230 training images in batches of 60: three full and one of 50; the whitening bias frozen from
# the second epoch; 90 test images in batches of 40: two full and one of 10. Muon, lookahead and TTA:
# every compiled function and every kernel kind a speed-run recipe meets.
TINY = [
    "data.name=synthetic",
    "data.train_size=230",
    "data.test_size=90",
    "data.image_size=16",
    "model.name=airbench",
    "model.widths=[8, 16, 16]",
    "model.whiten_bias_epochs=1",
    "loader.kind=device",
    "loader.batch_size=60",
    "loader.eval_batch_size=40",
    "aug.flip=alternating",
    "aug.translate=2",
    "optim.name=muon",  # its Newton-Schulz step is compiled too
    "optim.muon_lr=0.05",
    "tricks.channels_last=true",
    "tricks.compile=default",
    "tricks.ema_decay=0.9",
    "tricks.ema_every=2",
    "tricks.lookahead=true",
    "tricks.tta=flip-translate",
    "run.epochs=2",
    "run.device=cpu",
]


@pytest.fixture
def graphs(monkeypatch):
    """Every graph torch.compile captures from here on, counted by a backend that runs it eagerly."""
    captured = []
    real_compile = torch.compile

    def counting_backend(graph_module, example_inputs):
        captured.append(graph_module)
        return graph_module.forward

    def compile_counting(model=None, *, mode=None, **kwargs):
        return real_compile(model, backend=counting_backend, **kwargs)

    monkeypatch.setattr(torch, "compile", compile_counting)
    torch._dynamo.reset()
    yield captured
    torch._dynamo.reset()


@pytest.mark.slow
def test_a_timed_run_after_the_warm_up_compiles_nothing(graphs, monkeypatch):
    warmed = []
    real_loop = api.run_loop

    def counted_loop(*args, **kwargs):
        warmed.append(len(graphs))
        return real_loop(*args, **kwargs)

    monkeypatch.setattr(api, "run_loop", counted_loop)
    result = api.train(load_recipe(None, TINY))
    assert result.status == "complete" and result.val_acc_tta is not None
    assert result.resolved["compile"] == "default"
    assert warmed[0] > 0  # the warm-up compiled
    assert len(graphs) == warmed[0], [g.code for g in graphs[warmed[0] :]]
