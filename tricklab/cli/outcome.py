"""A command's exit code: 0 or its own, 2 and one line for a user mistake or what this machine
lacks (a full disk, open files, memory to load torch's libraries), 130 for Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import errno
import os

from tricklab.cli.common import INTERRUPTED_EXIT_CODE, err_console, print_error
from tricklab.core.environment import check_environment, check_torch_env
from tricklab.core.errors import (
    TrickLabError,
    another_rank_failed,
    leave_rank_error,
    this_process_speaks,
)
from tricklab.core.paths import PATH_ERRNOS, disk_full_error, is_disk_full
from tricklab.core.safeio import shown
from tricklab.core.usercode import described

NO_TORCH_COMMANDS = ("tricks", "recipes", None)  # listings that never load torch (None: bare)
FILES_ERRNOS = (errno.EMFILE, errno.ENFILE)
FILES_ADVICE = "raise the open-files limit (ulimit -n, e.g. 1024) or use fewer loader.num_workers"
LOAD_ADVICE = (
    "a memory limit (ulimit -v; torch maps about 4 GiB of address space) or a broken install; "
    "raise the limit or reinstall"
)


def command_code(args: argparse.Namespace) -> int:
    """Run the parsed command `args.func(args)` (its stop request in args.stop); its exit code."""
    try:
        check_environment()  # before torch loads, or its first forward, reads them
        if args.command not in NO_TORCH_COMMANDS:
            check_torch_env()
        return args.func(args)
    except TrickLabError as exc:
        if this_process_speaks():  # under torchrun, rank 0 speaks for all
            print_error(str(exc))
        else:  # ...or the launcher for it, where only this rank met the error
            leave_rank_error(str(exc))
        return 2
    except OSError as exc:  # a full disk met where no file of ours was written (a storage)
        if exc.errno in FILES_ERRNOS:
            print_error(f"too many open files ({exc.strerror}): {FILES_ADVICE}")
            return 2
        if exc.filename and exc.errno in (*PATH_ERRNOS, errno.ENOENT):  # a folder the user
            gone = " (removed while the command ran?)" * (exc.errno == errno.ENOENT)
            print_error(f"cannot use the path {shown(exc.filename)}: {exc.strerror}{gone}")
            return 2  # may not enter, a name past PATH_MAX, a run folder deleted mid-run
        if not is_disk_full(exc):
            raise
        print_error(str(disk_full_error(exc)))
        return 2
    except (ImportError, MemoryError) as exc:  # torch's libraries not mapped: `ulimit -v`
        print_error(f"cannot load {_library(exc)}: {described(exc)}; {LOAD_ADVICE}")
        return 2
    except Exception as exc:  # Optuna's or a loader's wrapping of "too many open files"
        if not any(getattr(e, "errno", None) in FILES_ERRNOS for e in _chain(exc)):
            raise
        print_error(f"too many open files ({described(exc)[:120]}): {FILES_ADVICE}")
        return 2
    except KeyboardInterrupt:
        if this_process_speaks() and not another_rank_failed():  # once
            err_console.print("interrupted", highlight=False)
        return INTERRUPTED_EXIT_CODE


def _chain(exc: BaseException) -> list[BaseException]:
    """An exception and those it was raised from or during, as far as they go (at most 20)."""
    chain: list[BaseException] = []
    while exc is not None and len(chain) < 20 and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def _library(exc: BaseException) -> str:
    """What could not be loaded: the shared object an ImportError names, else torch's libraries."""
    path = getattr(exc, "path", None)
    return shown("/".join(path.split(os.sep)[-2:])) if path else "torch's libraries (out of memory)"
