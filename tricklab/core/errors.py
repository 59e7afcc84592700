"""The one exception type for user mistakes (bad config, data, files)."""

import inspect
import numbers
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tricklab.core.oneline import shown


class TrickLabError(Exception):
    """A user mistake: the CLI prints its message as one line on stderr and exits with code 2.
    The message is that line when made (core/oneline.shown): a name with a newline or an escape
    sequence in it reaches a Python caller escaped too."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(shown(a) if isinstance(a, str) else a for a in args))


class MachineError(TrickLabError):
    """A problem of this machine or environment (a compile cache folder it cannot use), not of
    the run that met it: no run is recorded, and a study stops on it instead of recording each of
    its runs failed (every run would meet it)."""


def expect_type(value: object, kinds: type | tuple[type, ...], what: str) -> None:
    """TypeError naming `what` and what it takes, for a Python caller's argument of the wrong
    type (a lone string where a list of them is wanted is one: it would be read letter by
    letter)."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds):
        names = " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
        raise TypeError(f"{what} takes {names}, got {type_name(value)} {value!r:.60}")


def type_name(value: object) -> str:
    """`value`'s type as a message names it: `int`, `numpy.bool` (not a second `bool`)."""
    kind = type(value)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def expect_number(value: object, what: str, whole: bool = False) -> None:
    """`expect_type` for a number (a whole one with `whole`): True and False are none, though
    Python counts them as ints (`epochs=True` was one epoch), nor is a tensor or a text."""
    kind = numbers.Integral if whole else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        wanted = "a whole number (int)" if whole else "a number (int or float)"
        raise TypeError(f"{what} takes {wanted}, got {type_name(value)} {value!r:.60}")


def plain(value: object) -> object:
    """`value` with numpy's (and torch's) numbers, bools and arrays as Python's, inside lists,
    tuples and dicts too: a notebook's np.linspace, np.int64 or np.bool_ reads as typed."""
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [plain(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if not isinstance(value, (str, bytes)) and callable(getattr(value, "tolist", None)):
        try:
            return plain(value.tolist())  # a numpy scalar gives its Python value, an array a list
        except Exception:  # a tolist that is not numpy's: left as it is, and checked as such
            return value
    return value


def expect_callback(value: object, what: str, keywords: tuple[str, ...] = ()) -> None:
    """TypeError unless `value` is None or a plain function to call with one argument and
    `keywords` (not an `async def`, whose call would make a coroutine nobody awaits: the callback
    would silently never run; not `lambda: ...`, which failed the run it was called in)."""
    if value is None:
        return
    if not callable(value):
        raise TypeError(f"{what} takes a function, got {type_name(value)} {value!r:.60}")
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # a builtin's, which Python does not describe: called as is
        signature = None
    try:
        if signature is not None:
            signature.bind(None, **dict.fromkeys(keywords))
    except TypeError:
        takes = ", ".join(["one argument", *(f"{k}=" for k in keywords)])
        raise TypeError(f"{what} is called with {takes}; {value!r:.60} takes {signature}") from None
    for function in (value, getattr(value, "__call__", None)):  # noqa: B004 (an object's too)
        if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
            raise TypeError(f"{what} takes a plain function, got an async one ({value!r:.60})")
        if inspect.isgeneratorfunction(function):  # its call runs none of its body
            raise TypeError(f"{what} takes a plain function, got a generator ({value!r:.60})")


def call_hook(hook: Callable[..., Any], what: str, *args: Any, **kwargs: Any) -> Any:
    """`hook(*args, **kwargs)`; TypeError if it made an awaitable (a lambda around an `async def`, which
    expect_callback cannot tell from a plain function: the body would silently never run)."""
    made = hook(*args, **kwargs)
    if inspect.isawaitable(made):
        if inspect.iscoroutine(made):
            made.close()  # no "never awaited" warning besides the line
        raise TypeError(
            f"{what} returned {type_name(made)}, which nobody awaits: give a plain function"
        )
    return made


def expect_list_of(value: object, kinds: type | tuple[type, ...], what: str) -> None:
    """`expect_type` for a list or tuple whose every item is of `kinds`."""
    expect_type(value, (list, tuple), what)
    for item in value:  # type: ignore[union-attr]
        expect_type(item, kinds, f"each of {what}")


# Under `--nproc`, rank 0 alone prints a TrickLabError; another rank leaves its line in a file of
# this folder (named by the launcher) for the launcher to say, when rank 0 did not meet the same.
RANK_ERRORS_ENV = "TRICKLAB_RANK_ERRORS"
TORCHRUN_ENV = "TORCHELASTIC_RUN_ID"  # set by torchrun in every process it starts


def launched_by_torchrun() -> bool:
    """Whether torchrun (or a launcher like it) described a process group in the environment:
    RANK and WORLD_SIZE both (a RANK alone, as batch systems set, is no launch)."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def this_process_speaks() -> bool:
    """Whether this process prints its errors: any process but a launched rank other than 0
    (rank 0 speaks for all, or the launcher for a rank that met an error alone). Variables that
    describe no group a rank could be in (RANK 3 of 2) are no launch: the process says so, as
    does a rank no launcher started (no torchrun's, no `--nproc`'s): nobody would speak for it."""
    if not launched_by_torchrun():
        return True
    rank, size = os.environ["RANK"], os.environ["WORLD_SIZE"]
    in_a_group = rank.isascii() and rank.isdigit() and size.isdigit() and int(rank) < int(size)
    launcher = RANK_ERRORS_ENV in os.environ or TORCHRUN_ENV in os.environ
    return not (in_a_group and launcher and int(rank) > 0)


def leave_rank_error(message: str) -> None:
    """A launched rank's (RANK > 0) one-line error, left for `distributed.launch`; best effort."""

    folder, rank = os.environ.get(RANK_ERRORS_ENV), os.environ.get("RANK", "0")
    if folder and rank.isdigit():
        try:
            Path(folder, f"rank-{rank}").write_text(message[:2000], encoding="utf-8")
        except OSError:
            pass  # the launcher then says the rank failed, without its reason


def another_rank_failed() -> bool:
    """Whether a rank of this launch left its error (`leave_rank_error`): a stop that reaches
    rank 0 then is torchrun's, after that failure, not the user's Ctrl-C; the launcher says it."""

    folder = os.environ.get(RANK_ERRORS_ENV)
    try:
        return bool(folder) and any(name.startswith("rank-") for name in os.listdir(folder))
    except OSError:
        return False


def rank_error(folder: str, rank: int) -> str | None:
    """What rank `rank` left with `leave_rank_error`, if anything."""

    try:
        return Path(folder, f"rank-{rank}").read_text(encoding="utf-8")[:2000].strip() or None
    except OSError:
        return None
