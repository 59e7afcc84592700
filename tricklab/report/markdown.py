"""report.md: the document's blocks as GitHub-flavoured Markdown, figures linked as PNG files."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tricklab.report.document as doc
from tricklab.report.table_writers import markdown_block, markdown_text
from tricklab.report.tables import to_markdown


def render_markdown(blocks: Sequence[Any], out_dir: Path) -> str:
    """The Markdown text; figure paths relative to `out_dir` (where report.md goes)."""
    parts: list[str] = []
    for block in blocks:
        parts.append(_block(block, out_dir))
    return "\n\n".join(p for p in parts if p) + "\n"


def _block(block: Any, out_dir: Path) -> str:
    """`block` as Markdown; its text as it reads (names from outside: no HTML, link or markup)."""
    if isinstance(block, doc.Heading):
        return f"{'#' * block.level} {markdown_block(block.text)}"
    if isinstance(block, doc.Paragraph):
        return markdown_block(block.text)
    if isinstance(block, doc.Bullets):
        return "\n".join(f"- {markdown_block(item)}" for item in block.items)
    if isinstance(block, doc.TableBlock):
        return to_markdown(block.table)
    if isinstance(block, doc.FigureBlock):
        png = block.figure.png.relative_to(out_dir).as_posix()
        svg = block.figure.svg.relative_to(out_dir).as_posix()
        title = markdown_text(block.figure.title).replace("[", "\\[").replace("]", "\\]")
        return f"![{title}]({png})\n\n(vector version: [{svg}]({svg}))"
    if isinstance(block, doc.Code):  # a fence longer than any run of backticks in the text
        fence = "`" * max(3, 1 + max(map(len, re.findall("`+", block.text)), default=0))
        return f"{fence}{block.language}\n{block.text.rstrip()}\n{fence}"
    if isinstance(block, doc.Details):
        inner = [
            f"### {markdown_block(block.summary)}",
            *(_block(b, out_dir) for b in block.blocks),
        ]
        return "\n\n".join(inner)
    raise TypeError(f"no Markdown for {type(block).__name__}")
