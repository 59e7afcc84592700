"""What a user's model is, as one short hash: the code that builds and runs it, and its structure.

A study resumed after its model's code changed would pool the runs of two networks under one
name; experiments store this hash with the study and refuse a resume whose model hashes
otherwise. It covers the factory, every class of the built model that is the user's (not
torch's, torchvision's, timm's or tricklab's), their bases, and the functions, classes and plain
values their code reads (a helper `forward` calls, `helpers.act`, `SCALE = 0.5`, a default
argument; another object by its class only; not what it reads from files), as source text where
Python has it (the same on every machine sharing a study) and as compiled code where not; and the
model's structure: each submodule's class and settings (`extra_repr`), each parameter's and
buffer's shape. Comments, blank lines and spacing within a line are not part of it (the source is
hashed as Python's tokens), nor is a part of the module the model never names.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import io
import itertools
import json
import sys
import textwrap
import tokenize
import types
from collections.abc import Iterator

from torch import nn

# Libraries whose code is not the user's: a new torch changes no study's model.
LIBRARIES = frozenset({"torch", "torchvision", "timm", "tricklab", "numpy", "builtins"})
MAX_OBJECTS = 500  # a bound on the walk through what the code names
MAX_ITEMS, MAX_VALUE_CHARS = 10_000, 100_000  # of a plain value's text
# Values hashed as they are (containers of them too); any other object as its class's name.
PLAIN = (int, float, complex, str, bytes, bool, type(None), tuple, list, dict, set, frozenset)


def model_code_id(factory: object, model: nn.Module | None = None) -> str:
    """A 16-hex-digit hash of the code of `factory` and of what it reaches, and of `model`'s
    structure when given (None: a factory that cannot be built without real weights)."""
    roots: list[object] = [factory]
    if model is not None:
        roots += [type(m) for m in model.modules()]
    parts = {name: text for name, text in _user_code(roots)}
    if model is not None:
        parts["structure"] = _structure(model)
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def factory_of(builder: object) -> object:
    """The user's factory inside a registry builder (`functools.partial(_build_own, name,
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


def _user_code(roots: list[object]) -> Iterator[tuple[str, str]]:
    """(qualified name, text) of each of the user's functions and classes `roots` are or reach
    (source or compiled code), and of the plain values their code reads (a module's `SCALE = 0.5`,
    a default argument): through a class's bases and members, a function's defaults, closure and
    the names its code uses, in its module or in your modules it names (`helpers.act`)."""
    seen: set[object] = set()
    work: list[tuple[str | None, object]] = [(None, root) for root in roots]
    while work and len(seen) < MAX_OBJECTS:
        name, obj = work.pop()
        obj = _unwrap(obj)
        if isinstance(obj, PLAIN):
            if name is not None and name not in seen:
                seen.add(name)
                yield name, _value_text(obj)
            continue
        if id(obj) in seen or not _is_users(obj):
            continue
        seen.add(id(obj))
        qualname = f"{obj.__module__}.{obj.__qualname__}"
        yield qualname, _text(obj)
        if isinstance(obj, type):
            work += [(None, base) for base in obj.__mro__[1:]]
            work += [(f"{qualname}.{k}", v) for k, v in vars(obj).items() if not k.startswith("__")]
        else:
            work += _named_by(obj, qualname)


def _unwrap(obj: object) -> object:
    if isinstance(obj, (staticmethod, classmethod)):
        return obj.__func__
    if isinstance(obj, property):
        return obj.fget
    if isinstance(obj, functools.partial):
        return obj.func
    return obj


def _is_users(obj: object) -> bool:
    if not isinstance(obj, (type, types.FunctionType)):
        return False
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and module.split(".")[0] not in LIBRARIES


def _is_users_module(obj: object) -> bool:
    if not isinstance(obj, types.ModuleType):
        return False
    top = obj.__name__.split(".")[0]
    return top not in LIBRARIES and top not in sys.stdlib_module_names


def _named_by(function: types.FunctionType, qualname: str) -> list[tuple[str, object]]:
    """What a function's code (nested functions included) reads by name: its module's globals,
    the attributes of your modules among them, its defaults and its closure's values."""
    names: set[str] = set()
    codes = [function.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    module = function.__module__
    found = [(f"{module}.{n}", function.__globals__[n]) for n in sorted(names)
             if n in function.__globals__]  # fmt: skip
    modules = [value for _, value in found if _is_users_module(value)]
    while modules and len(found) < MAX_OBJECTS:
        space = vars(modules.pop())
        reached = [(f"{space['__name__']}.{n}", space[n]) for n in sorted(names) if n in space]
        found += reached
        modules += [value for _, value in reached if _is_users_module(value)]
    found.append((f"{qualname}.<defaults>", (function.__defaults__, function.__kwdefaults__)))
    for i, cell in enumerate(function.__closure__ or ()):
        try:
            found.append((f"{qualname}.<closure {i}>", cell.cell_contents))
        except ValueError:  # a cell not filled yet
            pass
    return found


def _value_text(value: object, budget: list[int] | None = None) -> str:
    """A plain value as text that is the same in every process: numbers, text and containers of
    them as written, up to MAX_ITEMS values in all (a huge nested list costs no more); another
    object as its class's name (its code is hashed where it is yours)."""
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0:
        return "..."
    if isinstance(value, (int, float, complex, str, bytes, bool, type(None))):
        try:
            return repr(value)[:MAX_VALUE_CHARS]
        except ValueError:  # an int past Python's digits limit for text
            return f"<int of {value.bit_length()} bits>" if isinstance(value, int) else "<?>"
    if isinstance(value, dict):
        items = itertools.islice(value.items(), MAX_ITEMS)
        inner = [f"{_value_text(k, budget)}: {_value_text(v, budget)}" for k, v in items]
        return "{" + ", ".join(sorted(inner)) + "}"
    if isinstance(value, (tuple, list, set, frozenset)):
        inner = [_value_text(v, budget) for v in itertools.islice(value, MAX_ITEMS)]
        inner = sorted(inner) if isinstance(value, (set, frozenset)) else inner
        return f"{type(value).__name__}({', '.join(inner)})"
    return f"<{type(value).__qualname__}>"


def _text(obj: object) -> str:
    """Its source where Python has it (a module's file, a notebook's cell), else its compiled code."""
    try:
        return _tokens(inspect.getsource(obj))
    except (OSError, TypeError):
        pass
    if isinstance(obj, type):
        members = [_unwrap(v) for v in vars(obj).values()]
        return repr([_code(m.__code__) for m in members if isinstance(m, types.FunctionType)])
    return _code(obj.__code__) if isinstance(obj, types.FunctionType) else repr(obj)


def _code(code: types.CodeType) -> str:
    consts = [_code(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return repr((code.co_code.hex(), consts, code.co_names, sys.version_info[:2]))


def _tokens(source: str) -> str:
    """The source's tokens, without comments and blank lines, one space apart; the source as it
    is where it does not tokenize."""
    marks = {tokenize.NEWLINE: ";", tokenize.INDENT: "{", tokenize.DEDENT: "}"}
    try:
        tokens = tokenize.generate_tokens(io.StringIO(textwrap.dedent(source)).readline)
        kept = [t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL)]
        return " ".join(marks.get(t.type, t.string) for t in kept)
    except (tokenize.TokenError, SyntaxError):
        return source
