"""A wall around a user's code (an own model's module and factory): what it does to the process
becomes one TrickLabError line instead.

A training script named as `model.name=script:make` parses its arguments and calls `sys.exit` at
import; a factory may `exit(0)`, raise KeyboardInterrupt itself or print. Within `user_code`:
SystemExit is a TrickLabError (it would end `train` silently with its code, or an ablation having
run nothing), a KeyboardInterrupt the code raised itself (not a Ctrl-C: tricklab's signal handler
raises `Interrupted`, which passes) is one too, and what the code prints to stdout/stderr is kept
out of tricklab's output, what it writes straight to file descriptors 1 and 2 too (its first line is
quoted in the error, where it says why). Standard input
is empty inside (code that asks with `input()` at import would wait forever: it gets one line
instead), and code that has not returned after NOTICE_SECONDS (a lock, a download, a sleep) makes
one line say so while it goes on, so that a silent wait has a name; Ctrl-C stops it."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

from tricklab.core.errors import TrickLabError
from tricklab.core.stopping import Interrupted, handler_installed


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:200] if lines else ""


def message_of(exc: BaseException) -> str:
    """str(exc), or a note saying it could not be read (an exception whose __str__ raises)."""
    try:
        return str(exc)
    except Exception:
        return "(its message could not be read)"


def described(exc: BaseException) -> str:
    """'ValueError: its first line' for an exception of user code, even one whose str() raises."""
    said = _first_line(message_of(exc))
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__


NOTICE_SECONDS = 30.0  # user code running this long without returning gets one line


@contextlib.contextmanager
def _empty_stdin() -> Iterator[None]:
    saved, sys.stdin = sys.stdin, io.StringIO("")
    try:
        yield
    finally:
        sys.stdin = saved


@contextlib.contextmanager
def _output_kept(printed: io.StringIO) -> Iterator[Any]:
    """What the code prints goes to `printed`, not to tricklab's output: to sys.stdout and
    sys.stderr, and straight to file descriptors 1 and 2 too (a C extension, `os.write`, a child
    process). Yields a stream to the real stderr, for tricklab's own notice."""
    stream, copies = sys.stderr, {}
    try:
        sink = tempfile.TemporaryFile()
    except OSError:  # no temporary folder to write in: Python's streams alone are kept apart
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            yield stream
        return
    with sink:
        try:
            for fd, python_stream in ((1, sys.stdout), (2, sys.stderr)):
                with contextlib.suppress(AttributeError, ValueError, OSError):
                    python_stream.flush()  # what tricklab printed before goes where it was going
                with contextlib.suppress(OSError):  # a closed descriptor: nothing to keep out
                    copies[fd] = os.dup(fd)
                    os.dup2(sink.fileno(), fd)
            if 2 in copies and _writes_to_fd_2(stream):
                stream = open(copies[2], "w", encoding="utf-8", closefd=False)  # noqa: SIM115 (closed below)
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                yield stream
        finally:
            for fd, copy in copies.items():
                with contextlib.suppress(AttributeError, ValueError, OSError):
                    (sys.__stdout__ if fd == 1 else sys.__stderr__).flush()
                os.dup2(copy, fd)
                os.close(copy)
            if stream is not sys.stderr:
                stream.close()
            sink.seek(0)
            printed.write(sink.read(1 << 16).decode(errors="replace"))


def _writes_to_fd_2(stream: Any) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, ValueError, OSError):  # a test's capture, a StringIO
        return False


@contextlib.contextmanager
def _notice_after(seconds: float, what: str, stream: Any) -> Iterator[None]:
    """One line on the real stderr if the block runs longer than `seconds` (it is not stopped)."""

    def say() -> None:
        print(
            f"note: {what} has run {seconds:.0f} s without returning (waiting on a lock, the "
            "network, a sleep?); Ctrl-C stops it",
            file=stream,
            flush=True,
        )

    timer = threading.Timer(seconds, say)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _default_device() -> object:
    """The device torch.set_default_device set (None: none set). Not get_default_device(): inside
    `with torch.device("meta")` (the memory estimate's build) that says "meta" either way."""
    import torch

    context = getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None)
    return getattr(context, "device", None)


def _process_settings() -> list[tuple[Callable[[], object], Callable[[Any], object]]]:
    """Process-wide settings user code could change under a run: how each is read and set."""
    import torch

    from tricklab.core.torchstate import AUTOCAST_DEVICES, autocast_depth, set_autocast_depth

    return [
        (torch.get_num_threads, torch.set_num_threads),  # recorded as the run's threads
        (torch.is_grad_enabled, torch.set_grad_enabled),  # off: the run's backward fails
        (torch.get_default_dtype, torch.set_default_dtype),
        (_default_device, torch.set_default_device),  # "meta": every tensor without storage
        (
            lambda: (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
            lambda on: torch.use_deterministic_algorithms(on[0], warn_only=on[1]),
        ),
        (
            lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
            lambda on: torch.autograd.set_detect_anomaly(*on),
        ),
        (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        (_umask, os.umask),  # 0o777: every file the run writes after it unreadable
        # an autocast entered, never left: on, and deep (its cache of casts would outlive steps)
        *(_autocast(device) for device in AUTOCAST_DEVICES),
        (autocast_depth, set_autocast_depth),
        # a `with torch.device("meta")` (or another mode) entered and never left: popped
        _mode_stack(torch._C._len_torch_function_stack, torch._C._pop_torch_function_stack),
        _mode_stack(
            torch._C._len_torch_dispatch_stack, lambda: torch._C._pop_torch_dispatch_stack(None)
        ),
        (torch.is_autocast_cache_enabled, torch.set_autocast_cache_enabled),
        # a watchdog's alarm, a sampling profiler's timer: their signal would kill the run later,
        # without a word; signals blocked in this thread would never reach tricklab's handlers
        *(
            _timer(which)
            for which in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
        ),
        (
            lambda: signal.pthread_sigmask(signal.SIG_BLOCK, []),
            lambda mask: signal.pthread_sigmask(signal.SIG_SETMASK, mask),
        ),
    ]


def _timer(which: int) -> tuple[Callable[[], object], Callable[[Any], object]]:
    return (lambda: signal.getitimer(which)), (lambda t: signal.setitimer(which, *t))


def _autocast(device: str) -> tuple[Callable[[], object], Callable[[Any], object]]:
    """Reading and setting whether autocast is on for `device`, and its dtype."""
    import torch

    def write(state: tuple[bool, Any]) -> None:
        torch.set_autocast_enabled(device, state[0])
        torch.set_autocast_dtype(device, state[1])

    return (lambda: (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))), write


def _mode_stack(
    length: Callable[[], int], pop: Callable[[], object]
) -> tuple[Callable[[], object], Callable[[Any], object]]:
    """Reading a mode stack's length, and setting it back by popping what was pushed since."""

    def write(saved: int) -> None:
        while length() > saved:
            pop()

    return length, write


@contextlib.contextmanager
def _same_process(what: str) -> Iterator[None]:
    """Put back what the code changed of the process: the recursion limit, the handlers of Ctrl-C,
    SIGTERM and the timers' signals (tricklab's own stop them) and `_process_settings`'s,
    silently; the working folder (os.chdir), then say so: --out and data.dir are relative to it,
    and a run folder would be made elsewhere."""
    saved, limit = os.getcwd(), sys.getrecursionlimit()
    main = threading.current_thread() is threading.main_thread()
    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF)
    handlers = {s: signal.getsignal(s) for s in watched} if main else {}
    settings = [(read, write, read()) for read, write in _process_settings()]
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)
        for read, write, value in settings:
            if read() != value:
                write(value)
        for number, handler in handlers.items():
            if handler is not None and signal.getsignal(number) is not handler:
                signal.signal(number, handler)
        try:
            moved = os.getcwd() != saved
        except OSError:  # moved into a folder since deleted
            moved = True
        if moved:
            os.chdir(saved)
    if moved:
        raise TrickLabError(
            f"{what} changed the working folder (os.chdir); tricklab's paths are relative to "
            "it: leave it as it is"
        )


@contextlib.contextmanager
def user_code(what: str) -> Iterator[None]:
    """Run the block's user code behind the wall; `what` names it in the error
    ("model.name=mod:make: importing mod")."""
    printed = io.StringIO()
    try:
        with (
            _output_kept(printed) as stderr,
            _notice_after(NOTICE_SECONDS, what, stderr),
            _same_process(what),
            _empty_stdin(),
        ):
            yield
    except Interrupted:
        raise
    except EOFError:
        raise TrickLabError(
            f"{what} read standard input (input()?), which a run does not give it; "
            "pass settings through the factory's arguments or the recipe"
        ) from None
    except SystemExit as exc:
        said = _first_line(printed.getvalue())
        advice = (
            "; is it a training script? Name a module that only defines the factory (or guard "
            "the script's code with `if __name__ == '__main__':`)"
            if "importing" in what
            else "; a model's code should raise an exception instead"
        )
        raise TrickLabError(
            f"{what} called sys.exit({exc.code!r})"
            + (f" after printing {said!r}" if said else "")
            + advice
        ) from None
    except KeyboardInterrupt:
        if not handler_installed():
            raise  # a Ctrl-C, as far as can be told
        raise TrickLabError(f"{what} raised KeyboardInterrupt itself") from None
    except Exception:
        raise  # the caller's to word (an error of the code, a user mistake, out of memory)
    except BaseException as exc:  # GeneratorExit and other exits that are not errors
        raise TrickLabError(f"{what} raised {described(exc)}") from None


def raised_by_code(exc: BaseException) -> str | None:
    """Why `exc`, met inside a run, came from the code that ran (a model's forward calling
    sys.exit, raising KeyboardInterrupt itself) rather than from the user; None for a Ctrl-C or
    SIGTERM (tricklab's handler raises Interrupted) and for anything else."""
    if isinstance(exc, SystemExit):
        return f"the run's code called sys.exit({exc.code!r}) (the model's?)"
    if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Interrupted):
        if handler_installed():
            return "the run's code raised KeyboardInterrupt itself (the model's?), not a Ctrl-C"
    return None


@contextlib.contextmanager
def checked_user_code(what: str) -> Iterator[None]:
    """`user_code` for the checks made before a run (the first forwards, `init_from_data`, its
    parameters): an error the code raises there is one TrickLabError line naming it, as a
    mistake in the model, not a failed run; out of memory is left to the caller, who sizes."""
    with user_code(what):
        try:
            yield
        except TrickLabError:
            raise
        except Exception as exc:
            if type(exc).__name__ == "OutOfMemoryError":  # torch's; core does not import torch
                raise
            raise TrickLabError(f"{what} raised {described(exc)}") from None


def checked_if(own: bool, what: str) -> contextlib.AbstractContextManager:
    """`checked_user_code(what)` around a user's model (`own`), nothing around tricklab's own."""
    return checked_user_code(what) if own else contextlib.nullcontext()
