"""Recipe YAML (files, command-line values, sweep spaces) read safely, within fixed limits.

A recipe is a few kilobytes of plain values, so what goes far beyond that is refused with one
line before it can cost time or memory:
- a file larger than MAX_YAML_BYTES is refused unread;
- values nest at most MAX_YAML_DEPTH deep (a recipe needs 3: section, field, list);
- a document holds at most MAX_YAML_NODES values;
- no aliases (`*name`): nested aliases are how 300 bytes expand to a billion values
  ("billion laughs"), and a recipe has nothing it needs to share;
- mapping keys are scalars (names, numbers), each given once;
- booleans, numbers and dates are YAML 1.2's (its core schema): true/false only, so
  `tricks.compile: off` names the choice "off"; `017` is 17, `0o17` 15, `1e-3` a number, while
  YAML 1.1's base-60 `1:30` (90), `1_000` and `2026-01-01` (a date) are text.
A command-line value (`key=VALUE`, `read_value`) is also refused when it holds a comment, and a
field that takes text gets a number as it was typed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from tricklab.core.errors import TrickLabError
from tricklab.core.safeio import read_bounded_bytes, shown

# Each far beyond any real recipe or space (a few kilobytes, a hundred values, 4 levels), and
# small enough that PyYAML reads the worst file within them in well under a second.
MAX_YAML_BYTES = 256 * 1024
MAX_YAML_DEPTH = 32
MAX_YAML_NODES = 10_000

_BOOL_TAG = "tag:yaml.org,2002:bool"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_DECIMAL_PATTERN = r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
_YAML12 = {  # the core schema's forms, each with the first characters it can start with
    _BOOL_TAG: (r"true|True|TRUE|false|False|FALSE", "tTfF"),
    _INT_TAG: (r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
    _FLOAT_TAG: (
        _DECIMAL_PATTERN + r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
        "-+0123456789.",
    ),
}


class _RecipeLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans that refuses what the module doc lists, as it composes."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth, self.nodes = 0, 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        line = f"line {event.start_mark.line + 1}"
        if isinstance(event, yaml.AliasEvent):
            raise TrickLabError(
                f"{line}: YAML aliases (*{event.anchor}) are not allowed; write the value out"
            )
        self.nodes += 1
        if self.nodes > MAX_YAML_NODES:
            raise TrickLabError(f"{line}: more than {MAX_YAML_NODES:,} values")
        if self.depth >= MAX_YAML_DEPTH:
            raise TrickLabError(f"{line}: nested deeper than {MAX_YAML_DEPTH} levels")
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise TrickLabError(
                    f"line {key_node.start_mark.line + 1}: a mapping key must be a name, "
                    "not a list or a mapping"
                )
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise TrickLabError(f"'{key}' is given twice (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """YAML 1.2's: `017` is seventeen (1.1 read it as octal 15), `0o17` is octal."""
        text = self.construct_scalar(node)
        base = {"0o": 8, "0x": 16}.get(text[:2], 10)
        return int(text[2:] if base != 10 else text, base)


_YAML11_ONLY = (*_YAML12, "tag:yaml.org,2002:timestamp")  # replaced below; a date is text
_RecipeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _YAML11_ONLY]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _tag, (_pattern, _firsts) in _YAML12.items():  # int before float: `17` is an int
    _RecipeLoader.add_implicit_resolver(_tag, re.compile(f"^(?:{_pattern})$"), list(_firsts))
_RecipeLoader.add_constructor(_INT_TAG, _RecipeLoader.construct_yaml_int)


def read_yaml(text: str) -> Any:
    """One YAML document (a file's text or a command-line value), read safely within the limits.

    Raises yaml.YAMLError for text that is not YAML (callers say where it came from, and
    `describe_yaml_error` says what is wrong), TrickLabError for what the limits refuse."""
    if len(text) > MAX_YAML_BYTES:
        raise TrickLabError(f"larger than {MAX_YAML_BYTES:,} bytes")
    try:
        return yaml.load(text, Loader=_RecipeLoader)
    except (ValueError, OverflowError, TypeError, KeyError, AttributeError) as exc:
        # a tag its value does not fit (`!!int 1e3`, `!!bool x`), an int of 5,000 digits
        if "digits" in str(exc) and not re.search(r"(^|[\s\[{,:-])!", text):
            digits = max((len(m) for m in re.findall(r"\d+", text)), default=0)
            raise TrickLabError(
                f"a number of {digits:,} digits is longer than any setting takes"
            ) from None
        raise TrickLabError(f"a tagged value is not what its tag says ({exc!r:.120})") from None


class _RecipeDumper(yaml.SafeDumper):
    """SafeDumper that quotes a string YAML 1.1 or 1.2 would read as something else: `0o17`,
    `1e3`, `+.5` (1.2 numbers) as well as `on`, `1:30`, `2026-01-01` (1.1's), so that a run's
    recipe.yaml reads back as it ran, here and in any other YAML reader."""


_RecipeDumper.yaml_implicit_resolvers = {
    first: list(resolvers) for first, resolvers in yaml.SafeDumper.yaml_implicit_resolvers.items()
}
for _tag, (_pattern, _firsts) in _YAML12.items():
    _RecipeDumper.add_implicit_resolver(_tag, re.compile(f"^(?:{_pattern})$"), list(_firsts))


def dump_yaml(data: Any) -> str:
    """`data` as YAML text that `read_yaml` (and YAML 1.1 readers) read back as it is."""
    return yaml.dump(data, Dumper=_RecipeDumper, sort_keys=False, allow_unicode=False)


_DECIMAL = re.compile(_DECIMAL_PATTERN)


def number_in_text(text: str) -> float | None:
    """The number a quoted value spells in YAML 1.2's decimal form (`"1e-3"`, `"0.5"`, `"17"`),
    else None: unlike Python's float(), not `1_0`, non-ASCII digits, padding, `inf` or `nan`."""
    return float(text) if _DECIMAL.fullmatch(text) else None


_NULL_WORDS = ("null", "Null", "NULL", "~")  # YAML 1.2's null, written out


def read_value(text: str, takes_text: bool = False) -> Any:
    """A command-line value (`key=VALUE`), read as a recipe file's values are, except that a
    comment is refused (the shell passed `data.dir=a #b` whole: '#b' would have been dropped)
    and, for a field that `takes_text`, a number keeps its spelling (`data.dir=017`, not '17')."""
    at = _comment_at(text)
    if at is not None:
        comment = text[at:].splitlines()[0].strip()
        raise TrickLabError(
            f"{comment!r} would be read as a YAML comment and dropped; quote the value to keep it"
        )
    value = read_yaml(text)
    if takes_text and isinstance(value, (int, float)) and not isinstance(value, bool):
        return text.strip()
    plain = text.strip()
    lone_tag = plain[:1] == "!" and value in ("", None)  # `!!str` alone: ''
    syntax = plain[:1] not in ("'", '"', "!", "[", "{") and (
        (value is None and plain not in _NULL_WORDS) or (isinstance(value, str) and value != plain)
    )  # YAML's own syntax took part of it: `---` (a document) read as null, `&a x` as 'x'
    if takes_text and (lone_tag or syntax):
        raise TrickLabError(
            f"{shown(plain)} would be read by YAML as {value!r:.40}, not as typed; quote the value "
            "to keep it"
        )
    return value


def _comment_at(text: str) -> int | None:
    """Where a YAML comment starts in `text`, if it holds one (text that is no YAML: None).
    Between two tokens there is only white space, line breaks and comments."""
    try:
        tokens = list(yaml.scan(text, Loader=_RecipeLoader))
    except yaml.YAMLError:
        return None  # read_yaml says what is wrong
    done = 0  # where the text read so far ends
    for token in [*tokens, None]:
        start = len(text) if token is None else token.start_mark.index
        if "#" in text[done:start]:
            return done + text[done:start].index("#")
        if token is not None:
            done = max(done, token.end_mark.index)
    return None


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """'not valid YAML at line L, column C (what the parser expected)' for a parse error."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = problem or getattr(exc, "reason", None)  # a ReaderError: a control character
    return f"not valid YAML{where} ({problem or type(exc).__name__})"


def read_yaml_file(path: str | Path, what: str) -> Any:
    """The YAML document in the file at `path`; `what` names the file in errors ("recipe file").

    Every failure is one TrickLabError line: missing, a folder, not a regular file, a folder on
    the way that may not be entered, unreadable, too large (not read past the limit), not UTF-8,
    not YAML, or beyond the limits."""
    return read_yaml_document(path, what)[0]


def read_yaml_document(path: str | Path, what: str) -> tuple[Any, str]:
    """`read_yaml_file`'s document and the text it was read from (read once)."""
    if not isinstance(path, (str, os.PathLike)):  # a Python caller's load_space(5)
        raise TypeError(f"the {what}'s path takes str or PathLike, got {path!r:.60}")
    data = read_bounded_bytes(Path(path), MAX_YAML_BYTES, what)  # the one door in
    empty = f"{what} {shown(path)} is empty; write its YAML in it or name another"
    if not data.strip():  # not YAML's "nothing": a recipe of defaults that reads as a mistake
        raise TrickLabError(empty)
    try:
        text = data.decode("utf-8")
        document = read_yaml(text)
        if document is None:  # only comments, `---` or `null`: nothing, as an empty file
            raise TrickLabError(empty)
        return document, text
    except UnicodeDecodeError:
        raise TrickLabError(f"{what} {path} is not UTF-8 text (not valid YAML)") from None
    except yaml.YAMLError as exc:
        raise TrickLabError(f"{path}: {describe_yaml_error(exc)}") from None
    except TrickLabError as exc:
        raise TrickLabError(str(exc) if str(exc) == empty else f"{path}: {exc}") from None


def spelled(text: str) -> Any:
    """The document of `text`, which `read_yaml` has read (its checks are not made again), with
    every scalar as it is spelled there (`0o17`, not 15)."""
    return yaml.load(text, Loader=yaml.BaseLoader)
