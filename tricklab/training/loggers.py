"""Where each epoch's metrics go (`run.loggers`): thin adapters on the loop's per-epoch row.

jsonl: metrics.jsonl, a JSON line per epoch (the default). csv: metrics.csv, a row per epoch under
a header of the first row's keys (timm's summary.csv). tensorboard: tensorboard/, each numeric
metric a scalar at step=epoch, the recipe as text and hparams (`tensorboard --logdir runs/`).
wandb: a W&B run in wandb/ (online, or offline with WANDB_MODE=offline), the recipe as its config.

Every logger writes into the run folder. `RunLoggers` is made before the folder is claimed (bad
names and missing packages are refused with nothing written), opened once the data and model are
set up and closed when the run ends, however it ends, so that every file is flushed. A logger that
cannot start (W&B not logged in, a TensorBoard folder that cannot be made) is a setup error, as in
Lightning: one TrickLabError naming it and what to do, with what the loggers wrote removed, so the
same command runs once it is fixed; a logger failing later fails the run, which is recorded.

No torch here: the recipe checks logger names before torch is imported.
"""

from __future__ import annotations

import contextlib
import csv
import importlib
import io
import json
import math
import os
import shutil
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from tricklab.core.errors import TrickLabError
from tricklab.core.paths import append_line, is_disk_full
from tricklab.core.status import COMPLETE_STATUSES, Status
from tricklab.core.usercode import described
from tricklab.recipe.schema import LOGGER_NAMES

# The recipe (train/recipe.py) and the run's result (api.RunResult), not imported: both modules
# import this one.
Recipe = Any
RunResult = Any

# Loggers that need a package tricklab does not install; each is the extra of the same name.
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}
# What each logger makes in the run folder (removed when a logger cannot start).
WRITES = {
    "jsonl": "metrics.jsonl",
    "csv": "metrics.csv",
    "tensorboard": "tensorboard",
    "wandb": "wandb",
}
# What to do when a logger cannot start, after the reason.
START_HINTS = {
    "tensorboard": "the run folder's tensorboard/ must be a folder tricklab can make and write",
    "wandb": "`wandb login`, or WANDB_MODE=offline to log without an account",
}
# The result's final numbers that TensorBoard's hparams and W&B's summary show.
FINAL_METRICS = ("val_acc", "val_loss", "val_acc_tta", "train_seconds", "record_seconds")


def require_packages(names: Iterable[str]) -> None:
    """TrickLabError naming the extra to install when a logger's package is missing."""
    for name in names:
        if name in PACKAGES:
            try:
                importlib.import_module(PACKAGES[name])
            except ImportError:
                raise TrickLabError(
                    f"run.loggers: {name} needs the {PACKAGES[name]} package; "
                    f'pip install "tricklab[{name}]"'
                ) from None
            except Exception as exc:  # a broken install raising at import
                raise TrickLabError(
                    f"run.loggers: {name}'s package {PACKAGES[name]} cannot be imported "
                    f"({described(exc)}); reinstall it or drop {name}"
                ) from None


class Logger(Protocol):
    def log_epoch(self, row: dict) -> None: ...

    def close(self, result: RunResult | None) -> None: ...


class RunLoggers:
    """The recipe's loggers for one run writing in `out` (None: nothing written, as jsonl does
    without a run folder, or on a rank other than 0 under torchrun). Each gets the rows as
    metrics.jsonl holds them (NaN and infinities as None).

    Made before the run folder is claimed: a missing package, or a logger other than jsonl in a
    run without a folder (`has_folder`), is a TrickLabError then. `open(result)` at the run's
    start (a logger that cannot start is a TrickLabError, with what the loggers made removed),
    `log_epoch(row)` per epoch, `close()` at its end, however it ends (it reads the final
    numbers and status from `result`; closing twice is harmless)."""

    def __init__(self, recipe: Recipe, out: Path | None, *, has_folder: bool) -> None:
        names = list(recipe.run.loggers)
        needs_folder = [n for n in names if n != "jsonl"]
        if not has_folder and needs_folder:
            raise TrickLabError(
                f"run.loggers {', '.join(needs_folder)} write into the run folder and this run "
                "has none: give train() an out_dir, or set run.loggers=[jsonl]"
            )
        require_packages(names)
        self._recipe, self._out = recipe, out
        # W&B last: a local logger that cannot start then leaves no W&B run behind
        self._names = sorted(names, key=LOGGER_NAMES.index) if out is not None else []
        self._open: list[Logger] = []
        self._made: list[Path] = []  # the outputs `open` made (not there before this run)
        self._result: RunResult | None = None

    def open(self, result: RunResult) -> None:
        self._result = result
        out = self._out
        if out is None:  # no folder (or not rank 0): nothing to start
            return
        made = [out / WRITES[n] for n in self._names if not os.path.lexists(out / WRITES[n])]
        self._made = made
        for name in self._names:
            try:
                self._open.append(ADAPTERS[name](out, self._recipe))
            except Exception as exc:
                self._abandon(made)
                if is_disk_full(exc) or isinstance(exc, TrickLabError):
                    raise
                raise start_error(name, exc) from None

    def _abandon(self, made: list[Path]) -> None:
        """Close the loggers started so far and remove what they made: the run never started."""
        loggers, self._open = self._open, []
        for logger in reversed(loggers):
            with contextlib.suppress(Exception):
                logger.close(self._result)
        for path in made:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()

    def remove_outputs(self) -> None:
        """Close the loggers and remove the files and folders they made in this run (a full disk:
        the folder goes back to how it was, so the same run can go there again)."""
        self._abandon(self._made)

    def log_epoch(self, row: dict) -> None:
        for logger in self._open:
            logger.log_epoch(row)

    def close(self) -> None:
        """Close every open logger; one that fails to close is a warning, not the run's error."""
        loggers, self._open = self._open, []
        for logger in reversed(loggers):
            try:
                logger.close(self._result)
            except Exception as exc:
                warnings.warn(
                    f"run.loggers: closing {type(logger).__name__} failed: {exc}", stacklevel=2
                )


def start_error(name: str, exc: BaseException) -> TrickLabError:
    """One line naming the logger that could not start, why, and what to do."""
    text = str(exc).strip()
    why = f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
    hint = START_HINTS.get(name, "fix it, or leave it out of run.loggers")
    return TrickLabError(f"run.loggers: {name} could not start: {why} ({hint})")


def numeric_metrics(row: dict) -> dict[str, float]:
    """The row's numbers (None, text and flags left out)."""
    return {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def final_metrics(result: RunResult | None) -> dict[str, float]:
    if result is None:
        return {}
    values = {k: getattr(result, k) for k in FINAL_METRICS}
    return {k: v for k, v in values.items() if v is not None and math.isfinite(v)}


def flat_recipe(recipe: Recipe) -> dict[str, Any]:
    """`section.field -> value`, lists as text: what TensorBoard's hparams take."""
    return {
        f"{section}.{key}": str(value) if isinstance(value, list) else value
        for section, values in recipe.to_dict().items()
        for key, value in values.items()
    }


class JsonlLogger:
    """metrics.jsonl: the row as one JSON line, whole or not at all."""

    def __init__(self, out: Path, recipe: Recipe) -> None:
        self.path = out / "metrics.jsonl"
        self.path.touch()

    def log_epoch(self, row: dict) -> None:
        append_line(self.path, json.dumps(row))

    def close(self, result: RunResult | None) -> None:
        pass


class CsvLogger:
    """metrics.csv: a header of the first row's keys, then one row per epoch; an empty cell where
    metrics.jsonl has null (not evaluated)."""

    def __init__(self, out: Path, recipe: Recipe) -> None:
        self.path = out / "metrics.csv"
        self.columns: list[str] | None = None

    def log_epoch(self, row: dict) -> None:
        lines = []
        if self.columns is None:
            self.columns = list(row)
            lines.append(_csv_line(self.columns))
        lines.append(_csv_line([row.get(k) for k in self.columns]))  # None: empty
        append_line(self.path, "\n".join(lines))  # the header comes with the first row

    def close(self, result: RunResult | None) -> None:
        pass


def _csv_line(values: list) -> str:
    text = io.StringIO()
    csv.writer(text, lineterminator="").writerow(values)
    return text.getvalue()


class TensorBoardLogger:
    """tensorboard/: every numeric metric as a scalar at step=epoch (flushed each epoch), the
    recipe as text at the start, and at the end hparams with the final numbers (final/...)."""

    def __init__(self, out: Path, recipe: Recipe) -> None:
        # optional packages load by name when a logger is made (check_packages has seen them)
        tensorboard = importlib.import_module("torch.utils.tensorboard")
        self.recipe = recipe
        self.writer = tensorboard.SummaryWriter(log_dir=str(out / "tensorboard"))
        self.last_epoch = 0
        recipe_text = "".join(f"    {line}\n" for line in recipe.to_yaml().splitlines())
        self.writer.add_text("recipe", recipe_text)  # indented: a code block in Markdown
        self.writer.flush()

    def log_epoch(self, row: dict) -> None:
        self.last_epoch = row["epoch"]
        for key, value in numeric_metrics(row).items():
            if key != "epoch":
                self.writer.add_scalar(key, value, global_step=row["epoch"])
        self.writer.flush()  # TensorBoard shows each epoch as it ends

    def close(self, result: RunResult | None) -> None:
        try:
            finals = {f"final/{k}": v for k, v in final_metrics(result).items()}
            # run_name=".": the hparams go beside the scalars, one run in TensorBoard
            self.writer.add_hparams(
                flat_recipe(self.recipe), finals, run_name=".", global_step=self.last_epoch
            )
        finally:
            self.writer.close()


class WandbLogger:
    """A W&B run in the run folder's wandb/: the recipe as its config, the numeric metrics of
    each epoch at step=epoch, the final numbers and the status in its summary. The mode is
    W&B's own (WANDB_MODE: online, offline, disabled)."""

    def __init__(self, out: Path, recipe: Recipe) -> None:
        wandb = importlib.import_module("wandb")
        project = recipe.run.wandb_project or os.environ.get("WANDB_PROJECT") or "tricklab"
        # not logged in, no network, a bad setting: RunLoggers.open says so (START_HINTS)
        self.run = wandb.init(project=project, dir=str(out), config=recipe.to_dict())

    def log_epoch(self, row: dict) -> None:
        self.run.log(numeric_metrics(row), step=row["epoch"])

    def close(self, result: RunResult | None) -> None:
        status = result.status if result is not None else Status.FAILED
        self.run.summary.update({**final_metrics(result), "status": str(status)})
        self.run.finish(exit_code=0 if status in COMPLETE_STATUSES else 1)  # W&B: else failed


ADAPTERS: dict[str, type] = {
    "jsonl": JsonlLogger,
    "csv": CsvLogger,
    "tensorboard": TensorBoardLogger,
    "wandb": WandbLogger,
}
