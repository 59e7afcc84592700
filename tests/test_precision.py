"""tricks.precision decided once, into a PrecisionPolicy: `auto` from the device (fast by default),
an explicit value as written; the CUDA branches with fakes of torch.cuda."""

import pytest
import torch
from tiny_recipe import TINY_SYNTHETIC

from tricklab.recipe.schema import load_recipe
from tricklab.training.api import train
from tricklab.training.precision import precision_policy, resolve_precision
from tricklab.training.resolve import for_device

CUDA = torch.device("cuda", 0)


@pytest.fixture
def gpu(monkeypatch):
    """A CUDA GPU of the compute capability the test sets (`gpu(7, 5)`), as torch.cuda answers."""

    def with_capability(major, minor):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, minor))

    return with_capability


@pytest.mark.parametrize(
    ("capability", "optimizer", "expected"),
    [
        ((9, 0), "sgd", "16-true-bn32"),  # H100: airbench's fp16 weights, fp32 BatchNorm
        ((8, 0), "muon", "16-true-bn32"),  # A100
        ((7, 0), "sgd", "16-true-bn32"),  # V100: fp16 tensor cores from 7.0
        ((6, 1), "sgd", "32-true"),  # Pascal: no tensor cores
        ((9, 0), "adamw", "bf16-mixed"),  # state in fp32 weights' dtype: autocast instead
        ((7, 5), "adam", "16-mixed"),  # T4: no bf16 tensor cores
    ],
)
def test_auto_on_a_cuda_gpu_is_the_fastest_precision_its_tensor_cores_have(
    gpu, capability, optimizer, expected
):
    gpu(*capability)
    recipe = load_recipe(None, ["tricks.precision=auto", f"optim.name={optimizer}"])
    ran, policy, resolved = for_device(recipe, CUDA)
    assert policy.name == ran.tricks.precision == resolved["precision"] == expected
    assert resolved["notes"] == []


@pytest.mark.parametrize(("amx", "expected"), [(False, "32-true"), (True, "bf16-mixed")])
def test_auto_on_a_cpu_is_fp32_unless_it_has_amx(monkeypatch, amx, expected):
    from tricklab.training import precision

    monkeypatch.setattr(precision, "native_cpu_bf16", lambda: amx)
    recipe = load_recipe(None, ["tricks.precision=auto"])
    _, policy, resolved = for_device(recipe, torch.device("cpu"))
    assert policy == precision_policy(expected, "cpu") and resolved["precision"] == expected


@pytest.mark.parametrize(("amx", "expected"), [(True, "bf16-mixed"), (False, "32-true")])
def test_auto_precision_on_a_cpu_follows_its_bf16_units(monkeypatch, amx, expected):
    """bf16 autocast trained the demo's baseline 1.9x faster on a CPU with AMX, its accuracy
    within noise (benchmarks/cpu_precision.py); without AMX bf16 is emulated, 5-12x slower."""
    from tricklab.training import precision

    monkeypatch.setattr(precision, "native_cpu_bf16", lambda: amx)
    assert precision.auto_precision("cpu", None, "sgd") == expected
    assert precision.resolve_precision("auto", "cpu", None, "adamw")[0].name == expected
    assert precision.resolve_precision("32-true", "cpu", None)[0].name == "32-true"  # asked: kept
    assert precision.auto_precision("mps", None, "sgd") == "32-true"


def test_a_torch_without_the_amx_probe_counts_as_no_native_bf16(monkeypatch):
    from tricklab.training import precision

    precision.native_cpu_bf16.cache_clear()
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    try:
        assert precision.native_cpu_bf16() is False
    finally:
        precision.native_cpu_bf16.cache_clear()


def test_the_record_recipes_default_to_auto():
    for name in ("speedrun94", "speedrun94-muon", "speedrun95", "speedrun96"):
        assert load_recipe(name).tricks.precision == "auto", name


@pytest.mark.parametrize("explicit", ["32-true", "16-mixed", "bf16-mixed", "16-true-bn32"])
def test_an_explicit_precision_wins_on_a_gpu_with_every_tensor_core(gpu, explicit):
    gpu(9, 0)
    recipe = load_recipe(None, [f"tricks.precision={explicit}"])
    assert for_device(recipe, CUDA)[1].name == explicit


def test_an_explicit_precision_wins_on_the_cpu():
    recipe = load_recipe(None, ["tricks.precision=bf16-mixed"])
    assert for_device(recipe, torch.device("cpu"))[1].name == "bf16-mixed"


def test_a_run_records_and_returns_what_auto_ran_as(tmp_path):
    from tricklab.training.precision import auto_precision

    ran = auto_precision("cpu", None, "sgd")  # bf16-mixed on a CPU with AMX, else 32-true
    recipe = load_recipe(None, [*TINY_SYNTHETIC, "tricks.precision=auto", "run.epochs=1"])
    result = train(recipe, out_dir=tmp_path / "run")
    assert result.resolved["precision"] == ran
    assert result.recipe["tricks"]["precision"] == "auto"  # the recipe as written
    saved = (tmp_path / "run" / "result.json").read_text()
    assert f'"precision": "{ran}"' in saved


@pytest.mark.parametrize(
    ("name", "autocast", "weights", "scaler", "summed"),
    [
        ("32-true", None, torch.float32, False, False),
        ("16-mixed", torch.float16, torch.float32, True, False),
        ("bf16-mixed", torch.bfloat16, torch.float32, False, False),
        ("16-true-bn32", None, torch.float16, False, True),
    ],
)
def test_each_policy_answers_autocast_scaler_loss_and_input_dtype(
    name, autocast, weights, scaler, summed
):
    policy = precision_policy(name, "cpu")
    assert (policy.autocast_dtype, policy.weight_dtype) == (autocast, weights)
    assert policy.grad_scaler().is_enabled() == scaler
    assert policy.loss_scale(64) == (64.0 if summed else 1.0)
    assert policy.compute_dtype == (autocast or weights)


def test_model_preparation_keeps_batchnorm_in_fp32_under_fp16_weights():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    precision_policy("16-true-bn32", "cpu").prepare_model(net)
    assert net[0].weight.dtype == torch.float16 and net[1].weight.dtype == torch.float32


def test_bf16_explicitly_asked_on_a_gpu_without_bf16_tensor_cores_runs_as_fp16_and_says_so():
    policy, note = resolve_precision("bf16-mixed", "cuda", (7, 5))
    assert policy.name == "16-mixed" and "7.5" in note
