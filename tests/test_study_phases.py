"""benchmarks/study_phases.py on a tiny ablation: every timed function still exists under its
name (a rename would silently time nothing), each run's phases are counted once per run, and the
JSON is written however the command ends."""

import json
import subprocess
import sys
from pathlib import Path

from tiny_recipe import TINY_SYNTHETIC

ROOT = Path(__file__).parent.parent


def phases(tmp_path, *args):
    out = tmp_path / "phases.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/study_phases.py", "--json", str(out), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return done, json.loads(out.read_text())


def test_a_tiny_ablation_is_timed_phase_by_phase(tmp_path):
    done, report = phases(
        tmp_path, "ablate", "--baseline", "speedrun94", *TINY_SYNTHETIC, "run.epochs=1",
        "--vary", "optim.lr=0.05", "--seeds", "1", "--out", str(tmp_path / "study"), "-q",
    )  # fmt: skip
    assert done.returncode == 0 and report["rc"] == 0, done.stderr
    assert report["missing_targets"] == []
    p = report["phases"]
    assert p["api.train"]["calls"] == p["api.run_loop"]["calls"] == report["results"]["runs"] == 2
    assert p["setup.check_setup"]["calls"] == 1 and p["runner.run_units"]["calls"] == 1
    assert p["setup.channel_stats"]["calls"] == 2  # check_setup's, then one shared by the runs
    inner = p["api.run_loop"]["seconds"] + p["api.prepare"]["seconds"]
    assert 0 < inner <= p["api.train"]["seconds"] <= p["runner.run_units"]["seconds"]
    assert 0 < report["results"]["record_seconds"] <= report["command_seconds"]


def test_a_failing_command_still_writes_its_json(tmp_path):
    done, report = phases(tmp_path, "ablate", "--baseline", "speedrun99", "--seeds", "1")
    assert done.returncode == 2 and report["rc"] == 2
    assert report["results"]["runs"] == 0
