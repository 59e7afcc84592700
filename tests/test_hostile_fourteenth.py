"""The fourteenth hostile round (a study's life over many calls; the operating environment): each
case is one clear line before anything is written, or a true number, or no longer happens."""

import dataclasses

import pytest
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.experiments import SweepPlan, parse_space, sweep
from tricklab.recipe.schema import load_recipe

TINY = [*TINY_SYNTHETIC, "run.epochs=1", "tricks.precision=32-true"]


def sweep_args(out, seeds: int, sampler: str = "random") -> list[str]:
    return [
        "sweep", "--baseline", *TINY, "--space", "space.yaml", "--sampler", sampler,
        "--trials", "2", "--sampler-seed", "2", "--seeds", str(seeds), "--study", "s",
        "--out", str(out), "-q",
    ]  # fmt: skip


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_sampled_sweep_resumed_with_other_seeds_is_refused_not_left_unfinished(
    tmp_path, capsys, monkeypatch, sampler
):
    """It said "0 run now" and exit 0 on every call, while `results` said 2 of 4 runs were done
    and to rerun: a sampled trial trains all its seeds, so they cannot change."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text("optim.lr: {low: 0.05, high: 0.2}\n")
    out = tmp_path / "sweep"
    assert main(sweep_args(out, 1, sampler)) == 0
    stored = (out / "study.db").read_bytes()
    capsys.readouterr()
    for seeds in (2, 3):
        for extra in ([], ["--dry-run"]):
            assert main(sweep_args(out, seeds, sampler) + extra) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "its seeds differs" in err, err
    assert (out / "study.db").read_bytes() == stored
    assert main(sweep_args(out, 1, sampler)) == 0  # the original command still resumes

    space = parse_space({"optim.lr": {"low": 0.05, "high": 0.2}})
    plan = SweepPlan(
        load_recipe("speedrun94", TINY), space, 1, sampler=sampler, seeds=1, sampler_seed=2,
        study="py", out_dir=str(tmp_path / "py"),
    )  # fmt: skip
    assert sweep(plan).ran == 1
    with pytest.raises(TrickLabError, match="its seeds differs"):
        sweep(dataclasses.replace(plan, seeds=2))


def test_a_grid_sweep_takes_more_seeds_on_resume(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text("optim.lr: [0.05, 0.2]\n")
    out = tmp_path / "grid"
    assert main(sweep_args(out, 1, "grid")) == 0
    capsys.readouterr()
    assert main(sweep_args(out, 2, "grid")) == 0
    assert "2 done before, 2 run now" in capsys.readouterr().out


def ablation(out, *baseline: str) -> list[str]:
    return [
        "ablate", "--baseline", *TINY, *baseline, "--vary", "optim.lr=0.05", "--seeds", "1",
        "--study", out.name, "--out", str(out), "-q",
    ]  # fmt: skip


def test_a_report_joining_studies_whose_references_differ_says_so(tmp_path, capsys):
    """It printed one "baseline" row of a run with TTA beside one without, without a word."""
    assert main(ablation(tmp_path / "one")) == 0
    assert main(ablation(tmp_path / "same")) == 0
    assert main(ablation(tmp_path / "other", "tricks.tta=flip", "tricks.label_smoothing=0.1")) == 0
    capsys.readouterr()
    said = "The sources' references ran different recipes"
    for other, differs in (("same", False), ("other", True)):
        report = tmp_path / f"report-{other}"
        args = ["report", str(tmp_path / "one"), str(tmp_path / other), "--out", str(report)]
        assert main(args) == 0
        text = (report / "report.md").read_text()
        assert "All sources side by side" in text
        assert (said in text) == differs, text
        if differs:
            assert 'tricks.tta: "none" in one, "flip" in other' in text, text
            assert "tricks.label_smoothing: 0.0 in one, 0.1 in other" in text
