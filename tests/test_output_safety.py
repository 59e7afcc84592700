"""Run folders: claimed by one run at a time, and a full disk loses the run, never the folder.

Two `tricklab train --out D` started together: one trains, the other exits 2 before writing
anything. A full disk (a small tmpfs where the test may mount one, and writes made to fail with
ENOSPC everywhere) gives one line naming the disk and the path, exit 2, and leaves no file of the
run behind, so the same command runs once space is freed.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from full_disk import NO_SPACE, FullDisk
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.core.paths import append_line, atomic_write, claim_folder
from tricklab.recipe.schema import load_recipe
from tricklab.training.api import RUN_FILES, train

TINY = [*TINY_SYNTHETIC, "run.epochs=2"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def run_files(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ---------------------------------------------------------------- one folder, one run


def test_only_one_of_several_threads_claiming_a_folder_at_once_gets_it(tmp_path):
    for _ in range(40):
        barrier, got = threading.Barrier(4), []

        def attempt(barrier=barrier, got=got):
            barrier.wait()
            got.append(claim_folder(tmp_path))

        threads = [threading.Thread(target=attempt) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [claim for claim in got if claim is not None]
        assert len(winners) == 1
        winners[0].release()
    assert run_files(tmp_path) == []  # a released claim leaves nothing


def test_a_folder_whose_claiming_process_was_killed_can_be_claimed_again(tmp_path):
    code = (
        "import sys, time; from pathlib import Path; from tricklab.core.paths import claim_folder;"
        "claim = claim_folder(Path(sys.argv[1])); print(claim is not None, flush=True);"
        "time.sleep(60)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "True"
        assert claim_folder(tmp_path) is None  # alive: the folder is its
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    claim = claim_folder(tmp_path)  # its lock died with it
    assert claim is not None
    claim.release()


def test_a_folder_on_a_file_system_without_locks_is_claimed_with_a_warning(
    tmp_path, monkeypatch, caplog
):
    fcntl = pytest.importorskip("fcntl")

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    claim = claim_folder(tmp_path)
    assert claim is not None and "not kept apart" in caplog.text
    claim.release()
    assert run_files(tmp_path) == []


def test_two_threads_training_into_one_folder_at_once_one_trains_the_other_is_refused(tmp_path):
    out = tmp_path / "run"
    recipe = load_recipe(None, TINY)
    barrier, results, errors = threading.Barrier(2), [], []

    def run():
        barrier.wait()
        try:
            results.append(train(recipe, out_dir=out))
        except TrickLabError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 1 and len(errors) == 1, errors
    assert any(
        words in errors[0] for words in ("another run", "already holds a run", "another thread")
    )
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(epochs) == 2  # one run's epochs, not two runs' interleaved
    assert json.loads((out / "result.json").read_text())["epochs"] == epochs


def test_two_train_commands_into_one_folder_at_once_one_wins_the_other_exits_2(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "tricklab", "train", *TINY, "--out", str(out), "--json"]
    workers = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        for _ in range(2)
    ]
    ended = [(w, *w.communicate(timeout=180)) for w in workers]
    assert sorted(w.returncode for w, _, _ in ended) == [0, 2], [e for _, _, e in ended]
    (_, out_text, _), (_, lost_out, lost_err) = sorted(ended, key=lambda e: e[0].returncode)
    line = one_line(lost_err)
    assert "another run" in line or "already holds a run" in line
    assert lost_out == ""
    result = json.loads(out_text.strip().splitlines()[-1])
    assert json.loads((out / "result.json").read_text()) == result
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert epochs == result["epochs"] and len(epochs) == 2
    assert run_files(out) == ["metrics.jsonl", "recipe.yaml", "result.json"]


# ---------------------------------------------------------------- a real full disk (tmpfs)


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs of its own; skipped where mounting one is not allowed."""
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        made = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        made = None
    if made is None or made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and a kernel that allows it)")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)


def fill(disk):
    """Write a filler file until the disk is full."""
    with open(disk / "filler", "ab", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_a_full_disk_when_the_run_starts_gives_one_line_and_leaves_nothing(small_disk, capsys):
    out = small_disk / "run"
    fill(small_disk)
    assert main(["train", *TINY, "--out", str(out), "--json"]) == 2
    line = one_line(capsys.readouterr().err)
    assert NO_SPACE in line and str(small_disk) in line
    assert run_files(out) == []  # no empty recipe.yaml that refuses the rerun
    (small_disk / "filler").unlink()
    assert main(["train", *TINY, "--out", str(out), "--json"]) == 0
    assert json.loads((out / "result.json").read_text())["status"] == "complete"


def test_a_full_disk_without_out_gives_one_line_and_leaves_no_runs_folder(
    small_disk, monkeypatch, capsys
):
    monkeypatch.chdir(small_disk)
    fill(small_disk)
    assert main(["train", *TINY, "--json"]) == 2
    line = one_line(capsys.readouterr().err)
    assert NO_SPACE in line and str(small_disk) in line
    assert run_files(small_disk) == ["filler"]


def test_a_full_disk_when_result_json_is_written_gives_one_line_and_leaves_nothing(
    small_disk,
):
    out = small_disk / "run"
    recipe = load_recipe(None, TINY)

    def fill_at_the_last_epoch(row):
        if row["epoch"] == 2:
            fill(small_disk)

    with pytest.raises(TrickLabError) as raised:
        train(recipe, out_dir=out, on_epoch=fill_at_the_last_epoch)
    message = str(raised.value)
    assert NO_SPACE in message and str(small_disk) in message and "result.json" in message
    assert "\n" not in message
    assert run_files(out) == []
    (small_disk / "filler").unlink()
    assert train(recipe, out_dir=out).status == "complete"
    assert json.loads((out / "result.json").read_text())["status"] == "complete"


def test_a_line_appended_to_a_full_disk_is_written_whole_or_not_at_all(small_disk):
    path = small_disk / "metrics.jsonl"
    path.write_text("x" * 4000 + "\n")  # its page has 95 bytes free: the next line needs another
    fill(small_disk)
    with pytest.raises(OSError) as raised:
        append_line(path, json.dumps({"epoch": 2, "pad": "y" * 300}))
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    assert path.read_text() == "x" * 4000 + "\n"


# ---------------------------------------------------------------- writes made to fail (anywhere)


@pytest.mark.parametrize("name", ["recipe.yaml", "metrics.jsonl", "result.json"])
def test_a_write_failing_with_enospc_gives_one_line_exit_2_and_the_rerun_works(
    tmp_path, monkeypatch, capsys, name
):
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        FullDisk(patch, name, budget=10)
        assert main(["train", *TINY, "--out", str(out), "--json"]) == 2
    captured = capsys.readouterr()
    line = one_line(captured.err)
    assert captured.out == ""  # no result to print
    assert NO_SPACE in line and name in line
    assert run_files(out) == []
    assert main(["train", *TINY, "--out", str(out), "--json"]) == 0
    assert sorted(set(run_files(out)) & set(RUN_FILES)) == [
        "metrics.jsonl",
        "recipe.yaml",
        "result.json",
    ]


def test_a_checkpoint_that_does_not_fit_gives_one_line_and_leaves_nothing(
    tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        FullDisk(patch, "checkpoint.pt", budget=1000)
        assert main(["train", *TINY, "run.checkpoint=true", "--out", str(out), "--json"]) == 2
    line = one_line(capsys.readouterr().err)
    assert NO_SPACE in line and "checkpoint.pt" in line
    assert run_files(out) == []


def test_an_appended_line_that_fails_halfway_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    append_line(path, '{"epoch": 1}')
    with monkeypatch.context() as patch:
        FullDisk(patch, "metrics.jsonl", budget=5)
        with pytest.raises(OSError) as raised:
            append_line(path, '{"epoch": 2, "val_acc": 0.5}')
    assert raised.value.errno == errno.ENOSPC
    assert path.read_text() == '{"epoch": 1}\n'
    append_line(path, '{"epoch": 2}')
    assert path.read_text().splitlines() == ['{"epoch": 1}', '{"epoch": 2}']


def test_atomic_writers_racing_on_one_file_leave_one_whole_version(tmp_path):
    path, errors = tmp_path / "summary.json", []

    def write(text):
        try:
            for _ in range(50):
                with atomic_write(path) as handle:
                    handle.write(text)
        except OSError as exc:  # a temporary file shared by both writers
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(c * 5000,)) for c in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and path.read_text() in ("a" * 5000, "b" * 5000)
    assert run_files(tmp_path) == ["summary.json"]


def test_a_full_disk_under_any_atomic_write_is_one_user_facing_line_and_the_old_file_stays(
    tmp_path, monkeypatch
):
    path = tmp_path / "results.csv"
    path.write_text("old")
    with monkeypatch.context() as patch:
        FullDisk(patch, "results.csv", budget=3)
        with pytest.raises(TrickLabError) as raised, atomic_write(path) as handle:
            handle.write("new table")
    assert isinstance(raised.value, OSError) and raised.value.errno == errno.ENOSPC
    assert str(raised.value).startswith(f"cannot write {path}: {NO_SPACE}")
    assert path.read_text() == "old" and run_files(tmp_path) == ["results.csv"]


def test_a_speedrun_whose_summary_does_not_fit_gives_one_line_and_exit_2(
    tmp_path, monkeypatch, capsys
):
    out, recipe = tmp_path / "speedrun", tmp_path / "tiny.yaml"
    recipe.write_text("run:\n  epochs: 1\n")
    args = ["speedrun", "--recipe", str(recipe), "--runs", "1", "--warmup-epochs", "0"]
    with monkeypatch.context() as patch:
        FullDisk(patch, "summary.json")
        assert main([*args, "--out", str(out), "--json", *TINY]) == 2
    err = capsys.readouterr().err  # the runs' progress, then the error
    line = err.strip().splitlines()[-1]
    assert "Traceback" not in err and line.startswith("error: cannot write")
    assert NO_SPACE in line and "summary.json" in line
    # what it made is removed (2026-11-28): a folder without summary.json no command reads or
    # resumes, so the same command must find it as it was
    assert not out.exists()
