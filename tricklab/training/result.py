"""What a run measured (`RunResult`, result.json's fields), the stop that carries it
(`RunInterrupted`), and the record a data-parallel launcher leaves when a rank died
(`record_failed_rank`). `train()` (api.py) fills them; api.py re-exports every name here."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tricklab.core.errors import TrickLabError, expect_type
from tricklab.core.outputs import RESULT_FILE
from tricklab.core.paths import claim_folder
from tricklab.core.safeio import json_safe, read_json, shown
from tricklab.core.status import Status
from tricklab.core.stopping import Interrupted
from tricklab.core.version import __version__
from tricklab.measure.hardware import hardware_fingerprint
from tricklab.measure.provenance import finish_record, start_record
from tricklab.recipe.schema import Recipe
from tricklab.training.runfiles import RESULT_LIMIT, logged_epochs, write_json_atomic


@dataclass
class RunResult:
    """What one training run measured. `to_dict()` is what result.json holds."""

    status: str  # complete | stopped-early | reached-target | diverged | oom | failed | interrupted
    val_acc: float | None = None
    val_loss: float | None = None
    val_acc_tta: float | None = None
    val_loss_tta: float | None = None
    train_seconds: float = 0.0  # training epochs with batch loading, synced; no eval, no compile
    # airbench's total_time_seconds, each part synced and timed apart (no warm-up, no decoding):
    whiten_seconds: float = 0.0  # the whitening layer's fit on 5,000 train images (0: no layer)
    final_eval_seconds: float | None = None  # the final evaluation, with the recipe's TTA
    record_seconds: float | None = None  # whiten + train + final_eval; None: no final evaluation
    compile_seconds: float = 0.0  # warm-up (torch.compile, cuDNN autotuning), measured apart
    # what the device decided: tricks.compile (auto), tricks.precision (bf16 without bf16
    # tensor cores runs as 16-mixed), and in `notes` why anything differs from the recipe
    resolved: dict = field(default_factory=dict)
    wall_seconds: float = 0.0  # everything, data loading included
    time_to_target_seconds: float | None = None
    peak_memory_bytes: int | None = None
    peak_memory: dict = field(default_factory=dict)
    images_per_second: float | None = None
    epochs_completed: int = 0
    stopped_epoch: int | None = None
    time_budget_reached: bool = False  # run.time_budget_seconds stopped it (at stopped_epoch)
    diverged_step: int | None = None
    error: str | None = None
    traceback: str | None = None  # where a failed run broke
    params: int | None = None
    forward_macs: int | None = None
    epochs: list[dict] = field(default_factory=list)
    hardware: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)  # measure/provenance.py: command, git, load
    world_size: int = 1  # processes of a data-parallel run (torchrun), each on its batch share
    dist_backend: str | None = None  # their process group's: nccl, gloo; None: one process
    tricklab_version: str = __version__
    recipe: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return json_safe(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        """A RunResult from `to_dict`'s fields (result.json's; others are ignored). TypeError
        unless a dict; TrickLabError naming the field for a status that ends no run, or a value
        not of its field's type (a measurement: a finite number)."""
        expect_type(data, dict, "RunResult.from_dict's data")
        if not isinstance(data.get("status"), str) or data["status"] not in RUN_ENDS:
            ends = ", ".join(sorted(RUN_ENDS))
            raise TrickLabError(
                f"a result's status is {shown(repr(data.get('status'))):.60}: not {ends}"
            )
        values = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
        for f in dataclasses.fields(cls):
            kinds = [k.strip() for k in str(f.type).split("|")]
            value = values.get(f.name)
            if f.name in values and not any(_FITS.get(k, _ANY)(value) for k in kinds):
                raise TrickLabError(
                    f"a result's {f.name} is {shown(repr(value)):.60}: not {' or '.join(kinds)}"
                )
        return cls(**values)


RUN_ENDS = frozenset(Status) - {Status.PRUNED, Status.SKIPPED, Status.RUNNING, Status.WAITING}
_NUMBER = (int, float)
_ANY = lambda v: True  # noqa: E731 (a kind _FITS does not name: not checked)
_FITS = {  # each kind a RunResult field's annotation names
    "None": lambda v: v is None,
    "float": lambda v: isinstance(v, _NUMBER) and not isinstance(v, bool) and math.isfinite(v),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "dict": lambda v: isinstance(v, dict),
    "list[dict]": lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v),
}


class RunInterrupted(Interrupted):
    """A run stopped by Ctrl-C or SIGTERM; `result` is its RunResult with the epochs it finished
    (and result.json holds it when the run had a directory). Its status is `interrupted`, or the
    run's own end (`failed`, say: a data-parallel rank died) when the stop came while that end
    was being recorded: the caller must stop all the same."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(result.error)
        self.result = result


def launch_record(recipe: Recipe, device: Any, world_size: int) -> RunResult:
    """The launcher's record of the data-parallel run it starts on `device` (torch.device) in
    `world_size` processes: what `record_failed_rank` writes where rank 0 recorded nothing."""
    backend = "nccl" if device.type == "cuda" else "gloo"  # as distributed.process_group opens
    world = {"world_size": world_size, "dist_backend": backend}
    return RunResult(
        status=Status.FAILED,
        recipe=recipe.to_dict(),
        hardware=hardware_fingerprint(device),
        provenance={**start_record(device), **world},
        **world,
    )


def record_failed_rank(out: Path, launched: RunResult, reason: str) -> None:
    """After a data-parallel run in `out` whose rank failed or died (`distributed.launch`'s
    reason): its result.json says failed, with the reason, unless the run had recorded its own
    end; the folder then reruns (runfiles.ended_unfinished). What rank 0 recorded is kept: an
    `interrupted` or `failed` result.json (torchrun stopped it, or its collective failed when
    the other rank died), with its epochs. Where rank 0 left none (it was the one killed),
    `launched` (the launcher's record: recipe, processes, backend, hardware, provenance, wall
    seconds) is written, with the epochs rank 0 had logged to metrics.jsonl."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        claim = claim_folder(out)
    except OSError:
        return  # a folder that cannot be written: the error line has said what failed
    if claim is None:  # a live writer holds it
        return
    try:
        previous = out / RESULT_FILE
        result = dataclasses.replace(
            launched,
            epochs=logged_epochs(out),
            provenance=finish_record(launched.provenance),
        )
        if previous.exists():
            try:
                result = RunResult.from_dict(read_json(previous, RESULT_LIMIT, "result.json"))
            except (TrickLabError, TypeError):
                pass  # unreadable: replaced by the failure
            if result.status not in (Status.INTERRUPTED, Status.FAILED):
                return  # the run ended as it records (complete, diverged, oom)
        if result.status == Status.INTERRUPTED:  # torchrun stopped it: no Ctrl-C of the user's
            result.error = f"{reason}; torchrun stopped the other ranks"
        else:
            result.error = reason if not result.error else f"{reason}; {result.error}"
        result.status = Status.FAILED
        result.world_size = launched.world_size
        result.dist_backend = result.dist_backend or launched.dist_backend
        result.epochs_completed = len(result.epochs)
        if result.epochs and not result.train_seconds:
            result.train_seconds = result.epochs[-1].get("train_seconds") or 0.0
        write_json_atomic(previous, result.to_dict())
    finally:
        claim.release()
