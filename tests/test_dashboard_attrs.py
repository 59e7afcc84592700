"""Issue 16 §4: optuna-dashboard shows a tricklab study usefully. Read back with Optuna alone, every
trial carries the varied recipe keys as params (with distributions, so importance and slice views
work, ablations included), its accuracy, train and record seconds as short scalar user attrs, and
the study names its metric `accuracy`. The runner's own records stay where resume reads them."""

import json

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from tiny_recipe import TINY_SYNTHETIC

from tricklab.experiments import AblationPlan, Liveness, SweepPlan, ablate, parse_space, sweep
from tricklab.experiments.storage import open_storage, storage_url
from tricklab.recipe.schema import load_recipe
from tricklab.training.api import RunResult

# a real run of a second or two: synthetic data, widths 8/16/16, one epoch, flip TTA
TINY = [*TINY_SYNTHETIC, "optim.lr=0.2", "run.epochs=1", "tricks.tta=flip"]
FAST = Liveness(poll_seconds=0.05)
RESUME_DATA = ("runs", "overrides")  # the runner's records (lists): read back by resume and results


def load(summary, out_dir) -> optuna.Study:
    storage = open_storage(storage_url(None, out_dir), must_exist=True)
    return optuna.load_study(study_name=summary.study, storage=storage)


def complete_runs(trial) -> list[dict]:
    return [r for r in trial.user_attrs["runs"] if r["status"] == "complete"]


def assert_short_scalars(trial) -> None:
    """What the dashboard shows of a trial's attrs whole: scalars, a line long at most."""
    for key, value in trial.user_attrs.items():
        if key in RESUME_DATA or key.startswith("run-"):
            continue
        assert value is None or isinstance(value, (bool, int, float, str)), key
        if key != "run_dir":  # the run's folder: a path is as long as it is
            assert len(json.dumps(value)) <= 80, (key, value)


def fake_train(recipe, *, on_epoch=None, out_dir=None, stop=None):
    """A stand-in engine with every time field: accuracy grows with lr and seed."""
    accuracy = 0.5 + 0.1 * recipe.optim.lr + 0.01 * recipe.run.seed
    row = {"epoch": 1, "val_acc": accuracy, "train_seconds": 1.0}
    if on_epoch is not None:
        on_epoch(row)
    return RunResult(
        status="complete", val_acc=accuracy, val_loss=1.0, train_seconds=1.0 + recipe.run.seed,
        whiten_seconds=0.1, final_eval_seconds=0.2, record_seconds=1.3 + recipe.run.seed,
        recipe=recipe.to_dict(), epochs=[row],
    )  # fmt: skip


def test_an_ablation_names_its_metric_and_gives_each_trial_params_and_scalar_attrs(tmp_path):
    baseline = load_recipe(None, TINY)
    vary = {"optim.lr": ["0.1"], "aug.flip": ["random"]}
    summary = ablate(AblationPlan(baseline, vary, 1, out_dir=tmp_path), liveness=FAST)
    assert summary.status_counts == {"complete": 3}
    study = load(summary, tmp_path)
    assert study.metric_names == ["accuracy"]

    params = {t.user_attrs["config_id"]: t.params for t in study.trials}
    assert params == {  # every varied key on every trial, the baseline's value where unchanged
        "baseline": {"optim.lr": 0.2, "aug.flip": "none"},
        "optim.lr=0.1": {"optim.lr": 0.1, "aug.flip": "none"},
        "aug.flip=random": {"optim.lr": 0.2, "aug.flip": "random"},
    }
    for trial in study.trials:
        assert trial.distributions == {
            "optim.lr": CategoricalDistribution([0.2, 0.1]),
            "aug.flip": CategoricalDistribution(["none", "random"]),
        }
        (run,) = complete_runs(trial)
        attrs = trial.user_attrs
        assert attrs["status"] == "complete" and attrs["complete_runs"] == 1
        assert attrs["accuracy"] == trial.value == run["accuracy"] == run["val_acc_tta"]
        assert attrs["train_seconds"] == run["train_seconds"] > 0
        assert attrs["record_seconds"] == run["record_seconds"] > attrs["train_seconds"]
        assert_short_scalars(trial)
    # the dashboard's importance view computes from these params
    assert set(optuna.importance.get_param_importances(study)) == {"optim.lr", "aug.flip"}

    again = ablate(
        AblationPlan(baseline, vary, 1, out_dir=tmp_path), liveness=FAST
    )  # resume still reads its own
    assert again.ran == 0 and again.already_done == 3


def test_an_ablation_of_a_list_field_gives_its_values_as_categorical_strings(tmp_path):
    baseline = load_recipe(None, TINY)
    summary = ablate(
        AblationPlan(
            baseline,
            {"model.widths": ["[4, 8, 8]"], "optim.lr": ["0.1", "0.3"]},
            2,
            grid=True,
            out_dir=tmp_path,
        ),
        train_fn=fake_train,
        liveness=FAST,
    )
    assert summary.planned == 6  # 2 points and the baseline, 2 seeds
    study = load(summary, tmp_path)
    widths = CategoricalDistribution(["[8, 16, 16]", "[4, 8, 8]"])
    for trial in study.trials:
        assert trial.distributions["model.widths"] == widths
        assert trial.distributions["optim.lr"] == CategoricalDistribution([0.2, 0.1, 0.3])
        overrides = trial.user_attrs["overrides"]
        expected = "[4, 8, 8]" if "model.widths=[4, 8, 8]" in overrides else "[8, 16, 16]"
        assert trial.params["model.widths"] == expected
        assert trial.user_attrs["record_seconds"] == 1.3 + trial.user_attrs["seed"]
        assert_short_scalars(trial)


def test_a_sampled_sweep_trial_carries_the_means_of_its_seeds(tmp_path):
    baseline = load_recipe(None, TINY)
    space = parse_space({"optim.lr": [0.2]})  # one point: the second trial takes the first's runs
    summary = sweep(
        SweepPlan(baseline, space, 2, sampler="random", seeds=2, out_dir=tmp_path), liveness=FAST
    )
    assert summary.status_counts == {"complete": 2}
    study = load(summary, tmp_path)
    assert study.metric_names == ["accuracy"]
    first, second = study.trials
    runs = complete_runs(first)
    assert [r["seed"] for r in runs] == [0, 1]
    for trial in (first, second):  # the second trained nothing: the same numbers, reused
        attrs = trial.user_attrs
        assert trial.params == {"optim.lr": 0.2}
        assert attrs["complete_runs"] == 2
        assert attrs["accuracy"] == pytest.approx(trial.value)
        assert attrs["accuracy"] == pytest.approx(sum(r["accuracy"] for r in runs) / 2)
        assert attrs["train_seconds"] == pytest.approx(sum(r["train_seconds"] for r in runs) / 2)
        assert attrs["record_seconds"] == pytest.approx(sum(r["record_seconds"] for r in runs) / 2)
        assert_short_scalars(trial)
    assert all("reused_from_trial" in r for r in second.user_attrs["runs"])


def test_a_grid_sweep_names_its_metric_and_keeps_its_params(tmp_path):
    baseline = load_recipe(None, TINY)
    space = parse_space({"optim.lr": [0.1, 0.2], "optim.name": ["sgd", "adam"]})
    summary = sweep(
        SweepPlan(baseline, space, sampler="grid", seeds=1, out_dir=tmp_path),
        train_fn=fake_train,
        liveness=FAST,
    )
    study = load(summary, tmp_path)
    assert study.metric_names == ["accuracy"]
    assert sorted((t.params["optim.lr"], t.params["optim.name"]) for t in study.trials) == [
        (0.1, "adam"), (0.1, "sgd"), (0.2, "adam"), (0.2, "sgd"),
    ]  # fmt: skip
    for trial in study.trials:
        assert trial.user_attrs["accuracy"] == trial.value
        assert (
            trial.user_attrs["train_seconds"] == 1.0 and trial.user_attrs["record_seconds"] == 1.3
        )
        assert_short_scalars(trial)


def test_a_failed_trial_has_no_accuracy_but_says_why(tmp_path):
    def broken(recipe, **kwargs):
        raise ValueError("a bug in a trick")

    baseline = load_recipe(None, TINY)
    summary = ablate(
        AblationPlan(baseline, {"optim.lr": ["0.1"]}, 1, out_dir=tmp_path),
        train_fn=broken,
        liveness=FAST,
    )
    for trial in load(summary, tmp_path).trials:
        attrs = trial.user_attrs
        assert attrs["status"] == "failed" and attrs["error"] == "ValueError: a bug in a trick"
        assert attrs["accuracy"] is None and attrs["complete_runs"] == 0
        assert "optim.lr" in trial.params
        assert_short_scalars(trial)
