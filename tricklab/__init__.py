"""tricklab: train CIFAR-scale image classifiers fast and measure honestly which tricks help.

    import tricklab
    recipe = tricklab.load_recipe("speedrun94", ["run.epochs=5"])
    result = tricklab.train(recipe)          # -> tricklab.RunResult
"""

__version__ = "0.1.0"

from tricklab.data.sources import Dataset, load_dataset  # noqa: E402
from tricklab.errors import TrickLabError  # noqa: E402
from tricklab.models import build_model, list_models  # noqa: E402

# `train` the function shadows the `tricklab.train` subpackage as an attribute of this package;
# import submodules with `from tricklab.train import api` (which still works), not attribute access.
from tricklab.train.api import RunResult, train  # noqa: E402, I001
from tricklab.train.recipe import Recipe, load_recipe  # noqa: E402

__all__ = [
    "Dataset", "Recipe", "RunResult", "TrickLabError", "build_model", "list_models",
    "load_dataset", "load_recipe", "train", "__version__",
]
