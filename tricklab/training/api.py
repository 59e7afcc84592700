"""`train(recipe) -> RunResult`: build data, model and tricks from a recipe, run the loop, measure.

The setup lives in train/setup.py and the run folder's files in train/runfiles.py; their public
names are re-exported here."""

from __future__ import annotations

import contextlib
import copy
import gc
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from tricklab.core.device import out_of_memory_error, synchronize
from tricklab.core.environment import check_environment, check_torch_env
from tricklab.core.errors import (
    MachineError,
    TrickLabError,
    call_hook,
    expect_callback,
    expect_type,
)
from tricklab.core.memory import peak_memory, reset_peak_memory
from tricklab.core.outputs import RESULT_FILE
from tricklab.core.paths import (
    atomic_write,
    disk_full_error,
    first_missing,
    folder_arg,
    is_disk_full,
    remove_empty_dirs,
)
from tricklab.core.progress import current as current_progress
from tricklab.core.safeio import json_safe
from tricklab.core.status import Status
from tricklab.core.stopping import INTERRUPTED_ERROR, StopRequest, is_interrupt
from tricklab.core.torchstate import own_torch_state
from tricklab.core.usercode import described, message_of, raised_by_code
from tricklab.measure.hardware import hardware_fingerprint
from tricklab.measure.provenance import finish_record, start_record
from tricklab.recipe.schema import Recipe
from tricklab.training import distributed
from tricklab.training.backend import backend_settings
from tricklab.training.compile_cache import compile_cache
from tricklab.training.loggers import RunLoggers
from tricklab.training.loop import Outcome, Parts, evaluate, run_loop
from tricklab.training.resolve import compile_for_device
from tricklab.training.result import RunInterrupted, RunResult, record_failed_rank
from tricklab.training.runfiles import (
    RUN_FILES,
    load_checkpoint,
    make_run_dir,
    save_checkpoint,
    write_json_atomic,
)
from tricklab.training.runlock import one_run_at_a_time
from tricklab.training.setup import (
    INIT_FROM_DATA_IMAGES,
    LoaderInputs,
    ModelInputs,
    SetupCache,
    build_loaders,
    build_run_model,
    check_setup,
    init_sample,
    load_data,
    prepare,
    resolve_device,
)
from tricklab.training.warmup import needs_warm_up, warm_up_run

__all__ = [  # with the moved names, so that `from tricklab.training.api import X` keeps working
    "INIT_FROM_DATA_IMAGES",
    "RUN_FILES",
    "LoaderInputs",
    "ModelInputs",
    "RunInterrupted",
    "RunResult",
    "SetupCache",
    "build_loaders",
    "build_run_model",
    "check_setup",
    "init_sample",
    "json_safe",
    "load_checkpoint",
    "load_data",
    "prepare",
    "record_failed_rank",
    "resolve_device",
    "run_end",
    "save_checkpoint",
    "train",
]


def train(
    recipe: Recipe,
    *,
    out_dir: str | Path | None = None,
    on_epoch: Callable[[dict], None] | None = None,
    stop: StopRequest | None = None,
) -> RunResult:
    """Train one model as the recipe says and return what was measured.

    With `out_dir`, writes recipe.yaml (resolved), metrics.jsonl (a line per epoch), result.json and,
    with run.checkpoint, checkpoint.pt. How the run ended is decided here, once (`run_end`), and
    is the result's status: complete (or stopped-early, reached-target), diverged (NaN loss), oom,
    failed (an unexpected error: its message in `error`, its traceback in `traceback`), all
    returned; interrupted (Ctrl-C, SIGTERM, or `stop` requested) raises RunInterrupted, which
    carries the result. `stop` is checked at each epoch end and when the run ends, so a stop whose
    KeyboardInterrupt Python dropped still ends the run. Exceptions raised by `on_epoch` (e.g.
    optuna.TrialPruned) propagate, with result.json recording the epochs so far. Bad input
    (TrickLabError) found while setting up (data, model, tricks, a logger that cannot start)
    propagates with nothing written: no run directory is left behind. The run directory is
    claimed before anything is written (one run at a time: a second one is refused); a full disk
    raises TrickLabError naming the disk, with the files this run wrote removed, so the same call
    runs again once there is space."""
    wall_start = time.perf_counter()
    if not isinstance(recipe, Recipe):
        raise TypeError(
            f"train takes a Recipe (tricklab.load_recipe(name, overrides)), got {recipe!r:.80}"
        )
    expect_callback(on_epoch, "train's on_epoch")
    expect_type(stop, (StopRequest, type(None)), "train's stop")
    # a field set by hand (recipe.run.epochs = "3") is checked as a file's or an override's
    recipe = recipe.checked()
    out_dir = folder_arg(out_dir, "out_dir")  # absolute: a chdir mid-run changes nothing
    before = stop.deferring if stop is not None else False
    try:
        with one_run_at_a_time(), own_torch_state():  # a caller's grad mode, dtype or autocast
            result = _claimed_train(recipe, out_dir, on_epoch, stop, wall_start)
    finally:
        if stop is not None:  # held from the run's recorded end (_hold_stops) until here
            stop.deferring = before
    if stop is not None and stop.requested:  # a stop held while the end was recorded
        raise RunInterrupted(result)
    return result


def _claimed_train(
    recipe: Recipe,
    out_dir: str | Path | None,
    on_epoch: Callable[[dict], None] | None,
    stop: StopRequest | None,
    wall_start: float,
) -> RunResult:
    check_environment()  # before torch's first forward reads TORCHINDUCTOR_CACHE_DIR
    check_torch_env()
    main = distributed.world().is_main  # under torchrun, rank 0 alone writes the run folder
    out = Path(out_dir) if out_dir is not None and main else None
    device = resolve_device(recipe.run.device)
    # a missing package, a logger without a folder: refused before the folder is made (a rank
    # other than 0 writes nothing, its loggers neither: rank 0's folder is the run's)
    loggers = RunLoggers(recipe, out, has_folder=out_dir is not None or not main)
    created = first_missing(out) if out is not None else None  # what to remove if setup fails
    claim = None
    try:
        claim = make_run_dir(out, recipe) if out is not None else None
        return _train(recipe, out, device, on_epoch, stop, wall_start, loggers)
    except BaseException as exc:
        # Nothing half kept: a run that ends with no result.json (a full disk, a stop or an
        # error in its last write) leaves the folder as it was, so the same command runs again.
        # Only a run that holds the folder's claim cleans it: a run refused the folder (another
        # run writes there) must not remove that run's files.
        ours = claim is not None
        if ours and (is_disk_full(exc) or not (out / RESULT_FILE).exists()):
            loggers.remove_outputs()  # metrics.csv, tensorboard/: a rerun's would mix with them
            for name in RUN_FILES:
                with contextlib.suppress(OSError):
                    (out / name).unlink(missing_ok=True)
        if is_disk_full(exc):
            raise disk_full_error(exc, out) from None
        raise
    finally:
        loggers.close()  # however the run ended: files flushed, the W&B run finished
        if claim is not None:
            claim.release()
        if out is not None:
            remove_empty_dirs(out, created)


def _train(
    recipe: Recipe,
    out: Path | None,
    device: torch.device,
    on_epoch: Callable[[dict], None] | None,
    stop: StopRequest | None,
    wall_start: float,
    loggers: RunLoggers,
) -> RunResult:
    """`train` in a claimed run directory (or none)."""
    result = RunResult(
        status=Status.FAILED,
        recipe=recipe.to_dict(),
        hardware=hardware_fingerprint(device),
        provenance=start_record(device),
        world_size=distributed.world().world_size,
        dist_backend=distributed.world().backend,
    )
    started = False
    callback_error: list[BaseException] = []  # what the caller's on_epoch raised, if anything

    def record_epoch(row: dict) -> None:
        result.epochs.append(row)
        loggers.log_epoch(json_safe(row))  # as metrics.jsonl holds it: NaN as None
        if stop is not None:
            stop.check()
        if on_epoch is not None:
            try:
                call_hook(
                    on_epoch, "train's on_epoch", copy.deepcopy(row)
                )  # the caller's copy: the run's record stays its own
            except BaseException as exc:  # SystemExit too: the caller's, raised to the caller
                callback_error.append(exc)
                raise

    # The run's end is recorded whatever stop arrives meanwhile: torchrun's SIGTERM to rank 0
    # lands just after a dead rank's closed connection failed its collective, and raised while
    # the failure was being recorded it left no result.json (the run's files were removed).
    try:
        if stop is not None:
            stop.check()  # a stop requested before this run (a StopRequest used again)
        dataset = load_data(recipe)
        reset_peak_memory(device)
        compiling = compile_for_device(recipe.tricks.compile, device.type) != "off"
        with (
            backend_settings(recipe.tricks.matmul_precision, recipe.tricks.cudnn_benchmark),
            compile_cache(device) if compiling else contextlib.nullcontext(),  # compile once
            warnings.catch_warnings(),
        ):
            # GradScaler skips the steps whose fp16 gradients overflow (the first ones, while
            # it finds its scale); the schedule steps anyway, and torch warns as if it were a
            # mistake.
            warnings.filterwarnings(
                "ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before"
            )
            parts, info = prepare(recipe, dataset, device)
            parts = distributed.data_parallel(
                parts, recipe.tricks.sync_batchnorm, info["resolved"]["compile"]
            )
            result.params, result.forward_macs = info["params"], info["forward_macs"]
            result.whiten_seconds = info["whiten_seconds"]
            result.resolved = info["resolved"]
            loggers.open(result)  # run.loggers; one that cannot start is a setup error
            if out is not None:
                with atomic_write(out / "recipe.yaml") as handle:
                    handle.write(recipe.to_yaml())
            started = True
            if needs_warm_up(recipe.tricks, device):
                result.compile_seconds = warm_up_run(parts, recipe)
            parts.progress = current_progress()  # the CLI's display; None: silent
            outcome = run_loop(parts, recipe.run, record_epoch)
            _finish(result, parts, outcome, recipe)
            if recipe.run.checkpoint and out is not None and outcome.status != Status.DIVERGED:
                save_checkpoint(parts.model, recipe, out / "checkpoint.pt")
        if stop is not None:
            stop.check()  # a stop whose KeyboardInterrupt Python dropped during the last epoch
        _record_peak_memory(result, device)
        _hold_stops(stop)
    except BaseException as exc:
        _hold_stops(stop)
        unusable = not started or isinstance(exc, MachineError)  # the machine's, not the run's
        if (isinstance(exc, TrickLabError) and unusable) or is_disk_full(exc):
            raise  # nothing recorded: train() removes what was written and the folders it made
        _record_peak_memory(result, device)  # for an oom run, the number that matters most
        result.status, result.error = run_end(exc, stop)
        if exc in callback_error and not isinstance(exc, KeyboardInterrupt):  # the caller's
            result.error = f"stopped by on_epoch raising {described(exc)}"  # no Ctrl-C
        # a model's sys.exit mid-run: its failure, not a Ctrl-C (the caller's on_epoch: theirs)
        why = None if exc in callback_error else raised_by_code(exc)
        if why is not None and (stop is None or not stop.requested):
            result.status, result.error = Status.FAILED, why
        if result.status == Status.FAILED:
            result.traceback = "".join(traceback.format_exception(exc))
        result.epochs_completed = len(result.epochs)
        if result.epochs:
            result.train_seconds = result.epochs[-1]["train_seconds"]
        # Raised on: the caller's own exception, a user mistake met mid-run, and a stop (the
        # caller must stop too). An oom or a failed run is returned; its memory is freed below,
        # outside `except`, whose traceback keeps the run's tensors alive.
        raised = isinstance(exc, TrickLabError) or exc in callback_error
        if raised or result.status == Status.INTERRUPTED:
            result.wall_seconds = time.perf_counter() - wall_start
            result.provenance = finish_record(result.provenance)
            if out is not None:
                write_json_atomic(out / RESULT_FILE, result.to_dict())
            if result.status == Status.INTERRUPTED and not isinstance(exc, SystemExit):
                raise RunInterrupted(result) from exc
            raise
    # Free what the run held, so the next run can go on.
    if result.status in (Status.OOM, Status.FAILED):
        parts = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    result.wall_seconds = time.perf_counter() - wall_start
    result.provenance = finish_record(result.provenance)
    if out is not None:
        write_json_atomic(out / RESULT_FILE, result.to_dict())
    return result


def train_to_its_end(recipe: Recipe, out_dir: str | Path | None, stop: StopRequest) -> RunResult:
    """`train()` as a speedrun counts its runs: a stop that came once the run's end was recorded
    returns the run as it ended (complete), for the caller to count before it stops; a run the
    stop cut short raises RunInterrupted, as `train()` does."""
    try:
        with stop.deferred(False):  # a run: a signal stops it at once
            return train(recipe, out_dir=out_dir, stop=stop)
    except RunInterrupted as stopped:
        if stopped.result.status == Status.INTERRUPTED:
            raise
        return stopped.result


def run_end(exc: BaseException, stop: StopRequest | None = None) -> tuple[str, str]:
    """How a run that raised `exc` ended, as (status, error): `interrupted` for Ctrl-C, SIGTERM or
    an exit, and for any error once a stop was requested (a library may turn the KeyboardInterrupt
    into an error of its own); `oom` for out of memory; `failed` for anything else."""
    if is_interrupt(exc) or (stop is not None and stop.requested):
        return Status.INTERRUPTED, INTERRUPTED_ERROR
    if oom := out_of_memory_error(exc):
        return Status.OOM, oom
    return Status.FAILED, f"{type(exc).__name__}: {message_of(exc)}"  # a model's may not read


def _hold_stops(stop: StopRequest | None) -> None:
    """From here until train() returns, Ctrl-C and SIGTERM only mark `stop` (as in
    StopRequest.held): the run's end is recorded, and its files closed, whatever stop arrives."""
    if stop is not None:
        stop.deferring = True


def _record_peak_memory(result: RunResult, device: torch.device) -> None:
    result.peak_memory = peak_memory(device)
    result.peak_memory_bytes = result.peak_memory["peak_memory_bytes"]


def _finish(result: RunResult, parts: Parts, outcome: Outcome, recipe: Recipe) -> None:
    """Fill the result from the loop's outcome; the final TTA evaluation happens here, timed as
    airbench times it (record_seconds: whitening fit + epochs + this evaluation, or without TTA
    the last epoch's evaluation, which is then the final one)."""
    result.status = outcome.status
    result.epochs = outcome.epochs
    result.epochs_completed = len(outcome.epochs)
    result.train_seconds = outcome.train_seconds
    result.images_per_second = (
        outcome.images_seen / outcome.train_seconds if outcome.train_seconds > 0 else None
    )
    result.stopped_epoch, result.diverged_step = outcome.stopped_epoch, outcome.diverged_step
    result.time_to_target_seconds = outcome.time_to_target_seconds
    result.time_budget_reached = outcome.time_budget_reached
    if outcome.status == Status.DIVERGED:
        result.error = outcome.error
        return
    evaluated = [row for row in outcome.epochs if row["val_acc"] is not None]
    if evaluated:
        result.val_acc, result.val_loss = evaluated[-1]["val_acc"], evaluated[-1]["val_loss"]
    synchronize(parts.device)
    start = time.perf_counter()
    if parts.ema is not None:
        parts.ema.copy_to_model()
        parts.ema = None
    if recipe.tricks.tta != "none":
        result.val_acc_tta, result.val_loss_tta = evaluate(parts, recipe.tricks.tta)
        synchronize(parts.device)
        result.final_eval_seconds = time.perf_counter() - start
    elif outcome.epochs:
        result.final_eval_seconds = outcome.epochs[-1].get("eval_seconds")
    if result.final_eval_seconds is not None:
        result.record_seconds = (
            result.whiten_seconds + result.train_seconds + result.final_eval_seconds
        )
