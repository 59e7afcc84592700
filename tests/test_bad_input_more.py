"""More bad input through the CLI (round 5 of trying to break it): each case one line on stderr,
exit code 2, no traceback and nothing left behind."""

import json
import math
from pathlib import Path

import pytest
import torch
from permissions import as_a_user_without_root_rights
from tiny_recipe import TINY_SYNTHETIC

import tricklab
from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.core.paths import remove_empty_dirs
from tricklab.data.dataset import Sampling
from tricklab.experiments.plan import AblationPlan, SweepPlan
from tricklab.experiments.space import parse_space
from tricklab.recipe.schema import load_recipe
from tricklab.report.build import write_report
from tricklab.training import preflight
from tricklab.training.preflight import micro_batch_sizes


def _profile_models(models, **kwargs):
    from tricklab.profile.model import profile_models

    return profile_models(models, **kwargs)


def _profile_step(recipe):
    from tricklab.profile.step import profile_step

    return profile_step(recipe)


def _study_runs(study, **kwargs):
    from tricklab.experiments.reading import study_runs

    return study_runs(study, **kwargs)


def _parse_vary(specs):
    from tricklab.experiments.plan import parse_vary

    return parse_vary(specs)


def _budget(**kwargs):
    from tricklab.experiments.plan import budget_overrides

    return budget_overrides(**kwargs)


# 16x16 images: airbench's last BatchNorm sees 1x1 maps, so a batch of one image cannot train
TINY = [*TINY_SYNTHETIC, "data.train_size=64", "loader.batch_size=32", "run.epochs=1"]


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    return err[0]


@pytest.mark.parametrize(
    "num_samples, batch_size, drop_last, parts, sizes",
    [
        (64, 32, False, 1, {32}),
        (65, 32, False, 1, {32, 1}),
        (65, 32, True, 1, {32}),
        (1, 32, False, 1, {1}),
        (64, 32, False, 32, {1}),
        (70, 32, False, 4, {8, 2}),  # the last batch of 6 in chunks of 2
        (69, 32, False, 4, {8, 2, 1}),  # the last batch of 5: chunks 2, 2, 1
    ],
)
def test_micro_batch_sizes_are_those_the_loop_trains_on(
    num_samples, batch_size, drop_last, parts, sizes
):
    assert micro_batch_sizes(num_samples, batch_size, drop_last, parts) == sizes


@pytest.mark.parametrize(
    "bad, message",
    [
        (["data.train_size=1"], "the last batch of each epoch (1 of 1 train images"),
        (["data.train_size=65"], "the last batch of each epoch (1 of 65 train images"),
        (["loader.batch_size=1"], "loader.batch_size=1 gives a training batch of 1 image"),
        (["optim.accumulate_steps=32"], "in optim.accumulate_steps=32 micro-batches"),
    ],
    ids=["one-image", "last-batch-of-one", "batch-size-1", "micro-batches-of-one"],
)
def test_bad_batch_of_one_image_under_batchnorm_is_refused_before_the_run(
    tmp_path, capsys, bad, message
):
    # was: a traceback mid-run ("Expected more than 1 value per channel when training"), exit 1
    out = tmp_path / "run"
    assert main(["train", *TINY, *bad, "--out", str(out)]) == 2
    line = one_error_line(capsys)
    assert message in line and "BatchNorm layer" in line, line
    assert not out.exists()


def test_a_last_batch_of_one_image_trains_with_drop_last(tmp_path, capsys):
    args = ["train", *TINY, "data.train_size=65", "loader.drop_last=true", "--json"]
    assert main([*args, "--out", str(tmp_path / "run")]) == 0


@pytest.mark.parametrize(
    "bad, message",
    [
        (["optim.lr=1e308"], "peak lr would be 1e+308"),
        (["optim.weight_decay=1e308"], "peak weight decay would be 1e+308 (optim.weight_decay)"),
        (["optim.name=muon", "optim.muon_lr=1e300"], "peak lr would be 1e+300"),
        (["schedule.name=step", "schedule.gamma=1e300"], "peak lr would be inf"),
        (["schedule.name=cosine", "schedule.final_factor=1e300"], "peak lr would be 1e+299"),
        (
            ["optim.lr=1e-300", "optim.weight_decay=0.1", "optim.decoupled_weight_decay=true"],
            "/ the lr (optim.decoupled_weight_decay)",
        ),
        (
            ["optim.name=adamw", "optim.lr=1e20", "optim.weight_decay=1e20"],
            "peak lr x weight decay would be 1e+40",
        ),
    ],
    ids=["lr", "weight-decay", "muon-lr", "step-gamma", "cosine-final", "decoupled", "adamw"],
)
def test_bad_step_size_beyond_float32_is_refused_before_the_run(tmp_path, capsys, bad, message):
    # was: "RuntimeError: value cannot be converted to type float without overflow", exit 1
    out = tmp_path / "run"
    assert main(["train", *TINY, *bad, "--out", str(out)]) == 2
    line = one_error_line(capsys)
    assert message in line and "float32 parameters take" in line, line
    assert not out.exists()


def run_folder(tmp_path, result=None, metrics=None):
    """A run folder as `tricklab train` leaves it, with `result` merged into a minimal result."""
    folder = tmp_path / "run"
    folder.mkdir()
    record = {"status": "complete", "val_acc": 0.5, "train_seconds": 1.0, "epochs": []}
    record.update(result or {})
    (folder / "result.json").write_text(json.dumps(record))
    if metrics is not None:
        (folder / "metrics.jsonl").write_text(metrics)
    return folder


def test_report_of_a_minimal_run_folder_is_written(tmp_path, capsys):
    folder = run_folder(tmp_path, metrics='{"epoch": 1, "val_acc": 0.5}\n')
    assert main(["report", str(folder), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.md").is_file()


@pytest.mark.parametrize(
    "result, metrics, message",
    [
        ({"status": None}, None, "no 'status' of the run"),
        ({"recipe": "x"}, None, "'recipe' is \"x\", not an object"),
        ({"recipe": {"run": 5}}, None, "a section of 'recipe' is not an object"),
        ({"recipe": {"run": {"seed": "x"}}}, None, "'recipe.run.seed' is \"x\""),
        ({"val_acc": "high"}, None, "'val_acc' is \"high\", not a number"),
        ({"train_seconds": True}, None, "'train_seconds' is true, not a number"),
        ({"hardware": "x"}, None, "'hardware' is \"x\", not an object"),
        ({"epochs": [1]}, None, "an epoch row is 1, not an object"),
        ({"epochs": [{"val_acc": "x"}]}, None, "an epoch row's 'val_acc' is \"x\""),
        ({"train_seconds": 1e308}, None, "'train_seconds' is 1e+308, more than any run records"),
        ({"params": -1e300}, None, "'params' is -1e+300, below 0"),
        ({"epochs": [{"val_loss": 1e300}]}, None, "'val_loss' is 1e+300, more than any run"),
        ({}, "not json\n", "metrics.jsonl line 1 is not valid JSON"),
        ({}, '{"epoch": 1}\n[2]\n', "an epoch row is [2], not an object"),
        # fourth hostile round: an OverflowError traceback, and "-500" images/s drawn
        ({"train_seconds": 5e-324}, None, "'train_seconds' is 5e-324, less than any run records"),
        ({"images_per_second": -500.0}, None, "'images_per_second' is -500.0, below 0"),
        ({"epochs": [{"images_per_second": -5.0}]}, None, "'images_per_second' is -5.0, below 0"),
    ],
    ids=[
        "no-status", "recipe-text", "recipe-section", "seed-text", "accuracy-text",
        "seconds-bool", "hardware-text", "epoch-number", "epoch-value", "seconds-huge",
        "params-huge", "epoch-value-huge", "metrics-garbage",
        "metrics-row-list", "seconds-denormal", "throughput-negative", "epoch-throughput-negative",
    ],
)  # fmt: skip
def test_report_of_a_damaged_or_foreign_run_folder_is_one_line(
    tmp_path, capsys, result, metrics, message
):
    # was: AttributeError / KeyError / ValueError tracebacks from collect.py and stats.py, exit 1
    folder = run_folder(tmp_path, result, metrics)
    assert main(["report", str(folder), "--out", str(tmp_path / "report")]) == 2
    line = one_error_line(capsys)
    assert message in line and str(folder) in line, line
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize(
    "summary, message",
    [
        ({"runs": [1, 2]}, "a run is int, not an object"),
        ({"runs": {"a": 1}}, "'runs' is not a list"),
        ({"runs": [{"status": "complete", "seed": "abc"}]}, "'seed' is \"abc\""),
        ({"runs": [{"status": "complete"}]}, "a run has no whole-number 'seed'"),
        ({"runs": [], "recipe": [1]}, "'recipe' is [1], not an object"),
        ({"runs": [], "target_accuracy": "high"}, "'target_accuracy' is \"high\""),
        (
            {"runs": [{"status": "complete", "seed": 0, "accuracy": 0.9, "train_seconds": 1e308}]},
            "'train_seconds' is 1e+308, more than any run records",
        ),
        (  # fourth hostile round: counted as two runs, with an interval from one
            {"runs": [{"status": "complete", "seed": 3, "accuracy": 0.9}] * 2},
            "runs[1]: seed 3 is listed twice",
        ),
    ],
    ids=[
        "runs-numbers", "runs-object", "seed-text", "no-seed", "recipe-list", "target-text",
        "seconds-huge", "seed-twice",
    ],
)  # fmt: skip
def test_report_of_a_damaged_speedrun_summary_is_one_line(tmp_path, capsys, summary, message):
    folder = tmp_path / "speedrun"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(folder), "--out", str(tmp_path / "report")]) == 2
    line = one_error_line(capsys)
    assert message in line and "is not a tricklab speedrun summary" in line, line
    assert not (tmp_path / "report").exists()


LONG = "x" * 300  # a name longer than file systems take (255 bytes)


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", *TINY, "--out", f"a/{LONG}/b"], "--out: the name xxx"),
        (["speedrun", "--runs", "1", *TINY, "--out", LONG], "--out: the name xxx"),
        (["report", "somewhere", "--out", LONG], "--out: the name xxx"),
        (["results", LONG], "study: the name xxx"),
        (["demo", "--quiet", "--out", LONG], "--out: the name xxx"),
        (["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.2", "--study", LONG], "--study"),
        (["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.2", "--study", ".."], "one folder"),
        (["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.2", "--study", "/x"], "one folder"),
        (["sweep", "--baseline", *TINY, "--space", "s.yaml", "--study", "a/../b"], "one folder"),
        # third hostile round: stored under runs/experiments/a/b, where results lists nothing
        (["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.2", "--study", "a/b"], "one folder"),
        (["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.2", "--study", "a\nb"], "a\\nb"),
        (["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.2", "--study", " a"], "one folder"),
        (["demo", "--seeds", "0"], "--seeds 0 must be a whole number from 1 to 100"),
        (["demo", "--quiet", "--seeds", "1", "--out", "/proc/tricklab-demo"], "cannot write the demo into /proc/tricklab-demo"),
    ],
    ids=[
        "train-out-long", "speedrun-out-long", "report-out-long", "results-study-long",
        "demo-out-long", "ablate-study-long", "study-dotdot", "study-absolute", "study-dotdot-part",
        "study-nested", "study-newline", "study-space",
        "demo-seeds-0-before-the-plan", "demo-out-unwritable",
    ],
)  # fmt: skip
def test_bad_names_and_folders_are_one_line(tmp_path, monkeypatch, capsys, args, message):
    # was: OSError tracebacks (File name too long, Read-only file system), exit 1; a study '..'
    # or '/x' put study.db outside runs/experiments; demo --seeds 0 printed its plan first
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    assert message in one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_remove_empty_dirs_also_removes_parents_above_a_folder_never_made(tmp_path):
    made = tmp_path / "a"
    made.mkdir()  # mkdir(parents=True) made a, then failed making a/b
    remove_empty_dirs(made / "b" / "c", made)
    assert not made.exists()


@pytest.mark.parametrize(
    "space, message",
    [
        ("optim.lr: {low: 0.01, high: 1, step: 5}", "high=1 is not low=0.01 plus whole steps of 5"),
        ("optim.lr: {low: 0.1, high: 0.35, step: 0.1}", "would stop at 0.3; give high=0.3"),
        ("loader.batch_size: {low: 32, high: 100, step: 32}", "would stop at 96; give high=96"),
    ],
    ids=["step-beyond-the-range", "float-step", "int-step"],
)
def test_bad_range_whose_step_misses_high_is_refused(tmp_path, capsys, space, message):
    # was: Optuna's two-line UserWarning, and a sweep that silently never tried `high`
    (tmp_path / "space.yaml").write_text(space + "\n")
    args = ["sweep", "--baseline", *TINY, "--space", str(tmp_path / "space.yaml"), "--dry-run"]
    assert main([*args, "--sampler", "grid", "--out", str(tmp_path / "exp")]) == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / "exp").exists()


def test_a_range_whose_steps_reach_high_is_kept(tmp_path):
    space = parse_space({"optim.lr": {"low": 0.1, "high": 0.3, "step": 0.1}}, "space.yaml")
    assert space.distributions["optim.lr"].high == 0.3


@pytest.mark.parametrize(
    "text, got", [("optim: []\n", "list"), ("optim: false\n", "bool"), ("aug: 0\n", "int")]
)
def test_bad_recipe_section_that_is_no_mapping_is_refused(tmp_path, capsys, text, got):
    # was: `optim: []` and `optim: false` read as an empty section, silently
    (tmp_path / "r.yaml").write_text(text)
    assert main(["train", str(tmp_path / "r.yaml"), "--out", str(tmp_path / "run")]) == 2
    line = one_error_line(capsys)
    assert f"must be a mapping, got {got}" in line and "r.yaml" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "key, meant",
    [
        ("optim.learning_rate", "optim.lr"),  # was: 'optim.lr_scaling'
        ("optim.wd", "optim.weight_decay"),  # was: 'optim.lr'
        ("loader.bs", "loader.batch_size"),  # was: 'loader.kind'
        ("data.batch_size", "loader.batch_size"),  # was: 'data.test_size'
        ("tricks.ema", "tricks.ema_decay"),  # was: 'tricks.tta'
        ("schedule.warmup", "schedule.warmup_fraction"),  # was: 'schedule.name'
        ("data.dataset", "data.name"),  # was: 'data.train_size'
        ("tricks.amp", "tricks.precision"),  # was: 'tricks.tta'
        ("data.path", "data.dir"),  # was: 'data.name'
        ("optim.lrr", "optim.lr"),
        ("label_smoothing", "tricks.label_smoothing"),
        ("trick.tta", "tricks.tta"),
        ("OPTIM.LR", "optim.lr"),  # was: no hint
    ],
)
def test_a_near_miss_key_suggests_the_key_it_was_meant_to_be(capsys, key, meant):
    assert main(["train", f"{key}=1"]) == 2
    assert one_error_line(capsys).endswith(f"did you mean '{meant}'?")


def test_bad_profile_batch_size_beyond_the_recipe_bound_is_refused(capsys):
    # was: "DefaultCPUAllocator: can't allocate memory" traceback, exit 1
    args = ["profile", "model", "airbench", "--batch-sizes", "1,100000000", "--device", "cpu"]
    assert main(args) == 2
    assert "batch sizes must be <= 65536, got 100000000" in one_error_line(capsys)


@pytest.mark.parametrize(("threads", "message"), [("0", "must be >= 1"), ("100000", "cores")])
def test_bad_profile_thread_count_is_one_line(capsys, threads, message):
    # was, for 100000: torch's thread pool failed to start them and the process died (exit 139)
    args = ["profile", "model", "airbench", "--batch-sizes", "2", "--device", "cpu"]
    assert main([*args, "--threads", threads]) == 2
    assert message in one_error_line(capsys)


@pytest.mark.parametrize(
    "memory_left, message",
    [
        (2**20, "a training batch of 32 images of 16x16 does not fit in the memory left"),
        (3 * 2**20, "an eval batch of 128 images of 16x16 does not fit in the memory left"),
    ],
    ids=["train-batch", "eval-batch"],
)
def test_bad_batch_whose_activations_exceed_the_memory_left_is_refused_on_the_cpu(
    tmp_path, monkeypatch, capsys, memory_left, message
):
    # was (resnet18, data.image_size=1024): the kernel's OOM killer ended the run, no line at all,
    # a half-written run folder; here the memory left is made small instead
    monkeypatch.setattr(preflight, "available_memory_bytes", lambda: memory_left)
    out = tmp_path / "run"
    args = ["train", *TINY, "loader.eval_batch_size=128", "loader.batch_size=32"]
    assert main([*args, "data.image_size=16", "--out", str(out)]) == 2
    line = one_error_line(capsys)
    assert message in line and "(the kernel would kill the process)" in line, line
    assert not out.exists()


def test_activation_estimate_counts_an_in_place_output_once():
    recipe = load_recipe(None, TINY)
    per_image, largest = preflight.activation_bytes(recipe, 10, (3, 16, 16), torch.float32)
    assert 0 < largest < per_image < 2**20  # kilobytes for 8-16 channels of 16x16 at most


def test_bad_cache_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    # was: a warning about a "damaged cache file" before the error line
    (tmp_path / "file").write_text("x")
    from PIL import Image

    for name in ("a", "b"):
        folder = tmp_path / "data" / "train" / name
        folder.mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(folder / "0.png")
    args = ["data", "show", "imagefolder", "--data-dir", str(tmp_path / "data")]
    assert main([*args, "--cache-dir", str(tmp_path / "file")]) == 2
    assert "cannot write the dataset cache in" in one_error_line(capsys)


def test_bad_speedrun_run_count_beyond_ablates_seed_bound_is_refused(tmp_path, capsys):
    # was: a billion runs started (a typo for 10)
    out = tmp_path / "sr"
    assert main(["speedrun", "--runs", "1000000000", *TINY, "--out", str(out)]) == 2
    assert "--runs 1000000000 is too many; at most 10,000" in one_error_line(capsys)
    assert not out.exists()


def test_bad_zero_epochs_is_refused_with_the_recipe(capsys):
    # was: refused only after torch's import and the data's load ("gives no training step")
    assert main(["train", "data.name=imagefolder", "data.dir=/no/such/folder", "run.epochs=0"]) == 2
    assert "run.epochs=0 must be > 0" in one_error_line(capsys)


@pytest.mark.parametrize("name", ["cifar10", "mnist"])
def test_bad_data_dir_that_is_a_file_says_so(tmp_path, capsys, name):
    # was: "cifar10 not found: ... (downloading failed: [Errno 17] File exists: ...)"
    (tmp_path / "file").write_text("x")
    args = ["data", "show", name, "--data-dir", str(tmp_path / "file")]
    assert main([*args, "--cache-dir", str(tmp_path / "cache")]) == 2
    assert f"{name}: the data folder {tmp_path / 'file'} is a file" in one_error_line(capsys)


@pytest.mark.parametrize(
    "cutout, inside", [(100, False), (31, False), (16, True)], ids=["far", "just", "inside"]
)
def test_bad_cutout_that_zeroes_the_whole_image_is_refused(tmp_path, capsys, cutout, inside):
    # was: training on all-zero images, silently (and aug.cutout=1024 asked B x 1024^2 indices)
    args = ["train", *TINY, f"aug.cutout={cutout}", f"aug.cutout_inside={str(inside).lower()}"]
    assert main([*args, "--out", str(tmp_path / "run")]) == 2
    assert f"cutout={cutout} zeroes the whole 16x16 image" in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_a_cutout_that_leaves_part_of_the_image_trains(tmp_path, capsys):
    assert main(["train", *TINY, "aug.cutout=30", "--json", "--out", str(tmp_path / "r")]) == 0


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: load_recipe("speedrun94", "run.epochs=1"), "a list of 'key=value' strings"),
        (lambda: load_recipe("speedrun94", [1]), "a 'key=value' string, got 1"),
        (lambda: tricklab.train("speedrun94"), "train takes a Recipe"),
        (lambda: tricklab.train(None), "train takes a Recipe"),
        (lambda: tricklab.train(load_recipe(None), out_dir=5), "out_dir is a folder path"),
        # fourth hostile round: read letter by letter ("no study 's'"), or deep tracebacks
        (lambda: write_report("sr1", "out"), "sources takes list or tuple, got str"),
        (lambda: write_report(["sr1"], None), "out_dir takes str or PathLike"),
        (lambda: write_report(["x"], "out", storage=5), "storage takes str or PathLike or None"),
        (lambda: write_report([], "out", profiles="p.json"), "profiles takes list or tuple"),
        (lambda: tricklab.experiments.results(None), "study takes str, got NoneType"),
        # fifth hostile round: "01" varied label smoothing over 0 and 1; True seeds left a study
        # no reader took; a dict for a space, a dict for a recipe: AttributeErrors from inside
        (
            lambda: AblationPlan(load_recipe(None), {"tricks.label_smoothing": "01"}),
            r"vary\['tricks.label_smoothing'\] takes list or tuple, got str",
        ),
        (
            lambda: AblationPlan(load_recipe(None), {"optim.lr": [0.1]}, seeds=True),
            r"seeds takes a whole number \(int\), got bool True",
        ),
        (lambda: AblationPlan({"a": 1}, {"optim.lr": [0.1]}), "baseline takes Recipe, got dict"),
        (
            lambda: AblationPlan(load_recipe(None), {"optim.lr": [0.1]}, storage=5),
            "storage takes str or PathLike or None",
        ),
        (
            lambda: SweepPlan(load_recipe(None), {"optim.lr": [0.1]}, trials=1),
            "space takes a SearchSpace",
        ),
        (lambda: SweepPlan(load_recipe(None), "space.yaml", trials=1), "space takes a SearchSpace"),
        (
            lambda: SweepPlan(load_recipe(None), parse_space({"optim.lr": [0.1]}), trials=1.5),
            r"trials takes a whole number \(int\), got float 1.5",
        ),
        (lambda: tricklab.train(load_recipe(None), stop=42), "stop takes StopRequest or None"),
        (lambda: tricklab.train(load_recipe(None), on_epoch="x"), "on_epoch takes a function"),
        (lambda: tricklab.load_dataset("synthetic", sampling="x"), "sampling takes Sampling"),
        (lambda: Sampling(seed="a"), "Sampling's seed takes an int, got 'a'"),
        # sixth round: an AttributeError seven frames deep; a target of True taken as 1
        (lambda: AblationPlan(load_recipe(None), {5: [0]}), "each key of AblationPlan's vary"),
        (lambda: tricklab.experiments.results("any", target=True), "target takes a number"),
        # seventh round: AttributeErrors from inside, names read letter by letter, True as 1
        (lambda: tricklab.build_model(None, num_classes=10), "build_model's name takes str"),
        (lambda: tricklab.build_model("airbench", num_classes=True), "num_classes takes a whole"),
        (lambda: tricklab.build_model("airbench", num_classes=10.0), "num_classes takes a whole"),
        (lambda: tricklab.build_model("airbench", num_classes=10, image_size=True), "image_size"),
        (lambda: tricklab.build_model("resnet18", num_classes=10, widths="abc"), "widths takes"),
        (lambda: tricklab.load_recipe(b"speedrun94"), "name_or_path takes str or PathLike"),
        (lambda: tricklab.load_recipe(1), "name_or_path takes str or PathLike"),
        (lambda: tricklab.load_dataset("synthetic", data_dir=1), "data_dir takes str or PathLike"),
        (lambda: tricklab.load_dataset("synthetic", cache_dir=1), "cache_dir takes str"),
        (lambda: _profile_models("airbench"), "models takes list or tuple"),
        (lambda: _profile_models(["airbench"], device=None), "device takes str"),
        (lambda: _profile_step(None), "profile_step's recipe takes Recipe"),
        (
            lambda: _study_runs("s", storage=5),
            "storage .a URL or a file path. takes str or PathLike",
        ),
        (lambda: _study_runs(None), "study takes str"),
        (lambda: _parse_vary("optim.lr=0.1"), "specs takes list or tuple"),
        (lambda: _budget(epochs=True), "the budget's epochs takes a number"),
        (lambda: _budget(epochs="3"), "the budget's epochs takes a number"),
        (lambda: write_report(["x"], "out", title=1), "title takes str or None"),
    ],
)
def test_bad_python_api_argument_types_are_a_type_error_naming_what_is_expected(
    tmp_path, monkeypatch, call, message
):
    """A lone override string was read letter by letter ("override 'r' is not of the form
    key=value"), a recipe name given to train was an AttributeError from deep inside."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=message):
        call()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{run}", "--out", "{locked}/report"],
        ["report", "{locked}/run", "--out", "{tmp}/report"],
        ["results", "--out", "{locked}/exp"],
        ["report", "--profile", "{locked}/profile.json", "--out", "{tmp}/report2"],
    ],
    ids=["report-out", "report-source", "results-out", "report-profile"],
)
def test_a_path_the_user_may_not_enter_is_one_line(tmp_path, args):
    """Fourth hostile round: PermissionError tracebacks (exit 1) in report, results and the
    profile reader for a folder of mode 000, where `train --out` said it in one line."""
    import subprocess
    import sys

    folder = run_folder(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "run").mkdir()
    locked.chmod(0)
    try:
        words = [a.format(run=folder, locked=locked, tmp=tmp_path) for a in args]
        prefix = as_a_user_without_root_rights()
        done = subprocess.run(
            [*prefix, sys.executable, "-m", "tricklab", *words], capture_output=True, text=True
        )
    finally:
        locked.chmod(0o755)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "ermission denied" in lines[0]
    assert not (tmp_path / "report").exists() and not (tmp_path / "report2").exists()


def test_load_recipe_takes_none_for_no_overrides():
    assert load_recipe("speedrun94", None) == load_recipe("speedrun94")


@pytest.mark.parametrize("name", ["a/b", "a\nb", "..", " a", "x" * 256])
def test_a_python_plan_takes_the_study_names_the_cli_takes(tmp_path, monkeypatch, name):
    """Fifth hostile round: `AblationPlan(study="a/b")` stored runs/experiments/a/b/study.db,
    which `tricklab results` does not list; the CLI refused it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TrickLabError, match="study.*(one folder's name|longer than file systems)"):
        AblationPlan(load_recipe(None), {"optim.lr": [0.1]}, study=name)
    assert list(tmp_path.iterdir()) == []


def test_a_path_given_as_a_plan_storage_is_taken_as_its_text():
    plan = AblationPlan(load_recipe(None), {"optim.lr": [0.1]}, storage=Path("x.journal"))
    assert plan.storage == "x.journal"


@pytest.mark.parametrize("target", [-1.0, 0.0, 500.0, math.nan])
def test_results_from_python_refuse_the_targets_the_cli_refuses(target):
    """Fifth hostile round: `results(target=-1.0)` said every run reached -100 %."""
    with pytest.raises(TrickLabError, match="must be a fraction in \\(0, 1\\] or a percentage"):
        tricklab.experiments.results("any", target=target)


def test_a_recipe_field_set_by_hand_is_checked_before_the_run_writes_anything(tmp_path):
    """Fifth hostile round: `recipe.model.widths = "abc"` ran, failed, and left its folder."""
    recipe = load_recipe(None, TINY_SYNTHETIC)
    recipe.model.widths = "abc"
    with pytest.raises(TrickLabError, match="recipe: model.widths='abc' is not valid"):
        tricklab.train(recipe, out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_recipe_path_holding_a_nul_character_is_one_line():
    with pytest.raises(TrickLabError, match="a path cannot hold a NUL character"):
        load_recipe("a\x00b.yaml")


def test_a_run_directory_holding_a_nul_character_is_one_line(tmp_path):
    """Seventh hostile round: a bare ValueError ("embedded null byte") from the first os call."""
    with pytest.raises(TrickLabError, match="holds a NUL character"):
        tricklab.train(load_recipe(None, TINY_SYNTHETIC), out_dir=f"{tmp_path}/\0x")
    assert list(tmp_path.iterdir()) == []


def test_a_storage_url_ending_in_a_newline_shows_it(tmp_path):
    """Seventh hostile round: "no study database at .../study.db" hid the newline, naming what
    looked like the file that was there."""
    (tmp_path / "study.db").touch()
    with pytest.raises(TrickLabError, match=r"no study database at .*study\.db\\n;"):
        tricklab.experiments.results("x", storage=f"sqlite:///{tmp_path}/study.db\n")
