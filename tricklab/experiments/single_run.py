"""One run of an experiment: train a recipe (in its run folder) and return the record a trial
stores, whatever way the run ends; and the reporter that lets Optuna's pruner stop it."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from tricklab.core.errors import MachineError, call_hook
from tricklab.core.status import COMPLETE_STATUSES, Status
from tricklab.core.stopping import StopRequest
from tricklab.core.version import __version__
from tricklab.experiments.rundirs import RUN_DIR_ATTR
from tricklab.experiments.stats import headline_accuracy

TrainFn = Callable[..., Any]  # train(recipe, *, out_dir=..., on_epoch=..., stop=...) -> RunResult


def train_one(
    recipe: Any,
    train_fn: TrainFn,
    stop: StopRequest,
    on_epoch: Callable[[dict, int], None] | None = None,
    out_dir: Path | None = None,
) -> dict[str, Any]:
    """Train one recipe (in `out_dir`, when given) and return its run record; never raises for a
    run that ended.

    The record is the RunResult's dict plus `accuracy` (and `run_dir`); its status is the one
    `train()` gave (see `api.run_end`), or `pruned` when `on_epoch` raised optuna.TrialPruned. An
    interrupted run is recorded too (the caller stores it, then stops). `on_epoch(row,
    epoch_number)` sees each epoch's metrics.
    """
    from tricklab.training.api import RunInterrupted, run_end  # torch, imported when a run starts

    epochs: list[dict] = []

    def record_epoch(row: dict) -> None:
        epochs.append(dict(row))
        if on_epoch is not None:
            with stop.deferred():  # the pruner's report, a storage write: never cut halfway
                on_epoch(row, len(epochs))

    start = time.perf_counter()
    folder = {} if out_dir is None else {"out_dir": out_dir}
    try:
        with stop.deferred(False):  # the run alone: a signal stops it at once, not its record
            made = call_hook(
                train_fn, "train_fn", recipe, on_epoch=record_epoch, stop=stop, **folder
            )
        record = made.to_dict()
    except RunInterrupted as stopped:
        record = stopped.result.to_dict()
    except optuna.TrialPruned as exc:
        record = _unfinished_record(recipe, epochs, start, Status.PRUNED, str(exc) or None)
    except MachineError:  # every run would meet it: the study stops, one line
        raise
    except (Exception, KeyboardInterrupt) as exc:  # a train_fn other than train() raised
        record = _unfinished_record(recipe, epochs, start, *run_end(exc, stop))
    record["accuracy"] = headline_accuracy(record)
    record["target_accuracy"] = recipe.get("run.target_accuracy")
    if out_dir is not None:
        record[RUN_DIR_ATTR] = str(out_dir)
    if record["status"] in COMPLETE_STATUSES and record["accuracy"] is None:
        record.update(status=Status.FAILED, error="the run finished without a validation accuracy")
    return _jsonable(record)


def _unfinished_record(
    recipe: Any, epochs: list[dict], start: float, status: str, error: str | None
) -> dict[str, Any]:
    """The record of a run that left no RunResult: what the epochs it finished show."""
    from tricklab.measure.hardware import hardware_fingerprint  # torch
    from tricklab.training.setup import resolve_device  # torch

    return {
        "status": status,
        "error": error,
        "recipe": recipe.to_dict(),
        "epochs": epochs,
        "wall_seconds": time.perf_counter() - start,
        "train_seconds": epochs[-1].get("train_seconds", 0.0) if epochs else 0.0,
        "tricklab_version": __version__,
        "hardware": hardware_fingerprint(resolve_device(recipe.run.device)),
    }


def _jsonable(data: Any) -> Any:
    def default(value: Any) -> Any:
        item = getattr(value, "item", None)  # numpy / torch scalars
        return item() if callable(item) else str(value)

    return json.loads(json.dumps(data, default=default))


def pruning_reporter(trial: optuna.Trial, recipe: Any) -> Callable[[dict, int], None]:
    """Report each epoch's val_acc to the study's pruner; raise TrialPruned when it says so,
    except after the last epoch: a run that has finished is kept, not thrown away."""
    last_epoch = math.ceil(recipe.run.epochs)

    def on_epoch(row: dict, epoch: int) -> None:
        accuracy = row.get("val_acc")
        if accuracy is None:
            return
        trial.report(float(accuracy), epoch)
        if epoch < last_epoch and trial.should_prune():
            raise optuna.TrialPruned(f"pruned after epoch {epoch} (val_acc {accuracy:.4f})")

    return on_epoch
