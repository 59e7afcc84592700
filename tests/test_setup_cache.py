"""The setup cache (check_setup's): a part is taken again only when every input of the function that
built it is equal; the key comes from the function's arguments, never from a list beside it."""

import dataclasses

import pytest
import torch
from tiny_recipe import TINY_SYNTHETIC

from tricklab.recipe.schema import load_recipe
from tricklab.training import setup
from tricklab.training.setup import LoaderInputs, ModelInputs, SetupCache

CPU = torch.device("cpu")

# One override per input that build_run_model or build_loaders reads (the data by the dataset).
CHANGED_INPUT = {
    "model.widths=[8,16,8]": "model",
    "model.bn_momentum=0.5": "model",
    "run.seed=3": "both",
    "tricks.precision=bf16-mixed": "both",
    "tricks.channels_last=true": "both",
    "loader.batch_size=32": "loaders",
    "loader.eval_batch_size=64": "loaders",
    "loader.kind=torch": "loaders",
    "loader.drop_last=true": "loaders",
    "aug.flip=random": "loaders",
    "aug.cutout=4": "loaders",
    "optim.accumulate_steps=2": "loaders",
    "data.train_size=128": "both",
}


def prepared(reuse, *overrides):
    recipe = load_recipe(None, [*TINY_SYNTHETIC, *overrides])
    dataset = reuse.call(setup.load_data, recipe.data)
    parts, _ = setup.prepare(recipe, dataset, CPU, reuse)
    return parts


@pytest.mark.parametrize("override", list(CHANGED_INPUT))
def test_a_change_of_an_input_a_cached_builder_reads_builds_that_part_anew(override):
    reuse = SetupCache()
    before = prepared(reuse)
    after = prepared(reuse, override)
    rebuilt = CHANGED_INPUT[override]
    assert (after.model is not before.model) == (rebuilt in ("model", "both"))
    assert (after.train_loader is not before.train_loader) == (rebuilt in ("loaders", "both"))


def test_values_no_builder_reads_reuse_the_model_and_the_loaders():
    reuse = SetupCache()
    before = prepared(reuse)
    after = prepared(reuse, "optim.lr=0.5", "tricks.label_smoothing=0.1", "tricks.ema_decay=0.5")
    assert after.model is before.model and after.train_loader is before.train_loader
    assert after.optimizer is not before.optimizer  # built for each recipe


def test_the_overrides_above_change_every_field_of_the_builders_inputs():
    """The parametrized test covers each input: every field of ModelInputs and LoaderInputs (the
    world of a data-parallel run aside, one process here) differs under one of the overrides."""
    base = load_recipe(None, TINY_SYNTHETIC)

    def inputs(recipe):
        _, policy, _ = setup.for_device(recipe, CPU)
        return ModelInputs.of(recipe, policy, CPU), LoaderInputs.of(recipe, CPU, policy)

    changed = set()
    for override in CHANGED_INPUT:
        for old, new in zip(inputs(base), inputs(base.override([override]))):
            for field in dataclasses.fields(old):
                if getattr(old, field.name) != getattr(new, field.name):
                    changed.add(f"{type(old).__name__}.{field.name}")
    every = {f"{cls.__name__}.{f.name}" for cls in (ModelInputs, LoaderInputs) for f in dataclasses.fields(cls)}  # fmt: skip
    assert every - changed == {"ModelInputs.device", "LoaderInputs.device", "LoaderInputs.world"}


def test_the_key_is_every_argument_field_by_field():
    calls = []
    reuse = SetupCache()

    def build(*args):
        calls.append(args)
        return len(calls)

    recipe = load_recipe(None, TINY_SYNTHETIC)
    assert reuse.call(build, recipe.model, CPU) == reuse.call(build, recipe.model, CPU) == 1
    wider = dataclasses.replace(recipe.model, widths=[8, 16, 32])
    assert reuse.call(build, wider, CPU) == 2
    assert reuse.call(build, recipe.model, torch.device("meta")) == 3
    assert (
        reuse.call(build, recipe.model, CPU, 1) == 4
        and reuse.call(build, recipe.model, CPU, 1.0) == 5
    )
    assert len(calls) == 5


def test_a_failed_build_raises_again_without_building_again():
    calls = []

    def fail(value):
        calls.append(value)
        raise ValueError("no")

    reuse = SetupCache()
    for _ in range(2):
        with pytest.raises(ValueError, match="no"):
            reuse.call(fail, 1)
    assert calls == [1]
