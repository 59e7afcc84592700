"""Issue 32's GPU measurements in one script: tricklab beside airbench94 and airbench94_muon, CUDA
graphs, a whole study's wall time and data-parallel overhead, each section time-boxed.

Sections (--sections, in the order given; each stops starting runs at its own deadline and at the
script's, and what it measured so far is kept):

- side      interleaved rounds (the order rotates every round): airbench94 (PyPI airbench 0.1.8's
            train94), tricklab speedrun94 eager (tricks.cuda_graph=off) and with the CUDA graph
            (tricks.cuda_graph=true, what the recipe's auto gives on a GPU), and (with
            --muon) airbench94_muon.py as published (its CifarNet under its own
            torch.compile(max-autotune), warmed up as its __main__ does, then its main(run,
            model)). Time: each contender's record seconds (airbench's definition, read from
            airbench's own printed total). One uncounted warm-up of each first.
- profile   torch.profiler over epoch 2 (+ its evaluation) of speedrun94 eager and with the
            CUDA graph: CUDA kernels, their summed time, GPU busy % of the window.
- compiled  airbench94, speedrun94 as shipped, and speedrun94 under tricks.compile=default
            without and with tricks.cuda_graph: compile seconds (the first run's warm-up)
            apart, then interleaved rounds.
- study     `tricklab ablate` of speedrun94 (4 configurations x --study-seeds seeds) from its
            start to its end against the sum of its runs' record seconds, run through
            benchmarks/study_phases.py (OUT/study-phases.json: where the rest of its time goes);
            then a plain Python loop of airbench's train94 as many times (verbose, so each epoch
            is evaluated and the TTA run, as speedrun94 does), in a fresh process, from start to
            end. It needs ./cifar10/train.pt and test.pt and waits for ./cifar10/.done.
- ddp       `tricklab train speedrun94` plain, with --nproc 1 (torchrun, NCCL), and with
            --nproc 1 tricks.sync_batchnorm=true (the SyncBatchNorm path), in turn.
- muon      airbench94_muon.py as published (compiled and warmed up as in side) beside
            speedrun94-muon (--muon-variants: as shipped, and under tricks.compile=default with
            the step in a CUDA graph, unless named), and speedrun94 under compile=default with
            the graph (--no-muon-speedrun94 leaves it out):
            compile seconds apart (each one's warm-up), then interleaved rounds.
- pool      airbench's max-pools forward + backward alone (benchmarks/pool_kernels.py), then
            speedrun94 as shipped and speedrun94-muon with the graph (eager), each with
            PyTorch's max-pools and with amax pools, interleaved.
- globalpool  airbench94, speedrun94 as shipped (its global pool an amax, GlobalMaxPool) and
            speedrun94 with PyTorch's adaptive global max-pool back (eager), interleaved.
- shipped   airbench94 beside speedrun94 as shipped (goal 1 again on the code of the day), after
            the pools' kernels alone at batch 1024 (benchmarks/pool_kernels.py: the global pool as
            PyTorch's adaptive kernel, as amax and as a flattened max with its indices).
- muon-profile  torch.profiler over epoch 2 (+ its evaluation) of the muon section's
            speedrun94-muon variants (--profile names which).

The data is decoded into tricklab's cache (or read from it) first, timed apart. Everything goes
to OUT/gpu_session.json, rewritten after every run. CIFAR-10 here is the JPEG q75
copy (airbench94 reaches about 90.6 % on it, not 94 %). Rehearse on a CPU with --rehearse (tiny
sizes, no peers, the device CPU): every tricklab path and the JSON run, the peers do not.

    PYTHONPATH=.:.carry/airbench-0.1.8:.carry/muon python3 benchmarks/gpu_session.py \\
        --out $OUT --sections side,profile --muon data.name=imagefolder data.dir=.carry
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from scipy import stats as scipy_stats

from tricklab.measure.mfu import mfu, peak_tflops
from tricklab.recipe.schema import load_recipe
from tricklab.training.api import train
from tricklab.training.precision import precision_policy
from tricklab.training.setup import load_data

START = time.perf_counter()
TINY = [  # --rehearse: seconds on a CPU
    "data.name=synthetic",
    "data.train_size=512",
    "data.test_size=256",
    "model.widths=[8, 16, 16]",
    "loader.batch_size=128",
    "loader.eval_batch_size=256",
    "run.epochs=2",
    "run.device=cpu",
]


class Session:
    """The JSON written after every run, and the deadlines."""

    def __init__(self, out: Path, deadline: float, rehearse: bool) -> None:
        self.out, self.deadline, self.rehearse = out, deadline, rehearse
        self.data: dict = {"env": environment(), "sections": {}}
        self.save()

    def left(self) -> float:
        return self.deadline - (time.perf_counter() - START)

    def save(self) -> None:
        path = self.out / "gpu_session.json"
        path.with_suffix(".tmp").write_text(json.dumps(self.data, indent=1, default=str))
        path.with_suffix(".tmp").replace(path)

    def section(self, name: str) -> dict:
        return self.data["sections"].setdefault(name, {"started_s": time.perf_counter() - START})


def environment() -> dict:
    cuda = torch.cuda.is_available()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "cpus": os.cpu_count(),
        "data": "CIFAR-10 (JPEG q75 copy): airbench94 reaches ~90.6 % on it, not 94 %",
    }


def log(*words) -> None:
    print(f"[{time.perf_counter() - START:6.1f}s]", *words, flush=True)


# ---- contenders: each returns {accuracy, record_seconds, ...} for one run -------------------


def tricklab_run(recipe, seed: int) -> dict:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    result = train(recipe.override([f"run.seed={seed}"]))
    precision = result.resolved.get("precision", recipe.tricks.precision)
    compute = precision_policy(precision, "cuda").compute_dtype
    peak = peak_tflops(result.hardware.get("device_name", ""), compute)
    return {
        "status": result.status,
        "accuracy": result.val_acc_tta if result.val_acc_tta is not None else result.val_acc,
        "record_seconds": result.record_seconds,
        "train_seconds": result.train_seconds,
        "compile_seconds": result.compile_seconds,
        "peak_memory_bytes": result.peak_memory_bytes,
        "mfu": mfu(result.forward_macs, result.images_per_second, peak and peak[0]),
        "resolved": result.resolved,
        "error": result.error,
    }


def peer_run(module, time_key: str, train_one, quiet: bool):
    """A peer's one-run function: `train_one(seed)` with the peer's final printed row (its
    `print_training_details`, replaced on `module`) read for accuracy and record seconds."""
    captured: dict = {}
    original = module.print_training_details

    def capture(variables, is_final_entry):
        if is_final_entry:
            captured["accuracy"] = float(variables["tta_val_acc"])
            captured["record_seconds"] = float(variables[time_key])
        if quiet:
            with contextlib.redirect_stdout(io.StringIO()):
                return original(variables, is_final_entry)
        return None

    module.print_training_details = capture

    def run(seed: int) -> dict:
        captured.clear()
        torch.cuda.reset_peak_memory_stats()
        train_one(seed)
        return {**captured, "peak_memory_bytes": torch.cuda.max_memory_allocated()}

    return run


def airbench94_contender():
    import airbench
    from airbench import utils

    run = peer_run(
        utils, "total_time_seconds", lambda seed: airbench.train94(run=seed, verbose=True), True
    )
    with contextlib.redirect_stdout(io.StringIO()):
        airbench.warmup94()
    return run


def muon_contender(session_section: dict):
    """airbench94_muon.py as published: its model compiled as its __main__ does, warmed up once."""
    module = importlib.import_module("airbench94_muon")
    model = module.CifarNet().cuda().to(memory_format=torch.channels_last)
    run = peer_run(module, "time_seconds", lambda seed: module.main(seed, model), False)
    model.compile(mode="max-autotune")
    start = time.perf_counter()
    module.main("warmup", model)
    torch.cuda.synchronize()
    session_section["airbench94_muon_compile_and_warmup_seconds"] = time.perf_counter() - start
    log(f"airbench94_muon compiled and warmed up in {time.perf_counter() - start:.1f} s")
    return run


# ---- statistics ------------------------------------------------------------------------------


def summary(runs: list[dict]) -> dict:
    ok = [r for r in runs if r.get("record_seconds") is not None and r.get("accuracy") is not None]
    if not ok:
        return {"n": 0}
    acc = [r["accuracy"] for r in ok]
    sec = [r["record_seconds"] for r in ok]
    peaks = [r["peak_memory_bytes"] for r in ok if r.get("peak_memory_bytes")]
    mfus = [r["mfu"] for r in ok if r.get("mfu")]
    return {
        "n": len(ok),
        "accuracy_mean": statistics.fmean(acc),
        "accuracy_std": statistics.stdev(acc) if len(acc) > 1 else None,
        "seconds_mean": statistics.fmean(sec),
        "seconds_median": statistics.median(sec),
        "seconds_min": min(sec),
        "seconds_max": max(sec),
        "peak_memory_gib": max(peaks) / 2**30 if peaks else None,
        "mfu_median": statistics.median(mfus) if mfus else None,
    }


def welch_ci(a: list[float], b: list[float]) -> list[float] | None:
    """95 % CI of mean(a) - mean(b) (Welch), in the values' units."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return [statistics.fmean(a) - statistics.fmean(b)] * 2
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = scipy_stats.t.ppf(0.975, dof) * se
    diff = statistics.fmean(a) - statistics.fmean(b)
    return [diff - half, diff + half]


def compare(runs: dict[str, list[dict]], reference: str) -> dict:
    """Per contender: its summary, its paired time ratio to `reference` (median of round-wise
    ratios) and the Welch 95 % CI of its accuracy difference in percentage points; the fraction
    of its runs at or above the reference's mean accuracy."""
    out = {}
    ref = runs.get(reference, [])
    ref_acc = [r["accuracy"] for r in ref if r.get("accuracy") is not None]
    ref_mean = statistics.fmean(ref_acc) if ref_acc else None
    for name, rows in runs.items():
        s = summary(rows)
        pairs = [
            a["record_seconds"] / b["record_seconds"]
            for a, b in zip(rows, ref)
            if a.get("record_seconds") and b.get("record_seconds")
        ]
        acc = [r["accuracy"] for r in rows if r.get("accuracy") is not None]
        ci = welch_ci(acc, ref_acc)
        s["paired_ratio_median"] = statistics.median(pairs) if pairs else None
        s["ratio_of_means"] = (
            s["seconds_mean"] / summary(ref)["seconds_mean"]
            if s["n"] and summary(ref)["n"]
            else None
        )
        s["accuracy_diff_pp_ci95"] = [100 * c for c in ci] if ci else None
        s["fraction_at_or_above_reference_mean"] = (
            sum(a >= ref_mean for a in acc) / len(acc) if acc and ref_mean is not None else None
        )
        out[name] = s
    return out


# ---- sections --------------------------------------------------------------------------------


def interleaved(session: Session, name: str, contenders: dict, rounds: int, seconds: float):
    """Rounds of every contender (the order rotating), until `rounds` or the section's time."""
    section = session.section(name)
    runs: dict[str, list[dict]] = section.setdefault("runs", {c: [] for c in contenders})
    end = time.perf_counter() + seconds
    names = list(contenders)
    for k in range(rounds):
        per_round = sum(
            statistics.median([r.get("wall", 5) for r in runs[c]] or [5]) for c in names
        )
        if time.perf_counter() + per_round > end or session.left() < per_round:
            section["stopped"] = f"time: {k} rounds of {rounds}"
            break
        shift = k % len(names)
        for c in names[shift:] + names[:shift]:
            start = time.perf_counter()
            try:
                row = contenders[c](k)
            except Exception as exc:  # noqa: BLE001 - a benchmark keeps the other contenders
                row = {"error": f"{type(exc).__name__}: {exc}"}
            row["wall"], row["round"] = time.perf_counter() - start, k
            runs[c].append(row)
            log(
                f"{name} round {k} {c}: acc {row.get('accuracy')} record {row.get('record_seconds')}"
            )
        session.save()
    return runs


def tricklab_contenders(overrides: list[str], variants: dict[str, list[str]], recipe_name: str):
    out = {}
    for label, extra in variants.items():
        recipe = load_recipe(recipe_name, [*overrides, *extra])
        start = time.perf_counter()
        warm = train(recipe.override(["run.seed=999", "run.epochs=1"]))  # uncounted
        log(
            f"warm-up {label}: {warm.status} {time.perf_counter() - start:.1f} s, "
            f"compile {warm.compile_seconds:.1f} s, resolved {warm.resolved}"
        )
        out[label] = (lambda r: lambda seed: tricklab_run(r, seed))(recipe)
    return out


def section_side(session: Session, args, overrides: list[str]) -> None:
    section = session.section("side")
    contenders = {}
    if not session.rehearse:
        contenders["airbench94"] = airbench94_contender()
    contenders.update(
        tricklab_contenders(
            overrides,
            {
                "speedrun94": ["tricks.cuda_graph=off"],
                "speedrun94+cuda_graph": ["tricks.cuda_graph=true"],
            },
            "speedrun94",
        )
    )
    if args.muon and not session.rehearse:
        try:
            contenders["airbench94_muon"] = muon_contender(section)
        except Exception as exc:  # noqa: BLE001
            section["muon_error"] = f"{type(exc).__name__}: {exc}"
    runs = interleaved(session, "side", contenders, args.rounds, args.side_seconds)
    reference = "airbench94" if "airbench94" in runs else "speedrun94"
    section["compare"] = compare(runs, reference)
    if "airbench94_muon" in runs:
        section["compare_to_muon"] = compare(runs, "airbench94_muon")
    session.save()


def section_profile(session: Session, args, overrides: list[str]) -> None:
    variants = {
        "speedrun94": ["tricks.cuda_graph=off"],  # eager (the recipe's auto is the graph on a GPU)
        "speedrun94+cuda_graph": ["tricks.cuda_graph=true"],
    }
    profile_variants(session.section("profile"), session, "speedrun94", variants, overrides)


def section_muon_profile(session: Session, args, overrides: list[str]) -> None:
    variants = {label: MUON_VARIANTS[label] for label in args.profile.split(",")}
    section = session.section("muon-profile")
    profile_variants(section, session, "speedrun94-muon", variants, overrides)


def profile_variants(
    section: dict, session: Session, recipe_name: str, variants: dict, overrides: list[str]
) -> None:
    """torch.profiler over epoch 2 (and its evaluation) of each variant of the recipe."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    for label, extra in variants.items():
        if session.left() < 40:
            section["stopped"] = f"time: before {label}"
            break
        recipe = load_recipe(recipe_name, [*overrides, *extra, "run.epochs=3", "run.eval_every=1"])
        prof = profile(activities=activities)
        window: dict = {}

        def at_epoch(row, prof=prof, window=window):
            if row["epoch"] == 1:
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                prof.start()
                window["start"] = time.perf_counter()
            elif row["epoch"] == 2:
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                window["seconds"] = time.perf_counter() - window["start"]
                prof.stop()

        train(recipe, on_epoch=at_epoch)
        events = prof.key_averages()
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        kernel_s = sum(e.self_device_time_total for e in kernels) / 1e6
        section[label] = {
            "window_seconds": window.get("seconds"),
            "cuda_kernels": sum(e.count for e in kernels),
            "kernel_seconds": kernel_s,
            "gpu_busy": kernel_s / window["seconds"] if window.get("seconds") else None,
            "top_kernels": [
                [e.key[:70], e.count, e.self_device_time_total / 1e3]
                for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:12]
            ],
            "top_cpu_ops": [
                [e.key[:70], e.count, e.self_cpu_time_total / 1e3]
                for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
            ],
        }
        log(
            f"profile {label}: {json.dumps({k: v for k, v in section[label].items() if 'top' not in k})}"
        )
        session.save()


def section_compiled(session: Session, args, overrides: list[str]) -> None:
    """speedrun94 as shipped (eager, with the CUDA graph on a GPU), under tricks.compile=default
    without and with the graph, and airbench94 as the reference, interleaved."""
    section = session.section("compiled")
    compile_mode = "default"
    contenders = {} if session.rehearse else {"airbench94": airbench94_contender()}
    contenders.update(
        tricklab_contenders(
            overrides,
            {
                "speedrun94": [],
                f"speedrun94+compile={compile_mode}": [
                    f"tricks.compile={compile_mode}",
                    "tricks.cuda_graph=false",
                ],
                f"speedrun94+compile={compile_mode}+cuda_graph": [
                    f"tricks.compile={compile_mode}",
                    "tricks.cuda_graph=true",
                ],
            },
            "speedrun94",
        )
    )
    runs = interleaved(session, "compiled", contenders, args.rounds, args.compiled_seconds)
    section["compare"] = compare(runs, "speedrun94" if session.rehearse else "airbench94")
    session.save()


# speedrun94-muon as shipped, and with its step in a CUDA graph: eager, under compile=default and
# under max-autotune-no-cudagraphs (what the shipped auto resolves to where the step is graphed;
# max-autotune itself records CUDA graphs of its own, which a whole-step capture excludes)
MUON_VARIANTS = {
    # as shipped: on CUDA the step graphed, max-autotune's kernels inside (2026-11-28)
    "speedrun94-muon": [],
    "speedrun94-muon+cuda_graph": ["tricks.compile=off", "tricks.cuda_graph=true"],
    "speedrun94-muon+compile=default+cuda_graph": [
        "tricks.compile=default",
        "tricks.cuda_graph=true",
    ],
    "speedrun94-muon+compile=max-autotune-no-cudagraphs+cuda_graph": [
        "tricks.compile=max-autotune-no-cudagraphs",
        "tricks.cuda_graph=true",
    ],
}
MUON_MEASURED = ["speedrun94-muon", "speedrun94-muon+compile=default+cuda_graph"]


def section_muon(session: Session, args, overrides: list[str]) -> None:
    """airbench94_muon.py as published beside speedrun94-muon captured in a CUDA graph (eager and
    under compile=default) and speedrun94 under compile=default with the graph (the fastest of
    the earlier calls), interleaved; compile seconds apart (each contender's warm-up)."""
    section = session.section("muon")
    variants = {label: MUON_VARIANTS[label] for label in args.muon_variants.split(",")}
    contenders = tricklab_contenders(overrides, variants, "speedrun94-muon")
    if args.muon_speedrun94:
        contenders.update(
            tricklab_contenders(
                overrides,
                {
                    "speedrun94+compile=default+cuda_graph": [
                        "tricks.compile=default",
                        "tricks.cuda_graph=true",
                    ]
                },
                "speedrun94",
            )
        )
    if not session.rehearse:
        try:
            contenders["airbench94_muon"] = muon_contender(section)
        except Exception as exc:  # noqa: BLE001 - the tricklab contenders still run
            section["muon_error"] = f"{type(exc).__name__}: {exc}"
    runs = interleaved(session, "muon", contenders, args.rounds, args.muon_seconds)
    section["compare"] = compare(
        runs, "airbench94_muon" if "airbench94_muon" in runs else next(iter(runs))
    )
    session.save()


@contextlib.contextmanager
def amax_pools():
    """airbench's max-pools as amax (benchmarks/pool_kernels.py) while inside: the 2x2 pools and
    the global one. Eager runs only (a compiled forward would not see the swap)."""
    import pool_kernels
    from torch import nn

    saved = nn.MaxPool2d.forward, nn.AdaptiveMaxPool2d.forward
    nn.MaxPool2d.forward = lambda self, x: pool_kernels.amax_pool_2x2(x)
    nn.AdaptiveMaxPool2d.forward = lambda self, x: x.amax((2, 3), keepdim=True)
    try:
        yield
    finally:
        nn.MaxPool2d.forward, nn.AdaptiveMaxPool2d.forward = saved


def section_pool(session: Session, args, overrides: list[str]) -> None:
    """The pools' kernels alone (pool_kernels.measure at batch 1024 and 2000), then speedrun94 as
    shipped and speedrun94-muon with the CUDA graph (both eager), each with PyTorch's max-pools
    and with amax pools, interleaved."""
    import pool_kernels

    section = session.section("pool")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for batch in (1024, 2000) if not session.rehearse else (16,):
        section[f"kernels_{batch}"] = pool_kernels.measure(batch, device)
        log(f"pool kernels at batch {batch}: {json.dumps(section[f'kernels_{batch}'])}")
        session.save()
    plain = {"speedrun94": ("speedrun94", [])}
    plain["speedrun94-muon+cuda_graph"] = (
        "speedrun94-muon",
        MUON_VARIANTS["speedrun94-muon+cuda_graph"],
    )
    contenders = {}
    for label, (recipe_name, extra) in plain.items():
        contenders.update(tricklab_contenders(overrides, {label: extra}, recipe_name))
        with amax_pools():
            amax = tricklab_contenders(overrides, {f"{label}+amax_pool": extra}, recipe_name)
        for name, run in amax.items():
            contenders[name] = functools.partial(_under, amax_pools, run)
    runs = interleaved(session, "pool", contenders, args.rounds, args.pool_seconds)
    section["compare"] = compare(runs, "speedrun94")
    session.save()


def section_shipped(session: Session, args, overrides: list[str]) -> None:
    """The pools' kernels at batch 1024, then airbench94 beside speedrun94 as shipped, interleaved."""
    import pool_kernels

    section = session.section("shipped")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batch = 16 if session.rehearse else 1024
    section[f"kernels_{batch}"] = pool_kernels.measure(batch, device)
    log(f"pool kernels at batch {batch}: {json.dumps(section[f'kernels_{batch}'])}")
    contenders = {} if session.rehearse else {"airbench94": airbench94_contender()}
    contenders.update(tricklab_contenders(overrides, {"speedrun94": []}, "speedrun94"))
    runs = interleaved(session, "shipped", contenders, args.rounds, args.shipped_seconds)
    section["compare"] = compare(runs, "speedrun94" if session.rehearse else "airbench94")
    session.save()


@contextlib.contextmanager
def adaptive_global_pool():
    """tricklab's GlobalMaxPool (amax) back to PyTorch's adaptive max-pool while inside: the net
    before 2026-11-26. Eager runs only (a compiled forward would not see the swap)."""
    from torch.nn import functional as F

    from tricklab.models.airbench import GlobalMaxPool

    saved = GlobalMaxPool.forward
    GlobalMaxPool.forward = lambda self, x: F.adaptive_max_pool2d(x, 1)
    try:
        yield
    finally:
        GlobalMaxPool.forward = saved


def section_globalpool(session: Session, args, overrides: list[str]) -> None:
    """airbench94 beside speedrun94 as shipped (its global pool an amax, GlobalMaxPool) and
    speedrun94 with PyTorch's adaptive global max-pool instead, interleaved: goal 1 on the
    shipped net, and the global pool's effect on whole runs."""
    section = session.section("globalpool")
    contenders = {} if session.rehearse else {"airbench94": airbench94_contender()}
    contenders.update(tricklab_contenders(overrides, {"speedrun94": []}, "speedrun94"))
    with adaptive_global_pool():
        adaptive = tricklab_contenders(overrides, {"speedrun94+adaptive_pool": []}, "speedrun94")
    for name, run in adaptive.items():
        contenders[name] = functools.partial(_under, adaptive_global_pool, run)
    runs = interleaved(session, "globalpool", contenders, args.rounds, args.globalpool_seconds)
    section["compare"] = compare(runs, "speedrun94" if session.rehearse else "airbench94")
    session.save()


def _under(context, run, seed: int) -> dict:
    with context():
        return run(seed)


def timed_command(command: list[str], timeout: float) -> dict:
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = "timeout", exc.stdout or "", exc.stderr or ""
        out, err = (x.decode() if isinstance(x, bytes) else x for x in (out, err))
    return {
        "command": " ".join(command),
        "rc": rc,
        "wall_seconds": time.perf_counter() - start,
        "stdout_tail": out[-1500:],
        "stderr_tail": err[-1500:],
    }


def record_seconds_under(folder: Path) -> list[float]:
    values = []
    for path in folder.rglob("result.json"):
        with contextlib.suppress(ValueError, OSError):
            value = json.loads(path.read_text()).get("record_seconds")
            if value is not None:
                values.append(value)
    return values


def section_study(session: Session, args, overrides: list[str]) -> None:
    section = session.section("study")
    folder = Path(args.work) / "study"
    phases = Path(args.out) / "study-phases.json"
    # the command as a user types it, run by benchmarks/study_phases.py: timers around its phases
    command = [
        sys.executable, str(Path(__file__).with_name("study_phases.py")), "--json", str(phases),
        "--", "ablate", "--baseline", "speedrun94", *overrides,
        "--vary", "tricks.label_smoothing=0.0,0.1,0.3", "--seeds", str(args.study_seeds),
        "--out", str(folder), "--json", "-q",
    ]  # fmt: skip
    ablate = timed_command(command, max(session.left() - 90, 30))
    seconds = record_seconds_under(folder)
    ablate["runs_with_record_seconds"] = len(seconds)
    ablate["sum_record_seconds"] = sum(seconds)
    ablate["wall_over_sum"] = ablate["wall_seconds"] / sum(seconds) if seconds else None
    with contextlib.suppress(ValueError, OSError):
        ablate["phases"] = json.loads(phases.read_text())
    section["tricklab_ablate"] = ablate
    log(f"study ablate: {json.dumps({k: v for k, v in ablate.items() if 'tail' not in k})}")
    session.save()
    if session.rehearse:
        return
    ready = Path("cifar10/.done")  # the peer's train.pt/test.pt, converted before the sections
    while not ready.exists() and session.left() > 100:
        time.sleep(1)
    runs = 4 * args.study_seeds
    # verbose=True: each epoch evaluated and the final TTA, as tricklab's speedrun94 does
    # (eval_every 1); the record seconds its final rows print are summed.
    loop = (
        "import time, contextlib, io, airbench\n"
        "from airbench import utils\n"
        "records = []\n"
        "def keep(v, is_final_entry):\n"
        "    if is_final_entry: records.append(float(v['total_time_seconds']))\n"
        "utils.print_training_details = keep\n"
        "s = time.perf_counter()\n"
        f"for k in range({runs}): airbench.train94(run=k, verbose=True)\n"
        "print('loop seconds', time.perf_counter() - s, 'records', len(records), sum(records))\n"
    )
    plain = timed_command([sys.executable, "-c", loop], max(session.left() - 20, 30))
    words = plain["stdout_tail"].split()
    with contextlib.suppress(ValueError, IndexError):
        plain["loop_seconds"] = float(words[words.index("loop") + 2])
        plain["sum_record_seconds"] = float(words[-1])
        plain["wall_over_sum"] = plain["wall_seconds"] / plain["sum_record_seconds"]
    section["airbench_train94_loop"] = plain
    log(f"study airbench loop: {json.dumps({k: v for k, v in plain.items() if 'tail' not in k})}")
    session.save()


def section_ddp(session: Session, args, overrides: list[str]) -> None:
    section = session.section("ddp")
    variants = {
        "plain": [],
        "nproc1": ["--nproc", "1"],
        "nproc1+sync_batchnorm": ["--nproc", "1", "tricks.sync_batchnorm=true"],
    }
    rows = section.setdefault("runs", [])
    for k in range(args.ddp_rounds):
        for label, extra in variants.items():
            if session.left() < 40:
                section["stopped"] = "time"
                session.save()
                return
            folder = Path(args.work) / f"ddp-{label}-{k}"
            command = [
                sys.executable, "-m", "tricklab", "train", "speedrun94", *overrides, *extra,
                "--out", str(folder), "--json", "--quiet",
            ]  # fmt: skip
            row = timed_command(command, max(session.left() - 20, 20))
            with contextlib.suppress(ValueError, OSError):
                result = json.loads((folder / "result.json").read_text())
                row.update(
                    {
                        key: result.get(key)
                        for key in ("status", "record_seconds", "train_seconds", "val_acc_tta")
                    }
                )
                row["world_size"] = result.get("world_size")
            row["label"], row["round"] = label, k
            rows.append(row)
            log(f"ddp {label} round {k}: rc {row['rc']} wall {row['wall_seconds']:.1f} "
                f"record {row.get('record_seconds')}")  # fmt: skip
            session.save()


SECTIONS = {
    "side": section_side,
    "profile": section_profile,
    "compiled": section_compiled,
    "study": section_study,
    "ddp": section_ddp,
    "muon": section_muon,
    "muon-profile": section_muon_profile,
    "pool": section_pool,
    "globalpool": section_globalpool,
    "shipped": section_shipped,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", default="runs/gpu-session")
    parser.add_argument("--sections", default="side,profile,study,ddp")
    parser.add_argument("--deadline", type=float, default=540, help="seconds for everything")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--side-seconds", type=float, default=300)
    parser.add_argument("--compiled-seconds", type=float, default=120)
    parser.add_argument("--muon-seconds", type=float, default=260)
    parser.add_argument("--pool-seconds", type=float, default=170)
    parser.add_argument("--globalpool-seconds", type=float, default=170)
    parser.add_argument("--shipped-seconds", type=float, default=90)
    parser.add_argument(
        "--muon-speedrun94",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="muon: speedrun94 compiled and graphed beside (--no-muon-speedrun94 leaves it out)",
    )
    parser.add_argument(
        "--muon-variants",
        default=",".join(MUON_MEASURED),
        help=f"muon: which speedrun94-muon variants, comma-separated, of {', '.join(MUON_VARIANTS)}",
    )
    parser.add_argument(
        "--profile",
        default=",".join(MUON_MEASURED),
        help="muon-profile: which speedrun94-muon variants (as --muon-variants)",
    )
    parser.add_argument("--study-seeds", type=int, default=5)
    parser.add_argument("--ddp-rounds", type=int, default=2)
    parser.add_argument("--muon", action="store_true", help="airbench94_muon beside, in side")
    parser.add_argument("--rehearse", action="store_true", help="CPU, tiny sizes, no peers")
    parser.add_argument(
        "--wait-for", help="a file to wait for (60 s at most) before the sections: a peer's data"
    )
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    for label in [*args.muon_variants.split(","), *args.profile.split(",")]:
        if label not in MUON_VARIANTS:
            parser.error(
                f"no speedrun94-muon variant {label!r}; the variants: {list(MUON_VARIANTS)}"
            )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    overrides = [*TINY, *args.overrides] if args.rehearse else args.overrides
    session = Session(out, args.deadline, args.rehearse)
    log(json.dumps(session.data["env"]))
    # Decode the images into tricklab's cache before anything is timed: a study meets its data
    # decoded (by an earlier run or `tricklab data`), and the first decode is not a study's cost.
    start = time.perf_counter()
    load_data(load_recipe("speedrun94", overrides))
    session.data["data_cache_seconds"] = time.perf_counter() - start
    log(f"data decoded or read from the cache in {time.perf_counter() - start:.1f} s")
    while args.wait_for and not Path(args.wait_for).exists() and time.perf_counter() - start < 60:
        time.sleep(0.5)  # nothing else runs while a section is timed
    for name in args.sections.split(","):
        if session.left() < 30:
            session.section(name)["skipped"] = "no time left"
            continue
        log(f"== section {name} ({session.left():.0f} s left)")
        try:
            SECTIONS[name](session, args, overrides)
        except Exception as exc:  # noqa: BLE001 - keep the other sections
            import traceback

            session.section(name)["error"] = traceback.format_exc()[-3000:]
            log(f"section {name} failed: {type(exc).__name__}: {exc}")
        session.section(name)["ended_s"] = time.perf_counter() - START
        session.save()
    log("done")


if __name__ == "__main__":
    main()
