"""Outputs on disk: files written whole or not at all, folders claimed by one writer at a time,
folders made and removed when a step fails, and full disks named in one line."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from tricklab.core.errors import TrickLabError
from tricklab.core.outputs import CLAIM_NAME
from tricklab.core.safeio import shown

try:
    import fcntl
except ImportError:  # Windows: a claim is an exclusively created file (see claim_folder)
    fcntl = None  # type: ignore[assignment]

# No room for the write: the disk, the user's quota on it, or the largest file allowed (EFBIG:
# `ulimit -f`, or the file system's own limit; Python ignores SIGXFSZ, so the write says it)
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
NO_LOCKS_ERRNOS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)
# A path that cannot be used as it is named (too long, a loop of links, not allowed)
PATH_ERRNOS = (errno.ENAMETOOLONG, errno.ELOOP, errno.EACCES, errno.EPERM)

log = logging.getLogger(__name__)


@contextlib.contextmanager
def atomic_write(path: Path, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """A file to write `path`'s new content into: a temporary file beside it (its own, so writers
    racing on one path never share one), flushed to disk and renamed over `path` when the block
    ends, removed when it raises. A crash leaves the old file or the new one, never part of one.
    An OSError names `path` (a full disk fails in write(), which names no file); a full disk
    raises DiskFullError, one line for the CLI."""
    # the name cut short: a name near the file system's limit leaves room for the suffix
    tmp = path.with_name(f"{path.name[:120]}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        encoding = None if "b" in mode else open_kwargs.pop("encoding", "utf-8")
        with open(tmp, mode.replace("w", "x"), encoding=encoding, **open_kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None:
            _raise_naming(exc, path)
        raise


def resolved(path: Path) -> Path:
    """`path.resolve()`; a loop of symbolic links is the OSError (ELOOP) Python 3.13 raises, not
    3.10-3.12's RuntimeError, so it is said in one line as any path that cannot be used; a NUL
    (a Python caller's name: no command line holds one) is a TrickLabError, not a ValueError."""
    if "\0" in str(path):
        raise TrickLabError(
            f"cannot use the path {shown(path)}: a path cannot hold a NUL character"
        )
    try:
        return path.resolve()
    except RuntimeError as err:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from err


def user_path(text: str | os.PathLike, what: str) -> Path:
    """`text` as a path, a leading `~` or `~user` made that home folder (Path.expanduser), or a
    TrickLabError naming `what` where there is none (an unknown user, no HOME and no entry in the
    password file, as in some containers)."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        raise TrickLabError(
            f"{what} {shown(str(text))}: no home folder is known for its ~; give the full path"
        ) from None


def folder_arg(value: Any, what: str) -> Path | None:
    """A caller's folder (`what`: "train's out_dir") as an absolute Path; None stays None.
    TypeError unless a str or an os.PathLike giving text; TrickLabError for an empty name or a
    NUL. Absolute at once: a run outliving a chdir (another thread's, a notebook's %cd) keeps
    writing, and cleans up, where it was named."""
    if value is None:
        return None
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str):
        raise TypeError(f"{what} is a folder path (str or Path), got {value!r:.80}")
    if not text.strip():
        raise TrickLabError(f"{what} is empty: give a folder name")
    if "\0" in text:
        raise TrickLabError(f"{what} {shown(text)} holds a NUL character")
    try:  # `~` and `~user` as the home folder, as data_dir and cache_dir take them
        return Path(os.path.abspath(user_path(text, what)))
    except FileNotFoundError:  # a relative name, and the working folder was removed
        raise TrickLabError(
            f"{what} {shown(text)} is relative to a working folder that no longer exists: "
            "give a full path, or run from an existing folder"
        ) from None


def home_folder(instead: str) -> Path:
    """The user's home folder, for a default under it; TrickLabError saying to set HOME or
    `instead` (the setting that avoids it) where it is empty or unknown: an empty HOME would
    have put the default at the root (/.cache)."""
    if not os.environ.get("HOME", "unset").strip():
        raise TrickLabError(
            f"HOME is empty, and the default folder is under it: set HOME or {instead}"
        )
    try:
        return Path.home()
    except RuntimeError:
        raise TrickLabError(
            f"no home folder is known (HOME is unset and this user has none in the password file), "
            f"and the default folder is under it: set HOME or {instead}"
        ) from None


def write_with(
    path: Path, write: Callable[[str], object], check: Callable[[str], object] | None = None
) -> None:
    """`write(name)` makes the file under a temporary name beside `path`, then `check(name)`
    (raising if the writer failed without a word: torch's C++ export_chrome_trace ignores a full
    disk), flushed to disk and renamed over `path`: atomic_write for a writer that takes a file
    name. An OSError names `path`; a full disk raises DiskFullError."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tricklab-", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        if check is not None:
            check(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        for leftover in (tmp, f"{tmp}.tmp"):  # and the writer's own temporary file (torch's)
            with contextlib.suppress(OSError):
                os.unlink(leftover)
        if isinstance(exc, OSError) and exc.errno is not None:
            _raise_naming(exc, path)
        raise


def append_line(path: Path, line: str) -> None:
    """Append `line` and a newline to `path` (made if missing), whole or not at all: the bytes
    go in one write, and a write cut short (a full disk) is taken back before the error is
    raised (DiskFullError for a full disk), so the file never ends in part of a line. One writer at
    a time (see claim_folder)."""
    data = (line + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        try:
            written = 0
            while written < len(data):  # the kernel may write part: the next write says why
                written += os.write(fd, data[written:])
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            _raise_naming(exc, path)
    finally:
        os.close(fd)


def _raise_naming(exc: OSError, path: Path) -> None:
    """Raise `exc` again as an error about `path`: DiskFullError for a full disk."""
    if is_disk_full(exc):
        raise disk_full_error(exc, path, name_path=True) from exc
    if exc.filename == str(path):
        raise exc
    raise OSError(exc.errno, exc.strerror, str(path)) from exc


class FolderClaim:
    """A folder held by this process until `release()` (see claim_folder)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd

    def release(self) -> None:
        """Remove the claim file and let go of it (in that order: nobody claims a file on its way
        out). Calling it again does nothing."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None


def claim_folder(folder: Path) -> FolderClaim | None:
    """Claim the existing `folder` for this writer, or None when a live writer holds it.

    The claim is an exclusive lock (flock) on `folder/.tricklab-claim`, taken before anything is
    written there: of writers starting together exactly one gets it, and the kernel lets go of it
    when its process ends, so a claim left by a killed process is no claim. Without flock
    (Windows) the file is created exclusively instead (O_CREAT | O_EXCL), and a killed writer's
    file must be removed by hand. OSError when the folder cannot be written in."""
    path = folder / CLAIM_NAME
    if fcntl is None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return None
        return FolderClaim(path, fd)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError as exc:
            if exc.errno not in NO_LOCKS_ERRNOS:
                os.close(fd)
                raise
            # A file system without locks (some network mounts): the run goes on unguarded.
            log.warning("cannot lock %s (%s): runs into this folder are not kept apart", path, exc)
            return FolderClaim(path, fd)
        except BaseException:
            os.close(fd)
            raise
        try:  # the file we locked may have been released (unlinked) after we opened it
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        mine = os.fstat(fd)
        if current is not None and (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino):
            with contextlib.suppress(OSError):  # who holds it, for people; a full disk may refuse
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            return FolderClaim(path, fd)
        os.close(fd)


def claim_holder(folder: Path) -> str:
    """Who holds `folder`'s claim, for a message: "process N", or "another process"."""
    try:
        pid = (folder / CLAIM_NAME).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        pid = ""
    return f"process {pid}" if pid.isdigit() else "another process"


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk (or the user's quota on it) is full, or a file hit its largest
    allowed size."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding `path` (or the folder it would go in)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    device = path.stat().st_dev
    while path != path.parent and path.parent.stat().st_dev == device:
        path = path.parent
    return path


class DiskFullError(TrickLabError, OSError):
    """A write that found the disk (or the user's quota) full: an OSError with its errno and file,
    and a user-facing TrickLabError whose message is one line (see disk_full_error)."""

    def __init__(self, errno_: int, strerror: str, filename: str | None, message: str) -> None:
        super().__init__(errno_, strerror, filename)
        self.message = message

    def __str__(self) -> str:
        return self.message


def disk_full_error(
    exc: OSError, fallback: Path | None = None, *, name_path: bool = False
) -> DiskFullError:
    """One line for a full disk: the file that could not be written (`fallback` when the error
    names none, or always with `name_path`), the disk (its mount point) and what is free there."""
    where = fallback if name_path or not exc.filename else Path(exc.filename)
    code = exc.errno or errno.ENOSPC
    reason = exc.strerror or os.strerror(code)
    advice = "free some space and run again"
    if code == errno.EFBIG:  # not the disk: a limit on one file's size
        advice = "raise the file-size limit (ulimit -f) or write elsewhere"
    if where is None:
        return DiskFullError(code, reason, None, f"{reason}: {advice}")
    on = ""  # where a limit on one file's size stopped it, the disk's free space is beside it
    with contextlib.suppress(OSError):
        if code != errno.EFBIG:
            disk = mount_point(where)
            on = f" on the disk mounted at {disk} ({_size(shutil.disk_usage(disk).free)} free)"
    message = f"cannot write {where}: {reason}{on}; {advice}"
    return DiskFullError(code, reason, str(where), message)


def _size(n_bytes: int) -> str:
    if n_bytes < 1024:
        return f"{n_bytes} bytes"
    if n_bytes < 2**20:
        return f"{n_bytes / 1024:.0f} KiB"
    return f"{n_bytes / 2**20:.1f} MiB" if n_bytes < 2**30 else f"{n_bytes / 2**30:.1f} GiB"


def first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (what `mkdir(parents=True)` makes);
    None when `path` exists."""
    missing = None
    for folder in (path, *path.parents):
        try:
            if folder.exists():
                break
        except OSError as exc:  # a name longer than the file system takes (ENAMETOOLONG), ...
            raise TrickLabError(f"cannot use the path {path}: {exc.strerror or exc}") from None
        missing = folder
    return missing


def check_out_folder(path: Path, what: str) -> None:
    """TrickLabError, before anything is printed or made, when `path` cannot be (made) a folder
    to write `what` into: it or a parent is no folder (a file, a device, /dev/null), it is a link
    to nothing, or the first of it and its parents that exists takes no new files."""
    try:
        os.stat(path)
    except OSError as exc:  # a loop of links, a name too long: said as the CLI says any path
        if exc.errno in PATH_ERRNOS:
            raise TrickLabError(f"cannot use the path {shown(path)}: {exc.strerror}") from None
    for folder in (path, *path.parents):
        why = None
        if not folder.exists():
            if not folder.is_symlink():
                continue
            with contextlib.suppress(OSError):  # a link to nothing: mkdir would say "File exists"
                folder = Path(f"{folder} -> {os.readlink(folder)}")
            why = "is a link to a folder that does not exist; make the folder or give another"
        elif not folder.is_dir():
            why = f"is {not_a_file(folder) or 'a file'}, not a folder"
        elif not os.access(folder, os.W_OK | os.X_OK):  # EROFS, or a folder of another user
            why = "is read-only"
        else:
            try:  # a read-only disk (root or not), /proc: a folder made there and removed at once
                tempfile.TemporaryDirectory(dir=folder).cleanup()
            except OSError as exc:
                ro = exc.errno in (errno.EROFS, errno.EACCES)
                why = "is read-only" if ro else f"takes no new folder ({exc.strerror})"
        if why is not None:
            raise TrickLabError(f"cannot write {what} into {shown(path)}: {shown(folder)} {why}")
        return


def remove_empty_dirs(path: Path, created: Path | None) -> None:
    """Remove `path` and its parents up to `created` (what we made), while they are empty."""
    if created is None:
        return
    for folder in (path, *path.parents):
        try:
            folder.rmdir()
        except FileNotFoundError:  # never made (mkdir failed below it): its parents may be
            pass
        except OSError:  # not empty (someone wrote there meanwhile): keep the rest
            return
        if folder == created:
            return


def new_numbered_dir(base: Path) -> Path:
    """Make and return `base`, or `base-2`, `base-3`, ... if taken: each caller gets its own folder,
    also when several processes start at once (mkdir either creates the folder or fails)."""
    base.parent.mkdir(parents=True, exist_ok=True)
    for number in range(1, 10_000):
        folder = base if number == 1 else base.with_name(f"{base.name}-{number}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"{base} and 9,999 numbered variants exist")


def not_a_file(path: Path) -> str | None:
    """What `path` is when it exists but is no regular file, links followed ('a folder', 'a pipe
    (FIFO)', 'a device', ...): a file storage or input opened there would hang (a pipe), fail
    deep inside a library (a device) or be read as empty. None for a regular file or nothing."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:  # a name too long, a loop of links, a folder we may not enter
        return f"unusable ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
