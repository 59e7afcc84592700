"""Progress (issue 18): a bar per batch within each epoch, a bar while a dataset is decoded and
`run k/N` of a speedrun; plain lines on a non-terminal; nothing with --quiet or from the library;
the training it watches is unchanged and never read from the device for it."""

import io
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from rich.console import Console
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main
from tricklab.core.progress import ProgressDisplay, clock, current
from tricklab.data.sources import load_dataset
from tricklab.recipe.schema import load_recipe
from tricklab.training import api, loop
from tricklab.training.api import train

TINY = [*TINY_SYNTHETIC, "run.epochs=2"]  # 256 images in 4 batches of 64, 2 epochs


def terminal() -> tuple[Console, io.StringIO]:
    """A console that draws bars as on a terminal, into a string."""
    sink = io.StringIO()
    return Console(file=sink, force_terminal=True, width=120), sink


def plain() -> tuple[Console, io.StringIO]:
    sink = io.StringIO()
    return Console(file=sink, force_terminal=False, width=200), sink


def test_train_on_a_non_terminal_prints_a_plain_line_per_epoch_and_no_carriage_return(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "tricklab", "train", *TINY, "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "\r" not in out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("epoch ")]
    assert [line.split(",")[0] for line in lines] == ["epoch 1/2", "epoch 2/2"]
    assert all("img/s" in line and "elapsed, eta" in line for line in lines)
    assert "run complete" in out.stdout


def test_quiet_train_prints_no_progress_but_the_result(tmp_path, capsys):
    assert main(["train", *TINY, "--out", str(tmp_path / "run"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "epoch 1/2" not in captured.err and "train loss" not in captured.err
    assert "run complete" in captured.out and "val acc" in captured.out


def test_speedrun_says_run_k_of_n_with_elapsed_and_eta_and_quiet_silences_it(tmp_path, capsys):
    args = ["speedrun", *TINY, "run.epochs=1", "tricks.precision=32-true", "--runs", "2"]
    args += ["--warmup-epochs", "1"]
    assert main([*args, "--out", str(tmp_path / "loud")]) == 0
    err = capsys.readouterr().err.splitlines()
    starts = [line for line in err if " starts" in line]
    assert starts[0] == "warm-up run (not counted) starts"
    assert starts[1].startswith("run 1/2 starts; ") and "elapsed, eta" in starts[1]
    assert starts[2].startswith("run 2/2 starts; ") and "eta -:--:--" not in starts[2]
    assert sum(line.startswith("epoch 1/1") for line in err) == 3  # warm-up + 2 runs
    assert main([*args, "--out", str(tmp_path / "quiet"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "starts" not in captured.err and "epoch 1/1" not in captured.err
    assert "seed" not in captured.out.splitlines()[0]  # no per-run table header either
    assert "mean ± std" in captured.out  # the summary still prints


def test_the_library_prints_nothing_and_shows_no_display(capsys):
    assert current() is None
    result = train(load_recipe(None, TINY))
    assert result.status == "complete"
    assert capsys.readouterr() == ("", "")


def test_a_run_with_the_display_trains_exactly_as_one_without(monkeypatch):
    recipe = load_recipe(None, TINY)
    bare = train(recipe)
    console, sink = terminal()
    with ProgressDisplay(console, animate=True):
        shown = train(recipe)
    assert "epoch 1/2" in sink.getvalue() or "epoch 2/2" in sink.getvalue()  # really drawn
    keys = ("step", "train_loss", "train_acc", "val_loss", "val_acc", "lr")
    assert [[row[k] for k in keys] for row in shown.epochs] == [
        [row[k] for k in keys] for row in bare.epochs
    ]
    assert (shown.val_acc, shown.val_loss) == (bare.val_acc, bare.val_loss)


@pytest.mark.parametrize("animate", [True, False], ids=["bars", "plain"])
def test_the_display_reads_no_device_value_and_adds_no_sync(monkeypatch, animate):
    """Every .item(), .tolist() and loop sync of a run, counted with and without the display:
    the same counts (on a GPU each would stall the queue)."""
    counts = {"item": 0, "tolist": 0, "sync": 0}
    real_item, real_tolist, real_sync = torch.Tensor.item, torch.Tensor.tolist, loop.synchronize

    def counted(name, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(torch.Tensor, "item", counted("item", real_item))
    monkeypatch.setattr(torch.Tensor, "tolist", counted("tolist", real_tolist))
    monkeypatch.setattr(loop, "synchronize", counted("sync", real_sync))
    monkeypatch.setattr(api, "needs_warm_up", lambda tricks, device: False)  # once per recipe
    recipe = load_recipe(None, TINY)
    train(recipe)
    without = dict(counts)
    counts.update(item=0, tolist=0, sync=0)
    console, _ = terminal() if animate else plain()
    with ProgressDisplay(console, animate=animate):
        train(recipe)
    assert counts == without and without["tolist"] > 0  # the loop's own reads were counted


def test_the_bar_shows_epoch_batches_images_per_second_and_the_runs_eta():
    console, sink = terminal()
    display = ProgressDisplay(console, animate=True)
    batches = [(torch.zeros(8, 3, 4, 4), torch.zeros(8, dtype=torch.long))] * 4
    handed = list(display.batches(iter(batches), epoch=0, epochs=3, per_epoch=4, total_steps=12))
    assert len(handed) == 4
    console.print(display)
    drawn = sink.getvalue()
    assert "epoch 1/3" in drawn and "4/4" in drawn and "img/s" in drawn and "eta" in drawn
    run = display._training
    assert (run.steps, run.epoch_images) == (4, 32)
    assert run.eta_seconds(run.start + 2.0) == pytest.approx(4.0)  # 4 steps in 2 s, 8 to go
    display.epoch_done({"step": 4, "images_per_second": 1234.0})  # the row's synced rate stays
    console.print(display)
    assert "1,234 img/s" in sink.getvalue()


def test_the_runs_bar_counts_runs_done_after_the_warm_up():
    console, sink = terminal()
    display = ProgressDisplay(console, animate=True)
    display.start_runs(2, warmup=True)
    labels = [display._runs.label()]
    for counted in (False, True, True):
        display.run_done(counted)
        labels.append(display._runs.label())
    assert labels == ["warm-up run (not counted)", "run 1/2", "run 2/2", "runs done"]
    console.print(display)
    assert "runs done" in sink.getvalue() and "2/2" in sink.getvalue()


def test_decoding_a_dataset_shows_plain_start_and_end_lines(tmp_path):
    rng = np.random.default_rng(0)
    for split, count in (("train", 3), ("test", 2)):
        for name in ("ant", "bee"):
            folder = tmp_path / "data" / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    console, sink = plain()
    with ProgressDisplay(console, animate=False):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")  # cached
    lines = sink.getvalue().splitlines()
    assert lines[0] == "decoding imagefolder ..."
    assert lines[1].startswith("decoding imagefolder: done, 10 images in ")
    assert len(lines) == 2  # the second load reads the cache: nothing to show


def test_decoding_draws_a_bar_on_a_terminal(tmp_path):
    console, sink = terminal()
    display = ProgressDisplay(console, animate=True)
    with display.decoding("decoding imagefolder"):
        tick = display.decode_ticker(10)
        for _ in range(4):
            tick()
        console.print(display)
    assert "decoding imagefolder" in sink.getvalue() and "4/10" in sink.getvalue()


def test_clock_reads_hours_minutes_seconds():
    assert [clock(s) for s in (0, 59.6, 3725, None, float("inf"))] == [
        "0:00:00",
        "0:01:00",
        "1:02:05",
        "-:--:--",
        "-:--:--",
    ]
