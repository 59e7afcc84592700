"""benchmarks/RESULTS.md and the README's headline table are generated from the JSON under
benchmarks/results/ (benchmarks/make_results.py): the committed files are what it writes today,
and it reads every JSON file there, so no number is copied by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("make_results", ROOT / "benchmarks/make_results.py")
make_results = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(make_results)
REGENERATE = "regenerate: python benchmarks/make_results.py"


def test_the_committed_results_page_is_what_the_script_writes_today():
    assert make_results.RESULTS_MD.read_text(encoding="utf-8") == make_results.results_md(), (
        REGENERATE
    )


def test_the_readme_headline_table_is_what_the_script_writes_today():
    readme = make_results.README.read_text(encoding="utf-8")
    assert make_results.readme_with_headline(readme) == readme, REGENERATE


def test_check_mode_says_current_files_are_current():
    assert make_results.main(["--check"]) == 0


def test_every_json_file_of_the_results_is_read_as_some_kind():
    for folder in make_results.folders():
        kinds = make_results.read_folder(folder)
        read = {stem for items in kinds.values() for stem, _ in items}
        assert read == {p.stem for p in folder.glob("*.json")}, f"{folder.name}: unread JSON"


def test_a_new_record_shows_up_on_the_page(tmp_path, monkeypatch):
    folder = tmp_path / "2099-01-01-cpu"
    folder.mkdir()
    record = {
        "kind": "record", "title": "A planted measurement", "date": "2099-01-01",
        "machine": "nowhere", "command": "true", "markdown": "It took 12.3 s.",
    }  # fmt: skip
    (folder / "planted.json").write_text(json.dumps(record))
    monkeypatch.setattr(make_results, "RESULTS_DIR", tmp_path)
    page = make_results.results_md()
    assert "## 2099-01-01-cpu" in page
    assert "### A planted measurement" in page and "It took 12.3 s." in page


def test_the_headline_holds_the_gpu_side_by_side_and_the_cpu_demo():
    headline = make_results.headline()
    assert "time vs airbench" in headline and "airbench94" in headline
    assert "tricklab demo" in headline
