"""`tricklab demo`: a small honest study on the real CIFAR-10 images shipped with tricklab.

The scaled `speedrun94` baseline and three of its tricks switched off one at a time (channels_last
memory format, airbench's 64x learning rate for BatchNorm biases, label smoothing), each over the
same seeds with the same fixed budget (no early stopping), run with `tricklab.experiments.ablate` on
`data.name=cifar10-sample` (10,000 train / 2,000 test real JPEGs, no download), then written up by
`tricklab.report.write_report`. On a CPU the net is quarter width and trains in bf16 autocast where
the CPU has AMX, else fp32 (bf16 is emulated, so slow, there); on a GPU it keeps the recipe's
widths and precision.

The out folder holds the study (`study/study.db`, an Optuna SQLite file: `tricklab results demo
--storage OUT/study/study.db`) and the report (`report.md`, `report.html`, `figures/`). Running the
demo again on the same folder resumes an interrupted study; a folder that already holds a report is
refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tricklab.core.errors import TrickLabError
from tricklab.core.paths import (
    check_out_folder,
    first_missing,
    is_disk_full,
    new_numbered_dir,
    remove_empty_dirs,
)
from tricklab.core.safeio import shown

if TYPE_CHECKING:
    from tricklab.experiments.runner import ExperimentSummary, RunEvent
    from tricklab.report import Report

STUDY_NAME = "demo"
BASELINE_RECIPE = "speedrun94"
MAX_SEEDS = 100


@dataclass(frozen=True)
class DemoPlan:
    """What the demo trains: the baseline's overrides, the tricks it varies and the budget.

    The defaults were tuned on a 2-core AMD EPYC VM without AVX-512 so that the whole demo (3 seeds)
    ends within 5 minutes there; see the README's Quick start for the measured time.
    """

    epochs: float = 3.0  # the fixed budget of every run (early stopping and stop-at-target off)
    target_accuracy: float = 0.55  # time-to-target is recorded (runs are not stopped at it)
    train_size: int | None = None  # None: all 10,000 training images of the sample
    test_size: int | None = None  # None: all 2,000 test images
    # airbench94's batch is 1024; on 10,000 images that is 9 steps per epoch, too few to learn in a
    # few epochs. 256 with speedrun94's linear LR scaling (lr per 1024 examples) keeps its meaning.
    batch_size: int = 256
    cpu_widths: tuple[int, int, int] = (16, 64, 64)  # quarter of airbench94's 64/256/256
    # auto: bf16 autocast on a CPU with AMX (1.9x faster at this size, accuracy within noise),
    # fp32 on others (training/precision.py auto_precision; docs/precision.md)
    cpu_precision: str = "auto"
    cache_dir: str | None = (
        None  # decoded-dataset cache (None: $TRICKLAB_CACHE or ~/.cache/tricklab)
    )
    # One change from the baseline at a time: key -> the value(s) it takes instead. Chosen by
    # measuring (2-core CPU, 3 seeds, 4 epochs): channels_last off trained 1.9x slower, BatchNorm
    # biases at the base lr lost about 2 pp, label smoothing off stayed within noise.
    vary: dict[str, tuple[Any, ...]] = field(
        default_factory=lambda: {
            "tricks.channels_last": (False,),
            "optim.bias_lr_mult": (1.0,),
            "tricks.label_smoothing": (0.0,),
        }
    )

    def baseline_overrides(self, device_type: str) -> list[str]:
        """The overrides that scale speedrun94 to the sample (and, on a CPU, to the CPU)."""
        from tricklab.experiments.plan import budget_overrides

        out = ["data.name=cifar10-sample", f"loader.batch_size={self.batch_size}"]
        if self.train_size is not None:
            out.append(f"data.train_size={self.train_size}")
        if self.test_size is not None:
            out.append(f"data.test_size={self.test_size}")
        if self.cache_dir is not None:
            out.append(f"data.cache_dir={self.cache_dir}")
        if device_type == "cpu":
            widths = ",".join(str(w) for w in self.cpu_widths)
            out += [f"model.widths=[{widths}]", f"tricks.precision={self.cpu_precision}"]
        return [*out, *budget_overrides(epochs=self.epochs, target=self.target_accuracy)]


class DemoInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during the demo; the study keeps every finished run in `out_dir`."""

    def __init__(self, out_dir: Path) -> None:
        super().__init__(str(out_dir))
        self.out_dir = out_dir


@dataclass
class DemoResult:
    """What a demo leaves: its folder, the study's summary, the report and the wall time."""

    out_dir: Path
    device: str
    plan: DemoPlan
    seeds: int
    summary: ExperimentSummary
    report: Report
    wall_seconds: float
    precision: str = ""  # what the baseline ran as (`auto` resolved on this device)

    def to_dict(self) -> dict[str, Any]:
        report = self.report
        return {
            "out_dir": str(self.out_dir),
            "device": self.device,
            "precision": self.precision,
            "seeds": self.seeds,
            "plan": {**asdict(self.plan), "vary": {k: list(v) for k, v in self.plan.vary.items()}},
            "wall_seconds": self.wall_seconds,
            "study": self.summary.to_dict(),
            "report": {
                "md_path": str(report.md_path),
                "html_path": str(report.html_path),
                "figures": [str(f) for f in report.figures],
                "conclusions": list(report.conclusions),
                "summary": report.summary,
            },
        }


def check_out_dir(out_dir: Path) -> None:
    """Refuse, before any training, a folder the report could not be written into."""
    check_out_folder(out_dir, "the demo")  # a read-only disk: before the plan is printed
    if (out_dir / "report.md").exists():
        raise TrickLabError(
            f"--out {out_dir} already holds a report (report.md); give a new folder"
        )
    if out_dir.is_dir():  # another command's folder (an ablation's study.db, a speedrun's summary)
        from tricklab.report.build import OUTPUTS  # what a report makes (no torch imported)

        names = (p.name for p in out_dir.iterdir() if not p.name.startswith("."))  # work folders
        foreign = sorted(name for name in names if name not in ("study", *OUTPUTS))
        if foreign:
            raise TrickLabError(
                f"--out {shown(str(out_dir))} holds what no demo makes ({shown(foreign[0])}"
                + (", ..." if len(foreign) > 1 else "")
                + "); give a new folder or a demo's"
            )


def check_seeds(seeds: Any) -> None:
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise TrickLabError(f"--seeds {seeds} must be a whole number from 1 to {MAX_SEEDS}")


def make_folder(out: Path) -> None:
    """`out` made (a full disk is left to the CLI's one line); TrickLabError if it cannot be."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if is_disk_full(exc):
            raise
        raise TrickLabError(f"cannot make the demo folder {out}: {exc.strerror or exc}") from None


def default_out_dir() -> Path:
    """A new folder runs/<date>-<time>-demo (numbered when taken)."""
    try:
        return new_numbered_dir(Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-demo")
    except OSError as exc:
        raise TrickLabError(
            f"cannot make the demo folder under runs/: {exc.strerror or exc}"
        ) from None


def run_demo(
    out_dir: str | Path | None = None,
    seeds: int = 3,
    *,
    plan: DemoPlan | None = None,
    on_run_end: Callable[[RunEvent], None] | None = None,
) -> DemoResult:
    """Run the demo study (baseline + each trick off, seeds 0..seeds-1) and write its report.

    `out_dir` defaults to a new runs/<date>-<time>-demo. Bad input (a file as `out_dir`, a folder
    that already holds a report, a seed count out of range) raises TrickLabError before training.
    `on_run_end` sees every finished run; a progress display the caller opened
    (core/progress.py) shows `run k/N` with the elapsed time and ETA, and each run's epochs.
    """
    from tricklab.experiments.plan import AblationPlan
    from tricklab.experiments.runner import ablate
    from tricklab.recipe.schema import load_recipe
    from tricklab.report import write_report
    from tricklab.training.setup import resolve_device

    plan = plan or DemoPlan()
    check_seeds(seeds)
    start = time.perf_counter()
    device = resolve_device("auto")
    baseline = load_recipe(BASELINE_RECIPE, plan.baseline_overrides(device.type))
    vary = {key: list(values) for key, values in plan.vary.items()}

    if out_dir is None:
        out = made = default_out_dir()
    else:
        out = Path(out_dir)
        check_out_dir(out)
        made = first_missing(out)
    try:
        make_folder(out)
        study = AblationPlan(baseline, vary, seeds, study=STUDY_NAME, out_dir=str(out / "study"))
        summary = ablate(study, on_run_end=on_run_end)
    except TrickLabError:
        remove_empty_dirs(out, made)  # bad input met before the first run: leave nothing
        raise
    except KeyboardInterrupt:
        raise DemoInterrupted(out) from None
    # The study's folder, not its name: a folder called `demo` here would be taken for the source.
    report = write_report(
        [out / "study"],
        out,
        title=f"tricklab demo: {BASELINE_RECIPE} tricks on the CIFAR-10 sample (JPEG q75 copy, "
        f"{device.type})",
    )
    return DemoResult(
        out_dir=out,
        device=device.type,
        plan=plan,
        seeds=seeds,
        summary=summary,
        report=report,
        wall_seconds=time.perf_counter() - start,
        precision=_resolved_precision(baseline, device),
    )


def _resolved_precision(recipe: Any, device: Any) -> str:
    """The precision runs of `recipe` train in on `device` (tricks.precision, auto resolved)."""
    from tricklab.training.resolve import for_device

    return for_device(recipe, device)[1].name
