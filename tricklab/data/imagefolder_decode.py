"""Decoding an image folder's splits with Pillow, one image at a time (on two shared cores a
thread pool measured slower than this plain loop): every image as grey or RGB, resized when asked,
the decoded dataset bounded by the memory available and each image by the pixels its header
declares."""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile

from tricklab.core.errors import TrickLabError
from tricklab.core.progress import decode_ticker
from tricklab.data import limits
from tricklab.data.imagefolder_files import list_split, warn_skipped
from tricklab.data.limits import MAX_IMAGE_PIXELS

# Pillow modes that hold one grey channel; everything else is converted to RGB.
_GRAY_MODES = {"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"}


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
        # Pillow's warnings are not the user's: its DecompressionBombWarning (the check below says
        # it), palette transparency, corrupt EXIF, a malformed MPO (2 to 6 lines each; decoded)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            warnings.simplefilter("ignore", UserWarning)
            img = Image.open(io.BytesIO(data) if isinstance(data, bytes) else data)
            with img:
                width, height = img.size  # from the header: nothing decoded yet
                if width * height > MAX_IMAGE_PIXELS:
                    raise TrickLabError(
                        f"image {display} is {width}x{height} pixels, more than the "
                        f"{MAX_IMAGE_PIXELS:,} tricklab decodes; shrink it or remove it"
                    )
                img.load()  # Pillow decodes lazily; only load() finds a truncated or corrupt body.
                wide = np.asarray(img) if img.mode in ("I", "F") else None
                if img.mode.startswith("I;16") or (
                    img.mode == "I" and 0 <= wide.min() <= wide.max() < 2**16
                ):
                    # 16-bit grey (PNG, PGM; mode "I" before Pillow 10.3): keep the top 8 bits;
                    # Pillow's convert("L") would clip at 255.
                    pixels = np.asarray(img).astype(np.uint16)
                    if 0 < pixels.max() < 256:  # 8-bit values in a 16- or 32-bit file: all black
                        raise TrickLabError(
                            f"image {display} holds pixels from 0 to {pixels.max()} in a "
                            f"{'16' if img.mode.startswith('I;16') else '32'}-bit file, which would "
                            "read as black (its top 8 bits); save it as an 8-bit image (PNG, JPEG)"
                        )
                    return Image.fromarray((pixels >> 8).astype(np.uint8), "L")
                if wide is not None:  # 32-bit integers past 16 bits, or floats: no range to read
                    raise TrickLabError(  # them in (convert("L") made all 255, or all 0)
                        f"image {display} has {'32-bit integer' if img.mode == 'I' else 'float'} "
                        "pixels, which tricklab cannot scale to 8 bits unseen; save it as an 8-bit image "
                        "(PNG, JPEG) or a 16-bit PNG"
                    )
                mode = "L" if img.mode in _GRAY_MODES else "RGB"
                return img if img.mode == mode else img.convert(mode)
    except TrickLabError:
        raise
    except MemoryError as err:  # a whole image, not a broken one: the memory left is too little
        raise TrickLabError(
            f"image {display} does not fit in the memory left to decode it (MemoryError): "
            "raise the memory limit (ulimit -v) or shrink the image"
        ) from err
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
    classes, folders = listings["train"].classes, listings["train"].folders
    for split, listing in listings.items():
        if listing.folders != folders:  # as named, not as shown: a byte 0xff is not "\\xff"
            shown = dict(zip(listing.folders + folders, listing.classes + classes))
            missing = ", ".join(shown[n] for n in sorted(set(folders) - set(listing.folders)))
            extra = ", ".join(shown[n] for n in sorted(set(listing.folders) - set(folders)))
            raise TrickLabError(
                f"the {split} classes differ from the train classes (missing: {missing or '-'}; "
                f"extra: {extra or '-'}); both splits need the same class folders"
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
    for listing in listings.values():  # said once decoded: a bad image's error is the one line
        warn_skipped(listing)
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
