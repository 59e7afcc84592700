"""Tiny real studies for the report tests: the experiment runner on generated data, 1 epoch."""

import html
import re
from pathlib import Path

from tiny_recipe import TINY_SYNTHETIC

from tricklab.experiments import AblationPlan, Liveness, ablate
from tricklab.recipe.schema import load_recipe

TINY = [*TINY_SYNTHETIC, "optim.lr=0.2", "run.epochs=1"]
FAST = Liveness(poll_seconds=0.05)
# Four configurations (so Benjamini-Hochberg applies), one of which diverges (NaN loss).
VARY = {"tricks.label_smoothing": [0.1], "aug.flip": ["random"], "optim.lr": [1e12]}


def make_study(root: Path, name: str = "rep", seeds: int = 2, vary: dict | None = None) -> Path:
    """An ablation stored where `tricklab results NAME` looks for it from `root`
    (root/runs/experiments/NAME); returns that folder."""
    folder = root / "runs" / "experiments" / name
    ablate(
        AblationPlan(load_recipe(None, TINY), vary or VARY, seeds, study=name, out_dir=folder),
        liveness=FAST,
    )
    return folder


def md_rows(text, first_header, after=""):
    """The rows (dicts) of the first Markdown table whose header starts with `first_header`,
    after the line containing `after`."""
    lines = text.splitlines()
    begin = next(i for i, line in enumerate(lines) if after in line)
    start = next(i for i in range(begin, len(lines)) if lines[i].startswith(f"| {first_header} |"))
    header = [c.strip() for c in lines[start].strip("|").split(" | ")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [shown_cell(c.strip()) for c in line.strip().strip("|").split(" | ")]
        rows.append(dict(zip(header, cells)))
    return rows


def shown_cell(markdown: str) -> str:
    """A Markdown cell as a viewer shows it: backslash escapes and entities read."""
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown))
