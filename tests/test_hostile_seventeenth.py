"""The seventeenth hostile round: each case is one clear error before anything is written, or
the same answer whatever spelling of a value the caller used."""

import asyncio
import os
import re

import numpy as np
import pytest
from PIL import Image
from tiny_recipe import TINY_SYNTHETIC

TINY = [*TINY_SYNTHETIC, "run.epochs=1"]


async def _coroutine(*args) -> None:
    pass


def test_a_lambda_that_returns_a_coroutine_is_refused_at_its_first_call(tmp_path):
    """`on_epoch=lambda row: work(row)` around an `async def` looks like a plain function until
    it is called: it was taken and its body never ran (a "never awaited" warning at most)."""
    import tricklab
    from tricklab.experiments.speedrun import SpeedrunPlan, speedrun

    recipe = tricklab.load_recipe(None, TINY)
    with pytest.raises(TypeError, match="on_epoch returned coroutine, which nobody awaits"):
        tricklab.train(recipe, on_epoch=lambda row: _coroutine(row))
    plan = SpeedrunPlan(recipe, 1, warmup_epochs=0, out_dir=str(tmp_path / "s"))
    with pytest.raises(TypeError, match="speedrun's on_run returned coroutine"):
        speedrun(plan, on_run=lambda run: _coroutine(run))
    assert not (tmp_path / "s").exists()  # no summary: nothing a later command would read
    with pytest.raises(TypeError, match="returned _asyncio.Future"):  # any awaitable
        loop = asyncio.new_event_loop()
        try:
            tricklab.train(recipe, on_epoch=lambda row: loop.create_future())
        finally:
            loop.close()


def test_profile_models_takes_numpy_integers_as_profile_step_and_load_dataset_do():
    """profile_models' repeats and batch sizes refused np.int64 and a numpy array, where the
    other profilers and the data loaders take numpy's numbers as Python's."""
    from tricklab.profile.model import ModelBuild, ProfileGrid, profile_models

    grid = ProfileGrid(batch_sizes=np.array([2, 3]))
    build = ModelBuild(width=0.125, image_size=16)
    profile = profile_models(["airbench"], grid, build=build, device="cpu", repeats=np.int64(1))
    assert sorted(r["batch_size"] for r in profile["results"]) == [2, 3]
    assert all(type(r["batch_size"]) is int for r in profile["results"])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


TRAIN = ["train", *TINY_SYNTHETIC, "run.epochs=1", "tricks.precision=32-true"]


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """One tiny trained run, its result.json copied and changed by each test."""
    from tricklab.cli.main import main

    out = tmp_path_factory.mktemp("run") / "r"
    assert main([*TRAIN, "--out", str(out), "-q"]) == 0
    return out


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda d: d["epochs"][0].update(epoch=None), "an epoch row's 'epoch' is null"),
        (lambda d: d.update(dist_backend=["x"]), "'dist_backend' is [\"x\"], not text"),
        (lambda d: d["recipe"]["data"].update(name=["x"]), "'recipe.data.name' is [\"x\"]"),
        (lambda d: d.update(world_size=-1), "'world_size' is -1, not a whole number from 1"),
        (lambda d: d["recipe"]["run"].update(epochs=-2), "'recipe.run.epochs' is -2, not a number"),
        (lambda d: d.update(run_dir="a\0b"), "'run_dir' is \"a\\u0000b\", not a path"),
    ],
    ids=["epoch-null", "backend-list", "dataset-list", "world-size", "epochs", "nul-run-dir"],
)
def test_a_run_field_the_report_reads_of_the_wrong_type_is_one_line(
    change, says, run_folder, tmp_path, capsys
):
    """Each was a TypeError in the report's figures or tables ("epochs per run | -2", "processes
    per run | -1" where it got through), read from a result.json, metrics or a study alike."""
    import json
    import shutil

    from tricklab.cli.main import main

    run = tmp_path / "r"
    shutil.copytree(run_folder, run)
    data = json.loads((run / "result.json").read_text())
    change(data)
    (run / "result.json").write_text(json.dumps(data))
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 2
    assert says in one_error_line(capsys)
    assert not (tmp_path / "rep").exists()


def test_a_link_to_nothing_named_figures_in_the_out_folder_is_one_line(
    run_folder, tmp_path, capsys
):
    from tricklab.cli.main import main

    (tmp_path / "od").mkdir()
    (tmp_path / "od" / "figures").symlink_to(tmp_path / "nowhere")
    assert main(["report", str(run_folder), "--out", str(tmp_path / "od")]) == 2
    assert "already holds a report (figures)" in one_error_line(capsys)


def test_a_default_report_folder_name_fits_255_bytes_whatever_the_source_name():
    from tricklab.report.build import default_out_dir
    from tricklab.report.collect import Source

    source = Source("\U0001d400" * 63, "run", None, [], [], {})
    assert len(default_out_dir([source]).name.encode()) <= 255


def test_a_speedrun_is_named_against_the_built_in_recipe_not_a_file_of_the_current_folder(
    tmp_path, monkeypatch
):
    """A report named a speedrun's runs by what they changed in whatever file `recipe_name`
    named in the folder it ran from: another name after the file changed, or from elsewhere."""
    from tricklab.report.collect import _builtin_recipe

    monkeypatch.chdir(tmp_path)
    shipped = _builtin_recipe("speedrun94")
    (tmp_path / "speedrun94").write_text("run: {epochs: 7}\n")
    (tmp_path / "my.yaml").write_text("run: {epochs: 7}\n")
    assert _builtin_recipe("speedrun94") == shipped and shipped["run"]["epochs"] != 7
    assert _builtin_recipe("my.yaml") is None


def test_a_trick_lab_error_is_one_line_when_made_for_a_python_caller():
    import tricklab.experiments as ex
    from tricklab.core.errors import TrickLabError

    assert str(TrickLabError("a\x1b[31m\nb")) == "a\\x1b[31m\\nb"
    with pytest.raises(TrickLabError) as raised:
        ex.results("ls-off", storage="journal:a\x1b[31m\nb")
    assert str(raised.value).isprintable()


class _BytesPath(os.PathLike):
    def __fspath__(self):
        return b"/tmp/x"


def test_python_callers_nul_bytes_and_huge_targets_are_one_line(run_folder, tmp_path):
    import tricklab.experiments as ex
    from tricklab.core.errors import TrickLabError
    from tricklab.report import write_report

    for call, says in [
        (lambda: write_report(["a\x00b"], tmp_path / "o"), "holds a NUL character"),
        (lambda: write_report([run_folder], str(tmp_path / "a\x00b")), "holds a NUL character"),
        (lambda: ex.results("ls\x00off"), "a path cannot hold a NUL character"),
        (lambda: ex.results("ls-off", target=10**400), "must be a fraction in (0, 1]"),
    ]:
        with pytest.raises(TrickLabError, match=re.escape(says)):
            call()
    for call in (
        lambda: write_report([run_folder], _BytesPath()),
        lambda: write_report([_BytesPath()], tmp_path / "o"),
    ):
        with pytest.raises(TypeError, match="str or Path"):
            call()
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--csv", "x.csv"], "--csv: for one study's statistics; give its name"),
        (["--per-seed", "--target", "0.5"], "--target, --per-seed: for one study's"),
        (["s", "--runs", "--reference", "baseline"], "--runs lists the runs; --reference:"),
        (["s", "--json", "--format", "md"], "give one of --json and --format md"),
    ],
)
def test_results_refuses_an_option_it_would_ignore(argv, says, tmp_path, monkeypatch, capsys):
    """`results --csv out.csv` listed the studies, exited 0 and wrote no file."""
    from tricklab.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["results", *argv]) == 2
    assert says in one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def sampled_sweep(tmp_path_factory):
    """A sampled sweep of two trials whose runs are stored one seed at a time (`run-<seed>`)."""
    from tricklab.cli.main import main

    folder = tmp_path_factory.mktemp("sweep")
    space = folder / "space.yaml"
    space.write_text("optim.lr: {low: 0.01, high: 1.0, log: true}\n")
    argv = ["sweep", "--baseline", *TINY, "--space", str(space), "--trials", "2", "--seeds", "1",
            "--budget-epochs", "1", "--sampler", "random", "--study", "sw", "--out", str(folder / "sw"), "-q"]  # fmt: skip
    assert main(argv) == 0
    return folder / "sw"


@pytest.mark.parametrize(
    "key, drop_seed, says",
    [
        ("run-0", True, "holds a run in run-0 whose seed is null"),
        ("run-00", False, None),  # another program's key names no seed: not read
        ("run-\u00b2", False, None),
    ],
)
def test_a_sampled_trials_run_under_another_key_or_without_its_seed(
    key, drop_seed, says, sampled_sweep, tmp_path, capsys
):
    """`run-00` and `run-²` were a KeyError and a ValueError in results and report, a run-0
    without its seed a KeyError: the next seed is counted from the stored ones."""
    import json
    import shutil
    import sqlite3

    from tricklab.cli.main import main

    folder = tmp_path / "sw"
    shutil.copytree(sampled_sweep, folder)
    with sqlite3.connect(folder / "study.db") as db:
        db.execute("delete from trial_user_attributes where trial_id=1 and key='runs'")
        (value,) = db.execute(
            "select value_json from trial_user_attributes where trial_id=1 and key='run-0'"
        ).fetchone()
        run = json.loads(value)
        if drop_seed:
            run.pop("seed")
        db.execute(
            "update trial_user_attributes set key=?, value_json=? where trial_id=1 and key='run-0'",
            (key, json.dumps(run)),
        )
    for argv in (["results", "sw", "--out", str(folder)],
                 ["report", "sw", "--out", str(tmp_path / "rep"), "--storage",
                  f"sqlite:///{folder / 'study.db'}"]):  # fmt: skip
        code = main(argv)
        if says is None:
            assert code == 0
            capsys.readouterr()
        else:
            assert code == 2 and says in one_error_line(capsys)


def test_a_stop_that_lands_once_a_runs_end_is_recorded_leaves_the_run_as_it_ended(
    tmp_path, monkeypatch, capsys
):
    """A SIGTERM just after result.json said complete: the command said "interrupted", exit 130,
    printed no --json, and its rerun was refused (the folder holds a complete run)."""
    import json
    import signal

    import tricklab.training.api as api
    from tricklab.cli.main import main

    real = api.write_json_atomic

    def write_then_stop(path, data):
        real(path, data)
        os.kill(os.getpid(), signal.SIGTERM)  # the run's end is on disk

    monkeypatch.setattr(api, "write_json_atomic", write_then_stop)
    assert main([*TRAIN, "--out", str(tmp_path / "r"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["status"] == "complete"
    assert json.loads((tmp_path / "r" / "result.json").read_text())["status"] == "complete"


def test_a_stop_after_the_command_ended_leaves_with_its_code(monkeypatch):
    """`tricklab` (run: main's late_exit) leaves a stop after its end exiting with the command's
    code, where Python's shutdown put the default handler back and a kill read 143."""
    import signal

    from tricklab.core import stopping

    exits = []
    monkeypatch.setattr(os, "_exit", exits.append)
    before = signal.getsignal(signal.SIGTERM)
    try:
        with stopping.stop_on_signals() as stop:
            stop.exit_code = 3
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        assert exits == [3]
    finally:
        signal.signal(signal.SIGTERM, before)
    with stopping.stop_on_signals():
        pass
    assert signal.getsignal(signal.SIGTERM) is before  # without an exit code: put back


OWN_MODELS = """
import torch
from torch import nn


class Viewed(nn.Module):
    def __init__(self, num_classes, in_channels, image_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.fc = nn.Linear(4 * image_size * image_size, num_classes)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).view(x.size(0), -1))


class OwnFloat32(nn.Module):
    def __init__(self, num_classes, in_channels, image_size):
        super().__init__()
        self.fc = nn.Linear(in_channels * image_size * image_size, num_classes)

    def forward(self, x):
        x = x.flatten(1)
        return self.fc(x @ torch.eye(x.shape[1]))
"""


@pytest.mark.parametrize(
    "model, trick, says",
    [
        ("Viewed", "tricks.channels_last=true", "(tricks.precision=32-true tricks.channels_last"),
        ("OwnFloat32", "tricks.precision=16-true-bn32", "c10::Half != float"),
    ],
)
def test_an_own_forward_that_fails_as_the_run_calls_it_is_one_line_before_the_run(
    model, trick, says, tmp_path, monkeypatch, capsys
):
    """`x.view(N, -1)` under channels_last (speedrun94's) and a float32 tensor of its own under
    fp16 weights passed the checks and failed the run with a 27-line traceback, exit 1."""
    from tricklab.cli.main import main

    (tmp_path / "ownviews.py").write_text(OWN_MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    own = [w for w in TRAIN if not w.startswith("model.")] + [f"model.name=ownviews:{model}"]
    assert main([*own, trick, "--out", str(tmp_path / "r")]) == 2
    line = one_error_line(capsys)
    assert "its forward in train mode, as the run calls it" in line and says in line
    assert not (tmp_path / "r").exists()


def test_a_field_set_by_hand_that_no_section_has_is_an_unknown_key():
    """`recipe.optim.lrr = 0.5` (a typo) trained at the old lr without a word."""
    import tricklab
    from tricklab.core.errors import TrickLabError

    recipe = tricklab.load_recipe(None, TINY)
    recipe.optim.lrr = 0.5
    with pytest.raises(
        TrickLabError, match="unknown recipe key 'optim.lrr'; did you mean 'optim.lr'"
    ):
        tricklab.train(recipe)
    recipe = tricklab.load_recipe(None, TINY)
    recipe.optimm = 3
    with pytest.raises(TrickLabError, match="unknown recipe section 'optimm'"):
        recipe.checked()


@pytest.mark.parametrize("hook", [lambda: None, lambda row, extra: None])
def test_a_hook_that_cannot_take_its_arguments_is_refused_before_anything_runs(hook, tmp_path):
    """`on_epoch=lambda: None` trained an epoch, then recorded the run failed by a TypeError."""
    import tricklab

    recipe = tricklab.load_recipe(None, TINY)
    with pytest.raises(TypeError, match="train's on_epoch is called with one argument"):
        tricklab.train(recipe, on_epoch=hook, out_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()
    from tricklab.experiments import AblationPlan, ablate

    plan = AblationPlan(recipe, {"optim.lr": [0.1]}, seeds=1, out_dir=str(tmp_path / "a"))
    with pytest.raises(TypeError, match="on_epoch=, stop="):
        ablate(plan, train_fn=lambda recipe: None)
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("name", ["cafe\u0301", "\uff41\uff49\uff52\uff42\uff45\uff4e\uff43\uff48"])
def test_a_model_name_that_reads_as_another_is_refused(name):
    """'cafe\\u0301' beside 'café', or full-width 'ａｉｒｂｅｎｃｈ' beside 'airbench', were
    registered and listed as two names that look alike."""
    import tricklab
    from tricklab.core.errors import TrickLabError

    with pytest.raises(TrickLabError, match="Unicode's normal form"):
        tricklab.register_model(name, lambda num_classes: None)


def test_an_ablation_of_more_runs_than_fit_is_refused_before_they_are_listed(monkeypatch):
    """316 x 316 values x 10,000 seeds: within each limit, a billion runs, listed for minutes
    until memory ran out (then blamed on torch's libraries)."""
    import tricklab
    from tricklab.core.errors import TrickLabError
    from tricklab.experiments import AblationPlan, runner

    monkeypatch.setattr(runner, "MAX_PLANNED_RUNS", 50)
    plan = AblationPlan(tricklab.load_recipe(None, TINY), {"optim.lr": [0.37, 0.38]}, seeds=20)
    with pytest.raises(
        TrickLabError, match=r"3 configurations × 20 seeds are 60 runs, more than 50"
    ):
        runner.plan_ablation(plan, check_runs=False)


def _idx(path, array) -> None:
    """An MNIST idx file of uint8 `array`."""
    import struct

    header = struct.pack(">BBBB", 0, 0, 8, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    path.write_bytes(header + array.astype(np.uint8).tobytes())


@pytest.mark.parametrize(
    "train_images, train_labels, says",
    [
        ((20, 28, 28), 5, "mnist train (mn) holds 20 images and 5 labels"),
        ((20, 7, 7), 20, "train images are 1x7x7 and test images 1x28x28"),
    ],
    ids=["labels-short", "sizes-differ"],
)
def test_mnist_files_that_do_not_match_are_one_line_and_cache_nothing(
    train_images, train_labels, says, tmp_path, monkeypatch, capsys
):
    """More images than labels was a traceback (and a failed run in train), cached first; train
    images of another size than test's were trained on and measured on the other size."""
    from tricklab.cli.main import main

    monkeypatch.chdir(tmp_path)
    raw = tmp_path / "mn" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    _idx(raw / "train-images-idx3-ubyte", np.zeros(train_images))
    _idx(raw / "train-labels-idx1-ubyte", np.arange(train_labels) % 10)
    _idx(raw / "t10k-images-idx3-ubyte", np.zeros((10, 28, 28)))
    _idx(raw / "t10k-labels-idx1-ubyte", np.arange(10))
    argv = ["data", "show", "mnist", "--data-dir", "mn", "--cache-dir", "cache"]
    assert main(argv) == 2
    assert says in one_error_line(capsys)
    assert not list((tmp_path / "cache").rglob("*.npz")) if (tmp_path / "cache").exists() else True


def _image_folder(root, save) -> None:
    for split in ("train", "test"):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            for i in range(2):
                save(root / split / name / f"{i}", i)


@pytest.mark.parametrize(
    "save, says",
    [
        (lambda p, i: Image.fromarray(np.full((8, 8), 200, np.int32)).save(f"{p}.tif"),
         "holds pixels from 0 to 200 in a 32-bit file"),
        (lambda p, i: Image.fromarray(np.full((8, 8), 200, np.uint16)).save(f"{p}.png"),
         "holds pixels from 0 to 200 in a 16-bit file"),
    ],
    ids=["int32-tiff", "uint16-png"],
)  # fmt: skip
def test_8_bit_values_in_a_wide_grey_file_are_refused_not_decoded_black(
    save, says, tmp_path, capsys
):
    """A 32-bit grey TIFF of 0..255 decoded to all 0 (its top 8 bits of 16), silently."""
    from tricklab.cli.main import main

    _image_folder(tmp_path / "ds", save)
    argv = ["data", "show", "imagefolder", "--data-dir", str(tmp_path / "ds"), "--cache-dir",
            str(tmp_path / "cache")]  # fmt: skip
    assert main(argv) == 2
    assert says in one_error_line(capsys)


def _rgb(path, i) -> None:
    Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(f"{path}.png")


def test_pillows_own_warnings_are_not_printed(tmp_path, capsys):
    """A palette PNG with transparency in bytes printed Pillow's UserWarning and its source line."""
    import warnings

    from tricklab.data.sources import load_dataset

    _image_folder(tmp_path / "ds", _rgb)
    image = tmp_path / "ds" / "train" / "a" / "0.png"
    Image.open(image).convert("P").save(image, transparency=bytes([0, 128, 255] + [255] * 253))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning that reached the caller fails the test
        load_dataset("imagefolder", tmp_path / "ds", cache_dir=tmp_path / "cache")
    assert capsys.readouterr().err == ""


def test_hidden_and_stray_files_are_not_read_and_an_oversized_image_before_any_read(
    tmp_path, capsys
):
    """A 3 GB image was hashed for the cache key before the 64 MiB limit refused it, a stray 4 GB
    video hashed on every command, and an unreadable `.git` stopped the dataset."""
    from tricklab.cli.main import main
    from tricklab.data.imagefolder import source_fingerprint

    _image_folder(tmp_path / "ds", _rgb)
    train = tmp_path / "ds" / "train"
    before = source_fingerprint(train)
    (train / ".git").mkdir()
    (train / ".git" / "HEAD").write_text("ref")
    (train / "a" / ".hidden").write_text("x")
    assert source_fingerprint(train) == before  # hidden: never read, never counted
    (train / "a" / "video.mp4").write_bytes(b"1" * 10)
    stray = source_fingerprint(train)
    (train / "a" / "video.mp4").write_bytes(b"2" * 10)
    assert source_fingerprint(train) == stray != before  # by its name and size, not its bytes
    with open(train / "a" / "huge.png", "wb") as huge:
        huge.truncate(65 * 2**20)  # sparse: the check reads its size, not its bytes
    argv = ["data", "show", "imagefolder", "--data-dir", str(tmp_path / "ds"), "--cache-dir",
            str(tmp_path / "cache")]  # fmt: skip
    assert main(argv) == 2
    assert "image train/a/huge.png is 68,157,440 bytes" in one_error_line(capsys)


def test_an_archive_member_past_the_limit_is_refused_even_when_not_an_image(tmp_path, capsys):
    """A non-image member of 4 GiB of zeros in a 4 MB tar.gz was read through (skipped) for
    minutes: a bomb ran for hours."""
    import io
    import tarfile

    from tricklab.cli.main import main

    _image_folder(tmp_path / "ds", _rgb)
    with tarfile.open(tmp_path / "ds" / "train.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "ds" / "train" / "a", "train/a")
        member = tarfile.TarInfo("train/a/notes.bin")
        member.size = 65 * 2**20
        tar.addfile(member, io.BytesIO(bytes(member.size)))
    import shutil

    shutil.rmtree(tmp_path / "ds" / "train")
    argv = ["data", "show", "imagefolder", "--data-dir", str(tmp_path / "ds"), "--cache-dir",
            str(tmp_path / "cache")]  # fmt: skip
    assert main(argv) == 2
    assert "archive member train/a/notes.bin" in one_error_line(capsys)


def test_a_cache_folder_inside_the_image_folder_is_refused_with_why(tmp_path, capsys):
    """It was refused on every run as "files changed while they were decoded (another program
    writes to them)": the decode's own cache files changed them."""
    from tricklab.cli.main import main

    _image_folder(tmp_path / "ds", _rgb)
    argv = ["data", "show", "imagefolder", "--data-dir", str(tmp_path / "ds"), "--cache-dir"]
    assert main([*argv, str(tmp_path / "ds" / "train" / "a")]) == 2
    assert "is inside the image folder" in one_error_line(capsys)
    assert main([*argv, str(tmp_path / "ds" / "train" / ".cache")]) == 0  # hidden: not read


def test_class_folders_are_matched_composed_and_two_that_read_as_one_are_refused(tmp_path, capsys):
    """'café' in train and 'cafe\\u0301' in test said "missing: café; extra: café"; 'a' beside
    'a ' were two rows that looked alike."""
    from tricklab.data.sources import load_dataset

    for split, name in (("train", "caf\u00e9"), ("test", "cafe\u0301")):
        for cls in (name, "b"):
            (tmp_path / "ds" / split / cls).mkdir(parents=True)
            _rgb(tmp_path / "ds" / split / cls / "0", 1)
    dataset = load_dataset("imagefolder", tmp_path / "ds", cache_dir=tmp_path / "cache")
    assert dataset.classes == ["b", "caf\u00e9"]
    (tmp_path / "ds" / "train" / "b ").mkdir()
    _rgb(tmp_path / "ds" / "train" / "b " / "0", 2)
    from tricklab.core.errors import TrickLabError

    with pytest.raises(TrickLabError, match="read as one class"):
        load_dataset("imagefolder", tmp_path / "ds", cache_dir=tmp_path / "cache")


def test_load_datasets_arguments_of_the_wrong_kind_are_named():
    from tricklab.core.errors import TrickLabError
    from tricklab.data.dataset import Sampling
    from tricklab.data.sources import load_dataset

    for seed in (-1, 2**70):
        with pytest.raises(TrickLabError, match="Sampling's seed must be from 0 to 4294967295"):
            Sampling(seed=seed)
    with pytest.raises(TypeError, match="load_dataset's name takes str"):
        load_dataset(["imagefolder"])
    with pytest.raises(TypeError, match="load_dataset's download takes bool"):
        load_dataset("synthetic", download="yes")


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_seeded_sampled_sweep_stopped_and_resumed_draws_what_it_would_have(sampler, tmp_path):
    """A seeded random sweep of 3 trials, stopped in its first, drew its first configuration
    again on resuming (training nothing) and never the third, and said "complete 3"."""
    import optuna
    from test_dashboard_attrs import FAST, fake_train

    from tricklab.core.stopping import Interrupted, StopRequest
    from tricklab.experiments import SweepPlan, parse_space, sweep
    from tricklab.experiments.storage import open_storage, storage_url

    base = tricklab_recipe()
    space = parse_space({"optim.lr": {"low": 0.001, "high": 1.0, "log": True}})

    def plan(out):
        return SweepPlan(base, space, trials=3, sampler=sampler, seeds=2, sampler_seed=0,
                         study="s", out_dir=str(out))  # fmt: skip

    def drawn(out) -> list[float]:
        storage = open_storage(storage_url(None, out), must_exist=True)
        trials = optuna.load_study(study_name="s", storage=storage).trials
        return sorted({t.params["optim.lr"] for t in trials if t.state.is_finished()})

    sweep(plan(tmp_path / "whole"), train_fn=fake_train, liveness=FAST)
    stop, calls = StopRequest(), []

    def stopped_in_the_first_trial(recipe, **kwargs):
        calls.append(recipe)
        if len(calls) == 2:  # its second seed
            stop.request()
            raise Interrupted("stopped")
        return fake_train(recipe, **kwargs)

    with pytest.raises(KeyboardInterrupt):
        sweep(plan(tmp_path / "resumed"), train_fn=stopped_in_the_first_trial, stop=stop,
              liveness=FAST)  # fmt: skip
    sweep(plan(tmp_path / "resumed"), train_fn=fake_train, liveness=FAST)
    assert drawn(tmp_path / "resumed") == drawn(tmp_path / "whole")
    assert len(drawn(tmp_path / "whole")) == 3


def tricklab_recipe():
    import tricklab

    return tricklab.load_recipe(None, [*TINY, "optim.lr=0.2"])


def test_two_experiments_started_at_once_on_one_study_one_is_refused(tmp_path, monkeypatch):
    """Both passed the "another experiment" check before either stored its plan: the study
    held both, a 49-line traceback, and a resume never finished."""
    import threading

    from test_dashboard_attrs import FAST, fake_train

    import tricklab.experiments.storage as storage
    from tricklab.core.errors import TrickLabError
    from tricklab.experiments import AblationPlan, ablate

    checking, release, real = threading.Event(), threading.Event(), storage.check_study
    order: list[str] = []

    def paused_check(name, study, attrs, must_match):
        order.append(threading.current_thread().name)
        if threading.current_thread().name == "first":
            checking.set()
            release.wait(30)  # the second, started now, must wait for the first's plan
        return real(name, study, attrs, must_match)

    monkeypatch.setattr(storage, "check_study", paused_check)
    outcome: dict[str, object] = {}

    def run(name, lr):
        plan = AblationPlan(tricklab_recipe(), {"optim.lr": [lr]}, seeds=1, study="one",
                            out_dir=str(tmp_path / "one"))  # fmt: skip
        try:
            outcome[name] = ablate(plan, train_fn=fake_train, liveness=FAST).status_counts
        except TrickLabError as exc:
            outcome[name] = str(exc)

    first = threading.Thread(target=run, args=("first", 0.3), name="first")
    first.start()
    assert checking.wait(30)
    second = threading.Thread(target=run, args=("second", 0.4), name="second")
    second.start()
    second.join(1.0)
    assert order == ["first"]  # the second waits for the lock, not past the check
    release.set()
    first.join(60)
    second.join(60)
    assert outcome["first"] == {"complete": 2}
    assert "another" in str(outcome["second"]), outcome


def test_a_bad_image_beside_a_stray_file_is_one_line_and_the_stray_file_said_once_decoded(
    tmp_path, capsys
):
    """The warning naming the stray file came first, then the error: two lines for one mistake."""
    from tricklab.cli.main import main

    _image_folder(tmp_path / "ds", _rgb)
    (tmp_path / "ds" / "train" / "a" / "notes.txt").write_text("hi")
    (tmp_path / "ds" / "train" / "b" / "empty.png").write_bytes(b"")
    argv = ["data", "show", "imagefolder", "--data-dir", str(tmp_path / "ds"), "--cache-dir",
            str(tmp_path / "cache")]  # fmt: skip
    assert main(argv) == 2
    assert "cannot decode image train/b/empty.png" in one_error_line(capsys)
    (tmp_path / "ds" / "train" / "b" / "empty.png").unlink()
    assert main(argv) == 0
    assert "skipped 1 file" in capsys.readouterr().err


def test_a_stop_that_lands_as_the_last_run_of_an_ablation_ends_leaves_it_finished(tmp_path):
    """A SIGTERM just after the last run's result.json: exit 130, "rerun the same command to
    resume", with nothing left to resume (and between runs, a run stored `interrupted` whose
    result.json said complete)."""
    from test_dashboard_attrs import FAST, fake_train

    from tricklab.core.stopping import StopRequest
    from tricklab.experiments import AblationPlan, ablate

    stop, calls = StopRequest(), []

    def stopped_as_it_ends(recipe, **kwargs):
        calls.append(recipe)
        result = fake_train(recipe, **kwargs)
        if len(calls) == 2:  # the last run's end is recorded: then the stop lands
            stop.request()
        return result

    plan = AblationPlan(tricklab_recipe(), {"optim.lr": [0.3]}, seeds=1, out_dir=str(tmp_path))
    summary = ablate(plan, train_fn=stopped_as_it_ends, stop=stop, liveness=FAST)
    assert summary.status_counts == {"complete": 2}


def test_a_speedrun_stopped_once_its_last_run_ended_is_complete_and_keeps_its_folder(
    tmp_path, monkeypatch, capsys
):
    """The stop made the speedrun exit 130 and remove its folder, finished result.json and all."""
    import json
    import signal

    import tricklab.training.api as api
    from tricklab.cli.main import main

    real = api.write_json_atomic

    def write_then_stop(path, data):
        real(path, data)
        if path.parent.name == "seed-0":
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(api, "write_json_atomic", write_then_stop)
    out = tmp_path / "s"
    argv = ["speedrun", *TINY_SYNTHETIC, "run.epochs=1", "tricks.precision=32-true",
            "--runs", "1", "--warmup-epochs", "0", "--out", str(out), "-q"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is False and len(summary["runs"]) == 1
    assert json.loads((out / "seed-0" / "result.json").read_text())["status"] == "complete"


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda runs: runs[1].pop("seed"), "holds a run in runs whose seed is null"),
        (lambda runs: runs[1].update(seed=runs[0]["seed"]), "holds two runs of one seed"),
        (lambda runs: runs[1].update(seed=10**20), "not a seed, a whole number from 0 to"),
        (lambda runs: runs[1].update(seed=-1), "not a seed, a whole number from 0 to"),
    ],
    ids=["no-seed", "seed-twice", "huge-seed", "negative-seed"],
)
def test_a_stored_run_list_is_checked_for_its_seeds_as_the_run_keys_are(
    change, says, tmp_path, capsys
):
    """The second retry: a run of a trial's `runs` without a seed, or one seed twice, was dropped
    without a word (the trial's mean kept both); a seed of 10**20 or -1 was listed."""
    import json
    import sqlite3

    from test_dashboard_attrs import FAST, fake_train

    from tricklab.cli.common import quiet_optuna
    from tricklab.cli.main import main
    from tricklab.experiments import SweepPlan, parse_space, sweep

    space = parse_space({"optim.lr": {"low": 0.01, "high": 1.0}})
    plan = SweepPlan(tricklab_recipe(), space, trials=1, sampler="random", seeds=2, study="s",
                     out_dir=str(tmp_path / "s"))  # fmt: skip
    with quiet_optuna():  # Optuna's "A new study created" line, for a Python caller
        sweep(plan, train_fn=fake_train, liveness=FAST)
    with sqlite3.connect(tmp_path / "s" / "study.db") as db:
        (value,) = db.execute(
            "select value_json from trial_user_attributes where trial_id=1 and key='runs'"
        ).fetchone()
        runs = json.loads(value)
        change(runs)
        db.execute(
            "update trial_user_attributes set value_json=? where trial_id=1 and key='runs'",
            (json.dumps(runs),),
        )
    assert main(["results", "s", "--out", str(tmp_path / "s"), "--runs"]) == 2
    assert says in one_error_line(capsys)


def test_more_options_results_would_ignore_and_a_nul_in_a_storage_are_refused(tmp_path, capsys):
    import tricklab.experiments as ex
    from tricklab.cli.main import main
    from tricklab.core.errors import TrickLabError

    for argv, says in [
        (["s", "--per-seed", "--target", "0.5"], "--per-seed lists the runs; --target:"),
        (["s", "--storage", "x.db", "--out", "y"], "--out names the folder whose study.db"),
    ]:
        assert main(["results", *argv]) == 2
        assert says in one_error_line(capsys)
    for storage in ("journal:/tmp/a\x00b", "/tmp/a\x00b.journal"):
        with pytest.raises(TrickLabError, match="holds a NUL character"):
            ex.results("s", storage=storage)
