"""tricklab: train CIFAR-scale image classifiers fast and measure honestly which training tricks help.

    import tricklab
    recipe = tricklab.load_recipe("speedrun94", ["run.epochs=5"])
    result = tricklab.train(recipe)          # -> tricklab.RunResult

Names that need torch (train, RunResult, load_dataset, Dataset, build_model, list_models,
register_model) are imported on first use, so `import tricklab` (and the CLI's --help,
--version, `tricklab tricks`) starts without loading torch.
"""

import importlib

__version__ = "0.1.0"

from tricklab.errors import TrickLabError  # noqa: E402
from tricklab.train.recipe import Recipe, load_recipe  # noqa: E402

# Importing tricklab.train.recipe bound the `tricklab.train` subpackage as an attribute here; the
# name belongs to the function `tricklab.train(recipe)`. The subpackage stays importable
# (`from tricklab.train import api`), not reachable by attribute access.
del train  # noqa: F821

_LAZY = {
    "Dataset": "tricklab.data.sources",
    "load_dataset": "tricklab.data.sources",
    "build_model": "tricklab.models",
    "list_models": "tricklab.models",
    "register_model": "tricklab.models",
    "RunResult": "tricklab.train.api",
    "train": "tricklab.train.api",
}


# Subpackages reachable as attributes once asked for (`tricklab.experiments.ablate(...)`).
_SUBMODULES = ("data", "demo", "experiments", "measure", "models", "progress", "report", "speedrun")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"tricklab.{name}")  # the import binds it here too
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
