"""A recipe value checked against its field: type, allowed values and bounds; returned typed.

A field's metadata (doc, choices, minimum, maximum) is written beside it in recipe.py; this module
reads it, so that one bad value anywhere (a file, an override, a sweep space) gets the same line.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
import typing
from typing import Any

from tricklab.core.errors import TrickLabError
from tricklab.recipe.yamlio import number_in_text

INT_MAX = 2**31 - 1  # the bound of an int field that names none: C-sized for torch
SHOWN_CHARS = 60  # of a bad value in its error line

# YAML 1.1 words that PyYAML would read as booleans. Recipes are read with YAML 1.2's booleans
# (true/false only, see yamlio), so `tricks.compile: off` names the choice "off"; a bool field
# still takes these words, and true/false as text ("true", quoted) as it takes them unquoted.
_YAML11_BOOL_WORDS = {"on": True, "off": False, "yes": True, "no": False, "y": True, "n": False,
                      "true": True, "false": False}  # fmt: skip
_BAD = object()


def type_name(tp: Any) -> str:
    """`int`, `float | None`, `list[int] | None`: a field's type as `tricklab tricks` shows it."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return type_name(inner[0]) + " | None"
    if typing.get_origin(tp) is list:
        return f"list[{type_name(args[0])}]"
    return tp.__name__


def shown(value: Any) -> str:
    """`repr(value)`, cut to SHOWN_CHARS, so that a bad value of any size fits its error line."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4,300 digits (0x of 4,000 f's reads fine)
        return f"a number of {value.bit_length():,} bits"
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def coerce(key: str, value: Any, spec: dataclasses.Field, tp: Any) -> Any:
    """`value` as field `spec` (of type `tp`) holds it; TrickLabError naming `key` if it is not
    valid. Bounds hold for each item of a list field."""
    meta = spec.metadata
    optional = typing.get_origin(tp) in (typing.Union, types.UnionType)
    base = next(a for a in typing.get_args(tp) if a is not type(None)) if optional else tp
    if value is None:
        if optional:
            return None
        raise TrickLabError(f"{key} cannot be empty (expected {type_name(tp)})")
    if isinstance(value, bool) and {"on", "off"} <= set(meta["choices"] or ()):
        value = "on" if value else "off"  # a switch with more settings takes true and false too
    typed = _as_type(base, value)
    if typed is _BAD:
        allowed = f"one of {', '.join(meta['choices'])}" if meta["choices"] else type_name(tp)
        if base is float:
            allowed = f"a finite number ({allowed})"
        if typing.get_origin(base) is list and _as_type(base, [value]) is not _BAD:
            allowed += f", a list even of one: [{value}]"  # `run.loggers=jsonl`
        raise TrickLabError(f"{key}={shown(value)} is not valid; expected {allowed}")
    if meta["choices"] and typed not in meta["choices"]:
        raise TrickLabError(
            f"{key}={shown(value)} is not allowed; choose one of {', '.join(meta['choices'])}"
        )
    is_list = typing.get_origin(base) is list
    items = typed if is_list else [typed]
    item_type = typing.get_args(base)[0] if is_list else base
    each = ": each" if is_list else ""
    maximum = meta["maximum"]
    if maximum is None and item_type is int:
        maximum = INT_MAX
    low, high = meta["minimum"], maximum
    if low is not None and any(v < low or (v == low and meta["min_exclusive"]) for v in items):
        above = ">" if meta["min_exclusive"] else ">="
        raise TrickLabError(f"{key}={shown(value)}{each} must be {above} {low}")
    if high is not None and any(v > high or (v == high and meta["max_exclusive"]) for v in items):
        below = "<" if meta["max_exclusive"] else "<="
        raise TrickLabError(f"{key}={shown(value)}{each} must be {below} {high}")
    return typed


def _as_type(base: Any, value: Any) -> Any:
    if typing.get_origin(base) is list:
        (item,) = typing.get_args(base)
        if not isinstance(value, (list, tuple)):
            return _BAD
        items = [_as_type(item, v) for v in value]
        return _BAD if any(i is _BAD for i in items) else items
    if base is bool:
        if isinstance(value, str):
            return _YAML11_BOOL_WORDS.get(value.lower(), _BAD)
        return value if isinstance(value, bool) else _BAD
    if base is int:  # numpy's ints too (a notebook's np.arange), as Python ints
        integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        return int(value) if integral else _BAD
    if base is float:
        # a quoted number is text; an int of 400 digits overflows a float; numpy's floats count
        if isinstance(value, bool) or not isinstance(value, (str, numbers.Real)):
            return _BAD
        if isinstance(value, str):  # not float()'s `1_0`, ` 1` or non-ASCII digits
            value = number_in_text(value)
            if value is None:
                return _BAD
        try:
            value = float(value) + 0.0  # -0.0 is 0.0: one recipe, one study, one name
        except OverflowError:
            return _BAD
        return value if math.isfinite(value) else _BAD  # no NaN or infinity
    if base is str:
        return (
            str(value)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool)
            else _BAD
        )
    return _BAD
