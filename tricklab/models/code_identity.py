"""What a user's model is, as one short hash: the code that builds and runs it, and its structure.

A study resumed after its model's code changed would pool the runs of two networks under one
name; experiments store this hash with the study and refuse a resume whose model hashes
otherwise. It covers

- the source files of your modules the model comes from: the factory's, those of your classes in
  the built model, and, as far as they reach, your modules those name (`import helpers`, `from
  blocks import Stem`), whole: a constant, a tensor made at import, a `functools.partial`, a
  decorator, a dataclass config in them is part of it. Not your modules: torch's, torchvision's,
  timm's, tricklab's, the standard library's and any installed package's (their version is the
  environment's);
- for code without a file (a notebook cell, `exec`, a script run as `__main__`, whose other lines
  are the experiment's, not the model's): the functions and classes themselves, as their source
  where Python has it (IPython keeps a cell's) or as compiled code, and the plain values they read;
- the model's structure: each submodule's class and settings (`extra_repr`), each parameter's and
  buffer's shape.

Source is hashed as Python's tokens: comments, blank lines, spacing, a string's quotes and a
trailing comma are not part of it; a docstring is. What the code reads from files, the
environment or a random draw at import is not part of it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import io
import itertools
import json
import sys
import sysconfig
import textwrap
import tokenize
import types
from collections.abc import Iterator
from pathlib import Path

from torch import nn

# Libraries whose code is not the user's: a new torch changes no study's model.
LIBRARIES = frozenset({"torch", "torchvision", "timm", "tricklab", "numpy", "builtins"})
MAX_MODULES = 200  # your modules a model reaches, at most
MAX_OBJECTS = 2000  # a bound on the walk through code without a file
MAX_ITEMS, MAX_VALUE_CHARS, MAX_DEPTH = 10_000, 100_000, 20  # of a plain value's text
# Values hashed as they are (containers of them too); any other object by its class's code.
PLAIN = (int, float, complex, str, bytes, bool, type(None), tuple, list, dict, set, frozenset)


def model_code_id(factory: object, model: nn.Module | None = None) -> str:
    """A 16-hex-digit hash of the code of `factory` and of what it reaches, and of `model`'s
    structure when given (None: a factory that cannot be built without real weights). It never
    raises: code that cannot be read is hashed by its error's name."""
    roots: list[object] = [factory]
    if model is not None:
        roots += [type(m) for m in model.modules()]
    try:
        parts = dict(_user_code(roots))
        if model is not None:
            parts["structure"] = _structure(model)
    except Exception as exc:  # RecursionError, a model's own property raising: still one hash
        parts = {"unreadable": type(exc).__name__}
    text = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def factory_of(builder: object) -> object:
    """The user's factory inside a registry builder (`functools.partial(build_own, name,
    factory)`), else the builder itself."""
    if isinstance(builder, functools.partial) and len(builder.args) == 2:
        return builder.args[1]
    return builder


def _structure(model: nn.Module) -> str:
    modules = [
        (name, f"{type(m).__module__}.{type(m).__qualname__}", _settings(m))
        for name, m in model.named_modules()
    ]
    tensors = [
        (name, list(t.shape)) for name, t in [*model.named_parameters(), *model.named_buffers()]
    ]
    return json.dumps([modules, tensors])


def _settings(module: nn.Module) -> str:
    """Its `extra_repr` (a conv's kernel and stride); yours may fail on the meta device's tensors."""
    try:
        return str(module.extra_repr())
    except Exception:
        return "?"


# ---------------------------------------------------------------- which code is yours


@functools.cache
def _library_folders() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(
        str(Path(paths[key]).resolve()) for key in ("stdlib", "platstdlib", "purelib", "platlib")
    )


@functools.lru_cache(maxsize=4096)  # asked for every global of every module walked
def _source_file(module: object) -> Path | None:
    """The .py file of one of your modules, or None: a library's, or a module without a file
    (a notebook, `exec`) or run as a script (`__main__`)."""
    if not isinstance(module, types.ModuleType) or module.__name__ == "__main__":
        return None
    file = getattr(module, "__file__", None)
    if _is_library(module.__name__) or not isinstance(file, str) or not file.endswith(".py"):
        return None
    path = Path(file).resolve()
    return path if path.is_file() else None


def _is_library(module_name: str) -> bool:
    """Whether a module is not yours: torch's and the like (LIBRARIES), the standard library's,
    or one installed (its file in the interpreter's library folders or a site-packages)."""
    if module_name.split(".")[0] in LIBRARIES or module_name in sys.stdlib_module_names:
        return True
    file = getattr(sys.modules.get(module_name), "__file__", None)
    if not isinstance(file, str):
        return False
    path = Path(file).resolve()
    inside = any(str(path).startswith(folder + "/") for folder in _library_folders())
    return inside or "site-packages" in path.parts or "dist-packages" in path.parts


def _module_of(obj: object) -> types.ModuleType | None:
    name = getattr(obj, "__module__", None)
    if not isinstance(name, str) and not isinstance(obj, (type, types.FunctionType)):
        name = getattr(type(obj), "__module__", None)  # an instance: its class's module
    return sys.modules.get(name) if isinstance(name, str) else None


def _user_code(roots: list[object]) -> Iterator[tuple[str, str]]:
    """(name, text) of your module files `roots` reach (whole, as tokens) and of the code without
    a file they reach (object by object)."""
    files: dict[str, types.ModuleType] = {}
    loose: list[tuple[str | None, object]] = []
    for root in roots:
        root, extra = _unwrap(root)
        loose += [(f"<factory {i}>", v) for i, v in enumerate(extra)]
        module = _module_of(root)
        if _source_file(module) is not None:
            files.setdefault(module.__name__, module)
        elif _is_users(root):
            loose.append((None, root))
    yield from _loose_code(loose, files)
    done: set[str] = set()
    while len(done) < min(len(files), MAX_MODULES):
        name = next(n for n in files if n not in done)
        done.add(name)
        path = _source_file(files[name])
        if path is None:
            continue
        yield f"module {name}", _tokens(_read_source(path))
        for value in list(vars(files[name]).values()):  # the modules it names, as far as they go
            module = value if isinstance(value, types.ModuleType) else _module_of(value)
            if module is not None and _source_file(module) is not None:
                files.setdefault(module.__name__, module)


def _read_source(path: Path) -> str:
    try:
        with tokenize.open(path) as file:  # its own encoding declaration
            return file.read()
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        return f"<unreadable: {type(exc).__name__}>"


def _loose_code(
    work: list[tuple[str | None, object]], files: dict[str, types.ModuleType]
) -> Iterator[tuple[str, str]]:
    """Code without a file, object by object: (qualified name, source or compiled code) of each
    function and class, and the plain values they read, through a class's bases and members, a
    function's defaults, closure and the names its code uses; your module files they reach are
    added to `files`."""
    seen: set[object] = set()
    while work and len(seen) < MAX_OBJECTS:
        name, obj = work.pop()
        obj, extra = _unwrap(obj)
        work += [(f"{name}.<bound {i}>", v) for i, v in enumerate(extra)]
        if isinstance(obj, PLAIN):
            if name is not None and name not in seen:
                seen.add(name)
                yield name, _value_text(obj)
            continue
        module = _module_of(obj)
        if _source_file(module) is not None:
            files.setdefault(module.__name__, module)
            continue
        if not _is_users(obj):
            if _is_users(type(obj)):  # an instance of your class: its class's code
                work.append((None, type(obj)))
            continue
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        qualname = f"{obj.__module__}.{obj.__qualname__}"
        yield qualname, _text(obj)
        if isinstance(obj, type):
            work += [(None, base) for base in obj.__mro__[1:]]
            work += [(f"{qualname}.{k}", v) for k, v in vars(obj).items() if not k.startswith("__")]
        else:
            work += _named_by(obj, qualname)


def _unwrap(obj: object) -> tuple[object, tuple[object, ...]]:
    """(the function or class inside, the values bound with it: a partial's arguments)."""
    if isinstance(obj, (staticmethod, classmethod)):
        return obj.__func__, ()
    if isinstance(obj, property):
        return obj.fget, ()
    if isinstance(obj, functools.partial):
        return obj.func, (obj.args, obj.keywords)
    return obj, ()


def _is_users(obj: object) -> bool:
    if not isinstance(obj, (type, types.FunctionType)):
        return False
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and not _is_library(module)


def _named_by(function: types.FunctionType, qualname: str) -> list[tuple[str, object]]:
    """What a function's code (nested functions included) reads by name: its module's globals,
    the attributes of modules among them, its defaults and its closure's values."""
    names: set[str] = set()
    codes = [function.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    module = function.__module__
    found = [(f"{module}.{n}", function.__globals__[n]) for n in sorted(names)
             if n in function.__globals__]  # fmt: skip
    for _, value in list(found):
        if isinstance(value, types.ModuleType) and _source_file(value) is None:
            space = vars(value)  # a module without a file of yours: what the code takes from it
            found += [(f"{value.__name__}.{n}", space[n]) for n in sorted(names) if n in space]
    found.append((f"{qualname}.<defaults>", (function.__defaults__, function.__kwdefaults__)))
    for i, cell in enumerate(function.__closure__ or ()):
        try:
            found.append((f"{qualname}.<closure {i}>", cell.cell_contents))
        except ValueError:  # a cell not filled yet
            pass
    return found


# ---------------------------------------------------------------- code and values as text


def _value_text(value: object, budget: list[int] | None = None, depth: int = 0) -> str:
    """A plain value as text that is the same in every process: numbers, text and containers of
    them as written, up to MAX_ITEMS values in all and MAX_DEPTH deep (a huge or self-holding
    list costs no more); another object as its class's name."""
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        return "..."
    if isinstance(value, (int, float, complex, str, bytes, bool, type(None))):
        try:
            return repr(value)[:MAX_VALUE_CHARS]
        except ValueError:  # an int past Python's digits limit for text
            return f"<int of {value.bit_length()} bits>" if isinstance(value, int) else "<?>"
    if isinstance(value, dict):
        items = itertools.islice(value.items(), MAX_ITEMS)
        inner = [
            f"{_value_text(k, budget, depth + 1)}: {_value_text(v, budget, depth + 1)}"
            for k, v in items
        ]
        return "{" + ", ".join(sorted(inner)) + "}"
    if isinstance(value, (tuple, list, set, frozenset)):
        inner = [_value_text(v, budget, depth + 1) for v in itertools.islice(value, MAX_ITEMS)]
        inner = sorted(inner) if isinstance(value, (set, frozenset)) else inner
        return f"{type(value).__name__}({', '.join(inner)})"
    return f"<{type(value).__qualname__}>"


def _text(obj: object) -> str:
    """Its source where Python has it (a notebook's cell), else its compiled code."""
    try:
        return _tokens(inspect.getsource(obj))
    except (OSError, TypeError):
        pass
    if isinstance(obj, type):
        members = [_unwrap(v)[0] for v in vars(obj).values()]
        return repr([_code(m.__code__) for m in members if isinstance(m, types.FunctionType)])
    return _code(obj.__code__) if isinstance(obj, types.FunctionType) else repr(obj)


def _code(code: types.CodeType) -> str:
    consts = [_const_text(c) for c in code.co_consts]
    return repr((code.co_code.hex(), consts, code.co_names, sys.version_info[:2]))


def _const_text(const: object) -> str:
    if isinstance(const, types.CodeType):
        return _code(const)
    return _value_text(const)  # a frozenset's order is the hash seed's: sorted there


def _tokens(source: str) -> str:
    """The source's tokens one space apart, without comments, blank lines and a trailing comma;
    a string literal as Python reads it (its quotes aside); the source as it is where it does not
    tokenize."""
    marks = {tokenize.NEWLINE: ";", tokenize.INDENT: "{", tokenize.DEDENT: "}"}
    try:
        tokens = tokenize.generate_tokens(io.StringIO(textwrap.dedent(source)).readline)
        kept = [t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL)]
    except (tokenize.TokenError, SyntaxError):
        return source
    words = []
    for token, after in zip(kept, [*kept[1:], None]):
        if token.string == "," and after is not None and after.string in ")]}":
            continue
        words.append(marks.get(token.type, _literal(token)))
    return " ".join(words)


def _literal(token: tokenize.TokenInfo) -> str:
    if token.type != tokenize.STRING:
        return token.string
    try:
        return repr(ast.literal_eval(token.string))
    except (ValueError, SyntaxError):  # an f-string
        return token.string
