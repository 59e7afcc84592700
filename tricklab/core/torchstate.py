"""torch's per-thread state a run must not inherit from its caller: grad mode, inference mode, the
default dtype and device, and autocast (on, its dtype, and how deep the autocast contexts go).

train() called inside `torch.no_grad()`, `torch.inference_mode()` or `with torch.device("meta")`,
or after `torch.set_default_dtype(torch.float64)`, failed every step (recorded `failed`). Inside
an autocast it trained wrong without a word: torch.autocast keeps a cache of weight casts (the
bf16 copy of each fp32 weight) and clears it only when the outermost autocast exits, so a run's
own autocast entered inside another one (a caller's `with torch.autocast(...)`, or one user code
entered and never left) served each step the weights as first cast, or another model's freed at
the same address: a bf16 run trained to chance (10.2 % against 44.9 %, val loss 19 in a test
session, 2026-11-28), and an fp32 run computed in the caller's dtype."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

T = TypeVar("T")
AUTOCAST_DEVICES = ("cpu", "cuda")


def autocast_depth() -> int:
    """How many torch.autocast contexts are entered and not left (0: none)."""
    depth = torch.autocast_increment_nesting()
    torch.autocast_decrement_nesting()
    return depth - 1


def set_autocast_depth(depth: int) -> None:
    """Leave (or re-enter the count of) autocast contexts down (up) to `depth`; at 0 the weight
    casts they cached are dropped, as the outermost context's exit drops them."""
    while autocast_depth() > depth:
        torch.autocast_decrement_nesting()
    while autocast_depth() < depth:
        torch.autocast_increment_nesting()
    if depth == 0:
        torch.clear_autocast_cache()


@contextlib.contextmanager
def outside_autocast() -> Iterator[None]:
    """The block runs as if no autocast were entered (none on, depth 0, its cache empty and on);
    the caller's autocast state is put back after it."""
    saved = [(torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in AUTOCAST_DEVICES]
    cache, depth = torch.is_autocast_cache_enabled(), autocast_depth()
    for device in AUTOCAST_DEVICES:
        torch.set_autocast_enabled(device, False)
    set_autocast_depth(0)
    torch.set_autocast_cache_enabled(True)
    try:
        yield
    finally:
        set_autocast_depth(0)  # what the block left entered, and its casts, dropped
        set_autocast_depth(depth)
        torch.set_autocast_cache_enabled(cache)
        for device, (on, dtype) in zip(AUTOCAST_DEVICES, saved):
            torch.set_autocast_enabled(device, on)
            torch.set_autocast_dtype(device, dtype)


@contextlib.contextmanager
def own_torch_state() -> Iterator[None]:
    """The block runs in torch's defaults whatever its caller's state: grad on, inference mode
    off, float32 the default dtype, new tensors on the CPU unless told (a caller's
    `with torch.device("meta")` or set_default_device), no autocast; the caller's state is put
    back after it."""
    # a device context only where the caller set another: its mode would see every torch call
    device = torch.get_default_device() if hasattr(torch, "get_default_device") else None
    default = torch.device("cpu") if device is not None and device.type != "cpu" else None
    with (
        default if default is not None else contextlib.nullcontext(),
        default_dtype(torch.float32),
        outside_autocast(),
        torch.inference_mode(False),
        torch.enable_grad(),
    ):
        yield


@contextlib.contextmanager
def held(get: Callable[[], T], put: Callable[[T], object], value: T) -> Iterator[None]:
    """A setting read by `get` and written by `put` (torch's default dtype, its thread count)
    held at `value` in the block, the caller's put back after it."""
    saved = get()
    put(value)
    try:
        yield
    finally:
        put(saved)


def default_dtype(dtype: torch.dtype) -> contextlib.AbstractContextManager[None]:
    """torch's default dtype `dtype` in the block, the caller's after it."""
    return held(torch.get_default_dtype, torch.set_default_dtype, dtype)
