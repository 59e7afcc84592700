"""A run trains as it would alone whatever torch state its caller is in (core/torchstate.py): grad
mode, inference mode, the default dtype and autocast.

Found 2026-11-28: in a full test session a scaled-down speedrun94 in bf16 trained to chance
(val loss 19). An earlier test's model factory had entered torch.autocast twice and never left;
the wall put autocast's on/off back but not its depth, so every later run's autocast was nested,
its cache of weight casts never cleared, and each step computed with stale (or another model's)
bf16 weights. train() called inside a caller's `with torch.autocast(...)` did the same; inside
`torch.no_grad()`, `torch.inference_mode()` or after `torch.set_default_dtype(torch.float64)`
every run failed."""

from __future__ import annotations

import pytest
import torch

import tricklab
from tricklab.core.torchstate import (
    autocast_depth,
    default_dtype,
    outside_autocast,
    own_torch_state,
    set_autocast_depth,
)
from tricklab.recipe.schema import load_recipe

RECIPE = [
    "data.name=synthetic", "data.train_size=512", "data.test_size=128", "data.image_size=16",
    "model.widths=[8,16,16]", "loader.batch_size=64", "run.device=cpu", "run.epochs=2",
    "tricks.tta=none",
]  # fmt: skip


def _trained(precision: str) -> tuple[float, float]:
    result = tricklab.train(load_recipe("speedrun94", [*RECIPE, f"tricks.precision={precision}"]))
    assert result.status == "complete" and result.resolved["precision"] == precision
    return result.val_acc, result.val_loss


@pytest.fixture(scope="module")
def plain() -> dict[str, tuple[float, float]]:
    assert autocast_depth() == 0
    return {p: _trained(p) for p in ("bf16-mixed", "32-true")}


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_a_run_inside_a_callers_autocast_trains_as_outside_it(plain, precision):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _trained(precision) == plain[precision]
        assert torch.is_autocast_enabled("cpu") and autocast_depth() == 1  # the caller's, back
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert autocast_depth() == 0 and not torch.is_autocast_enabled("cpu")


def test_an_autocast_left_entered_does_not_reach_a_run(plain):
    torch.autocast_increment_nesting()
    torch.autocast_increment_nesting()
    try:
        assert _trained("bf16-mixed") == plain["bf16-mixed"]
        assert autocast_depth() == 2  # the process's state is the caller's to keep
    finally:
        set_autocast_depth(0)


def test_outside_autocast_puts_everything_back_and_drops_what_the_block_left_entered():
    torch.set_autocast_cache_enabled(False)
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            with outside_autocast():
                assert autocast_depth() == 0 and not torch.is_autocast_enabled("cpu")
                assert torch.is_autocast_cache_enabled()
                torch.autocast("cpu", dtype=torch.bfloat16).__enter__()  # never left
            assert autocast_depth() == 1 and torch.is_autocast_enabled("cpu")
            assert torch.get_autocast_dtype("cpu") == torch.float16
            assert not torch.is_autocast_cache_enabled()
    finally:
        torch.set_autocast_cache_enabled(True)
    assert autocast_depth() == 0


@pytest.mark.parametrize(
    "context",
    [
        torch.no_grad,
        lambda: torch.inference_mode(True),
        lambda: default_dtype(torch.float64),
        lambda: torch.device("meta"),
    ],
    ids=["no_grad", "inference_mode", "float64_default", "meta_device"],
)
def test_a_run_inside_a_callers_grad_mode_or_dtype_trains_as_outside_it(plain, context):
    with context():
        state = _state()
        assert _trained("32-true") == plain["32-true"]  # every run failed
        assert _state() == state


def test_own_torch_state_puts_the_callers_back_when_the_block_raises():
    with torch.no_grad(), default_dtype(torch.float16):
        with pytest.raises(KeyError), own_torch_state():
            assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32
            raise KeyError("stop")
        assert not torch.is_grad_enabled() and torch.get_default_dtype() == torch.float16


def test_a_model_profile_inside_a_callers_no_grad_and_autocast_measures_its_own_precision():
    """profile_models inside `torch.no_grad()` refused 32-true ("element 0 of tensors does not
    require grad"); inside an autocast its fp32 timings would have been bf16's."""
    from tricklab.profile.model import ModelBuild, ProfileGrid, profile_models

    def profiled():
        grid = ProfileGrid(batch_sizes=(2,))
        result = profile_models(["airbench"], grid, build=ModelBuild(image_size=16), device="cpu")
        return result["results"][0]["precision"]

    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert profiled() == "32-true"
        assert not torch.is_grad_enabled() and torch.is_autocast_enabled("cpu")


def _state():
    return (
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        torch.get_default_dtype(),
        torch.get_default_device(),
    )
