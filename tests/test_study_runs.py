"""Run folders of ablations and sweeps, `tricklab results --runs`, and the "run k/N" progress lines.

Each study trains 2 configurations x 2 seeds of the tiny synthetic recipe (a fraction of a second
per run) with the real engine, so the folders hold what `train(out_dir=...)` writes.
"""

import json
import re
from pathlib import Path

import optuna
import pytest
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main
from tricklab.core.paths import claim_folder
from tricklab.core.stopping import Interrupted, StopRequest
from tricklab.experiments import (
    AblationPlan,
    Liveness,
    SweepPlan,
    ablate,
    parse_space,
    study_runs,
    sweep,
)
from tricklab.experiments.rundirs import config_folder_name, fresh_run_dir, run_dir, study_dir
from tricklab.experiments.storage import open_storage, storage_url
from tricklab.recipe.schema import load_recipe
from tricklab.training.api import train

TINY = [*TINY_SYNTHETIC, "optim.lr=0.2", "run.epochs=1"]
FAST = Liveness(poll_seconds=0.05)
RUN_FILES = {"recipe.yaml", "metrics.jsonl", "result.json"}


def ablate_args(*more, seeds=2):
    """`tricklab ablate` of the tiny recipe: baseline and aug.flip=random, 1 epoch per run."""
    vary = ["--vary", "aug.flip=random", "--seeds", str(seeds), "--budget-epochs", "1"]
    return ["ablate", "--baseline", *TINY, *vary, *more]


def trials_of(study, out_dir):
    storage = open_storage(storage_url(None, Path(out_dir)), must_exist=True)
    return optuna.load_study(study_name=study, storage=storage).get_trials()


def assert_run_folder(folder, config_id, seed):
    """The folder holds a whole run of this configuration and seed."""
    assert RUN_FILES <= {p.name for p in folder.iterdir()}
    result = json.loads((folder / "result.json").read_text())
    assert result["status"] == "complete" and result["recipe"]["run"]["seed"] == seed
    epochs = (folder / "metrics.jsonl").read_text().splitlines()
    assert len(epochs) == result["epochs_completed"] == len(result["epochs"])
    assert f"seed: {seed}" in (folder / "recipe.yaml").read_text()
    assert folder.parent.name == config_folder_name(config_id)


# ---------------------------------------------------------------- folders


def test_each_ablation_run_keeps_its_folder_named_by_config_and_seed_and_recorded(tmp_path):
    summary = ablate(
        AblationPlan(load_recipe(None, TINY), {"aug.flip": ["random"]}, 2, out_dir=tmp_path),
        liveness=FAST,
    )
    assert summary.status_counts == {"complete": 4}
    trials = trials_of(summary.study, tmp_path)
    assert len(trials) == 4
    for trial in trials:
        config_id, seed = trial.user_attrs["config_id"], trial.user_attrs["seed"]
        folder = Path(trial.user_attrs["run_dir"])
        assert folder == run_dir(tmp_path, config_id, seed)
        assert folder == tmp_path / "runs" / config_folder_name(config_id) / f"seed-{seed}"
        assert trial.user_attrs["runs"][0]["run_dir"] == str(folder)
        assert_run_folder(folder, config_id, seed)
    assert {p.name for p in (tmp_path / "runs").iterdir()} == {"baseline", "aug.flip=random"}


def test_each_grid_sweep_run_keeps_its_folder(tmp_path):
    space = parse_space({"optim.lr": [0.1, 0.2]})
    summary = sweep(
        SweepPlan(load_recipe(None, TINY), space, sampler="grid", seeds=2, out_dir=tmp_path),
        liveness=FAST,
    )
    assert summary.status_counts == {"complete": 4}
    for trial in trials_of(summary.study, tmp_path):
        folder = Path(trial.user_attrs["run_dir"])
        assert folder.parent.name == trial.user_attrs["config_id"]  # optim.lr=0.1: safe as it is
        assert_run_folder(folder, trial.user_attrs["config_id"], trial.user_attrs["seed"])


def test_a_sampled_sweep_keeps_a_folder_per_seed_in_its_records(tmp_path):
    space = parse_space({"optim.lr": {"low": 0.1, "high": 0.3}})
    summary = sweep(
        SweepPlan(
            load_recipe(None, TINY),
            space,
            2,
            sampler="random",
            seeds=2,
            sampler_seed=1,
            out_dir=tmp_path,
        ),
        liveness=FAST,
    )
    assert summary.status_counts == {"complete": 2}
    for trial in trials_of(summary.study, tmp_path):
        runs = trial.user_attrs["runs"]
        assert [r["seed"] for r in runs] == [0, 1]
        for run in runs:
            assert_run_folder(Path(run["run_dir"]), trial.user_attrs["config_id"], run["seed"])
        assert trial.user_attrs["run_dir"] == runs[-1]["run_dir"]  # the seed it trained last


def test_a_rerun_of_an_interrupted_unit_trains_it_again_in_a_clean_folder(tmp_path):
    baseline = load_recipe(None, [*TINY, "run.epochs=3"])
    stop = StopRequest()

    def stopped_after_first_epoch(recipe, *, on_epoch=None, **kwargs):
        def epoch_end(row):
            stop.request()  # as Ctrl-C would: the run ends at the next epoch's end
            on_epoch(row)

        return train(recipe, on_epoch=epoch_end, **kwargs)

    with pytest.raises(Interrupted):
        ablate(
            AblationPlan(baseline, {"aug.flip": ["random"]}, 2, study="s", out_dir=tmp_path),
            train_fn=stopped_after_first_epoch,
            stop=stop,
            liveness=FAST,
        )
    (interrupted,) = trials_of("s", tmp_path)
    folder = Path(interrupted.user_attrs["run_dir"])
    assert interrupted.user_attrs["status"] == "interrupted"
    left = json.loads((folder / "result.json").read_text())  # what the stopped run wrote
    assert left["status"] == "interrupted" and len(left["epochs"]) == 2

    summary = ablate(
        AblationPlan(baseline, {"aug.flip": ["random"]}, 2, study="s", out_dir=tmp_path),
        liveness=FAST,
    )
    assert summary.status_counts == {"complete": 4} and summary.ran == 4
    rerun = [
        t
        for t in trials_of("s", tmp_path)
        if t.user_attrs["unit"] == interrupted.user_attrs["unit"]
    ]
    assert [t.user_attrs["status"] for t in rerun] == ["interrupted", "complete"]
    assert rerun[1].user_attrs["run_dir"] == str(folder)
    assert_run_folder(folder, interrupted.user_attrs["config_id"], interrupted.user_attrs["seed"])
    assert len((folder / "metrics.jsonl").read_text().splitlines()) == 3  # its own epochs only
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no stale copy


def test_a_half_written_folder_nobody_holds_is_replaced(tmp_path):
    folder = tmp_path / "runs" / "baseline" / "seed-0"
    folder.mkdir(parents=True)
    (folder / "recipe.yaml").write_text("half")
    (folder / "metrics.jsonl").write_text('{"epoch": 1}\n')
    (folder / ".tricklab-claim").write_text("12345\n")  # left by a killed worker: no lock held
    assert fresh_run_dir(folder, {str(folder)}) == folder  # named by an earlier try of the run
    assert not folder.exists()
    assert not list(folder.parent.iterdir())


def test_a_folder_a_live_run_holds_is_left_alone_and_the_run_goes_beside_it(tmp_path):
    folder = tmp_path / "seed-0"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text('{"epoch": 1}\n')
    claim = claim_folder(folder)  # a worker taken for dead that still writes there
    try:
        assert fresh_run_dir(folder, {str(folder)}) == tmp_path / "seed-0-2"
        assert (folder / "metrics.jsonl").read_text() == '{"epoch": 1}\n'
    finally:
        claim.release()


def test_a_folder_the_study_never_named_is_left_alone(tmp_path):
    folder = tmp_path / "seed-0"
    folder.mkdir()
    (folder / "result.json").write_text("{}")
    assert fresh_run_dir(folder, {str(tmp_path / "other")}) == tmp_path / "seed-0-2"
    assert (folder / "result.json").read_text() == "{}"


def test_two_studies_sharing_an_out_folder_keep_each_others_runs(tmp_path):
    baseline = load_recipe(None, TINY)
    first = ablate(
        AblationPlan(baseline, {"aug.flip": ["random"]}, 1, study="a", out_dir=tmp_path),
        liveness=FAST,
    )
    second = ablate(
        AblationPlan(baseline, {"optim.lr": [0.1]}, 1, study="b", out_dir=tmp_path), liveness=FAST
    )
    assert first.status_counts == second.status_counts == {"complete": 2}
    folders = {}
    for study in ("a", "b"):
        for trial in trials_of(study, tmp_path):
            folder = Path(trial.user_attrs["run_dir"])
            assert_run_folder(folder, trial.user_attrs["config_id"], 0)
            folders[study, trial.user_attrs["config_id"]] = folder
    assert folders["a", "baseline"] == tmp_path / "runs" / "baseline" / "seed-0"
    assert folders["b", "baseline"] == tmp_path / "runs" / "baseline" / "seed-0-2"


def test_config_folder_names_are_safe_and_unique():
    assert config_folder_name("baseline") == "baseline"
    assert config_folder_name("aug.flip=random optim.lr=0.1") == "aug.flip=random+optim.lr=0.1"
    odd = [
        "model.name=examples.my_model:make",
        "model.widths=[8, 16, 16]",
        "model.widths=[8,_16,_16]",
        "data.root=/tmp/../x",
        "data.root=C:\\data",
        "a" * 300,
        "a" * 301,
        "x=1+2",
        "x=1 2",
    ]
    names = [config_folder_name(c) for c in odd]
    assert len(set(names)) == len(names)
    for name in names:
        assert re.fullmatch(r"[A-Za-z0-9._=,+-]+", name) and len(name) <= 100
        assert not name.startswith(".")


def test_the_study_folder_is_the_out_folder_beside_the_storage_file_or_the_default(tmp_path):
    assert study_dir("s", None, tmp_path / "exp") == tmp_path / "exp"
    assert study_dir("s", f"journal:{tmp_path}/shared.journal") == tmp_path / "s"
    assert study_dir("s", str(tmp_path / "s" / "study.db")) == tmp_path / "s"
    assert study_dir("s", f"journal:{tmp_path}/j.journal", tmp_path / "o") == tmp_path / "o"
    assert study_dir("s") == Path("runs") / "experiments" / "s"


def test_runs_of_a_journal_study_go_beside_the_journal(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    journal = tmp_path / "shared" / "exp.journal"
    ablate(
        AblationPlan(
            load_recipe(None, TINY),
            {"aug.flip": ["random"]},
            1,
            study="j",
            storage=f"journal:{journal}",
        ),
        liveness=FAST,
    )
    assert sorted(p.name for p in (tmp_path / "shared" / "j" / "runs").iterdir()) == [
        "aug.flip=random",
        "baseline",
    ]
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- results --runs


def test_results_runs_lists_every_run_with_its_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # the run folders' paths in one table, however long
    assert main(ablate_args("--out", str(tmp_path), "--json")) == 0
    study = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["study"]

    assert main(["results", study, "--out", str(tmp_path), "--runs", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    runs = listed["runs"]
    assert listed["study"] == study and listed["kind"] == "ablation"
    assert [(r["config_id"], r["seed"]) for r in runs] == [
        ("baseline", 0), ("baseline", 1), ("aug.flip=random", 0), ("aug.flip=random", 1),
    ]  # fmt: skip
    for run in runs:
        assert run["status"] == "complete" and 0 <= run["accuracy"] <= 1
        assert run["train_seconds"] > 0
        assert_run_folder(Path(run["run_dir"]), run["config_id"], run["seed"])
    assert study_runs(study, out_dir=str(tmp_path))[1] == runs

    assert main(["results", study, "--out", str(tmp_path), "--runs"]) == 0
    table = capsys.readouterr().out
    for header in ("config", "seed", "status", "acc %", "train s", "run folder"):
        assert header in table
    for run in runs:
        assert Path(run["run_dir"]).name in table and f"{run['accuracy'] * 100:.2f}" in table
    assert table.count("complete") == 4

    assert main(["results", study, "--out", str(tmp_path), "--runs", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "config_id,seed,status,accuracy,train_seconds,run_dir"
    assert len(lines) == 5 and lines[1].startswith("baseline,0,complete,")


def test_results_runs_of_an_unknown_study_or_with_per_seed_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["results", "nope", "--out", str(tmp_path), "--runs"]) == 2
    assert main(["results", "s", "--runs", "--per-seed"]) == 2
    assert main(["results", "--runs"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "--per-seed" in err[1] and "study" in err[2]


# ---------------------------------------------------------------- progress


def progress_lines(text):
    return [line for line in text.splitlines() if line.startswith("run ")]


def test_each_finished_run_prints_run_k_of_n_with_elapsed_and_eta_in_order(tmp_path, capsys):
    assert main(ablate_args("--out", str(tmp_path))) == 0
    out = capsys.readouterr().out
    lines = progress_lines(out)
    assert [line.split()[1] for line in lines] == ["1/4", "2/4", "3/4", "4/4"]
    for line in lines:
        assert re.search(r"\d+:\d\d:\d\d elapsed, eta \d+:\d\d:\d\d$", line), line
        assert "\x1b" not in line and "\r" not in line  # plain lines off a terminal
    assert lines[-1].endswith("eta 0:00:00")
    assert "4 runs planned, 0 done before, 4 run now" in out


def test_a_resumed_study_counts_only_the_runs_left(tmp_path, capsys):
    assert main(ablate_args("--out", str(tmp_path), "--study", "r", seeds=1)) == 0  # seed 0
    capsys.readouterr()
    assert main(ablate_args("--out", str(tmp_path), "--study", "r")) == 0  # seed 1 is left
    assert [line.split()[1] for line in progress_lines(capsys.readouterr().out)] == ["1/2", "2/2"]


def test_quiet_silences_the_run_lines_but_not_the_summary(tmp_path, capsys):
    assert main(ablate_args("--out", str(tmp_path), "--quiet")) == 0
    out = capsys.readouterr().out
    assert progress_lines(out) == []
    assert "4 runs planned, 0 done before, 4 run now; final: complete 4" in out


def test_a_sweep_prints_run_k_of_n_too_and_quiet_silences_it(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("optim.lr: {low: 0.1, high: 0.3}\n")
    args = ["sweep", "--baseline", *TINY, "--space", str(space), "--sampler", "random"]
    args += ["--trials", "2", "--seeds", "2", "--sampler-seed", "3"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    lines = progress_lines(capsys.readouterr().out)
    assert [line.split()[1] for line in lines] == ["1/4", "2/4", "3/4", "4/4"]
    assert main([*args, "--out", str(tmp_path / "b"), "-q"]) == 0
    out = capsys.readouterr().out
    assert progress_lines(out) == [] and "2 sampled trials planned, 0 done before, 2 run now" in out


def test_a_run_claimed_while_results_reads_the_study_is_listed_not_a_traceback(
    tmp_path, capsys, monkeypatch
):
    """A worker's claim between results' reads of the trials (hostile round 14: KeyError, 1 in 250
    tries): the runs are read first, then the trials they name."""
    assert main(ablate_args("--out", str(tmp_path), "--json", seeds=1)) == 0
    study = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["study"]
    import tricklab.experiments.reading as reading

    read_runs = reading.collect_runs

    def a_worker_claims_meanwhile(opened):
        done = opened.get_trials(deepcopy=False)[0]
        claimed = opened.ask()  # RUNNING, as a worker's claim leaves it before its run folder
        config_id = done.user_attrs["config_id"]
        claimed.set_user_attr("unit", f"{config_id} seed=1")  # a unit no run has done yet
        claimed.set_user_attr("config_id", config_id)
        claimed.set_user_attr("overrides", done.user_attrs["overrides"])
        claimed.set_user_attr("seed", 1)
        return read_runs(opened)

    monkeypatch.setattr(reading, "collect_runs", a_worker_claims_meanwhile)
    assert main(["results", study, "--out", str(tmp_path), "--runs", "--format", "json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert sorted(r["status"] for r in runs) == ["complete", "complete", "running"]
    assert [r["run_dir"] for r in runs if r["status"] == "running"] == [None]
