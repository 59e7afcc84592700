"""tricks.cuda_graph on the CPU: the graph-safe step (lr read from a device table at a device
counter, fused SGD taking the lr as a tensor) trains exactly as the loop's own step does; the
trick turns itself off with one note where no CUDA GPU is; what a graph cannot hold is refused
in one line. The capture itself runs on a GPU only (benchmarks/gpu_session.py)."""

import pytest
import torch

from tricklab.core.errors import TrickLabError
from tricklab.recipe.schema import load_recipe
from tricklab.training import api, muon
from tricklab.training.cudagraph import GraphedStep, lr_table
from tricklab.training.loop import run_loop
from tricklab.training.muon import MuonSGD, newton_schulz
from tricklab.training.optim import build_optimizer
from tricklab.training.precision import PrecisionPolicy
from tricklab.training.resolve import cuda_graph_for_device, for_device
from tricklab.training.schedule import build_scheduler, lr_factor

TINY = [
    "data.name=synthetic",
    "data.train_size=400",
    "data.test_size=200",
    "data.image_size=16",
    "model.name=airbench",
    "model.widths=[8, 16, 16]",
    "model.whiten_bias_epochs=1",  # a parameter frozen mid-run: the graph's key changes
    "loader.kind=device",
    "loader.batch_size=64",  # 400 = 6 x 64 + 16: the last batch is smaller (runs eagerly)
    "loader.eval_batch_size=200",
    "optim.lr=0.2",
    "optim.momentum=0.9",
    "optim.nesterov=true",
    "optim.bias_lr_mult=8",  # two groups, two lrs
    "schedule.name=piecewise-linear",
    "tricks.ema_decay=0.7",
    "tricks.ema_every=3",
    "tricks.lookahead=true",
    "tricks.label_smoothing=0.1",
    "run.epochs=2.5",
    "run.device=cpu",
]


def trained(
    graphed: bool, overrides: tuple[str, ...] = ("optim.fused=true",)
) -> tuple[list[torch.Tensor], list[dict], GraphedStep | None]:
    recipe = load_recipe(None, [*TINY, *overrides])
    torch.manual_seed(0)
    parts, _ = api.prepare(recipe, api.load_data(recipe), torch.device("cpu"))
    if recipe.optim.name == "muon":
        # Muon's SGD part fused on both sides (as on a GPU), so only where the lr is read differs
        parts.optimizer = build_optimizer(parts.model, recipe.optim, 64, fused=True)
        parts.scheduler = build_scheduler(parts.optimizer, recipe.schedule, parts.total_steps)
    step = None
    if graphed:
        step = GraphedStep(parts, recipe.schedule, parts.total_steps, capture=False)
        parts.graph = step
    outcome = run_loop(parts, recipe.run)
    return [p.detach().clone() for p in parts.model.parameters()], outcome.epochs, step


def assert_trained_alike(
    overrides: tuple[str, ...] = ("optim.fused=true",), tolerance: float = 1e-6
):
    """Trained by the loop's own step and by the graph-safe one: the same parameters (to
    `tolerance`), lr, train loss and val accuracy epoch by epoch. Returns the graphed run's rows
    and step."""
    plain, plain_rows, _ = trained(graphed=False, overrides=overrides)
    graphed, graphed_rows, step = trained(graphed=True, overrides=overrides)
    for a, b in zip(plain, graphed, strict=True):
        torch.testing.assert_close(a, b, rtol=tolerance, atol=tolerance)
    for a, b in zip(plain_rows, graphed_rows, strict=True):
        assert a["lr"] == pytest.approx(b["lr"], rel=1e-6)
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["val_acc"] == b["val_acc"]
    return graphed_rows, step


def test_the_graph_safe_step_trains_exactly_as_the_loops_own_step():
    graphed_rows, step = assert_trained_alike()
    assert isinstance(graphed_rows[0]["lr"], float)
    assert int(step.counter) == 18  # ceil(2.5 x 7) steps; the counter ran on the device


MUON = ("optim.name=muon", "optim.muon_lr=0.1", "optim.muon_momentum=0.6", "optim.muon_ns_steps=3")


def float64_newton_schulz(matrix, steps):
    """muon.newton_schulz in float64: bfloat16's rounding would turn the lr's float32 rounding
    (the device table) into differences of ~1 % within a few steps, hiding what is compared."""
    return newton_schulz(matrix, steps, dtype=torch.float64).to(matrix.dtype)


def test_muons_graph_safe_step_trains_as_the_loops_own_step(monkeypatch):
    """Muon's filter step takes the lr from the device table (a 0-d tensor) and its SGD part is
    fused: the run trains as the host-lr run does, up to the float32 rounding of the lr."""
    monkeypatch.setattr(muon, "newton_schulz", float64_newton_schulz)
    _, step = assert_trained_alike(MUON, tolerance=1e-4)
    assert isinstance(step.parts.optimizer, MuonSGD) and step.parts.optimizer.fused
    assert int(step.counter) == 18


def test_a_muon_step_with_a_tensor_lr_is_the_step_with_that_number():
    torch.manual_seed(0)
    weights = [torch.randn(8, 4, 3, 3), torch.randn(16, 8, 3, 3), torch.randn(8)]
    grads = [torch.randn_like(w) for w in weights]
    after = []
    for lr in (0.05, torch.tensor(0.05)):
        params = [torch.nn.Parameter(w.clone()) for w in weights]
        groups = [
            {
                "params": params[:2],
                "muon": True,
                "lr": lr,
                "momentum": 0.6,
                "nesterov": True,
                "weight_decay": 0.01,
            },
            {"params": params[2:], "lr": lr, "momentum": 0.9, "nesterov": True},
        ]
        optimizer = MuonSGD(groups, lr=0.05, fused=True)
        for _ in range(3):
            for p, g in zip(params, grads):
                p.grad = g.clone()
            optimizer.step()
        after.append([p.detach().clone() for p in params])
    for a, b in zip(*after, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_the_muon_record_captures_its_step_unless_its_compile_records_graphs_of_its_own():
    recipe = load_recipe("speedrun94-muon", ["tricks.cuda_graph=auto"])
    assert cuda_graph_for_device(recipe, "cuda", FP16, "default") == (True, None)
    assert cuda_graph_for_device(recipe, "cuda", FP16, "off") == (True, None)
    assert cuda_graph_for_device(recipe, "cuda", FP16, "max-autotune") == (False, None)


def test_the_lr_table_is_the_schedule_per_group():
    recipe = load_recipe(None, TINY)
    table = lr_table([0.5, 4.0], recipe.schedule, 10, torch.device("cpu"))
    assert table.shape == (2, 11)
    for step in (0, 3, 10):
        factor = lr_factor(recipe.schedule, step, 10)
        assert table[0, step].item() == pytest.approx(0.5 * factor, rel=1e-6)
        assert table[1, step].item() == pytest.approx(4.0 * factor, rel=1e-6)


def test_on_a_cpu_the_trick_is_off_with_one_note():
    recipe = load_recipe(None, [*TINY, "tricks.cuda_graph=on"])
    ran, _, resolved = for_device(recipe, torch.device("cpu"))
    assert ran.tricks.cuda_graph == "off" and resolved["cuda_graph"] is False
    assert resolved["notes"] == [
        "tricks.cuda_graph is off: CUDA graphs need a CUDA GPU (this run: cpu)"
    ]
    result = api.train(recipe)
    assert result.status == "complete"
    assert result.resolved["cuda_graph"] is False
    assert "CUDA graphs need a CUDA GPU" in result.resolved["notes"][0]


FP16 = PrecisionPolicy(name="16-true-bn32", device_type="cuda", weight_dtype=torch.float16)
SCALED = PrecisionPolicy(
    name="16-mixed", device_type="cuda", autocast_dtype=torch.float16, grad_scaling=True
)


@pytest.mark.parametrize("setting", ["on", "auto"])
def test_on_cuda_it_runs_unless_a_grad_scaler_is_needed(setting):
    recipe = load_recipe(None, [*TINY, f"tricks.cuda_graph={setting}"])
    assert cuda_graph_for_device(recipe, "cuda", FP16) == (True, None)
    graph, note = cuda_graph_for_device(recipe, "cuda", SCALED)
    assert graph is False
    if setting == "on":
        assert note == (
            "tricks.cuda_graph is off: 16-mixed scales the loss with a GradScaler, which the "
            "graph does not hold"
        )
    else:
        assert note is None  # auto decides silently
    off = load_recipe(None, TINY)
    assert cuda_graph_for_device(off, "cuda", FP16) == (False, None)


def test_auto_is_off_without_a_word_where_the_step_cannot_be_captured():
    adamw = load_recipe(None, [*TINY, "optim.name=adamw", "tricks.cuda_graph=auto"])
    assert cuda_graph_for_device(adamw, "cuda", FP16) == (False, None)
    ran, _, resolved = for_device(load_recipe("speedrun94"), torch.device("cpu"))
    assert resolved["cuda_graph"] is False and ran.tricks.cuda_graph == "off"
    assert not any("cuda_graph" in note for note in resolved["notes"])


def test_the_record_recipe_captures_its_step_on_a_cuda_gpu():
    recipe = load_recipe("speedrun94")
    assert recipe.tricks.cuda_graph == "auto"
    assert cuda_graph_for_device(recipe, "cuda", FP16) == (True, None)


@pytest.mark.parametrize("word, setting", [("true", "on"), ("false", "off"), ("auto", "auto")])
def test_true_and_false_name_on_and_off(word, setting):
    assert load_recipe(None, [*TINY, f"tricks.cuda_graph={word}"]).tricks.cuda_graph == setting


@pytest.mark.parametrize(
    "override, words",
    [
        ("optim.name=adamw", "optim.name=adamw reads its lr on the host"),
        ("optim.name=rmsprop", "optim.name=rmsprop reads its lr on the host"),
        ("optim.accumulate_steps=2", "accumulate_steps > 1"),
        ("tricks.precision=16-mixed", "GradScaler"),
    ],
)
def test_what_a_graph_cannot_hold_is_refused_in_one_line(override, words):
    with pytest.raises(TrickLabError) as error:
        load_recipe(None, [*TINY, "tricks.cuda_graph=on", override])
    assert "tricks.cuda_graph=on: " in str(error.value)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_an_optimizer_without_fused_kernels_is_refused():
    recipe = load_recipe(None, TINY)
    parts, _ = api.prepare(recipe, api.load_data(recipe), torch.device("cpu"))
    with pytest.raises(TrickLabError, match="needs an optimizer that reads its lr on the device"):
        GraphedStep(parts, recipe.schedule, parts.total_steps)


def test_cli_train_says_the_trick_is_off_on_a_cpu(tmp_path, capsys):
    from tricklab.cli.main import main

    args = ["train", "--out", str(tmp_path / "run"), "tricks.cuda_graph=on", *TINY[:-1]]
    assert main([*args, "run.epochs=1", "run.device=cpu"]) == 0
    out = capsys.readouterr().out
    assert "note: tricks.cuda_graph is off: CUDA graphs need a CUDA GPU (this run: cpu)" in out


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_compile_modes_that_record_their_own_graphs_turn_it_off(mode):
    on = load_recipe(None, [*TINY, "tricks.cuda_graph=on"])
    graph, note = cuda_graph_for_device(on, "cuda", FP16, mode)
    assert graph is False
    assert note == f"tricks.cuda_graph is off: tricks.compile={mode} records CUDA graphs of its own"
    auto = load_recipe("speedrun94")
    assert cuda_graph_for_device(auto, "cuda", FP16, mode) == (False, None)
    assert cuda_graph_for_device(auto, "cuda", FP16, "default") == (True, None)


def test_max_autotunes_kernels_without_its_graphs_go_inside_the_capture():
    recipe = load_recipe("speedrun94", ["tricks.compile=max-autotune-no-cudagraphs"])
    assert recipe.tricks.compile == "max-autotune-no-cudagraphs"
    graph, note = cuda_graph_for_device(recipe, "cuda", FP16, recipe.tricks.compile)
    assert (graph, note) == (True, None)
