"""Compile once: torch.compile's artifacts kept in tricklab's cache folder across processes.

PyTorch's own caches do the work (Inductor's FX graph cache and autotuning results, and on CUDA
Triton's kernels, all under TORCHINDUCTOR_CACHE_DIR); tricklab only points them at a folder of its
cache (`$TRICKLAB_CACHE/compile/<key>`) whose key changes with anything that could make an artifact
wrong: tricklab's version and a hash of its source, torch's version, and the device (GPU name and
compute capability; on a CPU the instruction set Inductor generates code for). A changed key is a
new, cold folder: a stale artifact is never looked up."""

from __future__ import annotations

import contextlib
import hashlib
import platform
from collections.abc import Iterator
from pathlib import Path

import torch

import tricklab
from tricklab.core.version import __version__
from tricklab.data.cache import default_cache_dir


def source_hash() -> str:
    """sha256 of every Python file of the tricklab package (paths and contents)."""
    package = Path(tricklab.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def device_key(device: torch.device) -> str:
    """What the generated code depends on: the GPU model and capability, or the CPU's ISA."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"cuda-{torch.cuda.get_device_name(device)}-sm{major}{minor}"
    return f"{device.type}-{platform.machine()}-{torch.backends.cpu.get_cpu_capability()}"


def compile_cache_dir(device: torch.device, root: Path | None = None) -> Path:
    """The folder of compile artifacts for this code, torch and device under `root` (default:
    tricklab's cache folder)."""
    key = "\n".join([__version__, source_hash(), torch.__version__, device_key(device)])
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    return (root or default_cache_dir()) / "compile" / name


@contextlib.contextmanager
def compile_cache(device: torch.device, root: Path | None = None) -> Iterator[Path]:
    """torch.compile's caches in `compile_cache_dir(device)` for the block; the environment as it
    was after."""
    # torch._inductor imports torch._dynamo (~2 s): only runs that compile pay for it
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    folder = compile_cache_dir(device, root)
    folder.mkdir(parents=True, exist_ok=True)
    with temporary_cache_dir(str(folder)):
        yield folder
