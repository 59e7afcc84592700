"""The CUDA (and MPS) branches, run on the CPU: each device-specific function takes the device as an
argument, so the CPU tests run the same code; here the torch.cuda calls behind it are replaced by
fakes that record what was called, with which arguments, and answer as a GPU would."""

import contextlib
from types import SimpleNamespace

import pytest
import torch

from tricklab.core import device, memory
from tricklab.data import device_loader, loaders
from tricklab.data.loaders import AugmentSpec, DeviceLoader, LoaderSpec, derived_seed
from tricklab.experiments.speedrun import _resolve_peak
from tricklab.measure import hardware
from tricklab.profile.model import _peak
from tricklab.recipe.schema import load_recipe
from tricklab.training import api, model_memory, precision

GPU = torch.device("cuda", 1)  # not the default index: the device must be passed on, not assumed
H100 = SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=85_000_000_000, major=9, minor=0)


class Recorder:
    """Fakes that record (name, args, kwargs) of each call and return a fixed answer."""

    def __init__(self, monkeypatch):
        self.monkeypatch = monkeypatch
        self.calls = []

    def fake(self, target, name, answer=None):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return answer

        self.monkeypatch.setattr(target, name, call)

    def refuse(self, target, name):
        """`name` must not be called (a CUDA call on the CPU path)."""

        def call(*args, **kwargs):
            raise AssertionError(f"{name} called with {args} {kwargs}")

        self.monkeypatch.setattr(target, name, call)


@pytest.fixture
def recorder(monkeypatch):
    return Recorder(monkeypatch)


# ---------------------------------------------------------------- sync


def test_sync_waits_for_the_cuda_device_it_is_given(recorder):
    recorder.fake(torch.cuda, "synchronize")
    device.synchronize(GPU)
    assert recorder.calls == [("synchronize", (GPU,), {})]


def test_sync_waits_for_an_mps_device(recorder):
    recorder.fake(torch.mps, "synchronize")
    device.synchronize(torch.device("mps"))
    assert recorder.calls == [("synchronize", (), {})]


def test_sync_on_the_cpu_calls_no_accelerator(recorder):
    recorder.refuse(torch.cuda, "synchronize")
    recorder.refuse(torch.mps, "synchronize")
    device.synchronize(torch.device("cpu"))


# ---------------------------------------------------------------- the loader's generator


def test_the_loaders_generator_is_made_on_the_device_and_seeded(monkeypatch):
    made = []

    class FakeGenerator:
        def __init__(self, device):
            made.append(("device", device))

        def manual_seed(self, seed):
            made.append(("seed", seed))
            return self

    monkeypatch.setattr(torch, "Generator", FakeGenerator)
    generator = loaders.device_generator(GPU, 1234)
    assert isinstance(generator, FakeGenerator)
    assert made == [("device", GPU), ("seed", 1234)]


def test_the_loader_draws_its_augmentations_from_a_generator_on_its_own_device(monkeypatch):
    asked = []
    real = device_loader.device_generator

    def spy(device, seed):
        asked.append((device, seed))
        return real(device, seed)

    monkeypatch.setattr(device_loader, "device_generator", spy)
    images, labels = torch.zeros(12, 3, 8, 8, dtype=torch.uint8), torch.arange(12)
    spec = AugmentSpec(flip="random", translate=2, cutout=2)
    loader = DeviceLoader(images, labels, LoaderSpec(4, augment=spec, seed=4, rank=1, world_size=2))
    loader.set_epoch(3)
    iter(loader)
    # seed, epoch, stream, 0: every rank draws the whole epoch as rank 0 (one process) does
    assert asked == [(torch.device("cpu"), derived_seed(4, 3, 1, 0))]


# ---------------------------------------------------------------- autocast and gradient scaling


@pytest.mark.parametrize(
    ("name", "dtype"), [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)]
)
def test_autocast_on_cuda_casts_to_the_precisions_dtype(recorder, name, dtype):
    recorder.fake(torch, "autocast", contextlib.nullcontext())
    precision.precision_policy(name, "cuda").autocast()
    assert recorder.calls == [
        ("autocast", (), {"device_type": "cuda", "dtype": dtype, "cache_enabled": True})
    ]


@pytest.mark.parametrize("name", ["32-true", "16-true-bn32"])
def test_no_autocast_for_the_true_precisions(recorder, name):
    recorder.refuse(torch, "autocast")
    assert isinstance(precision.precision_policy(name, "cuda").autocast(), contextlib.nullcontext)


@pytest.mark.parametrize("name", ["bf16-mixed", "16-mixed", "32-true"])
def test_gradient_scaling_on_cuda_is_on_for_fp16_autocast_only(recorder, name):
    recorder.fake(torch.amp, "GradScaler")
    precision.precision_policy(name, "cuda").grad_scaler()
    assert recorder.calls == [("GradScaler", ("cuda",), {"enabled": name == "16-mixed"})]


def test_a_run_gives_autocast_and_the_scaler_its_devices_type(recorder):
    """prepare() passes the run's device type on; on a GPU it is "cuda" through the same line."""
    recipe = load_recipe(
        None,
        [
            "data.name=synthetic",
            "data.train_size=40",
            "data.test_size=20",
            "data.image_size=16",
            "model.name=airbench",
            "model.widths=[4, 4, 4]",
            "loader.kind=device",
            "loader.batch_size=20",
            "tricks.precision=bf16-mixed",
            "run.epochs=1",
            "run.device=cpu",
        ],
    )
    recorder.fake(torch.amp, "GradScaler")
    parts, _ = api.prepare(recipe, api.load_data(recipe), torch.device("cpu"))
    assert recorder.calls == [("GradScaler", ("cpu",), {"enabled": False})]
    assert parts.autocast.func.__self__.device_type == "cpu"  # the policy's bound method
    recorder.fake(torch, "autocast", contextlib.nullcontext())
    parts.autocast()
    assert recorder.calls[1:] == [
        ("autocast", (), {"device_type": "cpu", "dtype": torch.bfloat16, "cache_enabled": True})
    ]


# ---------------------------------------------------------------- peak memory


def test_peak_memory_on_cuda_reads_that_devices_allocator(recorder):
    recorder.fake(torch.cuda, "max_memory_allocated", 3_000_000_000)
    recorder.fake(torch.cuda, "max_memory_reserved", 4_000_000_000)
    recorder.fake(torch.cuda, "get_device_properties", SimpleNamespace(total_memory=12e9))
    assert memory.peak_memory(GPU) == {
        "peak_memory_kind": "CUDA max allocated",
        "peak_memory_bytes": 3_000_000_000,
        "peak_memory_reserved_bytes": 4_000_000_000,
        "peak_memory_pct": 25.0,
    }
    assert sorted(recorder.calls) == [
        ("get_device_properties", (GPU,), {}),
        ("max_memory_allocated", (GPU,), {}),
        ("max_memory_reserved", (GPU,), {}),
    ]


def test_resetting_peak_memory_resets_that_cuda_device_and_nothing_on_the_cpu(recorder):
    recorder.fake(torch.cuda, "reset_peak_memory_stats")
    memory.reset_peak_memory(GPU)
    memory.reset_peak_memory(torch.device("cpu"))
    assert recorder.calls == [("reset_peak_memory_stats", (GPU,), {})]


def test_peak_memory_on_the_cpu_is_the_processes_peak_rss(recorder):
    recorder.refuse(torch.cuda, "max_memory_allocated")
    peak = memory.peak_memory(torch.device("cpu"))
    assert set(peak) == {"peak_memory_kind", "peak_memory_bytes"}
    assert peak["peak_memory_bytes"] > 10_000_000 and "lifetime" in peak["peak_memory_kind"]


def test_free_memory_on_cuda_is_that_devices_free_memory(recorder):
    recorder.fake(torch.cuda, "mem_get_info", (5_000_000_000, 80_000_000_000))
    assert memory.free_memory_bytes(GPU) == 5_000_000_000
    assert recorder.calls == [("mem_get_info", (GPU,), {})]


def test_free_memory_on_the_cpu_asks_no_gpu_and_is_unknown_on_mps(recorder):
    recorder.refuse(torch.cuda, "mem_get_info")
    assert memory.free_memory_bytes(torch.device("cpu")) > 0
    assert memory.free_memory_bytes(torch.device("mps")) is None


def test_the_model_may_take_all_of_its_gpus_memory(recorder):
    recorder.fake(torch.cuda, "get_device_properties", H100)
    assert model_memory.device_memory_bytes(GPU) == H100.total_memory
    assert recorder.calls == [("get_device_properties", (GPU,), {})]


# ---------------------------------------------------------------- hardware and MFU peak


def test_hardware_fingerprint_on_cuda_describes_that_gpu(recorder):
    recorder.fake(torch.cuda, "get_device_properties", H100)
    recorder.fake(torch.backends.cudnn, "version", 90100)
    recorder.fake(hardware, "_nvidia_driver", "NVRM version: 570.86.15")
    info = hardware.hardware_fingerprint(GPU)
    assert info["device_type"] == "cuda" and info["device_name"] == H100.name
    assert info["device_memory_bytes"] == H100.total_memory
    assert info["compute_capability"] == "9.0" and info["cudnn"] == 90100
    assert info["driver"] == "NVRM version: 570.86.15"
    assert ("get_device_properties", (GPU,), {}) in recorder.calls


def test_hardware_fingerprint_on_the_cpu_asks_no_gpu(recorder):
    recorder.refuse(torch.cuda, "get_device_properties")
    info = hardware.hardware_fingerprint(torch.device("cpu"))
    assert info["device_name"] == info["cpu_model"] and "compute_capability" not in info


def test_the_mfu_peak_is_looked_up_by_the_name_of_the_runs_gpu(recorder):
    recorder.fake(torch.cuda, "get_device_name", H100.name)
    assert _peak(GPU, "bf16-mixed", None) == (989.4, "H100 SXM bf16")
    assert recorder.calls == [("get_device_name", (GPU,), {})]


def test_speedrun_finds_the_same_peak_from_the_stored_fingerprint(recorder):
    recorder.fake(torch.cuda, "get_device_properties", H100)
    recorder.fake(torch.backends.cudnn, "version", 90100)
    recorder.fake(hardware, "_nvidia_driver", None)
    stored = hardware.hardware_fingerprint(GPU)
    assert _resolve_peak(stored, "bf16-mixed", None) == (989.4, "H100 SXM bf16")
    assert _resolve_peak(stored, "32-true", None) == (494.7, "H100 SXM tf32")


def test_no_mfu_peak_on_the_cpu(recorder):
    recorder.refuse(torch.cuda, "get_device_name")
    assert _peak(torch.device("cpu"), "bf16-mixed", None) == (None, None)
    cpu = hardware.hardware_fingerprint(torch.device("cpu"))
    assert _resolve_peak(cpu, "bf16-mixed", None) == (None, None)


# ---------------------------------------------------------------- choosing the device


def test_auto_picks_cuda_when_torch_sees_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert api.resolve_device("auto") == torch.device("cuda")
    assert api.resolve_device("cuda") == torch.device("cuda")
    assert api.resolve_device("cpu") == torch.device("cpu")
