"""A throwaway PostgreSQL server for the storage tests, from the machine's own PostgreSQL install.

`start()` runs initdb and pg_ctl (as the `postgres` user when the tests run as root, which initdb
refuses to be) on a free loopback port, with a data folder of its own; the tests skip when there is
no PostgreSQL install or no psycopg driver, or when the server cannot start (the reason shown).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile

import pytest


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self) -> None:
        pytest.importorskip("psycopg", reason="psycopg (the PostgreSQL driver) is not installed")
        self.initdb, self.pg_ctl = _bin("initdb"), _bin("pg_ctl")
        if not (self.initdb and self.pg_ctl):
            pytest.skip("no PostgreSQL install (initdb, pg_ctl) on this machine")
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            if not shutil.which("runuser"):
                pytest.skip("running as root without runuser: initdb cannot run")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.root = tempfile.mkdtemp(prefix="tricklab-pg-")
        if self.as_user:
            try:
                shutil.chown(self.root, user="postgres")
            except (LookupError, PermissionError) as exc:
                shutil.rmtree(self.root, ignore_errors=True)
                pytest.skip(f"no postgres user to run the server as: {exc}")
        self.data = os.path.join(self.root, "data")
        self.port = _free_port()
        self._run([self.initdb, "-D", self.data, "-A", "trust", "-U", "postgres"], "initdb")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = os.path.join(self.root, "server.log")
        self._run([self.pg_ctl, "-D", self.data, "-o", options, "-l", log, "-w", "start"], "start")
        self.databases = 0

    def _run(self, cmd: list[str], what: str) -> None:
        out = subprocess.run([*self.as_user, *cmd], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            self.stop()
            tail = (out.stderr or out.stdout).strip().splitlines()[-1:]
            pytest.skip(f"PostgreSQL {what} failed: {' '.join(tail)}")

    def new_database(self) -> str:
        """A fresh, empty database; its SQLAlchemy URL."""
        import psycopg

        self.databases += 1
        name = f"tricklab_test_{self.databases}"
        # CREATE DATABASE cannot run in a transaction: autocommit.
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if os.path.isdir(os.path.join(self.data, "global")):
            subprocess.run(
                [*self.as_user, self.pg_ctl, "-D", self.data, "-m", "immediate", "stop"],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(self.root, ignore_errors=True)
