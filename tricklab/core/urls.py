"""Storage URLs as tricklab shows them: with the password hidden, as SQLAlchemy hides it.

`--storage postgresql+psycopg://user:PASS@host/db` connects with its password, but every line
tricklab prints, every error message and every record it stores (summaries, results JSON, the
command line in the reproducibility record) shows `postgresql+psycopg://user:***@host/db`
(`ps` still shows the command: PGPASSWORD or a ~/.pgpass file keep it out of there too). A
journal path or an SQLite URL has no password and is shown as given.

No Optuna here: measure/provenance.py hides the passwords of the command line it records.

A file storage's file is one fact: `file_of(url)` gives the file a `journal:PATH` or
`sqlite:///PATH` URL stores in as SQLAlchemy decodes it (`sqlite:///a%20b.db` is `a b.db`), and
`sqlite_url(path)` the URL that gives back that file; the checks, the claim lock and the run
folders all use it, so they never name a file other than the one the database is in.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import Path

from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import shown

HIDDEN = "***"
SQLITE_PREFIX = "sqlite:///"
JOURNAL_PREFIX = "journal:"
# What a URL's path may not hold as it is: SQLAlchemy decodes %XX and splits at ? and #
_URL_ESCAPES = str.maketrans({"%": "%25", "?": "%3F", "#": "%23"})
# scheme://user:password@ in any text, up to the last '@' of that word: the fallback for strings
# SQLAlchemy cannot parse, and for a password holding an unquoted '@'.
_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][\w+.-]*://[^\s:/@]*):\S*@")
# libpq also takes the password as a query value (?password=...)
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&]*", re.IGNORECASE)


def shown_url(url: str) -> str:
    """`url` with its password (in the user part or a `password=` query value) as `***`; any
    other string, URL or not, as it is."""
    if "://" not in url or ("@" not in url and "password" not in url.lower()):
        return url  # no credentials: a path, journal:PATH, sqlite:///..., host-only URLs
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # not a URL SQLAlchemy reads: hide whatever looks like user:password@
        return _hidden_in_text(url)
    if "@" in (parsed.host or ""):  # an unquoted '@' in the password: SQLAlchemy splits early
        return _hidden_in_text(url)
    if parsed.password is None and not any(k.lower() == "password" for k in parsed.query):
        return url
    return _QUERY_PASSWORD.sub(rf"\g<1>{HIDDEN}", parsed.render_as_string(hide_password=True))


def _hidden_in_text(text: str) -> str:
    text = _CREDENTIALS.sub(lambda m: f"{m['head']}:{HIDDEN}@", text)
    return _QUERY_PASSWORD.sub(rf"\g<1>{HIDDEN}", text)


def without_password(text: str, url: str) -> str:
    """`text` (an error message about `url`) with `url` shown as `shown_url` shows it and its
    password, should a driver quote it, as `***`."""
    shown = shown_url(url)
    if shown == url:
        return text
    text = text.replace(url, shown)
    for password in _passwords(url):
        text = text.replace(password, HIDDEN)
    return _hidden_in_text(text)


def _passwords(url: str) -> list[str]:
    """The password of `url` as written and as decoded (longest first), when it has one."""
    from urllib.parse import unquote

    from sqlalchemy.engine import make_url

    found = []
    match = _CREDENTIALS.search(url)
    if match:
        raw = match.group(0)[len(match["head"]) + 1 : -1]
        found += [raw, unquote(raw)]
    try:
        parsed = make_url(url)
        found += [str(v) for k, v in parsed.query.items() if k.lower() == "password"]
        if parsed.password is not None:
            found.append(str(parsed.password))
    except Exception:  # unparsable: the regex's password is all there is
        pass
    # A password of one or two characters is left in: hiding it would garble every word.
    return sorted({p for p in found if len(p) > 2 and p != HIDDEN}, key=len, reverse=True)


def shown_command(words: Iterable[str]) -> str:
    """A command line (shell-quoted) with the password of every URL in it hidden, whether the
    URL is a word of its own or follows `--storage=`."""
    return shlex.join(shown_url(word) for word in words)


def file_of(url: str) -> Path | None:
    """The file a `journal:PATH` or `sqlite:///PATH` storage URL stores in (None for a server):
    for SQLite the path SQLAlchemy connects to, its `%XX` escapes decoded."""
    if url.startswith(JOURNAL_PREFIX):
        return Path(url[len(JOURNAL_PREFIX) :])
    if not url.startswith(SQLITE_PREFIX):
        return None
    from sqlalchemy.engine import make_url

    try:
        database = make_url(url).database
    except Exception:  # not a URL SQLAlchemy reads: the text after the prefix, as it was given
        database = None
    path = database or url[len(SQLITE_PREFIX) :]
    if "\0" in path:  # `%00`: no file system takes the name (os.stat's ValueError)
        raise TrickLabError(f"storage {shown_url(url)}: a file's path cannot hold a NUL (%00)")
    return Path(path)


def sqlite_url(path: Path) -> str:
    """The `sqlite:///` URL of the file `path`, escaped where SQLAlchemy would read the path
    otherwise (`%`, `?`, `#`); TrickLabError when no URL names it."""
    for text in (str(path).translate(_URL_ESCAPES), str(path)):  # escaped: SQLAlchemy decodes
        url = SQLITE_PREFIX + text
        if file_of(url) == path:
            return url
    raise TrickLabError(f"{shown(str(path))} cannot be named in an SQLite URL; rename it")
