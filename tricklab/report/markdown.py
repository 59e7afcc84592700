"""report.md: the document's blocks as GitHub-flavoured Markdown, figures linked as PNG files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tricklab.report.document as doc
from tricklab.report.tables import to_markdown


def render_markdown(blocks: Sequence[Any], out_dir: Path) -> str:
    """The Markdown text; figure paths relative to `out_dir` (where report.md goes)."""
    parts: list[str] = []
    for block in blocks:
        parts.append(_block(block, out_dir))
    return "\n\n".join(p for p in parts if p) + "\n"


def _block(block: Any, out_dir: Path) -> str:
    if isinstance(block, doc.Heading):
        return f"{'#' * block.level} {block.text}"
    if isinstance(block, doc.Paragraph):
        return block.text
    if isinstance(block, doc.Bullets):
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, doc.TableBlock):
        return to_markdown(block.table)
    if isinstance(block, doc.FigureBlock):
        png = block.figure.png.relative_to(out_dir).as_posix()
        svg = block.figure.svg.relative_to(out_dir).as_posix()
        return f"![{block.figure.title}]({png})\n\n(vector version: [{svg}]({svg}))"
    if isinstance(block, doc.Code):
        return f"```{block.language}\n{block.text.rstrip()}\n```"
    if isinstance(block, doc.Details):
        inner = [f"### {block.summary}", *(_block(b, out_dir) for b in block.blocks)]
        return "\n\n".join(inner)
    raise TypeError(f"no Markdown for {type(block).__name__}")
