"""Names from outside in success output, and saved profiles of the wrong shape.

A folder, study or model named with a newline and an escape sequence is echoed on one line with
its control characters as escapes (core/safeio.shown): it never forges a line of its own
(`error: ...`) and never reaches the terminal raw (F4). A saved profile with any one field of a
wrong type is reported or refused in one line, exit 2, with nothing written; never a traceback
from a table writer (F6).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main

FORGED = "error: forged"
NAME = f"x\n{FORGED}\x1b[31m"  # a second line that reads as tricklab's, then a colour
SHOWN = "x\\nerror: forged\\x1b[31m"  # the same name as it is echoed
TINY = [*TINY_SYNTHETIC, "run.epochs=1"]


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `tricklab ARGV` in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def assert_echoed_safely(out: str, err: str) -> None:
    """No raw escape, no forged line; the name, where it is echoed, as its escapes."""
    for stream in (out, err):
        assert "\x1b" not in stream
        assert not any(line.lstrip().startswith(FORGED) for line in stream.splitlines()), stream
        assert "Traceback" not in stream


# ---------------------------------------------------------------- F4: names echoed in success lines


@pytest.fixture(scope="module")
def forged_run(tmp_path_factory):
    """A tiny run trained into a folder named NAME: (folder, exit code, stdout, stderr)."""
    folder = tmp_path_factory.mktemp("echo") / NAME
    code, out, err = run_cli(["train", *TINY, "--quiet", "--out", str(folder)])
    return folder, code, out, err


def test_train_echoes_its_run_directory_on_one_line(forged_run):
    folder, code, out, err = forged_run
    assert code == 0 and (folder / "result.json").exists()
    assert_echoed_safely(out, err)
    assert f"run directory: {str(folder).replace(NAME, SHOWN)}" in err.splitlines()


def test_report_echoes_its_sources_and_folder_on_one_line(forged_run, tmp_path):
    out_dir = tmp_path / NAME
    code, out, err = run_cli(["report", str(forged_run[0]), "--out", str(out_dir)])
    assert code == 0 and (out_dir / "report.html").exists()
    assert_echoed_safely(out, err)
    assert f"report: {tmp_path}/{SHOWN}/report.html" in err
    assert SHOWN in out  # the summary names the run folder


def test_speedrun_echoes_its_runs_and_summary_folder_on_one_line(tmp_path):
    argv = ["speedrun", *TINY, "--runs", "1", "--warmup-epochs", "0", "--out", str(tmp_path / NAME)]
    code, out, err = run_cli(argv)
    assert code == 0 and (tmp_path / NAME / "summary.json").exists()
    assert_echoed_safely(out, err)
    assert f"runs: {tmp_path}/{SHOWN}" in err.splitlines()
    assert f"summary: {tmp_path}/{SHOWN}/summary.json" in err.splitlines()


def test_speedrun_json_stays_exact_json_with_the_name_in_it(tmp_path):
    argv = ["speedrun", *TINY, "--runs", "1", "--warmup-epochs", "0", "--quiet", "--json"]
    code, out, err = run_cli([*argv, "--out", str(tmp_path / NAME)])
    assert code == 0
    assert_echoed_safely(out, err)
    json.loads(out.strip().splitlines()[-1])  # the last line is the whole object


@pytest.fixture(scope="module")
def forged_ablation(tmp_path_factory):
    """A two-run ablation with its study and folder named NAME: (folder, code, stdout, stderr)."""
    folder = tmp_path_factory.mktemp("ablate") / NAME
    argv = ["ablate", "--baseline", *TINY, "--vary", "tricks.label_smoothing=0.1", "--seeds", "1"]
    code, out, err = run_cli([*argv, "--study", "plain", "--out", str(folder)])
    # --study takes no control character: a study named so comes from outside (another Optuna
    # user's storage), as here
    with contextlib.closing(sqlite3.connect(folder / "study.db")) as db, db:
        db.execute("UPDATE studies SET study_name = ?", (NAME,))
    return folder, code, out, err


def test_ablate_echoes_its_study_and_storage_on_one_line(forged_ablation):
    folder, code, out, err = forged_ablation
    assert code == 0
    assert_echoed_safely(out, err)
    assert f"storage sqlite:///{folder.parent}/{SHOWN}/study.db" in out.splitlines()
    assert any(line.startswith("ablation plain: 2 runs planned") for line in out.splitlines())


def test_ablate_and_sweep_dry_runs_echo_their_plan_on_one_line(tmp_path):
    ablate = ["ablate", "--baseline", *TINY, "--vary", "tricks.label_smoothing=0.1", "--dry-run"]
    space = tmp_path / "space.yaml"
    space.write_text("tricks.label_smoothing: {low: 0.0, high: 0.2}\n")
    sweep = ["sweep", "--baseline", *TINY, "--space", str(space), "--trials", "2", "--dry-run"]
    for argv in (ablate, sweep):
        code, out, err = run_cli([*argv, "--out", str(tmp_path / NAME)])
        assert code == 0, err
        assert_echoed_safely(out, err)
        assert any(line.startswith("study ") and f"{SHOWN}/study.db" in line
                   for line in out.splitlines())  # fmt: skip
        code, out, err = run_cli([*argv, "--study", NAME])  # refused, the name shown escaped
        assert code == 2 and SHOWN in err
        assert_echoed_safely(out, err)


def test_results_of_a_study_named_from_outside_echo_on_one_line(forged_ablation):
    folder = str(forged_ablation[0])
    code, out, err = run_cli(["results", NAME, "--out", folder])
    assert code == 0, err
    assert_echoed_safely(out, err)
    assert f"ablation {SHOWN}" in out  # the table's title names the study
    code, out, err = run_cli(["results", NAME, "--out", folder, "--format", "md"])
    assert code == 0 and "| config |" in out
    assert_echoed_safely(out, err)


# ---------------------------------------------------------------- F6: saved profiles, wrong types

TINY_MODEL = ["airbench", "model.widths=[8,16,16]", "data.image_size=16"]
PROFILE_COMMANDS = {
    "model": [*TINY_MODEL, "--batch-sizes", "4", "--repeats", "1", "--device", "cpu"],
    "step": [*TINY_SYNTHETIC, "--repeats", "2"],
    "loader": ["synthetic", *TINY_SYNTHETIC[1:], "--kinds", "device", "--repeats", "1",
               "--batches", "2"],
}  # fmt: skip


@pytest.fixture(scope="module")
def profiles() -> dict[str, dict]:
    """The three commands' --json output at tiny sizes on the CPU."""
    saved = {}
    for kind, args in PROFILE_COMMANDS.items():
        code, out, err = run_cli(["profile", kind, *args, "--json"])
        assert code == 0, err
        saved[kind] = json.loads(out.strip().splitlines()[-1])
    return saved


def report_of(profile: dict, folder: Path) -> tuple[int, str, str, Path]:
    """`tricklab report --profile FILE` of `profile` saved in `folder`: (code, out, err, --out)."""
    file, out_dir = folder / "profile.json", folder / "report"
    folder.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(profile))
    return (*run_cli(["report", "--profile", str(file), "--out", str(out_dir)]), out_dir)


def assert_one_line_and_nothing_written(code: int, err: str, out_dir: Path) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert "tricklab profile" in err and not out_dir.exists()


@pytest.mark.parametrize("value", [7, None, ["airbench"], True, 1.5, {"name": "airbench"}])
def test_a_model_profile_whose_row_names_no_model_in_text_is_one_line_exit_2(
    value, profiles, tmp_path
):
    bad = copy.deepcopy(profiles["model"])
    bad["results"][0]["model"] = value
    code, _, err, out_dir = report_of(bad, tmp_path)
    assert_one_line_and_nothing_written(code, err, out_dir)
    assert "results[0].model is" in err and "not text" in err


# Values of the right type that no profile holds (third hostile round): one line naming the field.
ABSURD = [
    ("model", ("results", 0, "forward_ms", "median_ms"), 1e308, "results[0].forward_ms.median_ms"),
    ("model", ("results", 0, "train_step_ms", "q1_ms"), -2.0, "results[0].train_step_ms.q1_ms"),
    ("model", ("repeats",), 1e308, "repeats"),
    ("model", ("repeats",), 0, "repeats"),
    ("model", ("image_shape",), [1e308, -1, 0.5], "image_shape[0]"),
    ("model", ("image_shape",), [3, 16], "image_shape"),
    ("model", ("results", 0, "train_images_per_second"), -3, "train_images_per_second"),
    ("model", ("results", 0, "batch_size"), -5, "results[0].batch_size"),
    ("model", ("results", 0, "model"), "no such model", "results[0].model"),
    ("model", ("models",), [], "models"),
    ("step", ("step_ms",), 1e308, "step_ms"),
    ("step", ("batch_size",), 2.5, "batch_size"),
    ("loader", ("configs", 0, "images_per_second"), -1, "configs[0].images_per_second"),
    ("loader", ("hardware", "cpu_cores"), 0, "hardware.cpu_cores"),
]


@pytest.mark.parametrize("kind,path,value,field", ABSURD)
def test_a_profile_value_out_of_its_range_is_one_line_naming_the_field(
    kind, path, value, field, profiles, tmp_path
):
    code, _, err, out_dir = report_of(replaced(profiles[kind], path, value), tmp_path)
    assert_one_line_and_nothing_written(code, err, out_dir)
    assert f"{field} is" in err, err


def test_a_real_profile_of_each_kind_makes_a_report(profiles, tmp_path):
    for kind, profile in profiles.items():
        code, _, err, out_dir = report_of(profile, tmp_path / kind)
        assert code == 0, err
        assert (out_dir / "report.md").exists()


def test_a_profiled_model_named_with_control_characters_is_echoed_on_one_line(profiles, tmp_path):
    named = copy.deepcopy(profiles["model"])
    named["models"][0]["name"] = named["results"][0]["model"] = NAME
    code, out, err, out_dir = report_of(named, tmp_path)
    assert code == 0, err
    assert_echoed_safely(out, err)
    assert SHOWN in out


def json_class(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "switch"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "text", list: "list", dict: "object"}[type(value)]


SCALARS = {
    "null": st.none(),
    "switch": st.booleans(),
    "number": st.integers(-(10**400), 10**400) | st.floats(allow_nan=False, allow_infinity=False),
    "text": st.text(max_size=12),
}
VALUES = {
    **SCALARS,
    "list": st.lists(st.one_of(*SCALARS.values()), max_size=3),
    "object": st.dictionaries(st.text(max_size=8), st.one_of(*SCALARS.values()), max_size=3),
}


def field_paths(value: object, path: tuple = ()) -> list[tuple]:
    """Every field of a JSON value, nested ones included, as the keys and indices that reach it."""
    found = [path] if path else []
    if isinstance(value, (dict, list)):
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            found += field_paths(item, (*path, key))
    return found


def replaced(profile: dict, path: tuple, new: object) -> dict:
    changed = copy.deepcopy(profile)
    holder = changed
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = new
    return changed


def check_report_or_one_line(profile: dict) -> None:
    """`report --profile` of `profile`: a report, or one line, exit 2 and nothing written."""
    with tempfile.TemporaryDirectory() as folder:
        code, out, err, out_dir = report_of(profile, Path(folder))
        assert code in (0, 2), err
        if code == 2:
            assert_one_line_and_nothing_written(code, err, out_dir)
        else:
            assert (out_dir / "report.md").exists() and (out_dir / "report.html").exists()
        assert "\x1b" not in out + err and "Traceback" not in out + err


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_field_of_a_wrong_type_gives_a_report_or_one_line_exit_2(profiles, data):
    for kind, profile in profiles.items():  # one field of each kind's profile per example
        path = data.draw(st.sampled_from(field_paths(profile)), label=f"{kind} field")
        original = profile
        for key in path:
            original = original[key]
        wrong = [name for name in VALUES if name != json_class(original)]
        new = data.draw(st.sampled_from(wrong).flatmap(VALUES.__getitem__), label="value")
        check_report_or_one_line(replaced(profile, path, new))


@pytest.mark.parametrize("kind", ["model", "loader"])
def test_every_field_of_a_profile_as_null_or_a_number_gives_a_report_or_one_line(kind, profiles):
    """The sweep the property test samples, for the two small profiles: each field in turn."""
    for path in field_paths(profiles[kind]):
        original = profiles[kind]
        for key in path:
            original = original[key]
        check_report_or_one_line(replaced(profiles[kind], path, 7 if original is None else None))
