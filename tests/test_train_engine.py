"""The training engine end to end on CPU: learning, determinism, statuses, outputs, tricks in place."""

import json
import math
import warnings

import pytest
import torch

from tricklab.core.errors import TrickLabError
from tricklab.recipe.schema import RunConfig, load_recipe
from tricklab.training import api, setup
from tricklab.training.api import RunResult, load_checkpoint, train
from tricklab.training.loop import Outcome, Parts, end_of_epoch, evaluate, train_step
from tricklab.training.schedule import lr_factor

# Small enough that a run takes a second or two on a shared 2-core CPU.
TINY = [
    "data.name=synthetic",
    "data.train_size=500",
    "data.test_size=250",
    "data.image_size=16",
    "model.name=airbench",
    "model.widths=[8, 16, 16]",
    "loader.kind=device",
    "loader.batch_size=50",
    "loader.eval_batch_size=250",
    "optim.lr=0.2",
    "optim.momentum=0.9",
    "optim.nesterov=true",
    "run.epochs=2",
    "run.device=cpu",
]


def tiny(*overrides: str):
    return load_recipe(None, [*TINY, *overrides])


def test_synthetic_set_is_learned_to_95_percent_in_seconds():
    result = train(
        tiny(
            "data.train_size=1000",
            "data.image_size=32",
            "model.widths=[16, 32, 32]",
            "loader.batch_size=100",
            "run.epochs=4",
            "optim.lr=0.2",
        )
    )
    assert result.status == "complete"
    assert result.val_acc >= 0.95  # measured 0.978 (2026-11-22, 2-core CPU)
    assert result.train_seconds < 120


def test_same_seed_gives_bitwise_identical_metrics():
    keys = ("train_loss", "train_acc", "val_loss", "val_acc", "lr")
    a, b = (train(tiny("aug.flip=random", "aug.translate=2")) for _ in range(2))
    assert [[row[k] for k in keys] for row in a.epochs] == [
        [row[k] for k in keys] for row in b.epochs
    ]
    c = train(tiny("aug.flip=random", "aug.translate=2", "run.seed=1"))
    assert [row["train_loss"] for row in c.epochs] != [row["train_loss"] for row in a.epochs]


def test_nan_loss_gives_diverged_with_its_step():
    result = train(tiny("optim.lr=1e12", "run.epochs=3"))
    assert result.status == "diverged"
    assert result.diverged_step is not None and 1 <= result.diverged_step <= 30
    assert result.val_acc is None
    assert "NaN" in result.error


def test_nan_loss_stops_the_run_at_the_end_of_its_epoch_with_its_exact_step(monkeypatch):
    """Finiteness is read once per epoch (a read mid-epoch would stall a GPU's queue); the step
    where the loss first became NaN/Inf is still recorded exactly."""
    from tricklab.training import loop

    losses = []
    real_step = loop.train_step

    def step(*args):
        loss, logits = real_step(*args)
        losses.append(loss.item())
        return loss, logits

    monkeypatch.setattr(loop, "train_step", step)
    monkeypatch.setattr(api, "needs_warm_up", lambda tricks, device: False)  # its steps aside
    result = train(tiny("optim.lr=1e12", "run.epochs=3"))
    assert result.status == "diverged"
    first_nonfinite = next(i for i, loss in enumerate(losses) if not math.isfinite(loss))
    assert result.diverged_step == first_nonfinite + 1
    assert len(losses) == 10 * math.ceil(result.diverged_step / 10)  # its epoch, 10 steps each


@pytest.mark.parametrize(
    "error",
    [
        torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError("CUDA error: out of memory"),
    ],  # what cuBLAS/cuDNN raise
    ids=["OutOfMemoryError", "cuda-error"],
)
def test_out_of_memory_mid_run_gives_oom_and_returns(monkeypatch, tmp_path, error):
    from tricklab.training import loop

    steps = []
    real_step = loop.train_step

    def step_until_oom(*args):
        steps.append(1)
        if len(steps) == 15:  # in the second epoch (10 steps each)
            raise error
        return real_step(*args)

    monkeypatch.setattr(loop, "train_step", step_until_oom)
    result = train(tiny("run.epochs=2"), out_dir=tmp_path)  # returns: the next run can go on
    assert result.status == "oom" and "out of memory" in result.error
    assert result.peak_memory_bytes > 0  # what an oom run most needs to report
    assert (
        result.epochs_completed == 1 and result.train_seconds == result.epochs[0]["train_seconds"]
    )
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "oom"


def test_weights_broken_by_the_last_step_give_diverged_and_strict_json(tmp_path):
    # One step: its loss (computed before the update) is finite, the update is not.
    result = train(tiny("optim.lr=1e30", "run.epochs=0.1"), out_dir=tmp_path)
    assert result.status == "diverged" and result.diverged_step == 1
    assert "validation loss became NaN/Inf" in result.error
    assert math.isnan(result.epochs[-1]["val_loss"])

    def refuse(word):
        raise AssertionError(f"{word} in JSON output")

    stored = json.loads((tmp_path / "result.json").read_text(), parse_constant=refuse)
    assert stored["status"] == "diverged" and stored["epochs"][-1]["val_loss"] is None
    line = (tmp_path / "metrics.jsonl").read_text().splitlines()[-1]
    assert json.loads(line, parse_constant=refuse)["val_loss"] is None


def test_the_result_records_what_the_device_decided_for_auto_values():
    result = train(tiny("tricks.compile=auto", "tricks.precision=bf16-mixed", "run.epochs=1"))
    assert result.resolved == {
        "compile": "off",
        "precision": "bf16-mixed",
        "cuda_graph": False,
        "notes": [],
    }
    assert result.recipe["tricks"]["compile"] == "auto"  # the recipe as given
    # nothing compiled: the eager warm-up's few steps, outside the train seconds
    assert 0.0 <= result.compile_seconds < result.wall_seconds - result.train_seconds


def test_result_reports_every_measurement():
    result = train(tiny("tricks.tta=flip", "run.epochs=1"))
    assert result.train_seconds > 0 and result.wall_seconds >= result.train_seconds
    assert result.images_per_second > 0
    assert result.params > 0 and result.forward_macs > 0
    assert result.peak_memory_bytes > 0
    assert result.val_acc_tta is not None and result.val_loss_tta is not None
    assert result.hardware["torch"] == torch.__version__ and result.hardware["cpu_cores"] >= 1
    assert result.recipe["model"]["name"] == "airbench"
    row = result.epochs[0]
    assert set(row) >= {
        "epoch",
        "train_loss",
        "train_acc",
        "val_loss",
        "val_acc",
        "lr",
        "epoch_seconds",
        "images_per_second",
    }


def test_run_directory_holds_recipe_metrics_result_and_checkpoint(tmp_path):
    result = train(tiny("run.checkpoint=true"), out_dir=tmp_path)
    assert load_recipe(tmp_path / "recipe.yaml") == tiny("run.checkpoint=true")
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2]
    saved = json.loads((tmp_path / "result.json").read_text())
    assert RunResult.from_dict(saved).val_acc == result.val_acc
    checkpoint = load_checkpoint(tmp_path / "checkpoint.pt")
    assert set(checkpoint) == {"model", "recipe"}
    assert not list(tmp_path.glob("*.tmp"))


def test_fractional_epochs_train_a_fraction_of_the_steps():
    result = train(tiny("run.epochs=0.5"))
    assert [row["step"] for row in result.epochs] == [5]  # 500 images / 50 per batch / 2


def test_early_stopping_records_where_it_stopped():
    # lr 0: accuracy barely moves, so patience runs out well before the 8 epochs
    result = train(tiny("optim.lr=0", "run.epochs=8", "run.early_stopping_patience=2"))
    assert result.status == "stopped-early"
    accs = [row["val_acc"] for row in result.epochs]
    best_epoch = 1 + accs.index(max(accs))
    assert result.stopped_epoch == best_epoch + 2 == len(result.epochs) < 8


def test_stop_at_target_records_time_to_target():
    result = train(tiny("run.epochs=6", "run.target_accuracy=0.5", "run.stop_at_target=true"))
    assert result.status == "reached-target"
    assert result.time_to_target_seconds is not None
    assert result.time_to_target_seconds <= result.train_seconds


def test_time_budget_stops_training_and_says_so():
    result = train(tiny("run.epochs=50", "run.time_budget_seconds=0.01"))
    assert result.status == "complete"  # the budget is the run's length (ablate --budget-seconds)
    assert result.time_budget_reached and result.stopped_epoch == 1
    assert len(result.epochs) == 1 and result.epochs[0]["val_acc"] is not None
    within = train(tiny("run.epochs=1", "run.time_budget_seconds=1000"))
    assert not within.time_budget_reached and within.stopped_epoch is None


def test_a_folder_named_like_a_builtin_recipe_does_not_hide_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "speedrun94").mkdir()  # e.g. left by `tricklab speedrun --out speedrun94`
    assert load_recipe("speedrun94").loader.batch_size == 1024


def test_a_missing_device_leaves_no_run_folder(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(TrickLabError, match="no cuda device"):
        train(tiny("run.device=cuda"), out_dir=tmp_path / "runs" / "a")
    assert list(tmp_path.iterdir()) == []


def test_bad_input_removes_every_folder_train_made_and_nothing_else(tmp_path):
    (tmp_path / "keep").mkdir()
    with pytest.raises(TrickLabError, match="unknown model"):
        train(tiny("model.name=nosuchnet"), out_dir=tmp_path / "keep" / "new" / "deep")
    assert [p.name for p in tmp_path.iterdir()] == ["keep"] and not any(
        (tmp_path / "keep").iterdir()
    )


def prepared(*overrides: str) -> Parts:
    """The parts `train` would run the tiny recipe with."""
    recipe = tiny(*overrides)
    return api.prepare(recipe, api.load_data(recipe), torch.device("cpu"))[0]


def hook_training_forward(monkeypatch, module_type, hook) -> None:
    """Make the models `train` builds call hook(module, output) in the training forward passes
    (not in the MAC count or the evaluation) of every module of `module_type`."""
    original = setup.build_model

    def build_with_hook(*args, **kwargs):
        model = original(*args, **kwargs)
        for module in model.modules():
            if isinstance(module, module_type):
                module.register_forward_hook(lambda m, i, o: hook(m, o) if m.training else None)
        return model

    monkeypatch.setattr(setup, "build_model", build_with_hook)


def test_channels_last_reaches_the_activations(monkeypatch):
    formats = []
    hook_training_forward(
        monkeypatch,
        torch.nn.Conv2d,
        lambda m, out: formats.append(out.is_contiguous(memory_format=torch.channels_last)),
    )
    train(tiny("tricks.channels_last=true", "run.epochs=0.1"))
    assert formats and all(formats)


@pytest.mark.parametrize(
    "precision, conv_dtype",
    [
        ("32-true", torch.float32),
        ("bf16-mixed", torch.bfloat16),
        ("16-mixed", torch.float16),
        ("16-true-bn32", torch.float16),
    ],
)
def test_each_precision_trains_in_its_dtype(monkeypatch, precision, conv_dtype):
    convs, norms = [], []
    hook_training_forward(monkeypatch, torch.nn.Conv2d, lambda m, out: convs.append(out.dtype))
    hook_training_forward(
        monkeypatch,
        torch.nn.BatchNorm2d,
        lambda m, out: norms.extend(t.dtype for t in (m.running_mean, *m.parameters())),
    )
    result = train(tiny(f"tricks.precision={precision}", "run.epochs=1"))
    assert result.status == "complete"
    assert all(math.isfinite(row["train_loss"]) for row in result.epochs)
    assert convs and set(convs) == {conv_dtype}
    # BatchNorm statistics and parameters stay fp32 in every mode (16-true-bn32: Page's fix).
    assert norms and set(norms) == {torch.float32}


def test_bn_momentum_sets_every_batchnorm_and_moves_the_running_statistics_by_it():
    def momenta(parts):
        return {m.momentum for m in parts.model.modules() if isinstance(m, torch.nn.BatchNorm2d)}

    assert momenta(prepared()) == {0.4}  # unset: airbench's own
    parts = prepared("model.bn_momentum=0.25")
    assert momenta(parts) == {0.25}
    norms = [m for m in parts.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    norm = norms[0]
    before = norm.running_mean.clone()
    parts.model.train()
    images = next(iter(parts.train_loader))[0]
    batch_means = []
    norm.register_forward_hook(lambda m, i, o: batch_means.append(i[0].mean(dim=(0, 2, 3))))
    with torch.no_grad():
        parts.model(images)
    torch.testing.assert_close(norm.running_mean, 0.75 * before + 0.25 * batch_means[0])


def test_label_smoothing_reaches_the_loss():
    loss_fn = prepared("tricks.label_smoothing=0.2").loss_fn
    torch.manual_seed(0)
    logits, labels, eps = torch.randn(8, 10), torch.randint(0, 10, (8,)), 0.2
    logp = logits.log_softmax(1)
    target = torch.full_like(logp, eps / 10)
    target[torch.arange(8), labels] += 1 - eps
    expected = -(target * logp).sum(1).mean()
    assert torch.allclose(loss_fn(logits, labels), expected, atol=1e-6)
    assert not torch.allclose(prepared().loss_fn(logits, labels), expected, atol=1e-3)


def test_the_lr_follows_the_schedule_step_by_step():
    recipe = tiny("schedule.name=cosine", "schedule.warmup_fraction=0.1", "run.epochs=3")
    result = train(recipe)
    total = result.epochs[-1]["step"]
    assert total == 30  # 500 images, batch 50, 3 epochs
    for row in result.epochs:  # after `step` steps, the next step's lr
        assert row["lr"] == pytest.approx(0.2 * lr_factor(recipe.schedule, row["step"], total))
    assert result.epochs[0]["lr"] == pytest.approx(0.2 * 0.5 * (1 + math.cos(math.pi / 3)))  # 0.15


def test_evaluation_uses_the_averaged_weights():
    p = prepared("tricks.ema_decay=0.9")
    for step, (images, labels) in zip(range(5), p.train_loader):
        train_step(p, images, labels)
        p.ema.update(step)
    got = evaluate(p)
    ema, p.ema = p.ema, None
    live = evaluate(p)
    with ema.swapped_in():
        averaged = evaluate(p)
    assert got == averaged
    assert got[1] != live[1]


def test_whitening_bias_is_frozen_after_its_epochs():
    from tricklab.training import loop

    seen = []
    original = loop.evaluate

    def spy(p, tta="none"):
        seen.append(p.model.whiten.bias.requires_grad)
        return original(p, tta)

    loop.evaluate = spy
    try:
        train(tiny("model.whiten_bias_epochs=1"))
    finally:
        loop.evaluate = original
    assert seen == [True, False]


@pytest.mark.parametrize("lookahead", [False, True], ids=["ema", "lookahead"])
def test_the_final_accuracy_with_and_without_tta_scores_the_weights_the_run_ends_with(
    lookahead, tmp_path
):
    # 13 steps, averaged every 5: the last steps move the live weights away from the average.
    recipe = tiny(
        "tricks.ema_decay=0.9",
        "tricks.ema_every=5",
        f"tricks.lookahead={lookahead}",
        "run.epochs=1.3",
        "tricks.tta=flip",
        "run.checkpoint=true",
    )
    result = train(recipe, out_dir=tmp_path / "run")
    saved = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    p = prepared()
    p.model.load_state_dict(saved["model"])
    assert (result.val_acc, result.val_loss) == evaluate(p)
    assert (result.val_acc_tta, result.val_loss_tta) == evaluate(p, "flip")


def test_lookahead_without_ema_decay_is_refused():
    with pytest.raises(TrickLabError, match="ema_decay"):
        train(tiny("tricks.lookahead=true"))


def test_whiten_bias_epochs_on_a_model_without_whitening_is_refused():
    with pytest.raises(TrickLabError, match="whitening"):
        train(
            tiny(
                "model.name=resnet9",
                "model.widths=null",
                "model.width=0.125",
                "model.whiten_bias_epochs=1",
            )
        )


def test_missing_device_is_refused():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(TrickLabError, match="no cuda device"):
        train(tiny("run.device=cuda"))


def test_torch_loader_trains_like_device_loader():
    augment = ("aug.flip=random", "aug.translate=2", "aug.cutout=4")
    torch_run, device_run = (
        train(tiny(f"loader.kind={kind}", *augment)) for kind in ("torch", "device")
    )
    assert torch_run.status == "complete"
    # measured 0.28-0.29 (torch) and 0.24-0.25 (device) over seeds 0-2; chance is 0.1
    assert torch_run.val_acc > 0.2
    assert abs(torch_run.val_acc - device_run.val_acc) < 0.1


def test_compile_time_is_measured_apart(eager_compile):
    """Dynamo's tracing (the eager backend: Inductor's codegen is not what is timed here) happens
    in the warm-up, outside train_seconds."""
    result = train(tiny("tricks.compile=default", "run.epochs=1", "loader.drop_last=true"))
    assert result.status == "complete"
    # Compiling takes seconds; the 10 compiled steps after it, a fraction of one.
    assert result.train_seconds < result.compile_seconds


def test_compiling_happens_in_the_warm_up_not_in_timed_steps(monkeypatch, eager_compile):
    """torch.compile guards on shapes and requires_grad: the last, smaller batch and the frozen
    whitening bias would each recompile inside a timed epoch unless the warm-up met them."""
    from torch._dynamo.utils import counters

    from tricklab.training import loop

    compiled = []  # graphs compiled during each timed step
    real_step, real_loop, timed = loop.train_step, api.run_loop, []

    def counting_step(*args):
        before = counters["stats"]["unique_graphs"]
        out = real_step(*args)
        if timed:  # the loop's steps, not the warm-up's
            compiled.append(counters["stats"]["unique_graphs"] - before)
        return out

    monkeypatch.setattr(loop, "train_step", counting_step)
    monkeypatch.setattr(api, "run_loop", lambda *a, **k: timed.append(1) or real_loop(*a, **k))
    # 500 images in batches of 60: 8 full and one of 20; the bias freezes from the second epoch.
    result = train(
        tiny(
            "tricks.compile=default",
            "run.epochs=2",
            "loader.batch_size=60",
            "model.whiten_bias_epochs=1",
        )
    )
    assert result.status == "complete" and len(compiled) == 18
    assert counters["stats"]["unique_graphs"] >= 2 and sum(compiled) == 0


def test_the_whitening_is_fitted_on_a_seeded_sample_of_every_class_not_the_first_images():
    # An image folder's split is sorted by class: its first 5,000 images are one class.
    labels = torch.arange(10).repeat_interleave(1000)
    images = labels.view(-1, 1, 1, 1).expand(-1, 3, 2, 2).to(torch.uint8)
    sample = api.init_sample(images, seed=0)
    counts = torch.bincount(sample[:, 0, 0, 0].long(), minlength=10)
    assert len(sample) == api.INIT_FROM_DATA_IMAGES == 5000
    assert counts.min() > 400 and counts.max() < 600  # about 500 of each class
    assert torch.equal(sample, api.init_sample(images, seed=0))
    assert not torch.equal(sample, api.init_sample(images, seed=1))


@pytest.mark.parametrize(("train_size", "steps_per_epoch"), [(500, 10), (250, 5)])
def test_the_ema_starts_after_its_warmup_epochs_whatever_the_data_size(train_size, steps_per_epoch):
    p = prepared(
        "tricks.ema_decay=0.9", "tricks.ema_warmup_epochs=2", f"data.train_size={train_size}"
    )
    assert len(p.train_loader) == steps_per_epoch
    for step in range(2 * steps_per_epoch):
        p.ema.update(step)
        assert p.ema.average is None
    p.ema.update(2 * steps_per_epoch)  # the first step of epoch 3 starts it
    assert p.ema.average is not None


@pytest.mark.parametrize(
    ("overrides", "device", "expected"),
    [
        ([], "cpu", True),  # oneDNN's kernels per shape, thread pools: a first run was 1.5x
        (["tricks.compile=default"], "cpu", True),
        (["tricks.compile=auto"], "cpu", True),  # auto is eager on a CPU, and warms as eager
        (["tricks.compile=auto"], "cuda", True),
        (["tricks.cudnn_benchmark=true"], "cuda", True),  # autotuning stays out of train_seconds
        ([], "cuda", True),  # lazy kernel loading, cuBLAS set-up: one-off work on every GPU run
        ([], "mps", False),
    ],
)
def test_warm_up_steps_run_when_first_steps_do_one_off_work(overrides, device, expected):
    assert api.needs_warm_up(tiny(*overrides).tricks, torch.device(device)) is expected


def test_runs_of_every_seed_see_the_same_images_and_data_seed_draws_others():
    base = api.load_data(tiny())
    other_run = api.load_data(tiny("run.seed=7"))
    other_data = api.load_data(tiny("data.seed=7"))
    for split in ("train", "test"):
        assert torch.equal(getattr(base, split).images, getattr(other_run, split).images)
        assert not torch.equal(getattr(base, split).images, getattr(other_data, split).images)


def test_steps_the_grad_scaler_skips_raise_no_scheduler_warning(monkeypatch):
    # A huge initial scale: the first fp16 gradients overflow, GradScaler skips those steps.
    monkeypatch.setattr(
        setup.PrecisionPolicy,
        "grad_scaler",
        lambda policy: torch.amp.GradScaler(policy.device_type, init_scale=2.0**100),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(tiny("tricks.precision=16-mixed", "run.epochs=1"))
    assert result.status == "complete"
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)]


def test_subsets_and_the_held_out_split_follow_data_seed_not_run_seed(tmp_path):
    from test_data_sources import make_tree

    make_tree(tmp_path / "data", classes=("a", "b"), per_split={"train": 10})  # no test/: held out
    common = ["data.name=imagefolder", f"data.dir={tmp_path / 'data'}", f"data.cache_dir={tmp_path / 'cache'}",
              "data.train_size=8", "data.val_fraction=0.2"]  # fmt: skip

    def images(*overrides):
        ds = api.load_data(load_recipe(None, [*common, *overrides]))
        return ds.train.images, ds.test.images

    base, other_run, other_data = images(), images("run.seed=3"), images("data.seed=3")
    assert all(torch.equal(a, b) for a, b in zip(base, other_run))
    assert not torch.equal(base[0], other_data[0]) and not torch.equal(base[1], other_data[1])


# ---------------------------------------------------------------- end-of-epoch decisions
def epoch_row(epoch, val_acc=None, val_loss=None, *, step=None, train_seconds=None):
    """A row as the loop records it, with only what the decisions read."""
    return {
        "epoch": epoch,
        "step": 10 * epoch if step is None else step,
        "train_seconds": float(epoch) if train_seconds is None else train_seconds,
        "val_acc": val_acc,
        "val_loss": val_loss,
    }


def decide(rows, total_steps=100, diverged_step=None, **run):
    """Feed rows one by one as the loop does; the outcome and whether each row stopped training."""
    out, stops = Outcome(), []
    for row in rows:
        out.epochs.append(row)
        stops.append(end_of_epoch(out, RunConfig(**run), total_steps))
    if diverged_step is not None:
        stops.append(end_of_epoch(out, RunConfig(**run), total_steps, diverged_step))
    return out, stops


def test_an_epoch_before_the_last_step_goes_on_and_the_last_step_ends_training():
    out, stops = decide([epoch_row(1, step=50), epoch_row(2, 0.5, 1.0, step=100)])
    assert stops == [False, True]
    assert (out.status, out.stopped_epoch, out.time_budget_reached) == ("complete", None, False)


def test_a_nan_training_loss_ends_training_as_diverged_at_its_step():
    out, stops = decide([epoch_row(1, 0.5, 1.0)], diverged_step=17)
    assert stops == [False, True]
    assert (out.status, out.diverged_step, out.stopped_epoch) == ("diverged", 17, 2)
    assert out.error == "loss became NaN/Inf at step 17"


@pytest.mark.parametrize("val_loss", [math.nan, math.inf])
def test_a_nan_validation_loss_ends_training_as_diverged_after_the_epochs_last_step(val_loss):
    out, stops = decide([epoch_row(1, 0.1, 2.0), epoch_row(2, 0.1, val_loss, step=20)])
    assert stops == [False, True]
    assert (out.status, out.diverged_step, out.stopped_epoch) == ("diverged", 20, 2)
    assert out.error == "validation loss became NaN/Inf after step 20"


def test_the_time_budget_ends_training_early_and_says_so():
    rows = [epoch_row(1, train_seconds=1.0), epoch_row(2, train_seconds=2.5)]
    out, stops = decide(rows, time_budget_seconds=2.0)
    assert stops == [False, True]
    assert (out.status, out.time_budget_reached, out.stopped_epoch) == ("complete", True, 2)


def test_a_budget_spent_on_the_last_step_is_no_early_end():
    out, stops = decide([epoch_row(1, step=100, train_seconds=3.0)], time_budget_seconds=2.0)
    assert stops == [True] and not out.time_budget_reached and out.stopped_epoch is None


def test_time_to_target_is_the_first_evaluation_at_the_target_and_training_goes_on():
    rows = [epoch_row(1, 0.8, 1.0), epoch_row(2), epoch_row(3, 0.92, 0.5), epoch_row(4, 0.95, 0.4)]
    out, stops = decide(rows, target_accuracy=0.9)
    assert stops == [False] * 4 and out.time_to_target_seconds == 3.0 and out.status == "complete"


def test_stop_at_target_ends_training_when_the_target_is_reached():
    rows = [epoch_row(1, 0.8, 1.0), epoch_row(2, 0.9, 0.5)]
    out, stops = decide(rows, target_accuracy=0.9, stop_at_target=True)
    assert stops == [False, True]
    assert (out.status, out.stopped_epoch, out.time_to_target_seconds) == ("reached-target", 2, 2.0)


def test_early_stopping_counts_evaluations_without_an_improvement_of_min_delta():
    # 0.605 is not 0.01 better than 0.6; the unevaluated epoch 4 counts for nothing.
    accs = [0.5, 0.6, 0.605, None, 0.58]
    rows = [epoch_row(e, a, None if a is None else 1 - a) for e, a in enumerate(accs, 1)]
    out, stops = decide(rows, early_stopping_patience=2, early_stopping_min_delta=0.01)
    assert stops == [False, False, False, False, True]
    assert (out.status, out.stopped_epoch) == ("stopped-early", 5)


def test_early_stopping_on_val_loss_counts_a_lower_loss_as_better():
    losses = [1.0, 0.9, 0.95, 0.8, 0.85]
    rows = [epoch_row(e, 0.5, loss) for e, loss in enumerate(losses, 1)]
    out, stops = decide(rows, early_stopping_patience=2, early_stopping_monitor="val_loss")
    assert stops == [False] * 5 and out.status == "complete"
    out, stops = decide(rows[:3] + [epoch_row(4, 0.5, 0.96)], early_stopping_patience=2,
                        early_stopping_monitor="val_loss")  # fmt: skip
    assert stops[-1] and (out.status, out.stopped_epoch) == ("stopped-early", 4)


def test_patience_running_out_at_the_last_step_ends_training_complete():
    rows = [epoch_row(1, 0.6, 1.0, step=50), epoch_row(2, 0.5, 1.1, step=100)]
    out, stops = decide(rows, early_stopping_patience=1)
    assert stops == [False, True] and (out.status, out.stopped_epoch) == ("complete", None)


def test_the_loop_reads_on_one_screen():
    import inspect

    from tricklab.training import loop

    assert len(inspect.getsource(loop.run_loop).splitlines()) <= 50


# ---------------------------------------------------------------- sizes that cannot fit
def test_a_model_whose_weights_cannot_fit_the_device_is_refused_before_it_is_built(
    monkeypatch, tmp_path
):
    from tricklab.training import model_memory

    monkeypatch.setattr(model_memory, "device_memory_bytes", lambda device: 64 * 2**20)
    built = []
    monkeypatch.setattr(setup, "build_model", lambda *a, **k: built.append(1))
    with pytest.raises(TrickLabError) as error:
        train(tiny("model.widths=[512, 512, 512]"), out_dir=tmp_path / "run")
    message = str(error.value)
    assert "model.widths" in message and "11.9 M parameters" in message
    assert "does not fit in the cpu's memory" in message and "64.0 MiB available" in message
    assert not built and not (tmp_path / "run").exists()


def test_the_estimate_counts_weights_gradients_optimizer_state_and_the_average():
    from tricklab.training.model_memory import training_state_bytes

    model = torch.nn.Linear(10, 10)  # 110 parameters of 4 bytes
    sgd = tiny("optim.momentum=0", "optim.nesterov=false")
    assert training_state_bytes(model, sgd) == 110 * 4 * 2  # weights, gradients
    assert training_state_bytes(model, tiny()) == 110 * 4 * 3  # and the momentum
    adamw = tiny("optim.name=adamw", "optim.nesterov=false")
    assert training_state_bytes(model, adamw) == 110 * 4 * 4  # and its two moments
    assert training_state_bytes(model, tiny("tricks.ema_decay=0.9")) == 110 * 4 * 4  # its average


def test_out_of_memory_while_building_the_model_is_an_oom_run_like_one_in_training(
    monkeypatch, tmp_path, capsys
):
    from tricklab.cli.main import main

    message = (
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory:"
        " you tried to allocate 360000000000 bytes. Error code 12 (Cannot allocate memory)"
    )

    def no_memory(*args, **kwargs):
        raise RuntimeError(message)

    monkeypatch.setattr(setup, "build_model", no_memory)
    assert main(["train", *TINY, "--out", str(tmp_path / "run"), "--json"]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == "oom" and result["error"] == message
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "oom"
