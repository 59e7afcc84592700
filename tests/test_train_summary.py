"""What `tricklab train` prints when a run ends: one accuracy format, record seconds only where
airbench's definition applies (no training here: fixed results)."""

from types import SimpleNamespace

from rich.console import Console

from tricklab.cli.main import EpochView, print_result
from tricklab.core.progress import percent


def result(**changes):
    base = dict(
        status="complete", recipe={"tricks": {"tta": "flip"}}, epochs=[{"lr": 0.01}],
        val_acc=0.254, val_acc_tta=0.2612, val_loss=2.1, train_seconds=12.5, record_seconds=14.0,
        compile_seconds=None, wall_seconds=20.0, time_to_target_seconds=None,
        images_per_second=1000.0, peak_memory_bytes=None, params=1000, forward_macs=5000,
        error=None, stopped_epoch=None, resolved={},
    )  # fmt: skip
    return SimpleNamespace(**{**base, **changes})


def test_the_run_summary_shows_accuracy_in_percent_as_the_progress_line_does(capsys):
    print_result(result())
    out = capsys.readouterr().out
    assert percent(0.254) == "25.40%" and "25.40%" in out and "26.12%" in out
    assert "0.2540" not in out


def test_record_seconds_show_only_for_a_recipe_with_airbenchs_definition(capsys):
    print_result(result(), "speedrun94")
    assert "record seconds (airbench's)" in capsys.readouterr().out
    for own in (None, "my_recipe.yaml", "resnet18-fast"):
        print_result(result(), own)
        assert "record seconds" not in capsys.readouterr().out


def test_the_epoch_table_shows_accuracy_in_percent():
    view = EpochView()
    view({"epoch": 1, "train_loss": 1.9, "train_acc": 0.31, "val_loss": 2.0, "val_acc": 0.254,
          "lr": 0.1, "epoch_seconds": 3.2, "images_per_second": 900.0})  # fmt: skip
    console = Console(width=120, record=True, color_system=None)
    console.print(view.table)
    text = console.export_text()
    assert "25.40%" in text and "31.00%" in text and "0.2540" not in text
