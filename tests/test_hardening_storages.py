"""Storages as readers find them: a damaged journal, a database holding part of Optuna's schema,
names made to forge lines. `results` (a reader) prints what it can show or says in one line why
not (exit 2), and never writes into the storage it reads (docs/hardening.md)."""

import json
import sqlite3
from pathlib import Path

import optuna
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tricklab.cli.main import main
from tricklab.experiments.storage import check_storage, open_storage

EVIL = "evil\nerror: forged\x1b[31m"
EVIL_SHOWN = "evil\\nerror: forged\\x1b[31m"


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def write_journal(path: Path, *records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def files_in(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def study_db(path: Path, name: str = "s") -> Path:
    """A whole SQLite study database, as a writer leaves it."""
    optuna.create_study(storage=open_storage(f"sqlite:///{path}"), study_name=name)
    return path


# ---------------------------------------------------------------- F2: a damaged journal


def test_a_journal_whose_study_name_is_no_text_is_one_line(tmp_path, capsys):
    journal = write_journal(
        tmp_path / "b.journal",
        {"op_code": 0, "worker_id": "x", "study_name": 5, "directions": [1]},
    )
    assert main(["results", "--storage", f"journal:{journal}"]) == 2
    assert "is not a storage tricklab can read" in one_error_line(capsys)


def test_a_journal_whose_first_line_nests_beyond_any_record_is_one_line(tmp_path, capsys):
    journal = tmp_path / "d.journal"
    journal.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    assert main(["results", "--storage", f"journal:{journal}"]) == 2
    assert "not an Optuna journal file" in one_error_line(capsys)


def test_a_journal_whose_trial_attr_nests_too_deep_to_copy_is_one_line(tmp_path, capsys):
    journal = write_journal(
        tmp_path / "deep.journal",
        {"op_code": 0, "worker_id": "x", "study_name": "s", "directions": [2]},
        {"op_code": 4, "worker_id": "x", "study_id": 0, "datetime_start": None,
         "user_attrs": {"a": json.loads("[" * 900 + "]" * 900)}},
    )  # fmt: skip
    assert main(["results", "--storage", f"journal:{journal}"]) == 2
    assert "nested deeper than" in one_error_line(capsys)


def test_a_database_whose_study_name_is_no_text_is_one_line(tmp_path, capsys):
    db = study_db(tmp_path / "study.db")
    with sqlite3.connect(db) as connection:  # a blob: SQLite keeps it as bytes, not text
        connection.execute("UPDATE studies SET study_name = X'6576696c'")
    assert main(["results", "--storage", str(db)]) == 2
    assert "a study's name is bytes" in one_error_line(capsys)


# ---------------------------------------------------------------- F3: part of Optuna's schema


def drop(table: str):
    return lambda db: db.execute(f"DROP TABLE {table}")


@pytest.mark.parametrize(
    "damage",
    [drop("alembic_version"), drop("version_info"), drop("trial_heartbeats"),
     lambda db: db.execute("DELETE FROM version_info")],
    ids=["no-alembic_version", "no-version_info", "no-trial_heartbeats", "no-version-row"],
)  # fmt: skip
def test_results_and_report_leave_a_study_db_missing_part_of_optunas_schema_as_it_was(
    tmp_path, capsys, damage
):
    db = study_db(tmp_path / "study.db")
    with sqlite3.connect(db) as connection:
        damage(connection)
    before = db.read_bytes()
    for command in (["results"], ["results", "s"], ["report", "s", "--out", str(tmp_path / "r")]):
        assert main([*command, "--storage", f"sqlite:///{db}"]) == 2
        assert "only part of an Optuna database" in one_error_line(capsys)
    assert db.read_bytes() == before
    assert not (tmp_path / "r").exists()


def test_results_leaves_a_database_holding_only_a_studies_table_as_it_was(tmp_path, capsys):
    db = tmp_path / "partial.db"
    with sqlite3.connect(db) as connection:
        connection.execute(
            "CREATE TABLE studies (study_id INTEGER NOT NULL, study_name VARCHAR(512) NOT NULL, "
            "PRIMARY KEY (study_id))"
        )
    before = db.read_bytes()
    assert main(["results", "--storage", f"sqlite:///{db}"]) == 2
    assert "no alembic_version" in one_error_line(capsys)
    assert db.read_bytes() == before


def test_a_writer_makes_a_whole_schema_that_readers_open_and_completes_a_partial_one(tmp_path):
    db = study_db(tmp_path / "study.db")
    open_storage(f"sqlite:///{db}", must_exist=True)
    with sqlite3.connect(db) as connection:
        connection.execute("DROP TABLE alembic_version")
    before = db.read_bytes()
    check_storage(f"sqlite:///{db}", ("s", {}, ()))  # a writer's --dry-run: reads nothing here
    assert db.read_bytes() == before
    optuna.load_study(storage=open_storage(f"sqlite:///{db}"), study_name="s")  # the writer
    open_storage(f"sqlite:///{db}", must_exist=True)


# ---------------------------------------------------------------- F5: names that forge lines


@pytest.fixture
def evil_journal(tmp_path) -> Path:
    """A journal holding study EVIL with one complete run of configuration EVIL in folder EVIL."""
    journal = tmp_path / "n.journal"
    study = optuna.create_study(storage=open_storage(f"journal:{journal}"), study_name=EVIL)
    run = {"seed": 0, "status": "complete", "accuracy": 0.5, "train_seconds": 1.0}
    attrs = {"config_id": EVIL, "runs": [{**run, "run_dir": f"/{EVIL}"}]}
    study.add_trial(optuna.trial.create_trial(value=0.5, user_attrs=attrs))
    optuna.create_study(storage=open_storage(f"journal:{journal}"), study_name=EVIL + "2")
    return journal


@pytest.mark.parametrize("output", ["table", "md", "latex", "csv"])
def test_results_runs_shows_names_from_the_storage_with_their_control_characters_escaped(
    evil_journal, capsys, output
):
    args = ["results", EVIL, "--runs", "--storage", f"journal:{evil_journal}", "--format", output]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\nerror: forged" not in out
    shown = {"latex": "textbackslash{}nerror: forged", "md": EVIL_SHOWN.replace("\\", "\\\\")}
    assert shown.get(output, EVIL_SHOWN) in out  # Markdown writes a backslash escaped


def test_results_runs_says_a_study_without_runs_has_none_on_one_line(evil_journal, capsys):
    assert main(["results", EVIL + "2", "--runs", "--storage", f"journal:{evil_journal}"]) == 0
    assert capsys.readouterr().out == f"study {EVIL_SHOWN}2 has no runs yet\n"


def test_results_runs_as_json_gives_the_names_exactly(evil_journal, capsys):
    assert main(["results", EVIL, "--runs", "--storage", f"journal:{evil_journal}", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["study"] == EVIL
    assert [run["config_id"] for run in shown["runs"]] == [EVIL]


# ---------------------------------------------------------------- any journal


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "s", EVIL, "2024-01-01T00:00:00", "x" * 300]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=10,
)  # fmt: skip
# Nested past any bound (64) and past what Python can copy (about 500).
deep_values = st.sampled_from([70, 900]).map(lambda depth: json.loads("[" * depth + "]" * depth))
numbers = st.floats(allow_nan=False, allow_infinity=False)
attr_value = st.one_of(json_values, json_values, json_values, deep_values)
attr = st.dictionaries(
    st.sampled_from(["kind", "config_id", "runs"]), attr_value, min_size=1, max_size=1
)
when = st.sampled_from([None, "2024-01-01T00:00:00"])
# What Optuna writes under each key (so records get far enough to be read), or anything at all.
FIELDS = {
    "study_name": st.sampled_from(["s", EVIL]), "directions": st.just([2]), "study_id": st.just(0),
    "trial_id": st.integers(0, 2), "user_attr": attr, "system_attr": attr, "user_attrs": attr,
    "system_attrs": attr, "datetime_start": when, "datetime_complete": when,
    "state": st.integers(0, 4), "value": numbers, "values": st.lists(numbers, max_size=2),
    "intermediate_values": st.dictionaries(st.sampled_from(["0", "1"]), numbers, max_size=2),
    "step": st.integers(0, 3), "intermediate_value": numbers, "params": json_values,
    "distributions": json_values, "param_name": st.just("x"), "param_value_internal": numbers,
    "distribution": json_values,
}  # fmt: skip


def mostly(likely):
    """What Optuna writes, now and then anything at all."""
    return st.one_of(likely, likely, likely, likely, likely, json_values)


records = st.fixed_dictionaries(
    {"op_code": st.integers(0, 10), "worker_id": st.sampled_from(["w", "x"])},
    optional={key: mostly(likely) for key, likely in FIELDS.items()},
)
create_study = st.fixed_dictionaries(
    {"op_code": st.just(0), "worker_id": st.just("w"),
     "study_name": mostly(st.sampled_from(["s", "t", EVIL])), "directions": mostly(st.just([2]))}
)  # fmt: skip


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lines=st.lists(st.one_of(create_study, records), min_size=1, max_size=10))
@example(lines=[{"op_code": 0, "worker_id": "x", "study_name": 5, "directions": [1]}])
def test_any_journal_lists_its_studies_or_says_why_not_in_one_line(tmp_path, capsys, lines):
    journal = tmp_path / "any.journal"
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines))
    before = files_in(tmp_path)
    capsys.readouterr()
    code = main(["results", "--storage", f"journal:{journal}"])
    assert code in (0, 2)
    if code == 2:
        one_error_line(capsys)
    assert files_in(tmp_path) == before  # a reader writes nothing


# ---------------------------------------------------------------- trials a program other than tricklab wrote

GOOD_RUN = {"seed": 0, "status": "complete", "accuracy": 0.5, "val_acc": 0.5, "train_seconds": 2.0}
GOOD_ATTRS = {"config_id": "baseline", "unit": "baseline/seed-0", "seed": 0, "overrides": [],
              "status": "complete", "runs": [GOOD_RUN]}  # fmt: skip


def study_with_trial(path: Path, attrs: dict) -> str:
    url = f"sqlite:///{path}" if path.suffix == ".db" else f"journal:{path}"
    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name="s")
    study.set_user_attr("kind", "ablation")
    study.set_user_attr("seeds", 1)
    trial = study.ask()
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    study.tell(trial, 0.5)
    return url


def test_a_trial_whose_attrs_tricklab_reads_have_the_wrong_type_is_one_line(tmp_path, capsys):
    url = study_with_trial(tmp_path / "a.db", {**GOOD_ATTRS, "unit": 5})
    assert main(["results", "s", "--storage", url]) == 2
    assert "trial 0 holds unit of type int, not str" in one_error_line(capsys)
    run = {**GOOD_RUN, "train_seconds": "fast"}
    url = study_with_trial(tmp_path / "b.db", {**GOOD_ATTRS, "runs": [run]})
    assert main(["results", "s", "--storage", url]) == 2
    assert "runs: train_seconds of type str" in one_error_line(capsys)
    url = study_with_trial(tmp_path / "c.db", GOOD_ATTRS)
    assert main(["results", "s", "--storage", url]) == 0


hostile_values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    key=st.sampled_from([*GOOD_ATTRS, "run-0"]),
    run_key=st.sampled_from(list(GOOD_RUN)),
    value=hostile_values,
    in_run=st.booleans(),
)
@example(key="config_id", run_key="train_seconds", value=None, in_run=True)
@example(key="config_id", run_key="accuracy", value=1e300, in_run=True)  # numpy's overflow warning
@example(key="config_id", run_key="train_seconds", value=float("inf"), in_run=True)
def test_any_wrong_value_in_a_trials_attrs_gives_results_or_one_line(
    tmp_path_factory, capsys, key, run_key, value, in_run
):
    attrs = dict(GOOD_ATTRS)
    if in_run:
        attrs["runs"] = [{**GOOD_RUN, run_key: value}]
    else:
        attrs[key] = value
    url = study_with_trial(tmp_path_factory.mktemp("t") / "s.journal", attrs)
    capsys.readouterr()
    code = main(["results", "s", "--storage", url])
    if code == 2:
        one_error_line(capsys)
    else:  # nothing on stderr (numpy's overflow warnings), no NaN or Infinity in the JSON
        assert code == 0 and capsys.readouterr().err == ""
        assert main(["results", "s", "--storage", url, "--json"]) == 0
        out, err = capsys.readouterr()
        assert err == "" and "NaN" not in out and "Infinity" not in out, out


# What a study edited by hand held that was read as fact (third hostile round): each is one line
# naming the study and the attr or field, exit 2, in `results` (table, --json, --runs) and
# `report`, and nothing written.
BAD_STUDY_ATTRS = [
    ("configs", [1, None, {"a": 1}]),
    ("configs", [1, 2]),
    ("seeds", 10**15),
    ("seeds", 0),
    ("seeds", "many"),
    ("seeds", [1, 2]),
    ("kind", 5),
    ("provenance", "x"),
    ("provenance", {"cpu_count": "2", "load_average_end": [9, 9, 9]}),
    ("provenance", {"cpu_count": 2, "load_average_end": "high"}),
]
BAD_RUN_VALUES = [
    ("accuracy", 1e300, "'accuracy'"),
    ("accuracy", -7.5, "'accuracy'"),
    ("val_acc", float("inf"), "'val_acc'"),
    ("train_seconds", 1e308, "'train_seconds'"),
    ("train_seconds", -1, "'train_seconds'"),
    ("target_accuracy", 50, "'target_accuracy'"),
    ("status", "\x1b[2Jweird\nline", "'status'"),
    ("provenance", {"cpu_count": "2", "load_average_end": [9, 9, 9]}, "'provenance.cpu_count'"),
    ("provenance", {"cpu_count": 2, "load_average_start": 5}, "'provenance.load_average_start'"),
    ("hardware", {"device_type": "cpu", "cpu_cores": [1, 2]}, "'hardware.cpu_cores'"),
    ("epochs", [{"epoch": 1, "val_acc": 7, "train_seconds": 1.0}], "'val_acc'"),
]


def check_refused_in_one_line(url: str, folder: Path, says: str, capsys) -> None:
    before = files_in(folder)
    for args in ([], ["--json"], ["--runs"]):
        assert main(["results", "s", "--storage", url, *args]) == 2
        line = one_error_line(capsys)
        assert "study s" in line and says in line and "\x1b" not in line
    assert main(["report", "s", "--storage", url, "--out", str(folder / "rep")]) == 2
    assert says in one_error_line(capsys)
    assert files_in(folder) == before


@pytest.mark.parametrize("key,value", BAD_STUDY_ATTRS)
def test_a_study_attr_of_the_wrong_type_or_out_of_range_is_one_line(tmp_path, capsys, key, value):
    url = study_with_trial(tmp_path / "s.db", GOOD_ATTRS)
    optuna.load_study(study_name="s", storage=url).set_user_attr(key, value)
    says = f"'{key}" if key != "provenance" or isinstance(value, str) else "'provenance."
    check_refused_in_one_line(url, tmp_path, says, capsys)


@pytest.mark.parametrize("key,value,field", BAD_RUN_VALUES)
def test_a_stored_run_value_of_the_wrong_type_or_out_of_range_is_one_line(
    tmp_path, capsys, key, value, field
):
    url = study_with_trial(
        tmp_path / "s.journal", {**GOOD_ATTRS, "runs": [{**GOOD_RUN, key: value}]}
    )
    check_refused_in_one_line(url, tmp_path, "trial 0 holds a run in runs", capsys)
    main(["results", "s", "--storage", url])
    assert field in one_error_line(capsys)


def test_results_csv_never_replaces_the_database_it_reads_a_device_or_a_link(tmp_path, capsys):
    import os

    url = study_with_trial(tmp_path / "s.db", GOOD_ATTRS)
    before = (tmp_path / "s.db").read_bytes()
    os.symlink(tmp_path / "elsewhere.csv", tmp_path / "link.csv")
    for target, says in [
        (tmp_path / "s.db", "holds something other than text"),
        (Path("/dev/null"), "is not a plain file"),
        (tmp_path / "link.csv", "is not a plain file"),
    ]:
        assert main(["results", "s", "--storage", url, "--csv", str(target)]) == 2
        assert says in one_error_line(capsys)
    assert (tmp_path / "s.db").read_bytes() == before and Path("/dev/null").is_char_device()
    assert not (tmp_path / "elsewhere.csv").exists()
    out = tmp_path / "rows.csv"
    for _ in range(2):  # a CSV written before is replaced
        assert main(["results", "s", "--storage", url, "--csv", str(out)]) == 0
        assert out.read_text().startswith("config_id,")


def test_results_csv_into_a_missing_folder_is_one_line_and_makes_no_folder(tmp_path, capsys):
    url = study_with_trial(tmp_path / "s.db", GOOD_ATTRS)
    (tmp_path / "file").write_text("mine")
    for target, says in [
        (tmp_path / "missing" / "dir" / "x.csv", "does not exist"),
        (tmp_path / "file" / "x.csv", "is not a folder"),
    ]:
        assert main(["results", "s", "--storage", url, "--csv", str(target)]) == 2
        assert says in one_error_line(capsys)
    assert not (tmp_path / "missing").exists() and (tmp_path / "file").read_text() == "mine"


def test_json_output_writes_a_number_that_is_not_finite_as_null():
    from tricklab.cli.report import json_line

    data = {"a": [1.5, float("inf"), {"b": float("nan")}], "c": (float("-inf"),), "d": "x"}
    assert json.loads(json_line(data)) == {"a": [1.5, None, {"b": None}], "c": [None], "d": "x"}


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=st.binary(max_size=5000))
def test_any_file_is_left_alone_or_replaceable_by_a_csv_never_an_exception(tmp_path, content):
    """check_replaceable reads a file's first bytes: any bytes give None or one TrickLabError."""
    from tricklab.core.errors import TrickLabError
    from tricklab.core.outfiles import check_replaceable

    path = tmp_path / "rows.csv"
    path.write_bytes(content)
    try:
        check_replaceable(path, "--csv")
    except TrickLabError as exc:
        assert "\n" not in str(exc)
    assert path.read_bytes() == content


# ---------------------------------------------------------------- rows Optuna cannot parse
# (fourth hostile round: one damaged row of a study.db was a traceback, exit 1, in `results`,
# its listing and `report`, and in a writer resuming the study)


def study_with_rows(path: Path) -> str:
    """`study_with_trial`'s study with a second trial as a sweep leaves it: a categorical
    parameter, an intermediate value and a system attr (rows of every table Optuna parses)."""
    url = study_with_trial(path, GOOD_ATTRS)
    study = optuna.load_study(study_name="s", storage=url)
    trial = study.ask()
    trial.suggest_categorical("optim.lr", [0.05, 0.1])
    trial.report(0.4, 1)
    trial.storage.set_trial_system_attr(trial._trial_id, "fixed_params", {"optim.lr": 0.05})
    attrs = {**GOOD_ATTRS, "config_id": "optim.lr=0.05", "unit": "optim.lr=0.05/seed-0"}
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    study.tell(trial, 0.5)
    return url


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


DAMAGED_ROWS = {
    "trial-state": ("UPDATE trials SET state = 'BOGUS' WHERE number = 0", "'BOGUS'"),
    "trial-date": ("UPDATE trials SET datetime_start = 'not a date'", "not a date"),
    "trial-attr-json": ("UPDATE trial_user_attributes SET value_json = '{garbage' "
                        "WHERE key = 'config_id'", "JSONDecodeError"),
    "system-attr-json": ("UPDATE trial_system_attributes SET value_json = '{garbage'",
                         "JSONDecodeError"),
    "value-type": ("UPDATE trial_values SET value_type = 'BOGUS'", "'BOGUS'"),
    "value-type-contradicts-value": ("UPDATE trial_values SET value_type = 'INF_POS'",
                                     "AssertionError"),
    "intermediate-type": ("UPDATE trial_intermediate_values SET intermediate_value_type = "
                          "'BOGUS'", "'BOGUS'"),
    "distribution-json": ("UPDATE trial_params SET distribution_json = '{garbage'",
                          "JSONDecodeError"),
    "distribution-out-of-range": (
        "UPDATE trial_params SET distribution_json = '{\"name\": \"IntDistribution\", "
        "\"attributes\": {\"low\": 5, \"high\": 1, \"step\": 1, \"log\": false}}'", "low <= high"),
    "distribution-no-low": ("UPDATE trial_params SET distribution_json = '{\"type\": \"int\"}'",
                            "KeyError"),
    "distribution-a-list": ("UPDATE trial_params SET distribution_json = '[1]'", "TypeError"),
    "choice-past-the-end": ("UPDATE trial_params SET param_value = 7", "IndexError"),
    "study-attr-json": ("UPDATE study_user_attributes SET value_json = '{garbage' "
                        "WHERE key = 'kind'", "JSONDecodeError"),
    "study-direction": ("UPDATE study_directions SET direction = 'BOGUS'", "'BOGUS'"),
    "attr-too-deep-to-copy": (f"UPDATE trial_user_attributes SET value_json = '{deep(900)}' "
                              "WHERE key = 'unit'", "nested deeper than 64"),
    "attr-too-deep-to-parse": (f"UPDATE trial_user_attributes SET value_json = '{deep(99_999)}' "
                               "WHERE key = 'unit'", "RecursionError"),
}  # fmt: skip


@pytest.mark.parametrize("sql,says", DAMAGED_ROWS.values(), ids=list(DAMAGED_ROWS))
def test_a_row_optuna_cannot_parse_is_one_line_in_every_reader_and_nothing_is_written(
    tmp_path, capsys, sql, says
):
    url = study_with_rows(tmp_path / "study.db")
    assert main(["results", "s", "--storage", url, "--runs"]) == 0  # whole, it reads
    with sqlite3.connect(tmp_path / "study.db") as connection:
        assert connection.execute(sql).rowcount >= 1
    capsys.readouterr()
    before = files_in(tmp_path)
    for args in (["results"], ["results", "s"], ["results", "s", "--runs"], ["results", "s",
                 "--json"], ["report", "s", "--out", str(tmp_path / "rep")]):  # fmt: skip
        assert main([*args, "--storage", url]) == 2, args
        line = one_error_line(capsys)
        assert f"storage {url} holds a damaged row" in line and says in line, line
    for args in (["results", "--out", str(tmp_path)], ["results", "s", "--out", str(tmp_path)],
                 ["report", str(tmp_path), "--out", str(tmp_path / "rep")]):  # fmt: skip
        assert main(args) == 2, args  # the default study.db of an --out folder, and report DIR
        assert "holds a damaged row" in one_error_line(capsys)
    assert files_in(tmp_path) == before


def test_optunas_own_answers_and_a_wrong_call_are_not_taken_for_a_damaged_row(tmp_path):
    from tricklab.experiments.contents import RowCheckedStorage

    storage = open_storage(study_with_rows(tmp_path / "study.db"))
    with pytest.raises(KeyError):  # no such study: load_study lists those there are
        optuna.load_study(study_name="nope", storage=storage)
    with pytest.raises(KeyError):
        storage.get_trial(999)
    backend = storage._backend
    assert isinstance(backend, RowCheckedStorage)
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        backend.get_trial()


@pytest.mark.parametrize("key,in_run", [("run_dir", False), ("run_dir", True)])
def test_a_run_folder_that_is_no_text_is_one_line(tmp_path, capsys, key, in_run):
    # was: `results --runs` showed {'a': 1} as the run folder and --json gave the object
    folder = {key: {"a": 1}}
    attrs = {**GOOD_ATTRS, "runs": [{**GOOD_RUN, **folder}]} if in_run else {**GOOD_ATTRS, **folder}
    url = study_with_trial(tmp_path / "s.db", attrs)
    says = "runs: run_dir of type dict, not str or null" if in_run else "run_dir of type dict"
    check_refused_in_one_line(url, tmp_path, says, capsys)
    runs = [{**GOOD_RUN, "run_dir": None}]  # as a reused run stores it
    url = study_with_trial(tmp_path / "t.db", {**GOOD_ATTRS, "run_dir": "/x", "runs": runs})
    assert main(["results", "s", "--storage", url, "--runs"]) == 0


TINY_ABLATION = ["ablate", "--baseline", "data.name=synthetic", "data.train_size=64",
                 "data.test_size=32", "data.image_size=16", "model.name=airbench",
                 "model.widths=[4,8,8]", "run.epochs=1", "loader.batch_size=32",
                 "run.device=cpu", "--vary", "optim.lr=0.05", "--seeds", "1", "--study", "abl",
                 "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_ablation(tmp_path_factory) -> Path:
    """The folder of a finished ablation: 2 configurations, 1 seed each."""
    folder = tmp_path_factory.mktemp("ablation") / "abl"
    assert main([*TINY_ABLATION, "--out", str(folder)]) == 0
    return folder


@pytest.mark.parametrize("damage", ["trial-state", "trial-attr-json"])
def test_a_writer_resuming_a_study_with_a_damaged_row_says_so_in_one_line(
    tiny_ablation, tmp_path, capsys, damage
):
    import shutil

    folder = tmp_path / "abl"
    shutil.copytree(tiny_ablation, folder)
    with sqlite3.connect(folder / "study.db") as connection:
        connection.execute(DAMAGED_ROWS[damage][0])
    before = (folder / "study.db").read_bytes()
    capsys.readouterr()
    assert main([*TINY_ABLATION, "--out", str(folder)]) == 2  # resuming: reads every trial
    assert "holds a damaged row" in one_error_line(capsys)
    assert main(["results", "abl", "--out", str(folder)]) == 2
    assert "holds a damaged row" in one_error_line(capsys)
    assert (folder / "study.db").read_bytes() == before


def test_a_writer_resuming_a_study_whose_attr_has_the_wrong_type_says_so_in_one_line(
    tiny_ablation, tmp_path, capsys
):
    """Fourth hostile round: readers refused a trial's `unit` stored as a list, a resuming
    worker ended in `TypeError: unhashable type: 'list'`."""
    import shutil

    folder = tmp_path / "abl"
    shutil.copytree(tiny_ablation, folder)
    with sqlite3.connect(folder / "study.db") as connection:
        connection.execute("update trial_user_attributes set value_json='[1]' where key='unit'")
    before = (folder / "study.db").read_bytes()
    capsys.readouterr()
    assert main([*TINY_ABLATION, "--out", str(folder)]) == 2
    assert "trial 0 holds unit of type list, not str" in one_error_line(capsys)
    assert (folder / "study.db").read_bytes() == before


def test_another_programs_study_is_refused_by_name_and_left_out_of_a_folders_report(
    tmp_path, capsys, monkeypatch
):
    """Eleventh hostile round: a study another program made (3 complete trials, no `kind`) was
    shown as "study foreign has no runs yet" and called a sweep."""
    from report_fixtures import make_study

    monkeypatch.chdir(tmp_path)
    folder = make_study(tmp_path, name="ours", seeds=1)
    url = f"sqlite:///{folder / 'study.db'}"
    foreign = optuna.create_study(storage=url, study_name="foreign", direction="maximize")
    for value in (0.1, 0.2, 0.3):
        foreign.tell(foreign.ask(), value)
    before = files_in(folder)
    for extra in ([], ["--json"]):
        assert main(["results", "foreign", "--storage", url, *extra]) == 2
        assert "was not made by tricklab ablate or sweep" in one_error_line(capsys)
    assert main(["report", "foreign", "--storage", url, "--out", str(tmp_path / "r1")]) == 2
    assert "was not made by tricklab" in one_error_line(capsys)
    assert main(["report", str(folder), "--out", str(tmp_path / "r2"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "ours" in report["summary"] and "foreign" not in report["summary"]
    assert files_in(folder) == before
