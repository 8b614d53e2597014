"""One way to write any report out: `render(subject, fmt)`.

A subject is what a command has to show: a run's `Report` (run.build: a bench or an
interactive session), a sweep's `LoadAnalysis` (analysis/load.py), a watch log's
`WatchAnalysis` (analysis/watch.py), a replay's `ReplayReport` (its sweep, then the comparison
with the originals: reports/replay.py), `Comparisons` (`llmtop compare`) or a `SetAnalysis`
(`llmtop bench --engines`: analysis/engine_set.py). Each has its
text renderers here, by format; "html" is every subject's
self-contained page (html.py), imported here and only here, when a page is asked for, since
plotly's import costs a second that a markdown report should not pay. A new format is one
entry in `TEXT` (or one page function in html.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from llmtop.safetext import visible
from llmtop.sessions.analysis.engine_set import SetAnalysis
from llmtop.sessions.analysis.load import LoadAnalysis
from llmtop.sessions.analysis.watch import WatchAnalysis
from llmtop.sessions.reports import compare, engine_set, load, replay, run_data, run_markdown, watch
from llmtop.sessions.reports.compare import Comparisons
from llmtop.sessions.reports.replay import ReplayReport
from llmtop.sessions.reports.run import Report

_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")
Subject = Report | LoadAnalysis | Comparisons | WatchAnalysis | SetAnalysis | ReplayReport

TEXT: dict[type, dict[str, Callable[[Any], str]]] = {
    Report: {"md": run_markdown.markdown, "csv": run_data.csv_text, "json": run_data.json_text},
    LoadAnalysis: {"md": load.markdown, "csv": load.csv_text, "json": load.json_text},
    Comparisons: {"md": lambda c: compare.markdown(c.comparisons, c.energy, c.logs),
                  "json": lambda c: compare.to_json(c.comparisons, c.energy)},
    WatchAnalysis: {"md": watch.markdown, "csv": watch.csv_text, "json": watch.json_text},
    SetAnalysis: {"md": engine_set.markdown, "json": engine_set.json_text},
    ReplayReport: {"md": lambda r: load.markdown(r.sweep) + "\n" + replay.markdown(r.comparison),
                   "json": lambda r: json.dumps(
                       {"sweep": load.as_json(r.sweep),
                        "replay": replay.as_json(r.comparison)},
                       indent=2, ensure_ascii=False, default=str) + "\n"},
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
            WatchAnalysis: html.watch_html, SetAnalysis: html.engine_set_html,
            ReplayReport: html.replay_html,
        }
        return pages[kind](subject)
    renderer = TEXT[kind].get(fmt)
    if renderer is None:
        raise ValueError(f"unknown report format {fmt!r}: use one of {', '.join(formats(kind))}")
    return shown(renderer(subject), fmt)


def shown(text: str, fmt: str) -> str:
    """A text report as written out: control characters from the logs' text (a model's
    answer, an engine's name, a server's error) made visible (safetext.visible), and in
    Markdown every "<" that could open an HTML tag (before a letter, "/", "!" or "?")
    written "&lt;", so a `<script>` model name is text in any Markdown viewer ("n < 20"
    stays; llmtop's own Markdown holds no HTML). JSON escapes its own."""
    if fmt == "json":
        return text
    text = visible(text)
    return _TAG_OPEN.sub("&lt;", text) if fmt == "md" else text
