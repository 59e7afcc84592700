"""What the device cannot do, said in one line before or instead of a traceback: a precision it
cannot run (checked on a tiny net first), memory it does not have.

Out of memory: `train` records such a run as `oom` (core.device.out_of_memory_error tells one
apart: torch.cuda.OutOfMemoryError, the CPU allocator's "can't allocate memory"); a profile has no
run to record it in, so it is one TrickLabError naming what did not fit, exit 2, no traceback.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from tricklab.core.device import out_of_memory_error
from tricklab.core.errors import TrickLabError
from tricklab.core.memory import format_bytes
from tricklab.training import precision as precision_lib

ASKED = re.compile(r"allocate (\d+) bytes")  # DefaultCPUAllocator's words
MAX_REPEATS = 1_000  # rounds of a profile (each times every contender): more is a typo, for hours
MAX_BATCHES = 100_000  # batches per loader measurement (an epoch of 50,000 images at batch 1)


def check_count(value: Any, what: str, minimum: int, maximum: int, why: str = "") -> None:
    """TrickLabError unless `value` is a whole number from `minimum` to `maximum`."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise TrickLabError(
            f"{what} must be an integer >= {minimum}{why} and at most {maximum:,}, got {value!r}"
        )


def _asked(line: str) -> str:
    """'asked for 6.0 GiB' from the CPU allocator's message; its first line otherwise."""
    found = ASKED.search(line)
    if found:
        return f"asked for {format_bytes(int(found.group(1)))}"
    return line if len(line) <= 120 else line[:119] + "…"


def recipe_does_not_fit(recipe: Any, name: str | None) -> contextlib.AbstractContextManager:
    """out_of_memory_as_error for a recipe's step (`profile step`, `profile loader --recipe`)."""
    size = recipe.data.image_size
    subject = f"{name or 'the recipe'}'s step at batch {recipe.loader.batch_size}"
    subject += f" on {size}×{size} images" if size else ""
    advice = "lower data.image_size, loader.batch_size, loader.eval_batch_size or model.width"
    return out_of_memory_as_error(subject, advice)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is torch's or Python's out-of-memory error."""
    return isinstance(exc, MemoryError) or out_of_memory_error(exc) is not None


@contextlib.contextmanager
def out_of_memory_as_error(subject: str, advice: str) -> Iterator[None]:
    """Turn an out-of-memory inside the block into "{subject} does not fit in memory (...);
    {advice}"; any other error passes through as it is."""
    try:
        yield
    except MemoryError:
        raise TrickLabError(f"{subject} does not fit in memory; {advice}") from None
    except RuntimeError as exc:  # torch.cuda.OutOfMemoryError is one
        line = out_of_memory_error(exc)
        if line is None:
            raise
        raise TrickLabError(
            f"{subject} does not fit in memory ({_asked(line)}); {advice}"
        ) from None


def check_precision_runs(precision: str, device: torch.device) -> None:
    """Raise TrickLabError if `device` cannot train a conv-BN-ReLU-linear net in `precision`."""
    policy = precision_lib.precision_policy(precision, device.type)
    bf16 = policy.autocast_dtype == torch.bfloat16
    if device.type == "cuda" and bf16 and not torch.cuda.is_bf16_supported():
        raise TrickLabError(f"precision {precision} cannot run on {torch.cuda.get_device_name()}")
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2)
    ).to(device)
    policy.prepare_model(net)
    images = torch.randn(2, 3, 8, 8, device=device, dtype=policy.compute_dtype)
    try:
        with policy.autocast():
            loss = net(images).float().sum()
        loss.backward()
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TrickLabError(
            f"precision {precision} cannot run on this {device.type} device: {first_line}"
        ) from None


def resolved_once(
    values: Sequence[str], resolve: Callable[[str], str], flag: str, device_type: str
) -> tuple[str, ...]:
    """`values` as the device resolves them (`auto`), each once: two that resolve alike (`auto`
    and `bf16-mixed` on a CPU with AMX) are one TrickLabError, not a value dropped or a row twice."""
    resolved: dict[str, str] = {}
    for value in values:
        same = resolved.setdefault(resolve(value), value)
        if same != value:
            raise TrickLabError(
                f"{flag} lists {same} and {value}, which are both {resolve(value)} on "
                f"{device_type}: give one of them"
            )
    return tuple(resolved)
