"""The sixteenth hostile round: each case is one clear error before anything is written, or an
output that says what it measured and on what machine."""

import json
import os

import pytest
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main
from tricklab.measure.provenance import BUSY_WORDS
from tricklab.report.profiles import load_profile

PROFILES = {
    "step": ["profile", "step", *TINY_SYNTHETIC, "--repeats", "2"],
    "model": ["profile", "model", "airbench", "model.width=0.25", "data.image_size=16",
              "--batch-sizes", "2", "--repeats", "2", "--device", "cpu"],
    "loader": ["profile", "loader", "synthetic", "data.train_size=128", "data.test_size=64",
               "loader.batch_size=64", "--kinds", "device", "--repeats", "2"],
}  # fmt: skip


@pytest.mark.parametrize("kind", PROFILES)
def test_a_profile_on_a_busy_machine_says_so_in_the_terminal_and_in_the_report(
    kind, tmp_path, monkeypatch, capsys
):
    """speedrun, ablate, results and report flag timings taken on a busy machine; a profile,
    the command whose only output is timings, said nothing."""
    cores = os.cpu_count()
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0 * cores, 1.0, 1.0))
    assert main([*PROFILES[kind], "-q"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    line = f"{BUSY_WORDS}: the 1-minute load average was {3.0 * cores:.2f} on {cores} cores"
    assert line in out and "(start of the profile)" in out and "run again when" in out
    assert main([*PROFILES[kind], "--json", "-q"]) == 0
    saved = tmp_path / "p.json"
    saved.write_text(capsys.readouterr().out.strip().splitlines()[-1])
    hardware = json.loads(saved.read_text())["hardware"]
    assert hardware["load_average_start"] == hardware["load_average_end"] == [3.0 * cores, 1, 1]
    notes = [n for t in load_profile(saved).tables for n in t.notes]
    assert any(line in n for n in notes)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert main([*PROFILES[kind], "-q"]) == 0
    assert BUSY_WORDS not in capsys.readouterr().out
    data = json.loads(saved.read_text())
    data["hardware"]["load_average_end"] = ["high", 1]
    saved.write_text(json.dumps(data))
    assert main(["report", "--profile", str(saved), "--out", str(tmp_path / "r")]) == 2
    assert "load_average_end" in capsys.readouterr().err
