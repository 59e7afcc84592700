"""The `tricklab` command line. Library code returns results; this module renders them with rich.

A user mistake (TrickLabError) becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import difflib
import json
import logging
import os
import sys

from rich import box
from rich.table import Table
from rich.text import Text

import tricklab
from tricklab.cli import ablate_sweep as ablate_sweep_cli
from tricklab.cli import demo, streams
from tricklab.cli import profile as profile_cli
from tricklab.cli import report as report_cli
from tricklab.cli import results as results_cli
from tricklab.cli import speedrun as speedrun_cli
from tricklab.cli.common import (
    INTERRUPTED_EXIT_CODE,
    MODEL_OVERRIDE_KEYS,
    Parser,
    add_nproc,
    check_not_empty,
    console,
    int_number,
    model_names_and_settings,
    needs_command,
    print_error,
    say_notices,
    unknown_flags,
)
from tricklab.cli.outcome import command_code
from tricklab.cli.train import EpochView, cmd_train, print_result  # noqa: F401 (the API)
from tricklab.core.environment import working_folder
from tricklab.core.errors import (
    TrickLabError,
)
from tricklab.core.safeio import shown
from tricklab.core.stopping import stop_on_signals
from tricklab.core.usercode import described
from tricklab.data.names import DATASET_NAMES
from tricklab.recipe.reference import bounds, recipes_markdown, tricks_markdown
from tricklab.recipe.schema import builtin_recipes, field_table

MAX_CLASSES = 100_000
CWD_MAX_BYTES = 4096  # PATH_MAX on Linux: a working folder this deep fails torch's MKL as it loads


# ---------------------------------------------------------------- data
def cmd_data_show(args: argparse.Namespace) -> int:
    from tricklab.data.sources import describe_dataset, load_dataset

    ds = load_dataset(
        args.name, args.data_dir, image_size=args.image_size, cache_dir=args.cache_dir
    )
    info = describe_dataset(ds)
    if args.json:
        print(json.dumps(info))
        return 0
    table = Table(
        title=f"{info['name']}: {len(info['classes'])} classes, images {info['image_shape']}"
    )
    table.add_column("class")
    table.add_column("train", justify="right")
    table.add_column("test", justify="right")
    for name, n_train, n_test in zip(
        info["classes"], info["train"]["per_class"], info["test"]["per_class"]
    ):
        table.add_row(Text(shown(name)), str(n_train), str(n_test))  # a folder's name: no markup
    table.add_row("total", str(info["train"]["size"]), str(info["test"]["size"]), style="bold")
    console.print(table)
    mean = ", ".join(f"{v:.4f}" for v in info["mean"])
    std = ", ".join(f"{v:.4f}" for v in info["std"])
    console.print(f"channel mean [{mean}]  std [{std}]")
    return 0


# ---------------------------------------------------------------- listings
def cmd_tricks(args: argparse.Namespace) -> int:
    check_not_empty(args, "--search")
    rows, title = field_table(), "recipe fields"
    groups = list(dict.fromkeys(r["key"].split(".")[0] for r in rows))
    if args.group is not None:
        if args.group not in groups:
            close = difflib.get_close_matches(args.group, groups, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise TrickLabError(f"unknown group {args.group!r}; {hint}groups: {', '.join(groups)}")
        rows = [r for r in rows if r["key"].startswith(args.group + ".")]
        title = f"{args.group} fields"
    if args.search is not None:
        word = args.search.lower()
        said = {r["key"]: " ".join([r["key"], r["doc"], *(r["choices"] or [])]) for r in rows}
        rows = [r for r in rows if word in said[r["key"]].lower()]
        title += f" mentioning {args.search!r}"
    if args.json or args.format == "json":
        print(json.dumps(rows))
    if args.json or args.format == "json":
        return 0  # no match: [] (exit 0, as `results` lists no studies)
    if not rows:
        console.print(f"no {title}", highlight=False)
        return 0
    if args.format == "md":
        title = "Every recipe field" if title == "recipe fields" else title[0].upper() + title[1:]
        print(tricks_markdown(rows, title), end="")
        return 0
    # Two columns, so the list fits 80 columns: the key whole (to copy) over its default; the
    # allowed values over the doc, which wraps.
    table = Table(title=f"{title} (key=value on the command line)", box=box.SIMPLE_HEAD)
    table.add_column("key\n  default", no_wrap=True)
    table.add_column("allowed\nwhat it does", overflow="fold")
    for r in rows:
        allowed = " | ".join(r["choices"]) if r["choices"] else r["type"] + bounds(r)
        table.add_row(
            Text.assemble((r["key"], "bold"), (f"\n  {r['default']}", "dim")),
            Text.assemble((allowed, "cyan"), "\n", r["doc"]),
        )
    console.print(table)
    return 0


def cmd_recipes(args: argparse.Namespace) -> int:
    recipes = builtin_recipes()
    if args.json or args.format == "json":
        print(json.dumps(recipes))
        return 0
    if args.format == "md":
        print(recipes_markdown(), end="")
        return 0
    table = Table(title="built-in recipes (tricklab train NAME / tricklab speedrun --recipe NAME)")
    table.add_column("name")
    table.add_column("what it is")
    for name, doc in recipes.items():
        table.add_row(name, doc)
    console.print(table)
    return 0


def _walled_macs(name: str, model, side: int, classes: int) -> int:
    """The forward MACs; a user's forward runs behind the wall (a 30 s note if it hangs), what it
    raises is one line, and the model is checked as a run checks it (training/preflight.py)."""
    from tricklab.core.usercode import described, user_code
    from tricklab.measure.flops import count_forward_macs
    from tricklab.models import is_own_model
    from tricklab.training.preflight import check_own_model

    if not is_own_model(name):
        return count_forward_macs(model, (1, 3, side, side))
    try:
        with user_code(f"model.name={name}: its forward"):
            macs = count_forward_macs(model, (1, 3, side, side))
            check_own_model(model, name, classes, (2, 3, side, side))
            return macs
    except TrickLabError:
        raise
    except Exception as exc:
        raise TrickLabError(f"model.name={name}: its forward raised {described(exc)}") from None


def cmd_models(args: argparse.Namespace) -> int:
    from tricklab.core.device import out_of_memory_error
    from tricklab.measure.flops import count_params
    from tricklab.models import build_model, get_model_info, list_models
    from tricklab.training.model_memory import check_weights_fit

    if not 1 <= args.num_classes <= MAX_CLASSES:
        raise TrickLabError(f"--num-classes must be in 1..{MAX_CLASSES}, got {args.num_classes}")

    names, settings = model_names_and_settings(args.names, "models")
    names = list(dict.fromkeys(names))  # a model named twice is listed once
    side, m = settings.data.image_size or 32, settings.model
    rows = []
    # every registered model, or those named (package.module:factory and timm:NAME too)
    for info in [get_model_info(name) for name in names] or list_models():
        named = dataclasses.replace(settings, model=dataclasses.replace(m, name=info.name))
        check_weights_fit(named, args.num_classes, (3, side, side))
        model = build_model(
            info.name,
            num_classes=args.num_classes,
            in_channels=3,
            image_size=side,
            width=m.width,
            widths=m.widths,
        )
        try:
            macs = _walled_macs(info.name, model, side, args.num_classes)  # lazy modules sized
        except RuntimeError as exc:  # its activations at this size: no memory for them
            if (oom := out_of_memory_error(exc)) is None:
                raise
            raise TrickLabError(f"{shown(info.name)} at {side}×{side}: no memory to count its "
                                f"MACs ({oom}); lower model.width(s) or data.image_size") from None  # fmt: skip
        rows.append(
            {
                "name": info.name,
                "source": info.source,
                "params": count_params(model),
                "forward_macs": macs,
                "doc": info.doc,
            }
        )
    if args.json:
        print(json.dumps(rows))
        return 0
    table = Table(title=f"models ({args.num_classes} classes, 3x{side}x{side} input)")
    for col, justify in (
        ("name", "left"),
        ("params", "right"),
        ("MACs", "right"),
        ("what it is", "left"),
    ):
        table.add_column(col, justify=justify)
    for r in rows:
        params, macs = f"{r['params'] / 1e6:.2f} M", f"{r['forward_macs'] / 1e6:,.0f} M"
        # an own model's name and docstring are outside text: escapes shown, not sent
        table.add_row(Text(shown(r["name"])), params, macs, Text(shown(r["doc"])))
    console.print(table)
    return 0


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="tricklab",
        description="Train CIFAR-scale image classifiers fast; measure honestly which tricks help.",
    )
    parser.add_argument("--version", action="version", version=f"tricklab {tricklab.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    data_parser = sub.add_parser("data", help="inspect datasets")
    data_parser.set_defaults(func=needs_command(data_parser, "an action"))
    data = data_parser.add_subparsers(dest="data_command", metavar="ACTION")
    show = data.add_parser("show", help="split sizes, classes, per-class counts, shape, mean/std")
    show.add_argument("name", help=" | ".join(DATASET_NAMES))
    show.add_argument("--data-dir", help="folder holding the dataset files")
    show.add_argument("--cache-dir", help="decoded-dataset cache (default ~/.cache/tricklab)")
    show.add_argument("--image-size", type=int_number, help="resize to this side length")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=cmd_data_show)

    tr = sub.add_parser("train", help="train one model from a recipe")
    tr.add_argument(
        "words",
        nargs="*",
        metavar="[RECIPE] [key=value ...]",
        help="a built-in recipe name or YAML file, then dotted key=value overrides",
    )
    tr.add_argument("--out", help="run directory (default runs/<time>-<recipe>)")
    tr.add_argument("--json", action="store_true", help="print the result object as the last line")
    tr.add_argument(
        "-q", "--quiet", action="store_true", help="no progress: only the result and errors"
    )
    add_nproc(tr, "training")
    tr.set_defaults(func=cmd_train)

    tricks = sub.add_parser("tricks", help="every recipe field: default, allowed values, doc")
    tricks.add_argument("group", nargs="?", help="only this group's fields (optim, aug, ...)")
    tricks.add_argument("--search", metavar="WORD", help="only fields whose key or doc has it")
    tricks.add_argument("--json", action="store_true", help="as --format json")
    tricks.add_argument(
        "--format",
        choices=("table", "md", "json"),
        default="table",
        help="table (terminal), md (docs/reference/tricks.md) or json; default table",
    )
    tricks.set_defaults(func=cmd_tricks)
    recipes = sub.add_parser("recipes", help="list the built-in recipes")
    recipes.add_argument("--json", action="store_true", help="as --format json")
    recipes.add_argument(
        "--format",
        choices=("table", "md", "json"),
        default="table",
        help="table (terminal), md (docs/reference/recipes.md: each recipe's YAML too) or json",
    )
    recipes.set_defaults(func=cmd_recipes)
    models = sub.add_parser(
        "models", help="the model registry with params and forward MACs at 32x32"
    )
    models.add_argument(
        "names",
        nargs="*",
        metavar="NAME [key=value ...]",
        help="only these (package.module:factory, timm:NAME), then overrides of "
        + ", ".join(MODEL_OVERRIDE_KEYS),
    )
    models.add_argument("--num-classes", type=int_number, default=10)
    models.add_argument("--json", action="store_true")
    models.set_defaults(func=cmd_models)

    # Each command module adds its own commands.
    for module in (demo, speedrun_cli, ablate_sweep_cli, results_cli, profile_cli, report_cli):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None, *, late_exit: bool = False) -> int:
    """The command `argv` (sys.argv's) and its exit code; `late_exit` (`run`): a Ctrl-C or SIGTERM
    after the command's end leaves the process with that code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value words after an option (`speedrun --runs 3 data.dir=...`) join the command's own.
    words = next(
        (n for n in ("words", "overrides", "baseline") if isinstance(getattr(args, n, None), list)),
        None,
    )
    if extra and (words is None or any(e.startswith("-") or "=" not in e for e in extra)):
        unknown_flags(parser, args, extra)
    if extra:
        setattr(args, words, [*getattr(args, words), *extra])
    if not hasattr(args, "func"):
        return needs_command(parser, "a command")(args)
    try:  # a deleted working folder: torch's MKL would end the process with a "FATAL ERROR"
        here = working_folder()
    except TrickLabError as exc:
        print_error(str(exc))
        return 2
    if len(os.fsencode(here)) >= CWD_MAX_BYTES:  # ...as it would one too deep for its paths
        print_error(f"the current folder's path is {len(os.fsencode(here)):,} bytes long, past "
                    f"the {CWD_MAX_BYTES:,} torch's libraries take; cd into a shorter one")  # fmt: skip
        return 2
    # Every command runs with Ctrl-C and SIGTERM as one exception, Interrupted, and finds the
    # stop request in args.stop (train() and the experiment workers check it).
    with stop_on_signals() as stop, say_notices():  # a weights download said once, here
        args.stop = stop
        code = command_code(args)
        stop.deferring = True  # done and said: a stop now (as say_notices ends) only marks
        stop.exit_code = code if late_exit else None  # ...and `tricklab` then ends with the code
    return code


def _unraisable(hook: object) -> None:
    """An error Python cannot raise where it happens (a model's __del__ raising or calling
    sys.exit, a finalizer): one escaped warning line on stderr, not a traceback that a run which
    went well prints (after its last line, at exit)."""
    try:
        said = described(hook.exc_value) if hook.exc_value is not None else hook.exc_type.__name__
        print(f"warning: an error was ignored ({shown(said)})", file=sys.stderr)
    except Exception:  # at the very end of Python's shutdown: nothing left to say it with
        pass


def run() -> None:
    """The `tricklab` command: exit with `main()`'s code.

    After a handled Ctrl-C or SIGTERM it leaves through os._exit, with everything stored and
    flushed: CPython remembers a KeyboardInterrupt that passed through code a C extension ran with
    PyRun_* (seen with a Ctrl-C during torch's lazy imports) and then kills itself with SIGINT at
    exit although tricklab handled it, so the status would be -2 instead of 130. Output cut short
    by a closed pipe (`tricklab ... | head`) ends quietly with status 1. SIGTERM (what `kill`, job
    schedulers and containers send) stops like Ctrl-C: the run in flight is recorded interrupted.
    The standard streams are prepared first (cli/streams.py: closed ones, encodings, failed
    writes).

    Every other command leaves the same way, after Python's exit functions: a Ctrl-C or SIGTERM
    after its end leaves with its own code (main's `late_exit`), where Python's shutdown would
    have put the default handlers back and a kill read 143, "killed", though nothing was lost.
    For a rank of a data-parallel run (torchrun's) it matters more: gloo's worker threads may
    still be dropping a finished collective whose tensors need the GIL, and a thread that takes
    it while Python shuts down aborts the process (SIGABRT, "terminate called without an active
    exception"; seen once in about 50 runs under load): a run that completed read as failed."""
    streams.prepare()
    sys.unraisablehook = _unraisable
    try:
        code = main(late_exit=True)  # a kill while Python shuts down: the command's own code
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        sys.exit(1)
    except TrickLabError as exc:  # the standard output failed outside a command (--help)
        print_error(str(exc))
        sys.exit(2)
    if code != INTERRUPTED_EXIT_CODE:
        atexit._run_exitfuncs()  # what Python runs at exit, while it can still run it
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
