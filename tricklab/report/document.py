"""The report as a list of blocks (headings, paragraphs, tables, figures, code), written once and
rendered by markdown.py and html.py, so report.md and report.html say the same thing."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import tricklab.report.fmt as fmt
from tricklab.core.safeio import shown
from tricklab.core.status import COMPLETE_STATUSES, Status
from tricklab.core.version import __version__
from tricklab.data.names import DATASET_NOTES
from tricklab.measure.provenance import BUSY_ADVICE
from tricklab.recipe.yamlio import dump_yaml
from tricklab.report.collect import Source, flat_recipe
from tricklab.report.figures import FIGURES, Figure
from tricklab.report.tables import (
    NO_RESUME_WORDS,
    RESUME_WORDS,
    TableData,
    per_seed_table,
    results_table,
    shown_table,
)


@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Paragraph:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class TableBlock:
    table: TableData


@dataclass
class FigureBlock:
    figure: Figure


@dataclass
class Code:
    text: str
    language: str = ""


@dataclass
class Details:
    """A part to open on demand (HTML <details>; in Markdown a plain subsection)."""

    summary: str
    blocks: list[Any] = field(default_factory=list)


METHOD = [
    "Accuracy is each run's final accuracy on the held-out split, with test-time augmentation"
    " where the recipe has it; train seconds are the training epochs with each batch's loading"
    " and augmentation, device-synchronised, without evaluation, dataset decoding or compilation."
    " Every statistic uses the complete runs only, one per (configuration, seed).",
    "Means come with 95% Student-t confidence intervals, clipped to what is possible (an accuracy"
    " lies in 0..100%); train seconds are geometric means with the interval of the log times"
    " (so it stays above 0 s). A configuration is compared with its"
    " source's reference by Welch's unequal-variance t-test on accuracy (the difference in"
    " percentage points with its 95% interval and p-value) and on log train seconds (the speedup,"
    " reference time / configuration time as a ratio of geometric means, with its interval). Where"
    " both ran the same seeds (the same initialisation and data order) the paired t-test"
    " (scipy.stats.ttest_rel) over those seeds is reported beside it. With more than 3 rows the"
    " p-values of each column are adjusted for multiple comparisons by Benjamini-Hochberg"
    " (scipy.stats.false_discovery_control).",
    "A change is called significant only when Welch's 95% interval excludes no change and, with more"
    " than 3 rows, its adjusted p-value is below 0.05; the paired test is shown, not used to call"
    " a change. Intervals, tests and verdicts need 3 runs on each side: at n = 2 Student's t"
    " quantile is 12.7 and an interval says nothing, so the tables say so in words.",
    "On a busy machine (the 1-minute load above the cores, or train seconds that spread across"
    " seeds more than a reported speedup) the speedups are shown as measured but no change in"
    ' train time is called: the time verdicts read "not judged: busy machine"; the accuracy'
    " verdicts stay.",
]


def _fingerprint_table(sources: Sequence[Source]) -> TableData:
    fields = [
        ("machine", lambda s, h: s.machine),
        ("device", lambda s, h: h.get("device_name")),
        ("CPU", lambda s, h: h.get("cpu_model")),
        (
            "CPU cores / torch threads",
            lambda s, h: _pair(h.get("cpu_cores"), h.get("torch_threads")),
        ),
        ("GPU memory", lambda s, h: _gib(h.get("device_memory_bytes"))),
        ("compute capability", lambda s, h: h.get("compute_capability")),
        ("torch", lambda s, h: h.get("torch")),
        ("torch's CUDA build / cuDNN", lambda s, h: _pair(h.get("cuda"), h.get("cudnn"))),
        ("GPU driver", lambda s, h: h.get("driver")),
        ("Python", lambda s, h: h.get("python")),
        ("platform", lambda s, h: h.get("platform")),
        ("tricklab", lambda s, h: h.get("tricklab")),
        ("dataset", lambda s, h: _dataset(s)),
        ("epochs per run", lambda s, h: _epochs_per_run(s)),
        ("processes per run", lambda s, h: _processes(s)),
        ("runs with this fingerprint", lambda s, h: _fingerprint_count(s)),
    ]
    rows = []
    for name, get in fields:
        values = [get(s, s.hardware) for s in sources]
        if any(v not in (None, "") for v in values):
            rows.append([name, *("-" if v in (None, "") else str(v) for v in values)])
    header = ["", *(s.name for s in sources)]
    return TableData("Hardware and software", header, rows, ["l"] * len(header))


def _pair(a: Any, b: Any) -> str | None:
    if a is None and b is None:
        return None
    return f"{'-' if a is None else a} / {'-' if b is None else b}"


def _gib(num_bytes: Any) -> str | None:
    return None if not num_bytes else f"{num_bytes / 2**30:.0f} GiB"


def _recipe_value(source: Source, group: str, key: str) -> Any:
    recipe = source.baseline_recipe() or {}
    value = (recipe.get(group) or {}).get(key)
    return fmt.short_number(value) if isinstance(value, float) else value


def _epochs_per_run(source: Source) -> str | None:
    """What the runs planned (run.epochs) and, where any stopped short, what they finished:
    `2`, or `2 and 400 planned; 2 and 62 finished` (a run killed after 62 of its 400)."""
    planned, finished = set(), set()
    for record in source.records:
        epochs = ((record.get("recipe") or {}).get("run") or {}).get("epochs")
        if isinstance(epochs, (int, float)) and not isinstance(epochs, bool):
            planned.add(float(epochs))
            done = record.get("epochs_completed")
            if record.get("status") == Status.COMPLETE:  # all of them (2.5 epochs: 3 rows)
                finished.add(float(epochs))
            elif isinstance(done, int) or isinstance(record.get("epochs"), list):
                finished.add(float(done if isinstance(done, int) else len(record["epochs"])))
    if not planned:
        return _recipe_value(source, "run", "epochs")

    def words(values: set[float]) -> str:
        shown = [f"{v:g}" for v in sorted(values)]
        return ", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else shown[0]

    if not finished or finished == planned:
        return words(planned)
    return f"{words(planned)} planned; {words(finished)} finished"


def _processes(source: Source) -> str | None:
    """The processes of data-parallel runs and their backend (`2 (gloo)`); None when every run
    was one process."""
    worlds = {
        (r.get("world_size") or 1, r.get("dist_backend"))
        for r in source.records
        if isinstance(r.get("world_size") or 1, int)
    }
    if all(size == 1 for size, _ in worlds):
        return None
    return ", ".join(
        f"{size}" + (f" ({backend})" if backend else "")
        for size, backend in sorted(worlds, key=str)
    )


def _dataset(source: Source) -> str | None:
    recipe = source.baseline_recipe()
    if not recipe:
        return None
    data = recipe.get("data") or {}
    train, test = data.get("train_size"), data.get("test_size")
    sizes = f"{train or 'all'} train / {test or 'all'} test images"
    note = DATASET_NOTES.get(data.get("name"))
    return f"{data.get('name')} ({sizes}, data.seed {data.get('seed', 0)})" + (
        f"; {note}" if note else ""
    )


def _fingerprint_count(source: Source) -> str:
    with_hw = [r for r in source.records if r.get("hardware")]
    same = sum(r["hardware"] == source.hardware for r in with_hw)
    text = f"{same} of {len(source.records)}"
    if source.fingerprints > 1:
        text += f" ({source.fingerprints} different fingerprints: compare times with care)"
    return text


def _failures_table(sources: Sequence[Source]) -> TableData | None:
    groups: dict[tuple[str, str, str, str], list[str]] = {}
    for source in sources:
        for record in source.records:
            if record["status"] in COMPLETE_STATUSES:
                continue
            message = (record.get("error") or "").strip().splitlines()
            key = (
                source.name,
                source.name_of(record["config_id"]),
                record["status"],
                message[-1][:300] if message else "",
            )
            groups.setdefault(key, []).append(str(record.get("seed", "-")))
    if not groups:
        return None
    rows = [
        [src, cid, status, str(len(seeds)), ", ".join(seeds), msg]
        for (src, cid, status, msg), seeds in sorted(
            groups.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])
        )
    ]
    header = ["source", "config", "kind", "runs", "seeds", "message"]
    table = TableData("Runs that did not complete", header, rows, ["l", "l", "l", "r", "l", "l"])
    return table.without_empty_columns() if len(sources) > 1 else _drop_source(table)


def _drop_source(table: TableData) -> TableData:
    return TableData(
        table.title, table.header[1:], [r[1:] for r in table.rows], table.align[1:]
    ).without_empty_columns()


def _joined_table(sources: Sequence[Source]) -> TableData:
    """Configurations side by side across sources (joined by configuration)."""
    configs: dict[str, str] = {}
    for source in sources:
        for row in source.rows:
            configs.setdefault(row.config_id, source.name_of(row.config_id))
    header = ["config"]
    for source in sources:
        header += [
            f"{source.name}: acc % (n)",
            f"{source.name}: train s (geometric mean)",
            f"{source.name}: speedup",
        ]
    rows = []
    for cid, name in configs.items():
        cells = [name]
        for source in sources:
            row = next((r for r in source.rows if r.config_id == cid), None)
            if row is None or row.accuracy_mean is None:
                cells += ["-", "-", "-"]
                continue
            cells.append(f"{fmt.pct(row.accuracy_mean)} ({row.n})")
            cells.append(fmt.seconds(row.train_seconds_geomean))
            cells.append(
                "reference" if row.is_reference else fmt.ratio_interval(row.speedup, None, None)
            )
        rows.append(cells)
    align = ["l"] + ["r"] * (len(header) - 1)
    return TableData("All sources side by side", header, rows, align)


# What may differ between the references of joined sources (the same study on two machines).
MACHINE_KEYS = ("data.dir", "data.cache_dir", "run.seed", "run.loggers", "run.wandb_project")


def joined_recipes_note(sources: Sequence[Source]) -> str | None:
    """Words for sources whose references ran other recipes (their data's folder aside): the
    joined table's rows then hold different recipes under one configuration name."""
    recipes = [(s.name, flat_recipe(s.baseline_recipe() or {}), s.meta) for s in sources]
    recipes = [  # your own model's code (a study's hash of it) beside the recipe's fields
        (name, {**r, **({"model code": meta["model_code"]} if "model_code" in meta else {})})
        for name, r, meta in recipes
        if r
    ]
    if len(recipes) < 2:
        return None
    keys = sorted({k for _, r in recipes for k in r} - set(MACHINE_KEYS))
    differ = [
        k for k in keys if len({json.dumps(r.get(k), sort_keys=True) for _, r in recipes}) > 1
    ]
    if not differ:
        return None
    shown_keys = [
        f"{k}: " + ", ".join(f"{json.dumps(r.get(k))} in {name}" for name, r in recipes)
        for k in differ[:3]
    ]
    more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
    return shown(
        f"The sources' references ran different recipes ({'; '.join(shown_keys)}{more}): the "
        "table joins configurations by name, not by recipe, so compare the rows within a source."
    )


def _source_heading(source: Source) -> str:
    kinds = {"ablation": "ablation", "sweep": "sweep", "speedrun": "speedruns", "runs": "runs"}
    return f"{source.name}: {kinds.get(source.kind, source.kind)} on {source.machine}"


def _missing_figures(sources: Sequence[Source], figures: Sequence[Figure]) -> list[str]:
    made = {f.stem for f in figures}
    reasons = {
        "accuracy_vs_time": "no configuration has a complete run",
        "effects": "no configuration was compared with a reference (one configuration, or no complete runs)",
        "training_curves": "no complete run recorded its epochs",
        "memory_throughput": "no complete run recorded peak memory or throughput",
    }
    return [
        f'No figure "{title}": {reasons[stem]}.'
        for stem, title, _, _ in FIGURES
        if stem not in made
    ]


def build_document(
    title: str,
    sources: Sequence[Source],
    figures: Sequence[Figure],
    conclusions: Sequence[str],
    summary: str,
    profiles: Sequence[Any] = (),
) -> list[Any]:
    """Every block of the report, in order; `profiles` is the profile section (profiles.py's
    `profile_blocks`), after the figures, or alone when there is no source."""
    made = time.strftime("%Y-%m-%d %H:%M")
    where = "; ".join(f"{s.name} ({s.location})" for s in sources)
    where = where or ("saved profiles" if profiles else "nothing")
    blocks: list[Any] = [
        Heading(1, title),
        Paragraph(f"Made by tricklab {__version__} on {made} from {where}."),
        Heading(2, "Summary"),
        Paragraph(summary),
    ]
    if not sources and profiles:
        return [shown_block(block) for block in (*blocks, *profiles)]
    blocks.append(Heading(2, "Conclusions"))
    if conclusions:
        blocks.append(Bullets(list(conclusions)))
    else:
        blocks.append(
            Paragraph(
                "No configuration was compared with a reference: nothing to conclude about changes."
            )
        )
    blocks.append(Heading(2, "Results"))
    for source in sources:
        blocks.append(Heading(3, _source_heading(source)))
        if not source.rows:
            blocks.append(Paragraph(f"{source.name} has no runs yet."))
            continue
        finish = NO_RESUME_WORDS if source.kind == "speedrun" else RESUME_WORDS
        table = results_table(source.rows, "", source.name_of, finish)
        blocks.append(TableBlock(table))
        if source.busy.busy:  # beside the train seconds it is about
            blocks.append(Paragraph(f"{source.busy.note().capitalize()}: {BUSY_ADVICE}."))
        blocks += [Paragraph(note) for note in table.notes]
    if len(sources) > 1:
        blocks += [Heading(3, "All sources side by side"), TableBlock(_joined_table(sources))]
        if note := joined_recipes_note(sources):
            blocks.append(Paragraph(note))
    blocks.append(Heading(2, "Figures"))
    for figure in figures:
        blocks += [Heading(3, figure.title), FigureBlock(figure), Paragraph(figure.caption)]
    for note in _missing_figures(sources, figures):
        blocks.append(Paragraph(note))
    blocks += profiles
    blocks.append(Heading(2, "Failures"))
    failures = _failures_table(sources)
    blocks.append(TableBlock(failures) if failures else Paragraph("Every run completed."))
    blocks += [Heading(2, "Hardware and software"), TableBlock(_fingerprint_table(sources))]
    blocks += [Heading(2, "Method"), *(Paragraph(p) for p in METHOD)]
    blocks.append(Heading(2, "Appendix"))
    for source in sources:
        recipe = source.baseline_recipe()
        if recipe:
            text = dump_yaml(json.loads(json.dumps(recipe)))
            blocks.append(
                Details(f"{source.name}: the reference's recipe (seed aside)", [Code(text, "yaml")])
            )
        if source.records:
            blocks.append(
                Details(f"{source.name}: every run", [TableBlock(per_seed_table(source.records))])
            )
    return [shown_block(block) for block in blocks]


def shown_block(block: Any) -> Any:
    """`block` with its text as one-line text (core/safeio.shown), code keeping its line breaks:
    a machine, run or recipe named in a file from outside cannot put an escape sequence or a
    line of its own into report.md or report.html."""
    if isinstance(block, (Heading, Paragraph)):
        return replace(block, text=shown(block.text))
    if isinstance(block, Bullets):
        return Bullets([shown(item) for item in block.items])
    if isinstance(block, TableBlock):
        return TableBlock(shown_table(block.table))
    if isinstance(block, FigureBlock):
        figure = block.figure
        return FigureBlock(
            replace(figure, title=shown(figure.title), caption=shown(figure.caption))
        )
    if isinstance(block, Code):
        return replace(block, text="\n".join(shown(line) for line in block.text.split("\n")))
    if isinstance(block, Details):
        return Details(shown(block.summary), [shown_block(b) for b in block.blocks])
    return block
