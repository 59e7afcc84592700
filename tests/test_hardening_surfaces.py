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
    assert (
        "1 configuration, 1 complete run (1 of 1 run complete)" in (out / "report.md").read_text()
    )


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


def test_a_report_killed_while_moving_its_files_in_is_replaced_by_the_next(tmp_path, capsys):
    """Into a folder that exists (the demo's) the files move one by one, report.md last, with a
    mark there until it is in: the files a killed report left are the next report's to replace."""
    from tricklab.report.build import MOVING

    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps(RESULT))
    out = tmp_path / "demo"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "stale.png").write_bytes(b"half")
    (out / "report.html").write_text("half")
    (out / MOVING).touch()
    assert main(["report", str(run), "--out", str(out)]) == 0
    assert (out / "report.md").is_file() and not (out / MOVING).exists()
    assert (
        not (out / "figures" / "stale.png").exists() and "half" != (out / "report.html").read_text()
    )
    capsys.readouterr()
    # Without the mark, the same files are someone's and are refused.
    other = tmp_path / "other"
    other.mkdir()
    (other / "report.html").write_text("mine")
    assert main(["report", str(run), "--out", str(other)]) == 2
    assert "already holds a report" in one_error_line(capsys)


def test_a_report_whose_move_fails_on_a_full_disk_takes_its_files_back(
    tmp_path, monkeypatch, capsys
):
    import errno

    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps(RESULT))
    out = tmp_path / "demo"
    out.mkdir()
    (out / "keep.txt").write_text("the user's")
    real = os.rename

    def rename(src, dst, *args, **kwargs):
        if str(dst).endswith("report.md"):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    assert main(["report", str(run), "--out", str(out)]) == 2
    one_error_line(capsys)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    monkeypatch.setattr(os, "rename", real)
    assert main(["report", str(run), "--out", str(out)]) == 0


def test_an_error_naming_a_file_with_a_newline_is_still_one_line(capsys):
    """A file name can hold a newline: printed raw it would forge a second `error:` line."""
    from tricklab.cli.common import print_error

    print_error("cannot decode image folder/bad\nerror: all runs complete.png")
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "\\n" in err and err.count("error:") == 2


def test_a_closed_stdout_or_stdin_reads_and_writes_nothing_without_a_traceback(tmp_path):
    """`tricklab ... >&-`: Python leaves sys.stdout None (a traceback at its flush, after a whole
    run), and the next file opened would take descriptor 1."""
    import subprocess
    import sys

    for closing in (">&-", "<&-"):
        done = subprocess.run(
            ["bash", "-c", f'"{sys.executable}" -m tricklab tricks --json {closing}'],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )
        assert done.returncode == 0 and "Traceback" not in done.stderr, (closing, done.stderr)


def test_a_warning_naming_a_file_stays_one_escaped_line(capsys):
    """A skipped image, a damaged cache file: their names come from outside."""
    import logging

    from tricklab.cli.common import say_notices

    with say_notices():
        logging.getLogger("tricklab.data.imagefolder_files").warning(
            "skipping %s", "train/a/n\nerror: forged\x1b[31m.txt"
        )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\\nerror: forged\\x1b[31m" in err, err


def test_a_command_in_a_deleted_folder_is_one_line_and_exit_2(tmp_path):
    # was: "Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so" from torch's first import
    import subprocess
    import sys

    gone = tmp_path / "gone"
    gone.mkdir()
    command = (
        f'cd "{gone}" && rmdir "{gone}" && exec "{sys.executable}" -m tricklab train '
        "model.name=tiny data.name=synthetic run.epochs=1"
    )
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "error: the current folder no longer exists; cd into one that does and run again\n"
    )


def test_data_show_prints_class_folder_names_as_text_not_markup_or_escapes(tmp_path, capsys):
    from PIL import Image

    for split in ("train", "test"):
        for name in ("[bold]ant", "bee\x1b[31m"):
            (tmp_path / "data" / split / name).mkdir(parents=True)
            Image.new("RGB", (8, 8)).save(tmp_path / "data" / split / name / "0.png")
    args = ["data", "show", "imagefolder", "--data-dir", str(tmp_path / "data")]
    assert main([*args, "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "[bold]ant" in out and "bee\\x1b[31m" in out and "\x1b" not in out, out


def test_names_from_files_reach_report_md_and_html_escaped(tmp_path, capsys):
    # was: a cpu_model or recipe_name holding ESC went raw into report.md and report.html (and
    # a newline in it forged a line of its own); the figures' fonts warned of a missing glyph
    run = tmp_path / "run"
    run.mkdir()
    hardware = {**RESULT["hardware"], "cpu_model": "cpu\x1b[31m"}
    (run / "result.json").write_text(json.dumps({**RESULT, "hardware": hardware}))
    speedrun = tmp_path / "speedrun"
    speedrun.mkdir()
    runs = [{**RESULT, "seed": seed, "accuracy": 0.9} for seed in range(2)]
    summary = {"runs": runs, "recipe_name": "sp\x1b[2Jeed\nforged line"}
    (speedrun / "summary.json").write_text(json.dumps(summary))
    out = tmp_path / "report"
    assert main(["report", str(run), str(speedrun), "--out", str(out)]) == 0
    assert "Glyph" not in capsys.readouterr().err
    for name in ("report.md", "report.html"):
        text = (out / name).read_text()
        assert "\x1b" not in text and "\nforged line" not in text, name
        shown = text.replace("\\\\", "\\")  # report.md writes a backslash escaped: \\
        assert "cpu\\x1b[31m" in shown and "sp\\x1b[2Jeed\\nforged line" in shown, name
