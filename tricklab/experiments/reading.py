"""A stored study read back, never written: its statistics table (`results`, `study_results`) and
its runs one by one with their folders (`study_runs`), as `tricklab results` shows them."""

from __future__ import annotations

import os
from typing import Any

import optuna

from tricklab.core.errors import expect_number, expect_type
from tricklab.experiments.busy import study_meta
from tricklab.experiments.plan import BASELINE, normalize_target
from tricklab.experiments.records import study_kind
from tricklab.experiments.rundirs import RUN_DIR_ATTR
from tricklab.experiments.stats import ConfigStats, collect_runs, config_stats, planned_runs
from tricklab.experiments.storage import (
    experiment_dir,
    load_study,
    open_storage,
    shown_url,
    storage_url,
)


def results(
    study: str,
    storage: str | None = None,
    *,
    out_dir: str | None = None,
    reference: str | None = None,
    target: float | None = None,
) -> list[ConfigStats]:
    """The statistics table of a stored study (see stats.py); never creates a storage."""
    return study_results(study, storage, out_dir=out_dir, reference=reference, target=target)[1]


def study_results(
    study: str,
    storage: str | None = None,
    *,
    out_dir: str | None = None,
    reference: str | None = None,
    target: float | None = None,
) -> tuple[dict[str, Any], list[ConfigStats]]:
    """(meta, rows): meta names the study, storage, kind, reference and confidence."""
    expect_type(reference, (str, type(None)), "results' reference")  # the others: _stored_study
    if target is not None:
        expect_number(target, "results' target")
    target = None if target is None else normalize_target(target)  # as --target takes it
    url, opened = _stored_study(study, storage, out_dir)
    kind = study_kind(study, opened.user_attrs)
    records = collect_runs(opened)
    rows = config_stats(
        records,
        reference=reference,
        target=target,
        order="appearance" if kind == "ablation" else "accuracy",
        planned=planned_runs(opened.user_attrs, records),
    )
    ref = next((r.config_id for r in rows if r.is_reference), None)
    meta = {"study": study, "storage": shown_url(url), "kind": kind, "reference": ref}
    if isinstance(code := opened.user_attrs.get("model_code"), dict):  # your model's code hash
        meta["model_code"] = code
    meta |= {"confidence": 0.95, **study_meta(opened.user_attrs, records, rows)}
    return meta, rows


def _stored_study(study: Any, storage: Any, out_dir: Any) -> tuple[str, optuna.Study]:
    """The storage URL and the stored study a reader names, its arguments' types checked."""
    expect_type(study, str, "study")
    expect_type(storage, (str, os.PathLike, type(None)), "storage (a URL or a file path)")
    expect_type(out_dir, (str, os.PathLike, type(None)), "out_dir")
    storage = os.fspath(storage) if storage is not None else None  # a Path, as plans take it
    url = storage_url(storage, experiment_dir(study, out_dir))
    return url, load_study(open_storage(url, must_exist=True), study)


def study_runs(
    study: str, storage: str | None = None, *, out_dir: str | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(meta, runs) of a stored study: one run per (configuration, seed), the try that stands (as
    `results` counts it), with config_id, seed, status, accuracy, train_seconds, run_dir (its
    folder; None for a run of an older tricklab that kept none), trial and error."""
    url, opened = _stored_study(study, storage, out_dir)
    records = collect_runs(opened)
    # Read after the records: a trial a worker claims meanwhile is in both (one read before them
    # missed it), and no trial is ever deleted.
    trials = {t.number: t for t in opened.get_trials(deepcopy=False)}
    runs = []
    for record in records:
        # A run that never stored its record (its worker died) has the folder its trial named.
        folder = record.get(RUN_DIR_ATTR) or trials[record["trial"]].user_attrs.get(RUN_DIR_ATTR)
        runs.append(
            {
                "config_id": record["config_id"],
                "seed": int(record.get("seed", 0)),
                "status": record["status"],
                "accuracy": record.get("accuracy"),
                "train_seconds": record.get("train_seconds") or None,  # 0: none measured
                "run_dir": folder,
                "trial": record["trial"],
                "error": record.get("error"),
            }
        )
    first = {}  # configurations as they first ran, the baseline first; each one's seeds in order
    for run in runs:
        first.setdefault(run["config_id"], (run["config_id"] != BASELINE, len(first)))
    runs.sort(key=lambda r: (first[r["config_id"]], r["seed"]))
    kind = opened.user_attrs.get("kind", "sweep")
    meta = {"study": study, "storage": shown_url(url), "kind": kind}
    return meta, runs
