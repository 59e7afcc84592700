"""Reports a student can hand in: `tricklab report` and `write_report`.

- `collect.py`: the sources (studies, speedrun folders, run folders) and their statistics;
- `figures.py`: effects vs the reference, training curves, memory/throughput (`tradeoff.py`:
  accuracy vs time and its Pareto front; `style.py`: colours, markers, legends, ticks);
- `conclusions.py`: one conservative sentence per configuration, and the summary paragraph;
- `tables.py`: the results and per-seed tables (`table_writers.py`: as rich, Markdown, LaTeX,
  CSV);
- `document.py`, `markdown.py`, `html.py`: report.md and the self-contained report.html;
- `build.py`: `write_report`, all or nothing; `cli.py`: `tricklab report` and `tricklab results`.
"""

from __future__ import annotations

from tricklab.report.build import Report, write_report

__all__ = ["Report", "write_report"]
