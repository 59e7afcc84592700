"""The dataset layer: every source yields uint8 N×C×H×W images, int64 labels and class names."""

import gzip
import hashlib
import io
import os
import pickle
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from cifar10_names import CIFAR10_CLASSES
from permissions import as_a_user_without_root_rights
from PIL import Image

from tricklab.cli.main import main
from tricklab.core import memory as core_memory
from tricklab.core.errors import TrickLabError
from tricklab.data import cache, imagefolder_decode, limits
from tricklab.data.limits import MAX_IMAGE_FILE_BYTES, MAX_IMAGE_SIZE
from tricklab.data.names import DATASET_NAMES
from tricklab.data.sources import (
    Dataset,
    Sampling,
    Split,
    balanced_subset,
    describe_dataset,
    load_dataset,
    loader_for,
)
from tricklab.data.synthetic import make_synthetic

# ---------------------------------------------------------------- helpers


def write_image(path: Path, pixels: np.ndarray, **save_args) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, **save_args)


def make_tree(
    root: Path, classes=("dog", "ant", "cat"), per_split=None, size=8, grey=False, seed=0
) -> dict:
    """Write PNGs root/<split>/<class>/<i>.png with seeded noise; returns {relative path: pixels}."""
    per_split = per_split or {"train": 4, "test": 2}
    rng = np.random.default_rng(seed)
    written = {}
    for split, count in per_split.items():
        for name in classes:
            for i in range(count):
                shape = (size, size) if grey else (size, size, 3)
                pixels = rng.integers(0, 256, shape, dtype=np.uint8)
                rel = f"{split}/{name}/{i:04d}.png"
                write_image(root / rel, pixels)
                written[rel] = pixels
    return written


def tar_split(root: Path, split: str, out: Path) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        tar.add(root / split, arcname=split)
    return out


def cache_files(cache_dir: Path) -> list[Path]:
    return [p for p in cache_dir.rglob("*") if p.is_file()] if cache_dir.exists() else []


def write_fake_cifar(
    root: Path, kind: str = "cifar10", per_batch: int = 4, bad_label: int | None = None
) -> dict:
    """A tiny archive in the official python format (pickled dicts, as the real release is)."""
    rng = np.random.default_rng(1)
    if kind == "cifar10":
        folder, files, label_key = (
            "cifar-10-batches-py",
            [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"],
            b"labels",
        )
        meta_name, meta = "batches.meta", {b"label_names": [c.encode() for c in CIFAR10_CLASSES]}
        num_classes = 10
    else:
        folder, files, label_key = "cifar-100-python", ["train", "test"], b"fine_labels"
        meta_name, meta = (
            "meta",
            {b"fine_label_names": [f"class{i:03d}".encode() for i in range(100)]},
        )
        num_classes = 100
    blobs, batches = {meta_name: pickle.dumps(meta, protocol=2)}, {}
    for file in files:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(x) for x in rng.integers(0, num_classes, per_batch)]
        if bad_label is not None and file == files[-1]:
            labels[0] = bad_label
        batches[file] = (data, labels)
        blobs[file] = pickle.dumps({b"data": data, label_key: labels}, protocol=2)
    archive = root / ("cifar-10-python.tar.gz" if kind == "cifar10" else "cifar-100-python.tar.gz")
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for file, blob in blobs.items():
            info = tarfile.TarInfo(f"{folder}/{file}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return batches


# ---------------------------------------------------------------- real CIFAR-10 (JPEG copy)


@pytest.mark.slow
def test_cifar10_jpeg_has_50000_train_and_10000_test_images(cifar10_jpeg):
    assert (len(cifar10_jpeg.train), len(cifar10_jpeg.test)) == (50_000, 10_000)


@pytest.mark.slow
def test_cifar10_jpeg_has_5000_train_and_1000_test_images_per_class(cifar10_jpeg):
    assert torch.bincount(cifar10_jpeg.train.labels).tolist() == [5000] * 10
    assert torch.bincount(cifar10_jpeg.test.labels).tolist() == [1000] * 10


@pytest.mark.slow
def test_cifar10_jpeg_images_are_contiguous_uint8_3x32x32(cifar10_jpeg):
    images = cifar10_jpeg.train.images
    assert cifar10_jpeg.image_shape == (3, 32, 32)
    assert images.dtype == torch.uint8 and images.is_contiguous() and images.device.type == "cpu"
    assert cifar10_jpeg.train.labels.dtype == torch.int64


@pytest.mark.slow
def test_cifar10_jpeg_classes_are_airplane_to_truck(cifar10_jpeg):
    assert cifar10_jpeg.classes == CIFAR10_CLASSES and cifar10_jpeg.num_classes == 10


# ---------------------------------------------------------------- balanced subsets


def labelled_split(counts: list[int]) -> Split:
    labels = torch.cat([torch.full((n,), c, dtype=torch.int64) for c, n in enumerate(counts)])
    images = (
        torch.arange(len(labels), dtype=torch.int64)
        .remainder(256)
        .to(torch.uint8)
        .view(-1, 1, 1, 1)
    )
    return Split(images.expand(-1, 1, 2, 2).contiguous(), labels)


def test_balanced_subset_has_requested_size_and_equal_class_counts():
    subset = balanced_subset(labelled_split([50] * 10), 200, 10, seed=0)
    assert len(subset) == 200
    assert torch.bincount(subset.labels, minlength=10).tolist() == [20] * 10


def test_balanced_subset_same_seed_gives_same_subset():
    split = labelled_split([50] * 10)
    a, b = balanced_subset(split, 100, 10, seed=3), balanced_subset(split, 100, 10, seed=3)
    assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)


def test_balanced_subset_different_seed_gives_different_subset():
    split = Split(
        torch.arange(500).remainder(256).to(torch.uint8).view(-1, 1, 1, 1), torch.arange(500) % 10
    )
    a, b = balanced_subset(split, 100, 10, seed=0), balanced_subset(split, 100, 10, seed=1)
    assert not torch.equal(a.images, b.images)


def test_balanced_subset_spreads_the_remainder_one_image_per_class():
    counts = torch.bincount(
        balanced_subset(labelled_split([50] * 10), 103, 10, seed=0).labels
    ).tolist()
    assert sum(counts) == 103 and max(counts) - min(counts) == 1


def test_balanced_subset_fills_up_from_other_classes_when_one_class_is_short():
    counts = torch.bincount(
        balanced_subset(labelled_split([3, 50, 50]), 60, 3, seed=0).labels
    ).tolist()
    assert counts[0] == 3 and sorted(counts[1:]) == [28, 29]


def test_balanced_subset_larger_than_split_raises():
    with pytest.raises(TrickLabError, match="cannot take a subset of 11 images from a split of 10"):
        balanced_subset(labelled_split([5, 5]), 11, 2, seed=0)


def test_load_dataset_train_and_test_size_take_balanced_subsets(tmp_path):
    make_tree(tmp_path / "data", per_split={"train": 6, "test": 4})
    ds = load_dataset(
        "imagefolder", tmp_path / "data", train_size=9, test_size=3, cache_dir=tmp_path / "cache"
    )
    assert torch.bincount(ds.train.labels).tolist() == [3, 3, 3]
    assert torch.bincount(ds.test.labels).tolist() == [1, 1, 1]


def test_load_dataset_train_size_above_split_size_raises(tmp_path):
    make_tree(tmp_path / "data")
    with pytest.raises(
        TrickLabError, match=r"train_size=100 is more than the 12 images.*use at most 12"
    ):
        load_dataset("imagefolder", tmp_path / "data", train_size=100, cache_dir=tmp_path / "cache")


# ---------------------------------------------------------------- synthetic


def test_synthetic_has_requested_sizes_and_uint8_nchw_images():
    ds = load_dataset("synthetic", train_size=200, test_size=50, image_size=16)
    assert ds.train.images.shape == (200, 3, 16, 16) and ds.test.images.shape == (50, 3, 16, 16)
    assert ds.train.images.dtype == torch.uint8 and ds.train.labels.dtype == torch.int64
    assert ds.num_classes == 10


def test_synthetic_defaults_to_5000_train_1000_test_3x32x32():
    ds = load_dataset("synthetic")
    assert (len(ds.train), len(ds.test), ds.image_shape) == (5000, 1000, (3, 32, 32))


def test_synthetic_same_seed_gives_identical_images():
    a, b = make_synthetic(100, 20, 16, seed=5), make_synthetic(100, 20, 16, seed=5)
    assert torch.equal(a.train.images, b.train.images) and torch.equal(a.test.labels, b.test.labels)


def test_synthetic_different_seed_gives_different_images():
    assert not torch.equal(
        make_synthetic(100, 20, 16, seed=0).train.images,
        make_synthetic(100, 20, 16, seed=1).train.images,
    )


def test_synthetic_labels_are_balanced():
    ds = make_synthetic(300, 100, 16)
    assert torch.bincount(ds.train.labels).tolist() == [30] * 10
    assert torch.bincount(ds.test.labels).tolist() == [10] * 10


def test_synthetic_channels_are_configurable_for_1x28x28():
    assert make_synthetic(20, 10, 28, channels=1).image_shape == (1, 28, 28)


def test_synthetic_ignores_data_dir(tmp_path):
    assert load_dataset(
        "synthetic", tmp_path / "nowhere", train_size=10, test_size=10
    ).image_shape == (3, 32, 32)


def test_synthetic_mean_colour_alone_barely_beats_chance():
    ds = make_synthetic(2000, 1000, 16)
    train_colour = ds.train.images.float().mean(dim=(2, 3))
    centroids = torch.stack([train_colour[ds.train.labels == c].mean(0) for c in range(10)])
    test_colour = ds.test.images.float().mean(dim=(2, 3))
    predicted = torch.cdist(test_colour, centroids).argmin(1)
    assert (predicted == ds.test.labels).float().mean() < 0.3


@pytest.fixture
def one_thread():
    """Tiny convs on shared cores run several times faster on one thread than on two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_synthetic_is_learned_to_95_percent_by_a_small_conv_net_in_seconds(one_thread):
    ds = make_synthetic(1000, 500, 16, seed=0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
        )  # fmt: skip
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True)
        x, y = ds.train.images.float() / 255 - 0.5, ds.train.labels
        for _ in range(7):
            for batch in torch.randperm(len(x)).split(50):
                loss = F.cross_entropy(net(x[batch]), y[batch])
                opt.zero_grad()
                loss.backward()
                opt.step()
        net.eval()
        with torch.no_grad():
            accuracy = (
                (net(ds.test.images.float() / 255 - 0.5).argmax(1) == ds.test.labels).float().mean()
            )
    assert accuracy >= 0.95


# ---------------------------------------------------------------- image folders


def test_imagefolder_classes_are_sorted_folder_names(tmp_path):
    make_tree(tmp_path / "data", classes=("dog", "ant", "cat"))
    assert load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache").classes == [
        "ant",
        "cat",
        "dog",
    ]


def test_imagefolder_pixels_and_labels_match_the_written_files(tmp_path):
    written = make_tree(
        tmp_path / "data", classes=("dog", "ant"), per_split={"train": 2, "test": 1}
    )
    ds = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    # order: classes sorted, then file names sorted
    expected = [written[f"train/{c}/{i:04d}.png"] for c in ("ant", "dog") for i in range(2)]
    assert torch.equal(ds.train.images, torch.from_numpy(np.stack(expected)).permute(0, 3, 1, 2))
    assert ds.train.labels.tolist() == [0, 0, 1, 1] and ds.test.labels.tolist() == [0, 1]


def test_imagefolder_reads_tar_gz_archives_like_the_folder(tmp_path):
    make_tree(tmp_path / "tree")
    (tmp_path / "archives").mkdir()
    for split in ("train", "test"):
        tar_split(tmp_path / "tree", split, tmp_path / "archives" / f"{split}.tar.gz")
    from_folder = load_dataset("imagefolder", tmp_path / "tree", cache_dir=tmp_path / "cache")
    from_archive = load_dataset("imagefolder", tmp_path / "archives", cache_dir=tmp_path / "cache")
    assert from_archive.classes == from_folder.classes
    assert torch.equal(from_archive.train.images, from_folder.train.images)
    assert torch.equal(from_archive.test.labels, from_folder.test.labels)


def test_imagefolder_archive_of_class_folders_without_the_split_folder_loads_like_it(tmp_path):
    make_tree(tmp_path / "tree")
    (tmp_path / "archives").mkdir()
    for split in ("train", "test"):
        with tarfile.open(tmp_path / "archives" / f"{split}.tar.gz", "w:gz") as tar:
            for name in ("ant", "cat", "dog"):  # members ant/0000.png, ...: tar made inside train/
                tar.add(tmp_path / "tree" / split / name, arcname=name)
    from_folder = load_dataset("imagefolder", tmp_path / "tree", cache_dir=tmp_path / "cache")
    from_archive = load_dataset("imagefolder", tmp_path / "archives", cache_dir=tmp_path / "cache")
    assert from_archive.classes == ["ant", "cat", "dog"]
    assert torch.equal(from_archive.train.images, from_folder.train.images)
    assert torch.equal(from_archive.test.labels, from_folder.test.labels)


@pytest.mark.parametrize("top", ["cifar/train", "cifar", "train/cifar"])
def test_imagefolder_archive_with_an_extra_top_folder_is_refused_naming_it(tmp_path, top):
    make_tree(tmp_path / "tree", per_split={"train": 1})
    (tmp_path / "data").mkdir()
    with tarfile.open(tmp_path / "data" / "train.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "tree" / "train", arcname=top)  # cifar/train/ant/0000.png, ...
    with pytest.raises(
        TrickLabError,
        match=r"archive .*train\.tar\.gz holds every image under one extra top folder 'cifar', "
        r".*expected train/<class>/<image>",
    ):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert cache_files(tmp_path / "cache") == []


def test_imagefolder_archive_holding_an_image_twice_is_refused_naming_it(tmp_path):
    """Fourth hostile round: a member appended again (tar -r) was counted as a second image."""
    make_tree(tmp_path / "tree", per_split={"train": 1})
    (tmp_path / "data").mkdir()
    with tarfile.open(tmp_path / "data" / "train.tar", "w") as tar:
        tar.add(tmp_path / "tree" / "train", arcname="train")
        tar.add(tmp_path / "tree" / "train" / "cat" / "0000.png", arcname="train/cat/0000.png")
    with pytest.raises(
        TrickLabError, match=r"train/cat/0000\.png \(in train\.tar\) is in the archive twice"
    ):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")


def test_imagefolder_without_test_holds_out_a_stratified_val_fraction(tmp_path):
    make_tree(tmp_path / "data", per_split={"train": 10})
    ds = load_dataset(
        "imagefolder",
        tmp_path / "data",
        cache_dir=tmp_path / "cache",
        sampling=Sampling(val_fraction=0.2),
    )
    assert torch.bincount(ds.test.labels).tolist() == [2, 2, 2]
    assert torch.bincount(ds.train.labels).tolist() == [8, 8, 8]


def test_imagefolder_val_split_is_seeded(tmp_path):
    make_tree(tmp_path / "data", per_split={"train": 10})
    a, b, c = (
        load_dataset(
            "imagefolder",
            tmp_path / "data",
            cache_dir=tmp_path / "cache",
            sampling=Sampling(seed=s),
        ).test.images
        for s in (0, 0, 1)
    )
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_imagefolder_of_grey_images_keeps_one_channel(tmp_path):
    make_tree(tmp_path / "data", grey=True)
    assert load_dataset(
        "imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache"
    ).image_shape == (1, 8, 8)


def test_imagefolder_scales_16_bit_grey_to_8_bits_instead_of_clipping(tmp_path):
    make_tree(tmp_path / "data", classes=("a", "b"), per_split={"train": 1, "test": 1}, grey=True)
    deep = np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000  # 0 .. 63,000
    Image.fromarray(deep).save(tmp_path / "data" / "train" / "b" / "9999.png")
    ds = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert ds.image_shape == (1, 8, 8)
    assert torch.equal(ds.train.images[-1, 0], torch.from_numpy((deep >> 8).astype(np.uint8)))


def test_imagefolder_mixing_grey_and_colour_gives_rgb_with_grey_replicated(tmp_path):
    make_tree(tmp_path / "data", classes=("a", "b"), per_split={"train": 1, "test": 1})
    grey = np.full((8, 8), 77, dtype=np.uint8)
    write_image(tmp_path / "data" / "train" / "b" / "9999.png", grey)
    ds = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert ds.image_shape == (3, 8, 8)
    assert (ds.train.images[-1] == 77).all()


def test_imagefolder_image_size_resizes_mixed_sizes(tmp_path):
    make_tree(tmp_path / "data", size=8)
    write_image(
        tmp_path / "data" / "train" / "ant" / "big.png", np.zeros((20, 12, 3), dtype=np.uint8)
    )
    ds = load_dataset("imagefolder", tmp_path / "data", image_size=16, cache_dir=tmp_path / "cache")
    assert ds.image_shape == (3, 16, 16) and ds.test.images.shape[2:] == (16, 16)


def test_imagefolder_skips_hidden_files_and_folders(tmp_path):
    make_tree(tmp_path / "data")
    (tmp_path / "data" / "train" / "ant" / "._0000.png").write_bytes(b"AppleDouble junk")
    (tmp_path / "data" / "train" / ".ipynb_checkpoints").mkdir()
    ds = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert ds.classes == ["ant", "cat", "dog"] and len(ds.train) == 12


def test_imagefolder_takes_val_as_the_test_split_when_there_is_no_test(tmp_path):
    written = make_tree(tmp_path / "data", classes=("a", "b"), per_split={"train": 3, "val": 2})
    ds = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert len(ds.test) == 4 and ds.test.labels.tolist() == [0, 0, 1, 1]
    expected = np.stack([written[f"val/{c}/{i:04d}.png"] for c in ("a", "b") for i in range(2)])
    assert torch.equal(ds.test.images, torch.from_numpy(expected).permute(0, 3, 1, 2))
    tar_split(tmp_path / "data", "val", tmp_path / "val.tar.gz")  # the same as an archive
    shutil.rmtree(tmp_path / "data" / "val")
    (tmp_path / "val.tar.gz").rename(tmp_path / "data" / "val.tar.gz")
    from_archive = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert torch.equal(from_archive.test.images, ds.test.images)


def test_imagefolder_prefers_test_over_val(tmp_path):
    make_tree(tmp_path / "data", classes=("a", "b"), per_split={"train": 3, "val": 2, "test": 1})
    assert (
        len(load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache").test) == 2
    )


def test_imagefolder_follows_linked_class_folders_and_ends_link_cycles(tmp_path):
    make_tree(tmp_path / "real", classes=("a", "b"), per_split={"train": 3, "test": 1})
    (tmp_path / "data" / "train").mkdir(parents=True)
    for name in ("a", "b"):
        (tmp_path / "data" / "train" / name).symlink_to(tmp_path / "real" / "train" / name)
    (tmp_path / "data" / "test").symlink_to(tmp_path / "real" / "test")
    (tmp_path / "real" / "train" / "a" / "loop").symlink_to(tmp_path / "real" / "train" / "a")
    (tmp_path / "real" / "train" / "a" / "up").symlink_to(tmp_path)  # holds test/ and the cache too
    (tmp_path / "real" / "train" / "b" / "root").symlink_to("/")
    linked = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    for link in ("a/loop", "a/up", "b/root"):
        (tmp_path / "real" / "train" / link).unlink()
    real = load_dataset("imagefolder", tmp_path / "real", cache_dir=tmp_path / "cache")
    assert torch.bincount(linked.train.labels).tolist() == [3, 3]
    assert torch.equal(linked.train.images, real.train.images)
    assert torch.equal(linked.test.images, real.test.images)


def test_imagefolder_different_test_classes_raise(tmp_path):
    make_tree(tmp_path / "data", classes=("a", "b"), per_split={"train": 1})
    make_tree(tmp_path / "data", classes=("a", "c"), per_split={"test": 1})
    with pytest.raises(TrickLabError, match=r"test classes differ.*missing: b; extra: c\)"):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")


# ---------------------------------------------------------------- CIFAR official python format


def test_cifar10_reads_the_official_archive(tmp_path):
    batches = write_fake_cifar(tmp_path / "data")
    ds = load_dataset("cifar10", tmp_path / "data", cache_dir=tmp_path / "cache", download=False)
    assert ds.classes == CIFAR10_CLASSES and (len(ds.train), len(ds.test)) == (20, 4)
    first_data, first_labels = batches["data_batch_1"]
    assert torch.equal(ds.train.images[:4], torch.from_numpy(first_data).view(4, 3, 32, 32))
    assert ds.train.labels[:4].tolist() == first_labels


def test_cifar10_reads_the_extracted_folder_like_the_archive(tmp_path):
    write_fake_cifar(tmp_path / "data")
    from_archive = load_dataset(
        "cifar10", tmp_path / "data", cache_dir=tmp_path / "cache", download=False
    )
    with tarfile.open(tmp_path / "data" / "cifar-10-python.tar.gz") as tar:
        tar.extractall(tmp_path / "extracted", filter="data")
    from_folder = load_dataset(
        "cifar10", tmp_path / "extracted", cache_dir=tmp_path / "cache", download=False
    )
    assert torch.equal(from_folder.train.images, from_archive.train.images)
    assert torch.equal(from_folder.test.labels, from_archive.test.labels)


def test_cifar100_reads_fine_labels_and_100_class_names(tmp_path):
    batches = write_fake_cifar(tmp_path / "data", kind="cifar100")
    ds = load_dataset("cifar100", tmp_path / "data", cache_dir=tmp_path / "cache", download=False)
    assert ds.num_classes == 100 and ds.classes[7] == "class007"
    assert ds.test.labels.tolist() == batches["test"][1]


def test_cifar10_image_size_resizes(tmp_path):
    write_fake_cifar(tmp_path / "data")
    ds = load_dataset(
        "cifar10", tmp_path / "data", image_size=24, cache_dir=tmp_path / "cache", download=False
    )
    assert ds.image_shape == (3, 24, 24)


def test_cifar10_label_out_of_range_raises(tmp_path):
    write_fake_cifar(tmp_path / "data", bad_label=12)
    with pytest.raises(TrickLabError, match=r"label 12 in test_batch .* outside 0\.\.9"):
        load_dataset("cifar10", tmp_path / "data", cache_dir=tmp_path / "cache", download=False)
    assert cache_files(tmp_path / "cache") == []


def test_cifar10_pickle_naming_a_foreign_function_is_refused(tmp_path):
    write_fake_cifar(tmp_path / "data")
    with tarfile.open(tmp_path / "data" / "cifar-10-python.tar.gz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    (tmp_path / "x" / "cifar-10-batches-py" / "test_batch").write_bytes(
        b"cos\nsystem\n(S'echo pwned'\ntR."
    )
    with pytest.raises(TrickLabError, match=r"cannot read test_batch .*refusing to load os.system"):
        load_dataset("cifar10", tmp_path / "x", cache_dir=tmp_path / "cache", download=False)


def billion_laughs() -> list:
    """Ten names, each a list repeated by reference to 10**9 items: 300 bytes pickled."""
    names = ["x"] * 10
    for _ in range(8):
        names = [names] * 10
    return [names] * 10


@pytest.mark.parametrize(
    ("names", "why"),
    [
        (billion_laughs(), "no short UTF-8 text"),
        (5, "holds no list of class names"),
        (None, "holds no list of class names"),
        ({b"a": 1}, "holds no list of class names"),
        ([b"\xff\xfe"] + [f"c{i}".encode() for i in range(9)], "no short UTF-8 text"),
        ([b"a"] * 10, "given twice"),
        ([b"x" * 201] + [f"c{i}".encode() for i in range(9)], "no short UTF-8 text"),
        ([f"c{i}".encode() for i in range(9)], "holds 9 class names, not 10"),
    ],
    ids=[
        "repeated-by-reference",
        "a-number",
        "none",
        "a-dict",
        "not-utf8",
        "twice",
        "too-long",
        "nine",
    ],  # fmt: skip
)
def test_cifar10_meta_whose_class_names_are_not_ten_short_texts_is_refused_before_reading_them(
    tmp_path, names, why
):
    write_fake_cifar(tmp_path / "data")
    with tarfile.open(tmp_path / "data" / "cifar-10-python.tar.gz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    meta = tmp_path / "x" / "cifar-10-batches-py" / "batches.meta"
    meta.write_bytes(pickle.dumps({b"label_names": names}, protocol=2))
    with pytest.raises(TrickLabError, match=f"^batches.meta in .*{why}.*not the official cifar10"):
        load_dataset("cifar10", tmp_path / "x", cache_dir=tmp_path / "cache", download=False)


@pytest.mark.parametrize(
    "labels",
    [[b"x", 1, 2, 3], 5, [0.5, 1.0, 2.0, 3.0], [[0], [1], [2], [3]], [[0], [1, 2], 3, 4]],
    ids=["text", "scalar", "fractions", "2-d", "ragged"],
)
def test_cifar10_batch_with_labels_that_are_not_whole_numbers_is_refused(tmp_path, labels):
    write_fake_cifar(tmp_path / "data")
    with tarfile.open(tmp_path / "data" / "cifar-10-python.tar.gz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    data = np.zeros((4, 3072), dtype=np.uint8)
    batch = {b"data": data, b"labels": labels}
    (tmp_path / "x" / "cifar-10-batches-py" / "test_batch").write_bytes(
        pickle.dumps(batch, protocol=2)
    )
    with pytest.raises(TrickLabError, match=r"^test_batch in .* is not an official CIFAR batch"):
        load_dataset("cifar10", tmp_path / "x", cache_dir=tmp_path / "cache", download=False)


def test_cifar10_archive_lacking_a_batch_names_it(tmp_path):
    write_fake_cifar(tmp_path / "data")
    archive = tmp_path / "data" / "cifar-10-python.tar.gz"
    with tarfile.open(archive) as tar:
        kept = [
            (m, tar.extractfile(m).read())
            for m in tar.getmembers()
            if not m.name.endswith("data_batch_1")
        ]
    with tarfile.open(archive, "w:gz") as tar:
        for member, blob in kept:
            tar.addfile(member, io.BytesIO(blob))
    with pytest.raises(TrickLabError) as caught:
        load_dataset("cifar10", tmp_path / "data", cache_dir=tmp_path / "cache", download=False)
    assert str(caught.value) == (
        f"archive {archive} lacks cifar-10-batches-py/data_batch_1; it is not the official release"
    )


def test_cifar10_without_files_and_download_off_names_the_files(tmp_path):
    with pytest.raises(
        TrickLabError,
        match=r"cifar10 not found: looked for .*cifar-10-batches-py, .*cifar-10-python\.tar\.gz.*--data-dir",
    ):
        load_dataset("cifar10", tmp_path / "empty", cache_dir=tmp_path / "cache", download=False)


def test_cifar10_download_failing_offline_names_the_files(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(
        TrickLabError, match=r"cifar-10-python\.tar\.gz \(downloading failed.*data\.dir="
    ):
        load_dataset("cifar10", tmp_path / "empty", cache_dir=tmp_path / "cache")


@pytest.mark.parametrize(
    ("name", "expected_file"),
    [
        ("mnist", "train-images-idx3-ubyte"),
        ("fashion-mnist", "train-images-idx3-ubyte"),
        ("svhn", "train_32x32.mat"),
    ],
)
def test_torchvision_dataset_without_files_names_the_files(tmp_path, name, expected_file):
    with pytest.raises(
        TrickLabError, match=rf"{name} not found: looked for .*{expected_file}.*--data-dir"
    ):
        load_dataset(name, tmp_path / "empty", cache_dir=tmp_path / "cache", download=False)


def test_data_show_without_the_files_says_where_to_get_them(tmp_path, monkeypatch, capsys):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    empty = tmp_path / "empty"
    argv = ["data", "show", "cifar100", "--data-dir", str(empty), "--cache-dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.replace("\n", "")  # rich wraps the line at the terminal width
    assert "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz" in err
    assert f"into {empty}" in err and "cifar-100-python.tar.gz as it is" in err
    assert "extracted to cifar-100-python/" in err


@pytest.mark.parametrize(
    ("name", "where", "url"),
    [
        ("mnist", "MNIST/raw", "mnist/train-images-idx3-ubyte.gz"),
        ("fashion-mnist", "FashionMNIST/raw", "/t10k-labels-idx1-ubyte.gz"),
        ("svhn", "", "housenumbers/test_32x32.mat"),
    ],
)
def test_a_dataset_not_found_names_the_urls_of_its_files_and_where_they_go(
    tmp_path, name, where, url
):
    with pytest.raises(TrickLabError) as caught:
        load_dataset(name, tmp_path / "empty", cache_dir=tmp_path / "cache", download=False)
    message = str(caught.value)
    assert re.search(rf"download [^;]*{re.escape(url)}", message)
    assert f"into {tmp_path / 'empty' / where}".rstrip("/") in message


# ---------------------------------------------------------------- MNIST, Fashion-MNIST, SVHN (torchvision's files)


def write_idx(path: Path, array: np.ndarray) -> None:
    """An idx-ubyte file as MNIST ships it: 0, 0, type 0x08 (uint8), ndim, big-endian sizes, data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sizes = b"".join(size.to_bytes(4, "big") for size in array.shape)
    path.write_bytes(bytes([0, 0, 0x08, array.ndim]) + sizes + array.astype(np.uint8).tobytes())


def write_fake_mnist(root: Path, folder: str, bad_test_label: int | None = None) -> dict:
    """Tiny unzipped raw files where torchvision's MNIST / FashionMNIST read them offline:
    root/<class name>/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte. Returns {split: arrays}."""
    rng = np.random.default_rng(2)
    written = {}
    for split, prefix, count in (("train", "train", 6), ("test", "t10k", 4)):
        images = rng.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        labels = (np.arange(count) * 3 % 10).astype(np.uint8)
        if bad_test_label is not None and split == "test":
            labels[0] = bad_test_label
        write_idx(root / folder / "raw" / f"{prefix}-images-idx3-ubyte", images)
        write_idx(root / folder / "raw" / f"{prefix}-labels-idx1-ubyte", labels)
        written[split] = (images, labels)
    return written


def write_fake_svhn(root: Path, monkeypatch, bad_test_label: int | None = None) -> dict:
    """Tiny root/{train,test}_32x32.mat as torchvision's SVHN reads them: X is H×W×C×N uint8, y is
    N×1 with the digit 0 stored as 10. torchvision checks each file's md5 against the real
    release's, so the fake files' md5s are registered instead. Returns {split: (NCHW, digits)}."""
    import scipy.io
    from torchvision import datasets

    rng = np.random.default_rng(3)
    root.mkdir(parents=True, exist_ok=True)
    written = {}
    for split, count in (("train", 5), ("test", 3)):
        images = rng.integers(0, 256, (count, 3, 32, 32), dtype=np.uint8)
        digits = np.arange(count) * 7 % 10  # includes 0, stored as 10
        stored = np.where(digits == 0, 10, digits)
        if bad_test_label is not None and split == "test":
            stored[1] = bad_test_label
        path = root / f"{split}_32x32.mat"
        scipy.io.savemat(
            path, {"X": images.transpose(2, 3, 1, 0), "y": stored.reshape(-1, 1).astype(np.uint8)}
        )
        url, filename, _ = datasets.SVHN.split_list[split]
        md5 = hashlib.md5(path.read_bytes()).hexdigest()
        monkeypatch.setitem(datasets.SVHN.split_list, split, [url, filename, md5])
        written[split] = (images, digits)
    return written


@pytest.mark.parametrize(
    ("name", "folder", "first_class"),
    [("mnist", "MNIST", "0 - zero"), ("fashion-mnist", "FashionMNIST", "T-shirt/top")],
)
def test_mnist_style_files_load_as_1x28x28_uint8_with_int64_labels(
    tmp_path, name, folder, first_class
):
    written = write_fake_mnist(tmp_path / "data", folder)
    ds = load_dataset(name, tmp_path / "data", cache_dir=tmp_path / "cache", download=False)
    assert ds.image_shape == (1, 28, 28) and (len(ds.train), len(ds.test)) == (6, 4)
    assert ds.train.images.dtype == torch.uint8 and ds.train.labels.dtype == torch.int64
    assert ds.num_classes == 10 and ds.classes[0] == first_class
    for split in ("train", "test"):
        images, labels = written[split]
        assert torch.equal(getattr(ds, split).images, torch.from_numpy(images)[:, None])
        assert getattr(ds, split).labels.tolist() == labels.tolist()


def test_svhn_mat_files_load_as_3x32x32_uint8_with_digit_0_as_label_0(tmp_path, monkeypatch):
    written = write_fake_svhn(tmp_path / "data", monkeypatch)
    ds = load_dataset("svhn", tmp_path / "data", cache_dir=tmp_path / "cache", download=False)
    assert ds.image_shape == (3, 32, 32) and (len(ds.train), len(ds.test)) == (5, 3)
    assert ds.train.images.dtype == torch.uint8 and ds.train.labels.dtype == torch.int64
    assert ds.classes == [str(d) for d in range(10)]
    for split in ("train", "test"):
        images, digits = written[split]
        assert torch.equal(getattr(ds, split).images, torch.from_numpy(images))
        assert getattr(ds, split).labels.tolist() == digits.tolist()


@pytest.mark.parametrize(("name", "bad_label"), [("mnist", 12), ("svhn", 11)])
def test_torchvision_dataset_label_out_of_range_raises(tmp_path, monkeypatch, name, bad_label):
    if name == "svhn":
        write_fake_svhn(tmp_path / "data", monkeypatch, bad_test_label=bad_label)
    else:
        write_fake_mnist(tmp_path / "data", "MNIST", bad_test_label=bad_label)
    with pytest.raises(
        TrickLabError,
        match=rf"label {bad_label} in {name} test .* is outside 0\.\.9 \(10 classes\)",
    ):
        load_dataset(name, tmp_path / "data", cache_dir=tmp_path / "cache", download=False)
    assert not (tmp_path / "cache").exists()


def test_mnist_file_with_a_malformed_header_is_one_clear_error(tmp_path):
    write_fake_mnist(tmp_path / "data", "MNIST")
    (tmp_path / "data" / "MNIST" / "raw" / "train-images-idx3-ubyte").write_bytes(b"not idx data")
    with pytest.raises(
        TrickLabError, match=r"^cannot read mnist from .* delete the files and download again$"
    ):
        load_dataset("mnist", tmp_path / "data", cache_dir=tmp_path / "cache", download=False)
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------- bad input


def test_unknown_dataset_name_lists_the_valid_names():
    with pytest.raises(TrickLabError, match=r"unknown dataset 'cifar11'; choose one of: ") as err:
        load_dataset("cifar11")
    assert str(err.value).endswith(", ".join(DATASET_NAMES))
    assert {"cifar10", "cifar100", "mnist", "imagefolder", "synthetic"} <= set(DATASET_NAMES)


def test_missing_image_folder_raises(tmp_path):
    with pytest.raises(TrickLabError, match=r"image folder .*nowhere does not exist"):
        load_dataset("imagefolder", tmp_path / "nowhere", cache_dir=tmp_path / "cache")


def test_image_folder_without_train_raises(tmp_path):
    (tmp_path / "data" / "test" / "a").mkdir(parents=True)
    with pytest.raises(TrickLabError, match=r"holds neither train/ nor train\.tar\.gz"):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("cached_before", [False, True])
def test_empty_class_folder_is_named(tmp_path, cached_before):
    make_tree(tmp_path / "data")
    if cached_before:  # the same images, loaded and cached before the empty folder appeared
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    (tmp_path / "data" / "train" / "zebra").mkdir()
    with pytest.raises(TrickLabError, match=r"class folder train/zebra .*holds no images"):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert len(cache_files(tmp_path / "cache")) == 2 * cached_before  # nothing new


def test_corrupt_image_is_named(tmp_path):
    make_tree(tmp_path / "data")
    (tmp_path / "data" / "train" / "cat" / "0003.png").write_bytes(b"not an image at all")
    with pytest.raises(TrickLabError, match=r"cannot decode image train/cat/0003\.png"):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert cache_files(tmp_path / "cache") == []


def test_corrupt_image_in_an_archive_is_named_plainly(tmp_path):
    make_tree(tmp_path / "tree")
    (tmp_path / "tree" / "train" / "cat" / "0003.png").write_bytes(b"not an image at all")
    (tmp_path / "archives").mkdir()
    for split in ("train", "test"):
        tar_split(tmp_path / "tree", split, tmp_path / "archives" / f"{split}.tar.gz")
    with pytest.raises(
        TrickLabError, match=r"0003\.png \(in train\.tar\.gz\) \(cannot identify"
    ) as err:
        load_dataset("imagefolder", tmp_path / "archives", cache_dir=tmp_path / "cache")
    assert "BytesIO" not in str(err.value)


def test_truncated_jpeg_is_named(tmp_path):
    make_tree(tmp_path / "data")
    noise = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).save(buffer, format="JPEG", quality=95)
    (tmp_path / "data" / "train" / "cat" / "0003.jpg").write_bytes(
        buffer.getvalue()[: len(buffer.getvalue()) // 2]
    )
    with pytest.raises(TrickLabError, match=r"cannot decode image train/cat/0003\.jpg .*truncated"):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert cache_files(tmp_path / "cache") == []


def test_mixed_image_sizes_name_two_files_and_suggest_image_size(tmp_path):
    make_tree(tmp_path / "data", size=8)
    write_image(
        tmp_path / "data" / "train" / "dog" / "big.png", np.zeros((10, 12, 3), dtype=np.uint8)
    )
    with pytest.raises(
        TrickLabError,
        match=r"train/ant/0000\.png is 8x8 but train/dog/big\.png is 12x10.*image_size=",
    ):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert cache_files(tmp_path / "cache") == []


@pytest.mark.parametrize(
    ("member", "kind", "refusal"),
    [
        ("train/../../evil.png", tarfile.REGTYPE, r" with an absolute path or '\.\.'"),
        ("/abs/train/cat/x.png", tarfile.REGTYPE, r" with an absolute path or '\.\.'"),
        ("train/ant/x.png", tarfile.SYMTYPE, r", a symbolic link to '/etc/passwd'; refusing"),
        ("train/ant/x.png", tarfile.LNKTYPE, r", a hard link to '/etc/passwd'; refusing"),
        # third hostile round: "cannot read member ... ('train/ant/x.png')", no reason given
        ("train/ant/x.png", tarfile.CHRTYPE, r", a device, where an image should be"),
        ("train/ant/x.png", tarfile.FIFOTYPE, r", a pipe \(FIFO\), where an image should be"),
    ],
    ids=["dotdot", "absolute", "symlink", "hardlink", "device", "fifo"],
)
def test_tar_member_with_dotdot_absolute_path_or_link_is_refused(tmp_path, member, kind, refusal):
    make_tree(tmp_path / "tree", per_split={"train": 1})
    blob = (tmp_path / "tree" / "train" / "ant" / "0000.png").read_bytes()
    with tarfile.open(tmp_path / "train.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "tree" / "train", arcname="train")  # a valid split around the member
        info = tarfile.TarInfo(member)
        info.type = kind
        if kind == tarfile.REGTYPE:
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
        else:
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    with tarfile.open(tmp_path / "train.tar.gz") as tar:
        assert member in tar.getnames()  # tarfile kept the unsafe member as written
    with pytest.raises(TrickLabError, match=rf"holds member '{re.escape(member)}'{refusal}"):
        load_dataset("imagefolder", tmp_path, cache_dir=tmp_path / "cache")
    assert cache_files(tmp_path / "cache") == []


def test_imagefolder_without_data_dir_asks_for_one():
    with pytest.raises(TrickLabError, match=r"'imagefolder' needs its folder: pass data_dir="):
        load_dataset("imagefolder")


def test_val_fraction_out_of_range_raises(tmp_path):
    make_tree(tmp_path / "data", per_split={"train": 4})
    with pytest.raises(TrickLabError, match=r"val_fraction=1\.5 must be between 0 and 1"):
        load_dataset(
            "imagefolder",
            tmp_path / "data",
            cache_dir=tmp_path / "cache",
            sampling=Sampling(val_fraction=1.5),
        )


def test_val_fraction_that_holds_out_nothing_raises(tmp_path):
    make_tree(tmp_path / "data", per_split={"train": 1})  # 0.1 of one image per class rounds to 0
    with pytest.raises(TrickLabError, match=r"val_fraction=0\.1 of 3 images holds out none"):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")


def write_non_utf8_name(folder: Path, name: bytes, data: bytes) -> None:
    with open(os.path.join(os.fsencode(folder), name), "wb") as f:
        f.write(data)


def test_image_whose_name_is_not_utf8_is_read_like_any_other(tmp_path):
    make_tree(tmp_path / "data")
    png = (tmp_path / "data" / "train" / "cat" / "0000.png").read_bytes()
    write_non_utf8_name(tmp_path / "data" / "train" / "cat", b"\xff\xfe.png", png)
    ds = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert describe_dataset(ds)["train"]["per_class"] == [4, 5, 4]  # ant, cat, dog


def test_class_folder_whose_name_is_not_utf8_gets_a_printable_class_name(tmp_path):
    make_tree(tmp_path / "data")
    for split in ("train", "test"):
        folder = os.fsencode(tmp_path / "data" / split)
        os.rename(os.path.join(folder, b"cat"), os.path.join(folder, b"\xffcat"))
    ds = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert ds.classes == ["ant", "dog", "\\xffcat"]  # the CLI can print it in any locale


def test_corrupt_image_whose_name_is_not_utf8_is_named_with_escapes(tmp_path):
    make_tree(tmp_path / "data")
    write_non_utf8_name(tmp_path / "data" / "train" / "cat", b"\xff\xfe.png", b"not an image")
    with pytest.raises(TrickLabError, match=r"cannot decode image train/cat/\\xff\\xfe\.png "):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_unreadable_image_is_named_with_the_reason(tmp_path, monkeypatch):
    make_tree(tmp_path / "data")
    unreadable = tmp_path / "data" / "train" / "cat" / "0003.png"
    open_path = Path.open

    def refuse(path: Path, *args, **kwargs):  # what a chmod 000 file gives a user not root
        if path == unreadable:
            raise PermissionError(13, "Permission denied", str(path))
        return open_path(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(
        TrickLabError, match=r"^cannot read .*train/cat/0003\.png: Permission denied$"
    ):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_class_folder_that_cannot_be_listed_is_named_not_taken_for_empty(tmp_path, monkeypatch):
    make_tree(tmp_path / "data")
    unlistable = tmp_path / "data" / "train" / "cat"
    scandir = os.scandir

    def refuse(path):  # what listing a chmod 000 folder gives a user who is not root
        if Path(path) == unlistable:
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refuse)
    with pytest.raises(TrickLabError, match=r"^cannot read .*train/cat: Permission denied$"):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_unreadable_cifar_archive_is_named_with_the_reason(tmp_path, monkeypatch):
    write_fake_cifar(tmp_path / "data")

    def refuse(path: Path, *args) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(cache, "sha256_file", refuse)
    with pytest.raises(
        TrickLabError, match=r"^cannot read .*cifar-10-python\.tar\.gz: Permission denied$"
    ):
        load_dataset("cifar10", tmp_path / "data", cache_dir=tmp_path / "cache", download=False)


_LOAD_AND_SAY = """
import sys
from tricklab.core.errors import TrickLabError
from tricklab.data.sources import load_dataset
try:
    load_dataset(sys.argv[1], sys.argv[2], cache_dir=sys.argv[3], download=False)
except TrickLabError as err:
    print(err)
"""


@pytest.mark.parametrize(
    ("dataset", "layout", "unreadable"),
    [
        ("imagefolder", "folder", "train"),
        ("imagefolder", "folder", "train/cat/0003.png"),
        ("imagefolder", "archives", "train.tar.gz"),
        ("cifar10", "cifar", "cifar-10-python.tar.gz"),
    ],
)
def test_unreadable_source_gives_one_clear_error(tmp_path, dataset, layout, unreadable):
    if layout == "cifar":
        write_fake_cifar(tmp_path / "data")
    else:
        make_tree(tmp_path / "data")
    if layout == "archives":
        for split in ("train", "test"):
            tar_split(tmp_path / "data", split, tmp_path / "data" / f"{split}.tar.gz")
            (tmp_path / "data" / split).rename(tmp_path / f"extracted-{split}")
    (tmp_path / "data" / unreadable).chmod(0)
    try:
        done = subprocess.run(
            [*as_a_user_without_root_rights(), sys.executable, "-c", _LOAD_AND_SAY, dataset,
             str(tmp_path / "data"), str(tmp_path / "cache")],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    finally:
        (tmp_path / "data" / unreadable).chmod(0o755)
    assert re.fullmatch(rf"cannot read .*{unreadable}: Permission denied\n", done.stdout), done
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("compressed", [False, True])
def test_archive_of_garbage_is_one_line_naming_it(tmp_path, compressed, capsys):
    garbage = np.random.default_rng(0).bytes(4096)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.tar.gz").write_bytes(
        gzip.compress(garbage) if compressed else garbage
    )
    with pytest.raises(
        TrickLabError, match=r"train\.tar\.gz is not a readable tar archive: "
    ) as err:
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "cache").exists()


def test_cli_archive_of_garbage_exits_2_with_one_line(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.tar.gz").write_bytes(np.random.default_rng(0).bytes(4096))
    args = ["data", "show", "imagefolder", "--data-dir", str(tmp_path / "data")]
    assert main([*args, "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not a readable tar archive" in err
    assert err.count("\n") == 1


def make_bad_input(tmp_path: Path, problem: str) -> Path:
    """An image folder (or archive) with one problem, under tmp_path/data."""
    data = tmp_path / "data"
    if problem == "missing dir":
        return data
    make_tree(data)
    if problem == "empty class folder":
        (data / "train" / "zebra").mkdir()
    elif problem == "corrupt image":
        (data / "train" / "cat" / "0003.png").write_bytes(b"not an image at all")
    elif problem == "mixed image sizes":
        write_image(data / "train" / "dog" / "big.png", np.zeros((10, 12, 3), dtype=np.uint8))
    elif problem == "dotdot member":
        blob = (data / "train" / "ant" / "0000.png").read_bytes()
        shutil.rmtree(data / "train")
        with tarfile.open(data / "train.tar.gz", "w:gz") as tar:
            info = tarfile.TarInfo("train/../../evil.png")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return data


@pytest.mark.parametrize(
    ("problem", "message"),
    [
        ("missing dir", "does not exist"),
        ("empty class folder", "class folder train/zebra"),
        ("corrupt image", "cannot decode image train/cat/0003.png"),
        ("mixed image sizes", "images differ in size"),
        ("dotdot member", "with an absolute path or '..'"),
        ("unwritable cache dir", "cannot write the dataset cache"),
    ],
)
def test_cli_data_show_bad_input_exits_2_with_one_line_and_no_cache_file(
    tmp_path, capsys, problem, message
):
    data = make_bad_input(tmp_path, problem)
    cache_dir = tmp_path / "cache"
    if problem == "unwritable cache dir":
        (tmp_path / "a-file").write_text("a file, not a folder")
        cache_dir = tmp_path / "a-file" / "cache"
    args = ["data", "show", "imagefolder", "--data-dir", str(data), "--cache-dir", str(cache_dir)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert err.count("\n") == 1
    assert not cache_dir.exists()  # no cache file, nor a folder made for one


@pytest.mark.parametrize("name", ["cifar10", "mnist", "svhn"])
def test_failed_download_removes_the_folders_it_created(tmp_path, monkeypatch, name):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(TrickLabError, match=rf"{name} not found: .*downloading failed"):
        load_dataset(name, tmp_path / "new" / "data", cache_dir=tmp_path / "cache")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["cifar10", "mnist", "fashion-mnist"])
def test_failed_download_keeps_a_folder_that_existed_as_it_was(tmp_path, monkeypatch, name):
    """Eleventh hostile round: into a folder that existed, mnist left MNIST/raw/ behind."""

    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("the user's")
    with pytest.raises(TrickLabError, match=r"downloading failed"):
        load_dataset(name, tmp_path / "data", cache_dir=tmp_path / "cache")
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["keep.txt"]


def test_failed_decode_removes_the_cache_folder_it_created(tmp_path):
    make_tree(tmp_path / "data")
    (tmp_path / "data" / "train" / "cat" / "0003.png").write_bytes(b"not an image at all")
    with pytest.raises(TrickLabError, match=r"cannot decode image"):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "new" / "cache")
    assert not (tmp_path / "new").exists()


def test_failed_decode_keeps_a_cache_folder_that_existed(tmp_path):
    make_tree(tmp_path / "data")
    (tmp_path / "data" / "train" / "cat" / "0003.png").write_bytes(b"not an image at all")
    (tmp_path / "cache" / "datasets").mkdir(parents=True)
    with pytest.raises(TrickLabError, match=r"cannot decode image"):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert (tmp_path / "cache" / "datasets").is_dir()


# ---------------------------------------------------------------- describe_dataset


def test_describe_dataset_reports_shape_sizes_counts_and_train_mean_std():
    ds = make_synthetic(100, 30, 16, seed=0)
    info = describe_dataset(ds)
    assert set(info) == {"name", "classes", "image_shape", "train", "test", "mean", "std"}
    assert info["name"] == "synthetic" and info["classes"] == ds.classes
    assert info["image_shape"] == [3, 16, 16]
    assert info["train"] == {"size": 100, "per_class": [10] * 10}
    assert info["test"] == {"size": 30, "per_class": [3] * 10}
    pixels = ds.train.images.double() / 255
    assert info["mean"] == pytest.approx(pixels.mean(dim=(0, 2, 3)).tolist(), abs=1e-5)
    assert info["std"] == pytest.approx(pixels.std(dim=(0, 2, 3), correction=0).tolist(), abs=1e-5)


def test_dataset_image_shape_and_num_classes_come_from_the_data():
    split = Split(torch.zeros(2, 1, 5, 7, dtype=torch.uint8), torch.tensor([0, 1]))
    ds = Dataset("toy", ["a", "b", "c"], split, split)
    assert ds.image_shape == (1, 5, 7) and ds.num_classes == 3


def test_dataset_too_large_for_memory_is_one_clear_error():
    with pytest.raises(TrickLabError, match="does not fit in memory"):
        load_dataset("synthetic", train_size=10**8, test_size=10, image_size=1024)


# ---------------------------------------------------------------- one table of dataset names


def test_dataset_names_come_from_one_table_that_imports_without_torch():
    """The table load_dataset dispatches through is what the recipe and the CLI offer, and reading
    it (recipe checks, `tricklab --help`) loads no torch."""
    probe = (
        "import sys\n"
        "from tricklab.data.names import DATASET_NAMES, DATASET_SOURCES\n"
        "from tricklab.recipe.schema import DataConfig\n"
        "from tricklab.cli.main import build_parser\n"
        "import dataclasses\n"
        "choices = next(f for f in dataclasses.fields(DataConfig) if f.name == 'name')\n"
        "assert choices.metadata['choices'] == DATASET_NAMES == tuple(DATASET_SOURCES)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print(build_parser().parse_args(['data', 'show', 'x']).func.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "tricklab", "data", "show", "--help"], capture_output=True, text=True
    ).stdout
    assert "|".join(DATASET_NAMES) in "".join(help_text.split())  # argparse wraps at hyphens


def test_every_dataset_name_resolves_to_a_loader():
    for name in DATASET_NAMES:
        assert callable(loader_for(name)), name


# ---------------------------------------------------------------- sizes that cannot fit


def run_with_memory_limit(
    code: str,
    extra_bytes: int,
    imports: str = "torch, tricklab.cli.main, tricklab.data.sources",
    timeout: float = 300,
):
    """Run `code` in a child whose address space may grow by `extra_bytes` past what `imports`
    took (RLIMIT_AS); skips where the limit cannot be set."""
    resource = pytest.importorskip("resource")
    if not hasattr(resource, "RLIMIT_AS") or not Path("/proc/self/status").is_file():
        pytest.skip("needs RLIMIT_AS and /proc (Linux)")
    prelude = (
        "import re, resource, sys\n"
        f"import {imports}\n"
        "if 'torch' in sys.modules: sys.modules['torch'].set_num_threads(1)\n"
        "vm = int(re.search(r'VmSize:\\s+(\\d+) kB', open('/proc/self/status').read())[1]) * 1024\n"
        "hard = resource.getrlimit(resource.RLIMIT_AS)[1]\n"
        f"resource.setrlimit(resource.RLIMIT_AS, (vm + {extra_bytes}, hard))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=timeout
    )


def cli_in_child(*args: str) -> str:
    return f"from tricklab.cli.main import main\nsys.exit(main({list(args)!r}))\n"


def test_data_show_with_a_huge_image_size_is_refused_before_allocating(tmp_path):
    make_tree(tmp_path / "data")
    args = ["data", "show", "imagefolder", "--data-dir", str(tmp_path / "data")]
    args += ["--image-size", "100000", "--cache-dir", str(tmp_path / "cache")]
    out = run_with_memory_limit(cli_in_child(*args), extra_bytes=2 << 30)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "image_size=100000" in out.stderr
    assert f"at most {MAX_IMAGE_SIZE}" in out.stderr
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("name", ["synthetic", "imagefolder"])
def test_image_size_above_the_bound_is_refused_by_load_dataset(tmp_path, name):
    make_tree(tmp_path / "data")
    with pytest.raises(TrickLabError, match=rf"image_size={MAX_IMAGE_SIZE + 1} .*at most"):
        load_dataset(name, tmp_path / "data", image_size=MAX_IMAGE_SIZE + 1)


def test_imagefolder_too_large_for_memory_is_refused_before_decoding(tmp_path, monkeypatch):
    make_tree(tmp_path / "data")  # 18 images: 18 x 3 x 1000 x 1000 bytes, twice over while decoding
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 50_000_000)
    decoded = []
    monkeypatch.setattr(imagefolder_decode, "decode_image", lambda *args: decoded.append(args))
    with pytest.raises(
        TrickLabError, match=r"imagefolder does not fit in memory: .*103\.0 MiB.* 47\.7 MiB avail"
    ):
        load_dataset("imagefolder", tmp_path / "data", image_size=1000, cache_dir=tmp_path / "c")
    assert decoded == [] and not (tmp_path / "c").exists()


def test_imagefolder_of_large_images_is_refused_after_decoding_only_the_first(
    tmp_path, monkeypatch
):
    make_tree(tmp_path / "data", size=64)  # 18 images of 64 x 64: 442 kB decoded, twice over
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 400_000)
    decode_image = imagefolder_decode.decode_image
    decoded = []
    monkeypatch.setattr(
        imagefolder_decode,
        "decode_image",
        lambda *args: decoded.append(args) or decode_image(*args),
    )
    with pytest.raises(TrickLabError, match=r"does not fit in memory: 18 images of 3x64x64"):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "c")
    assert len(decoded) == 1


def test_synthetic_too_large_for_memory_is_refused_before_generating(monkeypatch):
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 100_000_000)
    with pytest.raises(TrickLabError, match=r"synthetic does not fit in memory: 20010 images"):
        load_dataset("synthetic", train_size=20_000, test_size=10)


def test_cifar_resize_too_large_for_memory_is_refused_before_resizing(tmp_path, monkeypatch):
    write_fake_cifar(tmp_path / "data")  # 24 images
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 1_000_000)
    with pytest.raises(TrickLabError, match=r"cifar10 does not fit in memory: 20 images of 3x512"):
        load_dataset(
            "cifar10", tmp_path / "data", image_size=512, cache_dir=tmp_path / "c", download=False
        )


def test_available_memory_counts_an_address_space_limit():
    code = (
        "from tricklab.data.limits import available_memory_bytes\nprint(available_memory_bytes())\n"
    )
    out = run_with_memory_limit(code, extra_bytes=100 << 20, imports="tricklab.data.limits")
    assert out.returncode == 0, out.stderr
    assert 0 < int(out.stdout) <= 100 << 20


def test_available_memory_counts_a_cgroup_limit(tmp_path):
    (tmp_path / "memory.max").write_text("300000000\n")
    (tmp_path / "memory.current").write_text("100000000\n")
    assert core_memory.cgroup_headroom_bytes(tmp_path) == 200_000_000
    (tmp_path / "memory.max").write_text("max\n")
    assert core_memory.cgroup_headroom_bytes(tmp_path) is None


def write_zeros_member(tar: tarfile.TarFile, name: str, size: int) -> None:
    """A member of `size` zero bytes, written without holding them in memory."""

    class Zeros(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, buffer):
            buffer[:] = bytes(len(buffer))
            return len(buffer)

    info = tarfile.TarInfo(name)
    info.size = size
    tar.addfile(info, io.BufferedReader(Zeros()))


def archive_with_extra_member(tmp_path: Path, member: str, size: int) -> Path:
    make_tree(tmp_path / "tree")
    data = tmp_path / "data"
    data.mkdir()
    with tarfile.open(data / "train.tar.gz", "w:gz", compresslevel=1) as tar:
        tar.add(tmp_path / "tree" / "train", arcname="train")
        write_zeros_member(tar, member, size)
    tar_split(tmp_path / "tree", "test", data / "test.tar.gz")
    return data


def test_archive_member_of_zeros_is_streamed_past_within_a_memory_limit(tmp_path):
    """A 60 MiB member that is not an image is skipped without being read into memory (one past
    the 64 MiB an archive member may be is refused: a gzip stream is read through to skip it)."""
    data = archive_with_extra_member(tmp_path, "train/cat/zeros.bin", 60 << 20)
    code = (
        "from tricklab.data.sources import load_dataset\n"
        f"ds = load_dataset('imagefolder', {str(data)!r}, cache_dir={str(tmp_path / 'c')!r})\n"
        "print(len(ds.train))\n"
    )
    out = run_with_memory_limit(code, extra_bytes=32 << 20)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["12"]
    assert "train/cat/zeros.bin" in out.stderr  # named as skipped


def test_archive_member_larger_than_an_image_may_be_is_refused_naming_it(tmp_path):
    data = archive_with_extra_member(tmp_path, "train/cat/huge.png", MAX_IMAGE_FILE_BYTES + 1)
    with pytest.raises(
        TrickLabError,
        match=r"train/cat/huge\.png \(in train\.tar\.gz\) is 67,108,865 bytes.*at most 64\.0 MiB",
    ):
        load_dataset("imagefolder", data, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_image_file_larger_than_an_image_may_be_is_refused_naming_it(tmp_path):
    make_tree(tmp_path / "data")
    with open(tmp_path / "data" / "train" / "cat" / "huge.png", "wb") as f:
        f.truncate(MAX_IMAGE_FILE_BYTES + 1)  # sparse: no disk space taken
    with pytest.raises(
        TrickLabError, match=r"image train/cat/huge\.png is 67,108,865 bytes.*at most 64\.0 MiB"
    ):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")


def test_large_file_in_an_image_folder_is_hashed_within_a_memory_limit(tmp_path):
    make_tree(tmp_path / "data")
    with open(tmp_path / "data" / "train" / "cat" / "notes.bin", "wb") as f:
        f.truncate(256 << 20)
    code = (
        "from tricklab.data.sources import load_dataset\n"
        f"ds = load_dataset('imagefolder', {str(tmp_path / 'data')!r}, "
        f"cache_dir={str(tmp_path / 'c')!r})\n"
        "print(len(ds.train))\n"
    )
    out = run_with_memory_limit(code, extra_bytes=128 << 20)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["12"]


@pytest.mark.parametrize("layout", ["folder", "archive"])
def test_files_that_are_not_images_are_skipped_with_a_warning_naming_them(tmp_path, layout, caplog):
    make_tree(tmp_path / "tree")
    (tmp_path / "tree" / "train" / "cat" / "notes.txt").write_text("not an image")
    (tmp_path / "tree" / "train" / "README").write_text("not an image either")
    data = tmp_path / "tree"
    if layout == "archive":
        data = tmp_path / "archives"
        data.mkdir()
        for split in ("train", "test"):
            tar_split(tmp_path / "tree", split, data / f"{split}.tar.gz")
    with caplog.at_level("WARNING", logger="tricklab"):
        ds = load_dataset("imagefolder", data, cache_dir=tmp_path / "cache")
    assert len(ds.train) == 12
    [warning] = [r.getMessage() for r in caplog.records if "not images" in r.getMessage()]
    assert "2 files" in warning and "train/cat/notes.txt" in warning and "train/README" in warning


def png_claiming_size(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height pixels (its body is a 1x1 image's)."""
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((1, 1, 3), dtype=np.uint8)).save(buffer, format="PNG")
    blob = bytearray(buffer.getvalue())
    ihdr = 8 + 8  # signature, then the IHDR chunk's length and type
    blob[ihdr : ihdr + 8] = width.to_bytes(4, "big") + height.to_bytes(4, "big")
    crc = zlib.crc32(bytes(blob[12 : ihdr + 13]))
    blob[ihdr + 13 : ihdr + 17] = crc.to_bytes(4, "big")
    return bytes(blob)


def test_image_whose_header_claims_too_many_pixels_is_refused_before_decoding(tmp_path):
    make_tree(tmp_path / "data")
    (tmp_path / "data" / "train" / "cat" / "bomb.png").write_bytes(png_claiming_size(9000, 9000))
    with pytest.raises(
        TrickLabError, match=r"image train/cat/bomb\.png is 9000x9000 pixels, more than the"
    ):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")


def test_cifar_batch_whose_data_is_a_shared_nested_list_is_refused_without_expanding_it(
    tmp_path,
):
    write_fake_cifar(tmp_path / "data")
    archive = tmp_path / "data" / "cifar-10-python.tar.gz"
    row = [0] * 3072
    bomb = pickle.dumps({b"data": [row] * 200_000, b"labels": [0] * 200_000}, protocol=2)
    with tarfile.open(archive) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    members["cifar-10-batches-py/data_batch_1"] = bomb
    with tarfile.open(archive, "w:gz") as tar:
        for name, blob in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    code = (
        "from tricklab.cli.main import main\n"
        f"sys.exit(main(['data', 'show', 'cifar10', '--data-dir', {str(tmp_path / 'data')!r}, "
        f"'--cache-dir', {str(tmp_path / 'c')!r}]))\n"
    )
    out = run_with_memory_limit(code, extra_bytes=512 << 20)
    assert out.returncode == 2, out.stderr
    assert "data_batch_1" in out.stderr and "not an official CIFAR batch" in out.stderr


def test_a_fifo_or_a_link_to_a_device_in_an_image_folder_is_skipped_not_read(tmp_path):
    """Reading either would never end (a FIFO waits for a writer, /dev/zero never ends)."""
    make_tree(tmp_path / "data")
    os.mkfifo(tmp_path / "data" / "train" / "cat" / "waits.png")
    (tmp_path / "data" / "train" / "dog" / "endless.png").symlink_to("/dev/zero")
    code = (
        "from tricklab.data.sources import load_dataset\n"
        f"ds = load_dataset('imagefolder', {str(tmp_path / 'data')!r}, "
        f"cache_dir={str(tmp_path / 'c')!r})\n"
        "print(len(ds.train))\n"
    )
    try:
        out = run_with_memory_limit(code, extra_bytes=256 << 20, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("loading the folder did not end")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["12"]
    assert "waits.png" in out.stderr and "endless.png" in out.stderr  # named as skipped


@pytest.mark.parametrize("suffix", ["tar", "tar.gz"])
@pytest.mark.parametrize("cut", ["at-a-member", "inside-a-header"])
def test_an_archive_cut_short_is_refused_not_read_as_fewer_images(tmp_path, suffix, cut):
    # was: a tar cut between two members loaded its first images silently, as a whole archive
    make_tree(tmp_path / "tree", per_split={"train": 2})
    whole = tmp_path / "whole.tar"
    with tarfile.open(whole, "w") as tar:
        tar.add(tmp_path / "tree" / "train", arcname="train")
    with tarfile.open(whole) as tar:
        offset = tar.getmembers()[-2].offset  # the header of an image, not the first member
    raw = whole.read_bytes()[: offset + (100 if cut == "inside-a-header" else 0)]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / f"train.{suffix}").write_bytes(
        gzip.compress(raw) if suffix == "tar.gz" else raw
    )
    with pytest.raises(TrickLabError, match=r"ends without a tar's end-of-archive block") as err:
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("archived", [False, True])
def test_a_dataset_of_one_class_is_refused_naming_it(tmp_path, archived):
    make_tree(tmp_path / "tree", classes=("ant",), per_split={"train": 2})
    data = tmp_path / "tree"
    if archived:
        data = tmp_path / "data"
        data.mkdir()
        tar_split(tmp_path / "tree", "train", data / "train.tar.gz")
    with pytest.raises(
        TrickLabError, match=r"holds one class folder \(ant\); a classifier needs at least two"
    ):
        load_dataset("imagefolder", data, cache_dir=tmp_path / "cache")


def test_a_cifar_archive_that_is_a_pipe_or_a_device_is_one_line_and_no_download(tmp_path):
    """Seventh hostile round: it read as "not found", and a download was tried."""
    import os

    (tmp_path / "pipe").mkdir()
    os.mkfifo(tmp_path / "pipe" / "cifar-10-python.tar.gz")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "cifar-10-python.tar.gz").symlink_to("/dev/zero")
    for root in ("pipe", "dev"):
        with pytest.raises(TrickLabError, match="is not a regular file .a pipe, a device"):
            load_dataset("cifar10", tmp_path / root, cache_dir=tmp_path / "cache", download=True)
