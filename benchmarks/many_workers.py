"""Many workers on one study: does a study finish sooner with 3 `tricklab ablate` workers than with 1?

The same command is started 1 and then 3 times at once on one journal storage, as a user starts one
worker per GPU or per core; 1 and 3 workers alternate `--repeats` times and the medians are
compared: the wall time from the first start to the last exit (start-up included: each worker
spends a few seconds of CPU importing torch and checking the setup) and the runs' span, from the
first run's start to the last run's end as the storage has them. Each worker has one torch thread
and a session of its own (`setsid`, as if started from its own terminal): Linux's autogroup
scheduler shares the CPU between sessions.

    python benchmarks/many_workers.py [--repeats 3] [--epochs 80] [--workers 3] [--json OUT.json]

The study: the tiny synthetic recipe (tests/tiny_recipe.py), baseline + 2 tricks x 3 seeds,
`--budget-epochs 80` (about 4 s a run on one core of the 2-core VM). That each (config, seed) runs
exactly once is tests/test_many_workers.py's to check; this measures only the time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

from tricklab.experiments.storage import open_storage, storage_url, trial_status

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from tiny_recipe import TINY_SYNTHETIC  # noqa: E402

VARY = ["optim.lr=0.4", "tricks.label_smoothing=0.1"]
STUDY = "many-workers"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run_workers(count: int, folder: Path, epochs: int, seeds: int) -> tuple[float, float]:
    """`count` workers at once on one journal in `folder`: (wall seconds, runs' span seconds)."""
    folder.mkdir()
    journal = str(folder / "study.journal")
    cmd = [sys.executable, "-m", "tricklab", "ablate", "--baseline", *TINY_SYNTHETIC]
    cmd += ["run.eval_every=0", *(w for v in VARY for w in ("--vary", v))]
    cmd += ["--seeds", str(seeds), "--budget-epochs", str(epochs), "--study", STUDY]
    cmd += ["--storage", journal, "--out", str(folder), "--json", "-q"]
    start = time.perf_counter()
    workers = [
        subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV, start_new_session=True
        )
        for _ in range(count)
    ]
    for worker in workers:
        _, err = worker.communicate()
        if worker.returncode != 0:
            raise SystemExit(f"a worker failed ({worker.returncode}): {err.decode()[-2000:]}")
    wall = time.perf_counter() - start
    storage = open_storage(storage_url(journal, folder), must_exist=True)
    trials = optuna.load_study(study_name=STUDY, storage=storage).get_trials()
    runs = [t for t in trials if trial_status(t) != "skipped"]
    end = max(t.datetime_complete for t in runs)
    return wall, (end - min(t.datetime_start for t in runs)).total_seconds()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--json", help="write the measurement record (benchmarks/results/...)")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    loads, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for count in (1, args.workers):
                loads.append(os.getloadavg()[0])
                wall, span = run_workers(
                    count, Path(tmp) / f"{repeat}-{count}", args.epochs, args.seeds
                )
                rows.append((count, wall, span))
                print(f"repeat {repeat + 1}: {count} worker(s) {wall:.1f} s, runs {span:.1f} s")
    one = [(w, s) for c, w, s in rows if c == 1]
    many = [(w, s) for c, w, s in rows if c == args.workers]
    med = {
        name: (statistics.median(w for w, _ in xs), statistics.median(s for _, s in xs))
        for name, xs in (("one", one), ("many", many))
    }
    wall_ratio, span_ratio = med["many"][0] / med["one"][0], med["many"][1] / med["one"][1]
    print(
        f"medians: 1 worker {med['one'][0]:.1f} s (runs {med['one'][1]:.1f} s), "
        f"{args.workers} workers {med['many'][0]:.1f} s (runs {med['many'][1]:.1f} s): "
        f"{wall_ratio:.2f}x wall, {span_ratio:.2f}x runs; load {min(loads):.1f}-{max(loads):.1f}"
    )
    if args.json:
        record = {
            "kind": "record",
            "title": "Many workers on one study",
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{os.cpu_count()}-core {platform.machine()}, Python "
            f"{platform.python_version()}",
            "command": "python benchmarks/many_workers.py " + " ".join(argv or sys.argv[1:]),
            "table": {
                "columns": ["workers", "wall s (median)", "runs' span s (median)", "vs 1 worker"],
                "rows": [
                    ["1", f"{med['one'][0]:.1f}", f"{med['one'][1]:.1f}", "1.00x"],
                    [
                        str(args.workers),
                        f"{med['many'][0]:.1f}",
                        f"{med['many'][1]:.1f}",
                        f"{wall_ratio:.2f}x wall, {span_ratio:.2f}x runs",
                    ],
                ],
            },
            "repeats": [{"workers": c, "wall_s": w, "span_s": s} for c, w, s in rows],
            "load_1min": [round(x, 2) for x in loads],
            "markdown": "",
        }
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
