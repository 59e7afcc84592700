"""Limits on what a dataset may ask for, checked before memory is allocated (importable without torch).

A decoded dataset lives in memory as uint8 arrays, so what it needs is known before decoding:
images × channels × height × width bytes. `check_fits_in_memory` compares such an estimate with
what this process may still allocate (the machine's available memory, its cgroup's limit, its
address-space limit), so an impossible request is one clear error instead of the kernel's
out-of-memory killer. Files are bounded apiece: an image file or archive member above
`MAX_IMAGE_FILE_BYTES` is refused by its size, before it is read.
"""

from __future__ import annotations

from tricklab.core.memory import available_memory_bytes, check_fits

MAX_IMAGE_SIZE = 1024  # data.image_size: side of the square images are resized to
MAX_IMAGE_FILE_BYTES = 64 << 20  # one image file or archive member
MAX_IMAGE_PIXELS = 8192 * 8192  # one source image, read from its header before decoding
MAX_ARCHIVE_MEMBERS = 2_000_000  # entries of one image archive (ImageNet's train: 1.28 million)
MAX_CIFAR_FILE_BYTES = 256 << 20  # one file of the CIFAR release (cifar-100's train is 148 MiB)


def check_fits_in_memory(name: str, needed_bytes: int, what: str, advice: str) -> None:
    """Raise a TrickLabError when `needed_bytes` is more than this process may still allocate.

    `what` says what needs it ("60000 images of 3x32x32"), `advice` what to ask for instead.
    """
    check_fits(
        f"dataset {name}",
        needed_bytes,
        available_memory_bytes(),
        what=f"{what}, decoded,",
        advice=advice,
    )
