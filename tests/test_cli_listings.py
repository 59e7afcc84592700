"""`tricklab tricks GROUP / --search WORD` in 80 columns, and what `tricklab train` prints."""

import json
import os
import re
import subprocess
import sys

import pytest
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.common import make_console
from tricklab.cli.main import main
from tricklab.recipe.schema import field_table

TINY = [*TINY_SYNTHETIC, "run.epochs=1"]


def keys_of(capsys) -> list[str]:
    return [row["key"] for row in json.loads(capsys.readouterr().out)]


def test_a_group_lists_only_its_fields(capsys):
    assert main(["tricks", "optim", "--json"]) == 0
    keys = keys_of(capsys)
    assert keys == [r["key"] for r in field_table() if r["key"].startswith("optim.")]
    assert "optim.lr" in keys


def test_search_finds_a_word_in_keys_docs_and_values_whatever_its_case(capsys):
    assert main(["tricks", "--search", "EMA", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"tricks.ema_decay", "tricks.ema_every"} <= {r["key"] for r in rows}
    assert all("ema" in json.dumps(r).lower() for r in rows)
    assert main(["tricks", "--search", "adamw", "--json"]) == 0  # a choice, not in the key
    assert "optim.name" in keys_of(capsys)


def test_search_within_a_group(capsys):
    assert main(["tricks", "aug", "--search", "cutout", "--json"]) == 0
    assert keys_of(capsys) == ["aug.cutout", "aug.cutout_inside"]


def test_an_unknown_group_is_one_line_exit_2(capsys):
    assert main(["tricks", "optimizer"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown group 'optimizer'; did you mean 'optim'?" in err[0]


def test_a_search_that_finds_nothing_says_so_and_exits_0(capsys):
    """Eleventh hostile round: exit 1 (kept for failed runs) with no `error:` on stderr."""
    assert main(["tricks", "--search", "no-such-word"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "no recipe fields mentioning 'no-such-word'" in out
    assert main(["tricks", "--search", "no-such-word", "--json"]) == 0
    assert capsys.readouterr().out.strip() == "[]"


def test_the_full_list_fits_80_columns_and_never_cuts_a_key():
    env = {**os.environ, "COLUMNS": "80"}
    out = subprocess.run(
        [sys.executable, "-m", "tricklab", "tricks"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    words = set(re.findall(r"[\w.]+", out.stdout))
    assert all(r["key"] in words for r in field_table())  # every key whole on one line
    assert "…" not in out.stdout


def test_train_output_says_which_accuracy_has_tta_and_labels_the_final_lr(tmp_path, capsys):
    assert main(["train", *TINY, "tricks.tta=flip", "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "val acc (no TTA)" in out and "val acc (TTA flip)" in out
    assert "final lr" in out
    assert "no TTA" in err and "end lr" in err  # the epoch table's columns


def test_models_refuses_a_model_whose_weights_do_not_fit_before_building_it(monkeypatch, capsys):
    """As train and profile model do: built for real, it would be killed by the kernel or fail
    in the allocator with a traceback."""
    from tricklab.training import model_memory

    monkeypatch.setattr(model_memory, "device_memory_bytes", lambda device: 1 << 20)  # 1 MiB
    assert main(["models", "resnet18", "model.width=0.25"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "does not fit in memory" in err, err
    assert "0.7 M parameters" in err and "make the model narrower" in err


@pytest.mark.parametrize("columns", ["0", "5"])
def test_a_terminal_width_of_almost_nothing_still_prints_the_listing(columns):
    """rich prints nothing at all at COLUMNS=0 (a finished `train` said nothing) and a letter
    per line at 5: below 20 columns the output is laid out at 80."""
    env = {**os.environ, "COLUMNS": columns}
    done = subprocess.run(
        [sys.executable, "-m", "tricklab", "recipes"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "speedrun94" in done.stdout and max(map(len, done.stdout.splitlines())) > 40


def test_a_narrow_but_real_terminal_keeps_its_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "30")
    assert make_console().width == 30


def test_models_shows_an_own_models_docstring_with_its_escapes_as_text(
    tmp_path, monkeypatch, capsys
):
    """Seventh hostile round: a factory's docstring went to the terminal raw (a cursor code in it
    could rewrite earlier lines)."""
    (tmp_path / "evil_doc.py").write_text(
        "from torch import nn\n\n\ndef net(num_classes, in_channels=3, image_size=32):\n"
        '    "\\x1b[1A\\x1b[2KRED first line"\n'
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * image_size**2, num_classes))\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["models", "evil_doc:net"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[1A\\x1b[2KRED first line" in out
