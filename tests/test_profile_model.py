"""`tricklab profile model`: counts equal the analytic formulas; every combination is timed and
reported with the documented keys; bad input is one line and exit 2."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.measure.flops import count_forward_flops
from tricklab.measure.timing import paired_difference
from tricklab.profile import model as profile_model
from tricklab.profile.model import ModelBuild, ProfileGrid, profile_models

TINY = dict(build=ModelBuild(widths=[8, 16, 16], image_size=16), device="cpu", repeats=2)
RESULT_KEYS = {
    "model", "batch_size", "precision", "compile", "channels_last", "forward_ms", "train_step_ms",
    "forward_images_per_second", "train_images_per_second", "forward_tflops", "train_tflops",
    "mfu", "forward_ms_per_gmac", "train_ms_per_gmac", "compile_seconds", "calls_per_sample",
}  # fmt: skip
SPREAD_KEYS = {"median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms"}


def conv_flops(c_in, c_out, k, h_out, w_out, batch=1):
    """2 FLOPs per multiply-accumulate, one per weight per output pixel."""
    return 2 * batch * c_out * c_in * k * k * h_out * w_out


def test_flops_of_a_conv_equal_the_formula():
    conv = nn.Conv2d(3, 16, kernel_size=3, stride=2, padding=1)  # 32x32 -> 16x16
    assert count_forward_flops(conv, (4, 3, 32, 32)) == conv_flops(3, 16, 3, 16, 16, batch=4)


def test_flops_of_a_linear_layer_equal_the_formula():
    assert count_forward_flops(nn.Linear(100, 7), (5, 100)) == 2 * 5 * 100 * 7


def test_flops_of_a_small_net_are_its_convs_and_linear_only():
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(16, 10),
    )  # fmt: skip
    expected = conv_flops(3, 8, 3, 16, 16) + conv_flops(8, 16, 3, 8, 8) + 2 * 16 * 10
    assert count_forward_flops(net, (1, 3, 16, 16)) == expected


def cifar_resnet18_macs(num_classes=10, widths=(64, 128, 256, 512), side=32):
    """He et al.'s ResNet-18 with a 3x3 stride-1 stem on 32x32 images, by hand: convs and the head."""
    macs = 3 * widths[0] * 9 * side * side  # stem
    c_in = widths[0]
    for stage, c_out in enumerate(widths):
        if stage:
            side //= 2
        pixels = side * side
        macs += c_in * c_out * 9 * pixels + c_out * c_out * 9 * pixels  # first block
        if c_in != c_out:
            macs += c_in * c_out * pixels  # 1x1 projection shortcut
        macs += 2 * c_out * c_out * 9 * pixels  # second block
        c_in = c_out
    return macs + c_in * num_classes


def test_cifar_resnet18_forward_macs_are_0_556_g_as_the_formula_gives():
    result = profile_models(["resnet18"], ProfileGrid(batch_sizes=[1]), device="cpu", repeats=1)
    (model,) = result["models"]
    assert model["forward_macs"] == cifar_resnet18_macs()
    assert model["forward_macs"] == model["forward_flops"] // 2
    # 0.5554 G: the published "0.556 G" to within its rounding (thop/ptflops add BN and pools)
    assert model["forward_macs"] / 0.556e9 == pytest.approx(1, abs=0.002)


def test_every_combination_is_timed_with_the_documented_keys():
    result = profile_models(
        ["airbench", "airbench-residual"],
        ProfileGrid(batch_sizes=[2, 4], channels_last=[False, True]),
        **TINY,
    )
    assert {m["name"] for m in result["models"]} == {"airbench", "airbench-residual"}
    assert "FLOPs / 2" in result["macs_note"]
    rows = result["results"]
    assert len(rows) == 2 * 2 * 2
    for row in rows:
        assert set(row) == RESULT_KEYS
        for key in ("forward_ms", "train_step_ms"):
            spread = row[key]
            assert set(spread) == SPREAD_KEYS
            assert 0 < spread["min_ms"] <= spread["q1_ms"] <= spread["median_ms"] <= spread["q3_ms"]
        macs = next(m["forward_macs"] for m in result["models"] if m["name"] == row["model"])
        gmacs = macs * row["batch_size"] / 1e9
        assert row["forward_ms_per_gmac"] == pytest.approx(row["forward_ms"]["median_ms"] / gmacs)
        assert row["train_images_per_second"] == pytest.approx(
            row["batch_size"] / (row["train_step_ms"]["median_ms"] / 1e3)
        )
        assert row["mfu"] is None  # a CPU has no peak in the table: unavailable, never guessed
        assert row["compile_seconds"] is None


def test_mfu_is_train_flops_per_second_over_the_given_peak():
    result = profile_models(["airbench"], ProfileGrid([2]), peak_tflops_override=0.5, **TINY)
    (row,) = result["results"]
    (model,) = result["models"]
    train_flops = 3 * model["forward_flops"] * row["train_images_per_second"]
    assert row["train_tflops"] == pytest.approx(train_flops / 1e12)
    assert row["mfu"] == pytest.approx(row["train_tflops"] / 0.5)
    assert result["peak_source"] == {"32-true": "--peak-tflops"}


def test_fp16_with_fp32_batchnorm_runs_its_half_copy():
    result = profile_models(["airbench"], ProfileGrid([2], ["16-true-bn32"]), **TINY)
    assert result["results"][0]["precision"] == "16-true-bn32"


def test_medians_of_paired_differences_add_up_along_a_chain():
    full, a, b = [5.0, 6.0, 9.0, 5.5], [3.0, 3.5, 4.0, 3.2], [1.0, 1.1, 1.4, 1.2]
    parts = [
        paired_difference(full, a)[0],
        paired_difference(a, b)[0],
        paired_difference(b, [0] * 4)[0],
    ]
    assert sum(parts) == pytest.approx(paired_difference(full, [0] * 4)[0])
    point, low, high = paired_difference(full, a)
    assert low <= point <= high


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(models=["resnet81"]), "did you mean 'resnet18'"),
        (dict(models=[]), "no models"),
        (dict(models=["airbench"], grid=ProfileGrid(batch_sizes=[])), "no batch sizes"),
        (dict(models=["airbench"], grid=ProfileGrid([0])), "batch sizes must be integers >= 1"),
        (dict(models=["airbench"], grid=ProfileGrid(precisions=["fp8"])), "unknown precision"),
        (dict(models=["airbench"], grid=ProfileGrid(compile_modes=["fast"])), "unknown compile"),
        (dict(models=["airbench"], repeats=0), "repeats"),
        (dict(models=["airbench"], peak_tflops_override=1e-320), "--peak-tflops must be"),
        (
            dict(models=["airbench-residual"], build=ModelBuild(widths=[8, 16, 16], image_size=16)),
            "cannot train at batch 1",
        ),
    ],
)
def test_bad_options_raise_before_any_work(kwargs, message):
    models = kwargs.pop("models")
    with pytest.raises(TrickLabError, match=message):
        profile_models(models, device="cpu", **kwargs)


def test_a_precision_the_device_cannot_run_is_refused(monkeypatch):
    def no_half(policy):
        raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'\nmore detail")

    monkeypatch.setattr(profile_model.precision_lib.PrecisionPolicy, "autocast", no_half)
    with pytest.raises(TrickLabError, match="precision 16-mixed cannot run on this cpu device"):
        profile_models(["airbench"], ProfileGrid(precisions=["16-mixed"]), **TINY)


def test_cli_json_has_the_documented_keys(capsys):
    code = main(
        ["profile", "model", "airbench", "model.widths=[8,16,16]", "data.image_size=16",
         "--batch-sizes", "2", "--repeats", "2", "--device", "cpu", "--json"]
    )  # fmt: skip
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"models", "results", "macs_note", "hardware", "peak_tflops", "repeats"} <= set(result)
    assert set(result["results"][0]) == RESULT_KEYS
    assert result["image_shape"] == [3, 16, 16]


def test_cli_table_names_the_mac_convention_and_missing_mfu(capsys):
    code = main(
        ["profile", "model", "airbench", "airbench-residual", "model.widths=[8,16,16]",
         "data.image_size=16", "--batch-sizes", "2", "--repeats", "1", "--device", "cpu"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "MACs = FLOPs / 2" in out and "ms/GMAC" in out
    assert "MFU unavailable on cpu" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["resnet81"], "unknown model 'resnet81'"),
        ([], "give at least one model name"),
        (["airbench", "--batch-sizes", ""], "--batch-sizes needs a comma-separated list"),
        (["airbench", "--batch-sizes", "0"], "batch sizes must be integers >= 1"),
        (["airbench", "--batch-sizes", "a"], "'a' is not a valid value"),
        # a value twice made two rows of one setting, each with its own numbers
        (["airbench", "--batch-sizes", "2,2"], "--batch-sizes lists '2' twice"),
        (["airbench", "--channels-last", "on,true"], "--channels-last lists 'true' twice"),
        (["airbench", "--precisions", "32-true,32-true"], "lists '32-true' twice"),
        (["airbench", "--batch-sizes", "1_0"], "--batch-sizes: '1_0' is not a valid value"),
        (["airbench", "--batch-sizes", "\u0663"], "is not a valid value"),
        (["airbench", "--precisions", "fp8"], "unknown precision"),
        (["airbench", "--channels-last", "maybe"], "--channels-last: 'maybe'"),
        (["airbench", "optim.lr=1"], "profile model takes overrides of"),
        (["airbench", "model.widths=[1,2]"], "airbench needs widths as 3 positive integers"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(args, message, capsys):
    assert main(["profile", "model", *args, "--device", "cpu", "--repeats", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_threads_option_is_restored_after_the_command(capsys):
    before = torch.get_num_threads()
    main(["profile", "model", "airbench", "model.widths=[8,16,16]", "data.image_size=16",
          "--batch-sizes", "2", "--repeats", "1", "--device", "cpu", "--threads", "2", "--json"])  # fmt: skip
    assert json.loads(capsys.readouterr().out)["hardware"]["torch_threads"] == 2
    assert torch.get_num_threads() == before


def test_a_batch_whose_activations_exceed_the_memory_left_is_refused_before_any_build(
    monkeypatch, capsys
):
    # was (issue 29, airbench at --batch-sizes 1024 in 1 GiB): killed by the kernel, no word;
    # train and profile step refuse the same batch in one line
    monkeypatch.setattr(profile_model, "available_memory_bytes", lambda: 2**20)
    built = []
    monkeypatch.setattr(profile_model, "_build_base", lambda *args: built.append(args))
    args = ["profile", "model", "airbench", "--batch-sizes", "8,1024", "--device", "cpu"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and built == []
    assert "a training batch of 1024 images of 32x32 does not fit in the memory left" in err
    assert "lower --batch-sizes" in err


def test_a_batch_that_fits_is_not_refused(monkeypatch):
    monkeypatch.setattr(profile_model, "available_memory_bytes", lambda: 2**40)
    result = profile_models(["airbench"], ProfileGrid([2]), **TINY)
    assert result["results"][0]["batch_size"] == 2


OWN = """
from torch import nn


class TupleWhenTraining(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.conv, self.head = nn.Conv2d(3, 4, 3, padding=1), nn.Linear(4, num_classes)

    def forward(self, x):
        y = self.head(self.conv(x).mean((2, 3)))
        return (y, y) if self.training else y


def make(num_classes):
    return TupleWhenTraining(num_classes)
"""


def test_an_own_model_whose_training_step_fails_is_one_line(tmp_path, monkeypatch, capsys):
    # third hostile round: a traceback, exit 1 (the eval-mode check passes this model)
    (tmp_path / "profiled_own.py").write_text(OWN)
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["profile", "model", "profiled_own:make", "data.image_size=16", "--batch-sizes", "2"]
    assert main([*args, "--repeats", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # checked before the timings now, as a run checks it (thirteenth round)
    assert len(err) == 1 and "its forward in train mode gives tuple" in err[0], err


def test_a_peak_below_what_the_device_did_is_refused_not_shown_as_an_mfu_above_100():
    # --peak-tflops 1e-6 on a CPU: an MFU of some 30,000 %, written and shown as measured
    with pytest.raises(TrickLabError, match=r"above the peak of 1e-06 TFLOP/s \(--peak-tflops\)"):
        profile_models(["airbench"], ProfileGrid([2]), peak_tflops_override=1e-6, **TINY)


ALLOCATOR = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 25719496704 bytes. Error code 12 (Cannot allocate memory)"
)
OUT_OF_MEMORY = {
    "the CPU allocator": (RuntimeError(ALLOCATOR), "(asked for 24.0 GiB)"),
    "CUDA": (
        torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 24.00 GiB"),
        "(CUDA out of memory. Tried to allocate 24.00 GiB)",
    ),
    "Python": (MemoryError(), "does not fit in memory;"),
}


@pytest.mark.parametrize("error, said", OUT_OF_MEMORY.values(), ids=OUT_OF_MEMORY.keys())
def test_a_model_that_does_not_fit_in_memory_is_one_line_and_exit_2(
    error, said, monkeypatch, capsys
):
    # was a traceback, exit 1: airbench at data.image_size=1024 asked the CPU allocator for 25 GB
    def out_of_memory(*args):
        raise error

    monkeypatch.setattr(profile_model, "_build_base", out_of_memory)
    args = ["profile", "model", "airbench", "data.image_size=16", "--batch-sizes", "2,4"]
    assert main([*args, "--device", "cpu", "--repeats", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err
    assert err.startswith("error: airbench at batch 4 on 16×16 images does not fit in memory")
    assert err.rstrip().endswith("lower data.image_size, --batch-sizes or model.width")


def test_a_data_dependent_init_of_large_images_takes_few_of_them(monkeypatch):
    # 512 random images of 1024×1024 for airbench's whitening asked for 25 GB; the timings do not
    # depend on the values, so it takes the pixels of 512 images of 32×32
    asked = []

    class Whitened(nn.Module):
        def init_from_data(self, images):
            asked.append(tuple(images.shape))

    def randn(*shape, generator=None):
        return torch.empty(shape, device="meta")  # no memory, whatever the shape

    monkeypatch.setattr(profile_model, "build_model", lambda *args, **kwargs: Whitened())
    monkeypatch.setattr(profile_model.torch, "randn", randn)
    for side in (32, 1024):
        profile_model._build_base("airbench", ModelBuild(image_size=side))
    assert asked == [(512, 3, 32, 32), (1, 3, 1024, 1024)]


@pytest.mark.parametrize(
    "grid, error, said",
    [(ProfileGrid(batch_sizes=[2], channels_last="on"), TypeError, "takes list or tuple, got str"),
     (ProfileGrid(batch_sizes=[2], channels_last=[2]), TypeError, "takes bool, got int"),
     (ProfileGrid(batch_sizes=[2], precisions="32-true"), TypeError, "got str '32-true'")],
)  # fmt: skip
def test_a_python_callers_grid_of_the_wrong_shape_is_a_type_error_naming_it(grid, error, said):
    """Eleventh hostile round: channels_last="on" ran, precisions="32-true" was read letter by
    letter ("unknown precision '3'")."""
    with pytest.raises(error, match=said):
        profile_models(["airbench"], grid, **TINY)


def test_an_unknown_device_is_one_line_and_auto_precision_is_profiled_as_a_run_resolves_it():
    """Eleventh hostile round: device="tpu" was a KeyError; `--precisions auto` was refused."""
    with pytest.raises(TrickLabError, match="no tpu device is available"):
        profile_models(["airbench"], ProfileGrid(batch_sizes=[2]), **{**TINY, "device": "tpu"})
    grid = ProfileGrid(batch_sizes=[2], precisions=["auto", "32-true"])
    result = profile_models(["airbench"], grid, **{**TINY, "repeats": 1})
    from tricklab.training.precision import auto_precision

    auto = auto_precision("cpu", None, "sgd")  # as a run on this CPU: bf16-mixed with AMX
    assert {r["precision"] for r in result["results"]} == {auto, "32-true"}
