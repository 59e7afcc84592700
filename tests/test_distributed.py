"""Data-parallel training (train/distributed.py) on the CPU: two gloo processes train as one.

Each multi-process test starts its ranks as torchrun would describe them (RANK, WORLD_SIZE,
MASTER_ADDR/PORT in the environment), on tiny synthetic data, and compares with one process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from tricklab.data.loaders import AugmentSpec, DeviceLoader, LoaderSpec
from tricklab.recipe.schema import load_recipe
from tricklab.training import api, distributed, loop

TESTS = Path(__file__).resolve().parent
BASE = [
    "data.name=synthetic", "data.train_size=128", "data.test_size=64", "data.image_size=16",
    "loader.kind=device", "loader.batch_size=32", "loader.eval_batch_size=32", "run.device=cpu",
    "run.epochs=2", "aug.flip=random", "aug.translate=2", "aug.cutout=4", "optim.lr=0.2",
    "optim.momentum=0.9", "optim.nesterov=true", "run.dist_timeout_seconds=60",
]  # fmt: skip
NO_BATCHNORM = ["model.name=test_distributed:conv_net"]
# airbench (BatchNorm, its whitening bias frozen after epoch 1) with lookahead EMA every 2 steps
SYNC_BATCHNORM = [
    "model.name=airbench", "model.widths=[8,16,16]", "model.whiten_bias_epochs=1",
    "tricks.sync_batchnorm=true", "tricks.ema_decay=0.8", "tricks.ema_every=2",
    "tricks.lookahead=true",
]  # fmt: skip
ACCUMULATING = [*NO_BATCHNORM, "optim.accumulate_steps=2"]
CONFIGS = {
    "no-batchnorm": NO_BATCHNORM,
    "sync-batchnorm": SYNC_BATCHNORM,
    "accumulate": ACCUMULATING,
}


def conv_net(num_classes: int, in_channels: int) -> nn.Module:
    """A net without BatchNorm, whose gradients do not depend on how the batch is split."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, stride=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, num_classes),
    )


class DiesOnRank1(nn.Module):
    """conv_net whose rank 1 kills itself (SIGKILL, as the OOM killer would) at its forward
    number $DIE_AT."""

    def __init__(self, num_classes: int, in_channels: int) -> None:
        super().__init__()
        self.net, self.calls = conv_net(num_classes, in_channels), 0

    def forward(self, x):
        self.calls += 1
        if os.environ.get("RANK") == "1" and str(self.calls) == os.environ.get("DIE_AT"):
            os.kill(os.getpid(), signal.SIGKILL)
        return self.net(x)


class RaisesOnOneRank(nn.Module):
    """conv_net whose rank $RAISE_RANK raises at its forward number $RAISE_AT (in training)."""

    def __init__(self, num_classes: int, in_channels: int) -> None:
        super().__init__()
        self.net, self.calls = conv_net(num_classes, in_channels), 0

    def forward(self, x):
        self.calls += 1
        here = os.environ.get("RANK") == os.environ.get("RAISE_RANK")
        if here and self.training and str(self.calls) == os.environ.get("RAISE_AT"):
            raise RuntimeError(f"rank {os.environ['RANK']} exploded")
        return self.net(x)


def raising_net(num_classes: int, in_channels: int) -> nn.Module:
    return RaisesOnOneRank(num_classes, in_channels)


def dying_net(num_classes: int, in_channels: int) -> nn.Module:
    return DiesOnRank1(num_classes, in_channels)


def refused_on_rank_1(num_classes: int, in_channels: int) -> nn.Module:
    """conv_net, except on rank 1, whose factory raises (a model that fails on one device)."""
    if os.environ.get("RANK") == "1":
        raise ValueError("no such layer on this rank")
    return conv_net(num_classes, in_channels)


def trained(overrides: list[str], device: str = "cpu") -> dict:
    """Train as `train()` sets up (prepare, then the DDP wrap) through the loop's own
    train_epoch; the per-step losses of the global batch (mean over ranks), the final weights
    and the EMA's average (all on the CPU), and the model's BatchNorm classes."""
    recipe = load_recipe(None, [*BASE, *overrides, f"run.device={device}"])
    device = api.resolve_device(device)
    parts, _ = api.prepare(recipe, api.load_data(recipe), device)
    parts = distributed.data_parallel(parts, recipe.tricks.sync_batchnorm, "off")
    losses, step = [], 0
    for _ in range(loop.num_epochs(parts)):
        parts.model.train()
        steps = loop.train_epoch(parts, iter(parts.train_loader), step)
        step += len(steps.losses)
        (summed,) = distributed.sum_over_ranks(torch.stack(steps.losses))
        losses.append(summed / distributed.world().world_size)
    return {
        "losses": torch.cat(losses).cpu(),
        "evaluation": torch.tensor(loop.evaluate(parts)),  # each rank scores its share
        "weights": {k: v.detach().cpu().clone() for k, v in parts.model.state_dict().items()},
        "ema": [t.cpu().clone() for t in parts.ema.average] if parts.ema else None,
        "batchnorms": {
            type(m).__name__
            for m in parts.model.modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm)
        },
    }


def worker(out: str, device: str = "cpu") -> None:
    """One rank (started by `start_ranks`): every config of CONFIGS, saved to out/rank<r>.pt.
    On CUDA both ranks share one GPU over gloo (nccl takes one GPU per rank)."""
    torch.set_num_threads(1)
    if device == "cuda":
        os.environ["LOCAL_RANK"] = "0"  # both ranks on cuda:0
        torch.distributed.init_process_group("gloo")  # process_group() then keeps the caller's
    with distributed.process_group(torch.device(device), 60) as world:
        results = {name: trained(overrides, device) for name, overrides in CONFIGS.items()}
        results["world"] = (world.rank, world.world_size, world.backend)
        torch.save(results, Path(out) / f"rank{world.rank}.pt")
    if device == "cuda":
        torch.distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_ranks(argv: list[str], world_size: int = 2, **popen) -> list[subprocess.Popen]:
    """`python ARGV` as each rank of a process group, in torchrun's environment."""
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = {
            **os.environ,
            "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        }  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, *argv], env=env, **popen))
    return procs


def ranks_trained(out: Path, device: str) -> list[dict]:
    """Every config trained by 2 gloo processes on `device`, each process's results."""
    # Leaving as `tricklab` does under torchrun (cli/main.py run): without Python's shutdown,
    # which a gloo thread still freeing a collective's tensors can abort.
    code = (
        f"import os, test_distributed; test_distributed.worker({str(out)!r}, {device!r}); "
        "os._exit(0)"
    )
    procs = start_ranks(["-c", code])
    try:
        assert [proc.wait(timeout=300) for proc in procs] == [0, 0]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    return ranks_trained(tmp_path_factory.mktemp("ranks"), "cpu")


@pytest.fixture(scope="module", autouse=True)
def importable_factory():
    """model.name=test_distributed:conv_net, in this process as in the ranks."""
    sys.path.insert(0, str(TESTS))
    yield
    sys.path.remove(str(TESTS))


@pytest.mark.parametrize("config", ["no-batchnorm", "sync-batchnorm"])
def test_two_processes_with_the_global_batch_train_as_one_process(two_ranks, config):
    one = trained(CONFIGS[config])
    for rank in two_ranks:
        assert rank["world"][1:] == (2, "gloo")
        if config == "sync-batchnorm":
            assert rank[config]["batchnorms"] == {"CpuSyncBatchNorm"}
        assert len(rank[config]["losses"]) == len(one["losses"]) == 8  # 4 steps of 32, 2 epochs
        torch.testing.assert_close(rank[config]["losses"], one["losses"], rtol=1e-5, atol=1e-6)
        for name, weights in one["weights"].items():
            torch.testing.assert_close(rank[config]["weights"][name], weights, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(rank[config]["evaluation"], one["evaluation"], rtol=1e-4, atol=0)


def test_the_ranks_batches_make_one_process_batch_with_its_augmentations():
    images = torch.randint(0, 256, (70, 3, 8, 8), dtype=torch.uint8)
    spec = AugmentSpec(flip="random", translate=2, cutout=3)
    one = DeviceLoader(images, torch.arange(70), LoaderSpec(16, augment=spec, seed=5))
    ranks = [
        DeviceLoader(
            images, torch.arange(70), LoaderSpec(8, augment=spec, seed=5, rank=r, world_size=2)
        )
        for r in range(2)
    ]
    for _ in range(2):  # epochs: 5 global batches, the last of 6 images (3 per rank)
        for (images_one, labels_one), *shares in zip(one, *ranks, strict=True):
            for rank, (images_rank, labels_rank) in enumerate(shares):
                assert torch.equal(labels_rank, labels_one[rank::2])  # rank r: rows r, r+2, ...
                assert torch.equal(images_rank, images_one[rank::2])  # augmented alike


def test_ranks_end_with_the_same_weights_and_the_same_ema(two_ranks):
    first, second = two_ranks
    for config in CONFIGS:
        for name, weights in first[config]["weights"].items():
            assert torch.equal(weights, second[config]["weights"][name]), (config, name)
    assert first["sync-batchnorm"]["ema"] is not None
    for mine, theirs in zip(first["sync-batchnorm"]["ema"], second["sync-batchnorm"]["ema"]):
        assert torch.equal(mine, theirs)


def test_accumulating_two_processes_train_as_one_process_with_the_whole_batch(two_ranks):
    one = trained(NO_BATCHNORM)
    for rank in two_ranks:  # each rank: 2 micro-batches of 8 (DDP's no_sync on the first)
        torch.testing.assert_close(
            rank["accumulate"]["losses"], one["losses"], rtol=1e-5, atol=1e-6
        )


def test_accumulating_two_half_batches_is_one_step_of_the_whole_batch():
    whole, halves = trained(NO_BATCHNORM), trained(ACCUMULATING)
    torch.testing.assert_close(halves["losses"], whole["losses"], rtol=1e-5, atol=1e-6)
    for name, weights in whole["weights"].items():
        torch.testing.assert_close(halves["weights"][name], weights, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- the command


def tricklab(*args: str, env_extra: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(TESTS), "OMP_NUM_THREADS": "1", **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "tricklab", *args], capture_output=True, text=True, env=env, **kwargs
    )


def test_train_nproc_runs_data_parallel_and_records_world_size_and_backend(tmp_path):
    run = tricklab("train", *BASE, *SYNC_BATCHNORM, "--nproc", "2", "--out", str(tmp_path / "run"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("run complete") == 1  # rank 0 alone prints
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert (result["world_size"], result["dist_backend"]) == (2, "gloo")
    provenance = result["provenance"]
    assert (provenance["world_size"], provenance["dist_backend"]) == (2, "gloo")
    assert [row["epoch"] for row in result["epochs"]] == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no folder from rank 1


# A command's end, with a marker that speaks if Python's own shutdown (finalization) runs.
EXIT_PROBE = """
import atexit, os, sys
sys.argv = ["tricklab", *sys.argv[1:]]
class Finalized:
    def __del__(self, write=os.write):
        write(1, b"finalized\\n")
marker = Finalized()
atexit.register(lambda: os.write(1, b"exit functions ran\\n"))
from tricklab.cli.main import run
run()
"""


@pytest.mark.parametrize("args, code", [(["recipes", "--json"], 0), (["tricks", "nosuchgroup"], 2)])
def test_a_rank_leaves_after_its_exit_functions_without_pythons_shutdown(args, code):
    # CI saw a rank whose run had completed die of SIGABRT as Python shut down: a gloo worker
    # thread, dropping a finished collective's tensors, took the GIL during finalization
    # ("terminate called without an active exception"), about once in 50 runs under load.
    # Every command leaves so since (seventeenth round): a stop during Python's shutdown read 143.
    rank = {"RANK": "0", "WORLD_SIZE": "1"}
    for env in ({}, rank):
        ran = subprocess.run(
            [sys.executable, "-c", EXIT_PROBE, *args], capture_output=True, text=True,
            env={**os.environ, **env}, timeout=120,
        )  # fmt: skip
        assert ran.returncode == code, ran.stderr
        assert ran.stdout.endswith("exit functions ran\n")


def test_speedrun_nproc_runs_each_seed_data_parallel_and_counts_every_device_in_mfu(tmp_path):
    out = tmp_path / "speedrun"
    args = [
        "speedrun",
        *BASE,
        *NO_BATCHNORM,
        "model.whiten_bias_epochs=0",
        "tricks.precision=32-true",
    ]
    args += ["--runs", "2", "--warmup-epochs", "0"]
    one = tricklab(*args, "--peak-tflops", "1", "--out", str(tmp_path / "one"))
    run = tricklab(*args, "--peak-tflops", "1", "--nproc", "2", "--out", str(out))
    assert one.returncode == 0 and run.returncode == 0, run.stderr
    assert run.stderr.count("summary:") == 1  # rank 0 alone writes and prints
    assert "x 2 processes (gloo)" in " ".join(run.stdout.split())  # the table's title, wrapped
    summary = json.loads((out / "summary.json").read_text())
    assert summary["provenance"]["world_size"] == 2 and summary["n"] == 2
    for seed_run in summary["runs"]:  # MFU over 2 devices' peak: 2 x 1 TFLOP/s
        assert seed_run["status"] == "complete"
        assert seed_run["mfu"] == pytest.approx(seed_run["achieved_tflops"] / 2)
    lone = json.loads((tmp_path / "one" / "summary.json").read_text())["runs"][0]
    assert lone["mfu"] == pytest.approx(lone["achieved_tflops"])
    # the same training as one process (no BatchNorm): the same accuracy
    assert [r["val_acc"] for r in summary["runs"]] == pytest.approx(
        [r["val_acc"] for r in json.loads((tmp_path / "one" / "summary.json").read_text())["runs"]]
    )


def test_a_time_budget_stops_every_rank_alike(tmp_path):
    """The time is read every 25 steps on each rank; all stop when the slowest is past it (a rank
    stopping alone would leave the other waiting in its next all-reduce)."""
    budget = ["run.time_budget_seconds=2", "run.epochs=1000", "loader.batch_size=8"]
    run = tricklab(
        "train", *BASE, *NO_BATCHNORM, *budget, "--nproc", "2", "--out", str(tmp_path / "run"),
        timeout=300,  # a hang fails; a loaded machine may take minutes
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["time_budget_reached"] and result["epochs_completed"] < 1000


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--nproc", "2", "loader.batch_size=33"], "global batch"),
        (["--nproc", "2", "optim.accumulate_steps=4", "loader.batch_size=36"], "multiple of 8"),
        (["--nproc", str(distributed.usable_cores() + 1)], "CPU cores"),
        (["--nproc", "0"], "at least 1"),
        (["optim.accumulate_steps=3"], "must divide loader.batch_size=32"),
        (["optim.accumulate_steps=0"], "optim.accumulate_steps"),
        # fifth hostile round: each was a rank's error and a failed run's folder (a race of two
        # error lines for the second); a rank's share is checked before any process starts
        (["--nproc", "2", "data.test_size=1"], "1 test images cannot give each of 2 processes"),
        (
            ["--nproc", "2", "loader.batch_size=2", *SYNC_BATCHNORM[:3]],
            "a training batch of 1 image",
        ),
    ],
)
def test_bad_data_parallel_input_is_one_line_and_exit_2(tmp_path, args, says):
    model = [] if any(a.startswith("model.name=") for a in args) else NO_BATCHNORM
    run = tricklab("train", *BASE, *model, *args, "--out", str(tmp_path / "run"))
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1 and says in run.stderr, run.stderr
    assert not (tmp_path / "run").exists()


def test_speedrun_nproc_checks_the_last_ranks_share_before_any_process_starts(tmp_path):
    args = ["speedrun", *BASE, *NO_BATCHNORM, "data.test_size=1", "--runs", "1", "--nproc", "2"]
    run = tricklab(*args, "--out", str(tmp_path / "sr"))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "error: 1 test images cannot give each of 2 processes one to evaluate: give "
        "data.test_size of at least 2, or fewer processes"
    ]
    assert not (tmp_path / "sr").exists()


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP], ids=["dead", "hung"])
def test_a_dead_or_hung_rank_makes_the_other_exit_instead_of_hanging(tmp_path, how):
    """Killed: its connections close; stopped: run.dist_timeout_seconds (5) runs out."""
    out = tmp_path / "run"
    argv = ["-m", "tricklab", "train", *BASE, *NO_BATCHNORM, "run.epochs=10000"]
    argv += ["run.dist_timeout_seconds=5", "--quiet", "--out", str(out)]
    with open(
        tmp_path / "ranks.log", "w", encoding="utf-8"
    ) as log:  # a file: a full pipe would block a rank
        ranks = start_ranks(argv, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").is_file() or not (out / "metrics.jsonl").read_text():
            assert time.monotonic() < deadline and ranks[0].poll() is None, "no epoch trained"
            time.sleep(0.2)
        ranks[1].send_signal(how)
        stopped = time.monotonic()
        code = ranks[0].wait(timeout=60)
        assert code == 1 and time.monotonic() - stopped < 60  # 1: a failed run, recorded
        result = json.loads((out / "result.json").read_text())
        assert result["status"] == "failed" and result["world_size"] == 2
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_a_rank_killed_under_nproc_leaves_a_failed_result_and_the_folder_reruns(tmp_path):
    """torchrun stops the other rank; result.json says failed, and why; the same command reruns."""
    out = tmp_path / "run"
    args = ["train", *BASE, "model.name=test_distributed:dying_net", "--nproc", "2"]
    args += ["--out", str(out), "--quiet"]
    run = tricklab(*args, env_extra={"DIE_AT": "6"}, timeout=300)
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert lines[-1] == (
        f"error: data-parallel run failed: rank 1 was killed by SIGKILL; run directory: {out}"
    ), run.stderr
    assert not any("torch.distributed.elastic" in line for line in lines), run.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "failed" and result["world_size"] == 2
    assert result["error"].startswith("rank 1 was killed by SIGKILL")
    again = tricklab(*args, timeout=300)  # DIE unset: the same command, now it trains
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "result.json").read_text())["status"] == "complete"


@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_run_that_fails_mid_run_on_one_rank_ends_at_once_with_its_reason(tmp_path, rank):
    """Seventeenth hostile round: the rank whose forward raised waited in the closing barrier
    while the other waited in the step's collective, both for run.dist_timeout_seconds (600 s
    by default), and the reason recorded was gloo's timeout, not the model's error."""
    out = tmp_path / "run"
    args = ["train", *BASE, "model.name=test_distributed:raising_net", "--nproc", "2"]
    args += ["run.dist_timeout_seconds=600", "--out", str(out), "--quiet"]
    env = {"RAISE_RANK": rank, "RAISE_AT": "8"}  # past the checks' forwards, mid-epoch
    run = tricklab(*args, env_extra=env, timeout=240)  # far less than the group's timeout
    assert run.returncode == 1, run.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "failed"
    assert f"RuntimeError: rank {rank} exploded" in result["error"]
    assert result["error"].startswith(f"rank {rank} failed (exit code 1)")


def test_an_error_met_by_one_rank_alone_is_said_and_recorded_failed_not_interrupted(tmp_path):
    """Fourth hostile round: rank 1's TrickLabError was said by nobody (rank 0 alone prints),
    and rank 0, stopped by torchrun, recorded the run `interrupted` by a Ctrl-C, with exit 2."""
    out = tmp_path / "run"
    args = ["train", *BASE, "model.name=test_distributed:refused_on_rank_1", "--nproc", "2"]
    run = tricklab(*args, "--out", str(out), "--quiet", timeout=300)
    assert run.returncode == 2
    said = "rank 1 refused: model test_distributed:refused_on_rank_1: its factory raised ValueError"
    (line,) = run.stderr.strip().splitlines()  # rank 0, stopped by torchrun, says nothing
    assert line.startswith(f"error: data-parallel run failed: {said}"), run.stderr
    if (out / "result.json").exists():  # rank 0 had started the run when torchrun stopped it
        result = json.loads((out / "result.json").read_text())
        assert result["status"] == "failed" and result["error"].startswith(said)
        assert "Ctrl-C" not in result["error"]


def test_a_user_error_under_nproc_is_one_line_without_torchruns_noise(tmp_path):
    out = tmp_path / "run"
    first = tricklab("train", *BASE, *NO_BATCHNORM, "--out", str(out), "--quiet")
    assert first.returncode == 0, first.stderr
    run = tricklab("train", *BASE, *NO_BATCHNORM, "--nproc", "2", "--out", str(out))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"error: run directory {out} already holds a run (recipe.yaml, metrics.jsonl, "
        "result.json); give another one or remove it"
    ]


@pytest.mark.parametrize(("epochs", "expected"), [(3, False), (4, True)])
def test_ddp_looks_for_unused_parameters_only_when_a_freeze_falls_in_the_run(epochs, expected):
    """model.whiten_bias_epochs=3 freezes the whitening bias from the 4th epoch on: DDP must
    then not wait for its gradient; in a shorter run it is never frozen (no walk of the graph
    per step, no warning from each rank)."""
    freeze = ["model.whiten_bias_epochs=3", f"run.epochs={epochs}"]
    recipe = load_recipe(None, [*BASE, *SYNC_BATCHNORM, *freeze])
    parts, _ = api.prepare(recipe, api.load_data(recipe), torch.device("cpu"))
    torch.distributed.init_process_group(
        "gloo", store=torch.distributed.HashStore(), rank=0, world_size=1
    )
    try:
        wrapped = distributed.data_parallel(parts, False, "off")
        assert wrapped.forward.find_unused_parameters is expected
    finally:
        torch.distributed.destroy_process_group()


# ---------------------------------------------------------------- on a GPU (skipped without one)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
def test_on_one_gpu_two_ranks_with_torchs_sync_batchnorm_train_as_one_process(tmp_path):
    """nn.SyncBatchNorm's CUDA kernels and DDP on CUDA tensors, 2 ranks sharing the GPU over
    gloo (nccl wants a GPU per rank): the per-step losses of one process with the whole batch."""
    one = trained(SYNC_BATCHNORM, "cuda")
    for rank in ranks_trained(tmp_path, "cuda"):
        assert rank["sync-batchnorm"]["batchnorms"] == {"SyncBatchNorm"}
        # cuDNN picks kernels per batch size: float tolerance looser than the CPU's
        torch.testing.assert_close(
            rank["sync-batchnorm"]["losses"], one["losses"], rtol=1e-3, atol=1e-4
        )


@cuda
def test_on_a_gpu_nproc_1_is_ddp_over_nccl_and_trains_as_one_process(tmp_path):
    args = [*BASE, *SYNC_BATCHNORM, "run.device=cuda", "--quiet"]
    assert tricklab("train", *args, "--out", str(tmp_path / "one")).returncode == 0
    run = tricklab("train", *args, "--nproc", "1", "--out", str(tmp_path / "ddp"))
    assert run.returncode == 0, run.stderr
    one, ddp = (json.loads((tmp_path / n / "result.json").read_text()) for n in ("one", "ddp"))
    assert (ddp["world_size"], ddp["dist_backend"]) == (1, "nccl")
    for a, b in zip(one["epochs"], ddp["epochs"], strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-3)


@cuda
def test_more_processes_than_gpus_is_one_line_and_exit_2(tmp_path):
    too_many = str(torch.cuda.device_count() + 1)
    run = tricklab("train", *BASE, *NO_BATCHNORM, "run.device=cuda", "--nproc", too_many)
    assert run.returncode == 2 and "CUDA GPUs" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
