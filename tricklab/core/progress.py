"""Progress on the command line: a bar per batch within each epoch (epoch e/E, images/s, the run's
elapsed time and ETA), a bar while a dataset is decoded, and `run k/N` of a speedrun or an
experiment (ablate, sweep, the demo) with its elapsed time and ETA, and a profile's stages
(`stage`: a compile, the timed rounds). Plain lines when the output is not a terminal (a line per epoch, per run, and
at the start and end of decoding; never a carriage return), nothing at all with `--quiet`.

Library code prints nothing: a display shows only inside `with ProgressDisplay(console):`, which
the CLI opens, and the code that reports finds it with `current()` and stays silent when there is
none: the training loop (`Parts.progress`, set by `train`), dataset decoding (`decoding`,
`decode_ticker`) and an experiment's workers (`run_starts`). The display lives in a context variable, not a global: a thread started
elsewhere sees none.

Reporting costs the loop nothing measurable: batches and images are counted on the host as the
loader hands them out (a batch's length, never its values); no device value is read and nothing is
synchronised. rich's refresh thread draws the counts a few times a second; the per-epoch numbers of
a plain line are the epoch's row, which the loop has already read. On an accelerator the host runs
ahead of the device by a queue, so the bar's images/s is the host's pace (the rows' are synced).
`python benchmarks/loop_overhead.py --progress` measures the cost.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from tricklab.core.safeio import shown

REFRESH_PER_SECOND = 4  # redraws of a terminal's bars: the only work done off the loop's path

_shown: ContextVar[ProgressDisplay | None] = ContextVar("tricklab_progress", default=None)


def current() -> ProgressDisplay | None:
    """The display the command shows, or None (library use: report nothing)."""
    return _shown.get()


def clock(seconds: float | None) -> str:
    """Seconds as h:mm:ss; `-:--:--` when not known yet."""
    if seconds is None or not math.isfinite(seconds):
        return "-:--:--"
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def is_animated(console: Console) -> bool:
    """Bars only when the progress console and stdout are both terminals: a log of either stream
    (`> log`, `| tee`, a job scheduler's file) gets plain lines, never carriage returns."""
    stdout_tty = getattr(sys.stdout, "isatty", lambda: False)()
    return console.is_terminal and not console.is_dumb_terminal and stdout_tty


@contextlib.contextmanager
def decoding(what: str) -> Iterator[None]:
    """Shows `what` (e.g. "decoding imagefolder") while the block runs, if a display is shown."""
    display = current()
    if display is None:
        yield
        return
    with display.decoding(what):
        yield


@contextlib.contextmanager
def stage(what: str, calls: int = 0, unit: str = "timed calls") -> Iterator[Callable[[], None]]:
    """Shows `what` while the block runs (a profile's compile, its timed rounds), with a bar over
    `calls` when given, if a display is shown; yields the function to call after each call."""
    display = current()
    if display is None:
        yield _nothing
        return
    with display.decoding(what, unit):
        yield display.decode_ticker(calls) if calls else _nothing


def decode_ticker(images: int) -> Callable[[], None]:
    """A function to call once per decoded image, of `images` to decode (adds to the decoding's
    total); it does nothing when no display is shown or nothing is being decoded."""
    display = current()
    return display.decode_ticker(images) if display is not None else _nothing


def _nothing() -> None:
    pass


@dataclass
class _Training:
    """One training run's host-side counts, as the loop hands its batches out."""

    total_steps: int
    epochs: int
    start: float  # time.perf_counter() of the run's first epoch
    steps: int = 0  # batches handed out in the run
    epoch: int = 1  # 1-based
    epoch_start: float = 0.0
    epoch_steps: int = 0
    epoch_images: int = 0
    steps_in_epoch: int = 0
    epoch_rate: float | None = None  # the finished epoch's images/s (its row's, synced)

    def eta_seconds(self, now: float) -> float | None:
        """The run's remaining time at its pace so far (evaluations included)."""
        if self.steps == 0:
            return None
        return (now - self.start) / self.steps * max(0, self.total_steps - self.steps)


@dataclass
class _Runs:
    """A job's runs: a speedrun's warm-up (not counted), then `total` counted ones."""

    total: int
    warmup: bool  # the warm-up is still to finish
    start: float  # of the whole job
    counted_start: float  # of the first counted run (its ETA ignores the warm-up's compile)
    done: int = 0
    what: str = ""  # the run in progress, when the job names it (an experiment's config and seed)

    def label(self) -> str:
        if self.warmup:
            return "warm-up run (not counted)"
        if self.done >= self.total:
            return "runs done"
        return f"run {self.done + 1}/{self.total}" + (f": {self.what}" if self.what else "")

    def eta_seconds(self, now: float) -> float | None:
        if self.done == 0:
            return None
        return (now - self.counted_start) / self.done * (self.total - self.done)


@dataclass
class _Decoding:
    what: str
    start: float
    images: int = 0  # to decode, once the source has been listed (or calls to time)
    decoded: int = 0
    unit: str = "images"

    def tick(self) -> None:
        self.decoded += 1


class ProgressDisplay:
    """What a command shows while it runs, on `console` (the CLI's stderr): rich bars when
    `animate` (default: `is_animated(console)`), else plain lines. `header` (a rich renderable,
    e.g. `tricklab train`'s table of epochs) is drawn above the bars and printed once at the end.
    A context manager: inside it, `current()` is this display."""

    def __init__(
        self, console: Console, *, animate: bool | None = None, header: Any = None
    ) -> None:
        self.console = console
        self.animate = is_animated(console) if animate is None else animate
        self.header = header
        self._bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=30),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TextColumn("{task.fields[times]}"),
            console=console,
            auto_refresh=False,  # drawn by our Live, from the counts, when it refreshes
        )
        self._live: Live | None = None
        self._token: Token | None = None
        self._training: _Training | None = None
        self._runs: _Runs | None = None
        self._decoding: _Decoding | None = None
        self._slots: dict[str, tuple[object, TaskID]] = {}  # what each bar draws

    def __enter__(self) -> ProgressDisplay:
        self._token = _shown.set(self)
        if self.animate:
            self._live = Live(
                self,
                console=self.console,
                refresh_per_second=REFRESH_PER_SECOND,
                transient=True,  # the header is printed once, whole, when the display ends
            )
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _shown.reset(self._token)
            self._token = None
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self.header is not None and _has_content(self.header):
            self.console.print(self.header)

    # ------------------------------------------------------------ the training loop's reports
    def batches(
        self, batches: Iterable, epoch: int, epochs: int, per_epoch: int, total_steps: int
    ) -> Iterator:
        """`batches` (the epoch's iterator), counting each batch and its images as it is handed
        out. `epoch` is 0-based (0 starts a run), `per_epoch` the loader's batches per epoch."""
        now = time.perf_counter()
        if epoch == 0 or self._training is None:
            self._end_training()
            self._training = _Training(total_steps=total_steps, epochs=epochs, start=now)
        run = self._training
        run.epoch, run.epoch_start, run.epoch_steps, run.epoch_images = epoch + 1, now, 0, 0
        run.epoch_rate = None
        run.steps_in_epoch = max(0, min(per_epoch, total_steps - run.steps))
        return self._counted(batches, run)

    @staticmethod
    def _counted(batches: Iterable, run: _Training) -> Iterator:
        for batch in batches:
            run.steps += 1
            run.epoch_steps += 1
            run.epoch_images += len(batch[-1])  # the labels' length: a shape, not a value
            yield batch

    def epoch_done(self, row: dict) -> None:
        """The epoch's row of metrics (host values, already read by the loop)."""
        run = self._training
        if run is None:
            return
        run.steps = row["step"]  # exact, whatever the loader handed out beyond the last step
        run.epoch_rate = row.get("images_per_second")
        if self.animate:
            return
        now = time.perf_counter()
        cells = [
            f"epoch {row['epoch']}/{run.epochs}",
            f"train loss {_num(row['train_loss'], '.4f')}",
            f"train acc {percent(row['train_acc'])}",
        ]
        if row.get("val_acc") is not None:
            cells.append(f"val acc {percent(row['val_acc'])}")
        cells.append(f"{_num(row.get('images_per_second'), ',.0f')} img/s")
        cells.append(f"{clock(now - run.start)} elapsed, eta {clock(run.eta_seconds(now))}")
        self._line(", ".join(cells))

    def _end_training(self) -> None:
        self._training = None  # its bar goes at the next redraw

    # ------------------------------------------------------------ speedrun's runs
    def start_runs(self, total: int, warmup: bool) -> None:
        """A job of `total` counted runs, after a warm-up run when `warmup`."""
        now = time.perf_counter()
        self._runs = _Runs(total=total, warmup=warmup, start=now, counted_start=now)
        if not self.animate:
            self._line(f"{self._runs.label()} starts")

    def run_done(self, counted: bool) -> None:
        """A run ended: the warm-up (counted=False) or a counted run."""
        runs = self._runs
        if runs is None:
            return
        now = time.perf_counter()
        if counted:
            runs.done += 1
        else:
            runs.warmup, runs.counted_start = False, now
        self._end_training()
        if not self.animate and runs.done < runs.total:
            self._line(
                f"{runs.label()} starts; {clock(now - runs.start)} elapsed, "
                f"eta {clock(runs.eta_seconds(now))}"
            )

    def run_starts(self, what: str, done: int, total: int) -> None:
        """An experiment's run starts: `what` names it; `done` of this process's `total` runs
        have ended (the total as the study counts it now: other workers may take some)."""
        now = time.perf_counter()
        if self._runs is None:
            self._runs = _Runs(total=total, warmup=False, start=now, counted_start=now)
        runs = self._runs
        runs.done, runs.total, runs.what = done, max(total, done + 1), shown(what)  # escaped
        self._end_training()
        if not self.animate:
            self._line(
                f"{runs.label()} starts; {clock(now - runs.start)} elapsed, "
                f"eta {clock(runs.eta_seconds(now))}"
            )

    # ------------------------------------------------------------ decoding a dataset
    @contextlib.contextmanager
    def decoding(self, what: str, unit: str = "images") -> Iterator[None]:
        what = shown(what)  # a data folder's name
        state = _Decoding(what=what, start=time.perf_counter(), unit=unit)
        self._decoding = state
        if not self.animate:
            self._line(f"{what} ...")
        try:
            yield
        finally:
            self._decoding = None
        if not self.animate:
            count = f"{state.decoded:,} {state.unit} " if state.decoded else ""
            self._line(f"{what}: done, {count}in {time.perf_counter() - state.start:.1f} s")

    def decode_ticker(self, images: int) -> Callable[[], None]:
        if self._decoding is None:
            return _nothing
        self._decoding.images += images
        return self._decoding.tick

    # ------------------------------------------------------------ drawing
    def _line(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True, markup=False, emoji=False)

    def __rich__(self) -> RenderableType:
        """The header and the bars, from the counts as they are now. Only this (rich's refresh
        thread, under the Live's lock) touches the bars; the reports only change the counts."""
        now = time.perf_counter()
        runs, run, decode = self._runs, self._training, self._decoding
        self._draw(
            "runs",
            runs,
            lambda: dict(
                description=runs.label(),
                completed=runs.done,
                total=runs.total,
                rate="",
                times=f"{clock(now - runs.start)} elapsed, eta {clock(runs.eta_seconds(now))}",
            ),
        )
        self._draw(
            "decoding",
            decode,
            lambda: dict(
                description=decode.what,
                completed=decode.decoded,
                total=decode.images or None,  # a pulsing bar while the source is listed
                rate=decode.unit,
                times=f"{clock(now - decode.start)} elapsed",
            ),
        )
        self._draw("epoch", run, lambda: self._epoch_fields(run, now))
        parts = [self._bars] if self._bars.tasks else []
        if self.header is not None and _has_content(self.header):
            parts.insert(0, self.header)
        return Group(*parts)

    @staticmethod
    def _epoch_fields(run: _Training, now: float) -> dict:
        seconds = now - run.epoch_start
        rate = run.epoch_images / seconds if seconds > 0 and run.epoch_images else None
        if run.epoch_rate is not None:  # the epoch has ended (its evaluation may still run)
            rate = run.epoch_rate
        return dict(
            description=f"epoch {run.epoch}/{run.epochs}",
            completed=min(run.epoch_steps, run.steps_in_epoch),
            total=run.steps_in_epoch,
            rate=f"{_num(rate, ',.0f')} img/s",
            times=f"{clock(now - run.start)} elapsed, eta {clock(run.eta_seconds(now))}",
        )

    def _draw(self, slot: str, state: object, fields: Callable[[], dict]) -> None:
        """Keep `slot`'s bar in step with `state`: a new bar for a new state, none for None."""
        drawn = self._slots.get(slot)
        if drawn is not None and drawn[0] is not state:
            self._bars.remove_task(drawn[1])
            del self._slots[slot]
            drawn = None
        if state is None:
            return
        values = fields()
        if drawn is None:
            self._slots[slot] = (state, self._bars.add_task(**values))
        else:
            self._bars.update(drawn[1], **values)


def _has_content(renderable: Any) -> bool:
    """False for a renderable that says it is empty (a table without rows, say)."""
    rows = getattr(renderable, "rows", None)
    return rows is None or len(rows) > 0


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def percent(value: float | None) -> str:
    """An accuracy as every terminal line and table shows it: 0.254 -> '25.40%'."""
    return "-" if value is None else f"{100 * value:.2f}%"
