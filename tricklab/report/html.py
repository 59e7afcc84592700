"""report.html: one self-contained file. Figures are embedded as SVG data URIs, the style sheet is
inline, there is no script and no address to fetch: it reads the same offline, printed, or mailed."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from typing import Any

import tricklab.report.document as doc

STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1d1d1f;
       max-width: 1100px; margin: 2em auto; padding: 0 1.5em; line-height: 1.45; }
p, li, h1, h2, h3, figcaption, summary { overflow-wrap: anywhere; }  /* a 10,000-letter name */
h1 { font-size: 1.7em; border-bottom: 2px solid #1f77b4; padding-bottom: .2em; }
h2 { font-size: 1.3em; margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: .15em; }
h3 { font-size: 1.05em; margin-top: 1.4em; }
p.meta { color: #666; font-size: .9em; }
table { border-collapse: collapse; font-size: .82em; margin: .6em 0 1em; display: block;
        overflow-x: auto; }
th, td { border-bottom: 1px solid #e3e3e3; padding: .3em .6em; vertical-align: top; }
th { background: #f4f6f8; text-align: left; border-bottom: 2px solid #ccc; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafbfc; }
figure { margin: 1em 0 .4em; }
figure img { width: 100%; max-width: 960px; height: auto; border: 1px solid #eee; }

figcaption, p.caption { color: #444; font-size: .9em; }
ul.conclusions li { margin-bottom: .45em; }
pre { background: #f6f8fa; padding: .8em; overflow-x: auto; font-size: .8em; }
details { margin: .6em 0; }
summary { cursor: pointer; font-weight: 600; }
@media print { body { max-width: none; } }
"""


def render_html(blocks: Sequence[Any]) -> str:
    """The whole page."""
    title = next((b.text for b in blocks if isinstance(b, doc.Heading) and b.level == 1), "report")
    body = "\n".join(_block(b, i) for i, b in enumerate(blocks))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"{body}\n</body>\n</html>\n"
    )


def data_uri(path: Any) -> str:
    """A file as a data: URI (SVG or PNG)."""
    mime = "image/svg+xml" if str(path).endswith(".svg") else "image/png"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def _table(table: Any) -> str:
    head = "".join(
        f'<th class="{a}">{html.escape(h)}</th>' for h, a in zip(table.header, table.align)
    )
    rows = "\n".join(
        "<tr>"
        + "".join(f'<td class="{a}">{html.escape(c)}</td>' for c, a in zip(row, table.align))
        + "</tr>"
        for row in table.rows
    )
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table>"


def _block(block: Any, index: int) -> str:
    if isinstance(block, doc.Heading):
        return f"<h{block.level}>{html.escape(block.text)}</h{block.level}>"
    if isinstance(block, doc.Paragraph):
        css = ' class="meta"' if block.text.startswith("Made by tricklab") else ""
        return f"<p{css}>{html.escape(block.text)}</p>"
    if isinstance(block, doc.Bullets):
        items = "\n".join(f"<li>{html.escape(item)}</li>" for item in block.items)
        return f'<ul class="conclusions">\n{items}\n</ul>'
    if isinstance(block, doc.TableBlock):
        return _table(block.table)
    if isinstance(block, doc.FigureBlock):
        figure = block.figure
        return (
            f'<figure id="{html.escape(figure.stem)}"><img src="{data_uri(figure.svg)}" '
            f'alt="{html.escape(figure.title)}"></figure>'
        )
    if isinstance(block, doc.Code):
        return f"<pre><code>{html.escape(block.text)}</code></pre>"
    if isinstance(block, doc.Details):
        inner = "\n".join(_block(b, index) for b in block.blocks)
        # open: printed to PDF, the appendix is there too; a click folds it on screen
        return (
            f"<details open>\n<summary>{html.escape(block.summary)}</summary>\n{inner}\n</details>"
        )
    raise TypeError(f"no HTML for {type(block).__name__}")
