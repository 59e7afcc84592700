"""A file storage's path that holds no file (a folder, a pipe, a device) is one line, whichever
command opens it, and nothing is created beside it (third hostile round: `journal:` on a pipe
hung for good, on a device ended in a traceback from Optuna's fsync, `sqlite:///` on a device left
a `-journal` file beside it, and a folder given as an SQLite file read as "no studies")."""

import os
import stat

import pytest

from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.experiments.storage import check_storage, open_storage

TINY = ["data.name=synthetic", "data.train_size=64", "data.test_size=32", "data.image_size=16",
        "model.name=airbench", "model.widths=[4,8,8]", "run.epochs=1", "loader.batch_size=32",
        "run.device=cpu"]  # fmt: skip


def _thing(tmp_path, kind):
    path = tmp_path / f"{kind}.store"
    if kind == "folder":
        path.mkdir()
    elif kind == "pipe":
        os.mkfifo(path)
    else:
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a copy of /dev/null
        except PermissionError:
            pytest.skip("making a device node needs root")
    return path


@pytest.mark.parametrize("kind, said", [("folder", "a folder"), ("pipe", r"a pipe \(FIFO\)"),
                                        ("device", "a device")])  # fmt: skip
@pytest.mark.parametrize("prefix", ["journal:", "sqlite:///"])
def test_a_storage_path_that_is_no_file_is_refused_by_every_opener(tmp_path, kind, said, prefix):
    url = prefix + str(_thing(tmp_path, kind))
    for opener in (
        lambda: open_storage(url),
        lambda: open_storage(url, must_exist=True),
        lambda: check_storage(url),
    ):
        with pytest.raises(TrickLabError, match=f"it is {said}, not a file") as err:
            opener()
        assert "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{kind}.store"]  # no -journal beside


@pytest.mark.parametrize("kind", ["folder", "pipe", "device"])
def test_results_and_ablate_say_what_the_storage_path_is_in_one_line(tmp_path, kind, capsys):
    url = "journal:" + str(_thing(tmp_path, kind))
    for listed in (url, url.replace("journal:", "sqlite:///")):  # was: a folder had "no studies"
        assert main(["results", "--storage", listed]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not a file" in err
    args = ["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.05", "--seeds", "1",
            "--budget-epochs", "1", "--storage", url, "--out", str(tmp_path / "e")]  # fmt: skip
    for extra in (["--dry-run"], []):  # was: without --dry-run, a pipe waited for good
        assert main([*args, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not a file" in err
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("spec", ["journal:", "journal:  "])
def test_a_journal_storage_without_a_path_is_refused_in_one_line(spec, capsys):
    # was: "cannot open storage journal:: it is a folder, not a file" (the current folder)
    assert main(["results", "--storage", spec]) == 2
    err = capsys.readouterr().err
    assert err == "error: --storage journal: names no file; give journal:PATH\n"


@pytest.mark.parametrize("query", ["?mode=ro", "?", "#part", "?mode=ro&uri=true"])
def test_an_sqlite_url_with_a_query_or_fragment_is_refused_in_one_line(tmp_path, query, capsys):
    # was: SQLAlchemy's two-line SAWarning, mode=ro ignored, the study written, and the claim lock
    # named x.db?mode=ro.claim-lock, which a worker given sqlite:///x.db does not take
    url = f"sqlite:///{tmp_path}/x.db{query}"
    ablate = ["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.05", "--seeds", "1",
              "--storage", url, "--out", str(tmp_path / "e")]  # fmt: skip
    for args in (["results", "--storage", url], ["results", "s", "--storage", url],
                 [*ablate, "--dry-run"], ablate):  # fmt: skip
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err == (
            f"error: --storage {url}: an SQLite URL takes no query string or fragment; give the "
            f"path alone: sqlite:///{tmp_path}/x.db\n"
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("driver", ["sqlite+pysqlite", "sqlite+pysqlcipher"])
def test_an_sqlite_url_naming_a_driver_is_refused_in_one_line(tmp_path, driver, capsys):
    # the file's checks and the claim lock beside it key on the sqlite:/// form: two workers given
    # sqlite+pysqlite:///x.db would not exclude each other
    url = f"{driver}:///{tmp_path}/x.db"
    assert main(["results", "--storage", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "give an SQLite file as sqlite:///PATH" in err, err
    assert list(tmp_path.iterdir()) == []


def test_an_escaped_sqlite_url_names_one_file_for_the_writer_the_lock_and_the_readers(
    tmp_path, monkeypatch, capsys
):
    """Eleventh hostile round: `sqlite:///a%20b.db` made the database `a b.db` (SQLAlchemy decodes
    the URL) but the lock `a%20b.db.claim-lock`, and `results` with the URL ablate printed found
    no database; a pipe or folder named through %XX passed the checks and failed in SQLite."""
    monkeypatch.chdir(tmp_path)
    url = "sqlite:///a%20b.db"
    args = ["ablate", "--baseline", *TINY, "--vary", "optim.lr=0.05", "--seeds", "1",
            "--budget-epochs", "1", "--study", "z", "-q", "--storage", url]  # fmt: skip
    assert main(args) == 0
    assert {"a b.db", "a b.db.claim-lock"} <= {p.name for p in tmp_path.iterdir()}
    assert not any("%" in p.name for p in tmp_path.iterdir())
    capsys.readouterr()
    assert main(["results", "z", "--storage", url, "--format", "json"]) == 0
    assert '"baseline"' in capsys.readouterr().out
    os.mkfifo(tmp_path / "f1")
    (tmp_path / "d1").mkdir()
    for escaped, said in (("f%31", r"a pipe \(FIFO\)"), ("d%31", "a folder")):
        with pytest.raises(TrickLabError, match=f"it is {said}, not a file"):
            check_storage("sqlite:///" + escaped)


@pytest.mark.parametrize("name", ["a%20b.db", "p%.db", "q?x.db", "h#1.db", "plain.db"])
def test_a_path_given_as_a_file_becomes_a_url_that_names_that_file(tmp_path, name):
    from tricklab.core.urls import file_of
    from tricklab.experiments.storage import storage_url

    url = storage_url(str(tmp_path / name), tmp_path)
    assert file_of(url) == tmp_path / name
    open_storage(url)  # SQLAlchemy itself opens that file
    assert (tmp_path / name).is_file()
