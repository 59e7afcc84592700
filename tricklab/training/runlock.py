"""One training run at a time in a process: runs share torch's global random state and its
threads, so a second `train()` (another thread's, or one called from a run's `on_epoch`) or a study
started while a run trains is refused with one line instead of mixing two runs' random streams."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from tricklab.core.errors import TrickLabError

_ONE_RUN = threading.Lock()
_OWNER: list[int] = []  # the thread that holds it


@contextlib.contextmanager
def one_run_at_a_time() -> Iterator[None]:
    """The block holds the process's run; TrickLabError when another run holds it."""
    if not _ONE_RUN.acquire(blocking=False):
        raise TrickLabError(_running_error())
    try:
        _OWNER[:] = [threading.get_ident()]
        yield
    finally:
        _OWNER.clear()
        _ONE_RUN.release()


def check_not_training() -> None:
    """TrickLabError while a train() runs in this process: in another thread, or this call comes
    from inside it (its on_epoch)."""
    if _ONE_RUN.locked():
        raise TrickLabError(_running_error())


def _running_error() -> str:
    where = "this call comes from inside it (its on_epoch)"
    if _OWNER and _OWNER[0] != threading.get_ident():
        where = "in another thread"
    return (
        f"a run is already training in this process ({where}): runs share torch's global "
        "random state and threads, so two at once would not be reproducible; run them one "
        "after another, or in separate processes"
    )
