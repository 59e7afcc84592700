"""The record recipes hold their airbench file's settings; the lookahead moves on airbench's steps."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from tricklab.recipe.schema import load_recipe
from tricklab.training.averaging import WeightAverage

# airbench's "decoupled" units: lr and weight decay per 1024 examples of a summed loss, divided by
# 1 + 1/(1 - momentum); tricklab's mean loss over a batch of 1024 needs them times 1024 / 1024.
KILOSTEP_SCALE = 1024 * (1 + 1 / (1 - 0.85))

# The hyper-parameters each airbench file states (KellerJordan/cifar10-airbench), read 2026-11-24.
AIRBENCH = {
    # legacy/airbench94.py = lib_airbench94 in airbench 0.1.8
    "speedrun94": dict(
        model="airbench",
        widths=None,  # the registry default 64/256/256
        epochs=9.9,
        lr=11.5,
        weight_decay=0.0153,
        bn_momentum=None,  # airbench's 0.6 for the old statistics: the net's PyTorch 0.4
        translate=2,
        cutout=0,
        schedule=(0.2, 0.23, 0.07),
        target=0.94,
    ),
    # legacy/airbench95.py = lib_airbench95 in airbench 0.1.8
    "speedrun95": dict(
        model="airbench",
        widths=[128, 384, 384],
        epochs=15,
        lr=10.0,
        weight_decay=0.0153,
        bn_momentum=None,
        translate=2,
        cutout=0,
        schedule=(0.2, 0.23, 0.07),
        target=0.95,
    ),
    # legacy/airbench96.py, the README's 96.03 % record (no BatchNorm momentum argument: 0.1)
    "speedrun96": dict(
        model="airbench-residual",
        widths=[128, 384, 512],
        epochs=37,
        lr=9.0,
        weight_decay=0.012,
        bn_momentum=0.1,
        translate=4,
        cutout=12,
        schedule=(0.2, 0.1, 0.0),
        target=0.96,
    ),
}
AIRBENCH["seed4-airbench94"] = AIRBENCH["speedrun94"]


@pytest.mark.parametrize("name", sorted(AIRBENCH))
def test_record_recipe_holds_its_airbench_files_settings(name):
    hyp, r = AIRBENCH[name], load_recipe(name)
    assert (r.model.name, r.model.widths, r.model.bn_momentum) == (
        hyp["model"],
        hyp["widths"],
        hyp["bn_momentum"],
    )
    assert r.model.whiten_bias_epochs == 3
    assert (r.loader.batch_size, r.loader.drop_last, r.optim.reference_batch_size) == (
        1024,
        True,
        1024,
    )
    o = r.optim
    assert (o.name, o.momentum, o.nesterov, o.bias_lr_mult) == ("sgd", 0.85, True, 64)
    assert o.lr == pytest.approx(hyp["lr"] * 1024 / KILOSTEP_SCALE, rel=1e-6)
    assert o.decoupled_weight_decay
    assert o.weight_decay == pytest.approx(hyp["weight_decay"] * 1024 / KILOSTEP_SCALE, rel=1e-5)
    s = r.schedule
    assert (s.name, (s.start_factor, s.peak_fraction, s.final_factor)) == (
        "piecewise-linear",
        hyp["schedule"],
    )
    assert (r.aug.flip, r.aug.translate, r.aug.pad_mode) == (
        "alternating",
        hyp["translate"],
        "reflect",
    )
    assert (r.aug.cutout, r.aug.cutout_inside) == (hyp["cutout"], hyp["cutout"] > 0)
    t = r.tricks
    assert (t.label_smoothing, t.tta, t.lookahead) == (0.2, "flip-translate", True)
    # airbench's lookahead: after steps 5, 10, ... from the first, decay 0.95^5 x (step/total)^3
    assert (t.ema_every, t.ema_warmup_epochs, t.ema_decay_power) == (5, 0, 3)
    assert t.ema_decay == pytest.approx(0.95**5)
    assert (r.run.epochs, r.run.target_accuracy) == (hyp["epochs"], hyp["target"])


@pytest.mark.parametrize("total_steps", [200, 203])
def test_lookahead_moves_on_airbench94s_steps_with_its_decays(total_steps):
    torch.manual_seed(0)
    ours = nn.Linear(4, 3)
    theirs = copy.deepcopy(ours)
    average = WeightAverage(
        ours, 0.95**5, every=5, lookahead=True, decay_power=3, total_steps=total_steps
    )
    # airbench94's LookaheadState and the lines of its training loop that drive it, written out.
    slow = {k: v.clone() for k, v in theirs.state_dict().items()}
    alpha = 0.95**5 * (torch.arange(total_steps + 1) / total_steps) ** 3
    for step in range(total_steps):
        with torch.no_grad():  # the same optimizer step for both
            for p, q in zip(ours.parameters(), theirs.parameters()):
                delta = torch.randn_like(p)
                p.add_(delta)
                q.add_(delta)
        average.update(step)
        current_steps = step + 1
        if current_steps % 5 == 0:
            for k, v in theirs.state_dict().items():
                slow[k].lerp_(v, 1 - alpha[current_steps].item())
                v.copy_(slow[k])
        # airbench's first update keeps (5/total)^3 x 0.95^5 of the initial weights (1e-5 here)
        for p, q in zip(ours.parameters(), theirs.parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=1e-4, msg=f"after step {current_steps}")
    with torch.no_grad():  # the end: airbench updates with decay 1.0, the model takes the average
        theirs.load_state_dict(slow)
    average.copy_to_model()
    for p, q in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-4)
