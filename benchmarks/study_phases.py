"""Where a study's wall time goes beyond its runs' record seconds: a `tricklab` command run in
this process with timers around the functions a run and a study call, one JSON of their totals.

    python benchmarks/study_phases.py --json phases.json ablate --baseline speedrun94 ... --seeds 5

Each target (`module:function`) is replaced, in the module that calls it, by a wrapper that adds
its seconds (time.perf_counter, no device sync: the functions timed here end with one or read a
result back) and calls; nested targets each count their own time (`prepare` includes
`build_run_model`). Also: seconds to import tricklab's CLI, the command's wall time, and from
the runs' result.json files the sums of record, warm-up (compile_seconds) and wall seconds. The
command's exit status is the JSON's `rc`; the JSON is written however the command ends.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import time
from pathlib import Path

START = time.perf_counter()

# (module whose global is replaced, name): the call sites of a run's and a study's phases.
TARGETS = [
    ("tricklab.training.api", "train"),  # a whole run (the study imports it when it starts)
    ("tricklab.training.api", "load_data"),
    ("tricklab.training.api", "prepare"),
    ("tricklab.training.api", "warm_up_run"),
    ("tricklab.training.api", "run_loop"),
    ("tricklab.training.api", "_finish"),
    ("tricklab.training.api", "hardware_fingerprint"),
    ("tricklab.training.api", "start_record"),
    ("tricklab.training.api", "write_json_atomic"),
    ("tricklab.training.api", "make_run_dir"),
    ("tricklab.training.setup", "build_run_model"),
    ("tricklab.training.setup", "count_forward_macs"),
    ("tricklab.training.setup", "build_loaders"),
    ("tricklab.training.setup", "channel_stats"),
    ("tricklab.training.setup", "check_model_fits"),
    ("tricklab.training.setup", "check_run"),
    ("tricklab.training.setup", "GraphedStep"),  # a CUDA graph's capture set up (cuda_graph=on)
    ("tricklab.experiments.runner", "plan_ablation"),
    ("tricklab.training.setup", "check_setup"),
    ("tricklab.experiments.runner", "_summary"),
    ("tricklab.experiments.runner", "run_units"),
]


def install(totals: dict[str, dict]) -> list[str]:
    """Wrap every target that exists; the names of those that do not (a renamed function)."""
    missing = []
    for module_name, name in TARGETS:
        module = importlib.import_module(module_name)
        function = getattr(module, name, None)
        if function is None:
            missing.append(f"{module_name}:{name}")
            continue
        key = f"{module_name.rsplit('.', 1)[-1]}.{name}"
        slot = totals.setdefault(key, {"calls": 0, "seconds": 0.0})

        def timed(*args, _function=function, _slot=slot, **kwargs):
            begin = time.perf_counter()
            try:
                return _function(*args, **kwargs)
            finally:
                _slot["calls"] += 1
                _slot["seconds"] += time.perf_counter() - begin

        setattr(module, name, functools.wraps(function)(timed))
    return missing


def run_sums(folder: Path | None) -> dict:
    """Sums over the result.json files under `folder` (the command's --out)."""
    sums = {"runs": 0, "record_seconds": 0.0, "compile_seconds": 0.0, "wall_seconds": 0.0}
    if folder is None:
        return sums
    for path in folder.rglob("result.json"):
        try:
            result = json.loads(path.read_text())
        except (ValueError, OSError):
            continue
        if result.get("record_seconds") is None:
            continue
        sums["runs"] += 1
        for key in ("record_seconds", "compile_seconds", "wall_seconds"):
            sums[key] += result.get(key) or 0.0
    return sums


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="where the totals go")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="tricklab's arguments")
    args = parser.parse_args()
    argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else None
    from tricklab.cli.main import main as cli_main

    imported = time.perf_counter() - START
    totals: dict[str, dict] = {}
    missing = install(totals)
    installed = time.perf_counter() - START - imported  # torch and the targets' modules
    began = time.perf_counter()
    rc: int | str = 0
    try:
        rc = cli_main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - the totals are written however it ends
        rc = f"{type(exc).__name__}: {exc}"
    wall = time.perf_counter() - began
    report = {
        "argv": argv,
        "rc": rc,
        "import_seconds": imported,
        "install_seconds": installed,
        "command_seconds": wall,
        "process_seconds": time.perf_counter() - START,
        "phases": totals,
        "missing_targets": missing,
        "results": run_sums(out),
    }
    Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
    return rc if isinstance(rc, int) else 1


if __name__ == "__main__":
    sys.exit(main())
