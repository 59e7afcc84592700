"""The harness, part 1: every reader of a file tricklab did not write, fed generated hostile
content (Hypothesis). The property, for any content: a correct value, or one TrickLabError whose
message is one line; never another exception (a traceback), never a write, never more than a
bounded time. See docs/hardening.md for how to add a reader."""

import functools
import json
import math
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import MAX_JSON_DEPTH, parse_json, read_json, shown
from tricklab.experiments.space import parse_space
from tricklab.recipe.schema import load_recipe
from tricklab.recipe.yamlio import read_yaml
from tricklab.report.collect import load_sources
from tricklab.report.conclusions import conclusions, summary
from tricklab.report.inputs import read_metrics
from tricklab.report.profiles import load_profile
from tricklab.report.tables import results_table

SECONDS_PER_READ = 5.0  # far above any of these reads on a loaded laptop
HOSTILE = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Text that breaks naive code: control characters, line breaks of every kind, look-alikes,
# right-to-left marks, the terminal's escape character.
nasty_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        ["", "\n", "a\nerror: forged", "\r", "\x1b[31mred", "\u2028", "\u202e", "сomplete", "\x00",
         "NaN", "Infinity", "-0", "1e999", " " * 300, "x" * 5000]
    ),
)  # fmt: skip
numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1e308, -1e308, 5e-324, 2**63, True, False]),
)
scalars = st.one_of(st.none(), numbers, nasty_text)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(nasty_text, inner, max_size=4)
    ),
    max_leaves=20,
)


def deep(depth: int, kind: str) -> str:
    """A value nested `depth` levels: lists, objects, or both."""
    if kind == "list":
        return "[" * depth + "]" * depth
    if kind == "object":
        return '{"a":' * depth + "1" + "}" * depth
    return '[{"a":' * ((depth + 1) // 2) + "1" + "}]" * ((depth + 1) // 2)


def as_text(value) -> str:
    return json.dumps(value, allow_nan=True)  # what a user's json.dump writes


# What a report reads from a run folder: a result.json like train()'s, fields made hostile.
RESULT = {
    "status": "complete",
    "val_acc": 0.5,
    "val_loss": 1.2,
    "train_seconds": 3.0,
    "params": 1000,
    "recipe": {"run": {"seed": 0}, "optim": {"lr": 0.1}},
    "hardware": {"device_type": "cpu", "cpu_model": "x", "cpu_cores": 2},
    "epochs": [{"epoch": 1, "val_acc": 0.5, "train_seconds": 3.0}],
}


def one_line_or_value(read, *args):
    """Call the reader: its value, or None after checking that it refused in one line, quickly."""
    start = time.perf_counter()
    try:
        return read(*args)
    except TrickLabError as exc:
        assert "\n" not in shown(str(exc)) and str(exc).strip(), repr(str(exc))
        return None
    finally:
        assert time.perf_counter() - start < SECONDS_PER_READ


def files_in(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*")}


# ---------------------------------------------------------------- the JSON door


@HOSTILE
@given(value=json_values)
@example(value=float("nan"))
@example(value={"a": [float("inf")]})
def test_parse_json_gives_back_every_finite_value_and_refuses_the_rest(value):
    text = as_text(value)
    if all_finite(value):
        assert parse_json(text) == json.loads(text)
    else:
        with pytest.raises(ValueError):
            parse_json(text)


def all_finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(all_finite(v) for v in value.values())
    return all(all_finite(v) for v in value) if isinstance(value, list) else True


@pytest.mark.parametrize("kind", ["list", "object", "mixed"])
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5_000, 200_000])
def test_json_nested_beyond_the_bound_is_refused_in_one_line(tmp_path, kind, depth):
    path = tmp_path / "x.json"
    path.write_text(deep(depth, kind))
    with pytest.raises(TrickLabError, match="nested deeper than"):
        read_json(path, 8 << 20, "test file")


@HOSTILE
@given(data=st.binary(max_size=200))
def test_any_bytes_read_as_json_give_a_value_or_one_line(tmp_path, data):
    path = tmp_path / "x.json"
    path.write_bytes(data)
    one_line_or_value(read_json, path, 1 << 20, "test file")


@HOSTILE
@given(cut=st.integers(min_value=0, max_value=len(as_text(RESULT))))
def test_a_result_json_cut_at_any_byte_is_read_whole_or_refused(tmp_path, cut):
    path = tmp_path / "x.json"
    path.write_text(as_text(RESULT)[:cut])
    value = one_line_or_value(read_json, path, 1 << 20, "test file")
    assert value is None or value == RESULT


def test_a_key_given_twice_is_refused(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"status": "complete", "status": "failed"}')
    with pytest.raises(TrickLabError, match="given twice"):
        read_json(path, 1 << 20, "test file")


def test_a_name_with_a_newline_is_shown_on_one_line():
    assert shown("a\nerror: forged\x1b[31m\u2028") == "a\\nerror: forged\\x1b[31m\\u2028"


# ---------------------------------------------------------------- run folders, as report reads them


@HOSTILE
@given(field=st.sampled_from(sorted(RESULT)), value=json_values)
def test_a_run_folder_with_any_field_made_hostile_reports_or_refuses_in_one_line(
    tmp_path_factory, field, value
):
    folder = tmp_path_factory.mktemp("run")
    (folder / "result.json").write_text(as_text({**RESULT, field: value}))
    before = files_in(folder)
    sources = one_line_or_value(load_sources, [folder])
    if sources is not None:  # what the report computes from them must hold too
        for source in sources:
            one_line_or_value(results_table, source.rows, "t", source.name_of)
        one_line_or_value(conclusions, sources)
        one_line_or_value(summary, sources)
    assert files_in(folder) == before  # a reader never writes


@HOSTILE
@given(field=st.sampled_from([*sorted(RESULT), "epochs_completed", "resolved"]), value=json_values)
def test_a_result_read_back_as_a_run_result_is_one_or_one_line(field, value):
    """RunResult.from_dict, as a data-parallel launcher reads the result.json a rank left:
    every field it keeps has its type, or one TrickLabError line."""
    from tricklab.training.result import RunResult

    result = one_line_or_value(RunResult.from_dict, {**RESULT, field: value})
    if result is not None:
        kept = getattr(result, field, None)
        assert not isinstance(kept, float) or math.isfinite(kept)
        assert result.status == "complete" or field == "status"


# A result.json's provenance (measure/provenance.py), as train() writes it.
PROVENANCE = {
    "command": "tricklab train", "started_at": "2026-11-26T10:00:00Z", "git_commit": None,
    "git_dirty": None, "versions": {"torch": "2.14.1"}, "cuda": None, "cudnn": None,
    "device": "cpu", "device_name": "x", "torch_threads": 2, "cpu_count": 2, "world_size": 1,
    "dist_backend": None, "load_average_start": [0.5, 0.4, 0.3], "load_average_end": [9, 9, 9],
}  # fmt: skip
NESTED = [("provenance", k) for k in PROVENANCE] + [
    ("hardware", k) for k in ("device_type", "device_name", "cpu_model", "cpu_cores", "cuda",
                              "torch_threads", "device_memory_bytes", "cudnn")
] + [("recipe", "run", "target_accuracy"), ("epochs", 0, "val_acc"),
     ("epochs", 0, "train_seconds")]  # fmt: skip


def with_field(record: dict, path: tuple, value) -> dict:
    """`record` (deep-copied) with the field at `path` (keys and indices) set to `value`."""
    changed = json.loads(json.dumps(record))
    holder = changed
    for key in path[:-1]:
        holder = holder.setdefault(key, {}) if isinstance(holder, dict) else holder[key]
    holder[path[-1]] = value
    return changed


@HOSTILE
@given(path=st.sampled_from(NESTED), value=json_values)
@example(path=("provenance", "load_average_end"), value="high")
@example(path=("provenance", "cpu_count"), value="2")
@example(path=("provenance", "load_average_start"), value={"0": 1})
def test_a_run_folder_with_any_nested_field_made_hostile_reports_or_refuses_in_one_line(
    tmp_path_factory, path, value
):
    """The fields the busy-machine rule, the machine's name and the target read, inside the
    provenance, hardware, recipe and epochs objects: the report's numbers, or one line."""
    folder = tmp_path_factory.mktemp("run")
    result = with_field({**RESULT, "provenance": PROVENANCE}, path, value)
    (folder / "result.json").write_text(as_text(result))
    before = files_in(folder)
    sources = one_line_or_value(load_sources, [folder])
    for source in sources or []:
        assert isinstance(source.busy.busy, bool)  # the load averages against the cores
        assert "[" not in source.machine  # no list as a core count
        one_line_or_value(results_table, source.rows, "t", source.name_of)
    if sources is not None:
        one_line_or_value(conclusions, sources)
    assert files_in(folder) == before


# What a hand-edited run file held that was read as fact (third hostile round): each is one line
# naming the file and the field, exit 2, nothing written.
OUT_OF_RANGE = [
    (("provenance", "load_average_end"), "high", "'provenance.load_average_end'"),
    (("provenance", "load_average_start"), 5, "'provenance.load_average_start'"),
    (("provenance", "load_average_end"), {"0": 1}, "'provenance.load_average_end'"),
    (("provenance", "load_average_end"), ["9", "9", "9"], "'provenance.load_average_end'"),
    (("provenance", "load_average_end"), [9, 9], "'provenance.load_average_end'"),
    (("provenance", "cpu_count"), "2", "'provenance.cpu_count'"),
    (("provenance", "cpu_count"), 0, "'provenance.cpu_count'"),
    (("recipe", "run", "target_accuracy"), "x", "'recipe.run.target_accuracy'"),
    (("recipe", "run", "target_accuracy"), 50, "'recipe.run.target_accuracy'"),
    (("recipe", "run", "target_accuracy"), True, "'recipe.run.target_accuracy'"),
    (("target_accuracy",), 0, "'target_accuracy'"),
    (("status",), "\x1b[2Jweird\nline", "'status'"),
    (("hardware", "cpu_cores"), [1, 2], "'hardware.cpu_cores'"),
    (("epochs", 0, "val_acc"), 1e17, "'val_acc'"),
    (("epochs", 0, "train_seconds"), -1, "'train_seconds'"),
    (("train_seconds",), 1e308, "'train_seconds'"),
]


@pytest.mark.parametrize(
    "where,path,value,field",
    [
        (where, *case)
        for where in ("result.json", "summary.json", "metrics.jsonl")
        for case in OUT_OF_RANGE
        if where != "metrics.jsonl" or case[0][0] == "epochs"
    ],
)
def test_a_field_of_the_wrong_type_or_out_of_range_is_one_line_naming_file_and_field(
    tmp_path, capsys, path, value, field, where
):
    folder = tmp_path / "run"
    folder.mkdir()
    run = with_field({**RESULT, "provenance": PROVENANCE}, path, value)
    if where == "summary.json":  # a speedrun's run, as its summary.json lists it
        if path[0] in ("recipe", "target_accuracy"):
            summary = with_field({"recipe": RESULT["recipe"], "runs": []}, path, value)
        else:
            summary = {"recipe_name": "x", "runs": [{**run, "seed": 0}]}
        (folder / "summary.json").write_text(as_text(summary))
    elif where == "metrics.jsonl":
        (folder / "result.json").write_text(
            as_text({k: v for k, v in RESULT.items() if k != "epochs"})
        )
        (folder / "metrics.jsonl").write_text(as_text(run["epochs"][0]) + "\n")
    else:
        (folder / "result.json").write_text(as_text(run))
    before = files_in(tmp_path)
    assert main(["report", str(folder), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error:"), err
    assert where in err and field in err and "\x1b" not in err
    assert files_in(tmp_path) == before


def test_a_report_into_a_link_to_a_missing_folder_is_one_line(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "result.json").write_text(as_text(RESULT))
    (tmp_path / "dangling").symlink_to(tmp_path / "missing" / "dir")
    assert main(["report", str(folder), "--out", str(tmp_path / "dangling")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "a link to a folder that does not exist" in err, err
    assert not (tmp_path / "missing").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "run"]


@HOSTILE
@given(rows=st.lists(json_values, max_size=4))
def test_any_metrics_jsonl_gives_epoch_rows_or_one_line(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("m") / "metrics.jsonl"
    path.write_text("\n".join(as_text(r) for r in rows))
    got = one_line_or_value(read_metrics, path)
    assert got is None or all(isinstance(r, dict) for r in got)


@HOSTILE
@given(value=json_values)
def test_any_saved_profile_gives_a_profile_or_one_line(tmp_path_factory, value):
    path = tmp_path_factory.mktemp("p") / "profile.json"
    document = value if not isinstance(value, dict) else {"kind": "model", **value}
    path.write_text(as_text(document))
    one_line_or_value(load_profile, path)


# ---------------------------------------------------------------- the YAML door


yaml_text = st.one_of(
    st.text(max_size=200),
    st.builds(
        lambda key, value: f"{key}: {value}\n",
        st.sampled_from(["optim.lr", "optim", "run", "model.widths", "x", "aug.flip"]),
        st.sampled_from(["[1, 2]", "{low: 1, high: 0}", "&a [*a]", ".nan", "-.inf", "1e999",
                         "!!python/object:os.system x", "off", "[" * 50, "{choices: []}", "''"]),
    ),
)  # fmt: skip


@HOSTILE
@given(text=yaml_text)
def test_any_yaml_text_gives_a_value_or_one_line(text):
    import yaml

    try:
        one_line_or_value(read_yaml, text)
    except yaml.YAMLError:
        pass  # the callers name the file and describe it (yamlio.describe_yaml_error)


@HOSTILE
@given(text=yaml_text)
def test_any_recipe_file_gives_a_recipe_or_one_line(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("r") / "recipe.yaml"
    path.write_text(text)
    one_line_or_value(load_recipe, str(path), [])


@HOSTILE
@given(
    override=st.builds(
        lambda k, v: f"{k}={v}",
        st.sampled_from(
            [
                "optim.lr",
                "run.epochs",
                "model.widths",
                "loader.batch_size",
                "aug.cutout",
                "x.y",
                "run",
            ]
        ),
        st.one_of(
            nasty_text, st.sampled_from(["nan", "inf", "1e999", "-1", "[", "[1,2,3]", "10**9"])
        ),
    )
)
def test_any_override_gives_a_recipe_or_one_line(override):
    one_line_or_value(load_recipe, None, [override])


@HOSTILE
@given(text=st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc"]), max_size=40))
def test_any_text_field_written_to_recipe_yaml_reads_back_as_it_ran(tmp_path_factory, text):
    """The writer (yamlio.dump_yaml) quotes what YAML 1.1 or 1.2 would read as no string."""
    recipe = load_recipe(None).override([])
    recipe.data.dir = text
    path = tmp_path_factory.mktemp("r") / "recipe.yaml"
    recipe.to_yaml(path)
    assert load_recipe(str(path)).data.dir == text


@HOSTILE
@given(
    space=st.dictionaries(
        st.sampled_from(["optim.lr", "run.epochs", "aug.flip", "model.widths", "run.seed", "x"]),
        json_values,
        max_size=3,
    )
)
def test_any_sweep_space_gives_a_space_or_one_line(space):
    one_line_or_value(parse_space, space)


# ---------------------------------------------------------------- through the CLI


@HOSTILE
@given(name=st.sampled_from(["bad\nerror: forged", "\x1b[2Jx", "a\u2028b", "ok"]))
def test_a_corrupt_result_json_under_any_name_is_one_error_line(tmp_path_factory, capsys, name):
    assume(os.sep not in name)
    folder = tmp_path_factory.mktemp("runs") / name
    folder.mkdir()
    (folder / "result.json").write_text("[" * 200_000)
    assert main(["report", str(folder), "--out", str(folder.parent / "r")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (folder.parent / "r").exists()


def _archive_bytes(tmp: Path, split: str, gz: bool) -> bytes:
    """A split of two classes, two 8x8 PNGs each, as a tar (or tar.gz) archive's bytes."""
    import gzip
    import io
    import tarfile

    from PIL import Image

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for label, name in enumerate(("ant", "bee")):
            for index in range(2):
                png = io.BytesIO()
                Image.new("RGB", (8, 8), (40 * label + index, 9, 9)).save(png, format="PNG")
                info = tarfile.TarInfo(f"{split}/{name}/{index}.png")
                info.size = len(png.getvalue())
                tar.addfile(info, io.BytesIO(png.getvalue()))
    raw = buffer.getvalue()
    return gzip.compress(raw, mtime=0) if gz else raw


@HOSTILE
@given(gz=st.booleans(), cut=st.floats(min_value=0, max_value=1))
@example(gz=False, cut=1.0)
@example(gz=True, cut=1.0)
def test_an_image_archive_cut_at_any_byte_loads_whole_or_is_one_line(tmp_path_factory, gz, cut):
    from tricklab.data.sources import load_dataset

    root = tmp_path_factory.mktemp("archive")
    suffix = "tar.gz" if gz else "tar"
    (root / "data").mkdir()
    (root / "data" / f"test.{suffix}").write_bytes(_archive_bytes(root, "test", gz))
    whole = _archive_bytes(root, "train", gz)
    kept = round(cut * len(whole))
    (root / "data" / f"train.{suffix}").write_bytes(whole[:kept])
    dataset = one_line_or_value(
        functools.partial(load_dataset, cache_dir=root / "cache"), "imagefolder", root / "data"
    )
    if dataset is None:
        assert kept < len(whole)
        assert not list((root / "cache").rglob("*.*")) if (root / "cache").exists() else True
    else:
        # tar pads its end with zero blocks: a cut inside that padding still holds every image,
        # and a cut anywhere else is refused, never read as fewer images
        assert len(dataset.train.labels) == 4 and dataset.classes == ["ant", "bee"]


@HOSTILE
@given(data=st.binary(max_size=200))
def test_any_bytes_as_a_runs_metrics_give_its_whole_rows_and_never_raise(tmp_path, data):
    """runfiles.logged_epochs (a killed run's record, the takeover note) reads what it can."""
    from tricklab.training.runfiles import logged_epochs

    (tmp_path / "metrics.jsonl").write_bytes(data)
    rows = logged_epochs(tmp_path)
    assert all(isinstance(row, dict) and isinstance(row.get("epoch"), int) for row in rows)


def test_a_runs_metrics_that_is_a_fifo_or_a_folder_is_no_rows_not_a_hang(tmp_path):
    import os

    from tricklab.training.runfiles import logged_epochs

    os.mkfifo(tmp_path / "metrics.jsonl")
    assert logged_epochs(tmp_path) == []
    (tmp_path / "metrics.jsonl").unlink()
    (tmp_path / "metrics.jsonl").mkdir()
    assert logged_epochs(tmp_path) == []
