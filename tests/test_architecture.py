"""The package's floors hold: every import points down (import-linter's layers contract in
pyproject.toml), no import cycle between modules, no module over 450 lines, no public function with
more than 8 parameters. docs/architecture.md says what each floor holds."""

from __future__ import annotations

import ast
import logging
import sys
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tricklab"
MAX_MODULE_LINES = 450
MAX_PARAMETERS = 8


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = config["contracts"]
    assert contract["type"] == "layers"
    return [name.strip() for layer in contract["layers"] for name in layer.split("|")]


def test_every_import_points_down_the_floors(monkeypatch):
    monkeypatch.chdir(ROOT)
    # lint_imports configures logging with dictConfig, which disables every logger that exists
    # (tricklab's too: later tests reading their records would find none); put them back.
    loggers = [logging.getLogger(n) for n in logging.root.manager.loggerDict]
    disabled = {logger: logger.disabled for logger in loggers}
    try:
        assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0
    finally:
        for logger, was in disabled.items():
            logger.disabled = was


def test_every_folder_and_top_module_of_the_package_stands_on_a_floor():
    tops = {
        f"tricklab.{p.stem if p.is_file() else p.name}"
        for p in PACKAGE.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
    }
    assert tops - set(_layers()) == set(), "add the new folder to a floor in pyproject.toml"


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), function-level imports
    included."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph.find_modules_directly_imported_by(module):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_between_modules():
    assert _cycles(grimp.build_graph("tricklab", cache_dir=None)) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(graph) == [["pkg.a", "pkg.b"]]


def test_no_module_is_over_450_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def _wide_functions() -> dict[str, int]:
    wide = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if node.name.startswith("_") and not node.name.startswith("__"):
                continue  # private: not part of any API
            args = node.args
            names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
            count = len([n for n in names if n not in ("self", "cls")])
            if count > MAX_PARAMETERS:
                wide[f"{path.relative_to(ROOT)}:{node.name}"] = count
    return wide


def test_no_public_function_takes_more_than_8_parameters():
    assert _wide_functions() == {}, "pass a small frozen dataclass"


def _text_opened_without_encoding(source: str) -> list[int]:
    """Lines of `source` that open a text file without `encoding=`: read or written as the
    locale says, so ASCII under LC_ALL=C (a built-in recipe with `×` in a comment failed there)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or any(k.arg == "encoding" for k in node.keywords):
            continue
        func = node.func
        mode_args = [k.value for k in node.keywords if k.arg == "mode"]
        if isinstance(func, ast.Name) and func.id == "open":
            mode_args += node.args[1:2]
        elif isinstance(func, ast.Attribute) and func.attr == "open":
            if isinstance(func.value, ast.Name) and func.value.id == "tarfile":
                continue  # binary whatever its mode says
            first = node.args[:1]
            mode_args += [
                a for a in first if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
            if not mode_args:
                continue  # an archive's member, a logger: no mode given
        elif not (isinstance(func, ast.Attribute) and func.attr in ("read_text", "write_text")):
            continue
        modes = [m.value for m in mode_args if isinstance(m, ast.Constant)]
        if not any("b" in str(mode) for mode in modes):
            found.append(node.lineno)
    return found


def test_the_encoding_finder_finds_text_opened_without_one():
    source = (
        "open(p)\nopen(p, 'rb')\nopen(p, 'w', encoding='utf-8')\np.read_text()\n"
        "p.write_text(t, encoding='utf-8')\np.open('a')\narchive.open(info)\n"
        "tarfile.open(fileobj=f, mode='r:')\n"
    )
    assert _text_opened_without_encoding(source) == [1, 4, 6]


def test_every_text_file_the_package_opens_names_its_encoding():
    unnamed = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in PACKAGE.rglob("*.py")
        for line in _text_opened_without_encoding(path.read_text(encoding="utf-8"))
    }
    assert unnamed == set(), 'add encoding="utf-8"'
