"""airbench's published records, and whether a recipe is one of them as airbench ran it.

A built-in recipe that reproduces an airbench script names it here with airbench's own figures;
`tricklab speedrun` and `tricklab train` compare record seconds with them only for the recipe as
shipped (`as_airbench_ran_it`), where the data lies and the device aside.
"""

from __future__ import annotations

from dataclasses import dataclass

from tricklab.recipe.schema import Recipe, load_recipe


@dataclass(frozen=True)
class AirbenchRecord:
    """airbench's published result for the script a recipe reproduces (its README and the file's
    header; each recipe's YAML names the file). `seconds` is its total_time_seconds, which is
    record_seconds here: whitening fit + epochs + final TTA evaluation."""

    file: str  # in KellerJordan/cifar10-airbench
    seconds: float
    accuracy: float  # mean over `runs`
    runs: int
    device: str


AIRBENCH94 = AirbenchRecord("legacy/airbench94.py", 3.83, 0.9401, 1000, "A100")
AIRBENCH_RECORDS = {
    "speedrun94": AIRBENCH94,
    "seed4-airbench94": AIRBENCH94,
    "speedrun94-muon": AirbenchRecord("airbench94_muon.py", 2.59, 0.9401, 200, "A100 (400 W)"),
    "speedrun95": AirbenchRecord("legacy/airbench95.py", 10.4, 0.9501, 200, "A100"),
    "speedrun96": AirbenchRecord("legacy/airbench96.py", 34.7, 0.9603, 400, "A100"),
}


# What may differ from a built-in recipe whose time still compares with airbench's figure.
WHERE_FIELDS = {"data": ("name", "dir", "cache_dir"), "run": ("seed", "device")}


def as_airbench_ran_it(recipe: Recipe, recipe_name: str) -> bool:
    """Whether `recipe` is the built-in `recipe_name` that reproduces an airbench script, trained on
    the whole CIFAR-10 (downloaded, or the JPEG copy as an image folder): only where the data lies
    and the device differ. Only then do its record seconds compare with airbench's figure."""
    if recipe_name not in AIRBENCH_RECORDS or recipe.data.name not in ("cifar10", "imagefolder"):
        return False
    shipped, ours = load_recipe(recipe_name).to_dict(), recipe.to_dict()
    for data in (shipped, ours):
        for section, names in WHERE_FIELDS.items():
            data[section] = {k: v for k, v in data[section].items() if k not in names}
    return ours == shipped
