"""A table as text cells (`TableData`) and its writers: a rich terminal table (abridged or stacked
where the terminal is too narrow), Markdown, LaTeX (booktabs) and CSV. html.py writes the HTML."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tricklab.core.safeio import csv_cell


@dataclass
class TableData:
    """A table as text cells: `align` holds 'l' or 'r' per column."""

    title: str
    header: list[str]
    rows: list[list[str]]
    align: list[str]
    notes: list[str] = field(default_factory=list)
    # What a terminal too narrow for every column shows instead (results_table's point estimates
    # and verdicts); None: the table wraps its cells, or stacks, as to_rich decides.
    abridged: TableData | None = None

    def without_empty_columns(self, keep: int = 1) -> TableData:
        """The table without columns that are empty or '-' in every row (the first `keep` stay)."""
        used = [
            i
            for i in range(len(self.header))
            if i < keep or any(row[i] not in ("", "-") for row in self.rows)
        ]
        return TableData(
            self.title,
            [self.header[i] for i in used],
            [[row[i] for i in used] for row in self.rows],
            [self.align[i] for i in used],
            list(self.notes),
            self.abridged,
        )


# Characters Markdown would read as markup in a cell (a column, code, emphasis, strike-through, an
# entity, HTML: `<!--` would hide the rest of the table): written escaped (CommonMark takes a
# backslash before any ASCII punctuation; `<`, `>` and `&` as entities, which every Markdown reads,
# Python-Markdown too), so a name shows as it is; `_` inside a word is no
# emphasis in GitHub's Markdown and stays as it is (label_smoothing).
_MARKDOWN = {c: "\\" + c for c in "\\|`*~"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_EMPHASIS = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")  # an `_` that is not inside a word


def markdown_text(text: str) -> str:
    """`text` as Markdown inline text that shows as it is: markup characters escaped, no link."""
    text = "".join(_MARKDOWN.get(c, c) for c in text.replace("\n", " "))
    text = _EMPHASIS.sub(r"\\_", text)  # `__b__`, `_x_`: emphasis; label_smoothing stays
    return text.replace("](", "]\\(")  # no link; an interval's [a, b] stays as it reads


def markdown_block(text: str) -> str:
    """`text` as a Markdown paragraph, heading or list item that shows as it is: `markdown_text`,
    and no heading, list or code block opened by its first characters (a name can start it)."""
    text = markdown_text(text).lstrip()  # four spaces in front would make a code block
    opener = re.match(r"(#{1,6}|[-+]|\d{1,9}[.)])(\s|$)", text)
    if opener:  # '# x', '- x', '1. x': the punctuation escaped
        at = opener.end(1) - 1
        text = text[:at] + "\\" + text[at:]
    return text


def to_markdown(table: TableData) -> str:
    lines = ["| " + " | ".join(markdown_text(h) for h in table.header) + " |"]
    lines.append("|" + "|".join("---:" if a == "r" else "---" for a in table.align) + "|")
    lines += ["| " + " | ".join(markdown_text(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


_LATEX = {
    "\\": r"\textbackslash{}",
    "|": r"\textbar{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "×": r"$\times$",
    "Δ": r"$\Delta$",
    "≥": r"$\geq$",
    "·": r"$\cdot$",
    "<": r"$<$",
    ">": r"$>$",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX.get(c, c) for c in text)


def to_latex(table: TableData) -> str:
    """A booktabs table (needs \\usepackage{booktabs})."""
    lines = [
        "% needs \\usepackage{booktabs}",
        "\\begin{table}[ht]",
        "\\centering",
        "\\small",
    ]
    if table.title:
        lines.append(f"\\caption{{{latex_escape(table.title)}}}")
    lines += [
        f"\\begin{{tabular}}{{{''.join(table.align)}}}",
        "\\toprule",
        " & ".join(latex_escape(h) for h in table.header) + " \\\\",
        "\\midrule",
        *(" & ".join(latex_escape(c) for c in row) + " \\\\" for row in table.rows),
        "\\bottomrule",
        "\\end{tabular}",
        "\\end{table}",
    ]
    return "\n".join(lines)


def to_csv(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """CSV text, each text cell on one line and no formula (core/safeio.csv_cell): a value a user
    varied (a run's name, a project) cannot forge a row, reach the terminal or run in a
    spreadsheet; other text as it is."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([csv_cell(cell) for cell in header])
    for row in rows:
        writer.writerow([csv_cell(v) for v in row])
    return buffer.getvalue()


def _word_widths(table: TableData) -> tuple[list[int], list[int]]:
    """Per column: (longest word, longest cell): the narrowest it can be with no word broken, and
    the widest it needs."""
    columns = [[table.header[i]] + [row[i] for row in table.rows] for i in range(len(table.header))]
    words = [max((len(w) for text in col for w in text.split()), default=1) for col in columns]
    cells = [max((len(text) for text in col), default=1) for col in columns]
    return words, cells


def _fit(minimum: list[int], maximum: list[int], available: int) -> list[int]:
    """Column widths within `available`: each at least its minimum; the spare shared max-min fairly
    (columns that want little get it all, so short cells stay on one line)."""
    wants = [max(mx - mn, 0) for mn, mx in zip(minimum, maximum)]
    widths = list(minimum)
    spare = available - sum(minimum)
    order = sorted(range(len(wants)), key=lambda i: wants[i])
    for done, i in enumerate(order):
        give = min(wants[i], spare // (len(order) - done))
        widths[i] += give
        spare -= give
    return widths


def _fits(table: TableData, width: int) -> bool:
    """Whether every cell of `table` fits on one line within `width` columns (a header may wrap
    between its words)."""
    need = [
        max([len(row[i]) for row in table.rows] + [len(w) for w in table.header[i].split()])
        for i in range(len(table.header))
    ]
    return sum(need) + 3 * len(need) + 1 <= width


def to_rich(table: TableData, width: int | None = None) -> Any:
    """A rich renderable: the table, or, where the terminal is too narrow for it, its `abridged`
    form when that fits on one line a row, else one small two-column table per row ('stacked').
    A table without an abridged form wraps its cells while its words fit. Cells wrap at spaces and
    fold inside a word; never '…'."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if width is not None and table.abridged is not None and not _fits(table, width):
        short = table.abridged
        if _fits(short, width):
            return Group(to_rich(short, width), Text(short.notes[0], style="dim"))
        return _stacked(table)
    minimum, maximum = _word_widths(table)
    borders = 3 * len(minimum) + 1  # a space of padding each side and a rule between columns
    if width is None or sum(minimum) + borders <= width:
        widths = maximum if width is None else _fit(minimum, maximum, width - borders)
        wide = Table(title=table.title or None, title_justify="left")
        for name, align, column_width in zip(table.header, table.align, widths):
            justify = "right" if align == "r" else "left"
            wide.add_column(name, justify=justify, overflow="fold", width=column_width)
        for row in table.rows:
            wide.add_row(*row)
        return wide
    return _stacked(table)


def _stacked(table: TableData) -> Any:
    """One small two-column table (field, value) per row, titled by the row's first cell."""
    from rich.console import Group
    from rich.table import Table

    parts: list[Any] = [table.title] if table.title else []
    for row in table.rows:
        block = Table(title=row[0], title_justify="left", show_header=False, show_lines=False)
        block.add_column("field", overflow="fold", style="dim")
        block.add_column("value", overflow="fold")
        for name, value in zip(table.header[1:], row[1:]):
            if value not in ("", "-"):
                block.add_row(name, value)
        parts.append(block)
    return Group(*parts)
