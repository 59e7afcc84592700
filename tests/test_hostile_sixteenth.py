"""The sixteenth hostile round: each case is one clear error before anything is written, or an
output that says what it measured and on what machine."""

import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main
from tricklab.measure.provenance import BUSY_WORDS
from tricklab.report.profiles import load_profile

PROFILES = {
    "step": ["profile", "step", *TINY_SYNTHETIC, "--repeats", "2"],
    "model": ["profile", "model", "airbench", "model.width=0.25", "data.image_size=16",
              "--batch-sizes", "2", "--repeats", "2", "--device", "cpu"],
    "loader": ["profile", "loader", "synthetic", "data.train_size=128", "data.test_size=64",
               "loader.batch_size=64", "--kinds", "device", "--repeats", "2"],
}  # fmt: skip


@pytest.mark.parametrize("kind", PROFILES)
def test_a_profile_on_a_busy_machine_says_so_in_the_terminal_and_in_the_report(
    kind, tmp_path, monkeypatch, capsys
):
    """speedrun, ablate, results and report flag timings taken on a busy machine; a profile,
    the command whose only output is timings, said nothing."""
    cores = os.cpu_count()
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0 * cores, 1.0, 1.0))
    assert main([*PROFILES[kind], "-q"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    line = f"{BUSY_WORDS}: the 1-minute load average was {3.0 * cores:.2f} on {cores} cores"
    assert line in out and "(start of the profile)" in out and "run again when" in out
    assert main([*PROFILES[kind], "--json", "-q"]) == 0
    saved = tmp_path / "p.json"
    saved.write_text(capsys.readouterr().out.strip().splitlines()[-1])
    hardware = json.loads(saved.read_text())["hardware"]
    assert hardware["load_average_start"] == hardware["load_average_end"] == [3.0 * cores, 1, 1]
    notes = [n for t in load_profile(saved).tables for n in t.notes]
    assert any(line in n for n in notes)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert main([*PROFILES[kind], "-q"]) == 0
    assert BUSY_WORDS not in capsys.readouterr().out
    data = json.loads(saved.read_text())
    data["hardware"]["load_average_end"] = ["high", 1]
    saved.write_text(json.dumps(data))
    assert main(["report", "--profile", str(saved), "--out", str(tmp_path / "r")]) == 2
    assert "load_average_end" in capsys.readouterr().err


HOSTILE_NAMES = [
    '"><img src=x onerror=alert(1)>',
    "<script>alert(1)</script>",
    "a|b[x](javascript:alert(1))",
    "# heading",
    "- item `code` *em*",
    "1. first",
]


def test_report_md_shows_every_name_as_it_is_in_prose_headings_and_bullets(tmp_path, capsys):
    """The tables escaped names, but the title, summary, headings and conclusions wrote them raw:
    report.md opened in a Markdown viewer ran a script, an onerror image and a javascript: link."""
    markdown = pytest.importorskip("markdown")
    values = ",".join(f"'{name}'" for name in HOSTILE_NAMES[1:])
    argv = ["ablate", "--baseline", *TINY_SYNTHETIC, "run.epochs=1", "tricks.precision=32-true",
            "--vary", f"data.dir={values}", "--seeds", "1", "--study", HOSTILE_NAMES[0],
            "--out", str(tmp_path / "s"), "-q"]  # fmt: skip
    assert main(argv) == 0
    out = tmp_path / "r"
    assert (
        main(["report", str(tmp_path / "s"), "--out", str(out), "--title", HOSTILE_NAMES[1]]) == 0
    )
    capsys.readouterr()
    text = (out / "report.md").read_text()
    assert text.startswith("# &lt;script&gt;alert(1)&lt;/script&gt;\n")
    seen = _Rendered()
    seen.feed(markdown.markdown(text, extensions=["tables"]))
    assert seen.tags <= {"h1", "h2", "h3", "p", "ul", "li", "table", "thead", "tbody", "tr", "th",
                         "td", "img", "a", "pre", "code"}  # fmt: skip
    assert all(not link.startswith("javascript") and "/" in link for link in seen.links)
    shown = " ".join(seen.text)
    assert shown.startswith(HOSTILE_NAMES[1])  # the title, as typed
    for name in [HOSTILE_NAMES[0], *HOSTILE_NAMES[2:]]:
        assert name in shown  # each name reads as it was written


class _Rendered(HTMLParser):
    """The tags, link targets and text of rendered Markdown."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.links: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.add(tag)
        self.links += [v for k, v in attrs if k in ("href", "src")]

    def handle_data(self, data) -> None:
        self.text.append(data)


def test_a_recipe_in_report_md_keeps_its_fence_whatever_backticks_it_holds():
    from pathlib import Path

    import tricklab.report.document as doc
    from tricklab.report.markdown import render_markdown

    text = render_markdown([doc.Code("data:\n  dir: a```b````c\n", "yaml")], Path("."))
    assert text.startswith("`````yaml\n") and text.rstrip().endswith("\n`````")


# ---------------------------------------------------------------- the library, as a caller uses it
TINY = [*TINY_SYNTHETIC, "run.epochs=2", "tricks.precision=32-true"]


def test_a_relative_out_dir_stays_where_it_was_named_when_the_caller_changes_folder(
    tmp_path, monkeypatch
):
    """A chdir mid-run (another thread's, a notebook's %cd) made the next write a
    FileNotFoundError traceback and left a half-written folder."""
    import tricklab

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    recipe = tricklab.load_recipe(None, TINY)
    result = tricklab.train(recipe, out_dir="rel", on_epoch=lambda row: os.chdir(tmp_path / "b"))
    assert result.status == "complete" and result.epochs_completed == 2
    assert json.loads((tmp_path / "a" / "rel" / "result.json").read_text())["status"] == "complete"
    assert list((tmp_path / "b").iterdir()) == []


class _BytesPath(os.PathLike):
    def __fspath__(self):
        return b"/tmp/x"


async def _async_hook(row) -> None:
    pass


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t, r: __import__("tricklab").train(r, on_epoch=_async_hook), "async"),
        (lambda t, r: __import__("tricklab").train(r, out_dir=_BytesPath()), "folder path"),
        (lambda t, r: _ablate(t, r, stop=5), "ablate's stop takes StopRequest"),
        (lambda t, r: _ablate(t, r, liveness=5), "ablate's liveness takes Liveness"),
        (lambda t, r: _ablate(t, r, on_run_end=5), "ablate's on_run_end takes a function"),
        (lambda t, r: _ablate(t, r, train_fn=5), "ablate's train_fn takes a function"),
        (lambda t, r: _speedrun(t, r, on_run=5), "speedrun's on_run takes a function"),
        (lambda t, r: _speedrun(t, r, on_run=_async_hook), "async"),
    ],
    ids=["async-on-epoch", "bytes-path", "stop", "liveness", "on-run-end", "train-fn", "on-run",
         "async-on-run"],
)  # fmt: skip
def test_a_hook_of_the_wrong_kind_is_a_type_error_before_anything_runs_or_is_written(
    call, message, tmp_path
):
    """ablate(stop=5) and (liveness=5) were AttributeErrors deep inside with a study.db left;
    on_run_end=5 and speedrun's on_run=5 failed after a run had trained; train_fn=5 stored
    every run failed; an async on_epoch was taken and never ran."""
    import tricklab

    with pytest.raises(TypeError, match=message):
        call(tmp_path / "out", tricklab.load_recipe(None, TINY))
    assert not (tmp_path / "out").exists()


def _ablate(out, recipe, **hooks):
    from tricklab.experiments import AblationPlan, ablate

    plan = AblationPlan(recipe, {"tricks.label_smoothing": [0.1]}, seeds=1, out_dir=str(out))
    return ablate(plan, **hooks)


def _speedrun(out, recipe, **hooks):
    from tricklab.experiments.speedrun import SpeedrunPlan, speedrun

    return speedrun(SpeedrunPlan(recipe, 1, out_dir=str(out)), **hooks)


def test_a_recipe_changed_by_hand_is_checked_by_the_profilers_as_by_train():
    """profile_step with loader.batch_size = "64" was a TypeError from string formatting, a
    section set to None an AttributeError; Recipe(run=5) was taken and get() failed inside."""
    import tricklab
    from tricklab.core.errors import TrickLabError
    from tricklab.profile.loader import profile_loader
    from tricklab.profile.step import profile_step

    recipe = tricklab.load_recipe(None, TINY)
    recipe.loader.batch_size = "64"
    for profile in (profile_step, profile_loader):
        with pytest.raises(TrickLabError, match="loader.batch_size"):
            profile(recipe, repeats=2)
    recipe = tricklab.load_recipe(None, TINY)
    recipe.tricks = None
    with pytest.raises(TypeError, match="Recipe.tricks takes TricksConfig"):
        profile_step(recipe, repeats=2)
    with pytest.raises(TypeError, match="Recipe.tricks takes TricksConfig"):
        recipe.get("run.epochs")
    with pytest.raises(TypeError, match="Recipe.run takes RunConfig, got int 5"):
        tricklab.Recipe(run=5)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"num_classes": 10**100}, "num_classes must be at most 1,000,000"),
        ({"num_classes": 10, "in_channels": 10**6}, "in_channels 8,192"),
        ({"num_classes": 10, "width": 1000}, r"width must be in \(0, 64\]"),
        ({"num_classes": 10, "widths": [8, 8, 10**6]}, "widths in 1..8192"),
    ],
)
def test_build_model_keeps_the_bounds_a_recipe_has(options, message):
    """num_classes=10**100 was torch's overflow TypeError with C++ frames, width=1000 the CPU
    allocator's error: a caller of build_model gets the recipe's bounds."""
    import tricklab
    from tricklab.core.errors import TrickLabError

    name = "airbench" if "widths" in options else "resnet18"
    with pytest.raises(TrickLabError, match=message):
        tricklab.build_model(name, **options)


def test_a_run_leaves_the_callers_environment_as_it_was(tmp_path):
    """Counting MACs (FlopCounterMode) imports torch's compiler, which wrote its default
    TORCHINDUCTOR_CACHE_DIR into the caller's os.environ: an eager run changed the caller's
    environment, and its subprocesses'."""
    code = (
        "import os, tricklab\n"
        f"before = dict(os.environ)\n"
        f"tricklab.train(tricklab.load_recipe(None, {TINY!r}))\n"
        "print(sorted(set(os.environ) - set(before)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_numpy_values_read_as_python_ones_or_are_refused_by_their_own_type_name():
    """results(target=np.float64(0.5)) gave numpy values in its rows (not JSON); vary values
    b"/tmp" and Path(...) were trained as "b'/tmp'"; grid=np.True_ said "takes bool, got bool"."""
    import tricklab
    from tricklab.experiments import AblationPlan
    from tricklab.experiments.plan import normalize_target

    assert type(normalize_target(np.float64(50))) is float
    recipe = tricklab.load_recipe(None, TINY)
    for value in (b"/tmp", Path("/tmp")):
        with pytest.raises(TypeError, match=r"each of AblationPlan's vary\['data.dir'\] takes"):
            AblationPlan(recipe, {"data.dir": [value]}, seeds=1)
    with pytest.raises(TypeError, match="takes bool, got numpy.bool"):
        AblationPlan(recipe, {"optim.lr": [0.1]}, grid=np.True_)


def test_a_run_result_from_a_dict_checks_what_it_holds():
    from tricklab.core.errors import TrickLabError
    from tricklab.training.result import RunResult

    result = RunResult(status="complete", val_acc=0.5, train_seconds=1.5, epochs_completed=2)
    assert RunResult.from_dict({**result.to_dict(), "extra": 1}) == result
    with pytest.raises(TypeError, match="takes dict"):
        RunResult.from_dict(None)
    for bad, field in [({}, "status"), ({"status": 5}, "status"), ({"status": "running"}, "status"),
                       ({"status": "complete", "val_acc": "high"}, "val_acc"),
                       ({"status": "complete", "epochs_completed": 1.5}, "epochs_completed"),
                       ({"status": "complete", "train_seconds": float("inf")}, "train_seconds"),
                       ({"status": "complete", "epochs": [1]}, "epochs")]:  # fmt: skip
        with pytest.raises(TrickLabError, match=f"a result's {field} is"):
            RunResult.from_dict(bad)


# ---------------------------------------------------------------- the environment a command meets
def _cli(args, env=None, **options):
    full = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "tricklab", *args], env=full, timeout=300,
                          capture_output=True, text=True, **options)  # fmt: skip


@pytest.mark.parametrize("env", [{"COLUMNS": "²"}, {"LINES": "①"}, {"COLUMNS": "٣"}])
def test_a_terminal_size_of_digits_int_refuses_is_ignored(env):
    """rich takes str.isdigit() values ('²', '①') for a number and int() refuses them: every
    command, --version included, was a traceback at import."""
    done = _cli(["tricks", "run", "--search", "seed"], env)
    assert done.returncode == 0 and done.stderr == "" and "run.seed" in done.stdout


def test_a_proxy_variable_that_names_no_url_is_the_one_download_line(tmp_path):
    """http.client.InvalidURL is no OSError: `data show cifar10` was a 66-line traceback."""
    env = {"https_proxy": "http://proxy:80a", "TRICKLAB_DATA": str(tmp_path / "d")}
    done = _cli(["data", "show", "cifar10"], env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: cifar10 not found") and "nonnumeric port" in done.stderr


WORKERS = [*TINY_SYNTHETIC, "run.epochs=1", "tricks.precision=32-true", "loader.kind=torch",
           "loader.num_workers=2", "loader.batch_size=8"]  # fmt: skip


def _open_files(soft, hard):
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_loader_workers_under_a_low_open_files_limit_raise_it_or_refuse_in_one_line(tmp_path):
    """At ulimit -n 128 a run with two workers failed mid-epoch ("Too many open files"), and an
    ablation of such runs exited 0 having trained nothing."""
    done = _cli(["train", *WORKERS, "--out", str(tmp_path / "r")], preexec_fn=_open_files(128, 128))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "loader.num_workers=2 needs about 256 open files, and the limit is 128" in done.stderr
    assert not (tmp_path / "r").exists()
    code = (
        "import resource\nfrom tricklab.core.process_limits import open_files_for_workers\n"
        "open_files_for_workers(2)\nprint(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    raised = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            preexec_fn=_open_files(128, 4096))  # fmt: skip
    assert int(raised.stdout) == 256  # the soft limit, raised toward the hard one


def test_a_users_matplotlibrc_does_not_change_or_break_the_report(tmp_path):
    """text.usetex without LaTeX was a 108-line traceback, an empty color cycle a
    ZeroDivisionError, a missing font 3,091 findfont lines."""
    assert main(["train", *TINY, "--out", str(tmp_path / "run"), "-q"]) == 0
    rc = tmp_path / "matplotlibrc"
    rc.write_text("text.usetex: True\naxes.prop_cycle: cycler(color=[])\nfont.family: NoSuch\n")
    done = _cli(["report", str(tmp_path / "run"), "--out", str(tmp_path / "r")],
                {"MATPLOTLIBRC": str(rc)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "findfont" not in done.stderr and (tmp_path / "r" / "report.html").is_file()


# ---------------------------------------------------------------- image folders and their cache
def _image_folder(root, value=0, size=8):
    from PIL import Image

    for split in ("train", "test"):
        for name in ("a", "b"):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(3):
                Image.new("RGB", (size, size), (value + 40 * i, 10, 200)).save(folder / f"{i}.png")
    return root


def test_no_arrangement_of_names_and_bytes_reads_as_another_folders_fingerprint(tmp_path):
    """A folder named "a.ppm\\t<size>\\n<bytes>" hashed as a file a.ppm holding those bytes and a
    "/\\n": two different folders shared a cache key, and one was served the other's images."""
    from tricklab.data.cache import fingerprint_tree

    ppm = b"P6\n1 1\n255\n" + bytes([200, 30, 90])
    content = ppm + b"/\n"
    (tmp_path / "B").mkdir()
    (tmp_path / "B" / "a.ppm").write_bytes(content)
    (tmp_path / "A").mkdir()
    os.mkdir(os.fsencode(tmp_path / "A") + b"/a.ppm\t" + str(len(content)).encode() + b"\n" + ppm)
    trees = [(tmp_path / side, list((tmp_path / side).iterdir())) for side in "AB"]
    assert fingerprint_tree(trees[0][1], trees[0][0]) != fingerprint_tree(trees[1][1], trees[1][0])


def test_a_folder_changed_while_it_is_decoded_is_not_cached_under_its_old_content(
    tmp_path, monkeypatch
):
    """The key was taken before the decode: an image replaced meanwhile was cached as the old
    folder's, and served, silently, until the folder changed again."""
    from PIL import Image

    import tricklab
    import tricklab.data.imagefolder as imagefolder
    from tricklab.core.errors import TrickLabError

    root = _image_folder(tmp_path / "data")
    decode = imagefolder.decode_imagefolder

    def decode_while_a_file_changes(*args, **kwargs):
        Image.new("RGB", (8, 8), (255, 255, 255)).save(root / "train" / "a" / "0.png")
        return decode(*args, **kwargs)

    monkeypatch.setattr(imagefolder, "decode_imagefolder", decode_while_a_file_changes)
    cache = tmp_path / "cache"
    with pytest.raises(TrickLabError, match="changed while they were decoded"):
        tricklab.load_dataset("imagefolder", data_dir=str(root), cache_dir=str(cache))
    assert not list(cache.rglob("*.npz"))
    monkeypatch.setattr(imagefolder, "decode_imagefolder", decode)
    loaded = tricklab.load_dataset("imagefolder", data_dir=str(root), cache_dir=str(cache))
    assert len(loaded.train.labels) == 6 and len(list(cache.rglob("*.npz"))) == 2


@pytest.mark.parametrize(
    "pixels, message",
    [
        (lambda g: g.astype(np.int32) * 1000, "has 32-bit integer pixels"),
        (lambda g: g.astype(np.float32) / 255, "has float pixels"),
        (lambda g: (g * 256).astype(np.int32), None),  # 16 bits in a 32-bit image: read as such
    ],
    ids=["int32", "float", "int32-holding-16-bits"],
)
def test_wide_grey_pixels_are_read_by_their_range_or_refused(pixels, message, tmp_path):
    """32-bit integer and float TIFFs decoded to all 255 and all 0, without a word."""
    from PIL import Image

    from tricklab.core.errors import TrickLabError
    from tricklab.data.imagefolder_decode import decode_image

    grey = np.random.default_rng(0).integers(1, 256, (8, 8))
    path = tmp_path / "x.tif"
    Image.fromarray(pixels(grey)).save(path)
    if message is None:
        assert np.array_equal(np.asarray(decode_image(path, "x.tif")), grey.astype(np.uint8))
    else:
        with pytest.raises(TrickLabError, match=message):
            decode_image(path, "x.tif")


def test_a_huge_image_says_one_line_and_memory_is_not_called_corruption(tmp_path, monkeypatch):
    """Pillow's DecompressionBombWarning printed two lines before the error; a MemoryError while
    decoding a whole image said it was corrupt or truncated."""
    import warnings

    from PIL import Image

    from tricklab.core.errors import TrickLabError
    from tricklab.data.imagefolder_decode import decode_image

    bomb = tmp_path / "bomb.png"
    Image.new("L", (10000, 10000)).save(bomb)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        with pytest.raises(TrickLabError, match="10000x10000 pixels, more than"):
            decode_image(bomb, "bomb.png")
    assert warned == []
    small = tmp_path / "small.png"
    Image.new("RGB", (8, 8)).save(small)

    def out_of_memory(self):
        raise MemoryError

    monkeypatch.setattr(Image.Image, "load", out_of_memory)
    with pytest.raises(TrickLabError, match="does not fit in the memory left to decode it"):
        decode_image(small, "small.png")


def test_an_archive_of_too_many_entries_is_refused_without_keeping_every_header(
    tmp_path, monkeypatch
):
    """tarfile kept each header it read: a 2 MB archive of a million empty folder entries took
    977 MB and 47 s, a larger one the kernel's kill."""
    import tarfile

    import tricklab
    from tricklab.core.errors import TrickLabError
    from tricklab.data import limits

    source = _image_folder(tmp_path / "src")
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        with tarfile.open(data / f"{split}.tar", "w") as tar:
            tar.add(source / split, arcname=split)
    loaded = tricklab.load_dataset("imagefolder", data_dir=str(data), cache_dir=str(tmp_path / "c"))
    assert len(loaded.train.labels) == 6
    monkeypatch.setattr(limits, "MAX_ARCHIVE_MEMBERS", 5)
    with pytest.raises(TrickLabError, match="holds more than 5 entries"):
        tricklab.load_dataset("imagefolder", data_dir=str(data), cache_dir=str(tmp_path / "d"))


# ---------------------------------------------------------------- folders that go away or fill up
def test_a_run_folder_deleted_mid_run_is_one_line_naming_the_path(tmp_path, monkeypatch, capsys):
    """Removing the run's folder while it trained ended in two chained tracebacks."""
    import shutil

    import tricklab.training.api as api

    out = tmp_path / "r"
    write = api.write_json_atomic

    def write_after_the_folder_is_gone(path, data):
        shutil.rmtree(out, ignore_errors=True)
        write(path, data)

    monkeypatch.setattr(api, "write_json_atomic", write_after_the_folder_is_gone)
    assert main(["train", *TINY, "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: cannot use the path {out}")
    assert "No such file or directory (removed while the command ran?)" in err[0]


def test_a_speedrun_whose_summary_cannot_be_written_leaves_its_folder_for_the_rerun(
    tmp_path, monkeypatch, capsys
):
    """ulimit -f at summary.json's write left seed-0/ and warmup/ without a summary: `report`
    said it was no speedrun, the rerun that it does not resume."""
    import errno

    import tricklab.experiments.speedrun as module

    out = tmp_path / "s"
    argv = ["speedrun", *TINY, "--runs", "2", "--warmup-epochs", "1", "--out", str(out), "-q"]
    write = module.atomic_write

    def too_large(path, *args, **kwargs):
        raise OSError(errno.EFBIG, "File too large", str(path))

    monkeypatch.setattr(module, "atomic_write", too_large)
    assert main(argv) == 2
    assert "summary.json" in capsys.readouterr().err
    assert not out.exists()
    monkeypatch.setattr(module, "atomic_write", write)
    assert main(argv) == 0
    assert json.loads((out / "summary.json").read_text())["n"] == 2


# ---------------------------------------------------------------- names and values as written
def test_csv_cells_that_a_spreadsheet_would_run_stay_text():
    """results --per-seed --format csv wrote a varied data.dir '=HYPERLINK(...)' as it was: a
    formula in a spreadsheet. --csv (the statistics) wrote names with control characters raw."""
    from tricklab.core.safeio import csv_cell
    from tricklab.report.table_writers import to_csv

    assert csv_cell('=HYPERLINK("http://e","x")') == '\'=HYPERLINK("http://e","x")'
    assert [csv_cell(v) for v in ("@SUM(1)", "+x", "-x", "\tx")] == ["'@SUM(1)", "'+x", "'-x",
                                                                    "\\tx"]  # fmt: skip
    assert [csv_cell(v) for v in ("-0.5", "+1e3", "plain", 3, None)] == ["-0.5", "+1e3", "plain",
                                                                        3, ""]  # fmt: skip
    assert to_csv(["c"], [["=1+1"]]) == "c\n'=1+1\n"


def test_per_seed_with_csv_is_refused_for_it_wrote_the_statistics(tmp_path, capsys):
    assert main(["results", "s", "--out", str(tmp_path), "--per-seed", "--csv", "x.csv"]) == 2
    assert "for every run use --format csv > FILE" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_a_study_name_not_in_composed_unicode_is_refused_when_it_is_made(tmp_path, capsys):
    """'café' and 'cafe\\u0301' were two studies shown alike in the listing, the report's
    title, columns and conclusions."""
    argv = ["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.1", "--out", str(tmp_path / "a")]
    assert main([*argv, "--study", "cafe\u0301", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--study 'cafe\\u0301' is not in Unicode's composed form (NFC)" in err
    assert main([*argv, "--study", "caf\u00e9", "--dry-run"]) == 0


@pytest.mark.parametrize("value", ["---", "&a x", "!!str", "a\nb"])
def test_a_text_field_keeps_a_value_as_typed_or_says_why_it_cannot(value):
    """data.dir=--- was a silent None (YAML's document start), data.dir=&a x the text 'x'."""
    import tricklab
    from tricklab.core.errors import TrickLabError

    try:
        kept = tricklab.load_recipe(None, [f"data.dir={value}"]).data.dir
    except TrickLabError as err:
        assert "quote the value" in str(err) or "not valid" in str(err)
    else:
        assert kept == value.strip()


def test_a_switch_takes_true_and_false_quoted_as_it_takes_yes_and_no():
    import tricklab

    for word, on in (('"true"', True), ("'false'", False), ("yes", True), ("off", False)):
        assert tricklab.load_recipe(None, [f"model.pretrained={word}"]).model.pretrained is on


def test_reference_takes_a_configuration_as_the_tables_show_it():
    """The table showed optim.lr=1e+30 and --reference refused it, and the typed optim.lr=1e30
    too (the id reads optim.lr=1.0e+30); a sweep's 0.143 needed 0.14297724879798399."""
    from tricklab.core.errors import TrickLabError
    from tricklab.experiments.records import resolve_reference

    ids = ["baseline", "optim.lr=1.0e+30", "optim.lr=0.14297724879798399 aug.flip=random",
           "optim.lr=0.1431 aug.flip=random", 'data.dir="a b"']  # fmt: skip
    for typed, meant in [("optim.lr=1e+30", ids[1]), ("optim.lr=1e30", ids[1]),
                         ("optim.lr=0.143 aug.flip=random", ids[2]), ('data.dir="a b"', ids[4]),
                         ("baseline", ids[0])]:  # fmt: skip
        assert resolve_reference(typed, ids) == meant
    with pytest.raises(TrickLabError, match="no configuration 'optim.lr=7' in this study"):
        resolve_reference("optim.lr=7", ids)
    with pytest.raises(TrickLabError, match="2 configurations 'optim.lr=0.14"):
        resolve_reference("optim.lr=0.14 aug.flip=random", ["optim.lr=0.140001 aug.flip=random",
                                                            "optim.lr=0.139999 aug.flip=random"])  # fmt: skip


def test_the_demo_says_a_cache_it_cannot_write_before_its_plan(tmp_path, monkeypatch, capsys):
    """With TRICKLAB_CACHE on a read-only disk the demo printed its four-line plan first."""
    import tricklab.data.cache as cache
    from tricklab.core.errors import TrickLabError

    def read_only(folder):
        raise TrickLabError(f"cannot write the dataset cache in {folder} (Read-only file system)")

    monkeypatch.setattr(cache, "ensure_writable", read_only)
    monkeypatch.setenv("TRICKLAB_CACHE", str(tmp_path / "cache"))
    assert main(["demo", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot write the dataset cache in")
    assert not (tmp_path / "d").exists()


# ---------------------------------------------------------------- a storage being made
def test_a_storage_that_cannot_be_made_or_is_stopped_while_made_leaves_nothing(
    tmp_path, monkeypatch, capsys
):
    """A full disk at the study's database left an empty --out folder; a stop while Optuna wrote
    its tables left a study.db that readers called "part of an Optuna database"."""
    import errno

    import optuna

    from tricklab.experiments.storage import open_storage

    get_storage = optuna.storages.get_storage

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(optuna.storages, "get_storage", full)
    out = tmp_path / "new" / "abl"
    argv = ["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.1", "--seeds", "1"]
    assert main([*argv, "--out", str(out)]) == 2
    assert "space" in capsys.readouterr().err and not (tmp_path / "new").exists()

    def stopped_after_the_tables(*args, **kwargs):
        get_storage(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(optuna.storages, "get_storage", stopped_after_the_tables)
    url = f"sqlite:///{tmp_path / 'made' / 'study.db'}"
    with pytest.raises(KeyboardInterrupt):
        open_storage(url)
    assert not (tmp_path / "made").exists()


def test_a_study_whose_making_was_stopped_says_to_run_the_command_again():
    from tricklab.core.errors import TrickLabError
    from tricklab.experiments.records import study_kind

    with pytest.raises(TrickLabError, match="was stopped before it wrote its plan .run it again"):
        study_kind("s", {})
    with pytest.raises(TrickLabError, match=r"no 'kind' attr\); tricklab reads only"):
        study_kind("s", {"other": 1})


@pytest.mark.parametrize("name", ["TRICKLAB_CACHE", "TRICKLAB_DATA"])
def test_a_blank_folder_variable_is_unset_as_an_empty_one_is(name, monkeypatch, tmp_path):
    """TRICKLAB_CACHE=" " made a folder named " " in the current folder."""
    from tricklab.data.cache import default_cache_dir
    from tricklab.data.dataset import default_data_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    read = default_cache_dir if name == "TRICKLAB_CACHE" else default_data_dir
    monkeypatch.setenv(name, "")
    unset = read()
    monkeypatch.setenv(name, "  ")
    assert read() == unset and str(unset).startswith(str(tmp_path))


def test_figure_labels_and_legends_stay_inside_the_figure_whatever_the_names():
    """A 10,000-character value filled an axis with its letters and ran a legend off the
    figure; 200 configurations clipped the legend's first 40 entries."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from tricklab.report.style import MAX_LABEL, MAX_LEGEND, legend_below, wrap_label

    assert wrap_label("L" * 10_000).count("\n") == 2 and wrap_label("L" * 10_000).endswith("…")
    fig = plt.figure(layout="constrained")
    labels = ["L" * 10_000, *(f"tricks.label_smoothing=0.{i:03d}" for i in range(199))]
    legend_below(fig, [Line2D([], []) for _ in labels], labels)
    shown = [t.get_text() for t in fig.legends[0].get_texts()]
    plt.close(fig)
    assert len(shown) == MAX_LEGEND and shown[-1] == "... and 177 more (the tables name each)"
    assert max(map(len, shown)) <= MAX_LABEL and shown[0].endswith("…")


def test_numpy_integers_are_taken_by_load_dataset_and_the_profilers():
    """load_dataset(train_size=np.int64(64)) said "must be a positive whole number", as did
    profile_step's repeats and profile_loader's batch_size."""
    import tricklab
    from tricklab.profile.loader import LoaderGrid, profile_loader
    from tricklab.profile.step import profile_step

    loaded = tricklab.load_dataset("synthetic", train_size=np.int64(64), test_size=np.int64(32))
    assert len(loaded.train.labels) == 64
    recipe = tricklab.load_recipe(None, TINY)
    assert profile_step(recipe, repeats=np.int64(2))["repeats"] == 2
    result = profile_loader(
        recipe, LoaderGrid(["device"]), batch_size=np.int64(32), repeats=np.int64(1)
    )
    assert type(result["batch_size"]) is int and result["batch_size"] == 32


def test_an_ablation_whose_every_run_failed_exits_1_and_one_that_trained_0(
    tmp_path, monkeypatch, capsys
):
    """With loader workers past the open-files limit, or a proxy naming no URL, every run failed
    and `ablate` exited 0 having measured nothing."""
    import tricklab.training.api as api
    from tricklab.training.result import RunResult

    argv = ["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.05", "--seeds", "1", "-q"]
    train = api.train
    monkeypatch.setattr(api, "train", lambda recipe, **kw: RunResult(status="failed", error="x"))
    assert main([*argv, "--out", str(tmp_path / "a")]) == 1
    assert "failed 2" in capsys.readouterr().out
    monkeypatch.setattr(api, "train", train)
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0  # the rerun trains them


@pytest.mark.parametrize(
    "argv, message",
    [
        (["profile", "step", *TINY_SYNTHETIC, "--repeats", "1000000000"], "repeats must be an "
         "integer >= 2 (an interval needs two) and at most 1,000"),
        (["profile", "loader", "synthetic", "--batches", "100000000"], "batches must be an "
         "integer >= 1 and at most 100,000"),
        (["profile", "model", "airbench", "--repeats", "5000"], "repeats must be an integer >= 1 "
         "and at most 1,000"),
    ],
)  # fmt: skip
def test_a_profile_of_hours_by_a_typo_is_refused(argv, message, capsys):
    """--repeats 1000000000 or --batches 100000000 ran for hours."""
    assert main(argv) == 2
    assert message in capsys.readouterr().err


# ---------------------------------------------------------------- the fixes, tried again
def test_train_from_a_removed_working_folder_is_one_clear_error(tmp_path, monkeypatch):
    """With an absolute out_dir (or none), os.getcwd() in the run's record was a bare
    FileNotFoundError naming nothing."""
    import tricklab
    from tricklab.core.errors import TrickLabError

    recipe = tricklab.load_recipe(None, TINY)
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    for out in (None, str(tmp_path / "abs")):
        with pytest.raises(TrickLabError, match="the current folder no longer exists"):
            tricklab.train(recipe, out_dir=out)
    assert not (tmp_path / "abs").exists()


def test_an_out_dir_with_a_tilde_is_the_home_folders_as_data_dir_takes_it(tmp_path, monkeypatch):
    from tricklab.core.paths import folder_arg

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert folder_arg("~/x", "out_dir") == tmp_path / "x"


async def _async_generator(*args, **kwargs):
    yield 1


def _generator(*args, **kwargs):
    yield 1


@pytest.mark.parametrize("hook", [_async_generator, _generator], ids=["async-gen", "generator"])
def test_a_hook_whose_body_a_call_would_not_run_is_refused(hook, tmp_path):
    """An async generator as train_fn stored every run failed; as on_epoch, on_run_end or on_run
    (a generator too) it was taken and its body never ran."""
    import tricklab

    recipe = tricklab.load_recipe(None, TINY)
    with pytest.raises(TypeError, match="takes a plain function"):
        tricklab.train(recipe, on_epoch=hook)
    with pytest.raises(TypeError, match="ablate's train_fn takes a plain function"):
        _ablate(tmp_path / "a", recipe, train_fn=hook)
    assert not (tmp_path / "a").exists()


def test_underscores_that_would_make_emphasis_and_full_width_formula_signs_are_escaped():
    from tricklab.core.safeio import csv_cell
    from tricklab.report.table_writers import markdown_text

    text = markdown_text("*em* __b__ _x_ label_smoothing")
    assert text == "\\*em\\* \\_\\_b\\_\\_ \\_x\\_ label_smoothing"
    assert [csv_cell(v) for v in ("＝HYPERLINK(1)", " =x", "＠x")] == ["'＝HYPERLINK(1)", "' =x",
                                                                     "'＠x"]  # fmt: skip
