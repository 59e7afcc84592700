"""tricklab: train CIFAR-scale image classifiers fast and measure honestly which training tricks help.

    import tricklab
    recipe = tricklab.load_recipe("speedrun94", ["run.epochs=5"])
    result = tricklab.train(recipe)          # -> tricklab.RunResult

Names that need torch (train, RunResult, load_dataset, Dataset, build_model, list_models,
register_model) are imported on first use, so `import tricklab` (and the CLI's --help,
--version, `tricklab tricks`) starts without loading torch.
"""

import importlib

from tricklab.core.errors import TrickLabError
from tricklab.core.version import __version__
from tricklab.recipe.schema import Recipe, load_recipe

_LAZY = {
    "Dataset": "tricklab.data.sources",
    "load_dataset": "tricklab.data.sources",
    "build_model": "tricklab.models",
    "list_models": "tricklab.models",
    "register_model": "tricklab.models",
    "RunResult": "tricklab.training.api",
    "train": "tricklab.training.api",
}


# Subpackages reachable as attributes once asked for (`tricklab.experiments.ablate(...)`).
_SUBMODULES = {
    name: f"tricklab.{name}"
    for name in ("data", "demo", "experiments", "measure", "models", "profile", "report")
} | {"progress": "tricklab.core.progress", "speedrun": "tricklab.experiments.speedrun"}


def __getattr__(name: str):
    if name in _SUBMODULES:
        module = importlib.import_module(_SUBMODULES[name])
        globals()[name] = module
        return module
    if name not in _LAZY:
        raise AttributeError(f"module 'tricklab' has no attribute '{name}'")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "Dataset",
    "Recipe",
    "RunResult",
    "TrickLabError",
    "build_model",
    "list_models",
    "load_dataset",
    "load_recipe",
    "register_model",
    "train",
    "__version__",
]
