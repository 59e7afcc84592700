"""Write benchmarks/RESULTS.md, and README.md's headline table, from the JSON under benchmarks/results/.

Usage: python benchmarks/make_results.py            # rewrite both
       python benchmarks/make_results.py --check    # exit 1, naming the file, if either is stale

Every dated number lives once, in a JSON file of benchmarks/results/<date>-<machine>/: what a
benchmark wrote (a `tricklab speedrun` summary.json, `airbench_side_by_side.py`'s side_by_side.json,
`tricklab profile model --json`) or a measurement record (`"kind": "record"`: title, date, machine,
command and its write-up in Markdown; the CPU measurements the README carried until issue 28 were
moved into such records). Folders are listed newest first. Needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
RESULTS_MD = HERE / "RESULTS.md"
README = HERE.parent / "README.md"
HEADLINE_START = "<!-- results:headline (benchmarks/make_results.py writes this table) -->"
HEADLINE_END = "<!-- /results:headline -->"
DEMO_START = "<!-- results:demo (benchmarks/make_results.py writes this paragraph) -->"
DEMO_END = "<!-- /results:demo -->"


def pct(value: float) -> str:
    return f"{100 * value:.2f}"


def gib(value: float) -> str:
    return f"{value / 2**30:.2f}"


def read_folder(folder: Path) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """The folder's JSON files by what wrote them: summary, side_by_side, profile, record."""
    kinds: dict[str, list[tuple[str, dict[str, Any]]]] = {
        k: []
        for k in (
            "side_by_side",
            "summary",
            "profile",
            "step_kernels",
            "compile_cache",
            "gpu_session",
            "demo",
            "cpu_precision",
            "record",
        )
    }
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("kind") == "record":
            kinds["record"].append((path.stem, data))
        elif "ratio" in data and "stats" in data:
            kinds["side_by_side"].append((path.stem, data))
        elif "recipe_name" in data and "runs" in data:
            kinds["summary"].append((path.stem, data))
        elif data.get("kind") == "model" and "results" in data:
            kinds["profile"].append((path.stem, data))
        elif data.get("benchmark") == "step_kernels" and "rows" in data:
            kinds["step_kernels"].append((path.stem, data))
        elif data.get("benchmark") == "compile_cache" and "pairs" in data:
            kinds["compile_cache"].append((path.stem, data))
        elif "sections" in data and "env" in data:
            kinds["gpu_session"].append((path.stem, data))
        elif data.get("benchmark") == "demo" and "stats" in data:
            kinds["demo"].append((path.stem, data))
        elif data.get("benchmark") == "cpu-precision" and "rows" in data:
            kinds["cpu_precision"].append((path.stem, data))
    kinds["record"].sort(key=lambda item: (item[1].get("order", 0), item[0]))
    return kinds


# ------------------------------------------------------------------ tables from benchmark JSON
def side_by_side_table(items: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """tricklab's speedrun94 and airbench's train94, interleaved in one process (one row each per
    call), record seconds against airbench's total_time_seconds."""
    lines = [
        "| precision of tricklab's run | | runs | accuracy % mean ± std | 95 % CI | "
        "record s mean / median (min–max) | tricklab / airbench |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for stem, data in items:
        precision = stem.removeprefix("side_by_side_")
        ratio = data["ratio"]
        for name, s in data["stats"].items():
            mine = name.startswith("tricklab")
            seconds = (
                f"{s['seconds_mean']:.3f} / {s['seconds_median']:.3f} "
                f"({s['seconds_min']:.3f}–{s['seconds_max']:.3f})"
            )
            vs = (
                f"**{ratio['of_means']:.2f}×** (paired median {ratio['median_paired']:.2f}×)"
                if mine
                else "1"
            )
            low, high = s["accuracy_ci95"]
            lines.append(
                f"| `{precision}` | {name} | {s['n']} | {pct(s['accuracy_mean'])} ± "
                f"{pct(s['accuracy_std'])} | {pct(low)}–{pct(high)} | {seconds} | {vs} |"
            )
    return lines


def summary_table(items: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """One row per `tricklab speedrun` summary.json (named by its file: recipe and change)."""
    lines = [
        "| speedrun (file) | runs | accuracy % mean ± std | record s mean / median | "
        "train s mean / median | compile s (warm-up) | MFU | peak GiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for stem, s in items:
        mfu = "-" if s.get("mfu_mean") is None else f"{100 * s['mfu_mean']:.1f} %"
        compile_seconds = s.get("warmup_compile_seconds")
        lines.append(
            f"| `{stem.removesuffix('-summary')}` | {s['n']} | {pct(s['accuracy_mean'])} ± "
            f"{pct(s['accuracy_std'])} | {s['record_seconds_mean']:.2f} / "
            f"{s['record_seconds_median']:.2f} | {s['train_seconds_mean']:.2f} / "
            f"{s['train_seconds_median']:.2f} | "
            f"{'-' if compile_seconds is None else f'{compile_seconds:.1f}'} | {mfu} | "
            f"{gib(s['peak_memory_bytes'])} |"
        )
    first = items[0][1]
    peak = first.get("peak_tflops")
    if peak:
        lines += [
            "",
            f"MFU against {first.get('peak_tflops_source')} ({peak} TFLOP/s), 3 × forward FLOPs "
            "per trained image. Record seconds: whitening fit + epochs + final TTA evaluation, as "
            "airbench's total_time_seconds; train seconds: the epochs alone. Compile seconds are "
            "the warm-up run's, which is not counted.",
        ]
    return lines


def profile_table(data: dict[str, Any]) -> list[str]:
    """`tricklab profile model --json`: MACs against measured train-step time."""
    macs = {m["name"]: m for m in data["models"]}
    lines = [
        "| model | params M | forward GMACs/image | batch | precision | compile | "
        "forward ms | train step ms | train ms per GMAC |",
        "|---|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in data["results"]:
        m = macs[r["model"]]
        lines.append(
            f"| {r['model']} | {m['params'] / 1e6:.2f} | {m['forward_macs'] / 1e9:.3f} | "
            f"{r['batch_size']} | {r['precision']} | {r['compile']} | "
            f"{r['forward_ms']['median_ms']:.2f} | {r['train_step_ms']['median_ms']:.2f} | "
            f"{r['train_ms_per_gmac']:.3f} |"
        )
    hardware = data.get("hardware", {})
    lines += [
        "",
        f"{hardware.get('device_name', data.get('device'))}, torch {hardware.get('torch')}; "
        f"medians of {data.get('repeats')} interleaved rounds. {data.get('macs_note', '')}.",
    ]
    return lines


# ------------------------------------------------------------------ the page
def record_table(record: dict[str, Any]) -> list[str]:
    """A record's own table, where it has one (columns, rows)."""
    table = record.get("table")
    if not table:
        return []
    columns = table["columns"]
    return [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(columns))) + "|",
        *("| " + " | ".join(row) + " |" for row in table["rows"]),
    ]


def record_block(stem: str, record: dict[str, Any]) -> list[str]:
    lines = ["", f"### {record['title']}", "", f"*{record['date']}, {record['machine']}.*"]
    if record.get("command"):
        lines += ["", f"Command: `{record['command']}`"]
    if record.get("table"):
        lines += ["", *record_table(record)]
    return lines + ["", record["markdown"].strip()]


def folder_section(folder: Path) -> list[str]:
    kinds = read_folder(folder)
    lines = ["", f"## {folder.name}", "", f"Files: `benchmarks/results/{folder.name}/`."]
    if kinds["side_by_side"]:
        lines += ["", "### Side by side with airbench", ""]
        lines += [
            "`benchmarks/airbench_side_by_side.py`: tricklab's `speedrun94` and airbench's own "
            "`train94` (PyPI airbench 0.1.8) in one process, interleaved run by run after one "
            "warm-up each, on the same images.",
            "",
            *side_by_side_table(kinds["side_by_side"]),
        ]
    if kinds["summary"]:
        lines += ["", "### The record recipes (`tricklab speedrun`)", ""]
        lines += summary_table(kinds["summary"])
    for stem, data in kinds["profile"]:
        lines += ["", f"### `tricklab profile model` ({stem}.json)", "", *profile_table(data)]
    for stem, data in kinds["step_kernels"]:
        lines += ["", f"### ATen operators per training step ({stem}.json)", ""]
        lines += step_kernels_table(data)
    for stem, data in kinds["compile_cache"]:
        lines += ["", f"### Compile once across processes ({stem}.json)", ""]
        lines += compile_cache_table(data)
    for stem, data in kinds["gpu_session"]:
        lines += gpu_session_tables(stem, data)
    for stem, data in kinds["demo"]:
        lines += demo_section(stem, data)
    for stem, data in kinds["cpu_precision"]:
        lines += cpu_precision_section(stem, data)
    for stem, record in kinds["record"]:
        lines += record_block(stem, record)
    return lines


def cpu_precision_section(stem: str, data: dict[str, Any]) -> list[str]:
    """`benchmarks/cpu_precision.py`: the demo's baseline in fp32 and in bf16 autocast."""
    lines = [
        "",
        f"### fp32 against bf16 autocast on this CPU ({stem}.json)",
        "",
        f"*{data['date']}, {data['cores']}-core {data['cpu']}, {data['bf16']}, {data['threads']} "
        f"torch threads, load average {data['load_average_start']:.2f} at the start and "
        f"{data['load_average_end']:.2f} at the end.*",
        "",
        f"`benchmarks/cpu_precision.py --seeds {data['seeds']} --epochs {data['epochs']:g}`: the "
        "demo's baseline (`speedrun94` at quarter width on the 10,000 sample images, JPEG q75) in "
        "each precision, interleaved seed by seed in one process. What `tricks.precision: auto` "
        "on a CPU rests on (docs/precision.md).",
        "",
        "| precision | accuracy % mean ± std | per seed | train s median | per seed |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in data["rows"].items():
        accs = ", ".join(pct(r["accuracy"]) for r in row["runs"])
        secs = ", ".join(f"{r['train_seconds']:.2f}" for r in row["runs"])
        std = pct(row["accuracy_std"]) if row["accuracy_std"] is not None else "-"
        lines.append(
            f"| `{name}` | {pct(row['accuracy_mean'])} ± {std} | {accs} | "
            f"{row['train_seconds_median']:.2f} | {secs} |"
        )
    ratio = data["bf16_over_fp32_seconds"]
    return [*lines, "", f"bf16-mixed / 32-true train seconds (medians): **{ratio:.2f}×**."]


def compile_cache_table(data: dict[str, Any]) -> list[str]:
    """`benchmarks/compile_cache.py`: a process's compile seconds on a warm cache vs a cold one."""
    lines = [
        f"`python benchmarks/compile_cache.py`: torch {data['torch']}, CPU ({data['cpu_capability']}), "
        f"load average {data['load_average_before_after'][0]:.1f} before, "
        f"{data['load_average_before_after'][1]:.1f} after; `tricklab train speedrun94` "
        f"{' '.join(data['overrides'])}, each process new, each pair on a fresh `TRICKLAB_CACHE`.",
        "",
        "| pair | cold compile s | warm compile s | warm / cold |",
        "|---:|---:|---:|---:|",
    ]
    for k, pair in enumerate(data["pairs"]):
        lines.append(
            f"| {k} | {pair['cold']['compile_seconds']:.1f} | {pair['warm']['compile_seconds']:.1f} "
            f"| {pair['ratio']:.3f}x |"
        )
    lines += ["", f"Median warm / cold: **{data['median_ratio']:.3f}x** (goal {data['goal']})."]
    return lines


def _f(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def gpu_session_tables(stem: str, data: dict[str, Any]) -> list[str]:
    """`benchmarks/gpu_session.py`'s sections as tables (what each section measured)."""
    env, sections = data["env"], data["sections"]
    lines = [
        "",
        f"### `benchmarks/gpu_session.py` ({stem}.json)",
        "",
        f"{env['device']}, torch {env['torch']}, CUDA {env['cuda']}, {env['date']}; {env['data']}.",
    ]
    side = sections.get("side", {})
    tables = [
        (side, side.get("compare"), "airbench94", ""),
        (side, side.get("compare_to_muon"), "airbench94_muon", ""),
        *(
            (
                sections.get(name, {}),
                sections.get(name, {}).get("compare"),
                title,
                f" ({name} section)",
            )
            for name, title in (
                ("compiled", "airbench94"),
                ("globalpool", "airbench94"),
                ("shipped", "airbench94"),
                ("muon", "airbench94_muon"),
                ("pool", "speedrun94"),
            )
        ),
    ]
    for section, rows, title, which in tables:
        if not rows:
            continue
        lines += [
            "",
            f"Interleaved rounds{which} (the order rotating), record seconds vs **{title}**:",
            "",
            "| contender | runs | accuracy % mean ± std | record s mean | median | min-max | "
            f"vs {title} (means) | paired median | accuracy diff pp, 95 % CI | runs >= its mean | "
            "peak GiB | MFU |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, r in rows.items():
            if not r["n"]:
                errors = [run["error"] for run in section["runs"][name] if "error" in run]
                lines.append(f"| {name} | 0 | no run completed: {errors[0] if errors else '-'} |")
                continue
            ci = r.get("accuracy_diff_pp_ci95")
            lines.append(
                f"| {name} | {r['n']} | {pct(r['accuracy_mean'])} ± {pct(r['accuracy_std'] or 0)} "
                f"| {r['seconds_mean']:.3f} | {r['seconds_median']:.3f} | "
                f"{r['seconds_min']:.2f}-{r['seconds_max']:.2f} | "
                f"**{r['ratio_of_means']:.3f}x** | {r['paired_ratio_median']:.3f}x | "
                f"{'-' if not ci else f'{ci[0]:+.2f} to {ci[1]:+.2f}'} | "
                f"{_f(r['fraction_at_or_above_reference_mean'], '.0%')} | "
                f"{_f(r['peak_memory_gib'], '.2f')} | {_f(r['mfu_median'], '.1%')} |"
            )
    if sections.get("compiled", {}).get("compare"):
        lines += [
            "",
            "In the compiled section, `speedrun94` is the recipe as shipped (on a GPU its step in a "
            "CUDA graph, `tricks.cuda_graph: auto`); in the side section, `speedrun94` is eager "
            "(`tricks.cuda_graph=off`).",
        ]
    for section in (side, sections.get("muon", {})):
        if "airbench94_muon_compile_and_warmup_seconds" in section:
            seconds = section["airbench94_muon_compile_and_warmup_seconds"]
            lines += [
                "",
                "airbench94_muon's compile (its `torch.compile(mode='max-autotune')`) and warm-up "
                f"run: {seconds:.0f} s, paid once, apart.",
            ]
    if sections.get("globalpool", {}).get("compare"):
        lines += [
            "",
            "In the globalpool section, `speedrun94` is the recipe as shipped (its global pool an "
            "amax, `GlobalMaxPool`; on a GPU its step in a CUDA graph) and `+adaptive_pool` puts "
            "PyTorch's adaptive global max-pool back while the run lasts (the net before "
            "2026-11-26).",
        ]
    if sections.get("pool", {}).get("compare"):
        lines += [
            "",
            "In the pool section, `+amax_pool` swaps all of the net's max-pools for amax while the "
            "run lasts: the three 2x2 ones and the global one (see the kernels below).",
        ]
    if sections.get("shipped", {}).get("compare"):
        lines += [
            "",
            "In the shipped section, `speedrun94` is the recipe as shipped on the day (on a GPU its "
            "step in a CUDA graph).",
        ]
    for name in ("pool", "shipped"):
        lines += pool_kernels_table(sections.get(name, {}))
    for name in ("profile", "muon-profile"):
        lines += profile_rows(sections.get(name, {}))
    lines += study_rows(sections.get("study", {}))
    ddp = sections.get("ddp", {}).get("runs")
    if ddp:
        lines += [
            "",
            "`tricklab train speedrun94`, one process against torchrun (one GPU: one rank):",
            "",
            "| run | status | record s | train s | wall s (process) |",
            "|---|---|---:|---:|---:|",
        ]
        for r in ddp:
            lines.append(
                f"| {r['label']} | {r.get('status')} | {_f(r.get('record_seconds'), '.3f')} | "
                f"{_f(r.get('train_seconds'), '.3f')} | {r['wall_seconds']:.1f} |"
            )
    return lines


def profile_rows(section: dict[str, Any]) -> list[str]:
    """A profile section (torch.profiler over epoch 2 and its evaluation) as a table."""
    profile = {k: v for k, v in section.items() if isinstance(v, dict)}
    if not profile:
        return []
    lines = [
        "",
        "torch.profiler over epoch 2 and its evaluation:",
        "",
        "| run | window s | CUDA kernels | kernel s | GPU busy | largest kernel |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, r in profile.items():
        top = r["top_kernels"][0] if r.get("top_kernels") else None
        largest = f"`{top[0][:48]}` {top[2]:.1f} ms" if top else "-"
        lines.append(
            f"| {name} | {r['window_seconds']:.3f} | {r['cuda_kernels']:,} | "
            f"{r['kernel_seconds']:.3f} | {r['gpu_busy']:.0%} | {largest} |"
        )
    return lines


def pool_kernels_table(section: dict[str, Any]) -> list[str]:
    """The pool section's kernels (benchmarks/pool_kernels.py): microseconds per forward +
    backward, captured in a CUDA graph, per shape and variant."""
    blocks = [v for k, v in section.items() if k.startswith("kernels_")]
    if not blocks:
        return []
    lines = [
        "",
        "airbench's pools alone, fp16 channels-last, forward + backward replayed from a CUDA "
        "graph (`benchmarks/pool_kernels.py`), microseconds (median of 5 blocks of 50):",
        "",
        "| batch | map | PyTorch's kernel | amax | NCHW round trip (2x2) / max with indices "
        "(global) |",
        "|---:|---|---:|---:|---:|",
    ]
    for block in blocks:
        for shape, row in block["microseconds"].items():
            first = row.get("max_pool2d", row.get("global_adaptive"))
            amax = row.get("amax", row.get("global_amax"))
            nchw = row.get("nchw", row.get("global_indices"))
            lines.append(
                f"| {block['batch']} | {shape} | {first['us']:.0f} | {amax['us']:.0f} | "
                f"{'-' if nchw is None else format(nchw['us'], '.0f')} |"
            )
    return lines


def study_rows(study: dict[str, Any]) -> list[str]:
    """The study section: a whole ablate's wall time against its runs' records, and the loop."""
    lines: list[str] = []
    if "tricklab_ablate" in study:
        a, loop = study["tricklab_ablate"], study.get("airbench_train94_loop", {})
        phases = a.get("phases")
        command = (
            "tricklab " + " ".join(phases["argv"]) if phases else a["command"].split(" -m ")[-1]
        )
        lines += [
            "",
            "A whole study, from the command's start to its end (a fresh process each):",
            "",
            "| command | runs | wall s | sum of record s | wall / sum |",
            "|---|---:|---:|---:|---:|",
            f"| `{command}` | {a['runs_with_record_seconds']} | "
            f"{a['wall_seconds']:.1f} | {a['sum_record_seconds']:.1f} | "
            f"{_f(a['wall_over_sum'], '.2f')}x |",
        ]
        if loop:
            verbose = "verbose, " if "verbose=True" in loop.get("command", "") else ""
            lines.append(
                f"| a Python loop of airbench's `train94` ({verbose}a fresh process) | "
                f"{a['runs_with_record_seconds']} | {loop['wall_seconds']:.1f} | "
                f"{_f(loop.get('sum_record_seconds'), '.1f')} | "
                f"{_f(loop.get('wall_over_sum'), '.2f')}{'x' if loop.get('wall_over_sum') else ''} |"
            )
        if phases:
            lines += study_phases_table(a["wall_seconds"], phases)
    return lines


def study_phases_table(wall: float, p: dict[str, Any]) -> list[str]:
    """benchmarks/study_phases.py's totals as where a study's wall time went."""
    phase = {k: v["seconds"] for k, v in p["phases"].items()}
    runs, r = p["results"]["runs"], p["results"]
    record, warm = r["record_seconds"], phase.get("api.warm_up_run", r["compile_seconds"])
    rows = [
        ("process start and imports (torch, Optuna, tricklab)", wall - p["command_seconds"]),
        ("check_setup: every setting built once before the first run", phase["setup.check_setup"]),
        ("the runs' record seconds (whitening fit + epochs + final TTA)", record),
        ("warm-ups (an eager recipe's first run; compile_seconds)", warm),
        ("per-epoch evaluations, run setup, run files (train() less the two above)",
         phase["api.train"] - record - warm),
        ("Optuna: claiming, storing each trial", phase["runner.run_units"] - phase["api.train"]),
        ("the summary (statistics) and the rest",
         p["command_seconds"] - phase["setup.check_setup"] - phase["runner.run_units"]),
    ]  # fmt: skip
    lines = [
        "",
        f"Where the study's {wall:.1f} s went (`benchmarks/study_phases.py`, {runs} runs):",
        "",
        "| part | seconds | per run |",
        "|---|---:|---:|",
    ]
    for name, seconds in rows:
        lines.append(f"| {name} | {seconds:.1f} | {seconds / runs:.2f} |")
    return lines


def step_kernels_table(data: dict[str, Any]) -> list[str]:
    """`benchmarks/step_kernels.py`: operators one step dispatches, by phase, per contender."""
    label = f" ({data['label']})" if data.get("label") else ""
    lines = [
        f"`benchmarks/step_kernels.py`{label}: torch {data['torch']}, width {data['width']}, "
        f"batch {data['batch']}, {data['image_size']}px, averaged over {data['period_steps']} "
        "steps (EMA/lookahead every few steps).",
        "",
        "| precision | contender | forward | loss | backward | optimizer | schedule | ema | total "
        "| weight casts |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in data["rows"]:
        c = row["counts"]
        lines.append(
            f"| {row['precision']} | {row['contender']} | {c['forward']:g} | {c['loss']:g} | "
            f"{c['backward']:g} | {c['optimizer']:g} | {c['schedule']:g} | {c['ema']:g} | "
            f"**{c['total']:g}** | {c.get('weight_casts', 0):g} |"
        )
    return lines


# ------------------------------------------------------------------ the demo (demo_record.py)
def minutes(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"


def _ci(value: float | None, low: float | None, high: float | None, scale: float = 100) -> str:
    if value is None:
        return "-"
    if low is None or high is None:
        return f"{scale * value:.2f}"
    return f"{scale * value:.2f} [{scale * low:.2f}, {scale * high:.2f}]"


def demo_table(data: dict[str, Any]) -> list[str]:
    """The demo's study, one row per configuration, as the study's own statistics give it."""
    rows = [
        "| configuration | complete runs | accuracy % mean [95 % CI] | Δ accuracy pp [95 % CI] | "
        "train s per run (geometric mean) | speed vs baseline [95 % CI] | verdict: accuracy; time |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for s in data["stats"]:
        name = "baseline" if s["is_reference"] else ", ".join(f"`{o}`" for o in s["overrides"])
        secs = "-" if s["train_seconds_geomean"] is None else f"{s['train_seconds_geomean']:.1f}"
        speed = (
            "reference"
            if s["is_reference"]
            else _ci(s["speedup"], s["speedup_ci_low"], s["speedup_ci_high"], scale=1)
        )
        diff = (
            ""
            if s["is_reference"]
            else _ci(s["accuracy_diff"], s["accuracy_diff_ci_low"], s["accuracy_diff_ci_high"])
        )
        acc = _ci(s["accuracy_mean"], s["accuracy_ci_low"], s["accuracy_ci_high"])
        planned = s["planned"] if s["planned"] is not None else "?"
        verdict = "reference" if s["is_reference"] else f"{s['verdict']}; {s['time_verdict']}"
        rows.append(
            f"| {name} | {s['n']} of {planned} | {acc} | {diff} | {secs} | {speed} | {verdict} |"
        )
    return rows


def demo_how(data: dict[str, Any]) -> str:
    cores = data["cores"]
    return (
        f"`{data['command']}` took {minutes(data['wall_seconds'])} in all, dataset cache empty; "
        f"load average {data['load_start']:.2f} at its start and {data['load_end']:.2f} at its end "
        f"on {cores} cores"
    )


def demo_section(stem: str, data: dict[str, Any]) -> list[str]:
    plan = data["plan"]
    return [
        "",
        f"### `tricklab demo`, the main job ({stem}.json)",
        "",
        f"*{data['date']}, {data['machine']}.*",
        "",
        f"`benchmarks/demo_record.py`: {demo_how(data)}. On {data['device']}: `speedrun94` at "
        f"widths {plan['cpu_widths']} in {data.get('precision') or plan['cpu_precision']} "
        f"(`tricks.precision={plan['cpu_precision']}`; a GPU keeps the recipe's), "
        f"{plan['epochs']:g} epochs, {data['seeds']} seeds per configuration.",
        "",
        *demo_table(data),
        "",
        "It printed:",
        "",
        *(f"> {line}" for line in textwrap.wrap(data["summary"], 96)),
    ]


def newest_demo() -> dict[str, Any] | None:
    for folder in folders():
        demos = read_folder(folder)["demo"]
        if demos:
            return demos[0][1]
    return None


def demo_headline(data: dict[str, Any]) -> tuple[str, str]:
    """The headline table's CPU row and its note, from the newest demo."""
    plan, base = data["plan"], next(s for s in data["stats"] if s["is_reference"])
    width = (
        "quarter width"
        if list(plan["cpu_widths"]) == [16, 64, 64]
        else f"widths {plan['cpu_widths']}"
    )
    low, high = base["accuracy_ci_low"], base["accuracy_ci_high"]
    interval = "" if low is None or high is None else f" (95 % CI {pct(low)}–{pct(high)})"
    row = (
        f"| {data['cores']}-core CPU, {data['date']} | `tricklab demo`'s baseline: `speedrun94` at "
        f"{width}, {data.get('precision') or plan['cpu_precision']}, {plan['epochs']:g} epochs on "
        f"{plan['train_size'] or 10_000:,} images | "
        f"{base['n']} | {pct(base['accuracy_mean'])}{interval} | "
        f"{base['train_seconds_mean']:.1f} train | - |"
    )
    note = (
        f"CPU row ({data['machine']}): {demo_how(data)}: the scaled `speedrun94` and "
        f"{len(data['stats']) - 1} of its tricks switched off one at a time, {data['seeds']} seeds "
        f"each, {plan['epochs']:g} epochs on {plan['train_size'] or 10_000:,} of the CIFAR-10 "
        "images shipped with tricklab "
        "(JPEG q75), the same budget for all."
    )
    return row, note


PRECISION_WORDS = {"32-true": "fp32", "bf16-mixed": "bf16 autocast"}


def demo_paragraph(data: dict[str, Any]) -> str:
    """README's Quick start paragraph: the demo's time and what it printed, from its JSON."""
    plan = data["plan"]
    ran = data.get("precision") or plan["cpu_precision"]  # older records: the plan's value
    precision = PRECISION_WORDS.get(ran, f"`{ran}`")
    words = (
        "On a CPU the net is quarter width, in bf16 autocast where the CPU has AMX units and fp32 "
        f"elsewhere; here it ran in {precision} ({minutes(data['wall_seconds'])} in all "
        f"on {data['date']}, on a {data['cores']}-core {data['cpu']} at load "
        f"{data['load_start']:.2f}; a busy machine takes longer); on a GPU it keeps the recipe's "
        "widths and precision (fp16 weights, fp32 BatchNorm). It printed:"
    )
    return "\n".join(
        [
            DEMO_START,
            *textwrap.wrap(words, 100),
            "",
            "```text",
            *textwrap.wrap(data["summary"], 100),
            "```",
            DEMO_END,
        ]
    )


def folders() -> list[Path]:
    """Result folders, newest date first (a folder's name starts with its date)."""
    return sorted(
        (p for p in RESULTS_DIR.iterdir() if p.is_dir()), key=lambda p: p.name, reverse=True
    )


def results_md() -> str:
    lines = [
        "# Measured results",
        "",
        "Generated by `python benchmarks/make_results.py` from the JSON files under "
        "`benchmarks/results/`; do not edit by hand (`tests/test_results_page.py` checks it is "
        "current). Each section is one folder: a date and a machine. CPU timings on a shared VM "
        "vary by ±10 % from run to run, so each benchmark compares its contenders within one run "
        "(interleaved, medians); compare ratios, not seconds, across machines.",
    ]
    for folder in folders():
        lines += folder_section(folder)
    return "\n".join(lines) + "\n"


def headline_rows(items: list[tuple[str, dict[str, Any]]], machine: str) -> list[str]:
    """The side-by-side runs as rows of the headline table, airbench's before tricklab's."""
    rows = []
    for stem, data in items:
        precision = stem.removeprefix("side_by_side_")
        ratio = data["ratio"]
        for name, s in sorted(data["stats"].items(), key=lambda item: item[0].startswith("trick")):
            mine = name.startswith("tricklab")
            what = f"{name}, `tricks.precision={precision}`" if mine else name
            vs = f"**{ratio['of_means']:.2f}×**" if mine else "1"
            rows.append(
                f"| {machine} | {what} | {s['n']} | {pct(s['accuracy_mean'])} ± "
                f"{pct(s['accuracy_std'])} | {s['seconds_mean']:.2f} record | {vs} |"
            )
    return rows


def headline() -> str:
    """README's one results table: the newest side-by-side on a GPU, and the CPU demo's baseline."""
    lines = [
        "| machine | run | runs | accuracy % mean ± std | seconds per run (mean) | "
        "time vs airbench |",
        "|---|---|---:|---:|---:|---:|",
    ]
    notes = []
    read = [(folder, read_folder(folder)) for folder in folders()]  # each folder read once
    # every gpu_session call, the newest first: (its folder's date, its data)
    calls = [(folder.name[:10], d) for folder, kinds in read for _, d in kinds["gpu_session"][::-1]]
    for folder, kinds in read:
        sessions = [
            d for _, d in kinds["gpu_session"] if d["sections"].get("side", {}).get("compare")
        ]
        if sessions:
            lines += gpu_session_headline_rows(sessions[0], folder.name[:10])
            side = sessions[0]["sections"]["side"]["compare"]
            references = {
                name: [side[name]["seconds_mean"]]
                for name in ("airbench94", "airbench94_muon")
                if side.get(name, {}).get("n")
            }
            for which, what in COMPARED_ROWS:
                # the newest call, of any day, where the row's contender completed its runs
                picked = next(((t, d) for t, d in calls if compared_row(d, t, which, what)), None)
                if picked is not None:
                    lines += compared_row(picked[1], picked[0], which, what)
                    compare = picked[1]["sections"][which[0]]["compare"]
                    references.setdefault(which[2], []).append(compare[which[2]]["seconds_mean"])
            notes += reference_spread_note(references)
            notes.append(
                "GPU rows: `benchmarks/gpu_session.py`, each contender run as many times (the runs "
                "column), interleaved round by round in one process on the same images, a JPEG q75 copy of CIFAR-10 on "
                "which airbench too reaches 90.6 %, not 94 %; record seconds as airbench times its "
                "records (whitening fit + epochs + final TTA evaluation). speedrun94 as shipped "
                "captures its step in a CUDA graph on a CUDA GPU (`tricks.cuda_graph: auto`); the "
                "eager row is the same recipe with `tricks.cuda_graph=off`; the rows with a "
                'ratio against "that call\'s" reference come from later calls of the same script, '
                "each interleaved with its reference in that call."
            )
            break
        if kinds["side_by_side"]:
            device = kinds["side_by_side"][0][1]["device"].removeprefix("NVIDIA ")
            shipped_first = sorted(
                kinds["side_by_side"],
                key=lambda item: -item[1]["stats"][next(iter(item[1]["stats"]))]["n"],
            )
            lines += headline_rows(shipped_first, f"{device}, {folder.name[:10]}")
            notes.append(
                "GPU rows: tricklab's `speedrun94` and airbench's own `train94` interleaved in "
                "one process on the same images, a JPEG q75 copy of CIFAR-10 on which airbench "
                "too reaches 90.6 %, not 94 %; record seconds as airbench times its records "
                "(whitening fit + epochs + final TTA evaluation)."
            )
            break
    demo = newest_demo()
    if demo is not None:
        row, note = demo_headline(demo)
        lines.append(row)
        notes.append(note)
    return "\n".join([HEADLINE_START, *lines, *(f"\n{note}" for note in notes), HEADLINE_END])


GPU_HEADLINE = {  # gpu_session contender -> the headline's words for it
    "airbench94": "airbench94 (airbench 0.1.8)",
    "airbench94_muon": "airbench94_muon.py (the record; its max-autotune compile apart)",
    "speedrun94": "tricklab speedrun94, eager (`tricks.cuda_graph=off`)",
    "speedrun94+cuda_graph": "tricklab speedrun94 as shipped (CUDA graph)",
}


def gpu_session_headline_rows(data: dict[str, Any], date: str) -> list[str]:
    device = data["env"]["device"].removeprefix("NVIDIA ")
    rows = []
    for name, r in data["sections"]["side"]["compare"].items():
        vs = "1" if name == "airbench94" else f"**{r['ratio_of_means']:.2f}×**"
        rows.append(
            f"| {device}, {date} | {GPU_HEADLINE.get(name, name)} | {r['n']} | "
            f"{pct(r['accuracy_mean'])} ± {pct(r['accuracy_std'])} | "
            f"{r['seconds_mean']:.2f} record | {vs} |"
        )
    return rows


# The headline's rows against "that call's" reference: (section, contender, reference) of a
# gpu_session's compare, and the row's words ({seconds}: the reference's mean record seconds).
COMPARED_ROWS = [
    (
        ("shipped", "speedrun94", "airbench94"),
        "tricklab speedrun94 as shipped on the day, CUDA graph (against that call's airbench94, "
        "{seconds:.2f} s)",
    ),
    (
        ("globalpool", "speedrun94", "airbench94"),
        "tricklab speedrun94 as shipped, its global pool an amax (`GlobalMaxPool`), CUDA graph "
        "(against that call's airbench94, {seconds:.2f} s)",
    ),
    (
        ("compiled", "speedrun94+compile=default+cuda_graph", "airbench94"),
        "tricklab speedrun94 `tricks.compile=default` + CUDA graph (its compile apart; against "
        "that call's airbench94, {seconds:.2f} s)",
    ),
    (
        (
            "muon",
            "speedrun94-muon+compile=max-autotune-no-cudagraphs+cuda_graph",
            "airbench94_muon",
        ),
        "tricklab speedrun94-muon as shipped since 2026-11-28: CUDA graph, max-autotune's kernels "
        "inside it (its compile apart), against that call's **airbench94_muon** ({seconds:.2f} s, "
        "its max-autotune compile apart)",
    ),
    (
        ("muon", "speedrun94-muon+compile=default+cuda_graph", "airbench94_muon"),
        "tricklab speedrun94-muon `tricks.compile=default` + CUDA graph (its compile apart), "
        "against that call's **airbench94_muon** ({seconds:.2f} s, its max-autotune compile apart)",
    ),
]


def reference_spread_note(references: dict[str, list[float]]) -> list[str]:
    """One line where a reference's own mean time differs by more than 10 % between the calls
    the headline's rows come from: each row reads against its own call's reference."""
    spread = [
        f"{name} {min(seconds):.2f}-{max(seconds):.2f} s"
        for name, seconds in references.items()
        if seconds and max(seconds) > 1.1 * min(seconds)
    ]
    if not spread:
        return []
    return [
        "The references' own mean record times differ between the calls these rows come from ("
        + ", ".join(spread)
        + ", the same scripts on the same machine type), while tricklab's graphed runs held "
        "theirs: read each ratio against its own call's reference, not one row against another."
    ]


def compared_row(
    data: dict[str, Any], date: str, which: tuple[str, str, str], what: str
) -> list[str]:
    """One headline row: `which` = (section, contender, reference) of a gpu_session's compare,
    the contender's ratio to the reference; `what` names it ({seconds}: the reference's mean)."""
    section, name, reference = which
    rows = data["sections"].get(section, {}).get("compare", {})
    if not rows.get(name, {}).get("n") or reference not in rows:
        return []
    r = rows[name]
    device = data["env"]["device"].removeprefix("NVIDIA ")
    what = what.format(seconds=rows[reference]["seconds_mean"])
    return [
        f"| {device}, {date} | {what} | {r['n']} | {pct(r['accuracy_mean'])} ± "
        f"{pct(r['accuracy_std'])} | {r['seconds_mean']:.2f} record | "
        f"**{r['ratio_of_means']:.2f}×** |"
    ]


def readme_with_headline(readme: str) -> str:
    """README with its generated blocks (the headline table, the demo's paragraph) rewritten."""
    blocks = [(HEADLINE_START, HEADLINE_END, headline)]
    demo = newest_demo()
    if demo is not None:
        blocks.append((DEMO_START, DEMO_END, lambda: demo_paragraph(demo)))
    for start, end, make in blocks:
        pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
        if not pattern.search(readme):
            raise SystemExit(f"error: README.md has no {start} ... {end} block")
        readme = pattern.sub(lambda _, make=make: make(), readme)
    return readme


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = parser.parse_args(argv)
    wanted = {
        RESULTS_MD: results_md(),
        README: readme_with_headline(README.read_text(encoding="utf-8")),
    }
    stale = [
        path
        for path, text in wanted.items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    if args.check:
        for path in stale:
            print(f"{path.name} is stale: run python benchmarks/make_results.py", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
