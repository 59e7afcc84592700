"""`tricklab report` / `write_report` on tiny real studies (generated data, 1 epoch, 3 seeds)."""

import base64
import dataclasses
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import TINY, make_study, md_rows

from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.experiments.stats import config_stats
from tricklab.report import write_report
from tricklab.report.collect import Source, load_sources
from tricklab.report.conclusions import conclusions, summary
from tricklab.report.fmt import config_name, p_equals, ratio_interval, short_override
from tricklab.report.style import Styles

STEMS = ["accuracy_vs_time", "effects", "training_curves", "memory_throughput"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """(root, experiment folder): an ablation of 4 configurations x 3 seeds, one diverging."""
    root = tmp_path_factory.mktemp("study")
    return root, make_study(root, seeds=3)


@pytest.fixture(scope="module")
def report(study, tmp_path_factory):
    return write_report([study[1]], tmp_path_factory.mktemp("out") / "report")


def results_json(capsys, folder, name="rep"):
    assert main(["results", name, "--out", str(folder), "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def numbers(text):
    return [float(x) for x in re.findall(r"[-+]?\d+(?:\.\d+)?", text.replace(",", ""))]


# ---------------------------------------------------------------- what is written


def test_every_file_is_written(report):
    assert report.md_path.is_file() and report.html_path.is_file()
    assert sorted(p.name for p in report.figures) == sorted(
        f"{stem}.{ext}" for stem in STEMS for ext in ("png", "svg")
    )
    for path in report.figures:
        assert path.parent == report.out_dir / "figures" and path.stat().st_size > 5000
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        else:
            assert ET.parse(path).getroot().tag.endswith("svg")
    assert sorted(p.name for p in report.out_dir.iterdir()) == [
        "figures",
        "report.html",
        "report.md",
    ]
    assert report.conclusions and report.summary


class Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]

    def handle_data(self, data):
        self.text.append(data)


def test_html_parses_embeds_every_figure_and_fetches_nothing(report):
    page = report.html_path.read_text()
    parser = Collect()
    parser.feed(page)
    parser.close()
    assert parser.tags[0] == "html" and "table" in parser.tags and "figure" in parser.tags
    assert not {"script", "link", "iframe", "object", "embed"} & set(parser.tags)
    images = [v for tag, k, v in parser.attrs if tag == "img" and k == "src"]
    embedded = {base64.b64decode(src.split(",", 1)[1]) for src in images}
    for svg in report.out_dir.glob("figures/*.svg"):
        assert svg.read_bytes() in embedded  # every figure, byte for byte
    assert all(src.startswith("data:image/svg+xml;base64,") for src in images)
    links = [v for _, k, v in parser.attrs if k in ("src", "href", "srcset", "action", "poster")]
    assert all(v.startswith("data:") for v in links)
    without_images = re.sub(r"data:image/[^\"]+", "", page)
    assert not re.search(r"https?://|@import|url\(", without_images)


def test_report_md_shows_the_figures_and_the_sections(report):
    text = report.md_path.read_text()
    for stem in STEMS:
        assert f"](figures/{stem}.png)" in text
    for section in ("## Summary", "## Conclusions", "## Results", "## Figures", "## Failures"):
        assert section in text
    assert "## Hardware and software" in text and "AMD" in text or "cores" in text


def test_the_numbers_in_report_md_equal_results_json(report, study, capsys):
    data = results_json(capsys, study[1])
    rows = {r["config"]: r for r in md_rows(report.md_path.read_text(), "config")}
    assert len(rows) == len(data["configs"]) == 4
    for config in data["configs"]:
        row = rows[config_name(config["config_id"], config["overrides"])]
        assert row["n"] == str(config["n"])
        if config["accuracy_mean"] is None:
            assert row["acc % mean ± std [95% CI]"] == "-"
            continue
        shown = numbers(row["acc % mean ± std [95% CI]"])
        expected = [
            config[k] * 100
            for k in ("accuracy_mean", "accuracy_std", "accuracy_ci_low", "accuracy_ci_high")
        ]
        assert shown == pytest.approx(expected, abs=0.005 + 1e-9)
        seconds = ("train_seconds_geomean", "train_seconds_ci_low", "train_seconds_ci_high")
        assert numbers(row["train s geometric mean [95% CI]"]) == pytest.approx(
            [config[k] for k in seconds], rel=0.01, abs=0.0051
        )
        if config["is_reference"]:
            continue
        diff = [
            config[k] * 100
            for k in ("accuracy_diff", "accuracy_diff_ci_low", "accuracy_diff_ci_high")
        ]
        assert numbers(row["Δacc pp [95% CI]"]) == pytest.approx(diff, abs=0.005 + 1e-9)
        speed = [config[k] for k in ("speedup", "speedup_ci_low", "speedup_ci_high")]
        assert numbers(row["speedup (ratio of train s) [95% CI], p (test)"])[:3] == pytest.approx(
            speed, rel=0.01, abs=0.0051
        )
        assert (
            f"Welch {config['accuracy_p_value']:.2f}" in row["Δacc p (test)"]
            or config["accuracy_p_value"] < 0.01
        )
        assert row["Δacc p, BH-adjusted"]  # four rows: adjusted


def test_the_conclusions_follow_the_verdicts_of_results_json(report, study, capsys):
    data = results_json(capsys, study[1])
    for config in data["configs"][1:]:
        (sentence,) = [
            c for c in report.conclusions if c.startswith(config["config_id"].split("=")[0])
        ]
        if config["verdict"] == "no complete run":
            assert "no complete run" in sentence and "did not complete (diverged 3)" in sentence
        elif config["verdict"] == "significant":
            assert ("higher accuracy" in sentence) == (config["accuracy_diff"] > 0)
            assert ("lower accuracy" in sentence) == (config["accuracy_diff"] < 0)
        elif config["accuracy_identical_throughout"]:
            assert "the same accuracy, seed for seed" in sentence
        else:
            assert "no significant change in accuracy" in sentence
            assert p_equals(config["accuracy_p_value"]) in sentence and "n=3" in sentence


def test_a_study_with_failed_runs_says_so(report):
    text = report.md_path.read_text()
    failures = md_rows(text[text.index("## Failures") :], "config")
    assert [(r["config"], r["kind"], r["runs"]) for r in failures] == [
        ("optim.lr=1e+12", "diverged", "3")
    ]
    assert "NaN" in failures[0]["message"]
    assert "Not complete: 3 diverged." in report.summary


# ---------------------------------------------------------------- conclusions from fixed numbers


def records(config_id, accuracies, seconds):
    return [
        {"config_id": config_id, "overrides": [] if config_id == "baseline" else [config_id],
         "seed": seed, "status": "complete", "accuracy": acc, "train_seconds": secs}
        for seed, (acc, secs) in enumerate(zip(accuracies, seconds))
    ]  # fmt: skip


def source(*groups):
    recs = [r for g in groups for r in g]
    return Source("fixed", "ablation", "-", recs, config_stats(recs))


BASE = records("baseline", [0.900, 0.904, 0.896, 0.902, 0.898], [10.0, 10.2, 9.8, 10.1, 9.9])


def test_conclusions_call_a_change_only_when_its_interval_excludes_no_change():
    better = records("t.better=1", [0.920, 0.924, 0.916, 0.922, 0.918], [8.0, 8.1, 7.9, 8.05, 7.95])
    noise = records("t.noise=1", [0.905, 0.893, 0.901, 0.897, 0.899], [10.0, 10.2, 9.8, 10.1, 9.9])
    worse = records(
        "t.worse=1", [0.880, 0.884, 0.876, 0.882, 0.878], [12.0, 12.3, 11.8, 12.1, 11.9]
    )
    src = source(BASE, better, noise, worse)
    by_name = {s.split(":")[0]: s for s in conclusions([src])}
    rows = {r.config_id: r for r in src.rows}
    assert by_name["t.better=1"].startswith("t.better=1: higher accuracy (+2.00 pp, 95% CI +")
    assert "trains 1.25× faster, 20% less train time" in by_name["t.better=1"]
    assert by_name["t.worse=1"].startswith("t.worse=1: lower accuracy (-2.00 pp")
    assert "trains 1.20× slower, 20% more train time" in by_name["t.worse=1"]
    noise_text = by_name["t.noise=1"]
    assert noise_text.startswith("t.noise=1: no significant change in accuracy (-0.10 pp, 95% CI -")
    assert f"Welch {p_equals(rows['t.noise=1'].accuracy_p_value)}" in noise_text
    assert "BH-adjusted" in noise_text and "n=5" in noise_text
    assert "no significant change in train time" in noise_text
    assert "2 of 3 changes moved accuracy significantly" in summary([src])


def test_a_change_significant_only_before_the_adjustment_is_not_called():
    close = records("t.close=1", [0.9052, 0.9092, 0.9012, 0.9072, 0.9032], [10.0] * 5)
    others = [
        records(f"t.none{i}=1", [0.900, 0.904, 0.896, 0.902, 0.898], [10.0] * 5) for i in range(3)
    ]
    src = source(BASE, close, *others)
    row = next(r for r in src.rows if r.config_id == "t.close=1")
    assert row.accuracy_diff_ci_low > 0 and row.accuracy_p_adjusted >= 0.05
    (sentence,) = [c for c in conclusions([src]) if c.startswith("t.close=1")]
    assert "no significant change in accuracy after correcting for multiple comparisons" in sentence


def test_one_run_a_side_is_too_few_to_test():
    src = source(records("baseline", [0.9], [10.0]), records("t.x=1", [0.95], [5.0]))
    (sentence,) = conclusions([src])
    assert (
        sentence
        == "t.x=1: too few runs to test accuracy (+5.00 pp, n=1); too few runs to test train time (2.00×)."
    )
    assert "none of the 1 change can be tested" in summary([src])


def test_a_ratio_at_two_runs_says_in_words_that_there_is_no_interval():
    assert ratio_interval(1.2, None, None, 2) == "1.20× (n=2: too few runs for an interval)"
    assert ratio_interval(1.25, 1.21, 1.29, 5) == "1.25× [1.21×, 1.29×]"


def test_configs_are_named_with_short_numbers():
    assert short_override("optim.lr=0.30000000000000004") == "optim.lr=0.3"
    assert short_override("tricks.label_smoothing=0.1") == "tricks.label_smoothing=0.1"
    assert short_override("model.widths=[16, 64, 64]") == "model.widths=[16, 64, 64]"
    assert short_override("optim.lr=1000000000000.0") == "optim.lr=1e+12"
    assert short_override("aug.flip=random") == "aug.flip=random"


# ---------------------------------------------------------------- several sources, odd studies


def test_two_studies_are_joined_by_config_one_colour_per_study(study, tmp_path, capsys):
    second = make_study(tmp_path, "rep2", seeds=1, vary={"tricks.label_smoothing": [0.1]})
    code, out, _ = run_cli(
        ["report", str(study[1]), str(second), "--out", str(tmp_path / "out"), "--json"], capsys
    )
    assert code == 0
    made = json.loads(out.strip().splitlines()[-1])
    text = Path(made["md_path"]).read_text(encoding="utf-8")
    joined = md_rows(text[text.index("### All sources side by side") :], "config")
    by_config = {r["config"]: r for r in joined}
    assert joined[0]["config"] == "baseline" and set(by_config) == {
        "baseline",
        "tricks.label_smoothing=0.1",
        "aug.flip=random",
        "optim.lr=1e+12",
    }
    assert by_config["aug.flip=random"]["rep2: acc % (n)"] == "-"  # rep2 did not run it
    assert by_config["tricks.label_smoothing=0.1"]["rep2: acc % (n)"].endswith("(1)")
    assert all(c.startswith(("[rep] ", "[rep2] ")) for c in made["conclusions"])
    styles = Styles(load_sources([study[1], second]))
    colours = {(s, c): styles.colour(s, c) for s in (0, 1) for c in styles.configs}
    assert len({colours[(0, c)] for c in styles.configs}) == 1  # one colour per study
    assert colours[(0, "baseline")] != colours[(1, "baseline")]
    assert len({styles.marker(c) for c in styles.configs}) == 4  # configs told apart by marker


def test_one_study_gives_each_config_its_own_colour(study):
    styles = Styles(load_sources([study[1]]))
    assert len({styles.colour(0, c) for c in styles.configs}) == len(styles.configs) == 4


def test_a_single_seed_study_reports_too_few_runs(tmp_path):
    folder = make_study(tmp_path, "one", seeds=1, vary={"aug.flip": ["random"]})
    made = write_report([folder], tmp_path / "out")
    assert "too few runs to test accuracy" in made.conclusions[0]
    assert "can be tested: run more seeds" in made.summary
    assert (tmp_path / "out" / "figures" / "accuracy_vs_time.png").is_file()


def test_an_empty_study_still_gives_a_report_that_says_so(tmp_path):
    from tricklab.experiments.storage import open_storage, open_study, storage_url

    folder = tmp_path / "empty"
    open_study(open_storage(storage_url(None, folder)), "empty", attrs={"kind": "ablation"})
    made = write_report([folder], tmp_path / "out")
    assert made.figures == [] and made.conclusions == []
    assert made.summary.startswith("empty has no runs yet")
    text = made.md_path.read_text()
    assert "empty has no runs yet." in text and 'No figure "Accuracy against train time"' in text
    assert "<h1>" in made.html_path.read_text()


def test_speedrun_and_run_folders_are_sources_too(tmp_path):
    from tricklab.experiments.speedrun import SpeedrunPlan, speedrun
    from tricklab.recipe.schema import load_recipe
    from tricklab.training.api import train

    recipe = load_recipe(None, TINY)
    speedrun(SpeedrunPlan(recipe, 2, warmup_epochs=0, recipe_name="tiny", out_dir=tmp_path / "sr"))
    train(recipe.override(["optim.lr=0.4"]), out_dir=tmp_path / "lr")
    (sr,) = load_sources([tmp_path / "sr"])
    assert sr.kind == "speedrun" and [(r.config_id, r.n) for r in sr.rows] == [("tiny", 2)]
    assert all(r.get("epochs") for r in sr.records)  # curves from each run's folder
    (runs,) = load_sources(
        [tmp_path / "sr" / "seed-0", tmp_path / "sr" / "seed-1", tmp_path / "lr"]
    )
    assert [(r.config_id, r.n) for r in runs.rows] == [("baseline", 2), ("optim.lr=0.4", 1)]
    made = write_report([tmp_path / "sr", tmp_path / "lr"], tmp_path / "out")
    assert made.md_path.is_file() and "## Results" in made.md_path.read_text()


def test_an_interrupted_speedrun_is_reported_unfinished_with_its_planned_runs(tmp_path):
    """Seventh hostile round: a speedrun stopped after 1 of 6 runs was reported as "1 of 1 runs
    complete"; its summary.json says what it planned."""
    from tricklab.experiments.speedrun import SpeedrunPlan, speedrun
    from tricklab.recipe.schema import load_recipe

    speedrun(SpeedrunPlan(load_recipe(None, TINY), 1, warmup_epochs=0, out_dir=tmp_path / "sr"))
    summary_file = tmp_path / "sr" / "summary.json"
    summary = json.loads(summary_file.read_text())
    assert summary["runs_planned"] == 1
    summary_file.write_text(json.dumps({**summary, "runs_planned": 6, "interrupted": True}))
    made = write_report([tmp_path / "sr"], tmp_path / "out")
    assert "(1 of 6 planned runs complete)" in made.summary
    text = made.md_path.read_text()
    assert "Unfinished: 1 of 6 planned runs done" in text
    assert "(n=1: too few runs for an interval)" in text  # n=1 says so, as n=2 does
    for wrong in ("6.5", -1, True, "x"):
        summary_file.write_text(json.dumps({**summary, "runs_planned": wrong}))
        with pytest.raises(TrickLabError, match="'runs_planned' is .*, not a whole number"):
            write_report([tmp_path / "sr"], tmp_path / f"bad-{wrong}")
    # Eighth hostile round: more runs than planned was reported "2 of 2" without a word
    twice = {**summary, "runs_planned": 1, "runs": [*summary["runs"], {**summary["runs"][0],
                                                                       "seed": 99}]}  # fmt: skip
    summary_file.write_text(json.dumps(twice))
    with pytest.raises(TrickLabError, match="'runs' holds 2 runs, more than the 1 of"):
        write_report([tmp_path / "sr"], tmp_path / "bad-more")


def test_a_folder_holding_a_speedrun_and_a_study_reports_both(study, tmp_path):
    """Fifth hostile round: a speedrun's --out into an ablation's folder hid the study from
    `report FOLDER`, without a word. Such a folder is refused now (fifteenth round: one command's
    folder by the others); one made before, or by hand, is still reported whole."""
    from tricklab.experiments.speedrun import SpeedrunPlan, speedrun
    from tricklab.recipe.schema import load_recipe

    mixed = tmp_path / "mixed"
    shutil.copytree(study[1], mixed)
    plan = SpeedrunPlan(load_recipe(None, TINY), 2, warmup_epochs=0, out_dir=mixed)
    with pytest.raises(TrickLabError, match="holds a study .study.db., another command's output"):
        speedrun(plan)
    speedrun(dataclasses.replace(plan, out_dir=tmp_path / "sr"))
    shutil.copytree(tmp_path / "sr", mixed, dirs_exist_ok=True)
    assert sorted(source.kind for source in load_sources([mixed])) == ["ablation", "speedrun"]


# ---------------------------------------------------------------- bad input


def run_cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "case",
    [
        "unknown study",
        "unreadable storage",
        "out is a file",
        "out holds a report",
        "not a source folder",
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    case, study, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(study[0])  # where runs/experiments/rep is
    work = tmp_path / "work"
    work.mkdir()
    args = ["report", "rep", "--out", str(work / "out")]
    expect = ""
    if case == "unknown study":
        args[1], expect = "rpe", "did you mean 'rep'?"
    elif case == "unreadable storage":
        (work / "junk.db").write_text("not a database\n" * 10)
        args += ["--storage", str(work / "junk.db")]
        expect = "junk.db"
    elif case == "out is a file":
        (work / "out").write_text("mine")
        expect = "is a file"
    elif case == "out holds a report":
        (work / "out").mkdir()
        (work / "out" / "report.md").write_text("mine")
        expect = "already holds a report"
    else:
        (work / "folder").mkdir()
        args[1], expect = str(work / "folder"), "not a speedrun, run or experiment folder"
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    texts = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, out, err = run_cli(args, capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and expect in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert all(p.read_bytes() == data for p, data in texts.items())
    assert not (study[0] / "reports").exists()


def test_write_report_refuses_a_folder_holding_a_report(report, study):
    with pytest.raises(TrickLabError, match="already holds a report"):
        write_report([study[1]], report.out_dir)


def test_the_cli_writes_to_a_new_reports_folder_and_prints_the_summary(study, capsys, monkeypatch):
    monkeypatch.chdir(study[0])
    code, out, err = run_cli(["report", "rep"], capsys)
    assert code == 0
    (folder,) = (study[0] / "reports").iterdir()
    assert re.fullmatch(r"\d{8}-\d{6}-rep", folder.name)
    assert (folder / "report.html").is_file() and f"reports/{folder.name}/report.html" in err
    assert "rep (ablation on" in out
    shutil.rmtree(study[0] / "reports")


def test_a_study_named_twice_under_two_spellings_and_its_own_run_folder_count_once(
    study, monkeypatch
):
    """Eleventh hostile round: `report FOLDER NAME --storage FOLDER/study.db` reported the study
    twice (titles, tables, conclusions), and `report FOLDER FOLDER/runs/baseline/seed-0` counted
    that run again as a runs source."""
    monkeypatch.chdir(study[0])
    folder = study[1]
    (one,) = load_sources([folder])
    url = f"sqlite:///{folder / 'study.db'}"
    for specs, storage in (
        ([folder, "rep"], url),
        (["rep", folder / "study.db", str(folder) + "/"], None),
        ([folder, folder / "runs" / "baseline" / "seed-0"], None),
    ):
        sources = load_sources(specs, storage)
        assert [(s.name, s.kind, len(s.records)) for s in sources] == [
            ("rep", "ablation", len(one.records))
        ], specs
    (runs,) = load_sources([folder / "runs" / "baseline" / "seed-0"])  # alone: a runs source
    assert runs.kind == "runs" and len(runs.records) == 1


def test_two_reports_started_in_the_same_second_without_out_get_two_folders(
    study, capsys, monkeypatch
):
    """Eleventh hostile round: two `tricklab report S` started together picked the same
    reports/<date>-<time>-S and the second said "--out ... was written by another report" (no
    --out was given)."""
    from tricklab.report import build

    monkeypatch.chdir(study[0])
    same = study[0] / "reports" / "20261127-171128-rep"
    monkeypatch.setattr(build, "default_out_dir", lambda sources: same)
    for _ in range(2):
        assert run_cli(["report", "rep"], capsys)[0] == 0
    folders = sorted(p.name for p in (study[0] / "reports").iterdir())
    assert folders == ["20261127-171128-rep", "20261127-171128-rep-2"]
    assert all((study[0] / "reports" / f / "report.md").is_file() for f in folders)
    shutil.rmtree(study[0] / "reports")


# ---------------------------------------------------------------- a browser renders it


def test_chromium_renders_the_html_to_a_page_that_is_not_blank(report, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    from PIL import Image

    shot = tmp_path / "page.png"
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--window-size=1200,3000", f"--screenshot={shot}", report.html_path.resolve().as_uri()],
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    image = Image.open(shot).convert("RGB").resize((300, 750))
    pixels = np.asarray(image).reshape(-1, 3)
    ink = float((pixels.sum(axis=1) < 600).mean())
    assert ink > 0.03, f"the page looks blank ({ink:.1%} of it not white)"
    assert (
        len(np.unique(pixels, axis=0)) > 100
    )  # text, tables and coloured figures, not one flat colour


def test_train_seconds_keep_three_significant_figures_below_a_millisecond():
    from tricklab.report.fmt import seconds

    # 1.57e-06 once showed as 0.0000016 (two figures): the report's numbers drifted 2% from JSON
    assert seconds(1.5726042850627336e-06) == "0.00000157"
    assert seconds(0.0005) == "0.000500"
    assert [seconds(v) for v in (0.0123, 12.34, 1234.5)] == ["0.0123", "12.3", "1,234"]


def test_a_folder_of_another_kind_named_as_a_study_reports_the_study(
    study, tmp_path, capsys, monkeypatch
):
    """`tricklab report rep` beside a folder `rep/` that is no speedrun, run or experiment folder
    (the demo's --out, say): the study of that name (was: one line, exit 2)."""
    monkeypatch.chdir(study[0])  # where runs/experiments/rep is
    (study[0] / "rep").mkdir()
    try:
        code, _, err = run_cli(["report", "rep", "--out", str(tmp_path / "out")], capsys)
    finally:
        (study[0] / "rep").rmdir()
    assert code == 0, err
    assert " from rep (" in (tmp_path / "out" / "report.md").read_text()  # the study, stored


def test_a_sources_hardware_is_counted_once_however_often_the_report_asks(monkeypatch):
    """The report asks for it per record: recounted each time, a speedrun of 2,000 runs took 76 s
    to report (6 s now) and one of 20,000 did not end."""
    from tricklab.report import collect

    calls = []
    real = collect.json.dumps
    monkeypatch.setattr(collect.json, "dumps", lambda *a, **k: calls.append(1) or real(*a, **k))
    cpu = {"device_type": "cpu", "cpu_model": "x", "cpu_cores": 2}
    records = [{"hardware": cpu, "seed": i} for i in range(50)]
    source = Source("s", "speedrun", "folder", records, [])
    for _ in records:
        assert source.hardware == cpu and source.fingerprints == 1
    assert len(calls) == len(records)


def test_a_training_curve_of_very_many_epochs_is_drawn_from_a_bounded_number_of_points():
    """Fourth hostile round: a metrics.jsonl of 700,000 rows (inside its size cap) drew a 220 MB
    SVG and a 492 MB report folder; a line keeps the first and last epochs and evenly spaced ones."""
    from tricklab.report.figures import MAX_CURVE_POINTS, _curve

    rows = [{"epoch": e, "val_acc": 0.5, "train_seconds": float(e)} for e in range(1, 20_001)]
    epochs, seconds, mean, std = _curve([{"epochs": rows}], "val_acc")
    assert len(epochs) == MAX_CURVE_POINTS and epochs[0] == 1 and epochs[-1] == 20_000
    assert list(seconds) == list(epochs) and len(mean) == len(std) == MAX_CURVE_POINTS
