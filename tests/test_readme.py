"""README.md and every page under docs/ say what the code does: every command and option they show
is one the CLI's parser accepts, every Python name they give imports (with the arguments it names),
every recipe key, recipe, dataset and model they use exists, every repository path and link they
name is there, every extra they install is declared. Nothing is trained or run here (that is
tests/test_docs_commands.py's job). A failure names the page and line; each check is shown to find
a mistake planted in a copy of the README.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import re
import typing
from pathlib import Path

import pytest
import readme_reading
from readme_reading import (
    PACKAGE_FOLDERS,
    REPO_FOLDERS,
    ROOT,
    all_option_strings,
    at,
    clear_caches,
    code_blocks,
    inline_spans,
    invocations,
    line_of,
    page_name,
    pages,
    placeholder,
    prose,
    reading,
    readme_text,
    report,
    segments,
    shell_commands,
    subcommands,
    top_parser,
)

from tricklab.core.errors import TrickLabError
from tricklab.data.names import DATASET_NAMES
from tricklab.recipe.load import builtin_recipes
from tricklab.recipe.schema import SECTIONS, all_keys, field_table, load_recipe

# ------------------------------------------------------------------ commands and options
# Options the README cites from other tools, each with where it is from.
FOREIGN_OPTIONS = {"--bn-momentum": "timm's train.py, which model.bn_momentum follows"}


def script_options(script: Path) -> set[str]:
    """The options a benchmark script's argparse declares (read from its source, not run)."""
    return set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", script.read_text(encoding="utf-8")))


def benchmark_options() -> set[str]:
    return set().union(*map(script_options, (ROOT / "benchmarks").glob("*.py")))


def benchmark_command_problems() -> list[str]:
    """`python benchmarks/loop_overhead.py --repeats 9 --progress`: options that script takes."""
    problems = []
    for snippet in (*shell_commands(), *inline_spans()):
        for segment in segments(snippet):
            scripts = [i for i, w in enumerate(segment) if re.fullmatch(r"benchmarks/\w+\.py", w)]
            if not scripts or not (ROOT / segment[scripts[0]]).is_file():
                continue  # a missing script is path_problems' to report
            script = segment[scripts[0]]
            known = script_options(ROOT / script)
            for word in segment[scripts[0] + 1 :]:
                option = word.strip("[]()").split("=", 1)[0]
                if option.startswith("--") and option not in known:
                    problems.append(at(snippet.line, f"{script} has no option {option}"))
    return problems


def command_problems() -> list[str]:
    return [at(inv.line, problem) for inv in invocations() for problem in inv.problems]


def lone_option_problems() -> list[str]:
    """A `--option` span in the text (`--out DIR` picks the folder) names an option of some
    tricklab command or benchmark script."""
    known = all_option_strings() | set(FOREIGN_OPTIONS) | benchmark_options()
    problems = []
    for span in inline_spans():
        first = span.text.split(" ", 1)[0].split("=", 1)[0]
        if re.fullmatch(r"--[a-z][a-z0-9-]*", first) and first not in known:
            problems.append(at(span.line, f"no tricklab command has the option {first}"))
    return problems


# ------------------------------------------------------------------ recipes, datasets, models
RECIPE_KEY = re.compile(r"(?<![\w./-])(" + "|".join(SECTIONS) + r")\.([a-z_*]+)(?==|: |$)", re.M)


def recipe_key_problems() -> list[str]:
    """`section.field=...`, `section.field: ...` and a span that is just `section.field`."""
    keys = set(all_keys())
    problems = set()
    texts = [(s.line, s.text) for s in (*shell_commands(), *inline_spans())]
    console = {  # a console block's lines: its commands are read above, its output is output
        start + offset
        for lang, start, body in code_blocks()
        if lang == "console"
        for offset in range(len(body))
    }
    texts += [
        (n, line) for n, line in enumerate(readme_text().splitlines(), start=1) if n not in console
    ]
    for line, text in texts:
        for match in RECIPE_KEY.finditer(text):
            key = match.group(0)
            if key.endswith("*"):  # `run.early_stopping_*`, `aug.*`
                if not any(k.startswith(key[:-1]) for k in keys):
                    problems.add(at(line, f"no recipe key matches {key}"))
            elif key not in keys:
                problems.add(at(line, f"{key} is no recipe key"))
    return sorted(problems, key=lambda p: int(p.split(":")[1]))


def recipe_name_problems() -> list[str]:
    """A command's RECIPE, --recipe, --baseline's first word and load_recipe's first argument
    are built-in recipes, and the recipes table lists every built-in one."""
    named = []
    for inv in invocations():
        if inv.path in (["train"], ["profile", "step"]) and inv.positionals:
            named.append((inv.line, inv.positionals[0]))
        for option in ("--recipe", "--baseline"):
            named += [(inv.line, v) for v in inv.option_values.get(option, [])[:1]]
    for match in re.finditer(r"load_recipe\(\"([^\"]+)\"", readme_text()):
        named.append((line_of(match.start()), match.group(1)))
    shipped = set(builtin_recipes())
    problems = [
        at(line, f"no built-in recipe {word!r}")
        for line, word in named
        if "=" not in word
        and not placeholder(word)
        and word not in shipped
        and not word.endswith((".yaml", ".yml"))  # a recipe file the page writes
    ]
    if "| recipe | what it is |" not in readme_text():
        return problems
    start = readme_text().index("| recipe | what it is |")
    table = readme_text()[start:].split("\n\n", 1)[0]
    listed = {
        name for pair in re.findall(r"^\| \[?`([\w-]+)`|, `([\w-]+)`", table, re.M) for name in pair
    }
    problems += [
        at(line_of(start), f"the recipes table leaves out {name!r}")
        for name in sorted(shipped - listed)
    ]
    return problems


def command_recipes() -> list[tuple[int, str | None, list[str]]]:
    """(line, recipe, overrides) of every recipe a train/speedrun/ablate/sweep/profile command
    builds as written: an ablation's baseline and the baseline with each value of each --vary;
    commands with a placeholder (RECIPE, KEY=V1,V2, optim.lr=...) left out."""
    from tricklab.experiments import parse_vary

    found = []
    for inv in invocations():
        words = inv.positionals
        if inv.path in (["ablate"], ["sweep"]):
            words = inv.option_values.get("--baseline", []) + words
        elif inv.path in (["speedrun"], ["profile", "loader"], ["profile", "model"]):
            default = ["speedrun94"] if inv.path == ["speedrun"] else []
            words = (inv.option_values.get("--recipe") or default) + [w for w in words if "=" in w]
        elif inv.path not in (["train"], ["profile", "step"]):
            continue
        recipe = words[0] if words and "=" not in words[0] else None
        overrides = [w for w in words if "=" in w]
        if (recipe is not None and placeholder(recipe)) or any(map(placeholder, overrides)):
            continue
        if recipe is not None and recipe.endswith((".yaml", ".yml")):
            continue  # a recipe file the page writes first; test_docs_commands.py runs it
        if recipe is None and not overrides:
            continue
        found.append((inv.line, recipe, overrides))
        vary = [v for v in inv.option_values.get("--vary", []) if not placeholder(v)]
        for key, values in parse_vary(vary).items():
            found += [(inv.line, recipe, [*overrides, f"{key}={value}"]) for value in values]
    return found


def recipe_load_problems() -> list[str]:
    problems = []
    for line, recipe, overrides in command_recipes():
        try:
            load_recipe(recipe, overrides)
        except TrickLabError as exc:
            problems.append(at(line, f"{recipe or ''} {' '.join(overrides)}: {exc}"))
    return problems


CHOICE_LIST = re.compile(
    r"`(" + "|".join(SECTIONS) + r")\.(\w+)`\s+([\w-]+(?:\s+\|\s+[\w-]+)+)", re.S
)


def choice_list_problems() -> list[str]:
    """`tricks.tta` none | flip | flip-translate: each value listed is one the field allows, and
    the Datasets section names every dataset."""
    choices = {row["key"]: row["choices"] or [] for row in field_table()}
    problems = []
    for match in CHOICE_LIST.finditer(prose()):
        key = f"{match.group(1)}.{match.group(2)}"
        for value in re.split(r"\s+\|\s+", match.group(3)):
            if value not in choices.get(key, []):
                line = line_of(match.start(), prose())
                problems.append(at(line, f"{key} does not allow {value!r}"))
    if page_name() == "docs/datasets.md":  # the page of datasets names every one
        problems += [
            at(1, f"the datasets page leaves out {name}")
            for name in DATASET_NAMES
            if f"`{name}`" not in prose()
        ]
    return problems


def dataset_problems() -> list[str]:
    problems = []
    for inv in invocations():
        if inv.path in (["data", "show"], ["profile", "loader"]) and inv.positionals:
            name = inv.positionals[0]
            if not placeholder(name) and "=" not in name and name not in DATASET_NAMES:
                problems.append(at(inv.line, f"no dataset {name!r}"))
    for match in re.finditer(r"data\.name=([a-z0-9-]+)", readme_text()):
        if match.group(1) not in DATASET_NAMES:
            problems.append(at(line_of(match.start()), f"no dataset {match.group(1)!r}"))
    return problems


def model_problems() -> list[str]:
    """The models a `profile model` or `models` command names, and the list under Recipes."""
    from tricklab.models import list_models

    registered = {info.name for info in list_models()}
    problems = [
        at(inv.line, f"no model {name!r}")
        for inv in invocations()
        if inv.path in (["profile", "model"], ["models"])
        for name in inv.positionals
        if "=" not in name and ":" not in name and not placeholder(name)
        if name not in registered
    ]
    if "\nModels (`tricklab models`" in readme_text():  # docs/training.md's list of models
        start = readme_text().index("\nModels (`tricklab models`") + 1
        listed = re.findall(r"`([a-z0-9-]+)`", readme_text()[start:].split(";", 1)[0])
        assert len(listed) >= 8, "the Models paragraph lists fewer models than it did"
        problems += [at(line_of(start), f"no model {m!r}") for m in listed if m not in registered]
    return problems


# ------------------------------------------------------------------ Python names
def resolve(dotted: str) -> typing.Any:
    """What `import a.b` then `a.b.c` gives: attributes first (`tricklab.train` is the function),
    else the submodule of that name."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    return obj


PY_NAME = re.compile(r"^(\.?[a-z_][\w.]*)(\((.*)\))?( -> (\w+))?$")


def python_names() -> list[tuple[int, str, str | None, str | None]]:
    """(line, dotted name, argument text, returned class) of each `tricklab.x...` span; a span
    starting with a dot (`.profile_step.profile_step`) continues the package of the name before
    it on that line."""
    found, package = [], {}
    for span in inline_spans():
        match = PY_NAME.match(span.text)
        if not match or not span.text.startswith(("tricklab.", ".")):
            # a name inside code: `with tricklab.core.progress.ProgressDisplay(console): ...`
            for inner in re.finditer(r"(?<![\w.])tricklab(?:\.\w+)+", span.text):
                found.append((span.line, inner.group(0), None, None))
            continue
        name, args, returns = match.group(1), match.group(3), match.group(5)
        if name.startswith("."):
            if span.line not in package:
                continue
            name = package[span.line] + name
        else:
            package[span.line] = name.rsplit(".", 2)[0]
        found.append((span.line, name, args, returns))
    return found


def python_name_problems() -> list[str]:
    problems = []
    for line, name, args, returns in python_names():
        try:
            obj = resolve(name)
        except (ImportError, AttributeError) as exc:
            problems.append(at(line, f"{name} does not import ({exc})"))
            continue
        signature = inspect.signature(obj) if callable(obj) else None
        if args is not None and signature is not None:
            for arg in re.split(r",\s*", re.sub(r"\([^()]*\)", "", args)):  # a nested call
                arg = arg.split("=", 1)[0].strip()  # whole: `ablate(AblationPlan(...))`
                if re.fullmatch(r"[a-z_]\w*", arg) and arg not in signature.parameters:
                    problems.append(at(line, f"{name}() has no parameter {arg!r}"))
        if returns is not None and signature is not None:
            annotation = signature.return_annotation  # a string under postponed annotations
            if getattr(annotation, "__name__", annotation) != returns:
                problems.append(at(line, f"{name}() does not return {returns}"))
    return problems


def example_problems() -> list[str]:
    """The Python examples call tricklab's functions with arguments they take, and read fields
    a RunResult has (those its comment lists too)."""
    import tricklab

    fields = {f.name for f in dataclasses.fields(tricklab.RunResult)}
    problems = []
    for lang, start, body in code_blocks():
        if lang != "python":
            continue
        for node in ast.walk(ast.parse("\n".join(body))):
            line = start + getattr(node, "lineno", 1) - 1
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if isinstance(owner, ast.Name) and owner.id == "tricklab":
                    keywords = {k.arg: k.value for k in node.keywords}
                    try:
                        inspect.signature(resolve(f"tricklab.{node.func.attr}")).bind(
                            *node.args, **keywords
                        )
                    except (TypeError, AttributeError, ImportError) as exc:
                        problems.append(at(line, f"tricklab.{node.func.attr}: {exc}"))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id == "result" and node.attr not in fields:
                    problems.append(at(line, f"RunResult has no field {node.attr}"))
        for offset, text in enumerate(body):
            if text.startswith("# RunResult:"):
                for word in re.findall(r"\b(?:status|[a-z]+_[a-z_]+)\b", text):
                    if word not in fields:
                        problems.append(at(start + offset, f"RunResult has no field {word}"))
    return problems


# ------------------------------------------------------------------ paths, extras, links
PATH = re.compile(
    r"(?<![\w./~$<-])((?:"
    + "|".join(re.escape(f) for f in (*REPO_FOLDERS, *PACKAGE_FOLDERS))
    + r")/[\w./-]*[\w/])"
)
BARE_FILE = re.compile(r"(?<![\w./~$<-])([a-z_]\w*\.(?:py|sh))\b")


def path_problems() -> list[str]:
    """Repository paths (`benchmarks/x.py`, `tricklab/training/`, `train/distributed.py`, a bare
    `clitools.py`) and relative links exist; airbench's own files are left alone."""
    problems = []
    for span in (*inline_spans(), *shell_commands()):
        for match in PATH.finditer(span.text):
            path = match.group(1)
            head = path.split("/", 1)[0]
            if head not in REPO_FOLDERS and "." not in path:
                continue  # `data/` alone is a word, not a path
            candidates = [ROOT / path, ROOT / "tricklab" / path]
            if not any(c.exists() for c in candidates):
                problems.append(at(span.line, f"no such file or folder {path}"))
        for match in BARE_FILE.finditer(span.text):
            name = match.group(1)
            if not name.startswith("airbench") and not any(ROOT.glob(f"*/**/{name}")):
                problems.append(at(span.line, f"no file named {name} in the repository"))
    base = readme_reading.README.parent if readme_reading.README.is_relative_to(ROOT) else ROOT
    for match in re.finditer(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme_text()):
        if not (base / match.group(1)).exists():
            problems.append(at(line_of(match.start()), f"the link {match.group(1)} leads nowhere"))
    return problems


def extra_problems() -> list[str]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = set(pyproject["project"]["optional-dependencies"])
    problems = []
    for number, line in enumerate(readme_text().splitlines(), start=1):
        for match in re.finditer(r"pip install[^`\n]*?(?:\.|tricklab)\[([\w,-]+)\]", line):
            problems += [
                at(number, f"no extra [{extra}] in pyproject.toml")
                for extra in match.group(1).split(",")
                if extra not in extras
            ]
    return problems


def github_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings (fenced blocks left out)."""
    outside, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside:
            outside.append(line)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", "\n".join(outside), re.M)
    }


def anchor_problems() -> list[str]:
    """`[...](#when-things-go-wrong)` and `[...](other.md#a-heading)` find their heading
    (GitHub's anchors)."""
    problems = [
        at(line_of(m.start()), f"no heading for #{m.group(1)}")
        for m in re.finditer(r"\]\(#([\w-]+)\)", readme_text())
        if m.group(1) not in github_anchors(readme_text())
    ]
    base = readme_reading.README.parent
    for m in re.finditer(r"\]\(([^)#:]+\.md)#([\w-]+)\)", readme_text()):
        target = base / m.group(1)
        if target.is_file() and m.group(2) not in github_anchors(target.read_text("utf-8")):
            problems.append(at(line_of(m.start()), f"no heading for {m.group(1)}#{m.group(2)}"))
    return problems


CHECKS = {
    "commands": command_problems,
    "lone options": lone_option_problems,
    "benchmark commands": benchmark_command_problems,
    "recipe keys": recipe_key_problems,
    "recipe names": recipe_name_problems,
    "recipes load": recipe_load_problems,
    "choice lists": choice_list_problems,
    "datasets": dataset_problems,
    "models": model_problems,
    "python names": python_name_problems,
    "examples": example_problems,
    "paths": path_problems,
    "extras": extra_problems,
    "anchors": anchor_problems,
}


# ------------------------------------------------------------------ the tests
def leaf_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> set[str]:
    """Every command the CLI runs: `train`, `data show`, `profile step`, ..."""
    subs = subcommands(parser)
    if not subs:
        return {" ".join(path)}
    return set().union(*(leaf_commands(p, (*path, name)) for name, p in subs.items()))


PAGES = pages()
PAGE_IDS = [str(p.relative_to(ROOT)) for p in PAGES]
PER_PAGE = [c for c in CHECKS if c != "recipes load"]  # that one is its own test below


def across_pages(function):
    """function() read on every page, as a list of (page, result)."""
    found = []
    for page in PAGES:
        with reading(page):
            found.append((page, function()))
    return found


@pytest.mark.parametrize("check", PER_PAGE)
@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_page_matches_the_code(page, check):
    """Commands and options the parser accepts, recipe keys, recipes, datasets, models, Python
    names, paths, links and extras that exist: each check on each page."""
    with reading(page):
        assert not (problems := CHECKS[check]()), report(problems)


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_command_recipe_with_its_overrides_and_varied_values_loads(page):
    with reading(page):
        assert not (problems := recipe_load_problems()), report(problems)


def test_the_pages_show_every_command_the_cli_has():
    shown = {" ".join(inv.path) for _, found in across_pages(invocations) for inv in found}
    commands = leaf_commands(top_parser())
    assert {"demo", "train", "data show", "profile step"} <= commands
    assert not commands - shown, f"no page shows tricklab {sorted(commands - shown)}"


def test_the_pages_build_many_recipes_and_list_many_field_values():
    """The loading and choice checks have something to check: the commands of every section."""
    assert sum(len(found) for _, found in across_pages(command_recipes)) > 40
    assert sum(len(CHOICE_LIST.findall(text)) for _, text in across_pages(prose)) >= 6


def test_the_readme_jobs_table_names_a_python_function_for_each_job():
    table = readme_text().split("## What is in it", 1)[1].split("\n\n", 2)[1]
    first = line_of(readme_text().index(table))
    in_table = [n for n in python_names() if first <= n[0] <= first + table.count("\n")]
    assert len(in_table) >= 12  # every row's Python column, the profile row's three included
    assert not (problems := python_name_problems()), report(problems)


def test_the_readme_has_a_python_example():
    assert any(lang == "python" for lang, _, _ in code_blocks())


def test_the_readme_is_a_page_not_a_manual():
    assert len(readme_text().splitlines()) <= 250


def test_every_docs_page_is_linked_from_the_readme_or_another_page():
    linked = set()
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+\.md)", page.read_text("utf-8")):
            linked.add((page.parent / target).resolve())
    orphans = [name for page, name in zip(PAGES[1:], PAGE_IDS[1:]) if page.resolve() not in linked]
    assert not orphans, f"no page links to {orphans}"


def test_the_quick_start_commands_are_the_ones_ci_runs():
    """`.ci/run` installs and tests exactly as the Quick start says (its pip only quieter)."""
    blocks = [body for lang, _, body in code_blocks() if lang == "bash"]
    assert blocks[0][0] == (
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && tricklab demo"
    )
    test_command = next(body[0] for body in blocks if "pytest" in body[0])
    assert test_command.endswith('pip install -e ".[dev]" && pytest -q')
    ci = (ROOT / ".ci" / "run").read_text().splitlines()[-1]
    assert ci.replace("pip install -q ", "pip install ") == test_command


PLANTED = """
## Planted mistakes

```bash
tricklab speedrun --runz 3
python benchmarks/loop_overhead.py --repeat 3
tricklab sweep --space s.yaml --sampler bayes
tricklab profile steps
tricklab train speedrun99
tricklab train speedrun94 optim.lrr=0.1 tricks.precision=64-true
tricklab ablate --baseline speedrun94 --vary tricks.tta=mirror
tricklab data show cifar11
tricklab profile model resnet19
```

```python
result = tricklab.train(recipe, outdir="runs/x")
print(result.accuracy)
```

`tricks.tta` none | flip | mirror, `--no-such-option`, `tricklab.measure.nothing_here`, `with tricklab.core.progress.Nothing():`, `tricklab.demo.run_demo(out_folder)`,
`benchmarks/nothing.py`, `nothing_here.py`, `pip install -e ".[nothing]"`,
[here](#no-such-heading), [there](examples/none.py)
"""
# What each check must report: the planted line holding each of these texts.
PLANTED_AT = {
    "commands": ("--runz", "profile steps", "--sampler bayes"),
    "lone options": ("`--no-such-option`",),
    "benchmark commands": ("--repeat 3",),
    "recipe keys": ("optim.lrr",),
    "recipe names": ("train speedrun99",),
    "recipes load": ("train speedrun99", "optim.lrr", "tricks.tta=mirror"),
    "choice lists": ("| mirror",),
    "datasets": ("cifar11",),
    "models": ("resnet19",),
    "python names": ("nothing_here`", "progress.Nothing"),
    "examples": ("outdir=", "result.accuracy"),
    "paths": ("benchmarks/nothing.py", "(examples/none.py)"),
    "extras": ('".[nothing]"',),
    "anchors": ("#no-such-heading",),
}


@pytest.fixture
def planted_readme(tmp_path, monkeypatch):
    real = readme_reading.README.read_text(encoding="utf-8")
    copy = tmp_path / "README.md"
    copy.write_text(real + PLANTED, encoding="utf-8")
    monkeypatch.setattr(readme_reading, "README", copy)
    clear_caches()
    yield copy.read_text(encoding="utf-8").splitlines()
    clear_caches()


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_each_check_finds_the_error_planted_for_it_and_names_its_line(planted_readme, check):
    reported = {int(problem.split(":")[1]) for problem in CHECKS[check]()}
    for text in PLANTED_AT[check]:
        (line,) = [n for n, row in enumerate(planted_readme, start=1) if text in row]
        assert line in reported, f"{check}: README.md:{line} ({text}) not reported"
