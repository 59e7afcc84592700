"""Issue 22 §1: `record_seconds` is airbench's `total_time_seconds`: the whitening fit on 5,000 train
images + the training epochs + the final evaluation with the recipe's TTA, each measured on its own
(`whiten_seconds`, `train_seconds`, `final_eval_seconds`), none counted twice, and no warm-up in any.

The exact tests run on a fake clock that moves only inside the phases: the whitening fit takes 1 s,
each training step 0.25 s, a TTA evaluation 2 s and a plain one 0.5 s. Every second a field holds is
then one of its own phase's, known exactly; the real-clock test checks the same sums on a real run.
"""

import time

import pytest

from tricklab.experiments.speedrun import WARMUP_SEED, SpeedrunPlan, speedrun
from tricklab.models.airbench import AirbenchNet
from tricklab.recipe.schema import load_recipe
from tricklab.training import api, loop, setup, warmup
from tricklab.training.api import RunResult, train

# speedrun94 in seconds on a CPU: 200 images in 4 steps of 50, one eval batch, fp32.
TINY_SPEEDRUN94 = [
    "data.name=synthetic", "data.train_size=200", "data.test_size=100",
    "model.widths=[8, 16, 16]", "loader.batch_size=50", "loader.eval_batch_size=100",
    "run.epochs=1", "run.device=cpu", "tricks.precision=32-true",
]  # fmt: skip
WHITEN, STEP, TTA_EVAL, PLAIN_EVAL = 1.0, 0.25, 2.0, 0.5


class FakeClock:
    """`time` for the training modules: perf_counter moves only when `advance` says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch):
    """Each phase of a run costs a known number of fake seconds."""
    fake = FakeClock()
    for module in (api, setup, loop, warmup):
        monkeypatch.setattr(module, "time", fake)

    fit, step, tta_logits = AirbenchNet.init_from_data, loop.train_step, loop.tta_logits

    def timed_fit(self, images):
        fake.advance(WHITEN)
        return fit(self, images)

    def timed_step(*args):
        fake.advance(STEP)
        return step(*args)

    def timed_views(forward, images, tta):
        fake.advance(TTA_EVAL if tta != "none" else PLAIN_EVAL)  # one eval batch: once a pass
        return tta_logits(forward, images, tta)

    monkeypatch.setattr(AirbenchNet, "init_from_data", timed_fit)
    monkeypatch.setattr(loop, "train_step", timed_step)
    monkeypatch.setattr(loop, "tta_logits", timed_views)
    return fake


def test_record_seconds_is_the_whitening_fit_plus_the_epochs_plus_the_final_tta_evaluation(clock):
    result = train(load_recipe("speedrun94", TINY_SPEEDRUN94))
    assert result.status == "complete" and result.val_acc_tta is not None
    assert result.whiten_seconds == pytest.approx(WHITEN)
    assert result.train_seconds == pytest.approx(4 * STEP)  # the epoch's plain evaluation: not here
    assert result.final_eval_seconds == pytest.approx(TTA_EVAL)  # not the epoch's plain evaluation
    assert result.record_seconds == pytest.approx(WHITEN + 4 * STEP + TTA_EVAL)
    data = result.to_dict()  # result.json holds each part
    assert data["record_seconds"] == pytest.approx(
        data["whiten_seconds"] + data["train_seconds"] + data["final_eval_seconds"]
    )


def test_the_compile_warm_up_is_in_none_of_the_record_parts(clock, monkeypatch):
    monkeypatch.setattr(api, "needs_warm_up", lambda tricks, device: True)  # as on CUDA
    result = train(load_recipe("speedrun94", TINY_SPEEDRUN94))
    # the warm-up trained, evaluated and ran the TTA: all of it in compile_seconds alone
    assert result.compile_seconds >= 2 * STEP + PLAIN_EVAL + TTA_EVAL
    assert (result.whiten_seconds, result.train_seconds, result.final_eval_seconds) == (
        pytest.approx(WHITEN),
        pytest.approx(4 * STEP),
        pytest.approx(TTA_EVAL),
    )
    assert result.record_seconds == pytest.approx(WHITEN + 4 * STEP + TTA_EVAL)
    assert result.wall_seconds >= result.record_seconds + result.compile_seconds


def test_without_tta_the_final_evaluation_is_the_last_epochs_evaluation(clock):
    # airbench evaluates once more with tta_level=0; here the last epoch's evaluation is that one
    result = train(load_recipe("speedrun94", [*TINY_SPEEDRUN94, "tricks.tta=none"]))
    assert result.val_acc_tta is None
    assert result.final_eval_seconds == pytest.approx(PLAIN_EVAL)
    assert result.record_seconds == pytest.approx(WHITEN + 4 * STEP + PLAIN_EVAL)


def test_only_the_final_evaluation_is_counted_when_every_epoch_evaluates(clock):
    result = train(load_recipe("speedrun94", [*TINY_SPEEDRUN94, "run.epochs=2"]))
    assert len(result.epochs) == 2  # two plain evaluations (eval_every 1) and the final TTA
    assert result.train_seconds == pytest.approx(8 * STEP)
    assert result.record_seconds == pytest.approx(WHITEN + 8 * STEP + TTA_EVAL)


def test_a_model_without_a_whitening_layer_has_no_whitening_time(clock):
    recipe = load_recipe(
        None,
        ["data.name=synthetic", "data.train_size=200", "data.test_size=100",
         "data.image_size=16", "model.width=0.0625", "loader.batch_size=50",
         "loader.eval_batch_size=100", "run.epochs=1", "run.device=cpu", "tricks.tta=flip"],
    )  # fmt: skip
    result = train(recipe)
    assert result.whiten_seconds == 0.0
    assert result.record_seconds == pytest.approx(4 * STEP + TTA_EVAL)


def test_a_diverged_run_has_no_record_time(clock, monkeypatch):
    step = loop.train_step

    def nan_step(*args):
        loss, logits = step(*args)
        return loss * float("nan"), logits

    monkeypatch.setattr(loop, "train_step", nan_step)
    result = train(load_recipe("speedrun94", TINY_SPEEDRUN94))
    assert result.status == "diverged"
    assert result.final_eval_seconds is None and result.record_seconds is None


def test_on_a_real_clock_each_part_is_measured_and_they_add_up():
    result = train(load_recipe("speedrun94", TINY_SPEEDRUN94))
    assert result.whiten_seconds > 0 and result.train_seconds > 0 and result.final_eval_seconds > 0
    parts = result.whiten_seconds + result.train_seconds + result.final_eval_seconds
    assert result.record_seconds == pytest.approx(parts, rel=1e-12)
    assert result.record_seconds < result.wall_seconds  # data decoding, model build: not counted


def _result(seconds: float, seed: int) -> RunResult:
    """A finished run whose whitening, epochs and final evaluation took seconds, 2x, 3x."""
    return RunResult(
        status="complete", val_acc=0.9, val_acc_tta=0.91, train_seconds=2 * seconds,
        whiten_seconds=seconds, final_eval_seconds=3 * seconds, record_seconds=6 * seconds,
        recipe={"run": {"seed": seed}},
    )  # fmt: skip


def test_speedrun_counts_no_second_of_its_warm_up_run(monkeypatch):
    def fake_train(recipe, **kwargs):  # the warm-up run is slow, the counted runs fast
        seed = recipe.run.seed
        return _result(1000.0 if seed == WARMUP_SEED else 1.0 + seed, seed)

    monkeypatch.setattr(api, "train", fake_train)
    summary = speedrun(SpeedrunPlan(load_recipe("speedrun94", TINY_SPEEDRUN94), 3))
    assert summary.warmup.record_seconds == 6000.0  # kept apart, as the warm-up's own record
    assert [r.record_seconds for r in summary.runs] == [6.0, 12.0, 18.0]
    assert [r.whiten_seconds for r in summary.runs] == [1.0, 2.0, 3.0]
    assert [r.final_eval_seconds for r in summary.runs] == [3.0, 6.0, 9.0]
    assert (summary.record_seconds_mean, summary.record_seconds_median) == (12.0, 12.0)
    assert (summary.record_seconds_min, summary.record_seconds_max) == (6.0, 18.0)
    assert (summary.train_seconds_min, summary.train_seconds_max) == (2.0, 6.0)
