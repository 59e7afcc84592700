"""What a run writes in its folder: claiming the folder, result.json (strict JSON), the checkpoint."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import torch
from torch import nn

from tricklab.core.errors import TrickLabError
from tricklab.core.paths import (
    CLAIM_NAME,
    FolderClaim,
    atomic_write,
    claim_folder,
    claim_holder,
    disk_full_error,
    is_disk_full,
)
from tricklab.core.safeio import read_json
from tricklab.core.status import RETRY_STATUSES
from tricklab.recipe.schema import Recipe
from tricklab.training.loggers import WRITES as LOGGER_OUTPUTS

# What a run writes in its directory; a directory holding any of them is not reused.
RUN_FILES = ("recipe.yaml", "metrics.jsonl", "result.json", "checkpoint.pt")
RESULT_LIMIT = 64 << 20  # bytes of a result.json read back (its epochs' rows included)


def make_run_dir(out: Path) -> FolderClaim:
    """Make `out` and claim it for this run (paths.claim_folder: one run at a time), refusing it
    when another run writes there or a run is already in it."""
    blocking = next((f for f in [out, *out.parents] if f.exists() and not f.is_dir()), None)
    if blocking is not None:
        raise TrickLabError(
            f"cannot make the run directory {out}: {blocking} is a file, not a folder"
        )
    try:
        for attempt in range(3):  # a run whose setup failed may remove the folder meanwhile
            out.mkdir(parents=True, exist_ok=True)
            # A claim file is removed when its run ends, however it ends, unless the process was
            # killed (SIGKILL, the OOM killer, a lost rank's torchrun): such a run left its files.
            abandoned = (out / CLAIM_NAME).exists()
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
    killed = abandoned and not (out / "result.json").exists()
    if previous and (killed or ended_unfinished(out)):
        _clear_killed_run(out)  # a run killed, failed or interrupted: the same command runs again
        previous = []
    if previous:
        claim.release()
        raise TrickLabError(
            f"run directory {out} already holds a run ({', '.join(previous)}); "
            "give another one or remove it"
        )
    return claim


def check_run_dir(out: Path) -> None:
    """What make_run_dir refuses that can be seen without writing: `out` a file, or a folder
    holding a run that ended as it records (before a data-parallel launch starts processes)."""
    if out.exists() and not out.is_dir():
        raise TrickLabError(f"cannot make the run directory {out}: it is a file, not a folder")
    if (out / "result.json").exists() and not ended_unfinished(out):
        previous = [name for name in RUN_FILES if (out / name).exists()]
        raise TrickLabError(
            f"run directory {out} already holds a run ({', '.join(previous)}); "
            "give another one or remove it"
        )


def ended_unfinished(out: Path) -> bool:
    """The folder's result.json says its run ended failed, oom or interrupted: a rerun of the same
    command replaces it, as ablate and sweep retry such runs."""
    try:
        result = read_json(out / "result.json", RESULT_LIMIT, "a run's result.json")
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
