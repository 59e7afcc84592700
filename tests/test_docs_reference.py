"""docs/reference/ is generated from the code: the committed pages are what `tricklab tricks
--format md` and `tricklab recipes --format md` print today, so they cannot drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from tricklab.cli.main import main
from tricklab.recipe.load import builtin_recipes
from tricklab.recipe.reference import GROUP_DOCS
from tricklab.recipe.schema import SECTIONS, all_keys

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference"
REGENERATE = "regenerate it: tricklab {} --format md > docs/reference/{}.md"


@pytest.mark.parametrize("command", ["tricks", "recipes"])
def test_the_committed_reference_page_is_what_the_command_prints_today(command, capsys):
    assert main([command, "--format", "md"]) == 0
    printed = capsys.readouterr().out
    committed = (REFERENCE / f"{command}.md").read_text(encoding="utf-8")
    assert printed == committed, REGENERATE.format(command, command)


def test_the_tricks_page_has_a_row_for_every_recipe_field(capsys):
    assert main(["tricks", "--format", "md"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == all_keys()


def test_the_recipes_page_shows_every_built_in_recipe_with_its_yaml(capsys):
    assert main(["recipes", "--format", "md"]) == 0
    page = capsys.readouterr().out
    for name in builtin_recipes():
        assert f"\n## {name}\n\n```yaml\n# " in page


def test_a_group_and_a_search_narrow_the_markdown_as_they_narrow_the_table(capsys):
    assert main(["tricks", "aug", "--search", "cutout", "--format", "md"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `")]
    assert rows and all(row.startswith("| `aug.cutout") for row in rows)


def test_every_group_of_the_schema_has_its_line_in_the_reference():
    assert list(GROUP_DOCS) == list(SECTIONS)


def test_a_pipe_in_a_doc_cannot_break_the_table():
    from tricklab.recipe.reference import cell

    assert cell("int | None") == "int \\| None"
