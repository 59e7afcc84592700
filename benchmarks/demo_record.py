"""The main job, measured: `tricklab demo` run once as a user runs it, its result and its time kept.

    python benchmarks/demo_record.py [--out benchmarks/results/<date>-cpu/demo.json] [--seeds 3]

Runs `python -m tricklab demo --json --out TMP` in a new process with an empty dataset cache (a
fresh TRICKLAB_CACHE folder, as on a first run), times it from start to exit, and notes the load
average before and after (a busy machine's times are not the demo's). The JSON it writes holds
the machine, the command, the wall time, the load, the demo's own result (its study's statistics
per configuration and the report's summary, the paragraph `tricklab demo` prints) and nothing
copied by hand: `benchmarks/make_results.py` turns it into the README's Quick start paragraph,
its headline row and a section of RESULTS.md. Needs nothing beyond tricklab.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
COMMAND = "tricklab demo"


def cpu_model() -> tuple[str, str]:
    """The CPU's model name and its bf16 instructions, as /proc/cpuinfo gives them."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or "unknown CPU", "bf16 unknown"
    name = next(
        (
            line.split(":", 1)[1].strip()
            for line in info.splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    flags = set(
        next(
            (
                line.split(":", 1)[1].split()
                for line in info.splitlines()
                if line.startswith("flags")
            ),
            [],
        )
    )
    native = sorted(flags & {"avx512_bf16", "amx_bf16"})
    bf16 = f"native bf16 ({', '.join(native)})" if native else "no native bf16 (bf16 emulated)"
    return name, bf16


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        return None
    return None


def machine() -> str:
    ram = memory_gib()
    return (
        f"{os.cpu_count()}-core {', '.join(cpu_model())}, no GPU"
        + (f", {ram:.0f} GiB RAM" if ram else "")
        + f", torch {importlib.metadata.version('torch')}, Python {platform.python_version()}"
    )


def record(
    demo: dict[str, Any], wall: float, load: tuple[float, float], date: str
) -> dict[str, Any]:
    """The JSON `make_results.py` reads: the demo's own result beside how it was measured."""
    study = demo["study"]
    return {
        "benchmark": "demo",
        "date": date,
        "machine": machine(),
        "cpu": cpu_model()[0],
        "command": f"time {COMMAND}" + (f" --seeds {demo['seeds']}" if demo["seeds"] != 3 else ""),
        "cache": "empty (a fresh TRICKLAB_CACHE folder)",
        "wall_seconds": wall,
        "load_start": load[0],
        "load_end": load[1],
        "cores": os.cpu_count(),
        "device": demo["device"],
        "precision": demo.get("precision"),  # what the baseline ran as (`auto` resolved)
        "seeds": demo["seeds"],
        "plan": demo["plan"],
        "summary": demo["report"]["summary"],
        "conclusions": demo["report"]["conclusions"],
        "planned": study["planned"],
        "status_counts": study["status_counts"],
        "stats": study["stats"],
    }


def run_demo_process(seeds: int, work: Path) -> tuple[dict[str, Any], float, tuple[float, float]]:
    env = {**os.environ, "TRICKLAB_CACHE": str(work / "cache")}
    command = [sys.executable, "-m", "tricklab", "demo", "--json", "--out", str(work / "demo")]
    if seeds != 3:
        command += ["--seeds", str(seeds)]
    load_start = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    load_end = os.getloadavg()[0]
    if done.returncode != 0:
        raise SystemExit(
            f"error: {' '.join(command)} exited {done.returncode}: {done.stderr[-500:]}"
        )
    return json.loads(done.stdout), wall, (load_start, load_end)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="the demo's --seeds (default 3)")
    parser.add_argument("--out", type=Path, help="the JSON (default results/<date>-cpu/demo.json)")
    args = parser.parse_args(argv)
    date = datetime.date.today().isoformat()
    out = args.out or HERE / "results" / f"{date}-cpu" / "demo.json"
    with tempfile.TemporaryDirectory(prefix="tricklab-demo-") as work:
        demo, wall, load = run_demo_process(args.seeds, Path(work))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record(demo, wall, load, date), indent=2) + "\n", encoding="utf-8")
    print(f"{COMMAND}: {wall:.0f} s, load {load[0]:.2f} -> {load[1]:.2f}; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
