"""The cases of issue 29, each one line and exit 2, or correct."""

import json
import os

from tricklab.cli.main import main

RESULT = {
    "status": "complete",
    "val_acc": 0.5,
    "train_seconds": 3.0,
    "recipe": {"run": {"seed": 0}},
    "hardware": {"device_type": "cpu", "cpu_model": "x", "cpu_cores": 2},
}


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_demo_on_a_read_only_disk_says_so_before_printing_its_plan(tmp_path, monkeypatch, capsys):
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if str(p) == str(tmp_path) else real(p, m))
    assert main(["demo", "--out", str(tmp_path / "demo")]) == 2
    assert "read-only" in one_error_line(capsys)
    assert not (tmp_path / "demo").exists()


def test_results_and_report_leave_an_empty_study_db_empty(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "experiments" / "x").mkdir(parents=True)
    (tmp_path / "runs" / "experiments" / "x" / "study.db").touch()
    (tmp_path / "other.db").touch()
    assert main(["results"]) == 0
    assert main(["results", "x", "--storage", "other.db"]) == 2
    one_error_line(capsys)
    assert main(["report", "x", "--storage", "other.db", "--out", "r"]) == 2
    one_error_line(capsys)
    assert (tmp_path / "other.db").stat().st_size == 0
    assert (tmp_path / "runs" / "experiments" / "x" / "study.db").stat().st_size == 0


def test_a_run_folder_named_twice_is_counted_once(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps(RESULT))
    out = tmp_path / "r"
    assert main(["report", str(run), f"{run}/", "--out", str(out), "--json"]) == 0
    assert "1 complete run each (1 of 1 runs complete)" in (out / "report.md").read_text()


def test_a_result_json_with_nan_for_a_time_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({**RESULT, "train_seconds": float("nan")}))
    assert main(["report", str(run), "--out", str(tmp_path / "r")]) == 2
    assert "NaN" in one_error_line(capsys)
    assert not (tmp_path / "r").exists()


def test_a_report_killed_before_it_moved_in_leaves_no_work_folder_to_the_next(tmp_path, capsys):
    from tricklab.report.build import WORK_MARK

    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps(RESULT))
    left = tmp_path / f".r{WORK_MARK}killed"  # what SIGKILL left: no live claim on it
    left.mkdir()
    os.utime(left, (0, 0))
    assert main(["report", str(run), "--out", str(tmp_path / "r")]) == 0
    assert not left.exists()


def test_an_error_naming_a_file_with_a_newline_is_still_one_line(capsys):
    """A file name can hold a newline: printed raw it would forge a second `error:` line."""
    from tricklab.cli.common import print_error

    print_error("cannot decode image folder/bad\nerror: all runs complete.png")
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "\\n" in err and err.count("error:") == 2
