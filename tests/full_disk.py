"""Writes made to fail as on a full disk, for tests where no small disk can be mounted."""

import builtins
import errno
import io
import os

NO_SPACE = os.strerror(errno.ENOSPC)


class FullDisk:
    """Writes to files whose name contains `name` fail with ENOSPC once `budget` bytes are written
    (the bytes that fit are written first, as a real disk does), through open() and os.write."""

    def __init__(self, monkeypatch, name, budget=0):
        self.name, self.budget, self.fds = name, budget, set()
        real_open, real_os_open, real_write, real_close = io.open, os.open, os.write, os.close

        def fake_open(file, mode="r", *args, **kwargs):
            handle = real_open(file, mode, *args, **kwargs)
            if set(mode) & set("wax+") and self.matches(file):
                return _Failing(handle, self)
            return handle

        def fake_os_open(path, flags, *args, **kwargs):
            fd = real_os_open(path, flags, *args, **kwargs)
            if self.matches(path):
                self.fds.add(fd)
            return fd

        def fake_write(fd, data):
            if fd not in self.fds:
                return real_write(fd, data)
            allowed = self.take(len(data))
            if allowed == 0:
                raise OSError(errno.ENOSPC, NO_SPACE)
            return real_write(fd, bytes(data)[:allowed])

        def fake_close(fd):
            self.fds.discard(fd)
            real_close(fd)

        for target in (io, builtins):
            monkeypatch.setattr(target, "open", fake_open)
        monkeypatch.setattr(os, "open", fake_os_open)
        monkeypatch.setattr(os, "write", fake_write)
        monkeypatch.setattr(os, "close", fake_close)

    def matches(self, file) -> bool:
        return isinstance(file, (str, os.PathLike)) and self.name in os.path.basename(file)

    def take(self, size: int) -> int:
        allowed = min(size, self.budget)
        self.budget -= allowed
        return allowed


class _Failing:
    def __init__(self, handle, disk):
        self._handle, self._disk = handle, disk

    def write(self, data):
        allowed = self._disk.take(len(data))
        self._handle.write(data[:allowed])
        if allowed < len(data):
            self._handle.flush()
            raise OSError(errno.ENOSPC, NO_SPACE)
        return len(data)

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()

    def __iter__(self):
        return iter(self._handle)
