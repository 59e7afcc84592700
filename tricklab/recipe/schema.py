"""The recipe: every setting of a run, grouped, typed, documented, loaded from YAML.

Each field (declared by section in recipe/sections.py) carries its one-line doc and, where it has
them, its allowed values, so that `tricklab tricks` can print the whole list and a bad override
names what would be valid. Defaults are plain PyTorch behaviour: a trick is off until a recipe
turns it on. This module builds a `Recipe` from them: from a mapping, YAML or overrides.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import json
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tricklab.core import safeio
from tricklab.core.errors import TrickLabError, expect_type, plain
from tricklab.core.paths import atomic_write
from tricklab.recipe.coerce import shown, type_name
from tricklab.recipe.load import builtin_recipes as builtin_recipes  # re-exported
from tricklab.recipe.load import check_key, check_section, coerce_field, read_recipe, takes_text
from tricklab.recipe.sections import (  # noqa: F401 (the sections and their bounds: public here)
    LOGGER_NAMES,
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_WIDTH,
    SECTIONS,
    AugConfig,
    DataConfig,
    LoaderConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    ScheduleConfig,
    TricksConfig,
    check_logger_names,
)
from tricklab.recipe.yamlio import dump_yaml, read_value


@dataclass
class Recipe:
    """Every setting of a training run. Build with `load_recipe`, change with `override`."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    aug: AugConfig = field(default_factory=AugConfig)
    tricks: TricksConfig = field(default_factory=TricksConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def __post_init__(self) -> None:
        self._check_sections()  # Recipe(run=5)

    def _check_sections(self) -> None:
        for section in dataclasses.fields(self):  # `recipe.optim = None` set by hand
            expect_type(
                getattr(self, section.name), section.default_factory, f"Recipe.{section.name}"
            )

    def to_dict(self) -> dict[str, dict[str, Any]]:
        self._check_sections()
        return dataclasses.asdict(self)

    def checked(self) -> Recipe:
        """The recipe read again from its values: a field set by hand (`recipe.run.epochs = "3"`)
        is checked as a file's or an override's (TrickLabError), a section (`recipe.run = None`)
        too (TypeError), and an attribute no field has (`recipe.optim.lrr = 0.5`, a typo that
        trained at the old lr) is an unknown key, as in an override."""
        for name, section in vars(self).items():
            if name not in SECTIONS:  # `recipe.optimm = ...`
                check_section(name, list(SECTIONS), all_keys(), "recipe")
            fields = {f.name for f in dataclasses.fields(SECTIONS[name])}
            for key in getattr(section, "__dict__", {}):
                if key not in fields:
                    check_key(f"{name}.{key}", all_keys(), "recipe")
        return Recipe.from_dict(self.to_dict(), source="recipe")

    def setting_key(self) -> str:
        """The recipe as JSON without run.seed: equal for every run of one setting."""
        data = self.to_dict()
        del data["run"]["seed"]
        return json.dumps(data, sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "recipe") -> Recipe:
        """A recipe from section -> field -> value; TrickLabError naming `source` if any is bad."""
        if not isinstance(data, dict):
            raise TrickLabError(
                f"{source}: expected a mapping of sections, got {type(data).__name__}"
            )
        data = plain(data)  # numpy's numbers and bools (np.True_) as Python's
        for name in data:
            if name not in SECTIONS:
                check_section(str(name), list(SECTIONS), all_keys(), source)
        sections = {}
        for name, section_cls in SECTIONS.items():
            values = {} if data.get(name) is None else data[name]  # `optim: []` is no section
            if not isinstance(values, dict):
                raise TrickLabError(
                    f"{source}: section '{name}' must be a mapping, got {type(values).__name__}"
                )
            for key in values:
                if f"{name}.{key}" not in _all_keys():
                    check_key(f"{name}.{key}", all_keys(), source)
            sections[name] = section_cls(
                **{k: coerce_field(section_cls, name, k, v, source) for k, v in values.items()}
            )
        recipe = cls(**sections)
        try:
            for section in sections.values():  # the cross-field rules, beside their fields
                if hasattr(section, "check"):
                    section.check(recipe)
        except TrickLabError as exc:
            raise TrickLabError(f"{source}: {exc}") from None
        return recipe

    def get(self, key: str) -> Any:
        expect_type(key, str, "Recipe.get's key")
        section, name = _split_key(key, "get")
        self._check_sections()
        return getattr(getattr(self, section), name)

    def override(self, assignments: typing.Iterable[str], source: str = "override") -> Recipe:
        """A new recipe with `dotted.key=value` assignments applied (values read as YAML);
        `source` names where they came from in errors (a sweep's space)."""
        lone = isinstance(assignments, (str, bytes))  # a lone string would be read letter by letter
        if lone or not isinstance(assignments, collections.abc.Iterable):
            raise TypeError(f"overrides are a list of 'key=value' strings, got {assignments!r}")
        assignments = list(assignments)
        for assignment in assignments:
            if not isinstance(assignment, str):
                raise TypeError(f"an override is a 'key=value' string, got {assignment!r}")
        data = self.to_dict()
        for assignment in assignments:
            key, sep, text = assignment.partition("=")
            if not sep or not key:
                raise TrickLabError(f"{source} '{assignment}' is not of the form key=value")
            key = key.strip()
            section, name = _split_key(key, source)
            if any("\udc80" <= c <= "\udcff" for c in text):  # the shell's bytes, no UTF-8
                raise TrickLabError(
                    f"{source}: {key}={shown(text)} holds bytes that are not UTF-8 text, which a "
                    "recipe (YAML, JSON) cannot keep: rename the file or folder, or link to it"
                )
            try:
                text_field = takes_text(SECTIONS[section], name)
                data[section][name] = read_value(text, text_field) if text.strip() else None
            except yaml.YAMLError:
                raise TrickLabError(
                    f"{source}: {key}={shown(text)} is not valid YAML (quote strings that "
                    "hold brackets, colons or '=')"
                ) from None
            except TrickLabError as exc:  # beyond yamlio's limits
                raise TrickLabError(f"{source}: {key}: {exc}") from None
        return Recipe.from_dict(data, source=source)

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = dump_yaml(self.to_dict())
        if path is not None:
            expect_type(path, (str, os.PathLike), "Recipe.to_yaml's path")
            where = safeio.shown(os.fspath(path))
            if not os.fspath(path).strip():
                raise TrickLabError("cannot write the recipe: the path is empty; name a file")
            if Path(path).is_dir():
                raise TrickLabError(f"cannot write the recipe to {where}: it is a folder")
            try:
                with atomic_write(Path(path)) as handle:
                    handle.write(text)
            except TrickLabError:  # a full disk: its own line
                raise
            except OSError as exc:
                raise TrickLabError(f"cannot write the recipe to {where}: {exc.strerror}") from None
        return text


def all_keys() -> list[str]:
    return list(_all_keys())


@functools.cache
def _all_keys() -> tuple[
    str, ...
]:  # asked once per key a recipe sets: a sweep's check reads 10,000s
    return tuple(f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls))


def field_table() -> list[dict[str, Any]]:
    """Every recipe field: key, type, default, allowed values, bounds, doc (`tricklab tricks`)."""
    rows = []
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            rows.append(
                {
                    "key": f"{section}.{f.name}",
                    "type": type_name(hints[f.name]),
                    "default": default,
                    "choices": list(f.metadata["choices"]) if f.metadata["choices"] else None,
                    "minimum": f.metadata["minimum"],
                    "maximum": f.metadata["maximum"],
                    "min_exclusive": f.metadata["min_exclusive"],
                    "max_exclusive": f.metadata["max_exclusive"],
                    "doc": f.metadata["doc"],
                }
            )
    return rows


def load_recipe(
    name_or_path: str | Path | None = None, overrides: typing.Iterable[str] | None = ()
) -> Recipe:
    """Defaults (None), a built-in recipe by name, or a YAML file; then `key=value` overrides."""
    expect_type(name_or_path, (str, os.PathLike, type(None)), "load_recipe's name_or_path")
    if name_or_path is None:
        recipe = Recipe()
    else:
        data, source = read_recipe(str(name_or_path))
        recipe = Recipe.from_dict({} if data is None else data, source=source)
    return recipe.override(() if overrides is None else overrides)


def _split_key(key: str, source: str) -> tuple[str, str]:
    check_key(key, all_keys(), source)
    section, _, name = key.partition(".")
    return section, name
