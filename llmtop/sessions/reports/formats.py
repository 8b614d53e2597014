"""One way to write any report out: `render(subject, fmt)`.

A subject is what a command has to show: a run's `Report` (run.build: a bench or an
interactive session), a sweep's `LoadAnalysis` (analysis/load.py), a watch log's
`WatchAnalysis` (analysis/watch.py) or `Comparisons` (`llmtop compare`). Each has its
text renderers here, by format; "html" is every subject's
self-contained page (html.py), imported here and only here, when a page is asked for, since
plotly's import costs a second that a markdown report should not pay. A new format is one
entry in `TEXT` (or one page function in html.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmtop.sessions.analysis.load import LoadAnalysis
from llmtop.sessions.analysis.watch import WatchAnalysis
from llmtop.sessions.reports import compare, load, run, watch
from llmtop.sessions.reports.compare import Comparisons
from llmtop.sessions.reports.run import Report

Subject = Report | LoadAnalysis | Comparisons | WatchAnalysis

TEXT: dict[type, dict[str, Callable[[Any], str]]] = {
    Report: {"md": run.markdown, "csv": run.csv_text, "json": run.json_text},
    LoadAnalysis: {"md": load.markdown, "csv": load.csv_text, "json": load.json_text},
    Comparisons: {"md": lambda c: compare.markdown(c.comparisons, c.energy, c.logs),
                  "json": lambda c: compare.to_json(c.comparisons, c.energy)},
    WatchAnalysis: {"md": watch.markdown, "csv": watch.csv_text, "json": watch.json_text},
}
"""The text renderers of each subject type, by format name."""


def formats(kind: type) -> tuple[str, ...]:
    """The formats a subject type renders to ("md", …, "html"). Raises KeyError for a type
    that is not a subject."""
    return (*TEXT[kind], "html")


def render(subject: Subject, fmt: str) -> str:
    """`subject` as text in `fmt` (one of `formats(type(subject))`). Raises ValueError
    naming the formats there are for anything else."""
    kind = type(subject)
    if fmt == "html":
        from llmtop.sessions.reports import html  # plotly: only when a page is asked for

        pages: dict[type, Callable[[Any], str]] = {
            Report: html.report_html, LoadAnalysis: html.load_html, Comparisons: html.compare_html,
            WatchAnalysis: html.watch_html,
        }
        return pages[kind](subject)
    renderer = TEXT[kind].get(fmt)
    if renderer is None:
        raise ValueError(f"unknown report format {fmt!r}: use one of {', '.join(formats(kind))}")
    return renderer(subject)
