"""Shared fixtures: the real CIFAR-10 JPEG copy (skipped cleanly when ../shared is absent)."""

import os
import signal
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
CIFAR10_JPEG_DIR = REPO_ROOT.parent / "shared" / "data" / "cifar10-jpeg"

# One intra-op thread: on a loaded 2-core machine, two OpenMP threads spin-wait on each other and
# a small net's step runs ~10x slower (measured 37 ms vs 315 ms); tests check behaviour, not speed.
torch.set_num_threads(1)

# A suite started in the background (`pytest &`, nohup) inherits SIGINT ignored; the tests of
# Python-API Ctrl-Cs need Python's handler, as a terminal gives it (and their worker processes
# then start with SIGINT at its default, too).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True, scope="session")
def idle_load_average():
    """Tests check behaviour, not the machine: the load average reads idle unless a test sets it,
    so no output gains 'timings taken on a busy machine' (measure/provenance.py) from other work.
    Session-wide, so module fixtures that train see it too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        yield


@pytest.fixture(scope="session")
def cifar10_jpeg_dir() -> Path:
    """The folder holding train.tar.gz / test.tar.gz of real CIFAR-10; skips when absent."""
    if not (CIFAR10_JPEG_DIR / "train.tar.gz").is_file():
        pytest.skip("../shared/data/cifar10-jpeg is absent (only on the project's own machines)")
    return CIFAR10_JPEG_DIR


@pytest.fixture(scope="session")
def tricklab_cache_dir(tmp_path_factory) -> Path:
    """One decode cache for the whole test session, so the JPEG set is decoded at most once: under
    pytest-xdist one beside the workers' folders, shared (the cache writes each entry whole)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "tricklab-cache"
        shared.mkdir(exist_ok=True)
        return shared
    return tmp_path_factory.mktemp("tricklab-cache")


@pytest.fixture(scope="session")
def cifar10_jpeg(cifar10_jpeg_dir, tricklab_cache_dir):
    """The real CIFAR-10 JPEG copy as a loaded Dataset, decoded once per session (then cached)."""
    from tricklab.data.sources import load_dataset

    return load_dataset("imagefolder", cifar10_jpeg_dir, cache_dir=tricklab_cache_dir)


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server of its own for the session (tests/postgres_server.py); skips without one."""
    from postgres_server import Server

    server = Server()
    yield server
    server.stop()


@pytest.fixture
def eager_compile(monkeypatch):
    """torch.compile with dynamo's eager backend (graphs captured, no Inductor codegen: fast); the
    cache folder each compile saw in `seen`."""
    real, seen = torch.compile, []

    def compile_eagerly(model, mode=None, **kwargs):
        seen.append(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
        return real(model, backend="eager")

    monkeypatch.setattr(torch, "compile", compile_eagerly)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    return seen


@pytest.fixture(autouse=True)
def fresh_warm_ups():
    """Each test starts as a new process would: no eager run warmed before (warmup.warm_up_run
    skips a recipe warmed earlier in the process)."""
    from tricklab.training import warmup

    warmup._WARMED.clear()
    yield
    warmup._WARMED.clear()


def _torch_state() -> tuple:
    """The per-thread torch state a test could leave changed for the tests after it in its worker
    (core/torchstate.py): an autocast left entered made a later test's bf16 run train to chance."""
    from tricklab.core.torchstate import autocast_depth

    return (
        autocast_depth(),
        torch.is_autocast_enabled("cpu"),
        torch.get_autocast_dtype("cpu"),
        torch.is_autocast_cache_enabled(),
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        torch.get_default_dtype(),
        torch.get_default_device(),
        torch.get_num_threads(),
    )


@pytest.fixture(autouse=True)
def torch_state_kept():
    """Each test leaves torch's per-thread state as it found it."""
    before = _torch_state()
    yield
    assert _torch_state() == before, "the test left torch's state changed"
