"""The decoded-dataset cache: bit-identical round trips, no decode on a hit, safe and atomic files."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.data import cache, imagefolder_decode
from tricklab.data.sources import load_dataset


def make_tree(root: Path, classes=("ant", "bee"), per_split=None, size=8, seed=0) -> None:
    rng = np.random.default_rng(seed)
    for split, count in (per_split or {"train": 3, "test": 2}).items():
        for name in classes:
            for i in range(count):
                path = root / split / name / f"{i:04d}.jpg"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)


def cache_files(cache_dir: Path) -> list[Path]:
    return sorted(p for p in cache_dir.rglob("*") if p.is_file()) if cache_dir.exists() else []


def refuse_to_decode(monkeypatch) -> None:
    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded an image although the cache holds the dataset")

    monkeypatch.setattr(imagefolder_decode, "decode_image", no_decoding)


def test_second_load_is_bit_identical_to_the_first(tmp_path):
    make_tree(tmp_path / "data")
    first = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    second = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert torch.equal(first.train.images, second.train.images) and torch.equal(
        first.test.images, second.test.images
    )
    assert torch.equal(first.train.labels, second.train.labels) and second.classes == first.classes


def test_second_load_does_not_decode(tmp_path, monkeypatch):
    make_tree(tmp_path / "data")
    load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    refuse_to_decode(monkeypatch)
    assert (
        len(load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache").train) == 6
    )


def test_cache_holds_one_npz_per_split_that_loads_without_pickle(tmp_path):
    make_tree(tmp_path / "data")
    load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    files = cache_files(tmp_path / "cache")
    assert [f.name.rsplit("-", 1)[1] for f in files] == ["test.npz", "train.npz"]
    for file in files:
        with np.load(file, allow_pickle=False) as npz:
            assert npz["images"].dtype == np.uint8 and npz["labels"].dtype == np.int64
            assert npz["classes"].dtype.kind == "U" and npz["classes"].tolist() == ["ant", "bee"]


@pytest.mark.slow
def test_real_cifar10_jpeg_reloads_from_cache_identically_without_decoding(
    cifar10_jpeg, cifar10_jpeg_dir, tricklab_cache_dir, monkeypatch
):
    refuse_to_decode(monkeypatch)
    again = load_dataset("imagefolder", cifar10_jpeg_dir, cache_dir=tricklab_cache_dir)
    assert torch.equal(again.train.images, cifar10_jpeg.train.images)
    assert torch.equal(again.test.labels, cifar10_jpeg.test.labels)


def test_changed_source_file_misses_the_cache(tmp_path):
    make_tree(tmp_path / "data")
    first = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(
        tmp_path / "data" / "train" / "ant" / "0000.jpg"
    )
    second = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert not torch.equal(first.train.images, second.train.images)
    assert (second.train.images[0] < 8).all()


def test_image_size_is_part_of_the_cache_key(tmp_path):
    make_tree(tmp_path / "data")
    load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    resized = load_dataset(
        "imagefolder", tmp_path / "data", image_size=4, cache_dir=tmp_path / "cache"
    )
    assert resized.image_shape == (3, 4, 4) and len(cache_files(tmp_path / "cache")) == 4


def test_cache_dir_defaults_to_the_TRICKLAB_CACHE_variable(tmp_path, monkeypatch):
    make_tree(tmp_path / "data")
    monkeypatch.setenv("TRICKLAB_CACHE", str(tmp_path / "env-cache"))
    load_dataset("imagefolder", tmp_path / "data")
    assert len(cache_files(tmp_path / "env-cache" / "datasets")) == 2


def test_unwritable_cache_dir_is_named_with_what_to_do(tmp_path):
    make_tree(tmp_path / "data")
    (tmp_path / "a-file").write_text("a file, not a folder")
    with pytest.raises(
        TrickLabError,
        match=r"cannot write the dataset cache in .*a-file.*TRICKLAB_CACHE.*cache_dir=",
    ):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "a-file" / "cache")


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    def disk_full(file, **arrays):
        file.write(b"PK\x03\x04 half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", disk_full)
    split = (np.zeros((1, 1, 1, 1), np.uint8), np.zeros(1, np.int64), ["a"])
    with pytest.raises(TrickLabError, match=r"cannot write the dataset cache file .*No space left"):
        cache.write_cached_splits(tmp_path, "x", "0" * 64, {"train": split})
    assert cache_files(tmp_path) == []


def test_failed_write_of_the_test_split_leaves_no_train_file_either(tmp_path, monkeypatch):
    make_tree(tmp_path / "data")
    savez = np.savez
    calls = []

    def full_on_second_file(file, **arrays):  # train is written, then the disk fills up
        calls.append(file)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        savez(file, **arrays)

    monkeypatch.setattr(np, "savez", full_on_second_file)
    with pytest.raises(
        TrickLabError, match=r"cannot write the dataset cache file .*-test\.npz \(No space left"
    ):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert len(calls) == 2 and cache_files(tmp_path / "cache") == []
    assert not (tmp_path / "cache").exists()  # nor the folders made for the files


def test_failed_writability_check_leaves_no_new_folder(tmp_path, monkeypatch):
    make_tree(tmp_path / "data")

    def refuse(*args, **kwargs):  # a folder that can be made but not written (e.g. a quota)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cache.tempfile, "NamedTemporaryFile", refuse)
    with pytest.raises(
        TrickLabError, match=r"cannot write the dataset cache in .*Permission denied"
    ):
        load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "new" / "cache")
    assert not (tmp_path / "new").exists()


def test_damaged_cache_file_is_rebuilt_from_the_source(tmp_path):
    make_tree(tmp_path / "data")
    first = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    train_file = next(f for f in cache_files(tmp_path / "cache") if f.name.endswith("-train.npz"))
    train_file.write_bytes(train_file.read_bytes()[:100])
    second = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert torch.equal(first.train.images, second.train.images)


@pytest.mark.parametrize(
    ("split", "tamper"),
    [
        ("train", {"labels": [0, 0, 0, 1, 1, 2]}),  # 2 classes: label 2 is out of range
        ("train", {"labels": [0, 0, 0, 1, 1, -1]}),
        ("test", {"classes": ["ant", "wasp"]}),  # the test split names other classes than train
        ("train", {"classes": ["ant", "ant"]}),
        ("train", {"classes": ["ant"], "labels": [0] * 6}),
        ("train", {"images": np.zeros((0, 3, 8, 8), np.uint8), "labels": []}),
        ("train", {"images": np.zeros((6, 3, 0, 0), np.uint8)}),
        ("train", {"images": np.zeros((6, 3, 8, 4), np.uint8)}),  # not the image_size its key says
    ],
    ids=[
        "label-too-high",
        "label-negative",
        "test-classes-differ",
        "a-class-twice",
        "one-class",
        "no-image",
        "no-pixel",
        "not-the-size-of-its-key",
    ],  # fmt: skip
)
def test_tampered_cache_file_is_a_miss_and_rebuilt_from_the_source(
    tmp_path, monkeypatch, split, tamper
):
    make_tree(tmp_path / "data")
    options = {"cache_dir": tmp_path / "cache", "image_size": 8}
    first = load_dataset("imagefolder", tmp_path / "data", **options)
    path = next(f for f in cache_files(tmp_path / "cache") if f.name.endswith(f"-{split}.npz"))
    with np.load(path, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    arrays.update(
        {name: np.asarray(value, dtype=arrays[name].dtype) for name, value in tamper.items()}
    )
    with open(path, "wb") as f:
        np.savez(f, **arrays)  # right dtypes and lengths, wrong content
    decoded = []
    decode_image = imagefolder_decode.decode_image
    monkeypatch.setattr(
        imagefolder_decode,
        "decode_image",
        lambda *args: decoded.append(args) or decode_image(*args),
    )
    second = load_dataset("imagefolder", tmp_path / "data", **options)
    assert decoded  # a miss: the source was decoded again
    assert second.classes == first.classes == ["ant", "bee"]
    assert torch.equal(second.train.labels, first.train.labels)
    assert torch.equal(second.test.images, first.test.images)
    with np.load(path, allow_pickle=False) as npz:  # and the cache file was rewritten
        assert npz["classes"].tolist() == ["ant", "bee"]
        assert npz["labels"].tolist() == getattr(first, split).labels.tolist()


def test_folder_fingerprint_ignores_listing_order_and_changes_with_a_file(tmp_path):
    make_tree(tmp_path / "data")
    files = [p for p in (tmp_path / "data").rglob("*") if p.is_file()]
    before = cache.fingerprint_tree(files, tmp_path / "data")
    assert cache.fingerprint_tree(reversed(files), tmp_path / "data") == before
    files[0].write_bytes(files[0].read_bytes() + b"\0")
    assert cache.fingerprint_tree(files, tmp_path / "data") != before


def test_folder_fingerprint_is_the_content_not_the_file_times(tmp_path):
    make_tree(tmp_path / "data")
    files = sorted(p for p in (tmp_path / "data").rglob("*") if p.is_file())
    before = cache.fingerprint_tree(files, tmp_path / "data")
    for path in files:
        os.utime(path, ns=(1, 1))  # touched (or copied elsewhere): same content, same key
    assert cache.fingerprint_tree(files, tmp_path / "data") == before
    stat = files[0].stat()
    data = bytearray(files[0].read_bytes())
    data[-3] ^= 0xFF  # same size, other bytes, and the old time put back
    files[0].write_bytes(bytes(data))
    os.utime(files[0], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert cache.fingerprint_tree(files, tmp_path / "data") != before


def test_folder_fingerprint_hashes_names_that_are_not_utf8_by_their_bytes(tmp_path):
    root = os.fsencode(tmp_path)
    for name in (b"\xff.png", b"\xfe.png"):
        with open(os.path.join(root, name), "wb") as f:
            f.write(b"same bytes")
    first, second = sorted(tmp_path.iterdir())
    assert cache.fingerprint_tree([first], tmp_path) != cache.fingerprint_tree([second], tmp_path)


# ---------------------------------------------------------------- every kind of damage


def rewrite(path: Path, **changes) -> None:
    """Write the cache file again with some arrays replaced (None: left out)."""
    with np.load(path, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    arrays.update(changes)
    with open(path, "wb") as f:
        np.savez(f, **{k: v for k, v in arrays.items() if v is not None})


def arrays_of(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def flip_a_pixel_byte(path: Path) -> None:
    blob = bytearray(path.read_bytes())
    images = arrays_of(path)["images"]
    at = blob.find(images.tobytes()[:64]) + 100  # inside the pixels, past the npy header
    blob[at] ^= 0xFF
    path.write_bytes(bytes(blob))


def header_claiming_more_images(path: Path) -> None:
    blob = path.read_bytes()
    n = len(arrays_of(path)["labels"])
    old = f"'shape': ({n}, 3, 8, 8)".encode()
    new = f"'shape': ({n * 1000}, 3, 8, 8)".encode()
    assert old in blob
    path.write_bytes(blob.replace(old, new[: len(old)] if len(new) > len(old) else new))


def npy_where_the_npz_belongs(path: Path) -> None:
    images = arrays_of(path)["images"]
    with open(path, "wb") as f:
        np.save(f, images)


DAMAGE = {
    "zero-bytes": lambda p: p.write_bytes(b""),
    "npy-array": npy_where_the_npz_belongs,
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "garbage": lambda p: p.write_bytes(np.random.default_rng(0).bytes(p.stat().st_size)),
    "flipped-pixel-byte": flip_a_pixel_byte,
    "header-claims-more": header_claiming_more_images,
    "missing-labels": lambda p: rewrite(p, labels=None),
    "extra-array": lambda p: rewrite(p, extra=np.zeros(3)),
    "images-float32": lambda p: rewrite(p, images=arrays_of(p)["images"].astype(np.float32)),
    "labels-int32": lambda p: rewrite(p, labels=arrays_of(p)["labels"].astype(np.int32)),
    "classes-bytes": lambda p: rewrite(p, classes=np.array([b"ant", b"bee"])),
    "images-3d": lambda p: rewrite(p, images=arrays_of(p)["images"][:, 0]),
    "labels-2d": lambda p: rewrite(p, labels=arrays_of(p)["labels"][:, None]),
    "labels-short": lambda p: rewrite(p, labels=arrays_of(p)["labels"][:-1]),
    "images-fortran-order": lambda p: rewrite(p, images=np.asfortranarray(arrays_of(p)["images"])),
    "compressed": lambda p: np.savez_compressed(p, **arrays_of(p)),
    "fifo": lambda p: (p.unlink(), os.mkfifo(p)),
    "link-to-dev-zero": lambda p: (p.unlink(), p.symlink_to("/dev/zero")),
}


@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
def test_every_kind_of_damage_to_a_cache_file_is_rebuilt_from_the_source(tmp_path, caplog, damage):
    make_tree(tmp_path / "data")
    first = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    path = next(f for f in cache_files(tmp_path / "cache") if f.name.endswith("-train.npz"))
    intact = arrays_of(path)
    DAMAGE[damage](path)
    second = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert torch.equal(second.train.images, first.train.images)
    assert torch.equal(second.train.labels, first.train.labels)
    assert second.classes == first.classes
    assert path.is_file() and not path.is_symlink()  # rebuilt in place
    rebuilt = arrays_of(path)
    assert rebuilt.keys() == intact.keys()
    assert all(np.array_equal(rebuilt[k], intact[k]) for k in intact)
    assert any("decoding the source again" in r.getMessage() for r in caplog.records)


def test_a_cache_file_of_other_data_under_this_name_is_not_trusted(tmp_path):
    """Same classes, shapes and dtypes, other pixels: only the key inside the file tells."""
    make_tree(tmp_path / "data", seed=0)
    make_tree(tmp_path / "other", seed=1)
    first = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    mine = cache_files(tmp_path / "cache")
    load_dataset("imagefolder", tmp_path / "other", cache_dir=tmp_path / "other-cache")
    theirs = cache_files(tmp_path / "other-cache")
    for own, other in zip(mine, theirs):  # sorted: test, train
        own.write_bytes(other.read_bytes())
    second = load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert torch.equal(second.train.images, first.train.images)
    assert torch.equal(second.test.images, first.test.images)


def test_a_folder_where_the_cache_file_belongs_is_one_clear_line(tmp_path, capsys):
    make_tree(tmp_path / "data")
    load_dataset("imagefolder", tmp_path / "data", cache_dir=tmp_path / "cache")
    path = next(f for f in cache_files(tmp_path / "cache") if f.name.endswith("-train.npz"))
    path.unlink()
    (path / "inside").mkdir(parents=True)
    args = ["data", "show", "imagefolder", "--data-dir", str(tmp_path / "data")]
    assert main([*args, "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the dataset cache file ") and err.count("\n") == 1
    assert path.name in err and "delete that folder" in err


TINY_TRAIN = [
    "data.name=imagefolder", "data.image_size=16", "model.name=airbench",
    "model.widths=[8,16,16]", "loader.kind=device", "loader.batch_size=4", "run.epochs=1",
    "run.device=cpu",
]  # fmt: skip


@pytest.mark.parametrize("damage", ["zero-bytes", "npy-array"])
def test_tricklab_train_rebuilds_a_damaged_cache_file(tmp_path, capsys, damage):
    make_tree(tmp_path / "data")
    load_dataset("imagefolder", tmp_path / "data", image_size=16, cache_dir=tmp_path / "cache")
    path = next(f for f in cache_files(tmp_path / "cache") if f.name.endswith("-train.npz"))
    DAMAGE[damage](path)
    data = [f"data.dir={tmp_path / 'data'}", f"data.cache_dir={tmp_path / 'cache'}"]
    code = main(["train", *TINY_TRAIN, *data, "--out", str(tmp_path / "run"), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["status"] == "complete"
    assert arrays_of(path)["images"].shape == (6, 3, 16, 16)


def test_empty_cache_dir_is_refused(tmp_path, monkeypatch):
    make_tree(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    for empty in ("", "  "):
        with pytest.raises(TrickLabError, match=r"cache_dir is empty"):
            load_dataset("imagefolder", tmp_path / "data", cache_dir=empty)
    assert not (tmp_path / "datasets").exists()


def test_cli_empty_cache_dir_exits_2_and_writes_nothing(tmp_path, monkeypatch, capsys):
    make_tree(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    args = ["data", "show", "imagefolder", "--data-dir", str(tmp_path / "data"), "--cache-dir", ""]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cache" in err and "empty" in err
    data = [f"data.dir={tmp_path / 'data'}", 'data.cache_dir=""']
    assert main(["train", *TINY_TRAIN, *data, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cache_dir" in err and "empty" in err
    assert not (tmp_path / "datasets").exists()


@pytest.mark.parametrize(
    ("env", "kwargs", "message"),
    [
        ({"TRICKLAB_CACHE": "~nosuchuser7/x"}, {}, "TRICKLAB_CACHE ~nosuchuser7/x: no home folder"),
        ({}, {"cache_dir": "~nosuchuser7"}, "cache_dir ~nosuchuser7: no home folder is known"),
        ({"TRICKLAB_CACHE": None, "HOME": ""}, {}, "HOME is empty, and the default folder is"),
    ],
    ids=["cache-env-of-an-unknown-user", "cache-dir-of-an-unknown-user", "empty-home"],
)
def test_a_cache_folder_under_a_home_that_is_unknown_is_one_line(
    tmp_path, monkeypatch, env, kwargs, message
):
    """Seventh hostile round: Path.expanduser's RuntimeError was a traceback, and an empty HOME
    put the cache at the root (/.cache/tricklab)."""
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    with pytest.raises(TrickLabError, match=message):
        load_dataset("cifar10-sample", **kwargs)


def test_data_dir_under_an_unknown_users_home_is_one_line(tmp_path):
    with pytest.raises(TrickLabError, match="data_dir ~nosuchuser7/x: no home folder is known"):
        load_dataset("cifar10", "~nosuchuser7/x", cache_dir=tmp_path, download=False)
