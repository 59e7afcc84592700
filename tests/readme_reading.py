"""Reading README.md and the docs/ pages for tests/test_readme.py: a page's fenced blocks, code
spans and shell commands with their line numbers, and each `tricklab ...` it shows walked through
the CLI's own parser (built, never called). One page is read at a time: `README` is that page
(README.md unless `reading(page)` says otherwise)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import shlex
from functools import cache
from pathlib import Path

from tricklab.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"  # the page being read


def pages() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def page_name(path: Path | None = None) -> str:
    path = README if path is None else path
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


@contextlib.contextmanager
def reading(page: Path):
    """Read `page` instead of README.md within the block."""
    global README
    before, README = README, page
    clear_caches()
    try:
        yield
    finally:
        README = before
        clear_caches()


SHELL_LANGS = ("", "bash", "sh", "shell", "console")
# Words that end one shell command and start the next.
SEPARATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>&1", "do", "then"}
# Folders of this repository a path in the README may start with (others are airbench's, outputs).
REPO_FOLDERS = ("benchmarks", "tests", "tricklab", "examples", "scripts", ".ci")
PACKAGE_FOLDERS = (
    "core",
    "data",
    "models",
    "measure",
    "recipe",
    "training",
    "profile",
    "experiments",
    "report",
    "cli",
)


# ------------------------------------------------------------------ reading the README
@dataclasses.dataclass(frozen=True)
class Snippet:
    line: int  # README line where it starts (1-based)
    text: str
    in_code_block: bool


@cache
def readme_text() -> str:
    return README.read_text(encoding="utf-8")


@cache
def code_blocks() -> tuple[tuple[str, int, tuple[str, ...]], ...]:
    """(language, line of its first content line, lines) of every fenced block."""
    blocks, lang, start, body = [], None, 0, []
    for number, line in enumerate(readme_text().splitlines(), start=1):
        if line.startswith("```"):
            if lang is None:
                lang, start, body = line[3:].strip(), number + 1, []
            else:
                blocks.append((lang, start, tuple(body)))
                lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, f"{page_name()}: a fenced code block is never closed"
    return tuple(blocks)


@cache
def prose() -> str:
    """The README with fenced blocks blanked out (line numbers kept)."""
    lines, inside = [], False
    for line in readme_text().splitlines():
        fence = line.startswith("```")
        lines.append("" if inside or fence else line)
        if fence:
            inside = not inside
    return "\n".join(lines)


@cache
def inline_spans() -> tuple[Snippet, ...]:
    """Every `code span` outside fenced blocks; a span may wrap over lines within a paragraph."""
    text = prose()
    spans = []
    for match in re.finditer(r"(?<!`)(`+)(?!`)((?:(?!\n\s*\n).)+?)(?<!`)\1(?!`)", text, re.S):
        line = text.count("\n", 0, match.start()) + 1
        spans.append(Snippet(line, " ".join(match.group(2).split()), False))
    return tuple(spans)


def shown_failing(body: tuple[str, ...], offset: int) -> bool:
    """Whether the `$ command` at body[offset] is shown failing: an `error:` line follows it
    (a mistake on purpose, which tests/test_docs_commands.py runs and these checks leave alone)."""
    for line in body[offset + 1 :]:
        if line.startswith("$ "):
            return False
        if line.startswith("error:"):
            return True
    return False


@cache
def shell_commands() -> tuple[Snippet, ...]:
    """Each shell line of a fenced block, continuation lines joined, prompt and comment removed."""
    out = []
    for lang, start, body in code_blocks():
        if lang not in SHELL_LANGS:
            continue
        pending, first = "", start
        for offset, line in enumerate(body):
            if line.startswith("$ ") and shown_failing(body, offset):
                continue
            if not pending:
                first = start + offset
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            command = (pending + line).strip()
            pending = ""
            command = command.removeprefix("$ ")
            command = re.sub(r"(^|\s)#.*$", "", command)  # a shell comment
            if command:
                out.append(Snippet(first, command, True))
    return tuple(out)


def words(text: str) -> list[str]:
    text = text.replace("\\|", "|")  # a | escaped inside a Markdown table
    try:
        return shlex.split(text)
    except ValueError:  # unbalanced quotes in a fragment of a command
        return text.split()


def segments(snippet: Snippet) -> list[list[str]]:
    """The snippet's words, cut into the shell commands it chains or pipes."""
    parts, current = [], []
    for word in words(snippet.text):
        if word in SEPARATORS or word.endswith(";"):
            parts.append(current)
            current = []
        else:
            current.append(word)
    parts.append(current)
    return [p for p in parts if p]


# ------------------------------------------------------------------ the CLI's parsers
def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {o: a for a in parser._actions for o in a.option_strings}


@cache
def top_parser() -> argparse.ArgumentParser:
    return build_parser()


def all_option_strings() -> set[str]:
    found, todo = set(), [top_parser()]
    while todo:
        parser = todo.pop()
        found |= set(options(parser))
        todo += subcommands(parser).values()
    return found


@dataclasses.dataclass
class Invocation:
    """`tricklab COMMAND [ACTION] ...` as the README writes it."""

    line: int
    path: list[str]  # e.g. ["profile", "step"]
    parser: argparse.ArgumentParser
    positionals: list[str]
    option_values: dict[str, list[str]]
    problems: list[str]


def placeholder(word: str) -> bool:
    """RECIPE, [key=value, M, ..., STUDY|FOLDER, <date>, KEY=V1,V2, optim.lr=..., a $VAR:
    a stand-in, not a value."""
    key, _, value = word.rpartition("=")
    return (
        word.startswith(("[", "<", "("))
        or "..." in word
        or "$" in word
        or not re.search(r"[a-z]", key if key else value)
        or (bool(key) and bool(re.fullmatch(r"[A-Z][A-Z0-9_,|]*", value)))
    )


def parse_invocation(line: int, argv: list[str]) -> Invocation:
    """Walk argv (the words after `tricklab`) as the parser would, noting what it would not take."""
    parser, path, problems = top_parser(), [], []
    positionals: list[str] = []
    values: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        word = argv[i].strip("[]()")
        i += 1
        if word.startswith("-") and len(word) > 1 and word != "--":
            name = word.split("=", 1)[0]
            known = options(parser)
            if name not in known:
                where = " ".join(["tricklab", *path])
                problems.append(f"`{where}` has no option {name}")
                continue
            action = known[name]
            taken: list[str] = []
            if "=" not in word and action.nargs != 0:
                many = action.nargs in ("*", "+")
                while i < len(argv) and not argv[i].strip("[]()").startswith("-"):
                    taken.append(argv[i])
                    i += 1
                    if not many:
                        break
            if "=" in word:
                taken = [word.split("=", 1)[1]]
            for value in taken if action.choices else ():
                for choice in value.strip("[]()").split("|"):  # `--format table|md|json`
                    if not placeholder(choice) and choice not in action.choices:
                        where = " ".join(["tricklab", *path])
                        problems.append(f"`{where} {name}` does not take {choice!r}")
            values.setdefault(name, []).extend(taken)
            continue
        subs = subcommands(parser)
        if subs and not positionals:
            alternatives = word.split("|")
            if all(a in subs for a in alternatives):
                path.append(alternatives[0])
                parser = subs[alternatives[0]]
                for other in alternatives[1:]:  # `profile model|step|loader --json`
                    rest = parse_invocation(line, [*path[:-1], other, *argv[i:]])
                    problems += rest.problems
                continue
            if re.fullmatch(r"[a-z][a-z-]*", word):
                where = " ".join(["tricklab", *path])
                problems.append(f"`{where}` has no command {word!r}")
                break
        positionals.append(argv[i - 1])
    return Invocation(line, path, parser, positionals, values, problems)


def runs_tricklab(segment: list[str], i: int) -> bool:
    """Whether segment[i], the word `tricklab`, is the command run (`tricklab ...`, `VAR=1
    tricklab ...`, `setsid tricklab`, `torchrun ... -m tricklab`), not an argument (a user name)."""
    before = segment[:i]
    return (
        all(re.fullmatch(r"[A-Z_]+=\S*", w) or w in ("time", "setsid") for w in before)
        or before[-1] == "-m"
    )


@cache
def invocations() -> tuple[Invocation, ...]:
    """Every `tricklab ...` in a code block or code span, and spans such as `speedrun --out D`."""
    found = []
    commands = set(subcommands(top_parser()))
    for snippet in (*shell_commands(), *inline_spans()):
        for segment in segments(snippet):
            runs = [
                i for i, w in enumerate(segment) if w == "tricklab" and runs_tricklab(segment, i)
            ]
            if runs:
                start = runs[0] + 1
            elif (
                not snippet.in_code_block
                and segment[0] in commands
                and len(segment) > 1
                and segment[1].startswith("--")
            ):
                start = 0
            else:
                continue
            argv = segment[start:]
            if argv:
                found.append(parse_invocation(snippet.line, argv))
    return tuple(found)


def report(problems: list[str]) -> str:
    return f"{page_name()} does not match the code:\n" + "\n".join(problems)


def line_of(offset: int, text: str | None = None) -> int:
    """The line of an offset into the README (or into prose(), which keeps its lines)."""
    return (readme_text() if text is None else text).count("\n", 0, offset) + 1


def at(line: int, message: str) -> str:
    return f"{page_name()}:{line}: {message}"


def clear_caches() -> None:
    for function in (readme_text, code_blocks, prose, inline_spans, shell_commands, invocations):
        function.cache_clear()
