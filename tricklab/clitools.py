"""What every `tricklab` command shares: consoles, the one-line error, argument helpers.

The main CLI (cli.py) and the command modules it registers (speedrun.py, experiments/cli.py,
measure/profile_cli.py) import from here, never from each other, so no import cycle hides behind
a function-level import. Nothing here imports torch or Optuna.
"""

from __future__ import annotations

import argparse
import typing

from rich.console import Console
from rich.text import Text

from tricklab.errors import TrickLabError

INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT: what a shell reports after Ctrl-C

# Markup off: class names, paths, keys and error texts print as they are ("list[int]" included).
console = Console(markup=False)
err_console = Console(stderr=True, markup=False)


def wide_console(stderr: bool = False) -> Console:
    """A console without markup; when not a terminal (a log, a pipe), wide enough not to wrap
    tables."""
    made = Console(stderr=stderr, soft_wrap=True, markup=False)  # config ids print as they are
    if made.is_terminal:
        return made
    return Console(stderr=stderr, soft_wrap=True, markup=False, width=200)


def print_error(message: str) -> None:
    """A user mistake: one line on stderr."""
    err_console.print(
        Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=True
    )


class Parser(argparse.ArgumentParser):
    """argparse with a usage mistake as one line on stderr (not the usage block), exit 2."""

    def error(self, message: str) -> typing.NoReturn:
        print_error(f"{self.prog}: {message} (see {self.prog} --help)")
        raise SystemExit(2)


def check_not_empty(args: argparse.Namespace, *options: str) -> None:
    """An empty --out, --study, ... is a mistake (an unset variable), not a request for the default."""
    for option in options:
        value = getattr(args, option.lstrip("-").replace("-", "_"))
        if value is not None and not value.strip():
            raise TrickLabError(f"{option} is empty; give a value or leave it out")


def recipe_and_overrides(words: list[str]) -> tuple[str | None, list[str]]:
    """Split positional words into an optional recipe (the first word, without '=') and
    key=value overrides."""
    words = list(words)
    recipe = words.pop(0) if words and "=" not in words[0] else None
    bad = [w for w in words if "=" not in w]
    if bad:
        raise TrickLabError(f"expected key=value overrides after the recipe, got '{bad[0]}'")
    return recipe, words
