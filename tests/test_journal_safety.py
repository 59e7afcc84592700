"""Study storage under damage and races: a journal whose last line was torn, and two sweep
workers whose sampler draws one point.

A torn last line (a worker killed mid-write) is moved to a file beside the journal before the
next append, with a warning, and the study goes on with everything finished intact. Two workers
drawing the same point train each of its seeds once: the second waits for the first's run and
takes it.
"""

import json
import logging
import os
import subprocess
import sys
import threading
import time

import optuna
import pytest
from full_disk import NO_SPACE, FullDisk
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main
from tricklab.experiments.journal import set_torn_line_aside
from tricklab.experiments.storage import open_storage

TINY = [*TINY_SYNTHETIC, "optim.lr=0.2"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def ablate_args(journal, seeds):
    return ["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.1", "--seeds", str(seeds),
            "--budget-epochs", "1", "--study", "torn", "--storage", f"journal:{journal}",
            "--json"]  # fmt: skip


def journal_records(journal):
    data = journal.read_bytes()
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.splitlines()]


def test_a_torn_last_line_is_set_aside_and_the_next_run_completes_with_nothing_lost(
    tmp_path, capsys, caplog
):
    journal = tmp_path / "study.journal"
    assert main(ablate_args(journal, seeds=1)) == 0
    capsys.readouterr()
    before = journal_records(journal)
    last = journal.read_bytes().splitlines(keepends=True)[-1]
    torn = last[: len(last) // 2]  # a record its writer never finished
    with open(journal, "ab") as handle:
        handle.write(torn)

    with caplog.at_level(logging.WARNING, logger="tricklab.experiments.journal"):
        assert main(ablate_args(journal, seeds=2)) == 0  # two more runs appended
    (side,) = tmp_path.glob("study.journal.torn-*")
    assert side.read_bytes() == torn
    assert any(str(side) in r.getMessage() for r in caplog.records)
    after = journal_records(journal)  # every line parses: nothing appended to the torn one
    assert after[: len(before)] == before

    capsys.readouterr()
    assert main(["results", "torn", "--storage", f"journal:{journal}", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["configs"]
    assert len(rows) == 2 and all(row["n"] == 2 for row in rows), rows  # seeds 0 and 1 each


def test_a_journal_whose_only_record_is_torn_opens_and_the_torn_bytes_are_kept(tmp_path):
    journal = tmp_path / "study.journal"
    optuna.create_study(storage=open_storage(f"journal:{journal}"), study_name="s")
    first = journal.read_bytes().splitlines(keepends=True)[0]
    journal.write_bytes(first[:20])
    storage = open_storage(f"journal:{journal}")
    optuna.create_study(storage=storage, study_name="s")  # an append: the torn start goes aside
    (side,) = tmp_path.glob("study.journal.torn-*")
    assert side.read_bytes() == first[:20]
    assert [
        s.study_name for s in optuna.get_all_study_summaries(open_storage(f"journal:{journal}"))
    ] == ["s"]


def test_a_half_line_a_live_writer_holds_the_lock_for_is_not_taken_for_torn(tmp_path):
    journal = tmp_path / "study.journal"
    study = optuna.create_study(storage=open_storage(f"journal:{journal}"), study_name="s")
    study.set_user_attr("a", 1)
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[:-1]))  # the last record, to be written again slowly
    lock = optuna.storages.journal.JournalFileSymlinkLock(str(journal))
    lock.acquire()  # a live writer, mid-line
    with open(journal, "ab") as handle:
        handle.write(lines[-1][:10])
    storage = open_storage(f"journal:{journal}")
    appended = threading.Thread(
        target=lambda: optuna.load_study(study_name="s", storage=storage).set_user_attr("b", 2)
    )
    appended.start()
    time.sleep(0.5)
    assert appended.is_alive()  # waits for the writer's lock
    with open(journal, "ab") as handle:
        handle.write(lines[-1][10:])
    lock.release()
    appended.join(timeout=30)
    assert not appended.is_alive()
    assert not list(tmp_path.glob("*.torn-*"))
    reread = optuna.load_study(study_name="s", storage=open_storage(f"journal:{journal}"))
    assert reread.user_attrs == {"a": 1, "b": 2}


def test_a_journal_that_ends_whole_is_left_as_it_is(tmp_path):
    journal = tmp_path / "study.journal"
    optuna.create_study(storage=open_storage(f"journal:{journal}"), study_name="s")
    before = journal.read_bytes()
    assert set_torn_line_aside(journal) is None
    assert journal.read_bytes() == before and not list(tmp_path.glob("*.torn-*"))


def test_a_file_that_is_no_journal_is_refused_and_left_untouched(tmp_path, capsys):
    path = tmp_path / "notes.journal"
    path.write_bytes(b"my notes\nno newline at the end")
    assert main(ablate_args(path, seeds=1)) == 2
    assert "not an Optuna journal" in capsys.readouterr().err
    assert path.read_bytes() == b"my notes\nno newline at the end"
    assert not list(tmp_path.glob("*.torn-*"))


# ---------------------------------------------------------------- two workers, one point

WORKER = """
import os, sys, time
from pathlib import Path
from tricklab.experiments import Liveness, SweepPlan, parse_space, sweep
from tricklab.training.api import train
from tricklab.recipe.schema import load_recipe

journal, trained, ready = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])

def counting_train(recipe, **kwargs):
    with open(trained, "a") as log:
        log.write(f"{os.getpid()} seed {recipe.run.seed}\\n")
    time.sleep(1.5)  # both workers hold their trial at once, whatever the start-up jitter
    return train(recipe, **kwargs)

(ready / str(os.getpid())).touch()
while len(list(ready.iterdir())) < 2:  # start together
    time.sleep(0.01)
plan = SweepPlan(
    load_recipe(None, sys.argv[4:]), parse_space({"optim.lr": [0.3]}), 2, sampler="random",
    seeds=1, study="one-point", storage=f"journal:{journal}",
)
summary = sweep(plan, train_fn=counting_train, liveness=Liveness(poll_seconds=0.1))
print(summary.ran)
"""


def test_two_sweep_workers_drawing_one_point_train_its_seed_once(tmp_path):
    journal, trained, ready = tmp_path / "s.journal", tmp_path / "trained.log", tmp_path / "ready"
    ready.mkdir()
    cmd = [sys.executable, "-c", WORKER, str(journal), str(trained), str(ready),
           *TINY, "run.epochs=1"]  # fmt: skip
    workers = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        for _ in range(2)
    ]
    ended = [w.communicate(timeout=240) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], [err for _, err in ended]
    assert len(trained.read_text().splitlines()) == 1, trained.read_text()
    study = optuna.load_study(study_name="one-point", storage=open_storage(f"journal:{journal}"))
    trials = study.get_trials()
    assert len(trials) == 2 and all(t.state.name == "COMPLETE" for t in trials)
    runs = [run for t in trials for run in t.user_attrs["runs"]]
    assert sum("reused_from_trial" not in run for run in runs) == 1  # one run, taken twice
    assert len({t.value for t in trials}) == 1


def test_an_append_that_finds_the_disk_full_is_taken_back_and_the_journal_ends_whole(
    tmp_path, monkeypatch
):
    journal = tmp_path / "study.journal"
    study = optuna.create_study(storage=open_storage(f"journal:{journal}"), study_name="s")
    before = journal.read_bytes()
    with monkeypatch.context() as patch:
        FullDisk(patch, "study.journal", budget=10)  # 10 bytes of the record fit, then ENOSPC
        with pytest.raises(OSError):
            study.set_user_attr("lost", 1)
    assert journal.read_bytes() == before and not list(tmp_path.glob("*.torn-*"))
    study.set_user_attr("kept", 2)
    reread = optuna.load_study(study_name="s", storage=open_storage(f"journal:{journal}"))
    assert reread.user_attrs == {"kept": 2}


def test_an_ablation_whose_journal_disk_fills_gives_one_line_and_a_whole_journal(
    tmp_path, monkeypatch, capsys
):
    journal = tmp_path / "study.journal"
    with monkeypatch.context() as patch:
        FullDisk(patch, "study.journal", budget=4000)  # the study and a trial or so fit
        assert main(ablate_args(journal, seeds=2)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"error: cannot write {journal}: {NO_SPACE}")
    assert journal_records(journal)  # every line whole
    assert not list(tmp_path.glob("*.torn-*"))
