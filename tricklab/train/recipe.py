"""The recipe: every setting of a run, grouped, typed, documented, loaded from YAML.

Each field carries its one-line doc and, where it has them, its allowed values, so that
`tricklab tricks` can print the whole list and a bad override names what would be valid.
Defaults are plain PyTorch behaviour: a trick is off until a recipe turns it on.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from tricklab.errors import TrickLabError


def _f(
    default: Any,
    doc: str,
    choices: tuple | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
) -> Any:
    """A recipe field with its doc, allowed values and bounds (inclusive)."""
    meta = {"doc": doc, "choices": choices, "minimum": minimum, "maximum": maximum}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class DataConfig:
    name: str = _f(
        "cifar10",
        "dataset source",
        ("cifar10", "cifar100", "mnist", "fashion-mnist", "svhn", "imagefolder", "synthetic"),
    )
    dir: str | None = _f(None, "folder holding the dataset files (default ~/.cache/tricklab/data)")
    train_size: int | None = _f(None, "seeded class-balanced subset of the train split", minimum=1)
    test_size: int | None = _f(None, "seeded class-balanced subset of the test split", minimum=1)
    image_size: int | None = _f(None, "resize images to this side length", minimum=1)
    val_fraction: float = _f(
        0.1, "held-out fraction when the source has no test split", minimum=0, maximum=1
    )
    cache_dir: str | None = _f(None, "decoded-dataset cache (default ~/.cache/tricklab)")
    seed: int = _f(
        0,
        "seed of the subsets, the held-out split and synthetic images; apart from run.seed, so "
        "runs of every seed are trained and scored on the same images",
        minimum=0,
        maximum=2**32 - 1,
    )


@dataclass
class ModelConfig:
    name: str = _f("resnet18", "model from the registry (`tricklab models`)")
    width: float = _f(1.0, "channel width multiplier", minimum=0)
    widths: list[int] | None = _f(None, "explicit per-stage widths (airbench nets)")
    pretrained: bool = _f(False, "load torchvision ImageNet weights (torchvision families)")
    bn_momentum: float | None = _f(
        None,
        "BatchNorm running-statistics momentum, PyTorch's meaning (weight of the new batch); "
        "unset: the model's own (0.1; airbench nets 0.4)",
        minimum=0,
        maximum=1,
    )
    whiten_bias_epochs: float = _f(
        0.0,
        "train the whitening conv's bias for this many whole epochs, then freeze it (airbench)",
        minimum=0,
    )


@dataclass
class OptimConfig:
    name: str = _f("sgd", "optimizer", ("sgd", "adam", "adamw", "rmsprop", "muon"))
    lr: float = _f(0.1, "peak learning rate (after lr_scaling)", minimum=0)
    momentum: float = _f(
        0.9,
        "momentum (sgd, muon; rmsprop and adam(w) keep PyTorch's defaults)",
        minimum=0,
        maximum=1,
    )
    nesterov: bool = _f(False, "Nesterov momentum (sgd)")
    weight_decay: float = _f(0.0, "L2 weight decay as PyTorch applies it", minimum=0)
    decoupled_weight_decay: bool = _f(
        False, "divide weight_decay by each group's lr so the decay per step ignores lr (airbench)"
    )
    no_decay_bn_bias: bool = _f(False, "no weight decay on normalization parameters and biases")
    bias_lr_mult: float = _f(
        1.0,
        "lr multiplier for normalization parameters (airbench's BatchNorm biases: 64); with "
        "optim.name=muon for every bias",
        minimum=0,
    )
    lr_scaling: str = _f(
        "none",
        "scale lr with batch size relative to reference_batch_size",
        ("none", "linear", "sqrt"),
    )
    reference_batch_size: int = _f(128, "batch size at which lr is given", minimum=1)
    muon_lr: float = _f(
        0.02, "Muon lr for conv filters (optim.name=muon; speedrun94-muon: 0.24)", minimum=0
    )
    muon_momentum: float = _f(0.95, "Muon momentum (optim.name=muon)", minimum=0, maximum=1)
    muon_ns_steps: int = _f(
        5,
        "Newton-Schulz iterations per Muon update (optim.name=muon; airbench94_muon: 3)",
        minimum=1,
        maximum=20,
    )
    fused: bool = _f(
        False, "fused optimizer step: one kernel for all parameters (sgd, adam, adamw)"
    )


@dataclass
class ScheduleConfig:
    name: str = _f(
        "constant",
        "lr schedule, stepped per iteration",
        ("constant", "step", "cosine", "piecewise-linear"),
    )
    warmup_fraction: float = _f(0.0, "linear warm-up from 0 over this fraction of steps", minimum=0)
    start_factor: float = _f(0.0, "piecewise-linear: lr factor at step 0", minimum=0)
    peak_fraction: float = _f(
        0.25, "piecewise-linear: fraction of steps at which lr peaks", minimum=0
    )
    final_factor: float = _f(0.0, "piecewise-linear/cosine: lr factor at the last step", minimum=0)
    milestones: list[float] = _f([0.5, 0.75], "step: fractions of training at which lr drops")
    gamma: float = _f(0.1, "step: lr factor at each milestone", minimum=0)


@dataclass
class LoaderConfig:
    kind: str = _f(
        "torch", "device: whole split on the device; torch: DataLoader", ("device", "torch")
    )
    batch_size: int = _f(128, "training batch size", minimum=1)
    eval_batch_size: int = _f(1024, "evaluation batch size", minimum=1)
    num_workers: int = _f(0, "torch loader worker processes", minimum=0, maximum=256)
    pin_memory: bool = _f(False, "torch loader: page-locked host memory")
    persistent_workers: bool = _f(False, "torch loader: keep workers between epochs")
    prefetch_factor: int | None = _f(None, "torch loader: batches prefetched per worker", minimum=1)
    drop_last: bool = _f(False, "drop the last incomplete training batch")
    storage_dtype: str = _f(
        "uint8", "device loader: dtype the split is kept in", ("uint8", "float16", "bfloat16")
    )


@dataclass
class AugConfig:
    flip: str = _f("none", "horizontal flip", ("none", "random", "alternating"))
    translate: int = _f(0, "random crop from images padded by this many pixels", minimum=0)
    pad_mode: str = _f("reflect", "padding for translate", ("reflect", "zeros"))
    cutout: int = _f(0, "side of the zeroed square (Cutout), 0 = off", minimum=0)
    cutout_inside: bool = _f(
        False, "Cutout square wholly inside the image (airbench96), not clipped at the border"
    )


@dataclass
class TricksConfig:
    label_smoothing: float = _f(0.0, "label smoothing of the cross-entropy", minimum=0, maximum=1)
    precision: str = _f(
        "32-true",
        "numeric precision",
        ("32-true", "16-mixed", "bf16-mixed", "16-true-bn32"),
    )
    channels_last: bool = _f(False, "NHWC memory format for model and inputs")
    compile: str = _f(
        "off", "torch.compile mode", ("off", "default", "reduce-overhead", "max-autotune")
    )
    matmul_precision: str = _f(
        "highest", "torch.set_float32_matmul_precision", ("highest", "high", "medium")
    )
    cudnn_benchmark: bool = _f(False, "cuDNN autotuning of convolution algorithms")
    ema_decay: float = _f(0.0, "EMA of weights, decay per update (0 = off)", minimum=0, maximum=1)
    ema_every: int = _f(1, "update the EMA every k steps", minimum=1)
    ema_warmup_epochs: float = _f(
        0.0, "epochs before the EMA starts (it copies the weights then; airbench: 3)", minimum=0
    )
    ema_decay_power: float = _f(
        0.0,
        "ramp the EMA decay as ema_decay x (step/total_steps)^power (airbench: 3); 0 = constant",
        minimum=0,
    )
    lookahead: bool = _f(False, "copy the EMA back into the model at each update (lookahead)")
    tta: str = _f("none", "test-time augmentation", ("none", "flip", "flip-translate"))


@dataclass
class RunConfig:
    epochs: float = _f(10.0, "training epochs (fractional allowed)", minimum=0)
    seed: int = _f(0, "seed of weights, data order and augmentation", minimum=0, maximum=2**32 - 1)
    device: str = _f("auto", "where to train", ("auto", "cuda", "mps", "cpu"))
    eval_every: float = _f(
        1.0,
        "evaluate every this many whole epochs (the last epoch always; 0: only the last)",
        minimum=0,
    )
    target_accuracy: float | None = _f(None, "record time-to-target at this val accuracy (0..1)")
    stop_at_target: bool = _f(False, "stop training when target_accuracy is reached")
    time_budget_seconds: float | None = _f(None, "stop training after this many train seconds")
    early_stopping_monitor: str = _f(
        "val_acc", "metric early stopping watches", ("val_acc", "val_loss")
    )
    early_stopping_patience: int = _f(
        0, "evaluations without improvement before stopping (0 = off)", minimum=0
    )
    early_stopping_min_delta: float = _f(
        0.0, "smallest change that counts as improvement", minimum=0
    )
    checkpoint: bool = _f(False, "write checkpoint.pt (weights) to the run directory")


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "optim": OptimConfig,
    "schedule": ScheduleConfig,
    "loader": LoaderConfig,
    "aug": AugConfig,
    "tricks": TricksConfig,
    "run": RunConfig,
}


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

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "recipe") -> Recipe:
        if not isinstance(data, dict):
            raise TrickLabError(
                f"{source}: expected a mapping of sections, got {type(data).__name__}"
            )
        sections = {}
        for name, section_cls in SECTIONS.items():
            values = data.get(name) or {}
            if not isinstance(values, dict):
                raise TrickLabError(f"{source}: section '{name}' must be a mapping")
            for key in values:
                _check_key(f"{name}.{key}", source)
            sections[name] = section_cls(
                **{k: _coerce(f"{name}.{k}", v, source) for k, v in values.items()}
            )
        for name in data:
            if name not in SECTIONS:
                _check_section(str(name), source)
        recipe = cls(**sections)
        _check_consistency(recipe, source)
        return recipe

    def get(self, key: str) -> Any:
        section, name = _split_key(key, "get")
        return getattr(getattr(self, section), name)

    def override(self, assignments: typing.Iterable[str]) -> Recipe:
        """A new recipe with `dotted.key=value` assignments applied (values read as YAML)."""
        data = self.to_dict()
        for assignment in assignments:
            key, sep, text = assignment.partition("=")
            if not sep or not key:
                raise TrickLabError(f"override '{assignment}' is not of the form key=value")
            section, name = _split_key(key.strip(), "override")
            try:
                data[section][name] = _read_value(text)
            except yaml.YAMLError:
                raise TrickLabError(
                    f"override: {key.strip()}={text!r} is not valid YAML (quote strings that "
                    "hold brackets, colons or '=')"
                ) from None
        return Recipe.from_dict(data, source="override")

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text


def all_keys() -> list[str]:
    return [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]


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
                    "type": _type_name(hints[f.name]),
                    "default": default,
                    "choices": list(f.metadata["choices"]) if f.metadata["choices"] else None,
                    "minimum": f.metadata["minimum"],
                    "maximum": f.metadata["maximum"],
                    "doc": f.metadata["doc"],
                }
            )
    return rows


def builtin_recipes() -> dict[str, str]:
    """Name → first comment line (its description) of every recipe shipped in the package."""
    out = {}
    for entry in sorted(resources.files("tricklab.recipes").iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            first = entry.read_text().splitlines()[0] if entry.read_text() else ""
            out[entry.name[:-5]] = first.lstrip("# ").strip()
    return out


def load_recipe(
    name_or_path: str | Path | None = None, overrides: typing.Iterable[str] = ()
) -> Recipe:
    """Defaults (None), a built-in recipe by name, or a YAML file; then `key=value` overrides."""
    if name_or_path is None:
        recipe = Recipe()
    else:
        text, source = _read_recipe_text(str(name_or_path))
        try:
            data = read_yaml(text) or {}
        except yaml.YAMLError as exc:
            mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
            where = (
                f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            )
            raise TrickLabError(
                f"{source}: not valid YAML{where} ({problem or type(exc).__name__})"
            ) from None
        except TrickLabError as exc:  # a key given twice
            raise TrickLabError(f"{source}: {exc}") from None
        recipe = Recipe.from_dict(data, source=source)
    return recipe.override(overrides)


def _read_recipe_text(name: str) -> tuple[str, str]:
    """A YAML file's text, else a built-in recipe's (a folder named like one does not hide it)."""
    if not name.strip():
        raise TrickLabError(
            "empty recipe name: give a built-in recipe (`tricklab recipes`) or a .yaml path"
        )
    path = Path(name)
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except UnicodeDecodeError:
            raise TrickLabError(f"recipe file {path} is not UTF-8 text") from None
        except OSError as exc:
            raise TrickLabError(f"cannot read recipe file {path}: {exc.strerror}") from None
    builtin = builtin_recipes()
    if name in builtin:
        return resources.files("tricklab.recipes").joinpath(f"{name}.yaml").read_text(), name
    if path.is_dir():
        raise TrickLabError(f"recipe file {path} is a folder, not a YAML file")
    if path.suffix in (".yaml", ".yml") or path.exists():
        raise TrickLabError(f"recipe file {path} does not exist")
    close = difflib.get_close_matches(name, builtin, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise TrickLabError(
        f"unknown recipe '{name}': {hint}built-in recipes: {', '.join(builtin)} (or give a .yaml path)"
    )


def _split_key(key: str, source: str) -> tuple[str, str]:
    _check_key(key, source)
    section, _, name = key.partition(".")
    return section, name


def _check_key(key: str, source: str) -> None:
    if key in all_keys():
        return
    close = difflib.get_close_matches(key, all_keys(), n=1, cutoff=0.5)
    if not close:  # a bare field name without its section: find the section
        close = [k for k in all_keys() if k.split(".")[1] == key.split(".")[-1]][:1]
    hint = f"; did you mean '{close[0]}'?" if close else "; `tricklab tricks` lists every key"
    raise TrickLabError(f"{source}: unknown recipe key '{key}'{hint}")


def _check_section(name: str, source: str) -> None:
    """An unknown top-level name: a field without its section, or a misspelt section."""
    if any(key.endswith(f".{name}") for key in all_keys()):
        _check_key(name, source)  # names the field's section
    close = difflib.get_close_matches(name, SECTIONS, n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise TrickLabError(
        f"{source}: unknown recipe section '{name}'; {hint}sections: {', '.join(SECTIONS)}"
    )


def _type_name(tp: Any) -> str:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _type_name(inner[0]) + " | None"
    if typing.get_origin(tp) is list:
        return f"list[{_type_name(args[0])}]"
    return tp.__name__


INT_MAX = 2**31 - 1  # the bound of an int field that names none


def _coerce(key: str, value: Any, source: str) -> Any:
    """Check `value` against the field's type, allowed values and bound; return it typed."""
    section, name = key.split(".")
    cls = SECTIONS[section]
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    tp = typing.get_type_hints(cls)[name]
    meta = f.metadata
    optional = typing.get_origin(tp) in (typing.Union, types.UnionType)
    base = next(a for a in typing.get_args(tp) if a is not type(None)) if optional else tp
    if value is None:
        if optional:
            return None
        raise TrickLabError(f"{source}: {key} cannot be empty (expected {_type_name(tp)})")
    typed = _as_type(base, value)
    if typed is _BAD:
        allowed = f"one of {', '.join(meta['choices'])}" if meta["choices"] else _type_name(tp)
        if base is float:
            allowed = f"a finite number ({allowed})"
        raise TrickLabError(f"{source}: {key}={value!r} is not valid; expected {allowed}")
    if meta["choices"] and typed not in meta["choices"]:
        raise TrickLabError(
            f"{source}: {key}={value!r} is not allowed; choose one of {', '.join(meta['choices'])}"
        )
    if meta["minimum"] is not None and typed < meta["minimum"]:
        raise TrickLabError(f"{source}: {key}={value!r} must be >= {meta['minimum']}")
    maximum = meta["maximum"]
    if maximum is None and base is int:
        maximum = INT_MAX  # counts and sizes: far beyond any real one, and C-sized for torch
    if maximum is not None and typed > maximum:
        raise TrickLabError(f"{source}: {key}={value!r} must be <= {maximum}")
    return typed


_BAD = object()


# YAML 1.1 words that PyYAML would read as booleans. Recipes (files and key=value alike) are read
# with YAML 1.2's booleans, true/false only, so `tricks.compile: off` names the choice "off";
# a bool field still takes these words (see _as_type).
_YAML11_BOOL_WORDS = {"on": True, "off": False, "yes": True, "no": False, "y": True, "n": False}


class _RecipeLoader(yaml.SafeLoader):
    """SafeLoader whose only booleans are true/false (YAML 1.2), refusing a key given twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise TrickLabError(f"'{key}' is given twice (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep)


_BOOL_TAG = "tag:yaml.org,2002:bool"
_RecipeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_RecipeLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def read_yaml(text: str) -> Any:
    """Recipe YAML (a file's text or one command-line value), read safely with YAML 1.2 booleans."""
    return yaml.load(text, Loader=_RecipeLoader)


def _read_value(text: str) -> Any:
    """A command-line value: empty is None, anything else is read as recipe YAML."""
    return read_yaml(text) if text.strip() else None


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
    if base is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _BAD
    if base is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                return _BAD
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok and math.isfinite(value) else _BAD  # no NaN or infinity
    if base is str:
        return (
            str(value)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool)
            else _BAD
        )
    return _BAD


def _check_consistency(recipe: Recipe, source: str) -> None:
    """Cross-field rules that one field's check cannot see."""
    t = recipe.run.target_accuracy
    if t is not None and not 0 < t <= 1:
        raise TrickLabError(f"{source}: run.target_accuracy={t} must be a fraction in (0, 1]")
    if recipe.run.stop_at_target and t is None:
        raise TrickLabError(f"{source}: run.stop_at_target=true needs run.target_accuracy")
    s = recipe.schedule
    if not 0 <= s.peak_fraction <= 1 or not 0 <= s.warmup_fraction <= 1:
        raise TrickLabError(f"{source}: schedule fractions must lie in [0, 1]")
    if not all(0 <= m <= 1 for m in s.milestones):
        raise TrickLabError(
            f"{source}: schedule.milestones={s.milestones} must be fractions of training in [0, 1]"
        )
    if recipe.tricks.ema_decay >= 1:
        raise TrickLabError(
            f"{source}: tricks.ema_decay must be < 1 (1 would never move the average)"
        )
    whole = {
        "run.eval_every": recipe.run.eval_every,
        "model.whiten_bias_epochs": recipe.model.whiten_bias_epochs,
    }
    for key, value in whole.items():  # the loop acts on them at epoch ends
        if value != int(value):
            raise TrickLabError(f"{source}: {key}={value} must be a whole number of epochs")
    if recipe.run.early_stopping_patience > 0 and recipe.run.eval_every == 0:
        raise TrickLabError(
            f"{source}: run.early_stopping_patience needs evaluations to watch; set run.eval_every >= 1"
        )
    budget = recipe.run.time_budget_seconds
    if budget is not None and not budget > 0:
        raise TrickLabError(
            f"{source}: run.time_budget_seconds={budget} must be > 0 (or empty: none)"
        )
    if recipe.tricks.precision == "16-true-bn32" and recipe.optim.name in (
        "adam",
        "adamw",
        "rmsprop",
    ):
        raise TrickLabError(
            f"{source}: tricks.precision=16-true-bn32 keeps {recipe.optim.name}'s state in fp16, where "
            "its eps (1e-8) rounds to 0 and the step divides by zero; use optim.name=sgd or muon, "
            "or tricks.precision=16-mixed / bf16-mixed"
        )
    if recipe.optim.fused and recipe.optim.name not in ("sgd", "adam", "adamw"):
        raise TrickLabError(
            f"{source}: optim.fused=true needs optim.name sgd, adam or adamw "
            f"(PyTorch has no fused {recipe.optim.name})"
        )
