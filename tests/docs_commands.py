"""Running the commands of README.md and docs/**/*.md, for tests/test_docs_commands.py.

The convention (docs/contributing.md says it for writers):

- A fenced ```bash block holds commands; each is run, in order, in one scratch folder per page
  (so a page's later blocks see what its earlier blocks wrote), and must exit 0. Continuation
  lines (`\\`) are joined; `# comments` are dropped.
- A ```console block holds `$ command` lines, each followed by what it prints; where that output
  shows an `error: ...` line, the command must exit 2 and print that line on stderr.
- Output shown as output goes in ```text blocks (never run).
- An HTML comment on the line right above the fence (GitHub does not show it) changes how a
  block runs:
    `<!-- docs-test: append WORDS -->`: WORDS are appended to each `tricklab` command of the
      block that takes them (an option the command has, with its value; `key=value` recipe
      overrides where the command takes overrides). A later option or override wins, so this
      shrinks a command to test size (`data.train_size=256 --budget-epochs 1`) or turns a long
      job into its check (`--dry-run`). `tiny` stands for TINY below.
    `<!-- docs-test: skip REASON -->`: not run (installs, servers, several GPUs, benchmarks of
      minutes); the static checks of tests/test_readme.py still read it. Keep these rare.
- `tricklab ...` (also `tricklab ... > FILE`) runs in this process (torch is imported once for
  all); a command with other shell syntax (`|`, `&&`, a loop) or another program runs under bash with the venv's `tricklab`
  first on PATH, as written (nothing appended). The scratch folder has `examples/`, `benchmarks/` and `../shared` linked in, as
  the repository's root folder has. A command naming `../shared/data` is skipped where that
  folder is absent (as the tests that use it are).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

# `append tiny`: a run of a second or two on a shared CPU (tests/tiny_recipe.py's data sizes).
TINY = (
    "data.name=synthetic data.train_size=256 data.test_size=128 data.image_size=16 "
    "loader.batch_size=64 loader.eval_batch_size=128 run.device=cpu run.epochs=1 "
    "--budget-epochs 1 --runs 1 --warmup-epochs 0 --repeats 2"
)
TAKES_OVERRIDES = {
    "train",
    "speedrun",
    "ablate",
    "sweep",
    "profile step",
    "profile loader",
    "profile model",
    "models",
}
SHELL_SYNTAX = re.compile(r"[|><;&`]|\$\(|^\s*(for|while|if)\b")
MARKER = re.compile(r"^<!--\s*docs-test:\s*(append|skip)\s*(.*?)\s*-->\s*$")


@dataclasses.dataclass(frozen=True)
class Command:
    page: Path
    line: int
    text: str
    append: tuple[str, ...]  # words the block's marker appends
    skip: str | None  # why it is not run
    expected_error: str | None  # a console block's `error: ...` line

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def commands(page: Path) -> list[Command]:
    """Every command of the page's bash and console blocks, with its block's marker."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = lines[i]
        if not fence.startswith("```"):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        lang = fence[3:].strip()
        marker = MARKER.match(lines[i - 1]) if i else None
        kind, words = (marker.group(1), marker.group(2)) if marker else (None, "")
        append = tuple(expand(words)) if kind == "append" else ()
        skip = words or "no reason given" if kind == "skip" else None
        body = list(enumerate(lines[i + 1 : end], start=i + 2))
        if lang in ("bash", "sh", "shell"):
            found += [Command(page, n, t, append, skip, None) for n, t in join_lines(body)]
        elif lang == "console":
            found += console_commands(page, body, append, skip)
        i = end + 1
    return found


def expand(words: str) -> list[str]:
    """The marker's words, `tiny` spelled out."""
    return [
        w for word in shlex.split(words) for w in (shlex.split(TINY) if word == "tiny" else [word])
    ]


def join_lines(body: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """(line, command) with continuation lines joined and comments dropped."""
    out, pending, first = [], "", 0
    for number, line in body:
        if not pending:
            first = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command = re.sub(r"(^|\s)#.*$", "", pending + line).strip()
        pending = ""
        if command:
            out.append((first, command))
    return out


def console_commands(page: Path, body, append, skip) -> list[Command]:
    found = []
    for index, (number, line) in enumerate(body):
        if line.startswith("$ "):
            output = []
            for _, after in body[index + 1 :]:
                if after.startswith("$ "):
                    break
                output.append(after)
            error = next((o.strip() for o in output if o.startswith("error:")), None)
            found.append(Command(page, number, line[2:].strip(), append, skip, error))
    return found


# ------------------------------------------------------------------ running one
@dataclasses.dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


def split_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """`A=1 B=2 setsid time tricklab ...` -> ({A: 1, B: 2}, [tricklab, ...])."""
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    while words and words[0] in ("time", "setsid"):
        words.pop(0)
    return env, words


def command_path(argv: list[str]) -> str:
    """`profile step` for ['profile', 'step', ...], `train` for ['train', ...]."""
    return " ".join(argv[:2]) if argv and argv[0] in ("profile", "data") else argv[0]


def with_appended(argv: list[str], append: tuple[str, ...]) -> list[str]:
    """argv with the marker's words that its command takes."""
    from readme_reading import parse_invocation

    parser = parse_invocation(0, argv).parser
    known = {o: a for a in parser._actions for o in a.option_strings}
    options, overrides, i = [], [], 0
    while i < len(append):
        word = append[i]
        i += 1
        if word.startswith("--"):
            given = i < len(append) and not append[i].startswith("--") and "=" not in append[i]
            value = [append[i]] if given else []
            i += len(value)
            action = known.get(word)
            if action is not None and (action.nargs == 0) == (not value):
                options += [word, *value]
        elif "=" in word and command_path(argv) in TAKES_OVERRIDES:
            overrides.append(word)
    if command_path(argv) == "models":  # its overrides follow the names, before any option
        first = next((n for n, w in enumerate(argv) if w.startswith("-")), len(argv))
        return [*argv[:first], *overrides, *argv[first:], *options]
    return [*argv, *options, *overrides]


def redirect(words: list[str]) -> tuple[list[str], str | None]:
    """`tricklab ... > FILE`: the command's words and FILE (None without a redirect)."""
    if len(words) > 2 and words[-2] == ">":
        return words[:-2], words[-1]
    return words, None


def runs_in_shell(words: list[str], text: str) -> bool:
    """Whether the command needs bash: not tricklab, or shell syntax beyond one `> FILE`."""
    words, target = redirect(words)
    rest = text.rsplit(">", 1)[0] if target else text
    return not words or words[0] != "tricklab" or bool(SHELL_SYNTAX.search(rest))


def run_in_shell(command: Command, cwd: Path) -> Outcome:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(
        ["bash", "-c", f"set -eo pipefail; {command.text}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def scratch_folder(base: Path) -> Path:
    """A folder laid out like the repository's root for what the docs name from there."""
    work = base / "work"
    work.mkdir()
    for name in ("examples", "benchmarks"):
        (work / name).symlink_to(ROOT / name, target_is_directory=True)
    if SHARED.exists():
        (base / "shared").symlink_to(SHARED, target_is_directory=True)
    return work
