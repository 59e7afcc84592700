"""`tricklab results`: every format, one row per run, narrow terminals, listing and naming studies."""

import csv
import io
import json
import os
import re
import subprocess
import sys

import pytest
from report_fixtures import make_study

from tricklab.cli.main import main


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """(root, experiment folder) of an ablation: 4 configurations x 2 seeds, one diverging."""
    root = tmp_path_factory.mktemp("results")
    return root, make_study(root)


def results(capsys, study, *options):
    code = main(["results", "rep", "--out", str(study[1]), *options])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def as_json(capsys, study, *options):
    return json.loads(results(capsys, study, *options, "--json").strip().splitlines()[-1])


def test_format_json_is_what_json_prints(study, capsys):
    by_flag = as_json(capsys, study)
    by_format = json.loads(results(capsys, study, "--format", "json").strip().splitlines()[-1])
    assert by_flag == by_format and len(by_flag["configs"]) == 4
    assert by_flag["configs"][0]["config_id"] == "baseline"


def test_format_md_is_a_markdown_table_with_a_row_per_config(study, capsys):
    data = as_json(capsys, study)
    lines = results(capsys, study, "--format", "md").strip().splitlines()
    assert lines[0].startswith("| config | n | acc % mean ± std [95% CI] |")
    assert set(lines[1].strip("|").split("|")) <= {"---", "---:"}
    rows = [line for line in lines[2:] if line.startswith("|")]  # a busy machine adds a line
    assert [line.split(" | ")[0].lstrip("| ") for line in rows] == [
        c["config_id"].replace("1000000000000.0", "1e+12") for c in data["configs"]
    ]
    base = data["configs"][0]
    mean, std = base["accuracy_mean"] * 100, base["accuracy_std"] * 100
    assert f"| {mean:.2f} ± {std:.2f} (n=2: too few runs for an interval) |" in rows[0]


def test_format_latex_is_a_booktabs_table_with_escaped_names(study, capsys):
    text = results(capsys, study, "--format", "latex")
    assert "\\begin{tabular}{" in text and "\\toprule" in text and "\\bottomrule" in text
    assert "tricks.label\\_smoothing=0.1 &" in text and "acc \\% mean $\\pm$ std" in text
    body = text[text.index("\\midrule") : text.index("\\bottomrule")]
    assert len([line for line in body.splitlines() if line.endswith("\\\\")]) == 4


def test_format_csv_has_the_raw_numbers(study, capsys):
    data = as_json(capsys, study)
    rows = list(csv.DictReader(io.StringIO(results(capsys, study, "--format", "csv"))))
    assert [r["config_id"] for r in rows] == [c["config_id"] for c in data["configs"]]
    assert float(rows[0]["accuracy_mean"]) == pytest.approx(data["configs"][0]["accuracy_mean"])
    (diverged,) = [r for r in rows if r["config_id"].startswith("optim.lr=")]
    assert diverged["failures_diverged"] == "2" and diverged["n"] == "0"


def test_the_csv_file_option_still_writes_the_rows(study, capsys, tmp_path):
    results(capsys, study, "--csv", str(tmp_path / "rows.csv"))
    assert len(list(csv.DictReader((tmp_path / "rows.csv").open()))) == 4


@pytest.mark.parametrize(
    "victim, text",
    [
        ("result.json", '{"status": "complete"}'),
        ("study.db.claim-lock", ""),
        ("notes.txt", "the header is config_id,overrides,is_reference,n,planned\n"),
        ("other.csv", "a,b\nconfig_id,overrides,is_reference\n"),
    ],
)
def test_the_csv_file_option_never_replaces_a_file_it_did_not_write(
    study, capsys, tmp_path, victim, text
):
    """Fourth hostile round: --csv pointed at a run's result.json replaced it (the run lost);
    at the study's lock file (empty) it swapped the inode live workers lock."""
    path = tmp_path / victim
    path.write_text(text)
    inode = path.stat().st_ino
    code = main(["results", "rep", "--out", str(study[1]), "--csv", str(path)])
    assert code == 2 and "holds a file of another kind" in capsys.readouterr().err
    assert path.read_text() == text and path.stat().st_ino == inode


def test_per_seed_gives_one_row_per_run_and_one_column_per_varied_key(study, capsys):
    runs = as_json(capsys, study, "--per-seed")["runs"]
    assert len(runs) == 8 and runs[0]["config_id"] == "baseline"
    keys = ("tricks.label_smoothing", "aug.flip", "optim.lr")
    assert all(set(keys) <= set(run) for run in runs)
    baseline = [r for r in runs if r["config_id"] == "baseline"]
    assert {r["seed"] for r in baseline} == {0, 1}
    assert all(
        (r["tricks.label_smoothing"], r["aug.flip"], r["optim.lr"]) == (0.0, "none", 0.2)
        for r in baseline
    )
    flip = [r for r in runs if r["config_id"] == "aug.flip=random"]
    assert all(r["aug.flip"] == "random" and r["tricks.label_smoothing"] == 0.0 for r in flip)
    lines = results(capsys, study, "--per-seed", "--format", "md").strip().splitlines()
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    assert header[:5] == ["config", "seed", "aug.flip", "optim.lr", "tricks.label_smoothing"]
    assert len([line for line in lines if line.startswith("|")]) == 2 + 8  # busy: a line more
    rows = list(
        csv.DictReader(io.StringIO(results(capsys, study, "--per-seed", "--format", "csv")))
    )
    assert len(rows) == 8 and rows[0]["aug.flip"] == "none"


def test_a_narrow_terminal_wraps_or_stacks_and_never_cuts_a_number(study, capsys):
    data = as_json(capsys, study)
    env = {**os.environ, "COLUMNS": "60"}
    out = subprocess.run(
        [sys.executable, "-m", "tricklab", "results", "rep", "--out", str(study[1])],
        capture_output=True, text=True, env=env, check=True,
    ).stdout  # fmt: skip
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 60
    words = set(re.findall(r"[-+]?\d+\.\d+", out))
    for config in data["configs"]:
        if config["accuracy_mean"] is not None:
            assert f"{config['accuracy_mean'] * 100:.2f}" in words
            assert f"{config['accuracy_std'] * 100:.2f}" in words  # 2 runs: no interval
        if config["accuracy_diff"] is not None:
            assert f"{config['accuracy_diff'] * 100:+.2f}" in words


def test_a_wide_terminal_shows_one_table(study):
    env = {**os.environ, "COLUMNS": "250"}
    out = subprocess.run(
        [sys.executable, "-m", "tricklab", "results", "rep", "--out", str(study[1])],
        capture_output=True, text=True, env=env, check=True,
    ).stdout  # fmt: skip
    assert out.count("┏") == 1 and "…" not in out


def test_results_without_a_study_lists_the_studies(study, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(study[0])  # runs/experiments/rep is here
    assert main(["results"]) == 0
    out = capsys.readouterr().out
    assert "rep" in out and "ablation" in out
    assert main(["results", "--storage", str(study[1] / "study.db"), "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["studies"]
    assert (listed["name"], listed["kind"], listed["trials"]) == ("rep", "ablation", 8)
    monkeypatch.chdir(tmp_path)
    assert main(["results"]) == 0
    assert "no studies in runs/experiments" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["default", "storage"])
def test_an_unknown_study_names_the_closest_one(where, study, capsys, monkeypatch):
    monkeypatch.chdir(study[0])
    args = ["results", "rpe"] + (
        ["--storage", str(study[1] / "study.db")] if where == "storage" else []
    )
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "no study 'rpe'" in err and "did you mean 'rep'?" in err
