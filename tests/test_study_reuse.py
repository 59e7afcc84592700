"""What a study's runs share in one process, so that its wall time is mostly its runs' (issue 32
goal 4): the loaded dataset, a registered model's MAC count, and an eager run's warm-up; and that
sharing them changes no run's result."""

import types

import pytest
import torch
from tiny_recipe import TINY_SYNTHETIC

from tricklab.experiments.liveness import Liveness
from tricklab.experiments.plan import AblationPlan
from tricklab.experiments.runner import ablate
from tricklab.recipe.schema import load_recipe
from tricklab.training import api, setup, warmup
from tricklab.training.api import train

CPU = torch.device("cpu")
FAST = Liveness(poll_seconds=0.05)


def tiny(*overrides):
    return load_recipe(None, [*TINY_SYNTHETIC, "run.epochs=1", *overrides])


# ---------------------------------------------------------------- the dataset
def test_inside_sharing_data_an_equal_data_section_gets_the_dataset_loaded_before():
    with setup.sharing_data():
        first = setup.load_data(tiny())
        assert setup.load_data(tiny("run.seed=3", "optim.lr=0.1")) is first  # data unchanged
        other = setup.load_data(tiny("data.train_size=128"))
        assert other is not first and len(other.train.images) == 128
        again = setup.load_data(tiny())  # one copy kept: the last one
        assert again is not first and torch.equal(again.train.images, first.train.images)
    assert setup.load_data(tiny()) is not setup.load_data(tiny())  # outside: loaded each time


def test_an_ablation_reads_each_data_section_and_its_statistics_once_for_all_its_runs(
    tmp_path, monkeypatch
):
    calls, stats = [], []
    load, channel_stats = setup.load_dataset, setup.channel_stats
    monkeypatch.setattr(setup, "load_dataset", lambda *a, **k: calls.append(a) or load(*a, **k))
    monkeypatch.setattr(setup, "channel_stats", lambda x: stats.append(x) or channel_stats(x))
    plan = AblationPlan(tiny(), {"optim.lr": ["0.05"]}, 2, out_dir=tmp_path)
    summary = ablate(plan, liveness=FAST)
    assert summary.status_counts == {"complete": 4}
    assert len(calls) == 2  # check_setup's, then one for the four runs (was: one per run)
    assert len(stats) == 2


def test_shared_statistics_are_those_of_the_shared_dataset():
    with setup.sharing_data():
        dataset = setup.load_data(tiny())
        first = setup.train_stats(dataset)
        assert setup.train_stats(dataset) is first
        assert first == setup.channel_stats(dataset.train.images)
        other = setup.load_data(tiny("data.seed=3"))
        assert setup.train_stats(other) == setup.channel_stats(other.train.images) != first
        assert setup.train_stats(dataset) is not first  # no longer the shared one: computed


# ---------------------------------------------------------------- the MAC count
def test_a_registered_models_macs_are_counted_once_and_a_users_model_every_time(monkeypatch):
    counted = []
    count = setup.count_forward_macs
    monkeypatch.setattr(
        setup,
        "count_forward_macs",
        lambda model, shape: counted.append(shape) or count(model, shape),
    )
    monkeypatch.setattr(setup, "_MACS", {})
    dataset = setup.load_data(tiny())
    recipe = tiny()
    results = [setup.prepare(tiny(f"run.seed={k}"), dataset, CPU)[1] for k in range(2)]
    assert len(counted) == 1 and results[0]["forward_macs"] == results[1]["forward_macs"] > 0
    wider = setup.prepare(tiny("model.widths=[8,16,32]"), dataset, CPU)[1]
    assert len(counted) == 2 and wider["forward_macs"] > results[0]["forward_macs"]
    model = setup.build_model("airbench", num_classes=10, widths=[8, 16, 16])
    for _ in range(2):
        setup._forward_macs(model, recipe.model, 10, (1, 3, 16, 16), True)  # own: each time
    assert len(counted) == 4


# ---------------------------------------------------------------- the warm-up
@pytest.fixture
def warm_ups(monkeypatch):
    """warmup.warm_up replaced by a counter taking 1 s."""
    calls = []
    monkeypatch.setattr(warmup, "warm_up", lambda parts, tta="none": calls.append(tta) or 1.0)
    return calls


def test_an_eager_recipe_warms_up_once_per_process_whatever_its_seed(warm_ups):
    parts = types.SimpleNamespace(device=CPU)
    assert warmup.warm_up_run(parts, tiny()) == 1.0
    assert warmup.warm_up_run(parts, tiny("run.seed=4")) == 0.0  # seeds share kernels and shapes
    assert warmup.warm_up_run(parts, tiny("tricks.label_smoothing=0.1")) == 1.0  # another recipe
    assert warmup.warm_up_run(parts, tiny("data.seed=1")) == 1.0
    assert warmup.warm_up_run(types.SimpleNamespace(device=torch.device("cuda", 1)), tiny()) == 1.0
    assert len(warm_ups) == 4


def test_a_compiled_recipe_warms_up_every_run(warm_ups):
    parts = types.SimpleNamespace(device=CPU)
    for seed in (0, 0, 1):
        assert warmup.warm_up_run(parts, tiny("tricks.compile=default", f"run.seed={seed}")) == 1.0
    assert len(warm_ups) == 3


def test_a_failed_warm_up_is_not_remembered(monkeypatch):
    def broken(parts, tta="none"):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(warmup, "warm_up", broken)
    with pytest.raises(RuntimeError):
        warmup.warm_up_run(types.SimpleNamespace(device=CPU), tiny())
    assert not warmup._WARMED


def test_a_run_without_its_warm_up_trains_exactly_as_the_warmed_one(monkeypatch):
    # As on CUDA: every run warms up, unless an equal recipe was warmed in this process.
    monkeypatch.setattr(api, "needs_warm_up", lambda tricks, device: True)
    first, second = train(tiny()), train(tiny())
    assert first.compile_seconds > 0 and second.compile_seconds == 0.0
    assert first.status == second.status == "complete"
    assert [row["train_loss"] for row in first.epochs] == [
        row["train_loss"] for row in second.epochs
    ]
    assert (first.val_acc, first.val_loss) == (second.val_acc, second.val_loss)
