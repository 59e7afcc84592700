"""`write_report`: read the sources, draw the figures, write report.md and report.html.

Everything is made in a hidden folder beside `out_dir` and moved into place at the end, so an error
or Ctrl-C half-way leaves nothing behind; bad input is refused before anything is written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tricklab.core.errors import TrickLabError, expect_list_of, expect_type
from tricklab.core.outputs import REPORT_FILES
from tricklab.core.paths import (
    check_out_folder,
    claim_folder,
    first_missing,
    folder_arg,
    remove_empty_dirs,
)
from tricklab.report.collect import Source, load_sources

OUTPUTS = REPORT_FILES
MOVING = ".tricklab-report-moving"  # in out_dir while a report's files are moved in, one by one
WORK_MARK = ".tricklab-report-"  # in the name of the hidden folder a report is made in
ABANDONED_SECONDS = 60
REPORTS_ROOT = Path("reports")


@dataclass
class Report:
    """What `write_report` wrote."""

    out_dir: Path
    md_path: Path
    html_path: Path
    figures: list[Path] = field(default_factory=list)  # every PNG and SVG
    conclusions: list[str] = field(default_factory=list)  # one sentence per config vs reference
    summary: str = ""  # the one-paragraph conclusion
    profiles: list[Path] = field(default_factory=list)  # the saved profiles in its profile section
    busy_machine: bool = False  # some source's timings: experiments/busy.results_busy
    busy_reason: str | None = None  # the first such source's, named


def check_out_dir(out_dir: Path) -> None:
    """TrickLabError for an out_dir that is a file, a link to nothing, or already holds a report."""
    check_out_folder(out_dir, "the report")
    taken = [name for name in OUTPUTS if os.path.lexists(out_dir / name)]  # a link to nothing too
    if taken and (taken[0] == "report.md" or not (out_dir / MOVING).exists()):
        raise TrickLabError(
            f"--out {out_dir} already holds a report ({', '.join(taken)}); give another folder"
        )


def default_out_dir(sources: Sequence[Source]) -> Path:
    """reports/<date>-<time>-<first source> (numbered when taken); not made here."""
    stem = sources[0].name if sources else "report"
    stem = "".join(c if c.isalnum() or c in "-_." else "-" for c in stem)[:60] or "report"
    while len(stem.encode()) > 120:  # 60 letters of 4 bytes with the date passed 255 bytes
        stem = stem[:-1]
    if len(sources) > 1:
        stem += f"-and-{len(sources) - 1}-more"
    base = REPORTS_ROOT / f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}"
    folder, number = base, 1
    while folder.exists():
        number += 1
        folder = base.with_name(f"{base.name}-{number}")
    return folder


def write_report(
    sources: Sequence[str | Path],
    out_dir: str | Path,
    storage: str | None = None,
    title: str | None = None,
    profiles: Sequence[str | Path] = (),
) -> Report:
    """Report on studies (names, or experiment folders), speedrun folders and run folders, with a
    profile section from saved `tricklab profile model|step|loader --json` files (`profiles`; a
    report of profiles alone takes no source).

    `storage` is where study names are looked up (default: each study's own SQLite file, as
    `tricklab results`). Raises TrickLabError, having written nothing, for a source or profile
    that cannot be read and for an `out_dir` that is a file or already holds a report."""
    from tricklab.report.profiles import load_profiles

    expect_list_of(sources, (str, os.PathLike), "sources")
    expect_type(out_dir, (str, os.PathLike), "out_dir")
    expect_type(storage, (str, os.PathLike, type(None)), "storage")
    storage = os.fspath(storage) if storage is not None else None  # a Path, as plans take it
    expect_type(title, (str, type(None)), "title")
    expect_list_of(profiles, (str, os.PathLike), "profiles")
    out = folder_arg(out_dir, "write_report's out_dir")  # bytes, a NUL or "" refused
    check_out_dir(out)
    saved = load_profiles(profiles)
    loaded = load_sources(sources, storage) if sources or not saved else []
    return render_report(loaded, out, title, saved)


def render_report(
    sources: Sequence[Source],
    out_dir: Path,
    title: str | None = None,
    profiles: Sequence[Any] = (),
    numbered: bool = False,
) -> Report:
    """Write the report of sources and profiles (profiles.Profile) already loaded (see
    `write_report`). `numbered`: `out_dir` is `default_out_dir`'s, numbered again if another
    report takes it meanwhile."""
    from tricklab.report.conclusions import conclusions, summary
    from tricklab.report.document import build_document
    from tricklab.report.figures import render_figures
    from tricklab.report.html import render_html
    from tricklab.report.markdown import render_markdown
    from tricklab.report.profiles import profile_blocks, profile_summary

    if numbered:  # taken meanwhile or not, the move picks a free number
        check_out_folder(out_dir.parent, "the report")
    else:
        check_out_dir(out_dir)
    made = first_missing(out_dir.parent)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(out_dir.parent)
        work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}{WORK_MARK}", dir=out_dir.parent))
        held = claim_folder(work)  # let go by the kernel when this process dies, however
    except OSError as exc:
        remove_empty_dirs(out_dir.parent, made)
        raise TrickLabError(
            f"cannot write the report into {out_dir}: {exc.strerror or exc}"
        ) from None
    try:
        figures = render_figures(sources, work / "figures") if sources else []
        sentences = conclusions(sources)
        paragraph = summary(sources) if sources or not profiles else profile_summary(profiles)
        names = ", ".join([s.name for s in sources] or [p.path.name for p in profiles])
        blocks = build_document(
            title or f"tricklab report: {names}",
            sources,
            figures,
            sentences,
            paragraph,
            profile_blocks(profiles),
        )
        (work / "report.md").write_text(render_markdown(blocks, work), encoding="utf-8")
        (work / "report.html").write_text(render_html(blocks), encoding="utf-8")
        if held is not None:
            held.release()
        out_dir = _move_numbered(work, out_dir) if numbered else _move_into(work, out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        remove_empty_dirs(out_dir.parent, made)
        raise
    files = [out_dir / "figures" / f.name for fig in figures for f in fig.files]
    report = Report(
        out_dir, out_dir / "report.md", out_dir / "report.html", files, sentences, paragraph
    )
    report.profiles = [p.path for p in profiles]
    busy = [f"{s.name}: {s.busy.reason}" for s in sources if s.busy.busy]
    report.busy_machine, report.busy_reason = bool(busy), busy[0] if busy else None
    return report


def _move_numbered(work: Path, out_dir: Path) -> Path:
    """The finished report renamed to `out_dir`, or to `out_dir-2`, `-3`, ... when a report
    started at the same second took it (a rename never lands in a folder that holds files)."""
    work.chmod(0o755)  # mkdtemp makes it private; the report is a plain folder
    base, number = out_dir, 1
    while True:
        try:
            os.rename(work, out_dir)
            return out_dir
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise
        number += 1
        out_dir = base.with_name(f"{base.name}-{number}")


def _move_into(work: Path, out_dir: Path) -> Path:
    """The finished files into `out_dir`: one rename when it does not exist, else file by file with
    report.md last (a report.md there means the report is whole), under the folder's claim and
    with the MOVING mark there until report.md is in. A move that fails is taken back; the files of
    one that was killed (the mark is there, report.md is not) are the next report's to replace. A
    report that another one finished there meanwhile is one TrickLabError line."""
    work.chmod(0o755)  # mkdtemp makes it private; the report is a plain folder
    taken = TrickLabError(
        f"--out {out_dir} was written by another report meanwhile; give another folder"
    )
    if not out_dir.exists():
        try:
            os.rename(work, out_dir)  # a folder that appeared meanwhile (not empty) is refused
            return out_dir
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not out_dir.is_dir():
                raise
    claim = claim_folder(out_dir)
    if claim is None:
        raise taken
    mark = out_dir / MOVING
    try:
        if (out_dir / "report.md").exists():
            raise taken
        if mark.exists():  # a killed report's files: this claim proves it is gone
            _remove(out_dir, ("figures", "report.html"))
            mark.unlink()
        if any((out_dir / name).exists() for name in OUTPUTS):
            raise taken
        mark.touch(exist_ok=False)
        moved: list[str] = []
        try:
            for name in ("figures", "report.html", "report.md"):
                if (work / name).exists():
                    os.rename(work / name, out_dir / name)
                    moved.append(name)
        except BaseException:
            _remove(out_dir, moved)
            if not any((out_dir / name).exists() for name in moved):
                with contextlib.suppress(OSError):
                    mark.unlink()
            raise
        with contextlib.suppress(OSError):
            mark.unlink()  # report.md is there: the report is whole with or without the mark
    finally:
        claim.release()
    work.rmdir()
    return out_dir


def _remove(folder: Path, names: Sequence[str]) -> None:
    for name in names:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()


def _remove_abandoned(folder: Path) -> None:
    """Remove the work folders of reports killed there (SIGKILL, power loss): those no live report
    holds, made over a minute ago (a report starting now has not claimed its own yet)."""
    for work in folder.glob(f".*{WORK_MARK}*"):
        with contextlib.suppress(OSError):
            if time.time() - work.stat().st_mtime < ABANDONED_SECONDS:
                continue
            claim = claim_folder(work)
            if claim is not None:
                claim.release()
                shutil.rmtree(work, ignore_errors=True)
