"""Storage URLs as tricklab shows them: with the password hidden, as SQLAlchemy hides it.

`--storage postgresql+psycopg://user:PASS@host/db` connects with its password, but every line
tricklab prints, every error message and every record it stores (summaries, results JSON, the
command line in the reproducibility record) shows `postgresql+psycopg://user:***@host/db`
(`ps` still shows the command: PGPASSWORD or a ~/.pgpass file keep it out of there too). A
journal path or an SQLite URL has no password and is shown as given.

No Optuna here: measure/provenance.py hides the passwords of the command line it records.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

HIDDEN = "***"
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
