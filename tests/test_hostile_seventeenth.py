"""The seventeenth hostile round: each case is one clear error before anything is written, or
the same answer whatever spelling of a value the caller used."""

import asyncio

import numpy as np
import pytest
from tiny_recipe import TINY_SYNTHETIC

TINY = [*TINY_SYNTHETIC, "run.epochs=1"]


async def _coroutine(*args) -> None:
    pass


def test_a_lambda_that_returns_a_coroutine_is_refused_at_its_first_call(tmp_path):
    """`on_epoch=lambda row: work(row)` around an `async def` looks like a plain function until
    it is called: it was taken and its body never ran (a "never awaited" warning at most)."""
    import tricklab
    from tricklab.experiments.speedrun import SpeedrunPlan, speedrun

    recipe = tricklab.load_recipe(None, TINY)
    with pytest.raises(TypeError, match="on_epoch returned coroutine, which nobody awaits"):
        tricklab.train(recipe, on_epoch=lambda row: _coroutine(row))
    plan = SpeedrunPlan(recipe, 1, warmup_epochs=0, out_dir=str(tmp_path / "s"))
    with pytest.raises(TypeError, match="speedrun's on_run returned coroutine"):
        speedrun(plan, on_run=lambda run: _coroutine(run))
    assert not (tmp_path / "s").exists()  # no summary: nothing a later command would read
    with pytest.raises(TypeError, match="returned _asyncio.Future"):  # any awaitable
        loop = asyncio.new_event_loop()
        try:
            tricklab.train(recipe, on_epoch=lambda row: loop.create_future())
        finally:
            loop.close()


def test_profile_models_takes_numpy_integers_as_profile_step_and_load_dataset_do():
    """profile_models' repeats and batch sizes refused np.int64 and a numpy array, where the
    other profilers and the data loaders take numpy's numbers as Python's."""
    from tricklab.profile.model import ModelBuild, ProfileGrid, profile_models

    grid = ProfileGrid(batch_sizes=np.array([2, 3]))
    build = ModelBuild(width=0.125, image_size=16)
    profile = profile_models(["airbench"], grid, build=build, device="cpu", repeats=np.int64(1))
    assert sorted(r["batch_size"] for r in profile["results"]) == [2, 3]
    assert all(type(r["batch_size"]) is int for r in profile["results"])
