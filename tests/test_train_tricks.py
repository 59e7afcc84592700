"""Each training trick, called alone, does what it claims."""

import copy
import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from tricklab.core.errors import TrickLabError
from tricklab.recipe.schema import OptimConfig, ScheduleConfig
from tricklab.training.averaging import WeightAverage
from tricklab.training.backend import backend_settings
from tricklab.training.loss import training_loss
from tricklab.training.optim import build_optimizer, scaled_lr, split_params
from tricklab.training.precision import half_with_fp32_batchnorm, precision_policy
from tricklab.training.schedule import lr_factor
from tricklab.training.tta import tta_logits


def small_net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 10),
    )


@pytest.mark.parametrize(
    "cfg, step, expected",
    [
        (ScheduleConfig(name="constant"), 37, 1.0),
        (ScheduleConfig(name="step", milestones=[0.5, 0.75], gamma=0.1), 49, 1.0),
        (ScheduleConfig(name="step", milestones=[0.5, 0.75], gamma=0.1), 50, 0.1),
        (ScheduleConfig(name="step", milestones=[0.5, 0.75], gamma=0.1), 80, 0.01),
        (ScheduleConfig(name="cosine"), 50, 0.5),
        (ScheduleConfig(name="cosine", final_factor=0.1), 100, 0.1),
        (
            ScheduleConfig(
                name="piecewise-linear", start_factor=0.2, peak_fraction=0.2, final_factor=0.07
            ),
            0,
            0.2,
        ),
        (
            ScheduleConfig(
                name="piecewise-linear", start_factor=0.2, peak_fraction=0.2, final_factor=0.07
            ),
            10,
            0.6,
        ),
        (
            ScheduleConfig(
                name="piecewise-linear", start_factor=0.2, peak_fraction=0.2, final_factor=0.07
            ),
            20,
            1.0,
        ),
        (
            ScheduleConfig(
                name="piecewise-linear", start_factor=0.2, peak_fraction=0.2, final_factor=0.07
            ),
            100,
            0.07,
        ),
        (ScheduleConfig(name="constant", warmup_fraction=0.1), 5, 0.5),
        (
            ScheduleConfig(name="cosine", warmup_fraction=0.1),
            10,
            0.5 * (1 + math.cos(math.pi * 0.1)),
        ),
    ],
)
def test_schedule_value_at_step(cfg, step, expected):
    assert lr_factor(cfg, step, 100) == pytest.approx(expected)


def test_ema_weights_equal_the_recurrence():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    ema = WeightAverage(model, decay=0.9, every=2, warmup_steps=1)
    expected = None
    for step in range(7):
        with torch.no_grad():
            model.weight.add_(torch.randn_like(model.weight))
        ema.update(step)
        if step >= 1 and (step - 1) % 2 == 0:
            w = model.weight.detach().clone()
            expected = w if expected is None else 0.9 * expected + 0.1 * w
    assert torch.allclose(ema.average[0], expected, atol=1e-6)
    live = model.weight.detach().clone()
    with ema.swapped_in():
        assert torch.allclose(model.weight, expected, atol=1e-6)
    assert torch.equal(model.weight, live)


def test_ema_decay_ramps_up_with_decay_power():
    model = nn.Linear(3, 2)
    ema = WeightAverage(model, decay=0.9, decay_power=3, total_steps=10)
    expected = None
    for step in range(6):
        with torch.no_grad():
            model.weight.add_(1.0 + step)
        ema.update(step)
        w = model.weight.detach().clone()
        decay = 0.9 * ((step + 1) / 10) ** 3
        expected = w if expected is None else decay * expected + (1 - decay) * w
    assert torch.allclose(ema.average[0], expected, atol=1e-6)


def test_lookahead_copies_average_into_model():
    model = nn.Linear(3, 2)
    ema = WeightAverage(model, decay=0.5, lookahead=True)
    ema.update(0)
    with torch.no_grad():
        before = model.weight.clone()
        model.weight.add_(2.0)
    ema.update(1)
    assert torch.allclose(model.weight, before + 1.0)


def test_tta_flip_averages_mirrored_logits():
    model = small_net().eval()
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        expected = 0.5 * (model(x) + model(torch.flip(x, dims=[3])))
        assert torch.allclose(tta_logits(model, x, "flip"), expected, atol=1e-6)
        assert torch.equal(tta_logits(model, x, "none"), model(x))


@pytest.mark.parametrize("tta", ["flip", "flip-translate"])
def test_tta_survives_a_forward_that_reuses_its_output_memory(tta):
    """A forward compiled with CUDA graphs replays into one output buffer, overwriting the
    previous call's logits: TTA must not hold one call's output across the next call."""
    model = small_net().eval()
    x = torch.randn(4, 3, 8, 8)
    buffer = torch.empty(4, 10)

    def replaying_forward(images):
        return buffer.copy_(model(images))

    with torch.no_grad():
        assert torch.allclose(
            tta_logits(replaying_forward, x, tta), tta_logits(model, x, tta), atol=1e-6
        )


def test_tta_flip_translate_adds_the_one_pixel_shifts_with_reflected_borders():
    model = small_net().eval()
    x = torch.randn(4, 3, 8, 8)
    # Shifted one pixel up-left, row/column i shows i - 1; the row before 0 reflects to row 1.
    up_left = torch.tensor([1, 0, 1, 2, 3, 4, 5, 6])
    down_right = torch.tensor([1, 2, 3, 4, 5, 6, 7, 6])  # shows i + 1; past row 7 reflects to 6

    def shifted(idx):
        return x[:, :, idx][:, :, :, idx]

    def flip_avg(images):
        return 0.5 * (model(images) + model(torch.flip(images, dims=[3])))

    with torch.no_grad():
        expected = 0.5 * flip_avg(x) + 0.25 * (
            flip_avg(shifted(up_left)) + flip_avg(shifted(down_right))
        )
        assert torch.allclose(tta_logits(model, x, "flip-translate"), expected, atol=1e-5)


def test_bf16_mixed_runs_forward_in_bfloat16():
    seen = []
    model = small_net()
    model[0].register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    with precision_policy("bf16-mixed", "cpu").autocast():
        model(torch.randn(2, 3, 8, 8))
    assert seen == [torch.bfloat16]


def test_16_true_bn32_keeps_batchnorm_in_fp32():
    model = half_with_fp32_batchnorm(small_net())
    assert model[0].weight.dtype == torch.float16
    assert model[5].weight.dtype == torch.float16
    assert model[1].weight.dtype == torch.float32
    assert model[1].running_mean.dtype == torch.float32


def test_lr_scaling_rules():
    assert scaled_lr(0.1, 256, 128, "none") == 0.1
    assert scaled_lr(0.1, 192, 128, "linear") == pytest.approx(0.15)
    assert scaled_lr(0.1, 512, 128, "sqrt") == pytest.approx(0.2)


def test_bias_lr_applies_to_norm_params_and_no_decay_to_norms_and_biases():
    model = small_net()
    weights, norms, biases = split_params(model)
    assert [id(p) for p in weights] == [id(model[0].weight), id(model[5].weight)]
    assert [id(p) for p in norms] == [id(model[1].weight), id(model[1].bias)]
    assert [id(p) for p in biases] == [id(model[0].bias), id(model[5].bias)]
    cfg = OptimConfig(lr=0.1, weight_decay=5e-4, no_decay_bn_bias=True, bias_lr_mult=64)
    g_w, g_norm, g_bias = build_optimizer(model, cfg, batch_size=128).param_groups
    assert (g_w["lr"], g_w["weight_decay"]) == (0.1, 5e-4)
    assert (g_norm["lr"], g_norm["weight_decay"]) == (pytest.approx(6.4), 0.0)
    assert (g_bias["lr"], g_bias["weight_decay"]) == (0.1, 0.0)
    assert [len(g["params"]) for g in (g_w, g_norm, g_bias)] == [2, 2, 2]


def test_airbench_recipe_steps_exactly_as_airbench94s_summed_loss_sgd():
    """speedrun94's lr, weight decay and bias lr, stated for a mean loss, give airbench94.py's
    update: SGD on the summed loss at lr 11.5/kilostep_scale, weight decay 0.0153 x 1024 /
    kilostep_scale divided by each group's lr, BatchNorm biases at 64 x lr, every other parameter
    (the whitening bias too) at lr."""
    from tricklab.models import build_model
    from tricklab.recipe.schema import load_recipe

    recipe = load_recipe("seed4-airbench94", ["model.widths=[8,16,16]"])
    torch.manual_seed(0)
    model = build_model(
        "airbench", num_classes=10, in_channels=3, image_size=32, widths=[8, 16, 16]
    )
    model.init_from_data(torch.randn(64, 3, 32, 32))
    ours, theirs = model, copy.deepcopy(model)
    kilostep_scale = 1024 * (1 + 1 / (1 - 0.85))
    lr, wd = 11.5 / kilostep_scale, 0.0153 * 1024 / kilostep_scale
    norm_ids = {
        id(p) for m in theirs.modules() if isinstance(m, nn.BatchNorm2d) for p in m.parameters()
    }
    trainable = [p for p in theirs.parameters() if p.requires_grad]
    norm_biases = [p for p in trainable if id(p) in norm_ids]
    others = [p for p in trainable if id(p) not in norm_ids]
    assert any(p is theirs.whiten.bias for p in others)
    airbench_sgd = torch.optim.SGD(
        [
            {"params": norm_biases, "lr": lr * 64, "weight_decay": wd / (lr * 64)},
            {"params": others, "lr": lr, "weight_decay": wd / lr},
        ],
        momentum=0.85,
        nesterov=True,
    )
    our_sgd = build_optimizer(ours, recipe.optim, batch_size=1024)
    images, labels = torch.randn(1024, 3, 32, 32), torch.randint(0, 10, (1024,))
    for _ in range(3):  # momentum buffers too
        for net, opt, reduction in ((ours, our_sgd, "mean"), (theirs, airbench_sgd, "sum")):
            loss = nn.functional.cross_entropy(
                net(images), labels, label_smoothing=0.2, reduction=reduction
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def test_groups_with_the_same_settings_are_one_group():
    model = small_net()
    opt = build_optimizer(model, OptimConfig(lr=0.1, weight_decay=5e-4), batch_size=128)
    (group,) = opt.param_groups
    assert {id(p) for p in group["params"]} == {id(p) for p in model.parameters()}
    assert (group["lr"], group["weight_decay"]) == (0.1, 5e-4)


def test_decoupled_weight_decay_divides_by_group_lr():
    cfg = OptimConfig(lr=0.5, weight_decay=0.01, decoupled_weight_decay=True, bias_lr_mult=2)
    opt = build_optimizer(small_net(), cfg, batch_size=128)
    assert [g["lr"] * g["weight_decay"] for g in opt.param_groups] == [pytest.approx(0.01)] * 2


def test_build_optimizer_scales_the_lr_with_the_batch():
    for rule, batch, lr in [("none", 256, 0.1), ("linear", 256, 0.2), ("sqrt", 512, 0.2)]:
        cfg = OptimConfig(lr=0.1, lr_scaling=rule, reference_batch_size=128, bias_lr_mult=2)
        opt = build_optimizer(small_net(), cfg, batch_size=batch)
        assert [g["lr"] for g in opt.param_groups] == pytest.approx([lr, 2 * lr])


@pytest.mark.parametrize(
    "name, cls",
    [
        ("sgd", torch.optim.SGD),
        ("adam", torch.optim.Adam),
        ("adamw", torch.optim.AdamW),
        ("rmsprop", torch.optim.RMSprop),
    ],
)
def test_every_optimizer_builds(name, cls):
    opt = build_optimizer(small_net(), OptimConfig(name=name), batch_size=32)
    assert type(opt) is cls
    assert opt.param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
def test_fused_optimizer_takes_the_same_steps_as_the_default(name):
    # No BatchNorm: a conv bias before one gets a gradient of pure rounding noise, which Adam
    # scales up to a full step of random sign.
    def net():
        return nn.Sequential(
            nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10)
        )

    cfg = dict(name=name, lr=1e-3, weight_decay=5e-4, nesterov=name == "sgd")
    models = [net(), net()]
    models[1].load_state_dict(models[0].state_dict())
    start = models[0][0].weight.detach().clone()
    opts = [build_optimizer(m, OptimConfig(**cfg, fused=f), 32) for m, f in zip(models, (0, 1))]
    assert [o.defaults["fused"] for o in opts] == [None, True]
    torch.manual_seed(0)
    for _ in range(3):
        images, labels = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))
        for model, opt in zip(models, opts):
            opt.zero_grad()
            nn.functional.cross_entropy(model(images), labels).backward()
            opt.step()
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b)
    assert (models[1][0].weight - start).abs().max() > 1e-4  # it did step


def test_backend_flags_are_restored():
    before = (torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark)
    with backend_settings("medium", not before[1]):
        assert torch.get_float32_matmul_precision() == "medium"
        assert torch.backends.cudnn.benchmark is (not before[1])
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark) == before


def imported_modules(path) -> list[str]:
    """The modules a source file imports, at its top or inside functions."""
    import ast

    tree = ast.parse(path.read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    return names + [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]


def test_muon_knows_nothing_of_recipes_or_parameter_groups():
    """airbench94_muon's Muon class knows no config; the groups are built where the optimizer is."""
    from pathlib import Path

    from tricklab.training import muon

    imported = imported_modules(Path(muon.__file__))
    assert "torch" in imported
    assert not [m for m in imported if m and m.startswith("tricklab")]


def test_train_modules_import_tricklab_at_the_top_so_no_cycle_hides_in_a_function():
    # A third-party module may be imported where it is needed (torch._inductor, ~2 s, only by
    # runs that compile); tricklab's own modules are imported at the top.
    import ast
    from pathlib import Path

    from tricklab.training import loop

    def names(node):
        if isinstance(node, ast.ImportFrom):
            return [node.module or "."] if node.level == 0 else ["."]
        return [alias.name for alias in node.names]

    for path in Path(loop.__file__).parent.glob("*.py"):
        for func in ast.walk(ast.parse(path.read_text())):
            if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = [
                    name
                    for n in ast.walk(func)
                    if isinstance(n, (ast.Import, ast.ImportFrom))
                    for name in names(n)
                    if name == "." or name.split(".")[0] == "tricklab"
                ]
                assert not inner, f"{path.name}: {func.name} imports {inner} inside the function"


def test_an_eager_run_imports_no_compiler():
    # torch._dynamo costs every process ~2 s to import; only a run that compiles needs it
    code = (
        "import sys; import tricklab.training.api, tricklab.experiments.runner, "
        "tricklab.cli.main; print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_muon_groups_filters_at_muon_lr_and_the_rest_as_sgd_groups():
    model = small_net()
    cfg = OptimConfig(name="muon", lr=0.1, muon_lr=0.05, bias_lr_mult=2, nesterov=True)
    opt = build_optimizer(model, cfg, batch_size=128)
    by_kind = {g["muon"]: g for g in opt.param_groups if g["muon"]}
    assert [id(p) for p in by_kind[True]["params"]] == [id(model[0].weight)]
    assert by_kind[True]["lr"] == 0.05
    rest = [g for g in opt.param_groups if not g["muon"]]
    assert sorted(g["lr"] for g in rest) == [0.1, 0.2]  # the head; norms and biases at bias lr
    assert sum(len(g["params"]) for g in rest) == 5


def test_muon_refuses_a_model_without_conv_filters():
    with pytest.raises(TrickLabError, match="no trainable conv filter"):
        build_optimizer(nn.Linear(3, 2), OptimConfig(name="muon"), batch_size=8)


def test_tta_averages_each_views_logits_in_fp32():
    """A bf16 forward's logits are taken to fp32 before averaging: the mean of 1 and 1 + 2^-7
    (neighbours in bf16) is 1 + 2^-8, which bf16 cannot hold and rounds away."""

    calls = []

    def bf16_forward(images):  # 1 on the first call of each mirror pair, 1 + 2^-7 on the second
        calls.append(1)
        return torch.full((len(images), 10), 1 + (len(calls) % 2 == 0) * 2**-7).bfloat16()

    images = torch.zeros(2, 1, 4, 4)
    for tta in ("flip", "flip-translate"):
        logits = tta_logits(bf16_forward, images, tta)
        assert logits.dtype == torch.float32
        assert torch.equal(logits, torch.full((2, 10), 1 + 2**-8)), tta


def test_fp16_weights_get_the_fp32_gradients_within_fp16_rounding():
    """tricks.precision=16-true-bn32 (airbench's fp16 weights, fp32 BatchNorm): the loss is
    summed over the batch, which keeps gradients far above fp16's underflow. Gradients of about
    1e-5 (near fp16's smallest normal number, 6e-5, where a mean loss's lose their precision)
    come out as the fp32 ones times the batch size, within fp16 rounding."""
    torch.manual_seed(0)
    batch = 256
    net16 = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))
    half_with_fp32_batchnorm(net16)
    with torch.no_grad():
        net16[3].weight.mul_(1e-3)  # small logits: small gradients reach the first layer
    net32 = copy.deepcopy(net16).float()  # the same weights, in fp32
    images, labels = torch.randn(batch, 16).half(), torch.randint(0, 10, (batch,))
    training_loss(0.2)(net32(images.float()), labels).backward()
    training_loss(0.2, summed=True)(net16(images), labels).backward()
    grad32, grad16 = net32[0].weight.grad, net16[0].weight.grad
    assert grad16.dtype == torch.float16 and grad32.abs().max() < 6e-5
    # measured: 7e-4 of the largest gradient; a mean loss in fp16 is off by 9.5e-2
    tolerance = 2e-3 * grad32.abs().max()
    torch.testing.assert_close(grad16.float() / batch, grad32, rtol=1e-2, atol=tolerance)


def test_a_summed_loss_takes_the_mean_losss_step_with_the_rescaled_lr_and_weight_decay():
    """build_optimizer(loss_scale=batch) divides the lr and multiplies the (coupled) weight decay
    by the batch size, so the summed loss's steps are the mean loss's: momentum, Nesterov and
    decoupled_weight_decay included."""
    torch.manual_seed(0)
    batch = 64
    mean_net = small_net()
    sum_net = copy.deepcopy(mean_net)
    cfg = OptimConfig(
        lr=0.5,
        momentum=0.9,
        nesterov=True,
        weight_decay=0.01,
        decoupled_weight_decay=True,
        bias_lr_mult=4,
    )
    mean_opt = build_optimizer(mean_net, cfg, batch)
    scale = precision_policy("16-true-bn32", "cpu").loss_scale(batch)
    sum_opt = build_optimizer(sum_net, cfg, batch, loss_scale=scale)
    assert scale == batch and sum_opt.param_groups[0]["lr"] == mean_opt.param_groups[0]["lr"] / 64
    for _ in range(3):
        images, labels = torch.randn(batch, 3, 8, 8), torch.randint(0, 10, (batch,))
        for net, opt, summed in ((mean_net, mean_opt, False), (sum_net, sum_opt, True)):
            opt.zero_grad()
            training_loss(0.2, summed)(net(images), labels).backward()
            opt.step()
    for (name, a), b in zip(mean_net.named_parameters(), sum_net.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)


def test_16_mixed_uses_a_fused_optimizer_that_takes_the_scale_on_the_device():
    """GradScaler reads found_inf on the host every step unless the optimizer unscales and skips
    on the device itself (torch's fused SGD, Adam, AdamW)."""
    for name in ("sgd", "adam", "adamw"):
        opt = build_optimizer(small_net(), OptimConfig(name=name), 32, grad_scaler=True)
        assert opt.defaults["fused"] is True and opt._step_supports_amp_scaling, name
    assert build_optimizer(small_net(), OptimConfig(), 32).defaults["fused"] is None


@pytest.mark.parametrize(
    ("precision", "device", "capability", "expected"),
    [
        ("bf16-mixed", "cuda", (7, 5), "16-mixed"),  # T4: no bf16 tensor cores
        ("bf16-mixed", "cuda", (7, 0), "16-mixed"),  # V100
        ("bf16-mixed", "cuda", (8, 0), "bf16-mixed"),  # A100
        ("bf16-mixed", "cuda", (9, 0), "bf16-mixed"),  # H100
        ("bf16-mixed", "cpu", None, "bf16-mixed"),
        ("32-true", "cuda", (7, 5), "32-true"),
        ("16-true-bn32", "cuda", (7, 5), "16-true-bn32"),
    ],
)
def test_bf16_falls_back_to_fp16_on_gpus_without_bf16_tensor_cores(
    precision, device, capability, expected
):
    from tricklab.training.precision import resolve_precision

    assert resolve_precision(precision, device, capability)[0].name == expected


@pytest.mark.parametrize(
    ("mode", "device", "expected"),
    [
        ("auto", "cuda", "max-autotune"),
        ("auto", "cuda-graphed", "max-autotune-no-cudagraphs"),
        ("auto", "cpu", "off"),
        ("auto", "cpu-graphed", "off"),
        ("default", "cuda-graphed", "default"),
        ("auto", "mps", "off"),
        ("default", "cpu", "default"),
        ("off", "cuda", "off"),
    ],
)
def test_compile_auto_compiles_on_cuda_as_the_records_did_and_not_on_the_cpu(
    mode, device, expected
):
    from tricklab.training.resolve import compile_for_device

    device, _, graphed = device.partition("-")
    assert compile_for_device(mode, device, graphed=bool(graphed)) == expected


@pytest.mark.parametrize(
    ("overrides", "compile_mode", "graph"),
    [
        ([], "max-autotune-no-cudagraphs", True),
        (["tricks.cuda_graph=off"], "max-autotune", False),
        (["tricks.precision=16-mixed"], "max-autotune", False),  # a GradScaler: no graph
        (["tricks.compile=max-autotune"], "max-autotune", False),
        (["tricks.compile=default"], "default", True),
    ],
)
def test_auto_compiles_max_autotunes_kernels_inside_the_step_graph_where_the_graph_runs(
    overrides, compile_mode, graph
):
    """speedrun94-muon on CUDA: auto is max-autotune's kernels inside tricklab's whole-step graph
    (the fastest measured, 2026-11-28), and max-autotune with its own CUDA graphs where the step
    cannot be captured."""
    from tricklab.recipe.schema import load_recipe
    from tricklab.training.resolve import for_device

    recipe = load_recipe("speedrun94-muon", overrides)
    ran, _, resolved = for_device(recipe, torch.device("cuda"), capability=(9, 0))
    assert (resolved["compile"], resolved["cuda_graph"]) == (compile_mode, graph)
    assert ran.tricks.compile == compile_mode
    assert ran.tricks.cuda_graph == ("on" if graph else "off")
    assert resolved["notes"] == []


def test_the_device_decides_auto_values_and_the_run_records_what_it_decided():
    from tricklab.recipe.schema import load_recipe
    from tricklab.training.resolve import for_device

    recipe = load_recipe("speedrun94-muon", ["tricks.precision=bf16-mixed"])
    assert recipe.tricks.compile == "auto"
    t4, _, resolved = for_device(recipe, torch.device("cuda"), capability=(7, 5))
    assert (t4.tricks.compile, t4.tricks.precision) == ("max-autotune", "16-mixed")
    assert resolved["compile"] == "max-autotune" and resolved["precision"] == "16-mixed"
    assert "bf16" in " ".join(resolved["notes"]) and "7.5" in " ".join(resolved["notes"])
    cpu, _, resolved = for_device(recipe, torch.device("cpu"))
    assert (cpu.tricks.compile, cpu.tricks.precision) == ("off", "bf16-mixed")
    assert resolved["notes"] == [] and recipe.tricks.compile == "auto"  # the recipe is left as is


def test_muon_compiles_its_newton_schulz_step_when_the_recipe_compiles(monkeypatch):
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compiled.append(fn) or fn)
    from tricklab.training import muon

    cfg = OptimConfig(name="muon")
    eager = build_optimizer(small_net(), cfg, 32)
    assert compiled == [] and eager.newton_schulz is muon.newton_schulz
    build_optimizer(small_net(), cfg, 32, compile_mode="max-autotune")
    assert compiled == [muon.newton_schulz]


def test_muon_steps_every_filter_with_a_few_foreach_kernels_not_a_loop_of_them():
    """The momentum, the renormalisation, the step and the SGD part run as foreach/fused kernels
    over all parameters: apart from Newton–Schulz (one per filter) and views, the kernels of a
    step do not grow with the number of filters."""
    from torch.utils._python_dispatch import TorchDispatchMode

    views = {"view", "_reshape_alias", "permute", "t", "transpose", "detach", "alias"}

    class Kernels(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names, self.in_newton_schulz = [], False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if not self.in_newton_schulz and name not in views:
                self.names.append(name)
            return func(*args, **(kwargs or {}))

    def kernels_per_step(filters: int) -> list[str]:
        net = nn.Sequential(*[nn.Conv2d(4, 4, 3, padding=1) for _ in range(filters)])
        opt = build_optimizer(net, OptimConfig(name="muon", nesterov=True), 32)
        for p in net.parameters():
            p.grad = torch.randn_like(p)
        opt.step()  # the first step makes the momentum buffers
        kernels, newton_schulz = Kernels(), opt.newton_schulz

        def marked(*args):
            kernels.in_newton_schulz = True
            try:
                return newton_schulz(*args)
            finally:
                kernels.in_newton_schulz = False

        opt.newton_schulz = marked
        with kernels:
            opt.step()
        return kernels.names

    two = kernels_per_step(2)
    assert {"_foreach_norm", "_foreach_lerp_", "_foreach_add_"} <= set(two)
    assert kernels_per_step(4) == two
