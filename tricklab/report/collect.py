"""What a report is made of: the runs of each source and their statistics.

A source is a stored study (ablation or sweep: its name, looked up as `tricklab results` does, or its
experiment folder holding study.db), a speedrun folder (summary.json) or a run folder (result.json).
Every source becomes one `Source`: one record per (configuration, seed) in the form of
`stats.collect_runs`, and the results table of `stats.config_stats`, so a report's numbers are those
of `tricklab results --json`.

Speedrun and run folders are grouped by machine: the folders of one machine make one source whose
first configuration is the reference. A speedrun is named by its recipe and what it changed from
the built-in recipe of that name; a run folder by what its recipe changed from the first one's.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tricklab.core import safeio
from tricklab.core.errors import TrickLabError
from tricklab.core.outputs import RESULT_FILE, STUDY_FILE, SUMMARY_FILE
from tricklab.core.paths import resolved
from tricklab.core.urls import file_of
from tricklab.report.fmt import config_namer
from tricklab.report.inputs import (
    check_run_result,
    check_speedrun_summary,
    read_metrics,
)

# A summary.json of 10,000 runs is about 10 MB; a larger file is no tricklab output.
MAX_JSON_BYTES = 64 << 20

SPEEDRUN_FILE, RUN_FILE = SUMMARY_FILE, RESULT_FILE


@dataclass
class Source:
    """One study, or the speedrun / run folders of one machine."""

    name: str
    kind: str  # ablation | sweep | speedrun | runs
    location: str  # storage URL (its password as ***) or folder(s)
    records: list[dict[str, Any]]
    rows: list[Any]  # ConfigStats, reference first
    meta: dict[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def _fingerprint_counts(self) -> Counter:
        """Each hardware fingerprint (as JSON) and how many runs carry it: counted once, since the
        report asks per record (it took minutes for a speedrun of 20,000 runs)."""
        return Counter(
            json.dumps(r["hardware"], sort_keys=True) for r in self.records if r.get("hardware")
        )

    @property
    def hardware(self) -> dict[str, Any]:
        """The most common hardware fingerprint of its runs ({} when none ran)."""
        counts = self._fingerprint_counts
        return json.loads(counts.most_common(1)[0][0]) if counts else {}

    @property
    def fingerprints(self) -> int:
        """How many different hardware fingerprints its runs carry."""
        return len(self._fingerprint_counts)

    @property
    def machine(self) -> str:
        return machine_name(self.hardware)

    @property
    def busy(self) -> Any:
        """Whether its timings were taken on a busy machine (experiments/busy.results_busy)."""
        from tricklab.experiments.busy import results_busy

        summaries = [self.meta.get("provenance")]
        return results_busy(self.records, self.rows, self.kind == "speedrun", summaries)

    @property
    def reference(self) -> str | None:
        return next((r.config_id for r in self.rows if r.is_reference), None)

    @functools.cached_property
    def _namer(self) -> Any:
        return config_namer(self.rows)  # built once: the report asks per row and sentence

    def name_of(self, config_id: str) -> str:
        """The display name of a configuration (short numbers, unless two would read alike)."""
        return self._namer(config_id)

    def baseline_recipe(self) -> dict[str, Any] | None:
        """The recipe the reference configuration ran (seed aside), if any run of it stored one."""
        ref = self.reference
        for record in self.records:
            if record["config_id"] == ref and isinstance(record.get("recipe"), dict):
                recipe = json.loads(json.dumps(record["recipe"]))
                recipe.get("run", {}).pop("seed", None)
                return recipe
        return None


def machine_name(hardware: dict[str, Any]) -> str:
    """'NVIDIA H100 80GB HBM3' or 'AMD EPYC (2 cores)'; 'unknown machine' without a fingerprint."""
    if not hardware:
        return "unknown machine"
    name = str(hardware.get("device_name") or hardware.get("cpu_model") or "unknown device")
    if hardware.get("device_type") == "cpu" and hardware.get("cpu_cores"):
        name += f" ({hardware['cpu_cores']} cores)"
    return name


# ---------------------------------------------------------------- loading


def load_sources(specs: Sequence[str | Path], storage: str | None = None) -> list[Source]:
    """Every source named in `specs` (see the module doc); TrickLabError for one that is not there,
    cannot be read, or is of no known kind. Reads only."""
    if not specs:
        raise TrickLabError("name at least one study, speedrun folder or run folder")
    sources: list[Source] = []
    speedruns: list[Path] = []
    runs: list[Path] = []
    seen: set[str] = set()
    for spec in specs:
        text = os.fspath(spec) if isinstance(spec, os.PathLike) else spec
        if not isinstance(text, str):  # a PathLike giving bytes
            raise TypeError(f"a source is a study name or a folder (str or Path), got {spec!r:.80}")
        if "\0" in text:
            raise TrickLabError(f"the source {safeio.shown(text)} holds a NUL character")
        if not text.strip():
            raise TrickLabError("an empty source name; give a study name or a folder")
        path = Path(text)
        if path.is_file() and path.name in (SPEEDRUN_FILE, RUN_FILE, STUDY_FILE):
            path = path.parent
        # One source named twice (`RUN RUN/`, overlapping globs) is read once: its runs are
        # counted once, not as seeds of their own.
        key = str(resolved(path)) if path.exists() else f"study {text}"
        if key in seen:
            continue
        seen.add(key)
        if path.is_dir():
            # A folder two commands wrote into (a speedrun's --out beside a study) gives both.
            speedrun, run, study = (
                (path / f).is_file() for f in (SPEEDRUN_FILE, RUN_FILE, STUDY_FILE)
            )
            if speedrun:
                speedruns.append(path)
            if run:
                runs.append(path)
            if study:
                sources.extend(_folder_studies(path))
            # a folder of another kind: the study of that name, if there is one
            if not (speedrun or run or study):
                try:
                    sources.append(load_study(text, storage))
                except TrickLabError:
                    raise TrickLabError(
                        f"{path} holds no {SPEEDRUN_FILE}, {RUN_FILE} or {STUDY_FILE}: not a "
                        "speedrun, run or experiment folder, and no study is named so"
                    ) from None
        elif path.exists():
            hint = "; a `tricklab profile --json` output goes after --profile"
            hint = hint if _is_profile(path) else ""
            raise TrickLabError(f"{path} is a file, not a study, speedrun or run folder{hint}")
        else:
            sources.append(load_study(text, storage))
    sources = _once(sources)
    # A run folder of a study or speedrun also named is counted there, not again as a run.
    counted = {
        resolved(Path(r["run_dir"]))
        for s in sources
        for r in s.records
        if isinstance(r.get("run_dir"), str)
    }
    counted |= {resolved(folder) / run.name for folder in speedruns for run in folder.iterdir()}
    runs = [r for r in runs if resolved(r) not in counted]
    sources.extend(_by_machine(speedruns, _speedrun_records, "speedrun"))
    sources.extend(_by_machine(runs, _run_records, "runs"))
    return sources


def _once(studies: list[Source]) -> list[Source]:
    """Each study once, however it was named (its folder, its name with --storage, its
    study.db): the same name in the same storage file or database is one study."""
    kept: dict[tuple[str, str], Source] = {}
    for study in studies:
        stored = file_of(study.location)
        where = str(resolved(stored)) if stored is not None else study.location
        kept.setdefault((where, study.name), study)
    return list(kept.values())


def load_study(name: str, storage: str | None = None, out_dir: str | None = None) -> Source:
    """A stored study, with the rows `tricklab results` gives for it."""
    from tricklab.experiments import study_results
    from tricklab.experiments.catalog import check_study
    from tricklab.experiments.records import collect_runs
    from tricklab.experiments.storage import load_study as open_stored
    from tricklab.experiments.storage import open_storage

    url = check_study(name, storage, out_dir)
    meta, rows = study_results(name, url, out_dir=out_dir)
    records = collect_runs(open_stored(open_storage(url, must_exist=True), name))
    return Source(name, meta["kind"], meta["storage"], records, rows, meta)  # URL as shown


def _folder_studies(folder: Path) -> list[Source]:
    from tricklab.experiments.catalog import list_studies

    # another program's study beside tricklab's (no kind: records.check_study_attrs) is not read
    studies = [s for s in list_studies(None, str(folder)) if s.kind is not None]
    if not studies:
        raise TrickLabError(f"{folder / STUDY_FILE} holds no study of tricklab ablate or sweep")
    return [load_study(s.name, None, str(folder)) for s in studies]


def _is_profile(path: Path) -> bool:
    """Whether `path` holds `tricklab profile model|step|loader --json` output."""
    try:
        return read_json(path).get("kind") in ("model", "step", "loader")
    except TrickLabError:
        return False


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; TrickLabError, one line, for one that is unreadable, none, or
    larger than any tricklab output (MAX_JSON_BYTES: it is not read)."""
    data = safeio.read_json(path, MAX_JSON_BYTES, "tricklab JSON output")
    if not isinstance(data, dict):
        raise TrickLabError(f"{safeio.shown(path)} holds no JSON object")
    return data


def flat_recipe(recipe: dict[str, Any]) -> dict[str, Any]:
    """A recipe as a result.json holds it, as `group.key: value`."""
    return {
        f"{group}.{key}": value
        for group, values in recipe.items()
        if isinstance(values, dict)
        for key, value in values.items()
    }


def _changes(recipe: dict[str, Any], base: dict[str, Any] | None) -> list[str]:
    """`key=value` for every recipe field that differs from `base` (the seed aside)."""
    from tricklab.experiments.plan import format_value

    if base is None:
        return []
    flat, flat_base = flat_recipe(recipe), flat_recipe(base)
    return [
        f"{k}={format_value(v)}"
        for k, v in flat.items()
        if k != "run.seed" and k in flat_base and flat_base[k] != v
    ]


def _builtin_recipe(name: str) -> dict[str, Any] | None:
    """The built-in recipe `name` as shipped, the speedrun's runs named by what they changed in
    it; None for a file's recipe (`--recipe my.yaml`), named by the file alone: the file may have
    changed since, or be elsewhere, and the same report must name the same runs from any folder."""
    from tricklab.recipe.load import builtin_recipe_data, builtin_recipes
    from tricklab.recipe.schema import Recipe

    if name not in builtin_recipes():
        return None
    return Recipe.from_dict(builtin_recipe_data(name), source=name).to_dict()


def _speedrun_records(folder: Path) -> tuple[list[dict[str, Any]], int | None]:
    """The runs of a speedrun folder as records, and the runs it planned (None: not said)."""
    from tricklab.experiments.records import headline_accuracy

    summary = check_speedrun_summary(read_json(folder / SPEEDRUN_FILE), folder / SPEEDRUN_FILE)
    recipe = summary.get("recipe") or {}
    name = str(summary.get("recipe_name") or folder.name)
    changes = _changes(recipe, _builtin_recipe(name))
    records = []
    for run in summary.get("runs") or []:
        result_file = folder / f"seed-{run.get('seed')}" / RUN_FILE
        result = (
            check_run_result(read_json(result_file), result_file) if result_file.is_file() else {}
        )
        record = {**result, **{k: v for k, v in run.items() if v is not None or k not in result}}
        record.setdefault("accuracy", headline_accuracy(record))
        records.append(
            {
                **record,
                "config_id": " ".join([name, *changes]),
                "overrides": changes,
                "hardware": result.get("hardware") or summary.get("hardware") or {},
                "recipe": result.get("recipe") or recipe,
                "target_accuracy": summary.get("target_accuracy"),
                "folder": str(folder),
            }
        )
    return records, summary.get("runs_planned") or None


def _run_records(folder: Path) -> tuple[list[dict[str, Any]], None]:
    from tricklab.experiments.records import headline_accuracy

    result = check_run_result(read_json(folder / RUN_FILE), folder / RUN_FILE)
    if not result.get("epochs") and (folder / "metrics.jsonl").is_file():
        result["epochs"] = read_metrics(folder / "metrics.jsonl")
    recipe = result.get("recipe") or {}
    record = {
        **result,
        "seed": (recipe.get("run") or {}).get("seed", 0),
        "accuracy": headline_accuracy(result),
        "target_accuracy": (recipe.get("run") or {}).get("target_accuracy"),
        "folder": str(folder),
    }
    return [record], None


def _by_machine(folders: list[Path], read: Any, kind: str) -> list[Source]:
    """The folders' records grouped into one source per machine, configurations named; the runs
    a speedrun planned count for its configuration (an interrupted one shows as unfinished)."""
    from tricklab.experiments.busy import hold_time_verdicts
    from tricklab.experiments.stats import config_stats

    groups: dict[str, list[dict[str, Any]]] = {}
    places: dict[str, list[str]] = {}
    plans: dict[str, list[int | None]] = {}
    for folder in folders:
        records, planned = read(folder)
        key = machine_name((records[0].get("hardware") if records else None) or {})
        groups.setdefault(key, []).extend(records)
        places.setdefault(key, []).append(str(folder))
        if records:
            plans.setdefault(key, []).append(planned)
    sources = []
    for machine, records in groups.items():
        if kind == "runs":
            _name_runs(records)
        _unique_seeds(records)
        first = records[0]["config_id"] if records else None
        # one configuration's folders, each saying what it planned: an unfinished plan is shown
        known = plans.get(machine, [])
        one = len({r["config_id"] for r in records}) == 1 and known and None not in known
        planned = {first: sum(known)} if one else None
        rows = config_stats(records, reference=first, planned=planned) if records else []
        folders_here = places[machine]
        name = Path(folders_here[0]).name if len(folders_here) == 1 else f"{kind} on {machine}"
        source = Source(name, kind, ", ".join(folders_here), records, rows)
        hold_time_verdicts(rows, source.busy)  # a study's rows are held by study_meta
        sources.append(source)
    return sources


def _name_runs(records: list[dict[str, Any]]) -> None:
    base = records[0].get("recipe") or {}
    for record in records:
        changes = _changes(record.get("recipe") or {}, base)
        record["overrides"] = changes
        record["config_id"] = " ".join(changes) if changes else "baseline"


def _unique_seeds(records: list[dict[str, Any]]) -> None:
    """Two folders of one configuration with a seed in common (the same speedrun twice): the later
    folder becomes a configuration of its own, named after it, so no seed is counted twice."""
    by_folder: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_folder.setdefault(record["folder"], []).append(record)
    seen: set[tuple[str, int]] = set()
    for folder, group in by_folder.items():
        keys = {(r["config_id"], int(r.get("seed") or 0)) for r in group}
        if keys & seen:
            for record in group:
                record["config_id"] = f"{record['config_id']} ({Path(folder).name})"
            keys = {(r["config_id"], int(r.get("seed") or 0)) for r in group}
        seen |= keys
