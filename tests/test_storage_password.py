"""A storage URL's password never shows: tricklab prints, stores and reports
`postgresql+psycopg://user:***@host/db`, as SQLAlchemy hides it, and connects with the real one.
The tests that need a PostgreSQL server (tests/postgres_server.py, trust authentication: any
password connects) skip without one."""

import json
import sys

import pytest
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main
from tricklab.core.urls import shown_command, shown_url, without_password
from tricklab.measure.provenance import command_line

PASSWORD = "Sekr3t-hunter2"
TINY = [*TINY_SYNTHETIC, "run.epochs=1"]
UNREACHABLE = f"postgresql+psycopg://u:{PASSWORD}@127.0.0.1:1/db"
UNREACHABLE_SHOWN = "postgresql+psycopg://u:***@127.0.0.1:1/db"


@pytest.mark.parametrize(
    "url, shown",
    [
        (f"postgresql+psycopg://user:{PASSWORD}@host/db", "postgresql+psycopg://user:***@host/db"),
        ("postgresql+psycopg://user:p%40ss%2Fw@db-host:5432/db",
         "postgresql+psycopg://user:***@db-host:5432/db"),
        ("postgresql://user:p@ss@host/db", "postgresql://user:***@host/db"),  # unquoted '@'
        ("postgresql://user:pw@host:notaport/db", "postgresql://user:***@host:notaport/db"),
        ("postgresql+psycopg://host/db?user=u&password=pw&sslmode=require",
         "postgresql+psycopg://host/db?password=***&sslmode=require&user=u"),  # SQLAlchemy's order
        ("postgresql+psycopg://tricklab@db-host/tricklab", None),  # no password: as given
        ("sqlite:////tmp/a@b/study.db", None),
        ("journal:runs/ls-flip.journal", None),
        ("runs/ls-flip.journal", None),
        ("not a URL: user:pw@", None),
        ("://", None),
        ("", None),
    ],
)  # fmt: skip
def test_shown_url_hides_the_password_and_leaves_everything_else_as_given(url, shown):
    assert shown_url(url) == (url if shown is None else shown)


def test_the_recorded_command_line_hides_a_storage_urls_password(monkeypatch):
    argv = ["tricklab", "ablate", "--storage", UNREACHABLE, f"--storage={UNREACHABLE}"]
    assert PASSWORD not in shown_command(argv)
    assert shown_command(argv).count(UNREACHABLE_SHOWN) == 2
    monkeypatch.setattr(sys, "argv", argv)
    assert command_line() == shown_command(argv)


def test_an_error_message_quoting_the_url_or_its_password_hides_it():
    text = f"could not connect to {UNREACHABLE}: password {PASSWORD} rejected"
    shown = without_password(text, UNREACHABLE)
    assert PASSWORD not in shown and UNREACHABLE_SHOWN in shown


def one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert PASSWORD not in out + err
    return lines[0]


def ablate_args(tmp_path, *extra):
    return ["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.2", "--seeds", "1",
            "--out", str(tmp_path / "exp"), *extra]  # fmt: skip


def sweep_args(tmp_path, *extra):
    (tmp_path / "space.yaml").write_text("optim.lr: [0.1, 0.2]\n")
    return ["sweep", "--baseline", *TINY, "--space", str(tmp_path / "space.yaml"),
            "--sampler", "grid", "--out", str(tmp_path / "exp"), *extra]  # fmt: skip


@pytest.mark.parametrize(
    "command, url, message",
    [
        ("ablate", UNREACHABLE, f"cannot open storage {UNREACHABLE_SHOWN}: OperationalError"),
        ("ablate --dry-run", UNREACHABLE, f"cannot open storage {UNREACHABLE_SHOWN}: "),
        ("sweep", UNREACHABLE, f"cannot open storage {UNREACHABLE_SHOWN}: OperationalError"),
        ("sweep --dry-run", UNREACHABLE, f"cannot open storage {UNREACHABLE_SHOWN}: "),
        ("ablate", f"postgresql+psycopg://u:{PASSWORD}@127.0.0.1:notaport/db",
         "cannot open storage postgresql+psycopg://u:***@127.0.0.1:notaport/db: "),
        ("ablate", f"postgresql+pg8000://u:{PASSWORD}@127.0.0.1:1/db",
         "storage postgresql+pg8000://u:***@127.0.0.1:1/db needs a database driver"),
        ("results", UNREACHABLE, f"cannot open storage {UNREACHABLE_SHOWN}: OperationalError"),
        ("results ls-flip", UNREACHABLE, f"cannot open storage {UNREACHABLE_SHOWN}: "),
        ("results ls-flip --runs", UNREACHABLE, f"cannot open storage {UNREACHABLE_SHOWN}: "),
    ],
)  # fmt: skip
def test_a_storage_that_cannot_be_opened_is_one_line_without_the_password(
    command, url, message, tmp_path, capsys
):
    name, *extra = command.split()
    if name == "ablate":
        args = ablate_args(tmp_path, *extra, "--storage", url)
    elif name == "sweep":
        args = sweep_args(tmp_path, *extra, "--storage", url)
    else:
        args = [name, *extra, "--storage", url]
    assert main(args) == 2
    assert message in one_error_line(capsys)


# ---------------------------------------------------------------- on a real server


@pytest.fixture
def database(postgres_server):
    """A fresh database's URL with a password in it (trust authentication accepts any)."""
    url = postgres_server.new_database()
    assert url.startswith("postgresql+psycopg://postgres@")
    secret = url.replace("://postgres@", f"://postgres:{PASSWORD}@", 1)
    return secret, shown_url(secret)


def output(capsys) -> str:
    out, err = capsys.readouterr()
    assert PASSWORD not in out + err
    return out


def no_password_under(folder):
    """No file tricklab wrote (run folders: result.json's provenance, ...) holds the password."""
    for path in folder.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path


def test_ablate_and_results_show_and_store_the_url_without_its_password(
    database, tmp_path, capsys, monkeypatch
):
    secret, shown = database
    assert shown.startswith("postgresql+psycopg://postgres:***@127.0.0.1:")
    args = ablate_args(tmp_path, "--study", "pw", "--storage", secret)
    monkeypatch.setattr(sys, "argv", ["tricklab", *args])  # what the provenance record reads

    assert main([*args, "--dry-run", "--json"]) == 0
    assert json.loads(output(capsys).splitlines()[-1])["storage"] == shown
    assert main(args) == 0  # connects with the password
    out = output(capsys)
    assert f"storage {shown}" in out and "run 2/2" in out

    assert main([*args, "--json"]) == 0  # resumed: nothing left to run
    summary = json.loads(output(capsys).splitlines()[-1])
    assert summary["storage"] == shown and summary["already_done"] == 2
    assert shown in summary["provenance"]["command"]
    assert main([*args, "--dry-run"]) == 0  # the stored study is read: the same experiment
    output(capsys)
    other = [*args, "--dry-run"]
    other[other.index("--vary") : other.index("--vary")] = ["optim.momentum=0.5"]
    assert main(other) == 2  # as the run would refuse it, creating nothing
    assert "already holds another experiment (its baseline differs)" in one_error_line(capsys)

    assert main(["results", "--storage", secret]) == 0  # the studies, as a table
    assert "pw" in output(capsys)
    assert main(["results", "--storage", secret, "--json"]) == 0
    (listed,) = json.loads(output(capsys))["studies"]
    assert listed["name"] == "pw" and listed["storage"] == shown
    assert main(["results", "pw", "--storage", secret, "--json"]) == 0
    meta = json.loads(output(capsys).splitlines()[-1])
    assert meta["storage"] == shown and shown in meta["provenance"]["command"]
    assert main(["results", "pw", "--storage", secret, "--runs", "--json"]) == 0
    assert json.loads(output(capsys))["storage"] == shown
    assert main(["results", "nope", "--storage", secret]) == 2
    assert f"no study 'nope' in {shown}" in one_error_line(capsys)

    import optuna

    study = optuna.load_study(study_name="pw", storage=secret)
    assert shown in study.user_attrs["provenance"]["command"]
    stored = [study.user_attrs, *(t.user_attrs for t in study.trials)]  # runs' records too
    assert PASSWORD not in json.dumps(stored, default=str)
    no_password_under(tmp_path / "exp")

    assert main(["report", "pw", "--storage", secret, "--out", str(tmp_path / "report")]) == 0
    output(capsys)
    no_password_under(tmp_path / "report")


def test_sweep_prints_the_url_without_its_password(database, tmp_path, capsys, monkeypatch):
    secret, shown = database
    args = sweep_args(tmp_path, "--study", "pw-sweep", "--storage", secret)
    monkeypatch.setattr(sys, "argv", ["tricklab", *args])
    assert main([*args, "--dry-run"]) == 0
    assert f"storage {shown}" in output(capsys)
    assert main(args) == 0
    out = output(capsys)
    assert f"storage {shown}" in out and "run 2/2" in out
    no_password_under(tmp_path / "exp")
