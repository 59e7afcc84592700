"""Fault injection at every write, the way SQLite tests its commit: run a tricklab command with the
N-th write point failing or killed.

    python tests/faults.py N MODE ROOT -- train data.name=synthetic ... --out ROOT/run

Write points, counted in the order this process reaches them (files under ROOT only): opening a
file for writing, os.write, os.fsync, os.replace / os.rename, os.mkdir, and each Optuna storage
write (RDB and journal). MODE says what happens at the N-th:
  enospc, eio, eacces   it raises OSError with that errno (the disk is full, the disk fails, ...)
  kill                  the process is killed there (SIGKILL: power loss, the OOM killer)
  sigint, sigterm       the signal is delivered there (Ctrl-C, a scheduler's stop)
  count                 nothing fails (N is ignored)
Every point reached is logged, numbered, to ROOT/.fault-log: its last number is how many there are.
With FAULTS_PRELUDE=FILE in the environment, FILE (Python) runs first: a test's own setting, such as
the demo's plan shrunk to seconds (tests/tiny_demo.py).
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import runpy
import signal
import sys
from pathlib import Path

ERRNOS = {"enospc": errno.ENOSPC, "eio": errno.EIO, "eacces": errno.EACCES}
SIGNALS = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class Injector:
    def __init__(self, target: int, mode: str, root: Path) -> None:
        self.target, self.mode, self.root = target, mode, str(root.resolve())
        self.count = 0
        self.fds: set[int] = set()
        self.log = open(root / ".fault-log", "a", encoding="utf-8")  # noqa: SIM115 (kept open to the end)

    def ours(self, path) -> bool:
        try:
            return os.path.abspath(os.fsdecode(path)).startswith(self.root)
        except TypeError:
            return False

    def point(self, what: str) -> None:
        self.count += 1
        self.log.write(f"{self.count} {what}\n")
        self.log.flush()
        if self.count != self.target or self.mode == "count":
            return
        if self.mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.mode in SIGNALS:
            os.kill(os.getpid(), SIGNALS[self.mode])  # its handler runs before the write
            return
        code = ERRNOS[self.mode]
        raise OSError(code, os.strerror(code), what.split(" ", 1)[-1])


def install(injector: Injector) -> None:
    real_open, real_os_open, real_write = builtins.open, os.open, os.write
    real_fsync, real_replace, real_rename, real_mkdir = os.fsync, os.replace, os.rename, os.mkdir

    def open_(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+"):
            if injector.ours(file):
                injector.point(f"open {os.fsdecode(file)}")
        return real_open(file, mode, *args, **kwargs)

    def os_open(path, flags, *args, **kwargs):
        if flags & WRITE_FLAGS and injector.ours(path):
            injector.point(f"open {os.fsdecode(path)}")
            fd = real_os_open(path, flags, *args, **kwargs)
            injector.fds.add(fd)
            return fd
        return real_os_open(path, flags, *args, **kwargs)

    def write(fd, data):
        if fd in injector.fds:
            injector.point(f"write fd {fd}")
        return real_write(fd, data)

    def fsync(fd):
        injector.point(f"fsync fd {fd}")
        return real_fsync(fd)

    def renamer(real, name):
        def rename(src, dst, *args, **kwargs):
            if injector.ours(dst):
                injector.point(f"{name} {os.fsdecode(dst)}")
            return real(src, dst, *args, **kwargs)

        return rename

    def mkdir(path, *args, **kwargs):
        if injector.ours(path):
            injector.point(f"mkdir {os.fsdecode(path)}")
        return real_mkdir(path, *args, **kwargs)

    builtins.open = io.open = open_
    os.open, os.write, os.fsync, os.mkdir = os_open, write, fsync, mkdir
    os.replace, os.rename = renamer(real_replace, "replace"), renamer(real_rename, "rename")
    _storage_writes(injector)


def _storage_writes(injector: Injector) -> None:
    """Each Optuna storage write is a point (the database's own file writes happen in C)."""
    from optuna.storages import JournalStorage, RDBStorage

    for cls in (RDBStorage, JournalStorage):
        for name in dir(cls):
            if name.startswith(("set_", "create_new_", "delete_")):
                real = getattr(cls, name)

                def wrapped(self, *args, _real=real, _name=name, **kwargs):
                    injector.point(f"storage {_name}")
                    return _real(self, *args, **kwargs)

                setattr(cls, name, wrapped)


def main() -> None:
    target, mode, root = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    assert sys.argv[4] == "--"
    if os.environ.get("FAULTS_PRELUDE"):
        runpy.run_path(os.environ["FAULTS_PRELUDE"], run_name="__main__")
    injector = Injector(target, mode, root)
    install(injector)
    sys.argv = ["tricklab", *sys.argv[5:]]
    from tricklab.cli.main import run

    run()


if __name__ == "__main__":
    main()
