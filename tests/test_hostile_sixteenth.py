"""The sixteenth hostile round: each case is one clear error before anything is written, or an
output that says what it measured and on what machine."""

import json
import os
from html.parser import HTMLParser

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


HOSTILE_NAMES = [
    '"><img src=x onerror=alert(1)>',
    "<script>alert(1)</script>",
    "a|b[x](javascript:alert(1))",
    "# heading",
    "- item `code` *em*",
    "1. first",
]


def test_report_md_shows_every_name_as_it_is_in_prose_headings_and_bullets(tmp_path, capsys):
    """The tables escaped names, but the title, summary, headings and conclusions wrote them raw:
    report.md opened in a Markdown viewer ran a script, an onerror image and a javascript: link."""
    markdown = pytest.importorskip("markdown")
    values = ",".join(f"'{name}'" for name in HOSTILE_NAMES[1:])
    argv = ["ablate", "--baseline", *TINY_SYNTHETIC, "run.epochs=1", "tricks.precision=32-true",
            "--vary", f"data.dir={values}", "--seeds", "1", "--study", HOSTILE_NAMES[0],
            "--out", str(tmp_path / "s"), "-q"]  # fmt: skip
    assert main(argv) == 0
    out = tmp_path / "r"
    assert (
        main(["report", str(tmp_path / "s"), "--out", str(out), "--title", HOSTILE_NAMES[1]]) == 0
    )
    capsys.readouterr()
    text = (out / "report.md").read_text()
    assert text.startswith("# &lt;script&gt;alert(1)&lt;/script&gt;\n")
    seen = _Rendered()
    seen.feed(markdown.markdown(text, extensions=["tables"]))
    assert seen.tags <= {"h1", "h2", "h3", "p", "ul", "li", "table", "thead", "tbody", "tr", "th",
                         "td", "img", "a", "pre", "code"}  # fmt: skip
    assert all(not link.startswith("javascript") and "/" in link for link in seen.links)
    shown = " ".join(seen.text)
    assert shown.startswith(HOSTILE_NAMES[1])  # the title, as typed
    for name in [HOSTILE_NAMES[0], *HOSTILE_NAMES[2:]]:
        assert name in shown  # each name reads as it was written


class _Rendered(HTMLParser):
    """The tags, link targets and text of rendered Markdown."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.links: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.add(tag)
        self.links += [v for k, v in attrs if k in ("href", "src")]

    def handle_data(self, data) -> None:
        self.text.append(data)


def test_a_recipe_in_report_md_keeps_its_fence_whatever_backticks_it_holds():
    from pathlib import Path

    import tricklab.report.document as doc
    from tricklab.report.markdown import render_markdown

    text = render_markdown([doc.Code("data:\n  dir: a```b````c\n", "yaml")], Path("."))
    assert text.startswith("`````yaml\n") and text.rstrip().endswith("\n`````")
