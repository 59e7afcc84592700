"""run.loggers: each logger writes what it promises in the run folder, read back with its own tools
(csv, TensorBoard's EventAccumulator, W&B's offline run file); a bad name or a missing package is
one line before anything is written."""

import csv
import json
import sys

import pytest
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.recipe.schema import load_recipe
from tricklab.training import loggers as loggers_module
from tricklab.training.api import RunInterrupted, train

# Two epochs, the first not evaluated: an empty validation cell where metrics.jsonl has null.
TWO_EPOCHS = [*TINY_SYNTHETIC, "run.epochs=2", "run.eval_every=2"]


def tiny(*overrides: str):
    return load_recipe(None, [*TWO_EPOCHS, *overrides])


def jsonl_rows(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_csv_has_a_row_per_epoch_with_the_values_of_metrics_jsonl(tmp_path):
    train(tiny("run.loggers=[jsonl, csv]"), out_dir=tmp_path)
    with (tmp_path / "metrics.csv").open(newline="") as handle:
        reader = csv.DictReader(handle)
        header, rows = reader.fieldnames, list(reader)
    expected = jsonl_rows(tmp_path)
    assert header == list(expected[0])  # the first row's keys, in order
    assert [int(row["epoch"]) for row in rows] == [1, 2]
    for row, want in zip(rows, expected, strict=True):
        for key, value in want.items():
            assert row[key] == ("" if value is None else row[key])
            if value is not None:
                assert float(row[key]) == value  # written in full precision
    assert rows[0]["val_acc"] == "" and rows[1]["val_acc"] != ""


def test_tensorboard_event_file_has_each_metric_per_epoch_and_the_recipe(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    recipe = tiny("run.loggers=[jsonl, tensorboard]")
    result = train(recipe, out_dir=tmp_path)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    expected = jsonl_rows(tmp_path)
    for key in ("train_loss", "train_acc", "lr", "train_seconds", "images_per_second"):
        scalars = events.Scalars(key)
        assert [s.step for s in scalars] == [1, 2]
        assert [s.value for s in scalars] == pytest.approx([r[key] for r in expected], rel=1e-6)
    (val_acc,) = events.Scalars("val_acc")  # evaluated at epoch 2 only
    assert val_acc.step == 2 and val_acc.value == pytest.approx(expected[1]["val_acc"])
    assert "epoch" not in events.Tags()["scalars"]  # it is the step
    (final,) = events.Scalars("final/val_acc")  # the hparams' metric, at the end
    assert final.value == pytest.approx(result.val_acc)
    (text,) = events.Tensors("recipe/text_summary")
    assert b"loggers:" in text.tensor_proto.string_val[0]  # the recipe's YAML


def wandb_records(path):
    """The protobuf records of a .wandb file (LevelDB log format: 32 KiB blocks of chunks with
    a 7-byte header: CRC, length, type 1 full / 2 first / 3 middle / 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data, records, pending = path.read_bytes(), [], b""
    assert data[:4] == b":W&B"
    pos = 7
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def values(items):
    """W&B's key/value items as a dict (a key is `key` or its path in `nested_key`)."""
    return {(i.key or ".".join(i.nested_key)): json.loads(i.value_json) for i in items}


def offline_wandb(monkeypatch, home):
    """W&B in offline mode with its folders under `home`: no network, no account."""
    for name, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(home / name))


def test_wandb_offline_run_holds_the_config_and_each_epochs_history(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    offline_wandb(monkeypatch, tmp_path / "home")
    out = tmp_path / "run"
    result = train(tiny("run.loggers=[wandb]", "run.wandb_project=loggers-test"), out_dir=out)
    assert not (out / "metrics.jsonl").exists()  # only the loggers asked for
    (run_file,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    records = {}  # record type -> its records, in order
    for record in wandb_records(run_file):
        records.setdefault(record.WhichOneof("record_type"), []).append(record)
    (run,) = [r.run for r in records["run"]]
    assert run.project == "loggers-test"
    config = values(run.config.update)  # the recipe, section by section
    assert config["run"]["loggers"] == ["wandb"] and config["model"]["name"] == "airbench"
    history = [values(r.history.item) for r in records["history"]]
    assert [h["epoch"] for h in history] == [1, 2]
    assert [h["_step"] for h in history] == [1, 2]
    assert [h["train_loss"] for h in history] == pytest.approx(
        [e["train_loss"] for e in result.epochs]
    )
    assert "val_acc" not in history[0] and history[1]["val_acc"] == pytest.approx(result.val_acc)
    summary = values(i for r in records["summary"] for i in r.summary.update)
    assert summary["status"] == "complete" and summary["val_acc"] == pytest.approx(result.val_acc)
    assert "exit" in records  # finished


@pytest.mark.parametrize("name", ["tensorboard", "wandb"])
def test_a_missing_package_is_one_line_naming_the_extra_before_anything_is_written(
    name, tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    out = tmp_path / "run"
    with pytest.raises(TrickLabError) as caught:
        train(tiny(f"run.loggers=[jsonl, {name}]"), out_dir=out)
    message = str(caught.value)
    assert f'pip install "tricklab[{name}]"' in message and "\n" not in message
    assert not out.exists()


def test_cli_a_missing_package_exits_2_with_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    out = tmp_path / "run"
    assert main(["train", *TWO_EPOCHS, "run.loggers=[tensorboard]", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith('pip install "tricklab[tensorboard]"') and "\n" not in err
    assert not out.exists()


def test_a_wandb_run_that_cannot_start_is_one_line_saying_how_to_log_in(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")

    def not_logged_in(**kwargs):
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "init", not_logged_in)
    with pytest.raises(TrickLabError, match="No API key configured.*WANDB_MODE=offline"):
        train(tiny("run.loggers=[jsonl, wandb]"), out_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # a setup error: no run recorded, nothing written


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_cli_a_wandb_that_cannot_start_exits_2_leaves_no_run_folder_and_the_rerun_works(
    tmp_path, monkeypatch, capsys
):
    wandb = pytest.importorskip("wandb")
    offline_wandb(monkeypatch, tmp_path / "home")
    working_init = wandb.init

    def not_logged_in(**kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty). call wandb.login(key=...)")

    out = tmp_path / "run"
    args = ["train", *TWO_EPOCHS, "run.loggers=[jsonl, csv, wandb]", "--out", str(out)]
    monkeypatch.setattr(wandb, "init", not_logged_in)
    assert main(args) == 2
    line = error_line(capsys)
    assert "run.loggers: wandb could not start: UsageError: api_key not configured" in line
    assert "`wandb login`, or WANDB_MODE=offline" in line
    assert not out.exists()

    monkeypatch.setattr(wandb, "init", working_init)  # logged in (offline here): the same command
    assert main(args) == 0
    assert json.loads((out / "result.json").read_text())["status"] == "complete"
    assert list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(jsonl_rows(out)) == 2


def test_any_exception_from_wandb_init_is_a_setup_error_naming_wandb(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")

    def broken(**kwargs):
        raise RuntimeError("wandb-core exited\nwith a long story")

    monkeypatch.setattr(wandb, "init", broken)
    out = tmp_path / "run"
    with pytest.raises(TrickLabError) as caught:
        train(tiny("run.loggers=[wandb]"), out_dir=out)
    assert str(caught.value).startswith("run.loggers: wandb could not start: RuntimeError: wandb")
    assert "\n" not in str(caught.value)
    assert not out.exists()


def test_cli_a_file_in_the_way_of_the_tensorboard_folder_exits_2_and_writes_nothing(
    tmp_path, capsys
):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    out.mkdir()
    (out / "tensorboard").write_text("not a folder")  # in the way of the writer's log dir
    args = ["train", *TWO_EPOCHS, "run.loggers=[jsonl, tensorboard]", "--out", str(out)]
    assert main(args) == 2
    line = error_line(capsys)
    # a logger's output already there is a run's (appended to, two runs would mix): refused
    # before the loggers start (the next test has a writer that cannot start)
    assert "already holds a run (tensorboard)" in line
    assert [p.name for p in out.iterdir()] == ["tensorboard"]  # the user's file, nothing of ours

    (out / "tensorboard").unlink()
    assert main(args) == 0
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))


def test_a_tensorboard_writer_that_cannot_start_leaves_no_run_folder(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    import torch.utils.tensorboard

    def unwritable(log_dir, **kwargs):
        raise PermissionError(13, "Permission denied", log_dir)

    monkeypatch.setattr(torch.utils.tensorboard, "SummaryWriter", unwritable)
    out = tmp_path / "run"
    with pytest.raises(TrickLabError, match="tensorboard could not start: PermissionError"):
        train(tiny("run.loggers=[jsonl, csv, tensorboard]"), out_dir=out)
    assert not out.exists()


class FailsMidRun:
    """A logger that starts, then fails when the first epoch is logged."""

    def __init__(self, out, recipe):
        pass

    def log_epoch(self, row):
        raise RuntimeError("the log server went away")

    def close(self, result):
        pass


def test_a_logger_failing_during_training_is_a_recorded_run_failure(tmp_path, monkeypatch):
    monkeypatch.setitem(loggers_module.ADAPTERS, "csv", FailsMidRun)
    result = train(tiny("run.loggers=[jsonl, csv]"), out_dir=tmp_path)
    assert result.status == "failed" and "the log server went away" in result.error
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "failed"


def test_an_unknown_or_repeated_logger_is_refused_with_the_choices():
    with pytest.raises(TrickLabError, match="did you mean 'tensorboard'.*jsonl, csv, tensorboard"):
        load_recipe(None, ["run.loggers=[tensorbord]"])
    with pytest.raises(TrickLabError, match="names csv twice"):
        load_recipe(None, ["run.loggers=[csv, jsonl, csv]"])
    assert load_recipe(None, []).run.loggers == ["jsonl"]


def test_loggers_need_a_run_folder(tmp_path):
    with pytest.raises(TrickLabError, match="csv write into the run folder.*out_dir"):
        train(tiny("run.loggers=[jsonl, csv]"))
    assert train(tiny("run.epochs=1")).status == "complete"  # jsonl alone: no folder, no file


class Recording:
    """A logger that records what it is given."""

    made: list = []

    def __init__(self, out, recipe):
        self.rows, self.closed_with = [], None
        Recording.made.append(self)

    def log_epoch(self, row):
        self.rows.append(row)

    def close(self, result):
        self.closed_with = result.status


def test_loggers_are_closed_when_the_run_is_interrupted(tmp_path, monkeypatch):
    monkeypatch.setitem(loggers_module.ADAPTERS, "csv", Recording)
    monkeypatch.setattr(Recording, "made", [])

    def interrupt(row):
        raise KeyboardInterrupt

    with pytest.raises(RunInterrupted):
        train(tiny("run.loggers=[csv]"), out_dir=tmp_path, on_epoch=interrupt)
    (logger,) = Recording.made
    assert [row["epoch"] for row in logger.rows] == [1]
    assert logger.closed_with == "interrupted"


def test_cli_train_writes_the_loggers_files(tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    args = ["train", *TWO_EPOCHS, "run.loggers=[csv,tensorboard]", "--out", str(out), "--json"]
    assert main(args) == 0
    assert (out / "metrics.csv").read_text().count("\n") == 3  # header and 2 epochs
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert not (out / "metrics.jsonl").exists()


@pytest.mark.parametrize(
    "value, message",
    [("[bogus]", "'bogus' is no logger"), ("csv", "expected list[str]"), ("[csv,csv]", "twice")],
)
def test_cli_a_bad_loggers_value_exits_2_with_one_line(value, message, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TWO_EPOCHS, f"run.loggers={value}", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not out.exists()
