"""`tricklab demo`: its plan, a 1-seed smoke run of it on a tiny budget, and bad input."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
from pathlib import Path

import pytest
from tiny_demo import tiny_plan

import tricklab.cli.demo as demo_cli
from tricklab import demo
from tricklab.cli.main import main
from tricklab.recipe.schema import load_recipe


def test_default_plan_is_scaled_speedrun94_on_the_sample_with_a_fixed_budget():
    plan = demo.DemoPlan()
    recipe = load_recipe(demo.BASELINE_RECIPE, plan.baseline_overrides("cpu"))
    assert recipe.data.name == "cifar10-sample" and recipe.data.dir is None
    assert recipe.model.name == "airbench" and list(recipe.model.widths) == [16, 64, 64]
    assert recipe.tricks.precision == "auto"  # bf16 autocast on a CPU with AMX, else fp32
    assert recipe.run.epochs == plan.epochs
    assert recipe.run.target_accuracy == plan.target_accuracy
    assert recipe.run.early_stopping_patience == 0 and recipe.run.stop_at_target is False
    # Every varied key is a real recipe field whose value differs from the baseline's.
    for key, values in plan.vary.items():
        assert all(recipe.get(key) != load_recipe(None, [f"{key}={v}"]).get(key) for v in values)
    assert len(plan.vary) == 3


def test_on_a_gpu_the_plan_keeps_the_recipe_widths_and_precision():
    speedrun94 = load_recipe(demo.BASELINE_RECIPE)
    recipe = load_recipe(demo.BASELINE_RECIPE, demo.DemoPlan().baseline_overrides("cuda"))
    assert recipe.model.widths == speedrun94.model.widths
    assert recipe.tricks.precision == speedrun94.tricks.precision


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, tricklab_cache_dir):
    """The demo run once with 1 seed on a tiny budget (a few seconds per run)."""
    out = tmp_path_factory.mktemp("demo") / "out"
    events = []
    result = demo.run_demo(
        out, seeds=1, plan=tiny_plan(tricklab_cache_dir), on_run_end=events.append
    )
    return result, events


def test_smoke_trains_the_baseline_and_each_trick_once_per_seed(smoke):
    result, events = smoke
    configs = {e.config_id for e in events}
    assert len(configs) == 4 and "baseline" in configs
    assert all(any(c.startswith(f"{key}=") for c in configs) for key in result.plan.vary)
    assert all(e.seed == 0 and e.status == "complete" for e in events)
    assert result.summary.study == demo.STUDY_NAME and result.summary.planned == 4
    assert result.summary.status_counts == {"complete": 4}
    assert (result.out_dir / "study" / "study.db").is_file()


def test_smoke_writes_the_report_into_the_out_folder(smoke):
    result, _ = smoke
    report = result.report
    assert report.md_path == result.out_dir / "report.md" and report.md_path.is_file()
    assert report.html_path.is_file()
    assert report.summary.strip()
    assert len(report.conclusions) == 3  # one sentence per trick vs the baseline


def test_rerun_on_a_folder_holding_the_report_exits_2_with_one_line(smoke, capsys):
    result, _ = smoke
    before = result.report.md_path.read_bytes()
    assert main(["demo", "--out", str(result.out_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already holds a report" in err
    assert result.report.md_path.read_bytes() == before


@pytest.fixture(scope="module")
def cli_demo(tmp_path_factory, tricklab_cache_dir):
    """`tricklab demo --seeds 1` of the tiny plan into a log: (result, its folder, stdout, stderr)."""
    out = tmp_path_factory.mktemp("cli-demo") / "demo"
    results = []
    run_demo = demo.run_demo
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        # Where the command looks them up.
        patch.setattr(demo_cli, "DemoPlan", functools.partial(tiny_plan, tricklab_cache_dir))
        patch.setattr(
            demo_cli, "run_demo", lambda *a, **k: results.append(run_demo(*a, **k)) or results[-1]
        )
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            assert main(["demo", "--out", str(out), "--seeds", "1"]) == 0
    return results[0], out, stdout.getvalue(), stderr.getvalue()


def test_cli_prints_the_report_path_and_the_conclusion(cli_demo):
    result, out, printed, _ = cli_demo
    report = result.report
    assert f"report: {out / 'report.html'}" in printed and report.html_path.is_file()
    assert printed.rstrip().endswith(report.summary.strip())


def test_cli_in_a_log_says_run_k_of_n_with_an_overall_eta_as_each_run_starts(cli_demo):
    *_, log = cli_demo
    starts = [line for line in log.splitlines() if line.startswith("run ")]
    assert [line.split(":")[0] for line in starts] == ["run 1/4", "run 2/4", "run 3/4", "run 4/4"]
    assert re.match(r"run 1/4: \S+ seed 0 starts; 0:00:\d\d elapsed, eta -:--:--$", starts[0])
    assert all(re.search(r"elapsed, eta (\d+:\d\d:\d\d|-:--:--)$", line) for line in starts)
    assert re.search(r"eta \d+:\d\d:\d\d$", starts[-1])  # known once a run has ended
    assert "\r" not in log and "\x1b" not in log


def test_cli_json_is_one_object_naming_the_report(smoke, tmp_path, monkeypatch, capsys):
    result, _ = smoke
    monkeypatch.setattr(demo_cli, "run_demo", lambda *args, **kwargs: result)
    assert main(["demo", "--out", str(tmp_path / "new"), "--seeds", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["report"]["md_path"] == str(result.out_dir / "report.md")
    assert data["report"]["summary"] == result.report.summary
    assert data["study"]["status_counts"] == {"complete": 4}
    assert data["seeds"] == 1 and data["plan"]["epochs"] == 1.0


def test_out_that_is_a_file_exits_2_before_training(tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("mine")
    assert main(["demo", "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is a file" in err
    assert target.read_text() == "mine"


@pytest.mark.parametrize("held", ["study.db", "summary.json", "runs"])
def test_out_holding_another_commands_files_exits_2_before_training(tmp_path, capsys, held):
    # third hostile round: the demo wrote its study into an ablation's (or a speedrun's) folder
    out = tmp_path / "ablation"
    out.mkdir()
    (out / held).mkdir() if held == "runs" else (out / held).write_text("{}")
    assert main(["demo", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"holds what no demo makes ({held})" in err
    assert sorted(p.name for p in out.iterdir()) == [held]


@pytest.mark.parametrize("seeds", ["0", "-1", "101"])
def test_seeds_out_of_range_exit_2_and_make_no_folder(tmp_path, capsys, seeds):
    out = tmp_path / "new"
    assert main(["demo", "--out", str(out), "--seeds", seeds]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert not out.exists()


def test_interrupted_demo_keeps_its_runs_and_resumes_on_the_same_folder(
    tmp_path, tricklab_cache_dir
):
    out = tmp_path / "demo"
    plan = tiny_plan(tricklab_cache_dir)

    def stop_after_first_run(event):
        raise KeyboardInterrupt

    with pytest.raises(demo.DemoInterrupted) as stopped:
        demo.run_demo(out, seeds=1, plan=plan, on_run_end=stop_after_first_run)
    assert stopped.value.out_dir == out and not (out / "report.md").exists()
    result = demo.run_demo(out, seeds=1, plan=plan)
    assert (result.summary.already_done, result.summary.ran) == (1, 3)
    assert result.report.md_path.is_file()


def test_without_out_each_demo_gets_a_new_runs_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first, second = demo.default_out_dir(), demo.default_out_dir()
    assert first != second and first.parent == second.parent == Path("runs")
    assert first.name.endswith("-demo") and (tmp_path / first).is_dir()
    assert (tmp_path / second).is_dir()


def test_an_out_folder_named_like_the_study_still_gets_its_report(
    tmp_path, tricklab_cache_dir, monkeypatch
):
    """`tricklab demo --out demo`: the report reads the study from its folder, so a folder named
    `demo` (the study's name) in the current folder is not taken for the source."""
    monkeypatch.chdir(tmp_path)
    result = demo.run_demo("demo", seeds=1, plan=tiny_plan(tricklab_cache_dir))
    assert result.report.md_path.resolve() == tmp_path / "demo" / "report.md"
    assert result.report.md_path.is_file() and len(result.report.conclusions) == 3


def _benchmark_module(name):
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(name, root / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demo_benchmark_record_renders_the_demos_own_numbers(smoke):
    """benchmarks/demo_record.py keeps the demo's JSON; make_results turns that, and nothing typed
    by hand, into RESULTS.md's section, the headline row and the README's Quick start paragraph."""
    result, _ = smoke
    demo_record, make_results = _benchmark_module("demo_record"), _benchmark_module("make_results")
    data = json.loads(
        json.dumps(demo_record.record(result.to_dict(), 61.2, (0.5, 1.5), "2099-01-01"))
    )
    base = next(s for s in result.summary.stats if s.is_reference)
    section = "\n".join(make_results.demo_section("demo", data))
    assert base.n == 1 and base.accuracy_ci_low is None  # one seed: no interval is shown
    assert f"| 1 of 1 | {100 * base.accuracy_mean:.2f} |" in section
    assert "1 min 1 s" in section and "load average 0.50 at its start and 1.50" in section
    assert section.count("\n| ") == len(result.summary.stats) + 1  # a row per configuration
    row, note = make_results.demo_headline(data)
    assert f"| 1 | {100 * base.accuracy_mean:.2f} | " in row and "2099-01-01" in row
    assert "600 images" in row and "3 of its tricks" in note
    paragraph = make_results.demo_paragraph(data)
    assert paragraph.startswith(make_results.DEMO_START)
    assert paragraph.endswith(make_results.DEMO_END)
    words = " ".join(paragraph.split("```text")[1].split())
    assert " ".join(result.report.summary.split()).rstrip() in words
