"""The fourteenth hostile round (a study's life over many calls; the operating environment): each
case is one clear line before anything is written, or a true number, or no longer happens."""

import dataclasses
import json

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


# ---------------------------------------------------------------- the operating environment


@pytest.mark.parametrize(
    ("env", "says"),
    [
        # a convolution's backward waited for ever, and a SIGTERM could not stop it
        ({"OMP_NUM_THREADS": "2", "OMP_THREAD_LIMIT": "1"}, "OMP_THREAD_LIMIT=1 is below the 2"),
        # torch aborted as it loaded: a C++ stack trace of 23 lines, exit 134, on a CPU too
        ({"PYTORCH_CUDA_ALLOC_CONF": "garbage"}, "PYTORCH_CUDA_ALLOC_CONF=garbage is not"),
        ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:"}, "PYTORCH_ALLOC_CONF=max_split_size_mb:"),
        ({"PYTORCH_ALLOC_CONF": "a:1,foo:bar:baz"}, "is not the key:value,key:value form"),
        # libgomp could not start a thread mid-run: its own line, exit 1
        ({"OMP_STACKSIZE": "100000G"}, "OMP_STACKSIZE=100000G asks each OpenMP thread"),
        # ignored by torch with a two-line warning on every command
        ({"ATEN_CPU_CAPABILITY": "nonsense"}, "ATEN_CPU_CAPABILITY=nonsense is none of"),
    ],
)
def test_settings_torch_hangs_or_aborts_on_are_one_line_before_it_loads(
    tmp_path, monkeypatch, capsys, env, says
):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    assert main(["train", *TINY, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and says in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    "value",
    [
        "expandable_segments:True",
        " max_split_size_mb : 128 ,",
        "roundup_power2_divisions:[256:1,512:2]",
    ],
)
def test_allocator_settings_torch_reads_are_taken(monkeypatch, value):
    from tricklab.core.environment import check_environment

    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", value)
    check_environment()


def test_an_open_files_limit_too_low_for_a_study_is_one_line(tmp_path):
    """`ulimit -n 6`: ablate, sweep and demo were a 108-line traceback from Optuna, exit 1."""
    import resource

    from test_cli import tricklab

    def limited():
        resource.setrlimit(resource.RLIMIT_NOFILE, (6, 6))

    out = tmp_path / "study"
    args = ["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.05", "--out", str(out)]
    code, _, err = tricklab(args, preexec_fn=limited)
    lines = err.decode().strip().splitlines()
    assert code == 2 and len(lines) == 1 and "open-files limit is 6 (ulimit -n)" in lines[0]
    assert not out.exists()


def test_too_many_open_files_met_later_is_one_line(monkeypatch, capsys):
    """A storage or a loader that meets EMFILE wraps it (Optuna's StorageInternalError)."""
    import errno

    from tricklab.cli import main as cli_main

    class StorageInternalError(Exception):
        pass

    def command(args):
        try:
            raise OSError(errno.EMFILE, "Too many open files")
        except OSError as exc:
            raise StorageInternalError("An exception is raised during the commit") from exc

    parser = cli_main.build_parser()
    args = parser.parse_args(["tricks"])
    monkeypatch.setattr(args, "func", command)
    monkeypatch.setattr(cli_main, "build_parser", lambda: _Fixed(parser, args))
    assert cli_main.main(["tricks"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "too many open files" in err and "ulimit -n" in err, err


class _Fixed:
    """A parser whose parse_known_args gives `args`."""

    def __init__(self, parser, args):
        self.parser, self.args = parser, args

    def parse_known_args(self, argv):
        return self.args, []


def test_a_torch_cache_folder_that_is_not_there_is_not_made_by_a_listing(tmp_path, monkeypatch):
    """`recipes` and `--dry-run` made the whole TORCHINDUCTOR_CACHE_DIR tree (a failing `train`
    left it behind)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "a" / "b" / "cache"))
    assert main(["recipes"]) == 0
    assert not (tmp_path / "a").exists()
    (tmp_path / "a").write_text("a file in its way")
    assert main(["recipes"]) == 2


def test_torch_that_aborts_under_an_address_space_limit_is_one_line(tmp_path):
    """`ulimit -v 3000000`: torch began to load and aborted (std::bad_alloc, exit 134)."""
    import resource

    from test_cli import tricklab

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (3_000_000 * 1024, 3_000_000 * 1024))

    code, _, err = tricklab(["data", "show", "synthetic"], preexec_fn=limited)
    if code == 0:
        pytest.skip("torch loads within 2.9 GiB of address space here")
    lines = err.decode().strip().splitlines()
    assert code == 2 and len(lines) == 1 and "ulimit -v 3000000" in lines[0], lines


def test_two_class_folders_that_read_as_one_name_are_refused(tmp_path, monkeypatch, capsys):
    """A folder named with the byte 0xff beside one named with the four characters \\xff: both
    were listed as dog\\xff, and the cache was refused and rewritten on every command."""
    import os

    from PIL import Image

    for split in (b"train", b"test"):
        for name in (b"dog\xff", b"dog\\xff"):
            folder = os.path.join(os.fsencode(tmp_path), b"images", split, name)
            os.makedirs(folder)
            Image.new("RGB", (8, 8), (1, 2, 3)).save(os.path.join(folder, b"a.png"))
    monkeypatch.setenv("TRICKLAB_CACHE", str(tmp_path / "cache"))
    args = ["data", "show", "imagefolder", "--data-dir", str(tmp_path / "images")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "read as one name, dog\\xff" in err, err
    assert not list((tmp_path / "cache").rglob("*.npz"))


def test_a_umask_that_takes_the_owners_write_permission_is_one_line(tmp_path):
    """umask 0277: ablate and sweep made a read-only study folder, could not make their storage
    in it ("unable to open database file"), and the rerun refused the folder."""
    import os

    from test_cli import tricklab

    out = tmp_path / "study"
    args = ["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.05", "--out", str(out)]
    code, _, err = tricklab(args, preexec_fn=lambda: os.umask(0o277))
    lines = err.decode().strip().splitlines()
    assert code == 2 and len(lines) == 1 and "the umask is 0277" in lines[0], lines
    assert not out.exists()


def test_rows_with_nothing_to_compare_say_why_in_words():
    """A reference with no complete run left every other row's verdicts blank, and a row with no
    complete run too."""
    from tricklab.experiments.stats import config_stats

    def run(config: str, seed: int, status: str = "complete") -> dict:
        done = status == "complete"
        return {
            "config_id": config, "seed": seed, "status": status, "trial": seed,
            "accuracy": 0.5 + seed / 100 if done else None,
            "train_seconds": 1.0 + seed / 10 if done else None,
        }  # fmt: skip

    records = [
        *(run("baseline", s) for s in range(3)),
        *(run("broken", s, "diverged") for s in range(3)),
        *(run("other", s) for s in range(3)),
    ]
    rows = {r.config_id: r for r in config_stats(records)}
    assert rows["broken"].verdict == rows["broken"].time_verdict == "no complete run"
    assert rows["other"].verdict == "within noise"
    rows = {r.config_id: r for r in config_stats(records, reference="broken")}
    assert rows["broken"].verdict == "reference"
    assert rows["baseline"].verdict == rows["other"].time_verdict == "no reference run"


def test_names_in_markdown_and_latex_tables_show_as_they_are():
    """`<b>`, backticks and `*` were written raw into `--format md` (markup when rendered; `<!--`
    hid the rest), and `|` into LaTeX (a dash in OT1 fonts)."""
    from tricklab.report.table_writers import TableData, to_latex, to_markdown

    name = "run.wandb_project=a|b*c*`x`<!--<b>\\~~s~~[l](http://e)&lt;"
    table = TableData("t", ["config", "n"], [[name, "[0.1, 0.2]"]], ["l", "r"])
    row = to_markdown(table).splitlines()[2]
    escaped = "a\\|b\\*c\\*\\`x\\`&lt;!--&lt;b&gt;\\\\\\~\\~s\\~\\~[l]\\(http://e)&amp;lt;"
    assert row == f"| run.wandb_project={escaped} | [0.1, 0.2] |"
    assert "a\\textbar{}b" in to_latex(table) and "|b" not in to_latex(table)


def test_a_resume_that_runs_nothing_keeps_the_record_of_the_call_that_trained(tmp_path):
    """Its own load average replaced the study's, and `results` then blamed a busy machine at
    "the start of a run" that never happened."""
    from tricklab.experiments import AblationPlan, ablate
    from tricklab.experiments.reading import study_results

    plan = AblationPlan(
        load_recipe("speedrun94", TINY), {"optim.lr": [0.05]}, 1, study="s", out_dir=str(tmp_path)
    )
    first = ablate(plan)
    again = ablate(plan)
    assert first.ran == 2 and again.ran == 0
    assert again.provenance["started_at"] == first.provenance["started_at"]
    meta, _ = study_results("s", out_dir=str(tmp_path))
    assert meta["provenance"]["started_at"] == first.provenance["started_at"]


def test_an_ablation_from_python_checks_the_environment_as_the_command_does(tmp_path):
    """From Python, umask 0277 made a read-only study folder and every run failed."""
    import os

    from tricklab.experiments import AblationPlan, ablate

    plan = AblationPlan(
        load_recipe("speedrun94", TINY), {"optim.lr": [0.05]}, 1, study="s",
        out_dir=str(tmp_path / "study"),
    )  # fmt: skip
    old = os.umask(0o277)
    try:
        with pytest.raises(TrickLabError, match="the umask is 0277"):
            ablate(plan)
    finally:
        os.umask(old)
    assert not (tmp_path / "study").exists()


def test_the_thread_limit_counts_the_threads_torch_starts(monkeypatch):
    """torch takes MKL_NUM_THREADS before OMP_NUM_THREADS: a limit of 1 with MKL at 2 hung."""
    from tricklab.core.process_limits import check_process_limits

    monkeypatch.setenv("OMP_THREAD_LIMIT", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    with pytest.raises(TrickLabError, match="below the 2 threads"):
        check_process_limits()
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    check_process_limits()  # torch starts 1 thread: taken


def test_class_folders_that_only_look_alike_across_splits_are_refused(
    tmp_path, monkeypatch, capsys
):
    """train/a<0xff> and test/a\\xff (four characters) were merged into one class."""
    import os

    from PIL import Image

    for split, name in ((b"train", b"a\xff"), (b"test", b"a\\xff")):
        for folder in (name, b"b"):
            path = os.path.join(os.fsencode(tmp_path), b"images", split, folder)
            os.makedirs(path)
            Image.new("RGB", (8, 8), (1, 2, 3)).save(os.path.join(path, b"a.png"))
    monkeypatch.setenv("TRICKLAB_CACHE", str(tmp_path / "cache"))
    assert main(["data", "show", "imagefolder", "--data-dir", str(tmp_path / "images")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the test classes differ" in err, err


@pytest.mark.parametrize(
    ("flag", "values", "says"),
    [
        ("--compile", "off,auto", "--compile lists off and auto, which are both off on cpu"),
        ("--precisions", "32-true,32-true", "32-true"),
    ],
)
def test_profile_values_that_resolve_alike_are_refused(capsys, flag, values, says):
    """`--compile off,auto` on a CPU gave two rows alike; `--precisions auto,bf16-mixed` dropped
    one value without a word."""
    args = ["profile", "model", "airbench", "model.widths=[8,16,16]", "--batch-sizes", "2",
            "--repeats", "1", "--device", "cpu", flag, values]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_profile_commands_show_their_stages_in_a_log(capsys):
    """`profile model --repeats 100000` printed nothing for minutes, on a terminal or in a log."""
    args = ["profile", "model", "airbench", "model.widths=[8,16,16]", "--batch-sizes", "2",
            "--repeats", "3", "--device", "cpu"]  # fmt: skip
    assert main(args) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "timing 2 × 3 rounds ..." and "6 timed calls in" in lines[1], lines
    for quiet in ("--json", "--quiet"):  # stdout and stderr as without a display
        assert main([*args, quiet]) == 0
        captured = capsys.readouterr()
        assert captured.err == ""
        if quiet == "--json":
            json.loads(captured.out)  # the object alone


def test_a_selection_of_the_fields_in_markdown_does_not_claim_to_be_the_reference(capsys):
    """`tricks optim --format md` printed "Generated by `tricklab tricks --format md`: do not edit
    by hand" over a part of it."""
    assert main(["tricks", "optim", "--format", "md"]) == 0
    part = capsys.readouterr().out
    assert "do not edit by hand" not in part and "A selection of the fields" in part
    assert main(["tricks", "--format", "md"]) == 0
    assert "do not edit by hand" in capsys.readouterr().out
