"""The harness, part 3: a stop (Ctrl-C, SIGTERM) wherever it lands, a storage write included.
The property: what the worker prints about the storage is what the storage holds."""

import optuna
import pytest
from optuna.trial import TrialState

from tricklab.core.stopping import Interrupted
from tricklab.experiments.claims import TrialNotMarked, claimed
from tricklab.experiments.storage import open_storage


class FailingWrites:
    """A storage whose next `failures` writes raise, as one whose session a stop broke."""

    def __init__(self, storage, failures):
        self._storage, self.failures = storage, failures

    def __getattr__(self, name):
        attr = getattr(self._storage, name)
        if not name.startswith("set_"):
            return attr

        def write(*args, **kwargs):
            if self.failures > 0:
                self.failures -= 1
                raise optuna.exceptions.StorageInternalError("the session is broken")
            return attr(*args, **kwargs)

        return write


@pytest.fixture
def running(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(storage=storage, study_name="s")
    return storage, study.ask()._trial_id


def test_a_stop_whose_first_marks_fail_still_leaves_the_trial_marked_interrupted(running):
    storage, trial_id = running
    with pytest.raises(Interrupted) as raised, claimed(FailingWrites(storage, 2), trial_id):
        raise Interrupted("stopped")
    assert not isinstance(raised.value, TrialNotMarked)
    trial = storage.get_trial(trial_id)
    assert trial.state == TrialState.FAIL and trial.user_attrs["status"] == "interrupted"


def test_a_stop_whose_trial_cannot_be_marked_says_so_instead_of_marked(running):
    storage, trial_id = running
    with pytest.raises(TrialNotMarked, match="could not be marked interrupted"):
        with claimed(FailingWrites(storage, 1_000), trial_id):
            raise Interrupted("stopped")
    assert storage.get_trial(trial_id).state == TrialState.RUNNING  # as the line says


def test_a_stop_inside_a_storage_write_leaves_the_trial_marked_interrupted_at_once(running):
    """The stop lands after SQLite took its write lock (just before Optuna commits its write): the mark
    must not wait on the lock the stopped write still holds."""
    import time

    import sqlalchemy.orm

    storage, trial_id = running
    fired = []

    def stop_once(session):
        if not fired:
            fired.append(True)
            raise Interrupted("stopped")

    sqlalchemy.event.listen(sqlalchemy.orm.Session, "before_commit", stop_once)
    try:
        start = time.monotonic()
        with pytest.raises(Interrupted) as raised, claimed(storage, trial_id):
            storage.set_trial_user_attr(trial_id, "x", 1)
        assert fired and time.monotonic() - start < 10
    finally:
        sqlalchemy.event.remove(sqlalchemy.orm.Session, "before_commit", stop_once)
    assert not isinstance(raised.value, TrialNotMarked)
    trial = storage.get_trial(trial_id)
    assert trial.state == TrialState.FAIL and trial.user_attrs["status"] == "interrupted"


TINY = ["data.name=synthetic", "data.train_size=64", "data.test_size=32", "data.image_size=16",
        "model.name=airbench", "model.widths=[4,8,8]", "run.epochs=1", "loader.batch_size=32",
        "run.device=cpu"]  # fmt: skip


@pytest.mark.parametrize("when", ["after the last run", "mid-run"])
def test_what_a_stopped_ablation_says_is_what_its_storage_holds(
    tmp_path, monkeypatch, capsys, when
):
    """Eleventh hostile round: a SIGTERM that landed once the last run was stored printed "the
    running trial is marked interrupted" (nothing ran, nothing was marked). Seventeenth: then
    "rerun the same command to resume" with nothing to resume: the ablation now ends as it would
    have a moment later, its table printed, exit 0."""
    import os
    import signal

    from tricklab.cli.main import main
    from tricklab.experiments import workers

    real_report, real_train = workers.Worker.report, workers.train_one

    def report(self, number, config_id, record, runs_left):
        real_report(self, number, config_id, record, runs_left)
        if runs_left == 0 and when == "after the last run":
            os.kill(os.getpid(), signal.SIGTERM)  # lands in the worker's deferred loop

    def train_one(*args, **kwargs):
        if when == "mid-run" and workers.current_progress() is not None:
            os.kill(os.getpid(), signal.SIGTERM)  # the first run is stopped as it trains
        return real_train(*args, **kwargs)

    monkeypatch.setattr(workers.Worker, "report", report)
    monkeypatch.setattr(workers, "train_one", train_one)
    out = tmp_path / "e"
    args = ["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.05", "--seeds", "1",
            "--budget-epochs", "1", "--study", "s", "--out", str(out)]  # fmt: skip
    assert main(args) == (0 if when == "after the last run" else 130)
    printed = capsys.readouterr()
    err = printed.err.strip().splitlines()
    trials = optuna.load_study(study_name="s", storage=f"sqlite:///{out / 'study.db'}").trials
    statuses = sorted(t.user_attrs.get("status") for t in trials)
    if when == "mid-run":
        assert "interrupted" in statuses
        assert err[-1].startswith("interrupted: the running trial is marked interrupted")
    else:
        assert statuses == ["complete", "complete"]
        assert "interrupted" not in printed.err and "optim.lr=0.05" in printed.out
