"""`tricklab profile model|step|loader`: argument parsing and rendering (the measuring is in
profile_model.py, profile_step.py and profile_loader.py, each callable from Python alone).

No torch import at module level: the main CLI imports this module to build its parser.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator

from tricklab.clitools import recipe_and_overrides, wide_console
from tricklab.errors import TrickLabError

SWITCHES = {"on": True, "true": True, "off": False, "false": False}
MODEL_OVERRIDE_KEYS = ("model.width", "model.widths", "data.image_size")


# ---------------------------------------------------------------- parsing
def parse_list(text: str, option: str, convert: Callable[[str], object] = str) -> list:
    """'1,32,256' -> [1, 32, 256]; an empty list or item is a mistake."""
    items = [item.strip() for item in str(text).split(",")]
    if any(not item for item in items):
        raise TrickLabError(
            f"{option} needs a comma-separated list without empty items, got {text!r}"
        )
    values = []
    for item in items:
        try:
            values.append(convert(item))
        except (ValueError, KeyError):
            raise TrickLabError(f"{option}: {item!r} is not a valid value") from None
    return values


def _int(text: str) -> int:
    return int(text)


def _switch(text: str) -> bool:
    return SWITCHES[text.lower()]


def _split_words(words: list[str], what: str) -> tuple[list[str], list[str]]:
    """Positional words into names (no '=') and key=value overrides, names first."""
    names = [w for w in words if "=" not in w]
    overrides = [w for w in words if "=" in w]
    if names and overrides and words.index(overrides[0]) < words.index(names[-1]):
        raise TrickLabError(f"give the {what} before the key=value overrides")
    return names, overrides


@contextlib.contextmanager
def _threads(count: int | None) -> Iterator[None]:
    """torch's intra-op threads for the command (--threads), restored after."""
    if count is None:
        yield
        return
    if count < 1:
        raise TrickLabError(f"--threads must be >= 1, got {count}")
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


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
    from tricklab.train.runfiles import json_safe

    dated = {**result, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(json.dumps(json_safe(dated)))


def _num(value: float | None, missing: str = "-") -> str:
    """Three significant digits, without exponents for large values (1,090 not 1.09e+03)."""
    if value is None:
        return missing
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _ms(row: dict) -> str:
    """median ±half the interquartile range, in % of the median."""
    spread = 50 * (row["q3_ms"] - row["q1_ms"]) / row["median_ms"] if row["median_ms"] else 0
    return f"{_num(row['median_ms'])} ±{spread:.0f}%"


def _opt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def _word(value) -> str:
    """on/off for switches, the value otherwise."""
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


# ---------------------------------------------------------------- model
def cmd_profile_model(args: argparse.Namespace) -> int:
    from tricklab.train.recipe import Recipe

    names, overrides = _split_words(args.words, "model names")
    if not names:
        raise TrickLabError("give at least one model name (see `tricklab models`)")
    for override in overrides:
        key = override.partition("=")[0].strip()
        if key not in MODEL_OVERRIDE_KEYS:
            raise TrickLabError(
                f"profile model takes overrides of {', '.join(MODEL_OVERRIDE_KEYS)}, not {key!r}"
            )
    settings = Recipe().override(overrides)  # typed and checked as recipe fields are
    batch_sizes = parse_list(args.batch_sizes, "--batch-sizes", _int)
    precisions = parse_list(args.precisions, "--precisions")
    compile_modes = parse_list(args.compile, "--compile")
    channels_last = parse_list(args.channels_last, "--channels-last", _switch)
    from tricklab.measure.profile_model import profile_models

    with _threads(args.threads):
        result = profile_models(
            names,
            batch_sizes=batch_sizes,
            precisions=precisions,
            compile_modes=compile_modes,
            channels_last=channels_last,
            device=args.device,
            repeats=args.repeats,
            peak_tflops_override=args.peak_tflops,
            width=settings.model.width,
            widths=settings.model.widths,
            image_size=settings.data.image_size or 32,
        )
    if args.json:
        _print_json(result)
    else:
        render_model(result)
    return 0


def render_model(result: dict) -> None:
    from rich.table import Table

    console = wide_console()
    c, h, w = result["image_shape"]
    table = Table(title=f"models ({c}×{h}×{w} input, per image)")
    for column in ("model", "params", "forward GFLOPs", "forward GMACs"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for m in result["models"]:
        table.add_row(
            m["name"],
            f"{m['params'] / 1e6:.2f} M",
            f"{m['forward_flops'] / 1e9:.3f}",
            f"{m['forward_macs'] / 1e9:.3f}",
        )
    console.print(table)
    console.print(result["macs_note"])
    rows = result["results"]
    varying = [
        key for key in ("precision", "compile", "channels_last") if len({r[key] for r in rows}) > 1
    ]
    fixed = ", ".join(
        f"{k} {_word(rows[0][k])}"
        for k in ("precision", "compile", "channels_last")
        if k not in varying
    )
    table = Table(
        title=f"latency on {result['hardware']['device_name']} ({result['device']}, "
        f"{_threads_text(result)}; {fixed}): "
        f"median ±half the IQR of {result['repeats']} interleaved repeats"
    )
    has_mfu = any(r["mfu"] is not None for r in rows)
    columns = ["model", "batch", *varying, "forward ms", "train step ms", "train img/s",
               "train TFLOP/s", *(["MFU %"] if has_mfu else []), "fwd ms/GMAC", "train ms/GMAC"]  # fmt: skip
    compiled = any(r["compile_seconds"] is not None for r in rows)
    if compiled:
        columns.append("compile s")
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    for r in rows:
        cells = [r["model"], str(r["batch_size"]), *(_word(r[k]) for k in varying)]
        cells += [
            _ms(r["forward_ms"]),
            _ms(r["train_step_ms"]),
            f"{r['train_images_per_second']:,.0f}",
            _num(r["train_tflops"]),
            *([_opt(r["mfu"] and 100 * r["mfu"], ".1f", "n/a")] if has_mfu else []),
            _num(r["forward_ms_per_gmac"]),
            _num(r["train_ms_per_gmac"]),
        ]
        if compiled:
            cells.append(_opt(r["compile_seconds"], ".1f"))
        table.add_row(*cells)
    console.print(table)
    console.print(result["train_step_note"])
    if any(v is None for v in result["peak_tflops"].values()):
        console.print(
            f"MFU unavailable on {result['device']}: no peak FLOP/s known for it "
            "(tricklab.measure.mfu has a table of GPUs); give --peak-tflops"
        )


# ---------------------------------------------------------------- step
def cmd_profile_step(args: argparse.Namespace) -> int:
    from tricklab.train.recipe import load_recipe

    name, overrides = recipe_and_overrides(args.words)
    recipe = load_recipe(name, overrides)  # a bad key or value answers before torch loads
    _quiet_profiler()
    from tricklab.measure.profile_step import profile_step

    with _threads(args.threads):
        result = profile_step(recipe, recipe_name=name, repeats=args.repeats, trace=args.trace)
    if args.json:
        _print_json(result)
    else:
        render_step(result)
    return 0


def render_step(result: dict) -> None:
    from rich.table import Table

    console = wide_console()
    title = (
        f"{result['recipe'] or 'recipe'}: step {result['step_ms']:,.1f} ms at batch "
        f"{result['batch_size']} on {result['device']} "
        f"({_threads_text(result)}); medians of {result['repeats']} "
        "interleaved rounds, 95% paired-bootstrap intervals"
    )
    table = Table(title=title)
    for column in ("component", "ms/step", "share", "95% interval ms", "measured as", "note"):
        table.add_column(
            column, justify="left" if column in ("component", "measured as", "note") else "right"
        )

    def add(c: dict, indent: str = "") -> None:
        note = []
        if c["within_noise"]:
            note.append("within noise")
        if c["ms_raw"] < 0:
            note.append(f"clipped from {_num(c['ms_raw'])}")
        table.add_row(
            indent + c["name"].replace("_", " "),
            f"{_num(c['ms'])}",
            f"{100 * c['share']:.1f} %",
            f"[{_num(c['ci_low_ms'])}, {_num(c['ci_high_ms'])}]",
            c["measured_as"],
            ", ".join(note),
        )

    for c in result["components"]:
        add(c)
    if result["inside_forward_backward"]:
        table.add_section()
        table.add_row("of forward + backward:", "", "", "", "", "")
        for c in result["inside_forward_backward"]:
            add(c, "  ")
    console.print(table)
    replaced = ", ".join(f"{n} {k}" for k, n in result["replaced_modules"].items()) or "none"
    console.print(
        f"replaced by identity in the bare copy: {replaced} (modules; functional calls remain)"
    )
    if result["components_sum_ms"] > result["step_ms"] * 1.0001:
        console.print(
            f"the clipped components add up to {result['components_sum_ms']:,.1f} ms, above the "
            "measured step: negative differences (noise) count as 0"
        )
    e = result["evaluation"]
    line = f"evaluation: {_num(e['seconds'])} s per pass over {e['images']:,} images"
    if e["tta_seconds"] is not None:
        line += f"; with TTA {e['tta']}: {_num(e['tta_seconds'])} s"
    console.print(line)
    if result["compile_seconds"]:
        console.print(f"compilation and warm-up, apart: {result['compile_seconds']:.1f} s")
    ops = Table(
        title=f"top operators by self time, per step ({result['profiled_steps']} steps profiled)"
    )
    on_device = any(o["self_device_ms_per_step"] is not None for o in result["top_operators"])
    columns = ["operator", "calls/step", "self CPU ms/step"]
    if on_device:
        columns.append("self device ms/step")
    for column in [*columns, "share"]:
        ops.add_column(column, justify="left" if column == "operator" else "right")
    for o in result["top_operators"]:
        cells = [o["name"], f"{_num(o['calls_per_step'])}", f"{_num(o['self_cpu_ms_per_step'])}"]
        if on_device:
            cells.append(f"{_num(o['self_device_ms_per_step'])}")
        ops.add_row(*cells, f"{100 * o['self_share']:.1f} %")
    console.print(ops)
    if result["trace"]:
        console.print(
            f"trace written to {result['trace']} (open in https://ui.perfetto.dev or chrome://tracing)"
        )


# ---------------------------------------------------------------- loader
def cmd_profile_loader(args: argparse.Namespace) -> int:
    from tricklab.train.recipe import load_recipe

    names, overrides = _split_words(args.words, "dataset")
    if len(names) > 1:
        raise TrickLabError(f"expected one dataset, then key=value overrides; got {names}")
    if args.data_dir is not None and not args.data_dir.strip():
        raise TrickLabError("--data-dir is empty; give a folder or leave it out")
    extra = [f"data.name={names[0]}"] if names else []
    if args.data_dir:
        extra.append(f"data.dir={json.dumps(args.data_dir)}")
    recipe = load_recipe(args.recipe, [*extra, *overrides])
    kinds = parse_list(args.kinds, "--kinds")
    num_workers = parse_list(args.num_workers, "--num-workers", _int)
    pin_memory = parse_list(args.pin_memory, "--pin-memory", _switch)
    from tricklab.measure.profile_loader import profile_loader

    with _threads(args.threads):
        result = profile_loader(
            recipe,
            recipe_name=args.recipe,
            kinds=kinds,
            num_workers=num_workers,
            pin_memory=pin_memory,
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
    from rich.table import Table

    console = wide_console()
    aug = ", ".join(f"{k} {v}" for k, v in result["augment"].items())
    per = result["batches_per_measurement"] or "one epoch of"
    table = Table(
        title=f"{result['dataset']}: {result['train_images']:,} train images "
        f"{'×'.join(map(str, result['image_shape']))}, batch {result['batch_size']}, "
        f"{per} batches per measurement, on {result['device']} "
        f"({_threads_text(result)}); medians of {result['repeats']} "
        f"interleaved rounds; augment: {aug}"
    )
    step = result["step"]
    columns = ["loader", "workers", "pin_memory", "images/s", "vs first", "ms/batch", "setup s"]
    if step:
        columns.append("of the step")
    for column in columns:
        table.add_column(column, justify="left" if column == "loader" else "right")
    for c in result["configs"]:
        cells = [
            c["kind"],
            _opt(c["num_workers"], "d"),
            "-" if c["pin_memory"] is None else ("on" if c["pin_memory"] else "off"),
            f"{c['images_per_second']:,.0f}",
            f"{c['vs_first']:.3g}×",
            f"{_num(c['ms_per_batch']['median_ms'])}",
            f"{c['setup_seconds']:.2f}",
        ]
        if step:
            cells.append(f"{100 * c['step_fraction']:.1f} %")
        table.add_row(*cells)
    console.print(table)
    if step:
        console.print(
            f"{result['recipe']}'s step on a batch already on the device: "
            f"{1e3 * step['seconds']:,.1f} ms at batch {step['batch_size']}"
        )
    for note in result["notes"]:
        console.print(note)


# ---------------------------------------------------------------- parser
def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `tricklab profile model|step|loader` to the main CLI."""
    profile = subparsers.add_parser(
        "profile", help="where the time goes: a model's cost, a recipe's step, loaders"
    )
    profile.set_defaults(func=lambda args: profile.print_help() or 2)
    actions = profile.add_subparsers(dest="profile_command", metavar="WHAT")

    def common(p: argparse.ArgumentParser, repeats: int) -> None:
        p.add_argument(
            "--repeats", type=int, default=repeats, help=f"interleaved rounds (default {repeats})"
        )
        p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
        p.add_argument("--json", action="store_true", help="print one JSON object")

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
        "--peak-tflops", type=float, help="device peak TFLOP/s for MFU (default: table of GPUs)"
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
    loader.add_argument("--batch-size", type=int, help="default: the recipe's loader.batch_size")
    loader.add_argument(
        "--batches",
        type=int,
        help="batches per measurement, from a fresh epoch (default: one epoch)",
    )
    common(loader, 3)
    loader.set_defaults(func=cmd_profile_loader)
