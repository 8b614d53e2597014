"""The bench's per-request series, one cell per request in run order: TTFT (ms), prefill
(ms, server) and decode (tok/s, server); then a status row — "w" warm-up (kept apart, drawn
dim), "✗" a request that does not count (red), "e" a request in an episode, slow or faster
(magenta; outside the baseline: analysis/episodes.py), "·" counted — and a NOISY row: "!" where a
probe sample taken during the request was NOISY. An episode's series cells are magenta too.

Each series is scaled between the min and max of the requests that count, so one slow
warm-up (a model load) does not flatten the rest; values outside that range are clipped.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from rich.text import Text
from textual.widget import Widget

from llmtop.sessions.measure.metrics import PROMPT_EVAL, TTFT
from llmtop.sessions.reports.text import num, spark_cell
from llmtop.tui.state.bench_state import WARMUP, BenchRow, warm_note

LABEL_WIDTH = 14
SUFFIX_WIDTH = 32  # "  last 1,234.5 · med 1,234.5"
Value = Callable[[BenchRow], float | None]
SERIES: tuple[tuple[Value, str], ...] = (  # each series' value of a row, and its label
    (lambda row: row.ttft_ms, TTFT.heading),
    (lambda row: row.prefill_ms, PROMPT_EVAL.heading),
    (lambda row: row.decode_tps, "decode tok/s"),
)
LEGEND = "w warm-up, kept apart   ✗ does not count (see the report)   · counted"
EPISODE_LEGEND = "   e episode (slow, or faster than the baseline)"


def _mark(row: BenchRow) -> tuple[str, str]:
    if row.phase == WARMUP:
        return "w", "dim"
    if not row.counts:
        return "✗", "bold red"
    if row.episode is not None:
        return "e", "bold magenta"
    return "·", "dim"


def series_text(rows: Sequence[BenchRow], width: int) -> Text:
    """The three series and the marks row for `rows`, fitted to `width` cells (the latest
    requests when there are more than fit)."""
    room = max(1, width - LABEL_WIDTH - SUFFIX_WIDTH)
    shown = list(rows)[-room:]
    clipped = len(rows) > len(shown)
    text = Text()
    for value, label in SERIES:
        counted = [v for r in rows if r.counts and (v := value(r)) is not None]
        scale = counted or [v for r in rows if (v := value(r)) is not None]
        lo, hi = (min(scale), max(scale)) if scale else (None, None)
        text.append_text(
            _marks_row(label, shown, clipped, _series_mark(value, lo, hi), bold_row=False)
        )
        last = value(rows[-1]) if rows else None
        med = statistics.median(counted) if counted else None
        text.append(f"  last {num(last)} · med {num(med)}\n", style="dim")
    text.append_text(_marks_row("status", shown, clipped, _mark))
    legend = LEGEND + (EPISODE_LEGEND if any(r.episode is not None for r in rows) else "")
    text.append(f"  {legend}\n", style="dim")
    text.append_text(_marks_row("NOISY", shown, clipped, _noise_mark))
    noisy = [r for r in rows if r.noisy]
    if noisy:
        text.append(f"  {len(noisy)} ran while the machine was NOISY{warm_note(noisy)}",
                    style="yellow")
    else:
        text.append("  no NOISY probe sample during a request", style="dim")
    return text


def _series_mark(
    value: Value, lo: float | None, hi: float | None
) -> Callable[[BenchRow], tuple[str, str]]:
    """One series' cell of a row: its value's block on the lo…hi scale (cyan, a warm-up dim),
    ✗ for a measured request that does not count."""

    def mark(row: BenchRow) -> tuple[str, str]:
        if row.phase != WARMUP and not row.counts:
            return "✗", "bold red"
        cell = " " if lo is None or hi is None else spark_cell(value(row), lo, hi)
        if row.episode is not None:
            return cell, "magenta"
        return cell, "dim" if row.phase == WARMUP else "cyan"

    return mark


def _noise_mark(row: BenchRow) -> tuple[str, str]:
    return ("!", "bold yellow") if row.noisy else (" ", "")


def _marks_row(
    label: str,
    shown: Sequence[BenchRow],
    clipped: bool,
    mark: Callable[[BenchRow], tuple[str, str]],
    bold_row: bool = True,
) -> Text:
    """One row: `label`, then each shown row's `mark` (a cell and its style), "│" between
    prompt sizes. bold_row: the whole row is bold under its marks' styles (the marks rows),
    else the label alone (a series)."""
    padded = f"{label:<{LABEL_WIDTH}}"
    text = Text(padded, style="bold") if bold_row else Text().append(padded, style="bold")
    text.append("…" if clipped else "", style="dim")
    previous = shown[0].target if shown else None
    for row in shown:
        if row.target != previous:
            text.append("│", style="dim")
            previous = row.target
        text.append(*mark(row))
    return text


class BenchSeries(Widget):
    """Draws `series_text` of the rows it was given, at its own width."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.rows: list[BenchRow] = []

    def set_rows(self, rows: Sequence[BenchRow]) -> None:
        """Show these rows (a copy is kept; rows are re-marked in place by the state)."""
        self.rows = list(rows)
        self.refresh()

    def render(self) -> Text:
        return series_text(self.rows, self.content_size.width)
