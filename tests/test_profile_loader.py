"""`tricklab profile loader`: images/s of each loader configuration with a recipe's augmentations,
and with a recipe the fraction of its step that loading would cost; bad input is one line, exit 2."""

from __future__ import annotations

import json

import pytest
from tiny_recipe import TINY_SYNTHETIC

import tricklab
from tricklab.cli.main import main
from tricklab.profile.loader import LoaderGrid, configurations, profile_loader

KEYS = {
    "kind", "recipe", "dataset", "device", "hardware", "train_images", "image_shape",
    "batch_size", "batches_per_measurement", "repeats", "augment", "configs", "step", "notes",
}  # fmt: skip
CONFIG_KEYS = {
    "kind", "num_workers", "pin_memory", "setup_seconds", "batches_per_epoch",
    "images_per_measurement", "images_per_second", "images_per_second_all", "ms_per_batch",
    "vs_first",
}  # fmt: skip
AUGMENTED = [*TINY_SYNTHETIC, "aug.flip=random", "aug.translate=2", "aug.cutout=4"]


def test_configurations_cross_workers_and_pinning_for_the_torch_loader_only():
    configs = configurations(["device", "torch"], [0, 2], [True, False])
    assert configs[0] == {"kind": "device", "num_workers": None, "pin_memory": None}
    assert [(c["num_workers"], c["pin_memory"]) for c in configs[1:]] == [
        (0, True), (0, False), (2, True), (2, False)
    ]  # fmt: skip


def test_each_configuration_is_measured_with_the_recipe_augmentations():
    recipe = tricklab.load_recipe(None, AUGMENTED)
    result = profile_loader(recipe, LoaderGrid(["device", "torch"], [0], [True, False]), repeats=2)
    assert set(result) == KEYS
    assert result["augment"]["cutout"] == 4 and result["augment"]["flip"] == "random"
    assert [c["kind"] for c in result["configs"]] == ["device", "torch", "torch"]
    for config in result["configs"]:
        assert set(config) == CONFIG_KEYS
        assert config["images_per_measurement"] == 256  # one epoch of the 256 train images
        assert config["batches_per_epoch"] == 4
        assert len(config["images_per_second_all"]) == 2 and config["images_per_second"] > 0
    assert result["configs"][0]["vs_first"] == 1
    assert result["step"] is None
    # with the batches on the CPU, pinning is said to change nothing
    assert any("pin_memory" in note for note in result["notes"])


def test_batches_per_measurement_may_cross_an_epoch():
    recipe = tricklab.load_recipe(None, TINY_SYNTHETIC)
    result = profile_loader(recipe, LoaderGrid(["device"]), batches=6, batch_size=32, repeats=1)
    (config,) = result["configs"]
    assert config["batches_per_epoch"] == 8 and config["images_per_measurement"] == 6 * 32


def test_with_a_recipe_each_configuration_gets_its_share_of_the_step():
    recipe = tricklab.load_recipe(None, AUGMENTED)
    result = profile_loader(recipe, LoaderGrid(["device", "torch"], [0]), with_step=True)
    assert result["step"]["seconds"] > 0 and result["step"]["batch_size"] == 64
    for config in result["configs"]:
        load = config["ms_per_batch"]["median_ms"] / 1e3
        assert 0 < config["step_fraction"] < 1
        assert config["step_fraction"] == pytest.approx(load / (load + result["step"]["seconds"]))


def test_cli_json_has_the_documented_keys(capsys):
    code = main(
        ["profile", "loader", "synthetic", *AUGMENTED[1:], "--kinds", "device,torch",
         "--num-workers", "0", "--repeats", "1", "--json"]
    )  # fmt: skip
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result) == KEYS | {"date"} and result["dataset"] == "synthetic"  # CLI: dated
    assert len(result["configs"]) == 2


def test_cli_with_a_recipe_prints_the_step_fraction(capsys):
    code = main(
        ["profile", "loader", "--recipe", "speedrun94", *AUGMENTED, "--kinds", "device",
         "--repeats", "1"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "of the step" in out and "speedrun94's step on a batch already on the device" in out


NO_DATA_NAME = [w for w in TINY_SYNTHETIC if not w.startswith("data.name")]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--kinds", "gpu"], "unknown loader kind 'gpu'"),
        (["--kinds", ""], "--kinds needs a comma-separated list"),
        (["--num-workers", ""], "--num-workers needs a comma-separated list"),
        (["--num-workers", "-1"], "num_workers must be integers in 0..256"),
        (["--pin-memory", "sometimes"], "--pin-memory: 'sometimes'"),
        (["--batch-size", "0"], "batch size must be an integer >= 1"),
        (["--batches", "0"], "batches must be an integer >= 1"),
        (["--recipe", "speedrun49"], "speedrun49"),
        (["aug.fliip=random"], "aug.flip"),
    ],
)
def test_cli_bad_option_is_one_line_and_exit_2(args, message, capsys):
    assert main(["profile", "loader", "synthetic", *NO_DATA_NAME, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "words, message",
    [
        (["mnist", "cifar10"], "expected one dataset"),
        (["imagefolder", "--data-dir", "/no/such/dir"], "/no/such/dir"),
        (["--data-dir", " "], "--data-dir is empty"),
        (["cifar1O"], "cifar1O"),
    ],
)
def test_cli_bad_dataset_is_one_line_and_exit_2(words, message, capsys):
    assert main(["profile", "loader", *words, *NO_DATA_NAME]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_batch_larger_than_the_split_is_timed_as_the_batch_it_is():
    # 8 train images at --batch-size 1000: one batch of 8, whose time was scaled by 1000 / 8
    recipe = tricklab.load_recipe(None, [*TINY_SYNTHETIC, "data.train_size=8"])
    result = profile_loader(recipe, LoaderGrid(["device"]), batch_size=1000, repeats=1)
    (config,) = result["configs"]
    assert config["batches_per_epoch"] == 1 and config["images_per_measurement"] == 8
    ms_per_image = 1e3 / config["images_per_second"]
    assert config["ms_per_batch"]["median_ms"] == pytest.approx(8 * ms_per_image)
    assert any("the 8 train images make batches of 8, not 1,000" in n for n in result["notes"])


def test_the_step_fraction_compares_a_loaded_batch_with_a_step_on_as_many_images():
    recipe = tricklab.load_recipe(None, [*TINY_SYNTHETIC, "data.train_size=8"])
    result = profile_loader(recipe, LoaderGrid(["device"]), batch_size=1000, with_step=True)
    (config,) = result["configs"]
    step = result["step"]
    assert step["batch_size"] == 8
    load = 8 / config["images_per_second"]
    assert config["step_fraction"] == pytest.approx(load / (load + step["seconds"]))
