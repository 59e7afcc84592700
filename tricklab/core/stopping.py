"""Ctrl-C and SIGTERM: one exception, and a stop that is never lost.

Inside `stop_on_signals()` (every `tricklab` command runs there, and so do `ablate` and `sweep`
called from Python) SIGINT and SIGTERM raise `Interrupted` and mark the StopRequest it yields.
`train()` takes that request and checks it at each epoch end and when the run ends: Python drops an
exception raised while `__del__` or a weakref callback runs ("Exception ignored in ..."), and a
signal can land there; a library may also turn the KeyboardInterrupt into an error of its own. The
marked request stops the run all the same, and `train()` records it `interrupted`, not `failed`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

# The error text of a run or trial stopped by the user, wherever the signal caught it.
INTERRUPTED_ERROR = "stopped by Ctrl-C or SIGTERM"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Where SQLAlchemy (Optuna's storage) logs a cursor it could not close: the stop raised inside a
# database read leaves one, and its traceback would be printed under the one "interrupted" line.
DB_CLEANUP_LOGGER = "sqlalchemy.pool"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM. A KeyboardInterrupt, so code that handles Ctrl-C handles both."""


def is_interrupt(exc: BaseException) -> bool:
    """Whether `exc` ends the process rather than the run: Ctrl-C, SIGTERM, or an exit."""
    return isinstance(exc, (KeyboardInterrupt, SystemExit))


class StopRequest:
    """Set once Ctrl-C or SIGTERM arrived; `check()` raises Interrupted from then on.

    Within `deferred()` the signal only sets it: code that writes to a storage holds locks (a
    connection pool's, a database's) that an exception raised halfway would leave held, and the
    worker's next write would wait on them for ever. The block's end, or the next `check()`,
    raises instead; `deferred(False)` (a run) raises at once again."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.deferring = False
        # The command's exit code once its work is done, saved and said (cli/main.py, run by
        # `tricklab`): `stop_on_signals` then leaves a later stop ending the process with it.
        self.exit_code: int | None = None

    @contextlib.contextmanager
    def deferred(self, defer: bool = True) -> Iterator[None]:
        before = self.deferring
        if not defer:
            self.check()  # requested while deferred: the run does not start
        self.deferring = defer
        try:
            yield
        finally:
            self.deferring = before
        if not before:
            self.check()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Like `deferred()`, but the block's end raises nothing: it finishes what it must (a
        summary of the runs done) and reads `requested` to say it was stopped."""
        before, self.deferring = self.deferring, True
        try:
            yield
        finally:
            self.deferring = before

    def wait(self, seconds: float) -> None:
        """Sleep `seconds`, or less: a request made meanwhile ends the wait (then `check()`)."""
        self._event.wait(seconds)

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self) -> None:
        self._event.set()

    def check(self) -> None:
        if self._event.is_set():
            raise Interrupted(INTERRUPTED_ERROR)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """Within the block SIGINT and SIGTERM raise Interrupted and mark the yielded StopRequest (and
    SIGHUP, a closed terminal, where it is not ignored, as nohup does); the handlers found before
    (whatever they were, an ignored signal included) come back after it.

    Signal handlers belong to the main thread: elsewhere the request is yielded unmarked and the
    signals stay as they are."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_signal(signum: int, frame: Any) -> None:
        stop.request()
        if stop.deferring:
            return  # raised where the block ends or stop.check() runs
        db_cleanup.setLevel(logging.CRITICAL)  # the clean-up errors of an interrupted read
        raise Interrupted(INTERRUPTED_ERROR)

    on_signal.stops_tricklab = True  # type: ignore[attr-defined]  (see `handler_installed`)

    def on_unraisable(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            previous_hook(unraisable)  # a dropped stop is remembered by `stop`, not printed

    db_cleanup = logging.getLogger(DB_CLEANUP_LOGGER)
    previous_level = db_cleanup.level
    # A closed terminal's SIGHUP stops as SIGTERM does, unless the caller ignores it (nohup).
    hangup = getattr(signal, "SIGHUP", None)
    hangup = [hangup] if hangup and signal.getsignal(hangup) == signal.SIG_DFL else []
    previous = {signum: signal.signal(signum, on_signal) for signum in (*STOP_SIGNALS, *hangup)}
    previous_hook, sys.unraisablehook = sys.unraisablehook, on_unraisable
    try:
        yield stop
    finally:
        db_cleanup.setLevel(previous_level)
        sys.unraisablehook = previous_hook
        for signum, handler in previous.items():
            # None: a handler not installed from Python, which cannot be put back; the default.
            handler = signal.SIG_DFL if handler is None else handler
            if stop.exit_code is not None and handler is not signal.SIG_IGN:
                handler = _leaving(stop.exit_code)  # no window where a kill reads "killed"
            signal.signal(signum, handler)


def stop_request(stop: StopRequest | None) -> contextlib.AbstractContextManager[StopRequest]:
    """The caller's stop request, or Ctrl-C and SIGTERM caught for the call."""
    return contextlib.nullcontext(stop) if stop is not None else stop_on_signals()


def handler_installed() -> bool:
    """Whether SIGINT reaches this thread as Interrupted (`stop_on_signals`' handler is in
    place), so that a plain KeyboardInterrupt can only come from code that raised it."""
    if threading.current_thread() is not threading.main_thread():
        return False
    return getattr(signal.getsignal(signal.SIGINT), "stops_tricklab", False)


def deferring_stops(work: Callable[..., Any]) -> Callable[..., Any]:
    """`work(owner, ...)` inside `owner.stop.held()`: Ctrl-C and SIGTERM wait for its next safe
    point, where it checks `owner.stop` (a worker's loop, with work left), but in the blocks it
    runs under `deferred(False)` (a run); work that ends with nothing left returns, stopped or not
    (a stop as the last run ended said "rerun to resume" with nothing to resume)."""

    @functools.wraps(work)
    def deferring(owner: Any, *args: Any, **kwargs: Any) -> Any:
        with owner.stop.held():
            return work(owner, *args, **kwargs)

    return deferring


def _leaving(code: int) -> Callable[[int, Any], None]:
    """A signal handler that flushes the standard streams and ends the process with `code`."""

    def leave(signum: int, frame: Any) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)

    return leave
