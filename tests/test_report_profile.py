"""`tricklab report --profile FILE ...`: saved `tricklab profile model|step|loader --json` output as
a section of report.md and report.html, each file's tables with the device, torch version and date
it records; a file that is not such output is one line and exit 2, with nothing written."""

from __future__ import annotations

import contextlib
import html
import io
import json
import shutil
from pathlib import Path

import pytest
from report_fixtures import md_rows
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli import profile as profile_cli
from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.profile.tables import num
from tricklab.recipe.schema import load_recipe
from tricklab.report import write_report
from tricklab.training.api import train

H100_MODEL = Path(__file__).parent / "data" / "profile_model_h100.json"  # an H100, 2026-11-24
TINY_MODEL = ["airbench", "model.widths=[8,16,16]", "data.image_size=16"]
COMMANDS = {
    "model": [*TINY_MODEL, "--batch-sizes", "2,4", "--repeats", "3", "--device", "cpu"],
    "step": [*TINY_SYNTHETIC, "--repeats", "3"],
    "loader": ["synthetic", *TINY_SYNTHETIC[1:], "--kinds", "device,torch", "--num-workers", "0",
               "--repeats", "1"],
}  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The three commands' --json output at tiny sizes on the CPU, each in its file."""
    folder = tmp_path_factory.mktemp("profiles")
    files = {}
    for kind, args in COMMANDS.items():
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["profile", kind, *args, "--json"]) == 0
        files[kind] = folder / f"profile_{kind}.json"
        files[kind].write_text(out.getvalue().strip().splitlines()[-1])
    return files


@pytest.fixture(scope="module")
def report(saved, tmp_path_factory):
    """(report.md text, report.html text) of the three profiles alone, made by the CLI."""
    out = tmp_path_factory.mktemp("report") / "r"
    files = [str(saved[k]) for k in ("model", "step", "loader")]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", "--profile", *files, "--out", str(out)]) == 0
    return (out / "report.md").read_text(), (out / "report.html").read_text()


def data(saved, kind):
    return json.loads(saved[kind].read_text())


def three_digits(value):
    """Three significant digits, trailing zeros kept (1.30), as the tables write them."""
    from tricklab.profile.tables import num

    return num(value)


def test_each_file_is_listed_with_its_device_torch_version_and_date(saved, report):
    md, page = report
    listed = {row["file"]: row for row in md_rows(md, "file", "## Profiles")}
    assert set(listed) == {p.name for p in saved.values()}
    for kind, path in saved.items():
        recorded = data(saved, kind)
        row = listed[path.name]
        assert row["torch"] == recorded["hardware"]["torch"]
        assert row["date (UTC)"] == recorded["date"]  # the CLI dates its --json output
        assert recorded["date"].startswith("20") and recorded["date"].endswith("Z")
        assert recorded["hardware"]["cpu_model"] in row["device"] and "cpu" in row["device"]
        assert recorded["date"] in page and recorded["hardware"]["torch"] in page


def test_the_model_tables_show_params_macs_latency_and_time_per_gmac(saved, report):
    md, _ = report
    recorded = data(saved, "model")
    counted = md_rows(md, "model", "Counted, per image")
    (model,) = recorded["models"]
    assert counted == [
        {
            "model": "airbench",
            "params": f"{model['params'] / 1e6:.2f} M",
            "forward GFLOPs": num(model["forward_flops"] / 1e9),  # 3 significant figures
            "forward GMACs": num(model["forward_macs"] / 1e9),
        }
    ]
    measured = md_rows(md, "model", "Measured (")
    assert [row["batch"] for row in measured] == ["2", "4"]
    for row, result in zip(measured, recorded["results"]):
        assert row["train img/s"] == f"{result['train_images_per_second']:,.0f}"
        assert row["forward ms"].startswith(three_digits(result["forward_ms"]["median_ms"]) + " ±")
        assert row["train ms/GMAC"] == three_digits(result["train_ms_per_gmac"])
        assert row["fwd ms/GMAC"] == three_digits(result["forward_ms_per_gmac"])
    assert "MACs = FLOPs / 2" in md and "MFU unavailable on cpu" in md


def test_the_step_table_shows_each_component_with_its_share_and_interval(saved, report):
    md, _ = report
    recorded = data(saved, "step")
    rows = md_rows(md, "component", "(profile_step.json)")
    components = [*recorded["components"], *recorded["inside_forward_backward"]]
    inside = len(recorded["components"])
    assert rows[inside]["component"] == "of forward + backward:"  # the terminal's section label
    rows = rows[:inside] + rows[inside + 1 :]
    assert len(rows) == len(components)
    for row, component in zip(rows, components):
        assert row["component"].endswith(component["name"].replace("_", " "))
        assert row["share"] == f"{100 * component['share']:.1f} %"
        assert row["95% interval ms"].startswith("[")
        assert row["measured as"] == component["measured_as"]
        assert ("within noise" in row["note"]) == component["within_noise"]
    step = three_digits(recorded["step_ms"])
    assert f"Step {step} ms" in md
    operators = md_rows(md, "operator", "(profile_step.json)")
    assert operators and operators[0]["operator"] == recorded["top_operators"][0]["name"]


def test_the_loader_table_shows_images_per_second_per_configuration(saved, report):
    md, _ = report
    recorded = data(saved, "loader")
    rows = md_rows(md, "loader", "(profile_loader.json)")
    assert [(r["loader"], r["workers"]) for r in rows] == [("device", "-"), ("torch", "0")]
    for row, config in zip(rows, recorded["configs"]):
        assert row["images/s"] == f"{config['images_per_second']:,.0f}"
    assert rows[0]["vs first"] == "1.00×"


def test_report_html_holds_the_same_tables(saved, report):
    _, page = report
    recorded = data(saved, "loader")
    assert "<h2>Profiles</h2>" in page
    for config in recorded["configs"]:
        assert f'<td class="r">{config["images_per_second"]:,.0f}</td>' in page
    component = data(saved, "step")["components"][0]
    assert f"{100 * component['share']:.1f}" in page
    assert html.escape("forward ms") in page and "train ms/GMAC" in page


# Each kind's tables in the order the terminal prints them: (first header, text just before it in
# report.md).
REPORT_TABLES = {
    "model": [("model", "Counted, per image"), ("model", "Measured (")],
    "step": [("component", "(profile_step.json)"), ("operator", "(profile_step.json)")],
    "loader": [("loader", "(profile_loader.json)")],
}


def printed_tables(text):
    """(header, rows) of each rich table in a command's printed output, cells stripped."""
    tables = []
    for line in text.splitlines():
        if line.startswith("┏"):
            tables.append([])
        elif line.startswith(("┃", "│")):
            tables[-1].append([cell.strip() for cell in line[1:-1].split(line[0])])
    return [(table[0], table[1:]) for table in tables]


def assert_same_tables(result, md, capsys):
    """The tables the command prints for `result` hold the header and cells report.md shows."""
    kind = result["kind"]
    getattr(profile_cli, f"render_{kind}")(result)
    printed = printed_tables(capsys.readouterr().out)
    assert len(printed) == len(REPORT_TABLES[kind])
    for (header, rows), (first, after) in zip(printed, REPORT_TABLES[kind]):
        reported = md_rows(md, first, after)
        assert rows and header == list(reported[0])
        assert rows == [list(row.values()) for row in reported]


@pytest.mark.parametrize("kind", REPORT_TABLES)
def test_the_terminal_and_the_report_show_the_same_header_and_cells(kind, saved, report, capsys):
    assert_same_tables(data(saved, kind), report[0], capsys)


def test_a_gpu_profile_shows_the_same_cells_in_the_terminal_and_the_report(tmp_path, capsys):
    report = write_report([], tmp_path / "r", profiles=[H100_MODEL])  # MFU and a precision column
    assert_same_tables(json.loads(H100_MODEL.read_text()), report.md_path.read_text(), capsys)


def test_a_cuda_profile_shows_the_gpu_its_cuda_build_and_mfu(tmp_path):
    report = write_report([], tmp_path / "r", profiles=[H100_MODEL])
    md = report.md_path.read_text()
    recorded = json.loads(H100_MODEL.read_text())
    listed = md_rows(md, "file", "## Profiles")[0]
    assert listed["device"] == "NVIDIA H100 80GB HBM3, cuda"
    assert listed["torch"] == "2.11.0+cu130 (CUDA 13.0)"
    assert listed["date (UTC)"] == "not recorded"  # written before the CLI dated its output
    assert "date not recorded in the file" in md
    measured = md_rows(md, "model", "Measured (")
    assert {"precision", "MFU %"} <= set(measured[0])
    first = recorded["results"][0]
    assert measured[0]["MFU %"] == f"{100 * first['mfu']:.1f}"
    assert "32-true 495 TFLOP/s (H100 SXM tf32)" in md
    assert report.profiles == [H100_MODEL]


def test_profiles_come_after_a_run_folders_results_and_figures(saved, tmp_path):
    run = tmp_path / "run"
    train(load_recipe(None, [*TINY_SYNTHETIC, "run.epochs=1"]), out_dir=run)
    report = write_report([run], tmp_path / "r", profiles=[saved["loader"]])
    md = report.md_path.read_text()
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings.index("## Profiles") == headings.index("## Figures") + 1
    assert "## Results" in headings and "(profile_loader.json)" in md


BAD = {
    "a study's summary": {"status": "complete", "accuracy": 0.9},
    "another kind": {"kind": "ablation"},
    "a model profile without results": {"kind": "model", "device": "cpu", "hardware": {}},
    "a row without its numbers": {
        "kind": "loader", "device": "cpu", "hardware": {}, "dataset": "x", "batch_size": 2,
        "repeats": 1, "configs": [{"kind": "device"}],
    },
    # was an AttributeError traceback from the report's device line
    "a hardware that is no mapping": {
        **json.loads(H100_MODEL.read_text()), "hardware": "NVIDIA H100",
    },
}  # fmt: skip


@pytest.mark.parametrize("content", BAD.values(), ids=BAD.keys())
def test_a_json_that_is_not_a_profile_output_is_one_line_and_exit_2(content, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(content))
    assert main(["report", "--profile", str(bad), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(bad) in err.replace("\n", "")
    assert "tricklab profile" in err and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "text, message",
    [(None, "cannot read"), ("{not json", "is not valid JSON"), ("[1, 2]", "holds no JSON object")],
)
def test_an_unreadable_or_malformed_file_is_one_line_and_exit_2(
    text, message, saved, tmp_path, capsys
):
    bad = tmp_path / "bad.json"
    if text is not None:
        bad.write_text(text)
    files = [str(saved["model"]), str(bad)]
    assert main(["report", "--profile", *files, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err
    assert not (tmp_path / "r").exists()


def test_a_file_larger_than_any_tricklab_output_is_not_read(saved, tmp_path, capsys, monkeypatch):
    from tricklab.report import collect

    monkeypatch.setattr(collect, "MAX_JSON_BYTES", 100)  # a real bound is 64 MiB: too big to write
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"kind": "model", "pad": "x" * 200}))
    assert main(["report", "--profile", str(big), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "larger than any tricklab JSON output" in err
    assert not (tmp_path / "r").exists()


def test_a_profile_given_as_a_source_is_refused_with_the_option_to_use(saved, tmp_path, capsys):
    assert main(["report", str(saved["model"]), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "goes after --profile" in err


def test_nothing_to_report_is_one_line_and_exit_2(capsys):
    assert main(["report"]) == 2
    assert "--profile FILE" in capsys.readouterr().err


def test_a_step_profile_of_no_component_is_refused_as_a_model_profile_of_no_model_is(
    saved, tmp_path
):
    bad = tmp_path / "step.json"
    bad.write_text(json.dumps({**data(saved, "step"), "components": []}))
    with pytest.raises(TrickLabError, match=r"components is \[\], not the parts of the step"):
        write_report([], tmp_path / "r", profiles=[bad])
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(peak_tflops={}), r"results\[0\]\.mfu .*no peak is given"),
        (
            lambda d: d["models"][0].update(forward_macs=10 * d["models"][0]["forward_flops"]),
            r"models\[0\]\.forward_macs .*half its FLOPs",
        ),
    ],
    ids=["mfu-without-a-peak", "macs-above-the-flops"],
)
def test_a_model_profile_contradicting_itself_is_refused(tmp_path, change, message):
    """Seventh hostile round: an MFU of 50 % on a device with no peak, GMACs ten times the
    GFLOPs under "MACs = FLOPs / 2", were rendered."""
    recorded = json.loads(H100_MODEL.read_text())
    change(recorded)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(recorded))
    with pytest.raises(TrickLabError, match=message):
        write_report([], tmp_path / "r", profiles=[bad])


def test_write_report_refuses_a_bad_profile_before_writing(tmp_path):
    bad = tmp_path / "bad.json"
    shutil.copy(H100_MODEL, bad)
    recorded = json.loads(bad.read_text())
    del recorded["results"][0]["train_step_ms"]
    bad.write_text(json.dumps(recorded))
    with pytest.raises(TrickLabError, match="no 'train_step_ms'"):
        write_report([], tmp_path / "r", profiles=[bad])
    assert not (tmp_path / "r").exists()


# Numbers of the right type, each in its range, that no profile holds (fourth hostile round: shown
# as "5000.0 %", "±-20497837%", "[100, 0.632]"): one line naming the file and the field.
def _set(profile, path, value):
    holder = profile
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value(holder) if callable(value) else value


IMPOSSIBLE = {
    "a share of 50": ("step", ("components", 0, "share"), 50, "components[0].share is 50"),
    "a share of -50": ("step", ("components", 0, "share"), -50, "components[0].share is -50"),
    "shares adding up to 1.8": (
        "step", ("components",), lambda h: [{**c, "share": 0.9} for c in h["components"]],
        "the shares in components add up to",
    ),
    "an interval low above its high": (
        "step", ("components", 1, "ci_low_ms"), lambda c: c["ci_high_ms"] + 100,
        "components[1].ci_low_ms is",
    ),
    "a self share of -50": (
        "step", ("top_operators", 0, "self_share"), -50, "top_operators[0].self_share is -50"
    ),
    "no image evaluated": ("step", ("evaluation", "images"), 0, "evaluation.images is 0"),
    "an MFU of 500 %": ("model", ("results", 0, "mfu"), 5.0, "results[0].mfu is 5.0"),
    "a first quartile above the median": (
        "model", ("results", 0, "forward_ms", "q1_ms"), 1e6, "results[0].forward_ms.q1_ms is"
    ),
    "a third quartile below the median": (
        "model", ("results", 0, "train_step_ms", "q3_ms"), 0.0,
        "results[0].train_step_ms.q3_ms is",
    ),
    "no image a second": (
        "model", ("results", 0, "train_images_per_second"), 0,
        "results[0].train_images_per_second is 0",
    ),
    "a loader of 0 images/s": (
        "loader", ("configs", 0, "images_per_second"), 0, "configs[0].images_per_second is 0"
    ),
    "a loading fraction of the step above 1": (
        "loader", ("configs", 0, "step_fraction"), 1.5, "configs[0].step_fraction is 1.5"
    ),
    "a loader quartile above the median": (
        "loader", ("configs", 0, "ms_per_batch", "q1_ms"), 1e6, "configs[0].ms_per_batch.q1_ms is"
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind, path, value, field", IMPOSSIBLE.values(), ids=IMPOSSIBLE.keys())
def test_a_profile_with_an_impossible_number_is_one_line_naming_the_file_and_field(
    kind, path, value, field, saved, tmp_path, capsys
):
    profile = data(saved, kind)
    _set(profile, path, value)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(profile))
    assert main(["report", "--profile", str(bad), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error:"), err
    assert str(bad) in err and field in err, err
    assert not (tmp_path / "r").exists()


def test_a_difference_whose_interval_lies_below_0_is_shown(saved, tmp_path):
    # a component is the difference of two timings: noise can put all of its interval below 0
    profile = data(saved, "step")
    component = profile["components"][0]
    component.update(ms_raw=-3.0, ms=0.0, ci_low_ms=-5.0, ci_high_ms=-1.0, within_noise=False)
    good = tmp_path / "step.json"
    good.write_text(json.dumps(profile))
    md = write_report([], tmp_path / "r", profiles=[good]).md_path.read_text()
    assert "[-5.00, -1.00]" in md and "clipped from -3.00" in md
