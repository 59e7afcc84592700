"""An image folder's files: the images of one split, listed from its folder or streamed from its
archive (`list_split`), each bounded by its size before it is read; hidden files skipped
silently, files that are not images skipped with a warning, unsafe archive members refused (see
data/imagefolder.py for the layout)."""

from __future__ import annotations

import dataclasses
import gzip
import io
import logging
import os
import re
import tarfile
import unicodedata
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tricklab.core.errors import TrickLabError
from tricklab.core.memory import format_bytes
from tricklab.data import limits
from tricklab.data.limits import MAX_IMAGE_FILE_BYTES

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff", ".ppm", ".pgm")
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
_SKIPPED_NAMES_SHOWN = 5  # names in the warning about skipped files


@dataclass(frozen=True)
class ImageEntry:
    """One image of a split: where it is (for messages), its class index, its bytes or path."""

    display: str
    label: int
    data: bytes | Path


@dataclass(frozen=True)
class SplitListing:
    classes: list[str]  # as shown (printable)
    entries: list[ImageEntry]
    folders: tuple[str, ...] = ()  # the class folders' names as they are (splits match by these)
    skipped: str | None = None  # the warning naming files that are not images: said once decoded


def walk_folder(folder: Path) -> list[Path]:
    """Every folder and file under `folder` but the hidden ones (a name starting with '.'), which
    are neither read nor entered: an unreadable `.git` stopped the dataset. Unlike `rglob`, a
    folder that cannot be listed raises (a PermissionError naming it), not read as empty."""

    def fail(err: OSError) -> None:
        raise err

    paths = []
    root = os.path.realpath(folder)
    # Linked class folders are followed (as torchvision's ImageFolder does). A link to a folder it
    # sits in (a cycle), or to one holding the split (it would walk the split again, or the whole
    # disk), is listed but not entered.
    for top, dirs, files in os.walk(folder, onerror=fail, followlinks=True):
        dirs[:] = [name for name in dirs if not name.startswith(".")]
        files = [name for name in files if not name.startswith(".")]
        real = os.path.realpath(top)
        inside = Path(top).relative_to(folder).parents
        above_root = root.startswith(real.rstrip(os.sep) + os.sep)
        if above_root or real in {os.path.realpath(folder / p) for p in inside}:
            dirs.clear()
            continue
        paths += [Path(top, name) for name in dirs + files]
    return paths


def list_split(source: Path) -> SplitListing:
    """The classes (sorted folder names) and images of one split, in (class, path) order."""
    name = source.name  # train, test or val; of an archive, without .tar.gz
    split = next(
        (name.removesuffix(s) for s in ARCHIVE_SUFFIXES if source.is_file() and name.endswith(s)),
        name,
    )
    files, skipped = (_archive_files if source.is_file() else _folder_files)(source, split)
    return dataclasses.replace(_index_classes(files, source, split), skipped=skipped)


def is_image_file(path: Path) -> bool:
    """Whether the split's decode reads `path`: a regular file named as an image."""
    return path.suffix.lower() in IMAGE_SUFFIXES and path.is_file()


def _folder_files(folder: Path, split: str) -> tuple[dict, str | None]:
    by_class: dict[str, list[tuple[str, bytes | Path]]] = {}
    skipped = []
    for path in sorted(walk_folder(folder)):
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):
            continue
        display = printable(f"{split}/{rel.as_posix()}")
        if path.is_dir():
            if len(rel.parts) == 1:
                by_class.setdefault(rel.parts[0], [])
        elif not is_image_file(path):
            skipped.append(display)
        else:
            if len(rel.parts) == 1:
                raise _outside_class_folder(display, split)
            check_file_size(path.stat().st_size, f"image {display}")
            by_class.setdefault(rel.parts[0], []).append((display, path))
    return _sorted_by_name(by_class), _skipped_note(skipped, folder)


def _archive_files(archive: Path, split: str) -> tuple[dict, str | None]:
    """The images of a (gzipped) tar, streamed: headers are checked as they come, members that
    are not images are skipped unread, and an image's bytes are read only within the limits."""
    by_class: dict[str, list[tuple[str, bytes | Path]]] = {}
    with_own_images: set[str] = set()  # top folders holding an image directly, not only deeper
    skipped, seen = [], set()
    budget = limits.available_memory_bytes()
    held = 0  # image bytes read so far
    with open(archive, "rb") as raw:  # an unreadable file is named by load_dataset
        try:
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            # A gzip stream read forwards once is as fast as decompressing it whole up front,
            # and needs no memory for the members it skips.
            stream = gzip.GzipFile(fileobj=raw) if gzipped else raw
            with tarfile.open(fileobj=_BoundedReads(stream, archive), mode="r:") as tar:
                for count, member in enumerate(tar, 1):
                    tar.members = []  # tarfile keeps every header read: memory without bound
                    if count > limits.MAX_ARCHIVE_MEMBERS:
                        raise TrickLabError(
                            f"archive {archive} holds more than {limits.MAX_ARCHIVE_MEMBERS:,} "
                            "entries; split it or use fewer images"
                        )
                    _refuse_unsafe_member(member, archive)
                    parts = [p for p in PurePosixPath(member.name).parts if p != "."]
                    if parts and parts[0] == split:
                        parts = parts[1:]
                    if not parts or any(part.startswith(".") for part in parts):
                        continue
                    display = printable(f"{member.name} (in {archive.name})")
                    if member.isdir():
                        if len(parts) == 1:
                            by_class.setdefault(parts[0], [])
                        continue
                    if PurePosixPath(parts[-1]).suffix.lower() not in IMAGE_SUFFIXES:
                        # skipped unread, but a gzip stream is read through: a bomb's hours
                        check_file_size(member.size, f"archive member {display}")
                        skipped.append(printable(member.name))
                        continue
                    if len(parts) == 1:
                        raise _outside_class_folder(display, split)
                    if len(parts) == 2:
                        with_own_images.add(parts[0])
                    if tuple(parts) in seen:  # tar appends: one image counted twice otherwise
                        raise TrickLabError(f"{display} is in the archive twice")
                    seen.add(tuple(parts))
                    check_file_size(member.size, display)
                    held += member.size
                    if budget is not None and held > budget:
                        raise TrickLabError(
                            f"archive {archive} holds more image bytes than fit in memory "
                            f"({format_bytes(held)} read, {format_bytes(budget)} available); "
                            "use fewer images"
                        )
                    by_class.setdefault(parts[0], []).append(
                        (display, _read_member(tar, member, archive))
                    )
                _check_end_marker(stream, tar.offset, archive)
        except (OSError, EOFError, zlib.error, tarfile.TarError) as err:
            # tarfile's "could not be opened" lists one line per compression it tried; keep the first.
            reason = (str(err).splitlines() or [type(err).__name__])[0].rstrip(":")
            raise TrickLabError(
                f"{archive} is not a readable tar archive: {reason}; replace it with a tar of "
                f"{split}/<class>/<image> (e.g. tar czf {split}.tar.gz {split})"
            ) from err
    _refuse_wrapper_folder(by_class, with_own_images, archive, split)
    return _sorted_by_name(by_class), _skipped_note(skipped, archive)


def _check_end_marker(stream: io.IOBase, offset: int, archive: Path) -> None:
    """Refuse a tar that stops without its end-of-archive block (512 zero bytes): one cut short
    between two members reads as a complete archive with fewer images otherwise."""
    # tarfile stops quietly both at a zero block, which it has then read whole, and at the end of
    # the file, where it read nothing or part of a block: the position tells which.
    if stream.tell() - offset != tarfile.BLOCKSIZE:
        raise TrickLabError(
            f"{archive} ends without a tar's end-of-archive block: the file was cut short "
            "(an interrupted copy or download?); copy or make it again"
        )


class _BoundedReads(io.RawIOBase):
    """A file whose single reads may not exceed what one image may be: tarfile reads a member's
    header, long name or body in one read, so a header declaring gigabytes stops here."""

    def __init__(self, stream: io.IOBase, archive: Path) -> None:
        self._stream, self._archive = stream, archive

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > MAX_IMAGE_FILE_BYTES:
            raise TrickLabError(
                f"archive {self._archive} holds a header or member of {size:,} bytes, more than "
                f"the {format_bytes(MAX_IMAGE_FILE_BYTES)} an image may be; refusing to read it"
            )
        return self._stream.read(size)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._stream.seek(offset, whence)

    def tell(self) -> int:
        return self._stream.tell()


def check_file_size(size: int, what: str) -> None:
    """Refuse an image file or an archive member above MAX_IMAGE_FILE_BYTES before reading it."""
    if size > MAX_IMAGE_FILE_BYTES:
        raise TrickLabError(
            f"{what} is {size:,} bytes; an image file may be at most "
            f"{format_bytes(MAX_IMAGE_FILE_BYTES)}: shrink it or remove it"
        )


def _skipped_note(skipped: list[str], where: Path) -> str | None:
    """The one warning naming files that are not images (by their suffix), which are left out;
    said once the split is decoded (`warn_skipped`), so a bad image after it is the one line."""
    if not skipped:
        return None
    shown = ", ".join(skipped[:_SKIPPED_NAMES_SHOWN])
    more = f" and {len(skipped) - _SKIPPED_NAMES_SHOWN} more" if len(skipped) > 5 else ""
    return (
        f"skipped {len(skipped)} file{'' if len(skipped) == 1 else 's'} in {where} that are not "
        f"images (not a file, or suffix not one of {' '.join(IMAGE_SUFFIXES)}): {shown}{more}"
    )


def warn_skipped(listing: SplitListing) -> None:
    """Log the listing's warning about files that are not images, if it has one."""
    if listing.skipped is not None:
        log.warning("%s", listing.skipped)


def _refuse_wrapper_folder(
    by_class: dict[str, list[tuple[str, bytes | Path]]],
    with_own_images: set[str],
    archive: Path,
    split: str,
) -> None:
    """An archive made one folder too high (`cifar/train/cat/1.png`) would load as one class named
    after that folder: refuse a lone top folder whose images all sit in subfolders of it."""
    if len(by_class) != 1 or with_own_images:
        return
    [(top, files)] = by_class.items()
    if not files:
        return  # an empty class folder: _index_classes names it
    raise TrickLabError(
        f"archive {archive} holds every image under one extra top folder {printable(top)!r}, "
        f"which would load as a single class; expected {split}/<class>/<image> at the top of "
        f"the archive: rebuild it with e.g. tar czf {archive.name} -C <folder holding {split}/> "
        f"{split}"
    )


def printable(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 (kept as surrogates) shown as \\xff escapes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _sorted_by_name(by_class: dict[str, list[tuple[str, bytes | Path]]]):
    """Files in name order (as strings), so a folder and its archive list images alike."""
    return {name: sorted(files, key=lambda item: item[0]) for name, files in by_class.items()}


def _refuse_unsafe_member(member: tarfile.TarInfo, archive: Path) -> None:
    """Refuse members that could reach outside the archive's own images: an absolute path, '..',
    or a link (its target is another path; an image folder's archive stores the images)."""
    name = member.name
    if (
        name.startswith(("/", "\\"))
        or re.match(r"^[A-Za-z]:", name)
        or ".." in re.split(r"[/\\]", name)
    ):
        raise TrickLabError(
            f"archive {archive} holds member {name!r} with an absolute path or '..'; refusing to "
            "read it: rebuild the archive with relative paths like train/<class>/<image>"
        )
    if member.issym() or member.islnk():
        kind = "symbolic link" if member.issym() else "hard link"
        raise TrickLabError(
            f"archive {archive} holds member {name!r}, a {kind} to {member.linkname!r}; refusing "
            "to read links: rebuild the archive with the files themselves (tar -h follows links)"
        )


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, archive: Path) -> bytes:
    if not member.isfile():  # a device, a pipe: tar stores no bytes for it
        kind = (
            "device"
            if member.isdev() and not member.isfifo()
            else "pipe (FIFO)"
            if member.isfifo()
            else "special file"
        )
        raise TrickLabError(
            f"archive {archive} holds member {printable(member.name)!r}, a {kind}, where an "
            "image should be: rebuild the archive with image files only"
        )
    try:
        f = tar.extractfile(member)
        if f is None:
            raise KeyError(member.name)
        return f.read()
    except (KeyError, OSError, tarfile.TarError) as err:
        raise TrickLabError(
            f"cannot read member {member.name} of archive {archive} ({err})"
        ) from err


def _outside_class_folder(display: str, split: str) -> TrickLabError:
    return TrickLabError(
        f"image {display} is not inside a class folder; expected {split}/<class>/<image>"
    )


def _index_classes(
    by_class: dict[str, list[tuple[str, bytes | Path]]], source: Path, split: str
) -> SplitListing:
    if not by_class:
        raise TrickLabError(f"{source} holds no class folders; expected {split}/<class>/<image>")
    names = sorted(by_class)
    if len(names) == 1:
        raise TrickLabError(
            f"{source} holds one class folder ({printable(names[0])}); a classifier needs at "
            f"least two: add {split}/<another class>/<image>"
        )
    for name in names:
        if not by_class[name]:
            raise TrickLabError(
                f"class folder {split}/{printable(name)} (in {source}) holds no images "
                f"({', '.join(IMAGE_SUFFIXES)}); add images or remove the folder"
            )
    # A class is its folder's name composed (NFC: macOS writes 'cafe\u0301' for 'café') without
    # spaces at its ends: two folders that are one class so are refused, not shown as two alike.
    keys = [unicodedata.normalize("NFC", name).strip() for name in names]
    if len(set(keys)) < len(keys):
        twice = next(ascii(n) for n, k in zip(names, keys, strict=True) if keys.count(k) > 1)
        raise TrickLabError(
            f"two class folders of {split} (in {source}) read as one class, {twice}: one has "
            "spaces at its ends or another Unicode form of the name; rename one of them"
        )
    names = [name for _, name in sorted(zip(keys, names, strict=True))]
    keys = sorted(keys)
    shown_names = [printable(key) for key in keys]
    if len(set(shown_names)) < len(names):  # a byte 0xff beside the four characters \xff
        twice = next(n for n in shown_names if shown_names.count(n) > 1)
        raise TrickLabError(
            f"two class folders of {split} (in {source}) read as one name, {twice}: one holds a "
            "byte that is not UTF-8, shown as that escape; rename one of them"
        )
    entries = [
        ImageEntry(display, label, data)
        for label, name in enumerate(names)
        for display, data in by_class[name]
    ]
    return SplitListing(shown_names, entries, tuple(keys))
