"""The command line's flags and messages: no abbreviated flags, a did-you-mean for an unknown one,
what an ablation's plan drops said, errors that say how to fix them, bounds shown as taken."""

from __future__ import annotations

import argparse

import pytest
from tiny_recipe import TINY_SYNTHETIC as TINY

from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.recipe.reference import bounds
from tricklab.recipe.schema import field_table, load_recipe


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["demo", "--seed", "3"], "did you mean --seeds?"),
        (["results", "ab1", "--form", "md"], "did you mean --format?"),
        (["ablate", "--seed", "5", "--vary", "optim.lr=1"], "did you mean --seeds?"),
        (["tricks", "--js"], "did you mean --json?"),
    ],
)
def test_an_abbreviated_flag_is_refused_naming_the_full_one(argv, hint, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    line = error_line(capsys)
    assert "unrecognized arguments" in line and hint in line


def test_an_unknown_flag_names_the_closest_flag_of_its_own_command(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["profile", "loader", "--jsn"])
    assert stop.value.code == 2
    line = error_line(capsys)
    assert "tricklab profile loader: unrecognized arguments: --jsn; did you mean --json?" in line


def test_every_parser_and_sub_parser_refuses_abbreviations():
    from tricklab.cli.main import build_parser

    def walk(parser):
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    yield from walk(child)

    parsers = list(walk(build_parser()))
    assert len(parsers) > 10 and all(not p.allow_abbrev for p in parsers)


def dry_ablate(capsys, tmp_path, *vary: str, grid: bool = False) -> tuple[str, str]:
    argv = ["ablate", "--baseline", *TINY, "--seeds", "1", "--dry-run", "--out", str(tmp_path)]
    argv += [w for v in vary for w in ("--vary", v)] + (["--grid"] if grid else [])
    assert main(argv) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_a_varied_value_equal_to_the_baselines_is_said_and_the_plan_is_the_baseline_alone(
    capsys, tmp_path
):
    out, err = dry_ablate(capsys, tmp_path, "tricks.label_smoothing=0")
    assert "plan: 1 config × 1 seed = 1 run" in out
    assert (
        "note: --vary tricks.label_smoothing=0 is the baseline's value: no configuration of its own"
        in err
    )
    assert "the plan is the baseline alone" in err


def test_a_value_listed_twice_is_said_once_run(capsys, tmp_path):
    out, err = dry_ablate(capsys, tmp_path, "optim.lr=0.3,0.3,0.30")
    assert "plan: 2 configs × 1 seed = 2 runs" in out
    assert "note: --vary optim.lr lists 0.3 3 times (0.3, 0.3, 0.30): run once" in err
    assert "baseline alone" not in err


def test_a_grid_takes_the_baselines_value_without_a_note(capsys, tmp_path):
    _, err = dry_ablate(capsys, tmp_path, "tricks.label_smoothing=0,0.2", grid=True)
    assert "note" not in err


def test_a_batch_larger_than_the_split_with_drop_last_says_how_to_fix(capsys, tmp_path):
    words = [*TINY, "data.train_size=10", "loader.batch_size=50", "loader.drop_last=true"]
    assert main(["train", "--out", str(tmp_path / "r"), *words]) == 2
    line = error_line(capsys)
    assert "gives no batches" in line
    assert "loader.batch_size" in line and "loader.drop_last=false" in line


def test_a_list_field_given_a_bare_word_is_told_to_write_a_list():
    with pytest.raises(TrickLabError, match=r"expected list\[str\], a list even of one: \[jsonl\]"):
        load_recipe(None, ["run.loggers=jsonl"])


def test_an_empty_recipe_file_is_said_to_be_empty(tmp_path, capsys):
    (tmp_path / "empty.yaml").write_text("")
    assert main(["train", str(tmp_path / "empty.yaml")]) == 2
    line = error_line(capsys)
    assert "is empty" in line and "UTF-8" not in line


def test_an_empty_profile_file_is_said_to_be_empty(tmp_path, capsys):
    (tmp_path / "empty.json").write_text("")
    assert main(["report", "--profile", str(tmp_path / "empty.json")]) == 2
    line = error_line(capsys)
    assert "is empty" in line and "UTF-8" not in line and "Expecting value" not in line


def test_open_bounds_are_shown_as_open():
    rows = {r["key"]: r for r in field_table()}
    assert bounds(rows["run.epochs"]) == " in (0, 100000]"
    assert bounds(rows["tricks.ema_decay"]) == " in [0, 1)"
    assert bounds(rows["tricks.label_smoothing"]) == " in [0, 1]"


def test_every_bound_shown_is_taken_or_refused_as_shown():
    for row in field_table():
        for end in ("minimum", "maximum"):
            if row[end] is None:
                continue
            value = f"[{row[end]}]" if row["type"].startswith("list") else row[end]
            # a bound may break a rule tying it to another field: only its own refusal counts
            try:
                load_recipe(None, [f"{row['key']}={value}"])
                refused = ""
            except TrickLabError as exc:
                refused = str(exc)
            exclusive = row["min_exclusive" if end == "minimum" else "max_exclusive"]
            own = f"{row['key']}={value} must be" in refused
            assert own == exclusive, (row["key"], end, refused)
