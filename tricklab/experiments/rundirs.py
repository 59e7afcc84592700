"""Run folders of an experiment: every run of `ablate` and `sweep` keeps what `train(out_dir=...)`
writes (recipe.yaml, metrics.jsonl, result.json) in `<study folder>/runs/<config>/seed-<k>`.

The study folder is the one the user named or would look in first: `--out DIR`; else, for a
`--storage` file (journal or SQLite), a folder named after the study beside that file (the file's
own folder when it already bears the study's name); else the default `runs/experiments/<study>`,
where the study's SQLite file lives (a database server has no folder: the default then too, on
each machine that runs). `<config>` is the configuration id made safe for any file system.

A trial names its run's folder in its `run_dir` user attr (a sampled trial: the folder of the
seed it trains or trained last) before the run starts, and each run record in its `run_dir` field,
which `tricklab results --runs` lists. A folder the study named before and nobody writes now is the
rest of an interrupted try: a new try of the run replaces it. Any other folder at a run's path (a
run of another study sharing the --out folder, a worker taken for dead that still writes) is left
alone, and the run goes beside it (`seed-<k>-2`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from optuna.trial import FrozenTrial

from tricklab.core.errors import TrickLabError
from tricklab.core.outputs import RUNS_FOLDER, check_not_another_commands
from tricklab.core.paths import check_out_folder, claim_folder
from tricklab.core.safeio import shown
from tricklab.core.urls import file_of
from tricklab.experiments.storage import experiment_dir, storage_url, stored_runs

RUN_DIR_ATTR = "run_dir"
MAX_NAME_CHARS = 100  # well under the 255 bytes most file systems allow in a name
_PLAIN = re.compile(r"[A-Za-z0-9._=,-]+")  # config id characters kept as they are (space: '+')
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]+")


def study_dir(study: str, storage: str | None = None, out_dir: str | Path | None = None) -> Path:
    """The folder where a study's run folders go (see the module doc)."""
    if out_dir is not None:
        return Path(out_dir)
    if storage is not None:
        url = storage_url(storage, experiment_dir(study))
        if (storage_file := file_of(url)) is not None:
            folder = storage_file.parent
            return folder if folder.name == study else folder / study
    return experiment_dir(study)


def check_out_dir(out_dir: str | Path | None, what: str) -> None:
    """TrickLabError, before any run, for an --out that cannot be a folder to write in (a file on
    its path, a device, a link to nothing, read-only): paths.check_out_folder."""
    if out_dir is not None:
        check_out_folder(Path(out_dir), what)
        check_not_another_commands(Path(out_dir), "a study")


def config_folder_name(config_id: str) -> str:
    """A configuration id as a folder name: spaces as '+' when nothing else needs changing
    (`aug.flip=random+optim.lr=0.1`); otherwise other characters as '_', cut to length, and a hash
    of the id appended, so two configurations never share a folder."""
    plain = config_id.replace(" ", "+")
    if (
        _PLAIN.fullmatch(config_id.replace(" ", "x"))
        and len(plain) <= MAX_NAME_CHARS
        and not plain.startswith((".", "-"))
    ):
        return plain
    digest = hashlib.sha1(config_id.encode()).hexdigest()[:8]
    safe = _UNSAFE.sub("_", plain)[: MAX_NAME_CHARS - 9].strip("._-") or "config"
    return f"{safe}-{digest}"


def run_dir(study_folder: Path, config_id: str, seed: int) -> Path:
    """`<study folder>/runs/<config>/seed-<seed>`, absolute so a result read elsewhere finds it."""
    return (study_folder / RUNS_FOLDER / config_folder_name(config_id) / f"seed-{seed}").absolute()


def recorded_run_dirs(trials: Iterable[FrozenTrial]) -> set[str]:
    """The run folders a study's trials have named (in their attrs and their run records)."""
    named = set()
    for trial in trials:
        named.add(trial.user_attrs.get(RUN_DIR_ATTR))
        named.update(run.get(RUN_DIR_ATTR) for run in stored_runs(trial))
    return named - {None}


def fresh_run_dir(path: Path, ours: set[str]) -> Path:
    """A folder `train()` accepts for a run the caller has claimed (claims.py: its unit, or its
    sampled seed): `path` itself, after removing what an earlier, interrupted try of the run left
    there. A folder is removed only when it is one of `ours` (named by a trial of this study, see
    `recorded_run_dirs`) and no live process writes there (none holds its claim, paths.py: a
    worker taken for dead that goes on): otherwise it is left alone (another study's run in a
    shared --out folder, or a live one) and the run goes to `path-2`, `-3`, ..."""
    candidate = path
    for number in range(2, 1000):
        if not candidate.exists() and not candidate.is_symlink():
            return candidate
        if str(candidate) in ours and _remove_unclaimed(candidate):
            return candidate
        candidate = path.with_name(f"{path.name}-{number}")
    raise TrickLabError(f"{path} and 998 numbered folders beside it are taken; give another --out")


def _remove_unclaimed(folder: Path) -> bool:
    """Remove `folder` unless a live writer holds its claim; True when it is gone, False when it
    stays (held, or it cannot be removed: the run then goes beside it). The folder is renamed away
    first (under its claim), so a half-removed run never sits at its path."""
    try:
        if not folder.is_dir() or folder.is_symlink():
            folder.unlink()
            return True
        claim = claim_folder(folder)
    except OSError:
        return False
    if claim is None:
        return False
    trash = folder.with_name(f".{folder.name}.stale-{os.getpid()}")
    try:
        if trash.exists():
            shutil.rmtree(trash)
        folder.rename(trash)
    except OSError:  # no rights, or (Windows) a folder with an open file cannot be renamed
        return False
    finally:
        claim.release()
    shutil.rmtree(trash, ignore_errors=True)
    return True


def check_study_name(name: str, what: str = "--study") -> None:
    """TrickLabError unless `name` is one folder's name (runs/experiments/<name>, where
    `tricklab results` lists studies): no '/', control characters or spaces at its ends, not
    '.' or '..', at most 255 bytes."""
    if len(os.fsencode(name)) > 255:
        raise TrickLabError(
            f"{what}: the name {name[:40]}... is {len(os.fsencode(name))} bytes, longer than "
            "file systems take (255)"
        )
    odd = any(c in "/\\" or not c.isprintable() for c in name) or name != name.strip()
    if odd or name in ("", ".", ".."):
        raise TrickLabError(
            f"{what} {shown(name)} is one folder's name under runs/experiments/ (where "
            "`tricklab results` lists studies): give one without '/', control characters, bytes "
            "that are not UTF-8 or spaces at its ends, other than '.' and '..'"
        )
    composed = unicodedata.normalize("NFC", name)
    if composed != name:  # 'cafe\u0301' and 'café' were two studies that read alike everywhere
        raise TrickLabError(
            f"{what} {ascii(name)} is not in Unicode's composed form (NFC), so it reads as "
            f"{shown(composed)}, another study's name or the next one's: give it composed"
        )
