"""The thirteenth hostile round (tricklab as a library in a notebook): each case is one clear
error before anything is written, or no longer happens."""

import contextlib
import json
import threading

import numpy as np
import pytest
from tiny_recipe import TINY_SYNTHETIC
from torch import nn

import tricklab
from tricklab import models
from tricklab.core.errors import TrickLabError
from tricklab.core.stopping import StopRequest
from tricklab.experiments import AblationPlan, SweepPlan, ablate, results, sweep
from tricklab.experiments.busy import results_busy
from tricklab.experiments.space import load_space, parse_space
from tricklab.experiments.speedrun import SpeedrunPlan
from tricklab.recipe.schema import load_recipe
from tricklab.training.api import RunInterrupted, train

TINY = [*TINY_SYNTHETIC, "run.epochs=1", "tricks.precision=32-true"]
OWN = [item for item in TINY if not item.startswith("model.")]  # an own model's size is its own


class Small(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.conv, self.head = nn.Conv2d(3, 8, 3), nn.Linear(8, num_classes)

    def forward(self, x):
        return self.head(self.conv(x).mean((2, 3)))


class ThreeScores(Small):
    def forward(self, x):
        return super().forward(x)[:, :3]


class Lazy(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.head = nn.LazyLinear(num_classes)

    def forward(self, x):
        return self.head(x.flatten(1))


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(models, "MODELS", dict(models.MODELS))


def test_a_registered_model_is_checked_as_a_module_factory_one_before_anything_is_written(
    registry, tmp_path
):
    """register_model's models skipped the own-model checks: the run was recorded `failed` with
    'IndexError: Target 5 is out of bounds', and an ablation ran every unit to `failed`."""
    tricklab.register_model("three-scores", lambda num_classes: ThreeScores(num_classes))
    recipe = load_recipe(None, [*OWN, "model.name=three-scores"])
    with pytest.raises(TrickLabError, match=r"its forward gives \(2, 3\) for a batch of 2"):
        train(recipe, out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(TrickLabError, match="must give a tensor of shape"):
        ablate(AblationPlan(recipe, {"optim.lr": [0.01]}, seeds=2, out_dir=tmp_path / "abl"))
    assert not (tmp_path / "abl").exists()  # refused before a study was stored


def test_a_registered_model_with_lazy_modules_is_sized_by_its_first_forward(registry):
    tricklab.register_model("lazy-head", lambda num_classes: Lazy(num_classes))
    result = train(load_recipe(None, [*OWN, "model.name=lazy-head"]))
    assert result.status == "complete"
    assert result.params == 3 * 16 * 16 * 10 + 10


def test_on_epoch_gets_a_copy_the_run_record_stays_its_own(tmp_path):
    """Mutating the row made result.json and the API say 0.99 while metrics.jsonl said 0.1;
    clearing it raised an internal KeyError and lost the run's folder."""

    def mutate(row):
        row["val_acc"], row["train_seconds"] = 0.99, 1000.0

    result = train(
        load_recipe(None, [*TINY, "run.epochs=2"]), out_dir=tmp_path / "a", on_epoch=mutate
    )
    metrics = [
        json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [row["val_acc"] for row in result.epochs] == [row["val_acc"] for row in metrics]
    assert 0.99 not in [row["val_acc"] for row in metrics]
    stored = json.loads((tmp_path / "a" / "result.json").read_text())
    assert stored["val_acc"] == result.val_acc == metrics[-1]["val_acc"]
    cleared = train(
        load_recipe(None, TINY), out_dir=tmp_path / "b", on_epoch=lambda row: row.clear()
    )
    assert cleared.status == "complete" and cleared.epochs[0]["train_seconds"] > 0


@contextlib.contextmanager
def training_in_another_thread():
    """A run held in its first epoch's end in another thread while the block runs."""
    inside, release = threading.Event(), threading.Event()

    def hold(row):
        inside.set()
        release.wait(60)

    first = threading.Thread(target=lambda: train(load_recipe(None, TINY), on_epoch=hold))
    first.start()
    try:
        assert inside.wait(120)
        yield
    finally:
        release.set()
        first.join()


def test_a_second_train_in_another_thread_is_refused_not_mixed_into_the_first(tmp_path):
    """Two threads' runs shared torch's global random state: both finished with numbers neither
    run would give alone, and nothing said so."""
    with (
        training_in_another_thread(),
        pytest.raises(TrickLabError, match="another thread") as error,
    ):
        train(load_recipe(None, TINY), out_dir=tmp_path / "second")
    assert "not be reproducible" in str(error.value) and not (tmp_path / "second").exists()
    assert train(load_recipe(None, TINY)).status == "complete"  # free again once it ended


def test_an_unknown_pruner_is_refused_before_a_storage_is_made(tmp_path):
    plan = SweepPlan(
        load_recipe(None, TINY), parse_space({"optim.lr": [0.2, 0.4]}), trials=1,
        pruner="hyperband", out_dir=tmp_path / "sw",
    )  # fmt: skip
    with pytest.raises(TrickLabError, match="unknown pruner 'hyperband'"):
        sweep(plan)
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"runs": "2"}, "runs takes a whole number"),
        ({"runs": 1.5}, "runs takes a whole number"),
        ({"runs": True}, "runs takes a whole number"),
        ({"peak_tflops": "x"}, "peak_tflops takes a number"),
        ({"warmup_epochs": "1"}, "warmup_epochs takes a number"),
        ({"out_dir": 5}, "out_dir is a folder path"),
        ({"recipe_name": None}, "recipe_name takes str"),
    ],
)
def test_a_speedrun_plan_names_its_wrong_argument(kwargs, message):
    with pytest.raises(TypeError, match=message):
        SpeedrunPlan(load_recipe(None, TINY), **kwargs)
    with pytest.raises(TypeError, match="recipe takes Recipe, got NoneType"):
        SpeedrunPlan(None)


@pytest.mark.parametrize("name", ["", "  "])
def test_a_speedrun_plan_with_an_empty_recipe_name_is_refused(name):
    """recipe_name="" was accepted and the summary named no recipe."""
    with pytest.raises(TrickLabError, match="recipe_name is empty"):
        SpeedrunPlan(load_recipe(None, TINY), recipe_name=name)


def test_a_speedrun_plan_takes_numpy_numbers_and_a_percentage_target():
    plan = SpeedrunPlan(load_recipe(None, TINY), runs=np.int64(3), target_accuracy=94)
    assert (plan.runs, plan.target_accuracy) == (3, 0.94) and type(plan.runs) is int


def test_numpy_numbers_are_numbers_in_recipes_plans_and_spaces(tmp_path):
    """`list(np.linspace(0.1, 0.2, 2))` was refused as "optim.lr='np.float64(0.1)' is not valid;
    expected a finite number", seeds=np.int64(2) with a TypeError."""
    recipe = load_recipe(None, TINY)
    data = recipe.to_dict()
    data["optim"]["lr"], data["loader"]["batch_size"] = np.float32(0.5), np.int64(32)
    typed = type(recipe).from_dict(data)
    assert (typed.optim.lr, typed.loader.batch_size) == (0.5, 32)
    assert type(typed.loader.batch_size) is int and type(typed.optim.lr) is float
    plan = AblationPlan(recipe, {"optim.lr": list(np.linspace(0.1, 0.2, 2))}, seeds=np.int64(1))
    assert plan.seeds == 1 and type(plan.seeds) is int
    summary = ablate(
        AblationPlan(recipe, {"optim.lr": [np.float64(0.25)]}, seeds=np.int64(1), out_dir=tmp_path)
    )
    assert summary.ran == 2
    table = results(summary.study, summary.storage)
    assert [row.config_id for row in table] == ["baseline", "optim.lr=0.25"]
    space = parse_space({"optim.lr": [np.float64(0.3)]})
    assert space.check(recipe)[0].optim.lr == 0.3


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda r: r.get(1), TypeError, "Recipe.get's key takes str, got int"),
        (lambda r: r.override(None), TypeError, "overrides are a list of 'key=value' strings"),
        (lambda r: r.to_yaml("/"), TrickLabError, "cannot write the recipe to /: it is a folder"),
        (lambda r: r.to_yaml(""), TrickLabError, "the path is empty; name a file"),
        (lambda r: r.to_yaml("/no/such/x.yaml"), TrickLabError, "No such file or directory"),
        (lambda r: load_space(5), TypeError, "search space file's path takes str or PathLike"),
    ],
)
def test_recipe_methods_name_a_wrong_argument(call, error, message):
    with pytest.raises(error, match=message):
        call(load_recipe(None, TINY))


def test_a_section_set_to_none_by_hand_is_refused_not_filled_with_defaults():
    recipe = load_recipe("speedrun94", TINY)
    recipe.optim = None
    with pytest.raises(TypeError, match="Recipe.optim takes OptimConfig, got NoneType"):
        train(recipe)


def test_readers_take_a_path_storage_as_plans_do(tmp_path):
    from tricklab.experiments import study_runs
    from tricklab.report import write_report

    storage = tmp_path / "s.db"
    summary = ablate(
        AblationPlan(load_recipe(None, TINY), {"optim.lr": [0.3]}, 1, storage=storage, study="p")
    )
    assert summary.ran == 2
    assert len(results("p", storage)) == 2 and len(study_runs("p", storage)[1]) == 2
    write_report(["p"], tmp_path / "report", storage=storage)
    assert (tmp_path / "report" / "report.md").exists()


def test_peak_memory_says_what_it_measured():
    result = train(load_recipe(None, TINY))
    assert result.peak_memory["peak_memory_kind"].startswith("process peak RSS (lifetime")
    assert result.peak_memory["peak_memory_bytes"] == result.peak_memory_bytes > 0


def test_a_stop_requested_before_the_run_stops_it_before_its_first_epoch(tmp_path):
    """A StopRequest used again trained a whole epoch and wrote a metrics row before stopping."""
    stop = StopRequest()
    stop.request()
    with pytest.raises(RunInterrupted) as stopped:
        train(load_recipe(None, TINY), out_dir=tmp_path / "run", stop=stop)
    assert stopped.value.result.epochs == [] and stopped.value.result.status == "interrupted"


def test_an_on_epoch_error_is_recorded_as_the_callers(tmp_path):
    """TrialPruned raised by the caller's on_epoch was recorded 'TrialPruned: ' (empty)."""
    import optuna

    def prune(row):
        raise optuna.TrialPruned()

    with pytest.raises(optuna.TrialPruned):
        train(load_recipe(None, TINY), out_dir=tmp_path, on_epoch=prune)
    stored = json.loads((tmp_path / "result.json").read_text())
    assert (
        stored["status"] == "failed"
        and stored["error"] == "stopped by on_epoch raising TrialPruned"
    )


def test_a_dataset_shows_its_shapes_not_its_pixels():
    shown = repr(tricklab.load_dataset("synthetic"))
    assert "\n" not in shown and len(shown) < 300
    assert "train=Split(images=uint8 (5000, 3, 32, 32), labels=int64 (5000,))" in shown


def test_a_study_whose_runs_all_failed_is_not_called_busy():
    """'timings taken on a busy machine' was said of a study with no timing at all."""
    loaded = {"provenance": {"load_average_start": [50.0, 9.0, 9.0], "cpu_count": 2}}
    failed = {"status": "failed", "train_seconds": None, "config_id": "baseline", **loaded}
    assert not results_busy([failed], []).busy
    assert results_busy([{**failed, "status": "complete", "train_seconds": 3.0}], []).busy


# ---------------------------------------------------------------- the newcomer's round (CLI)


def test_a_read_only_storage_folder_is_one_line_for_sqlite_and_journal(tmp_path):
    """`--storage sqlite:///ro/x.db` on a read-only mount was a 137-line traceback, exit 1."""
    import subprocess
    import sys

    folder = tmp_path / "ro"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                             capture_output=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here")
    try:
        for storage in (f"sqlite:///{folder}/x.db", f"journal:{folder}/x.journal"):
            done = subprocess.run(
                [sys.executable, "-m", "tricklab", "ablate", "--baseline", "speedrun94", *TINY,
                 "--vary", "aug.flip=none", "--seeds", "1", "--storage", storage],
                capture_output=True, text=True,
            )  # fmt: skip
            assert done.returncode == 2 and done.stderr.count("\n") == 1
            assert done.stderr.startswith("error: cannot open")
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_the_report_says_the_shipped_sample_is_a_jpeg_copy_not_cifar10(tmp_path):
    from tricklab.report import write_report

    recipe = load_recipe(None, [*TINY, "data.name=cifar10-sample", "data.train_size=100",
                                "data.test_size=50"])  # fmt: skip
    train(recipe, out_dir=tmp_path / "run")
    write_report([tmp_path / "run"], tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "cifar10-sample (100 train / 50 test images, data.seed 0); real CIFAR-10" in text
    assert "JPEG q75 copy" in text and "not CIFAR-10 results" in text
    # the throughput bars are geometric means, and the caption says so
    assert "throughput the geometric mean (as the speed-ups)" in text


def test_tables_and_run_lines_say_the_accuracy_is_the_tta_one(tmp_path):
    from tricklab.report.tables import VERDICT_NOTE

    assert (
        "acc: with test-time augmentation where the configuration's recipe has it" in VERDICT_NOTE
    )
    events = []
    ablate(AblationPlan(load_recipe(None, TINY), {"tricks.tta": ["flip"]}, 1, out_dir=tmp_path),
           on_run_end=events.append)  # fmt: skip
    tta = {event.config_id: event.tta for event in events}
    assert tta == {"baseline": False, "tricks.tta=flip": True}


# ---------------------------------------------------------------- the verification round


def test_numpy_values_in_a_space_an_array_for_vary_and_a_numpy_bool():
    space = parse_space(
        {
            "loader.batch_size": [np.int64(25), np.int64(50)],
            "optim.lr": {"low": np.float64(0.01), "high": np.float32(0.5), "log": np.bool_(True)},
        }
    )
    assert space.distributions["loader.batch_size"].choices == (25, 50)
    assert space.distributions["optim.lr"].log is True
    recipe = load_recipe(None, TINY)
    assert AblationPlan(recipe, {"optim.lr": np.array([0.2, 0.3])}).vary == {"optim.lr": (0.2, 0.3)}
    data = recipe.to_dict()
    data["tricks"]["channels_last"] = np.True_
    assert type(recipe).from_dict(data).tricks.channels_last is True


def test_a_study_or_a_nested_run_while_a_run_trains_is_refused_before_anything_is_stored(tmp_path):
    """ablate() beside a training thread stored a study whose every run failed; a train() from
    inside on_epoch was said to come from another thread."""
    plan = AblationPlan(load_recipe(None, TINY), {"optim.lr": [0.2]}, 1, out_dir=tmp_path / "a")
    with training_in_another_thread(), pytest.raises(TrickLabError, match="in another thread"):
        ablate(plan)
    assert not (tmp_path / "a").exists()
    seen = []

    def nested(row):
        with pytest.raises(TrickLabError, match="comes from inside it") as refused:
            train(load_recipe(None, TINY))
        seen.append(str(refused.value))

    assert train(load_recipe(None, TINY), on_epoch=nested).status == "complete" and seen


@pytest.mark.parametrize("text", ["# just a comment\n", "---\n", "null\n"])
def test_a_recipe_file_whose_yaml_holds_nothing_is_empty(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(TrickLabError, match="is empty; write its YAML in it"):
        load_recipe(str(path))


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (
            ["ablate", "--baseline", "speedrun94", "--vary", "optim.lr=0.2", "--sto", "x"],
            "--storage",
        ),
        (["ablate", "--baseline", "speedrun94", "--vary", "optim.lr=0.2", "--dry"], "--dry-run"),
        (["speedrun", "--warm", "0"], "--warmup-epochs"),
    ],
)
def test_an_abbreviated_flag_is_answered_with_the_flag_it_begins(argv, hint, capsys):
    from tricklab.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"did you mean {hint}?" in err and err.count("\n") == 1


def test_a_journal_in_a_read_only_folder_is_one_line_for_a_writer(tmp_path, monkeypatch):
    """An existing journal on a folder made read-only: a writer's lock file failed (43 lines)."""
    import os

    from tricklab.experiments.storage import open_storage

    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(TrickLabError, match="its folder is read-only"):
        open_storage(f"journal:{tmp_path}/x.journal")


def test_models_and_profile_model_check_a_users_model_as_a_run_does(registry, capsys):
    """`tricklab models` listed a wrong-shaped model (rc 0) and gave a traceback for a lazy one;
    `profile model` timed the wrong one; a class without a docstring showed nn.Module's."""
    from tricklab.cli.main import main

    tricklab.register_model("three-scores", ThreeScores)
    tricklab.register_model("lazy-head", Lazy)
    for argv in (["models", "three-scores"], ["profile", "model", "three-scores",
                                                 "--batch-sizes", "2", "--repeats", "1"]):  # fmt: skip
        assert main(argv) == 2
        assert "its forward gives (2, 3)" in capsys.readouterr().err
    assert main(["models", "lazy-head", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["params"] == 3 * 32 * 32 * 10 + 10 and row["doc"] == "Lazy"


@pytest.mark.parametrize(
    ("value", "hint"), [("94", r"\(94 % is 0\.94\)"), ("1.5", r"\(1\.5 % is 0\.015\)")]
)
def test_a_target_accuracy_given_as_a_percentage_says_the_fraction(value, hint):
    """--target takes 94 or 0.94; run.target_accuracy takes fractions only, and said so without
    saying which fraction was meant."""
    with pytest.raises(TrickLabError, match=r"must be a fraction in \(0, 1\] " + hint):
        load_recipe(None, [*TINY, f"run.target_accuracy={value}"])
    with pytest.raises(TrickLabError) as raised:
        load_recipe(None, [*TINY, "run.target_accuracy=150"])
    assert "%" not in str(raised.value)
