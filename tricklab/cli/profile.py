"""`tricklab profile model|step|loader`: argument parsing and rendering (the measuring is in
profile_model.py, profile_step.py and profile_loader.py, each callable from Python alone; the
tables' cells, shared with the report, in profile_tables.py).

No torch import at module level: the main CLI imports this module to build its parser.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator

import tricklab.profile.tables as tables
from tricklab.cli.common import (
    MODEL_OVERRIDE_KEYS,
    echo,
    int_number,
    model_names_and_settings,
    needs_command,
    real_number,
    recipe_and_overrides,
    split_words,
    wide_console,
)
from tricklab.core.errors import TrickLabError
from tricklab.profile.tables import ProfileTable

SWITCHES = {"on": True, "true": True, "off": False, "false": False}


# ---------------------------------------------------------------- parsing
def parse_list(text: str, option: str, convert: Callable[[str], object] = str) -> list:
    """'1,32,256' -> [1, 32, 256]; an empty list or item, or a value given twice (two rows of
    one setting, each with its own numbers), is a mistake."""
    items = [item.strip() for item in str(text).split(",")]
    if any(not item for item in items):
        raise TrickLabError(
            f"{option} needs a comma-separated list without empty items, got {text!r}"
        )
    values = []
    for item in items:
        try:
            value = convert(item)
        except (ValueError, KeyError, argparse.ArgumentTypeError):
            raise TrickLabError(f"{option}: {item!r} is not a valid value") from None
        if value in values:
            raise TrickLabError(f"{option} lists {item!r} twice; give each value once")
        values.append(value)
    return values


def _switch(text: str) -> bool:
    return SWITCHES[text.lower()]


@contextlib.contextmanager
def _threads(args: argparse.Namespace) -> Iterator[None]:
    """torch's intra-op threads for the command (--threads), restored after; its stages (a compile,
    the timed rounds) shown on stderr while it runs (bars on a terminal, else plain lines), unless
    --quiet or --json (stdout and stderr then as without a display, as `train --json` keeps them)."""
    from tricklab.cli.common import err_console
    from tricklab.core.progress import ProgressDisplay

    quiet = args.quiet or args.json
    with contextlib.nullcontext() if quiet else ProgressDisplay(err_console), _set_threads(args):
        yield


@contextlib.contextmanager
def _set_threads(args: argparse.Namespace) -> Iterator[None]:
    count = args.threads
    if count is None:
        yield
        return
    if count < 1:
        raise TrickLabError(f"--threads must be >= 1, got {count}")
    cores = os.cpu_count() or 1
    if count > cores:  # more gain nothing, and thousands crash torch's thread pool
        raise TrickLabError(f"--threads {count} is more than this machine's {cores} cores")
    import torch

    from tricklab.core.torchstate import held

    with held(torch.get_num_threads, torch.set_num_threads, count):
        yield


def _quiet_profiler() -> None:
    # torch.profiler's backend (Kineto) writes its start, stop and, on a machine without a GPU, a
    # failed GPU query to stderr; level 6 is above all its levels (USDT is 5). Read when torch
    # loads, so set before; a user's own setting wins.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")


def _threads_text(result: dict) -> str:
    count = result["hardware"]["torch_threads"]
    return f"{count} thread{'' if count == 1 else 's'}"


def _print_json(result: dict) -> None:
    """The result as one JSON line, with the date it was measured (UTC): what a report shows."""
    from tricklab.core.safeio import json_safe

    dated = {**result, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(json.dumps(json_safe(dated)))


def _print_table(console, title: str, table: ProfileTable) -> None:
    """A profile table (profile_tables.py: the same cells as the report's) as a rich Table, then
    its notes."""
    from rich.table import Table

    from tricklab.core.safeio import shown

    rich_table = Table(title=shown(title))  # a recipe file's or dataset's name in it: escaped
    for column, align in zip(table.header, table.align):
        rich_table.add_column(shown(column), justify="left" if align == "l" else "right")
    for index, row in enumerate(table.rows):
        if index in table.sections:
            rich_table.add_section()
        rich_table.add_row(*(shown(cell) for cell in row))
    console.print(rich_table, highlight=False, emoji=False)
    for note in table.notes:
        echo(console, note, wrap=True)


# ---------------------------------------------------------------- model
def cmd_profile_model(args: argparse.Namespace) -> int:
    names, settings = model_names_and_settings(args.words, "profile model")
    if not names:
        raise TrickLabError("give at least one model name (see `tricklab models`)")
    batch_sizes = parse_list(args.batch_sizes, "--batch-sizes", int_number)
    precisions = parse_list(args.precisions, "--precisions")
    compile_modes = parse_list(args.compile, "--compile")
    channels_last = parse_list(args.channels_last, "--channels-last", _switch)
    from tricklab.profile.model import ModelBuild, ProfileGrid, profile_models

    grid = ProfileGrid(batch_sizes, precisions, compile_modes, channels_last)
    m = settings.model
    build = ModelBuild(m.width, m.widths, image_size=settings.data.image_size or 32)
    with _threads(args):
        result = profile_models(
            names,
            grid,
            build=build,
            device=args.device,
            repeats=args.repeats,
            peak_tflops_override=args.peak_tflops,
        )
    if args.json:
        _print_json(result)
    else:
        render_model(result)
    return 0


def render_model(result: dict) -> None:
    console = wide_console()
    c, h, w = result["image_shape"]
    size = tables.model_size(result)
    _print_table(
        console, f"models ({size}{c}×{h}×{w} input, per image)", tables.model_counted(result)
    )
    title = (
        f"latency on {result['hardware']['device_name']} ({result['device']}, "
        f"{_threads_text(result)}; {tables.fixed_settings(result)}): "
        f"{tables.model_spread_words(result)}"
    )
    _print_table(console, title, tables.model_measured(result))


# ---------------------------------------------------------------- step
def cmd_profile_step(args: argparse.Namespace) -> int:
    from tricklab.recipe.schema import load_recipe

    name, overrides = recipe_and_overrides(args.words)
    recipe = load_recipe(name, overrides)  # a bad key or value answers before torch loads
    _quiet_profiler()
    from tricklab.profile.step import profile_step

    with _threads(args):
        result = profile_step(recipe, recipe_name=name, repeats=args.repeats, trace=args.trace)
    if args.json:
        _print_json(result)
    else:
        render_step(result)
    return 0


def render_step(result: dict) -> None:
    console = wide_console()
    title = (
        f"{result['recipe'] or 'recipe'}: step {result['step_ms']:,.1f} ms at batch "
        f"{result['batch_size']} on {result['device']} "
        f"({_threads_text(result)}); {tables.step_interval_words(result)}"
    )
    _print_table(console, title, tables.step_components(result))
    title = f"top operators by self time, per step ({result['profiled_steps']} steps profiled)"
    _print_table(console, title, tables.step_operators(result))
    for note in result["resolved"]["notes"]:  # what the device decided, and why (as train's)
        echo(console, f"note: {note}")
    if result["trace"]:
        echo(
            console,
            f"trace written to {result['trace']} (open in https://ui.perfetto.dev or "
            "chrome://tracing)",
        )


# ---------------------------------------------------------------- loader
def cmd_profile_loader(args: argparse.Namespace) -> int:
    from tricklab.recipe.schema import load_recipe

    names, overrides = split_words(args.words, "dataset")
    if len(names) > 1:
        raise TrickLabError(f"expected one dataset, then key=value overrides; got {names}")
    if args.data_dir is not None and not args.data_dir.strip():
        raise TrickLabError("--data-dir is empty; give a folder or leave it out")
    extra = [f"data.name={names[0]}"] if names else []
    if args.data_dir:
        extra.append(f"data.dir={json.dumps(args.data_dir)}")
    recipe = load_recipe(args.recipe, [*extra, *overrides])
    kinds = parse_list(args.kinds, "--kinds")
    num_workers = parse_list(args.num_workers, "--num-workers", int_number)
    pin_memory = parse_list(args.pin_memory, "--pin-memory", _switch)
    from tricklab.profile.loader import LoaderGrid, profile_loader

    with _threads(args):
        result = profile_loader(
            recipe,
            LoaderGrid(kinds, num_workers, pin_memory),
            recipe_name=args.recipe,
            batch_size=args.batch_size,
            batches=args.batches,
            repeats=args.repeats,
            with_step=args.recipe is not None,
        )
    if args.json:
        _print_json(result)
    else:
        render_loader(result)
    return 0


def render_loader(result: dict) -> None:
    console = wide_console()
    aug = ", ".join(f"{k} {v}" for k, v in result["augment"].items())
    per = result["batches_per_measurement"] or "one epoch of"
    title = (
        f"{result['dataset']}: {result['train_images']:,} train images "
        f"{'×'.join(map(str, result['image_shape']))}, batch {result['batch_size']}, "
        f"{per} batches per measurement, on {result['device']} "
        f"({_threads_text(result)}); medians of {result['repeats']} "
        f"interleaved rounds; augment: {aug}"
    )
    _print_table(console, title, tables.loader_configs(result))


# ---------------------------------------------------------------- parser
def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `tricklab profile model|step|loader` to the main CLI."""
    profile = subparsers.add_parser(
        "profile", help="where the time goes: a model's cost, a recipe's step, loaders"
    )
    profile.set_defaults(func=needs_command(profile, "what to profile"))
    actions = profile.add_subparsers(dest="profile_command", metavar="WHAT")

    def common(p: argparse.ArgumentParser, repeats: int) -> None:
        p.add_argument(
            "--repeats",
            type=int_number,
            default=repeats,
            help=f"interleaved rounds (default {repeats})",
        )
        p.add_argument(
            "--threads", type=int_number, help="torch intra-op threads (default: torch's)"
        )
        p.add_argument(
            "--json", action="store_true", help="print one JSON object (no progress on stderr)"
        )
        p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")

    model = actions.add_parser(
        "model",
        help="params, FLOPs/MACs, forward and train-step latency, img/s, MFU per combination",
        description="Counted (params, forward FLOPs and MACs = FLOPs/2) and measured (forward and "
        "train-step latency, images/s, TFLOP/s, MFU, ms per GMAC) for every batch size x "
        "precision x compile mode x memory format, interleaved round by round.",
    )
    model.add_argument(
        "words",
        nargs="*",
        metavar="MODEL [MODEL ...] [key=value ...]",
        help=f"registry names (`tricklab models`), then {', '.join(MODEL_OVERRIDE_KEYS)} overrides",
    )
    model.add_argument(
        "--batch-sizes", default="1,32,256", help="comma-separated (default 1,32,256)"
    )
    model.add_argument(
        "--precisions",
        default="32-true",
        help="comma-separated tricks.precision values (default 32-true)",
    )
    model.add_argument(
        "--compile", default="off", help="comma-separated tricks.compile modes (default off)"
    )
    model.add_argument("--channels-last", default="off", help="on, off or on,off (default off)")
    model.add_argument("--device", default="auto", choices=("auto", "cuda", "mps", "cpu"))
    model.add_argument(
        "--peak-tflops",
        type=real_number,
        help="device peak TFLOP/s for MFU (default: table of GPUs)",
    )
    common(model, 5)
    model.set_defaults(func=cmd_profile_model)

    step = actions.add_parser(
        "step",
        help="Page's breakdown of a recipe's training step: loading, EMA, optimizer, backward, forward, BatchNorm",
        description="Times the recipe's step in variants that each do less (full with the real "
        "loader; batch on the device; no EMA; forward + backward; forward; without BatchNorm and "
        "activations) and gives each component's ms, share and 95% interval, evaluation and "
        "compilation apart, and the top torch.profiler operators.",
    )
    step.add_argument(
        "words",
        nargs="*",
        metavar="[RECIPE] [key=value ...]",
        help="a built-in recipe name or YAML file, then dotted key=value overrides",
    )
    step.add_argument("--trace", help="write a Chrome/Perfetto trace of the profiled steps here")
    common(step, 10)
    step.set_defaults(func=cmd_profile_step)

    loader = actions.add_parser(
        "loader",
        help="images/s of loader configurations with a recipe's augmentations",
        description="Images/s of each loader configuration (device; torch x num_workers x "
        "pin_memory), interleaved round by round; with --recipe also the fraction of its step "
        "that loading would cost.",
    )
    loader.add_argument(
        "words",
        nargs="*",
        metavar="[DATASET] [key=value ...]",
        help="data.name (default: the recipe's), then dotted key=value recipe overrides",
    )
    loader.add_argument("--data-dir", help="folder holding the dataset files (data.dir)")
    loader.add_argument(
        "--recipe", help="built-in recipe or YAML file: its augmentations, batch size and step"
    )
    loader.add_argument(
        "--kinds", default="device,torch", help="comma-separated (default device,torch)"
    )
    loader.add_argument(
        "--num-workers", default="0,2", help="torch loader workers, comma-separated (default 0,2)"
    )
    loader.add_argument("--pin-memory", default="off", help="on, off or on,off (default off)")
    loader.add_argument(
        "--batch-size", type=int_number, help="default: the recipe's loader.batch_size"
    )
    loader.add_argument(
        "--batches",
        type=int_number,
        help="batches per measurement, from a fresh epoch (default: one epoch)",
    )
    common(loader, 3)
    loader.set_defaults(func=cmd_profile_loader)
