"""Reading a recipe: the recipes shipped in the package (`tricklab recipes`), a recipe's YAML by
built-in name or path, its keys checked (with did-you-mean) and its values coerced to their
fields' types. The schema, and turning the data into a `Recipe`, is train/recipe.py's job."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from tricklab.core.errors import TrickLabError
from tricklab.recipe.coerce import coerce, shown
from tricklab.recipe.sections import SECTIONS
from tricklab.recipe.yamlio import describe_yaml_error, read_yaml, read_yaml_document, spelled

_BUILTIN = resources.files("tricklab.recipe").joinpath("builtin")  # the shipped recipes (YAML)


def builtin_recipes() -> dict[str, str]:
    """Name → first comment line (its description) of every recipe shipped in the package."""
    out = {}
    for entry in sorted(_BUILTIN.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            lines = entry.read_text(encoding="utf-8").splitlines()
            out[entry.name[:-5]] = lines[0].lstrip("# ").strip() if lines else ""
    return out


def builtin_recipe_text(name: str) -> str:
    """The YAML file of the built-in recipe `name`, as shipped."""
    return _BUILTIN.joinpath(f"{name}.yaml").read_text(encoding="utf-8")


def builtin_recipe_data(name: str) -> Any:
    """The built-in recipe `name`'s data as shipped, whatever files the current folder holds."""
    try:
        return read_yaml(builtin_recipe_text(name))
    except yaml.YAMLError as exc:
        raise TrickLabError(f"{name}: {describe_yaml_error(exc)}") from None


def read_recipe(name: str) -> tuple[Any, str]:
    """A YAML file's data, else a built-in recipe's (a folder named like one does not hide it),
    and the name errors give it."""
    if not name.strip():
        raise TrickLabError(
            "empty recipe name: give a built-in recipe (`tricklab recipes`) or a .yaml path"
        )
    path, builtin = Path(name), builtin_recipes()
    if name in builtin and not os.path.isfile(path):
        return builtin_recipe_data(name), name
    looks_like_a_path = path.suffix in (".yaml", ".yml") or "/" in name or os.sep in name
    if name in builtin or looks_like_a_path or os.path.lexists(path):
        return _numbers_as_typed(*read_yaml_document(path, "recipe file")), str(path)
    close = difflib.get_close_matches(name, builtin, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise TrickLabError(
        f"unknown recipe '{name}': {hint}built-in recipes: {', '.join(builtin)} (or give a .yaml path)"
    )


def _numbers_as_typed(data: Any, text: str) -> Any:
    """A recipe file's data (read from `text`) where a field that holds text keeps a number as
    typed there (`dir: 0o17` names the folder 0o17, not 15; `cache_dir: 1e3` not 1000.0), as an
    override's does."""
    as_typed = None
    for section, values in data.items() if isinstance(data, dict) else ():
        cls = SECTIONS.get(section)
        if cls is None or not isinstance(values, dict):
            continue  # from_dict names what is wrong
        for name, value in values.items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if number and name in _type_hints(cls) and takes_text(cls, name):
                as_typed = as_typed or spelled(text)
                values[name] = as_typed[section][name]
    return data


# Names other tools give recipe fields (the part after the dot), for the did-you-mean hint.
KEY_ALIASES = {
    **dict.fromkeys(("learning_rate", "lr_rate", "base_lr"), "optim.lr"),
    **dict.fromkeys(("wd", "l2", "decay"), "optim.weight_decay"),
    **dict.fromkeys(("optimizer", "opt"), "optim.name"),
    **dict.fromkeys(("bs", "batch", "batchsize", "train_batch_size"), "loader.batch_size"),
    **dict.fromkeys(("workers", "num_worker"), "loader.num_workers"),
    **dict.fromkeys(("scheduler", "lr_schedule", "lr_scheduler"), "schedule.name"),
    **dict.fromkeys(("warmup", "warmup_epochs", "warmup_steps"), "schedule.warmup_fraction"),
    **dict.fromkeys(("ema", "ema_momentum"), "tricks.ema_decay"),
    **dict.fromkeys(("amp", "fp16", "bf16", "mixed_precision", "dtype"), "tricks.precision"),
    **dict.fromkeys(("dataset", "data"), "data.name"),
    **dict.fromkeys(("root", "path", "data_dir", "data_root", "folder"), "data.dir"),
    **dict.fromkeys(("arch", "architecture", "network", "net", "backbone"), "model.name"),
    **dict.fromkeys(("max_epochs", "num_epochs", "n_epochs", "epoch"), "run.epochs"),
}


def check_key(key: str, keys: list[str], source: str) -> None:
    """TrickLabError unless `key` is one of `keys`, with the key it was likely meant to be: itself
    in lower case, the key of a name other tools use, the field of that name in another section,
    a field of the section whose name begins with it, else the closest spelling."""
    if key in keys:
        return
    section, _, name = key.lower().rpartition(".")  # keys are lower case
    close = [f"{section}.{name}"] if f"{section}.{name}" in keys else []
    close = close or ([KEY_ALIASES[name]] if KEY_ALIASES.get(name) in keys else [])
    close = close or [k for k in keys if k.split(".")[1] == name][:1]  # in another section
    close = close or [k for k in keys if section and k.startswith(f"{section}.{name}")][:1]
    close = close or difflib.get_close_matches(key, keys, n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else "; `tricklab tricks` lists every key"
    raise TrickLabError(f"{source}: unknown recipe key {shown(key)}{hint}")


def check_section(name: str, sections: list[str], keys: list[str], source: str) -> None:
    """An unknown top-level name: a field without its section, or a misspelt section."""
    if any(key.endswith(f".{name}") for key in keys):
        check_key(name, keys, source)  # names the field's section
    close = difflib.get_close_matches(name, sections, n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise TrickLabError(
        f"{source}: unknown recipe section {shown(name)}; {hint}sections: {', '.join(sections)}"
    )


def coerce_field(section_cls: type, section: str, name: str, value: Any, source: str) -> Any:
    """`value` as the type of field `name` of a recipe section (train/coerce.py), errors naming
    `source`."""
    spec = next(f for f in dataclasses.fields(section_cls) if f.name == name)
    tp = _type_hints(section_cls)[name]
    try:
        return coerce(f"{section}.{name}", value, spec, tp)
    except TrickLabError as exc:
        raise TrickLabError(f"{source}: {exc}") from None


def takes_text(section_cls: type, name: str) -> bool:
    """Whether field `name` of a recipe section holds text (str, or str | None)."""
    tp = _type_hints(section_cls)[name]
    return tp is str or (
        typing.get_origin(tp) in (typing.Union, types.UnionType) and str in typing.get_args(tp)
    )


@functools.cache
def _type_hints(section_cls: type) -> dict[str, Any]:
    """A section's field types, evaluated once: get_type_hints evaluates every annotation string
    on each call, which made a 10,000-value sweep space's check take minutes."""
    return typing.get_type_hints(section_cls)
