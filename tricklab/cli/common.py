"""What every `tricklab` command shares: consoles, the one-line error, argument helpers.

The main CLI (main.py) and the command modules it registers (demo.py, speedrun.py,
ablate_sweep.py, results.py, profile.py, report.py) import from here, so no import cycle hides
behind a function-level import. Nothing here imports torch or Optuna at import time.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import logging
import os
import time
import typing
from pathlib import Path

from rich.console import Console
from rich.text import Text

from tricklab.core.errors import TrickLabError
from tricklab.core.paths import disk_full_error, first_missing, is_disk_full, new_numbered_dir
from tricklab.core.safeio import shown
from tricklab.recipe.yamlio import number_in_text

INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT: what a shell reports after Ctrl-C
RUNS_ROOT = Path("runs")  # where a command given no --out makes its new folder
STORAGE_HELP = (  # --storage of ablate, sweep, results
    "Optuna storage: sqlite:///file.db; journal:PATH / PATH.journal for several worker "
    "processes; postgresql+psycopg://USER@HOST/DB for several machines (pip install "
    "'tricklab[postgres]'). Default: sqlite in the experiment folder"
)

NARROWEST = 20  # columns: rich prints nothing at all at COLUMNS=0, and only letters at 5


def _ignore_unreadable_sizes() -> None:
    """COLUMNS or LINES that rich would take for a number and int() refuses ('²', '①': digits to
    str.isdigit) made every command a traceback before its first line: such a value is ignored,
    as one that is no number at all is."""
    for name in ("COLUMNS", "LINES"):
        value = os.environ.get(name, "")
        if value.isdigit() and not value.isascii():
            del os.environ[name]


_ignore_unreadable_sizes()  # before the first Console reads them


def make_console(**options: object) -> Console:
    """A rich Console, at 80 columns where the terminal or $COLUMNS gives fewer than 20."""
    made = Console(**options)
    return made if made.width >= NARROWEST else Console(**{**options, "width": 80})


# Markup off: class names, paths, keys and error texts print as they are ("list[int]" included).
console = make_console(markup=False)
err_console = make_console(stderr=True, markup=False)


def wide_console(stderr: bool = False) -> Console:
    """A console without markup; when not a terminal (a log, a pipe), wide enough not to wrap
    tables."""
    made = make_console(stderr=stderr, soft_wrap=True, markup=False)  # config ids as they are
    if made.is_terminal:
        return made
    return Console(stderr=stderr, soft_wrap=True, markup=False, width=200)


def print_error(message: str) -> None:
    """A user mistake: one line on stderr, whatever a file name in it holds (core/safeio.shown)."""
    err_console.print(
        Text.assemble(("error:", "bold red"), " ", shown(message)), highlight=False, soft_wrap=True
    )


def needs_command(parser: argparse.ArgumentParser, what: str) -> typing.Callable[..., int]:
    """The `func` of a command given without its sub-command: the help on stdout and one line on
    stderr naming what is missing, exit 2."""

    def missing(args: argparse.Namespace) -> int:
        parser.print_help()
        print_error(f"{parser.prog} needs {what}; the help above lists them")
        return 2

    return missing


def echo(console: Console, text: object, style: str | None = None, wrap: bool = False) -> None:
    """Output that names something from outside (a folder, a study, a recipe file): its control
    characters as escapes (core/safeio.shown), so a name cannot forge a line or reach the
    terminal; no emoji codes or highlighting read into it. One line, or with `wrap` (a paragraph)
    wrapped between words at the console's width."""
    console.print(shown(text), style=style, highlight=False, soft_wrap=not wrap, emoji=False)


class Parser(argparse.ArgumentParser):
    """argparse with a usage mistake as one line on stderr (not the usage block), exit 2. A long
    flag is taken only as spelt in full (`--seed 3` is no `--seeds 3`); sub-commands are made of
    this class too (add_subparsers' parser_class), so they refuse abbreviations alike."""

    def __init__(self, *args: typing.Any, **kwargs: typing.Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        print_error(f"{self.prog}: {message} (see {self.prog} --help)")
        raise SystemExit(2)


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> typing.Any:
    """The (sub-)parser of the command `args` ran: `tricklab profile loader`'s, not tricklab's."""
    for action in parser._actions:  # argparse names no public way to the sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if name in action.choices:
                return chosen_parser(action.choices[name], args)
    return parser


def unknown_flags(
    parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]
) -> typing.NoReturn:
    """Refuse the words no parser took, through the chosen command's parser (one line, exit 2),
    naming the closest flag it has: `--jsn` -> did you mean --json?"""
    command = chosen_parser(parser, args)
    flags = [f for a in command._actions for f in a.option_strings if f.startswith("--")]
    given = next((e.partition("=")[0] for e in extra if e.startswith("--")), None)
    prefixed = [flag for flag in flags if given and flag.startswith(given)]  # `--sto`: --storage
    close = prefixed if len(prefixed) == 1 else []
    close = close or (difflib.get_close_matches(given, flags, n=1, cutoff=0.6) if given else [])
    hint = f"; did you mean {close[0]}?" if close else ""
    command.error(f"unrecognized arguments: {' '.join(extra)}{hint}")


def int_number(text: str) -> int:
    """argparse's type for a whole number flag, read as a recipe field reads one: ASCII digits
    (`3`, `-1`), not Python's int() spellings `1_0`, `٣` or ` 3 `."""
    value = number_in_text(text)
    if value is None or not text.lstrip("+-").isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number in ASCII digits")
    return int(text)


def real_number(text: str) -> float:
    """argparse's type for a number flag, read as a recipe field reads one: YAML 1.2's decimal
    form (`0.5`, `1e-3`), not Python's float() spellings `1_0`, `٣`, `inf` or `nan`."""
    value = number_in_text(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number such as 0.5 or 1e-3")
    return value


def check_not_empty(args: argparse.Namespace, *options: str) -> None:
    """An empty --out, --study, ... is a mistake (an unset variable), not a request for the default.
    A folder or file name (--out, --study, ...) longer than file systems take (NAME_MAX, 255
    bytes) is refused here, before anything is made; a study name is one folder's name."""
    for option in options:
        value = getattr(args, option.lstrip("-").replace("-", "_"))
        if value is not None and not value.strip():
            raise TrickLabError(f"{option} is empty; give a value or leave it out")
        if value is None or option not in PATH_OPTIONS:
            continue
        long = next((p for p in value.split(os.sep) if len(os.fsencode(p)) > 255), None)
        if long is not None:
            raise TrickLabError(
                f"{option}: the name {long[:40]}... is {len(os.fsencode(long))} bytes, longer "
                "than file systems take (255)"
            )
        if option == "--study":
            from tricklab.experiments.rundirs import check_study_name

            check_study_name(value)


PATH_OPTIONS = ("--out", "--study", "study", "--csv", "--space")  # a path or a folder's name


def add_nproc(parser: argparse.ArgumentParser, what: str) -> None:
    """`--nproc N` of `train` and `speedrun`: `what` (e.g. "training") in N processes."""
    parser.add_argument(
        "--nproc",
        type=int_number,
        metavar="N",
        help=f"data-parallel {what} in N processes, one per GPU (CPU: per core), under torchrun",
    )


def recipe_and_overrides(words: list[str]) -> tuple[str | None, list[str]]:
    """Split positional words into an optional recipe (the first word, without '=') and
    key=value overrides."""
    words = list(words)
    recipe = words.pop(0) if words and "=" not in words[0] else None
    bad = [w for w in words if "=" not in w]
    if bad:
        raise TrickLabError(f"expected key=value overrides after the recipe, got '{bad[0]}'")
    return recipe, words


# What `models` and `profile model` let a user change of every model they name.
MODEL_OVERRIDE_KEYS = ("model.width", "model.widths", "data.image_size")


def split_words(words: list[str], what: str) -> tuple[list[str], list[str]]:
    """Positional words into names (no '=') and key=value overrides, names first."""
    names = [w for w in words if "=" not in w]
    overrides = [w for w in words if "=" in w]
    if names and overrides and words.index(overrides[0]) < words.index(names[-1]):
        raise TrickLabError(f"give the {what} before the key=value overrides")
    return names, overrides


def model_names_and_settings(words: list[str], command: str) -> tuple[list[str], typing.Any]:
    """The model names of `models` / `profile model`, and a Recipe holding their overrides of
    MODEL_OVERRIDE_KEYS (typed and checked as recipe fields are); any other key is refused."""
    from tricklab.recipe.schema import Recipe

    names, overrides = split_words(words, "model names")
    for override in overrides:
        key = override.partition("=")[0].strip()
        if key not in MODEL_OVERRIDE_KEYS:
            raise TrickLabError(
                f"{command} takes overrides of {', '.join(MODEL_OVERRIDE_KEYS)}, not {key!r}"
            )
    return names, Recipe().override(overrides)


def recipe_stem(recipe_name: str | None) -> str:
    """A recipe's name as a folder name: a file's stem without .yaml, `default` for none."""
    if not recipe_name:
        return "default"
    return Path(recipe_name).name.removesuffix(".yaml").removesuffix(".yml")


def new_run_folder(label: str) -> tuple[Path, Path]:
    """A new folder runs/<date>-<time>-<label> (numbered when taken: two commands started in the
    same second get two), and the outermost folder made for it, to remove if nothing is written."""
    outermost = first_missing(RUNS_ROOT)
    try:
        out = new_numbered_dir(RUNS_ROOT / f"{time.strftime('%Y%m%d-%H%M%S')}-{label}")
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(exc, RUNS_ROOT) from None
        raise TrickLabError(
            f"cannot make a new folder under {RUNS_ROOT}: {exc.strerror or exc}"
        ) from None
    return out, outermost or out


@contextlib.contextmanager
def quiet_optuna() -> typing.Iterator[None]:
    """Optuna logs every trial and storage it opens at INFO; keep it to warnings meanwhile."""
    import optuna  # here, not at the top: commands without Optuna (speedrun, train) start faster

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)


class _Notices(logging.Handler):
    """Log records marked `notice` (extra={"notice": True}) and warnings, as lines on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "notice", False) or record.levelno >= logging.WARNING:
            # a file or folder name in it is escaped: it cannot forge a line or reach the terminal
            err_console.print(
                shown(record.getMessage()),
                highlight=False,
                soft_wrap=True,
                markup=False,
                emoji=False,
            )


@contextlib.contextmanager
def say_notices(logger_names: tuple[str, ...] = ("tricklab",)) -> typing.Iterator[None]:
    """While a command runs, what library code marks for the user to hear of at once (a weights
    download: minutes, once) said on stderr; the library itself prints nothing. Warnings of those
    loggers (a skipped image, a damaged cache file) still print, as Python's last-resort handler
    would print them, with the names in them escaped."""
    handler = _Notices()
    saved = []
    for name in logger_names:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.addHandler(handler)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for logger, level in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
