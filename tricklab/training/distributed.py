"""Data-parallel training with PyTorch's own engine: DistributedDataParallel over the process
group torchrun describes in its environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT).

`tricklab train --nproc N` (`launch`) starts torchrun for you; `torchrun --nproc-per-node N -m
tricklab train ...` is the same. Each process opens the group (`process_group`: nccl on CUDA, gloo
on the CPU), trains on its shard of every global batch (the loaders' rank/world_size), and the
loop's decisions stay identical on every rank: gradients are averaged by DDP, the epoch's sums and
evaluation counts are added over ranks, a time read is the slowest rank's. Only rank 0 prints and
writes the run folder. Without torchrun's environment every function here is a no-op.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from tricklab.core.errors import RANK_ERRORS_ENV, TrickLabError, launched_by_torchrun, rank_error
from tricklab.training.backend import compiled


@dataclasses.dataclass(frozen=True)
class World:
    """This process's place in the data-parallel job: rank 0 of 1 without one."""

    rank: int = 0
    world_size: int = 1
    backend: str | None = None  # nccl | gloo; None: no process group

    @property
    def is_main(self) -> bool:
        return self.rank == 0


# The rank `world()` says within `checked_as`: the launcher checking a rank's setup.
_CHECKED_AS: contextvars.ContextVar[World | None] = contextvars.ContextVar(
    "checked_as", default=None
)


def world() -> World:
    """The process group's rank, size and backend, or a world of one when none is open."""
    if (checked := _CHECKED_AS.get()) is not None:
        return checked
    if not (dist.is_available() and dist.is_initialized()):
        return World()
    return World(dist.get_rank(), dist.get_world_size(), dist.get_backend())


@contextlib.contextmanager
def checked_as(rank: int, world_size: int) -> Iterator[None]:
    """`world()` is rank `rank` of `world_size` in the block, no process group open: `train
    --nproc` checks a rank's setup (its share of the data, its batches) before starting any."""
    token = _CHECKED_AS.set(World(rank, world_size))
    try:
        yield
    finally:
        _CHECKED_AS.reset(token)


def eval_shard(count: int, world: World) -> slice:
    """A rank's share of an evaluation split of `count` images: every world_size-th one."""
    if count < world.world_size:
        raise TrickLabError(
            f"{count} test images cannot give each of {world.world_size} processes one to "
            f"evaluate: give data.test_size of at least {world.world_size}, or fewer processes"
        )
    return slice(world.rank, None, world.world_size)


def check_launch_environment() -> None:
    """TrickLabError unless torchrun's variables describe a group this process can join: RANK
    below WORLD_SIZE, both whole numbers, and where to meet (MASTER_ADDR, MASTER_PORT). Left
    over in a shell or set by a batch system, they would end in torch's own traceback."""
    env = os.environ
    names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    missing = [n for n in names if not env.get(n, "").strip()]
    numbers = [env.get(n, "") for n in ("RANK", "WORLD_SIZE")]
    problem = (
        f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set"
        if missing
        else "RANK and WORLD_SIZE are no whole numbers with RANK below WORLD_SIZE"
        if not all(x.isascii() and x.isdigit() for x in numbers)
        or int(numbers[0]) >= int(numbers[1])
        else None
    )
    problem = problem or _meeting_problem(env["MASTER_ADDR"], env["MASTER_PORT"])
    if problem:
        shown = ", ".join(f"{n}={env[n]!r}" for n in names if n in env)
        raise TrickLabError(
            f"the environment describes a torchrun process group ({shown}), but {problem}: "
            "start the processes with torchrun or `--nproc N`, or unset RANK and WORLD_SIZE"
        )


def _meeting_problem(address: str, port: str) -> str | None:
    """What keeps the ranks from meeting at MASTER_ADDR:MASTER_PORT (a port that is no number
    from 1 to 65535, a host name nothing resolves), or None."""
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return "MASTER_PORT is no port number (a whole number from 1 to 65535)"
    try:
        socket.getaddrinfo(address, int(port), type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as err:  # socket.gaierror; a label over 63 characters
        return f"MASTER_ADDR names no host this machine can find ({err})"
    return None


def usable_cores() -> int:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):  # Linux: what the scheduler lets it use
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def rank_device(device: torch.device) -> torch.device:
    """`device` for this rank: cuda:LOCAL_RANK under torchrun, the CPU as it is."""
    if not launched_by_torchrun() or device.type == "cpu":
        return device
    if device.type != "cuda":
        raise TrickLabError(
            f"data-parallel training runs on cuda or cpu, not {device.type}; set run.device=cpu"
        )
    local_rank, count = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
    if local_rank >= count:
        raise TrickLabError(
            f"torchrun started {os.environ.get('LOCAL_WORLD_SIZE', local_rank + 1)} processes on "
            f"this machine, and it has {count} CUDA GPUs; start at most {count}"
        )
    return torch.device("cuda", local_rank)


@contextlib.contextmanager
def process_group(device: torch.device, timeout_seconds: float) -> Iterator[World]:
    """The process group torchrun's environment describes, open for the block: nccl for a CUDA
    `device` (`rank_device`'s), gloo for the CPU; a collective waits `timeout_seconds` for the
    other ranks, then raises. Without torchrun, or with a group already open (the caller's),
    nothing is opened or closed."""
    if not launched_by_torchrun() or dist.is_initialized():
        yield world()
        return
    check_launch_environment()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    started = time.monotonic()
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_seconds))
    except dist.DistError as err:  # RANK 0 of 2 started alone waits, then fails here
        # A port in use fails at once: the group did not wait out its timeout, so do not say it.
        waited = time.monotonic() - started >= 0.9 * timeout_seconds
        how = (
            f"did not form within {timeout_seconds:g} s (run.dist_timeout_seconds)"
            if waited
            else "could not form"
        )
        raise TrickLabError(
            f"the process group of {os.environ['WORLD_SIZE']} processes {how} at "
            f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
            f"({str(err).splitlines()[0]}): start every rank, with torchrun or `--nproc N`"
        ) from err
    global _ABANDONED
    _ABANDONED = False
    try:
        yield world()
        # Every rank done with its collectives before any closes its connections; a rank that
        # died has failed this one's run already (recorded): its barrier error adds nothing.
        if not _ABANDONED:
            with contextlib.suppress(RuntimeError):
                dist.barrier()
    finally:
        dist.destroy_process_group()


_ABANDONED = False  # this rank's run failed: it leaves the group without its closing barrier


def abandon_group() -> None:
    """This rank's run failed while the others wait in a collective it will not join: it leaves
    without the closing barrier (its exit closes its connections, which fails their collective
    at once, and torchrun stops them), not after the group's timeout."""
    global _ABANDONED
    _ABANDONED = True


# ---------------------------------------------------------------- bad input, before any process


def local_batch_size(
    batch_size: int, accumulate_steps: int = 1, world_size: int | None = None
) -> int:
    """The batch each rank's loader yields per optimizer step (loader.batch_size is the global
    batch); TrickLabError unless it divides evenly over ranks and micro-batches."""
    size = world().world_size if world_size is None else world_size
    if batch_size % (size * accumulate_steps):
        raise TrickLabError(
            f"loader.batch_size={batch_size} is the global batch and must divide evenly over "
            f"{size} processes x optim.accumulate_steps={accumulate_steps}: give a multiple of "
            f"{size * accumulate_steps}"
        )
    return batch_size // size


def check_launch(nproc: int, device: torch.device, recipe) -> None:
    """TrickLabError unless `nproc` processes fit the machine (one GPU each on CUDA, one core
    each on the CPU) and the recipe's global batch divides evenly over them."""
    if nproc < 1:
        raise TrickLabError(f"--nproc must be at least 1, got {nproc}")
    if device.type == "cuda":
        have, what = torch.cuda.device_count(), "CUDA GPUs"
    elif device.type == "cpu":
        have, what = usable_cores(), "CPU cores"
    else:
        raise TrickLabError(
            f"data-parallel training runs on cuda or cpu, not {device.type}; set run.device=cpu"
        )
    if nproc > have:
        raise TrickLabError(
            f"--nproc {nproc} asks for {nproc} processes on {device.type}, and this machine has "
            f"{have} {what}; give --nproc {have} or fewer"
        )
    local_batch_size(recipe.loader.batch_size, recipe.optim.accumulate_steps, nproc)


# ---------------------------------------------------------------- the wrap


def data_parallel(parts, sync_batchnorm: bool, compile_mode: str):
    """`parts` (loop.Parts) training across the process group: BatchNorm layers synchronised
    (`tricks.sync_batchnorm`), the model in DistributedDataParallel (the loop calls it; the
    optimizer, EMA and checkpoint keep the bare model, whose parameters are the same tensors),
    torch.compile applied after the wrap, and DDP's no_sync for the loop's micro-steps.
    Unchanged without a process group."""
    if not dist.is_initialized():
        return parts
    model, device = parts.model, parts.device
    if sync_batchnorm and device.type == "cpu":  # torch's SyncBatchNorm takes GPU tensors only
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.__class__ = CpuSyncBatchNorm  # the same state, a forward that syncs
    elif sync_batchnorm:
        nn.SyncBatchNorm.convert_sync_batchnorm(model)  # same Parameters and buffers, new layers
    # model.whiten_bias_epochs freezing a parameter within the run: DDP must not wait for its
    # gradient after that (at the cost of a walk over the autograd graph per step)
    epochs = -(-parts.total_steps // len(parts.train_loader))
    freezes = any(after < epochs for after in parts.freeze_after_epochs.values())
    ddp = nn.parallel.DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=freezes,
    )
    forward = ddp if compile_mode == "off" else compiled(ddp, compile_mode, device)
    return dataclasses.replace(parts, forward=forward, no_sync=ddp.no_sync)


class CpuSyncBatchNorm(nn.modules.batchnorm._BatchNorm):
    """What nn.SyncBatchNorm does, for CPU tensors (torch's kernels for it, and DDP, take GPU
    modules only): in training, the batch mean and variance over every rank's batch from two
    all_reduce sums that carry gradients (`_SummedOverRanks`), so the gradients flow across
    ranks as torch's SyncBatchNorm sends them; running statistics updated as BatchNorm updates
    them. Elsewhere (eval, one process) it is BatchNorm. Any BatchNorm layer becomes one in place."""

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {x.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or not dist.is_initialized():
            return super().forward(x)
        dims, shape = [0, *range(2, x.dim())], [1, -1, *[1] * (x.dim() - 2)]
        count = x.new_tensor([x.numel() // x.shape[1]])
        sums = _SummedOverRanks.apply(torch.cat([x.sum(dims), count]))
        count = sums[-1].detach()
        mean = sums[:-1] / count
        centred = x - mean.view(shape)
        var = _SummedOverRanks.apply(centred.square().sum(dims)) / count
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                factor = self.momentum
                if factor is None:  # a cumulative average, as BatchNorm's momentum=None
                    factor = 1.0 / float(self.num_batches_tracked)
                self.running_mean.lerp_(mean.detach(), factor)
                self.running_var.lerp_(var.detach() * count / (count - 1), factor)
        out = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out


class _SummedOverRanks(torch.autograd.Function):
    """all_reduce (sum) with a gradient: every rank's output is the sum, so the gradient of each
    rank's input is the sum of the output gradients of all ranks."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        summed = tensor.clone()
        dist.all_reduce(summed)
        return summed

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        summed = grad.clone()
        dist.all_reduce(summed)
        return summed


# ---------------------------------------------------------------- reductions the loop makes


def reduce_epoch(
    first_bad: torch.Tensor, loss_sum: torch.Tensor, correct: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An epoch's (first NaN/Inf step or -1, loss sum, correct predictions) over all ranks: the
    sums added, the earliest bad step; as they are in one process. Device tensors, no host read."""
    if not dist.is_initialized():
        return first_bad, loss_sum, correct
    sums = torch.stack([loss_sum, correct])
    dist.all_reduce(sums)
    first = torch.where(first_bad < 0, torch.inf, first_bad)
    dist.all_reduce(first, op=dist.ReduceOp.MIN)
    first = torch.where(torch.isinf(first), -1.0, first).to(first_bad.dtype)
    return first, sums[0], sums[1]


def sum_over_ranks(*values: torch.Tensor) -> Sequence[torch.Tensor]:
    """Device scalars of one dtype added over all ranks (one all_reduce); as given in one process."""
    if not dist.is_initialized():
        return values
    stacked = torch.stack(values)
    dist.all_reduce(stacked)
    return stacked.unbind()


def slowest(seconds: float, device: torch.device) -> float:
    """The largest of every rank's `seconds`, so that all ranks time and stop alike."""
    if not dist.is_initialized():
        return seconds
    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value)


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank when it is True on any (a time budget reached by the slowest)."""
    return slowest(float(flag), device) > 0


# ---------------------------------------------------------------- torchrun for you


def launch(nproc: int, argv: list[str]) -> tuple[int, str | None]:
    """`python -m tricklab ARGV` in `nproc` processes under torchrun (torch.distributed.run, on a
    free local port), each rank printing only as rank 0 does. Returns the exit code of the first
    process that failed (its one-line error already printed), else 0, and, unless that was bad
    input (exit 2), which rank failed and how ("rank 1 was killed by SIGKILL"), for the run's
    result.json (`api.record_failed_rank`). torchrun's own log lines stay quiet: the ranks say
    what went wrong."""
    # torchrun's default is one OpenMP thread per process; the cores, shared out, do better.
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, usable_cores() // nproc)))
    args = torchrun.parse_args(
        ["--standalone", f"--nproc-per-node={nproc}", "-m", "tricklab", *argv]
    )
    # Its agent's loggers (each with a level of its own: "Received 2 death signal" on a Ctrl-C).
    names = ["torch.distributed.elastic", *logging.root.manager.loggerDict]
    quiet = [logging.getLogger(n) for n in names if n.startswith("torch.distributed.elastic")]
    levels = [(logger, logger.level) for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.CRITICAL)
    errors = tempfile.mkdtemp(prefix="tricklab-ranks-")
    os.environ[RANK_ERRORS_ENV] = errors
    try:
        torchrun.run(args)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        if failure.exitcode == 2:  # bad input: rank 0 said so in one line, unless only this rank
            said = rank_error(errors, rank)  # met it (a model that fails on one rank alone)
            zero = exc.failures.get(0)
            if rank == 0 or said is None or (zero is not None and zero.exitcode == 2):
                return 2, None
            return 2, f"rank {rank} refused: {said}"
        how = (
            f"was killed by {failure.signal_name()}"
            if failure.exitcode < 0
            else f"failed (exit code {failure.exitcode})"
        )
        said = rank_error(errors, rank)  # a rank other than 0 whose run failed: its reason
        how += f": {said}" if said and failure.exitcode > 0 else ""
        return (failure.exitcode if failure.exitcode > 0 else 1), f"rank {rank} {how}"
    except (SignalException, KeyboardInterrupt):
        return 130, None  # Ctrl-C or SIGTERM: the agent stopped every rank; rank 0 said so
    finally:
        for logger, level in levels:
            logger.setLevel(level)
        os.environ.pop(RANK_ERRORS_ENV, None)
        shutil.rmtree(errors, ignore_errors=True)
    return 0, None
