"""One door in: every file tricklab reads that it did not write in this process (a run's
result.json, a speedrun's summary.json, metrics, saved profiles) is read here, within fixed bounds,
and every name it echoes from outside is shown on one line.

What these readers promise, whatever the bytes: the value, or one TrickLabError line. Never a
traceback, never more than `limit` bytes read, never a value nested deeper than MAX_JSON_DEPTH,
never a number that is not finite (json.dump writes NaN and Infinity, which no tricklab file
holds), never a key given twice. Recipes, overrides and sweep spaces have their YAML door
(recipe/yamlio.py); writes go out through core/paths.atomic_write.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from tricklab.core.errors import TrickLabError
from tricklab.core.memory import format_bytes
from tricklab.core.oneline import control_free, shown

# Far beyond any file tricklab writes (a recipe nests 3 levels, a result.json 5), and far below
# Python's recursion limit, so nothing that walks a value read here can recurse out of stack.
MAX_JSON_DEPTH = 64


def csv_cell(value: object) -> object:
    """A CSV cell: None empty, a number as it is, text `control_free` and, where a spreadsheet
    would run it as a formula (text opening with =, +, -, @, a tab or a carriage return, and no
    number; spaces in front and the full-width ＝ ＋ － ＠ too), behind a ' as OWASP advises: a
    varied value `=HYPERLINK(...)` stays text."""
    if value is None:
        return ""
    if not isinstance(value, str):
        return value
    text = control_free(value)
    if text.lstrip()[:1] in ("=", "+", "-", "@", "\t", "\r", "＝", "＋", "－", "＠"):
        try:
            float(text)
        except ValueError:
            return "'" + text
    return text


def read_bounded_bytes(path: Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file `path`; TrickLabError, one line, for one that is missing,
    a folder, no regular file (a FIFO would block), unreadable, or larger than `limit` bytes,
    which no `what` is (nothing past the limit is read)."""
    if "\0" in str(path):  # os.stat's ValueError
        raise TrickLabError(f"cannot read {shown(path)}: a path cannot hold a NUL character")
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise TrickLabError(f"{shown(path)} is a folder, not a {what}")
        if not stat.S_ISREG(mode):
            raise TrickLabError(f"{shown(path)} is not a regular file (not a {what})")
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except (FileNotFoundError, NotADirectoryError):
        raise TrickLabError(f"cannot read {shown(path)}: it does not exist") from None
    except OSError as exc:
        raise TrickLabError(f"cannot read {shown(path)}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise TrickLabError(
            f"{shown(path)} is larger than any {what} (at most {format_bytes(limit)} is read)"
        )
    return data


def read_bounded_text(path: Path, limit: int, what: str) -> str:
    """The UTF-8 text of `path` (see read_bounded_bytes); TrickLabError for text that is not UTF-8."""
    data = read_bounded_bytes(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise TrickLabError(f"{shown(path)} is not UTF-8 text (not a {what})") from None


def parse_json(text: str | bytes) -> Any:
    """The JSON value in `text`, held to the module doc's bounds; ValueError saying what is wrong
    (the caller names the file)."""
    try:
        value = json.loads(
            text, parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_unique_keys
        )
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    check_depth(value)
    return value


def read_json(path: Path, limit: int, what: str) -> Any:
    """The JSON value in the file `path` (at most `limit` bytes, see parse_json); TrickLabError,
    one line naming the file, for anything else."""
    text = read_bounded_text(path, limit, what)
    if not text.strip():  # JSON's own error would be "Expecting value: line 1 column 1"
        raise TrickLabError(f"{shown(path)} is empty, no {what}; give the file that holds it")
    try:
        return parse_json(text)
    except ValueError as exc:
        raise TrickLabError(f"{shown(path)} is not valid JSON ({what}): {shown(exc)}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no number a tricklab file holds")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is beyond any float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {json.dumps(key)[:40]} is given twice")
        out[key] = value
    return out


def check_depth(value: Any) -> None:
    """ValueError for a value nested deeper than MAX_JSON_DEPTH (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
        stack.extend((child, depth + 1) for child in item)


def json_safe(value: Any) -> Any:
    """`value` with NaN and infinities as None: strict JSON (RFC 8259) has no such numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
