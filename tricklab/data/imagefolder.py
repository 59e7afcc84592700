"""Image folders: `DIR/train/<class>/*` and `DIR/test/<class>/*`, or `train.tar.gz` / `test.tar.gz`.

Images are decoded with Pillow, one by one: on two shared cores a thread pool measured slower
than this plain loop (Pillow's per-image work is mostly Python-side for 32×32 images).
Archives are streamed member by member, never extracted to disk nor held whole in memory; a
member with an absolute path or `..`, or a link, is refused. Hidden files and folders
(`.DS_Store`, `._x.jpg`, `.ipynb_checkpoints`) are skipped silently; other files whose suffix is
not an image suffix are skipped with a warning naming them. Sizes are bounded before anything
large is read (see `tricklab.data.limits`): an image file or member by its bytes, an image by the
pixels its header declares, the decoded dataset by the memory available.
"""

from __future__ import annotations

import gzip
import io
import logging
import os
import re
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
from PIL import Image, ImageFile

from tricklab.core.errors import TrickLabError
from tricklab.core.memory import format_bytes
from tricklab.core.progress import decode_ticker
from tricklab.data import limits
from tricklab.data.cache import cached_splits, fingerprint_tree, sha256_file
from tricklab.data.dataset import LoadedSource, SourceRequest
from tricklab.data.limits import MAX_IMAGE_FILE_BYTES, MAX_IMAGE_PIXELS

log = logging.getLogger(__name__)

# Part of the cache key: raised when decoding changes what images come out (2: 16-bit grey scaled).
DECODER_VERSION = 2
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff", ".ppm", ".pgm")
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
# Folder (or archive) names of each split; torchvision/Lightning layouts often call the test split val/.
SPLIT_FOLDERS = {"train": ("train",), "test": ("test", "val")}
# Pillow modes that hold one grey channel; everything else is converted to RGB.
_GRAY_MODES = {"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"}
_SKIPPED_NAMES_SHOWN = 5  # names in the warning about skipped files


@dataclass(frozen=True)
class ImageEntry:
    """One image of a split: where it is (for messages), its class index, its bytes or path."""

    display: str
    label: int
    data: bytes | Path


@dataclass(frozen=True)
class SplitListing:
    classes: list[str]
    entries: list[ImageEntry]


def load_imagefolder(request: SourceRequest) -> LoadedSource:
    """The loader `load_dataset` calls: every split decoded once, then read from the cache."""
    if request.data_dir is None:
        raise TrickLabError(
            "dataset 'imagefolder' needs its folder: pass data_dir= (--data-dir / data.dir=) "
            "holding train/<class>/<image> or train.tar.gz"
        )
    sources = find_split_sources(request.data_dir)
    key_parts = {
        "sources": {split: source_fingerprint(path) for split, path in sources.items()},
        "image_size": request.image_size,
        "decoder": DECODER_VERSION,
    }
    classes, splits = cached_splits(
        "imagefolder",
        key_parts,
        tuple(sources),
        request.cache_dir,
        lambda: decode_imagefolder(sources, request.image_size),
    )
    return LoadedSource(classes, splits, str(request.data_dir))


# ---------------------------------------------------------------- locating the splits


def find_split_sources(root: Path) -> dict[str, Path]:
    """{"train": folder-or-archive, "test": folder-or-archive}; "test" is absent when neither exists.

    An extracted folder wins over an archive of the same split.
    """
    if not root.is_dir():
        problem = "is a file, not a folder" if root.exists() else "does not exist"
        raise TrickLabError(
            f"image folder {root} {problem}; pass data_dir= (--data-dir / data.dir=) "
            "pointing at a folder holding train/<class>/<image> or train.tar.gz"
        )
    sources = {}
    for split, names in SPLIT_FOLDERS.items():
        candidates = [
            path
            for name in names
            for path in [root / name, *(root / f"{name}{s}" for s in ARCHIVE_SUFFIXES)]
        ]
        found = next((c for c in candidates if c.is_dir() or (c.suffix and c.is_file())), None)
        if found is not None:
            sources[split] = found
    if "train" not in sources:
        raise TrickLabError(
            f"image folder {root} holds neither train/ nor train.tar.gz; expected "
            "train/<class>/<image> (and optionally test/<class>/<image>)"
        )
    return sources


def source_fingerprint(source: Path) -> str:
    """sha256 of an archive's bytes, or of a folder's tree (its folders, files and their bytes)."""
    if source.is_file():
        return sha256_file(source)
    return fingerprint_tree(_walk(source), source)


def _walk(folder: Path) -> list[Path]:
    """Every folder and file under `folder`. Unlike `rglob`, a folder that cannot be listed
    raises (a PermissionError naming it) instead of being skipped as if empty."""

    def fail(err: OSError) -> None:
        raise err

    paths = []
    root = os.path.realpath(folder)
    # Linked class folders are followed (as torchvision's ImageFolder does). A link to a folder it
    # sits in (a cycle), or to one holding the split (it would walk the split again, or the whole
    # disk), is listed but not entered.
    for top, dirs, files in os.walk(folder, onerror=fail, followlinks=True):
        real = os.path.realpath(top)
        inside = Path(top).relative_to(folder).parents
        above_root = root.startswith(real.rstrip(os.sep) + os.sep)
        if above_root or real in {os.path.realpath(folder / p) for p in inside}:
            dirs.clear()
            continue
        paths += [Path(top, name) for name in dirs + files]
    return paths


# ---------------------------------------------------------------- listing images


def list_split(source: Path) -> SplitListing:
    """The classes (sorted folder names) and images of one split, in (class, path) order."""
    name = source.name  # train, test or val; of an archive, without .tar.gz
    split = next(
        (name.removesuffix(s) for s in ARCHIVE_SUFFIXES if source.is_file() and name.endswith(s)),
        name,
    )
    files = _archive_files(source, split) if source.is_file() else _folder_files(source, split)
    return _index_classes(files, source, split)


def _folder_files(folder: Path, split: str) -> dict[str, list[tuple[str, bytes | Path]]]:
    by_class: dict[str, list[tuple[str, bytes | Path]]] = {}
    skipped = []
    for path in sorted(_walk(folder)):
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):
            continue
        display = printable(f"{split}/{rel.as_posix()}")
        if path.is_dir():
            if len(rel.parts) == 1:
                by_class.setdefault(rel.parts[0], [])
        elif path.suffix.lower() not in IMAGE_SUFFIXES or not path.is_file():
            skipped.append(display)
        else:
            if len(rel.parts) == 1:
                raise _outside_class_folder(display, split)
            _check_file_size(path.stat().st_size, f"image {display}")
            by_class.setdefault(rel.parts[0], []).append((display, path))
    _warn_skipped(skipped, folder)
    return _sorted_by_name(by_class)


def _archive_files(archive: Path, split: str) -> dict[str, list[tuple[str, bytes | Path]]]:
    """The images of a (gzipped) tar, streamed: headers are checked as they come, members that
    are not images are skipped unread, and an image's bytes are read only within the limits."""
    by_class: dict[str, list[tuple[str, bytes | Path]]] = {}
    with_own_images: set[str] = set()  # top folders holding an image directly, not only deeper
    skipped = []
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
                for member in tar:
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
                        skipped.append(printable(member.name))
                        continue
                    if len(parts) == 1:
                        raise _outside_class_folder(display, split)
                    if len(parts) == 2:
                        with_own_images.add(parts[0])
                    _check_file_size(member.size, display)
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
        except (OSError, EOFError, zlib.error, tarfile.TarError) as err:
            # tarfile's "could not be opened" lists one line per compression it tried; keep the first.
            reason = (str(err).splitlines() or [type(err).__name__])[0].rstrip(":")
            raise TrickLabError(
                f"{archive} is not a readable tar archive: {reason}; replace it with a tar of "
                f"{split}/<class>/<image> (e.g. tar czf {split}.tar.gz {split})"
            ) from err
    _warn_skipped(skipped, archive)
    _refuse_wrapper_folder(by_class, with_own_images, archive, split)
    return _sorted_by_name(by_class)


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


def _check_file_size(size: int, what: str) -> None:
    """Refuse an image file or member above MAX_IMAGE_FILE_BYTES before reading it."""
    if size > MAX_IMAGE_FILE_BYTES:
        raise TrickLabError(
            f"{what} is {size:,} bytes; an image file may be at most "
            f"{format_bytes(MAX_IMAGE_FILE_BYTES)}: shrink it or remove it"
        )


def _warn_skipped(skipped: list[str], where: Path) -> None:
    """One warning naming files that are not images (by their suffix), which are left out."""
    if not skipped:
        return
    shown = ", ".join(skipped[:_SKIPPED_NAMES_SHOWN])
    more = f" and {len(skipped) - _SKIPPED_NAMES_SHOWN} more" if len(skipped) > 5 else ""
    log.warning(
        "skipped %d file%s in %s that are not images (not a file, or suffix not one of %s): %s%s",
        len(skipped),
        "" if len(skipped) == 1 else "s",
        where,
        " ".join(IMAGE_SUFFIXES),
        shown,
        more,
    )


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
    for name in names:
        if not by_class[name]:
            raise TrickLabError(
                f"class folder {split}/{printable(name)} (in {source}) holds no images "
                f"({', '.join(IMAGE_SUFFIXES)}); add images or remove the folder"
            )
    entries = [
        ImageEntry(display, label, data)
        for label, name in enumerate(names)
        for display, data in by_class[name]
    ]
    return SplitListing([printable(name) for name in names], entries)


# ---------------------------------------------------------------- decoding


@contextmanager
def _refuse_truncated_images() -> Iterator[None]:
    """Make Pillow raise on truncated files (a global flag, so it is restored afterwards)."""
    previous = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        yield
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = previous


def decode_image(data: bytes | Path, display: str) -> Image.Image:
    """Decode one image fully, as mode "L" (grey sources) or "RGB" (everything else)."""
    try:
        with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as img:
            width, height = img.size  # from the header: nothing decoded yet
            if width * height > MAX_IMAGE_PIXELS:
                raise TrickLabError(
                    f"image {display} is {width}x{height} pixels, more than the "
                    f"{MAX_IMAGE_PIXELS:,} tricklab decodes; shrink it or remove it"
                )
            img.load()  # Pillow decodes lazily; only load() finds a truncated or corrupt body.
            if img.mode.startswith("I;16") or (img.mode == "I" and img.format == "PNG"):
                # 16-bit grey (PNG; mode "I" before Pillow 10.3): keep the top 8 bits; Pillow's
                # convert("L") would clip at 255.
                return Image.fromarray(
                    (np.asarray(img).astype(np.uint16) >> 8).astype(np.uint8), "L"
                )
            mode = "L" if img.mode in _GRAY_MODES else "RGB"
            return img if img.mode == mode else img.convert(mode)
    except TrickLabError:
        raise
    except Image.DecompressionBombError as err:
        raise TrickLabError(f"image {display} has too many pixels to decode ({err})") from err
    except Exception as err:  # Pillow raises many types for bad files (OSError, SyntaxError, ...)
        reason = re.sub(r" <_io\.BytesIO object at 0x[0-9a-f]+>", "", str(err))  # an archive member
        raise TrickLabError(
            f"cannot decode image {display} ({reason}): it is corrupt or truncated; replace or delete it"
        ) from err


def decode_imagefolder(
    sources: dict[str, Path], image_size: int | None
) -> tuple[list[str], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Decode every split: class names and {split: (uint8 N×C×H×W images, int64 labels)}.

    All splits share one size (else `image_size` must be given) and one channel count: 1 when
    every image is grey, else 3 (grey images are replicated into RGB, as Pillow's convert does).
    """
    listings = {split: list_split(source) for split, source in sources.items()}
    classes = listings["train"].classes
    for split, listing in listings.items():
        if listing.classes != classes:
            missing = sorted(set(classes) - set(listing.classes))
            extra = sorted(set(listing.classes) - set(classes))
            raise TrickLabError(
                f"the {split} classes differ from the train classes (missing: {missing}, extra: {extra}); "
                "both splits need the same class folders"
            )

    count = sum(len(listing.entries) for listing in listings.values())
    if image_size is not None:
        _check_decoded_fits(count, image_size, image_size)
    first: tuple[tuple[int, int], str] | None = None  # (width, height), display of the first image
    all_gray = True
    decoded = {}
    decoded_one = decode_ticker(count)  # the CLI's decoding bar, if one is shown
    with _refuse_truncated_images():
        for split, listing in listings.items():
            out = None
            for i, entry in enumerate(listing.entries):
                img = decode_image(entry.data, entry.display)
                decoded_one()
                if image_size is not None and img.size != (image_size, image_size):
                    img = img.resize((image_size, image_size), Image.Resampling.BILINEAR)
                if first is None:
                    first = (img.size, entry.display)
                    _check_decoded_fits(count, *img.size)
                elif img.size != first[0]:
                    raise _mixed_sizes(first, (img.size, entry.display))
                if out is None:
                    width, height = img.size
                    out = np.empty((len(listing.entries), height, width, 3), dtype=np.uint8)
                pixels = np.asarray(img)
                if pixels.ndim == 2:
                    out[i] = pixels[:, :, None]  # broadcast grey into all three channels
                else:
                    out[i] = pixels
                    all_gray = False
            labels = np.fromiter(
                (e.label for e in listing.entries), dtype=np.int64, count=len(listing.entries)
            )
            decoded[split] = (out, labels)

    channels = 1 if all_gray else 3
    return classes, {
        split: (np.ascontiguousarray(hwc[..., :channels].transpose(0, 3, 1, 2)), labels)
        for split, (hwc, labels) in decoded.items()
    }


def _check_decoded_fits(count: int, width: int, height: int) -> None:
    """Every image of every split, decoded as RGB and then copied into channels-first order."""
    limits.check_fits_in_memory(
        "imagefolder",
        2 * count * 3 * width * height,
        f"{count} images of 3x{height}x{width}",
        "ask for a smaller data.image_size or use fewer images",
    )


def _mixed_sizes(a: tuple[tuple[int, int], str], b: tuple[tuple[int, int], str]) -> TrickLabError:
    (wa, ha), name_a = a
    (wb, hb), name_b = b
    return TrickLabError(
        f"images differ in size: {name_a} is {wa}x{ha} but {name_b} is {wb}x{hb} (width x height); "
        "pass image_size= (data.image_size=) to resize all images to one size"
    )
