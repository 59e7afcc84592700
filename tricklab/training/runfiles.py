"""What a run writes in its folder: claiming the folder, result.json (strict JSON), the checkpoint."""

from __future__ import annotations

import io
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tricklab.core.errors import TrickLabError
from tricklab.core.outputs import RESULT_FILE, RUN_FILES, check_not_another_commands
from tricklab.core.paths import (
    CLAIM_NAME,
    FolderClaim,
    atomic_write,
    claim_folder,
    claim_holder,
    disk_full_error,
    is_disk_full,
)
from tricklab.core.safeio import json_safe, parse_json, read_bounded_text, read_json
from tricklab.core.status import RETRY_STATUSES
from tricklab.recipe.schema import Recipe, load_recipe
from tricklab.training.loggers import WRITES as LOGGER_OUTPUTS

# What a run writes in its directory; a directory holding any of them is not reused.
RESULT_LIMIT = 64 << 20  # bytes of a result.json read back (its epochs' rows included)
# Recipe fields that say where a run's metrics go, whether its weights are saved and how long its
# ranks wait for each other, not what it trains: a rerun may change them and still take over.
NOT_IDENTITY = ("run.loggers", "run.wandb_project", "run.checkpoint", "run.dist_timeout_seconds")


@dataclass(frozen=True)
class UnfinishedRun:
    """The run in a folder that a run of the same recipe replaces: it ended failed, oom or
    interrupted (its result.json says so), or was killed (its claim file left, no result.json)."""

    status: str  # failed | oom | interrupted | killed
    epochs_done: int
    recipe: dict | None  # as it stored it (result.json's, else recipe.yaml's); None: none readable

    @property
    def epochs_planned(self) -> Any:
        return (self.recipe or {}).get("run", {}).get("epochs")

    def epochs_text(self) -> str:
        """`57 of 200 epochs`."""
        planned = self.epochs_planned
        of = f" of {planned:g}" if isinstance(planned, (int, float)) else ""
        return f"{self.epochs_done}{of} epoch{'' if self.epochs_done == 1 and not of else 's'}"

    def differs_from(self, recipe: Recipe) -> list[str]:
        """The recipe keys in which this run's recipe and `recipe` differ, apart from NOT_IDENTITY
        (["the recipe"] when its own cannot be read); [] when it is the same run."""
        if self.recipe is None:  # killed before its recipe.yaml: nothing of it to keep
            return ["the recipe"] if self.status != "killed" else []
        try:
            stored = _identity(Recipe.from_dict(self.recipe, source="the stored recipe"))
        except (TrickLabError, TypeError, ValueError, AttributeError):
            return ["the recipe"]
        wanted = _identity(recipe)
        return [k for k in sorted({*stored, *wanted}) if stored.get(k) != wanted.get(k)]


def _identity(recipe: Recipe) -> dict[str, Any]:
    """The recipe as flat `section.key` values, as JSON stores them, less NOT_IDENTITY."""
    data = json.loads(json.dumps(json_safe(recipe.to_dict())))
    flat = {f"{s}.{k}": v for s, fields in data.items() for k, v in fields.items()}
    return {k: v for k, v in flat.items() if k not in NOT_IDENTITY}


def unfinished_run(out: Path, killed: bool | None = None) -> UnfinishedRun | None:
    """The unfinished run in `out` (see UnfinishedRun), or None: no run there, or one that ended
    as it records. `killed`: whether its claim was found abandoned (None: a claim file whose
    process is gone, for a check made without claiming)."""
    result = out / RESULT_FILE
    if result.exists():
        try:
            data = read_json(result, RESULT_LIMIT, "a run's result.json")
        except TrickLabError:
            return None
        if not isinstance(data, dict) or data.get("status") not in RETRY_STATUSES:
            return None
        epochs = data.get("epochs")
        recipe = data.get("recipe") if isinstance(data.get("recipe"), dict) else None
        return UnfinishedRun(data["status"], len(epochs) if isinstance(epochs, list) else 0, recipe)
    if killed is None:
        killed = _claim_left_by_the_dead(out)
    names = dict.fromkeys((*RUN_FILES, *LOGGER_OUTPUTS.values()))
    if not killed or not any((out / name).exists() for name in names):
        return None
    try:
        recipe = load_recipe(out / "recipe.yaml").to_dict()
    except (TrickLabError, OSError):
        recipe = None
    return UnfinishedRun("killed", len(logged_epochs(out)), recipe)


def logged_epochs(out: Path) -> list[dict]:
    """The epoch rows of the run's metrics.jsonl (a line per epoch, each written whole), up to the
    first line that is no row; [] without a readable file (a FIFO, a folder, too large, not
    UTF-8: the one door in, core/safeio.py)."""
    try:
        text = read_bounded_text(out / "metrics.jsonl", RESULT_LIMIT, "tricklab metrics.jsonl")
    except TrickLabError:
        return []
    rows: list[dict] = []
    for line in text.splitlines():
        try:
            row = parse_json(line)
        except ValueError:
            break
        if not isinstance(row, dict) or not isinstance(row.get("epoch"), int):
            break
        rows.append(row)
    return rows


def _claim_text(out: Path) -> str:
    try:
        return (out / CLAIM_NAME).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _put_back_claim_file(out: Path, text: str) -> None:
    """A killed run's claim file, as it was, unless a new claim made one meanwhile."""
    try:
        fd = os.open(out / CLAIM_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _claim_left_by_the_dead(out: Path) -> bool:
    """Whether `out` holds a claim file naming a process that is gone (a killed run's)."""
    pid = _claim_text(out).strip()
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's live process
        return False
    return False


def other_recipe_error(out: Path, left: UnfinishedRun, differs: list[str]) -> TrickLabError:
    """The refusal of a run into `out`, which holds the unfinished run `left` of another recipe."""
    why = (
        "its recipe cannot be read"
        if differs == ["the recipe"]
        else "it differs in " + ", ".join(differs[:4]) + (", ..." if len(differs) > 4 else "")
    )
    return TrickLabError(
        f"run directory {out} holds an unfinished run of another recipe ({left.status}, "
        f"{left.epochs_text()}; {why}); only the same recipe run again replaces it: give another "
        "--out, or remove the folder"
    )


def make_run_dir(out: Path, recipe: Recipe | None = None) -> FolderClaim:
    """Make `out` and claim it for this run (paths.claim_folder: one run at a time), refusing it
    when another run writes there or a run is already in it. An unfinished run there (failed,
    oom, interrupted, killed) is replaced when it ran `recipe` (NOT_IDENTITY aside), refused when
    it ran another one (not checked without `recipe`)."""
    blocking = next((f for f in [out, *out.parents] if f.exists() and not f.is_dir()), None)
    if blocking is not None:
        raise TrickLabError(
            f"cannot make the run directory {out}: {blocking} is a file, not a folder"
        )
    check_not_another_commands(out, "a run", above=False)  # a study's runs are in its folder
    try:
        for attempt in range(3):  # a run whose setup failed may remove the folder meanwhile
            out.mkdir(parents=True, exist_ok=True)
            # A claim file is removed when its run ends, however it ends, unless the process was
            # killed (SIGKILL, the OOM killer, a lost rank's torchrun): such a run left its files.
            abandoned = _claim_text(out) if (out / CLAIM_NAME).exists() else None
            try:
                claim = claim_folder(out)  # also proves the folder writable
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(exc, out) from None
        raise TrickLabError(f"cannot write the run directory {out}: {exc.strerror}") from None
    if claim is None:
        raise TrickLabError(
            f"run directory {out} is being written by another run ({claim_holder(out)}); "
            "give another one"
        )
    # a logger's output there (metrics.csv, tensorboard/) is a run's too: appended to, it would mix
    names = dict.fromkeys((*RUN_FILES, *LOGGER_OUTPUTS.values()))  # metrics.jsonl is in both
    previous = [name for name in names if (out / name).exists()]
    killed = abandoned is not None and not (out / RESULT_FILE).exists()
    if previous and (killed or ended_unfinished(out)):
        left = unfinished_run(out, killed) if recipe is not None else None
        differs = left.differs_from(recipe) if left is not None and recipe is not None else []
        if differs:
            claim.release()
            if killed:  # its claim file back: the folder still reads as a killed run's
                _put_back_claim_file(out, abandoned)
            raise other_recipe_error(out, left, differs)
        _clear_killed_run(out)  # a run killed, failed or interrupted: the same command runs again
        previous = []
    if previous:
        claim.release()
        raise TrickLabError(
            f"run directory {out} already holds a run ({', '.join(previous)}); "
            "give another one or remove it"
        )
    return claim


def check_run_dir(out: Path, recipe: Recipe | None = None) -> UnfinishedRun | None:
    """What make_run_dir refuses that can be seen without writing: `out` a file, a folder holding
    a run that ended as it records, or an unfinished run of another recipe than `recipe` (before
    a data-parallel launch starts processes; before `train` says what it replaces). Returns the
    unfinished run a run of `recipe` would replace there, if any."""
    if out.exists() and not out.is_dir():
        raise TrickLabError(f"cannot make the run directory {out}: it is a file, not a folder")
    check_not_another_commands(out, "a run")
    if (out / RESULT_FILE).exists() and not ended_unfinished(out):
        previous = [name for name in RUN_FILES if (out / name).exists()]
        raise TrickLabError(
            f"run directory {out} already holds a run ({', '.join(previous)}); "
            "give another one or remove it"
        )
    left = unfinished_run(out) if out.is_dir() else None
    differs = left.differs_from(recipe) if left is not None and recipe is not None else []
    if differs:
        raise other_recipe_error(out, left, differs)
    return left


def ended_unfinished(out: Path) -> bool:
    """The folder's result.json says its run ended failed, oom or interrupted: a rerun of the same
    command replaces it, as ablate and sweep retry such runs."""
    try:
        result = read_json(out / RESULT_FILE, RESULT_LIMIT, "a run's result.json")
    except TrickLabError:
        return False
    return isinstance(result, dict) and result.get("status") in RETRY_STATUSES


def _clear_killed_run(out: Path) -> None:
    """Remove what a killed run left in `out` (claimed by us now): its files and loggers' outputs."""
    for name in (*RUN_FILES, *LOGGER_OUTPUTS.values()):
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def write_json_atomic(path: Path, data: dict) -> None:
    with atomic_write(path) as handle:
        handle.write(json.dumps(data, indent=2))


def save_checkpoint(model: nn.Module, recipe: Recipe, path: str | Path) -> None:
    """Weights and the resolved recipe, written atomically (temp file, fsync, rename). Serialised
    in memory first: torch's writer turns a full disk into a RuntimeError without its errno."""
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "recipe": recipe.to_dict()}, buffer)
    with atomic_write(Path(path), "wb") as handle:
        handle.write(buffer.getbuffer())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """A checkpoint written by `save_checkpoint`, loaded with weights_only=True (no code runs)."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise TrickLabError(f"checkpoint {path} does not exist") from None
    except Exception as exc:  # torch raises several kinds for a corrupt file
        raise TrickLabError(f"checkpoint {path} cannot be loaded: {type(exc).__name__}") from None
