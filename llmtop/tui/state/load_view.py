"""What the load screen draws, as plain functions over the sweep's progress (no widgets):
the live line of the level running, the table of finished levels, and the
throughput–latency curve (x: requests/s, y: TTFT p50), drawn as levels finish.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns

from rich.table import Table
from rich.text import Text

from llmtop.sessions.analysis.load import LevelResult, LoadAnalysis, Percentiles
from llmtop.sessions.analysis.load_verdict import verdict_line
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.runners.load.progress import LoadProgress

PLOT_HEIGHT = 8
PLOT_WIDTH = 48


@dataclass
class LoadLive:
    """The sweep as the screen knows it: the level running (its records so far) and the
    finished levels. Fed by `on_progress` on the app's loop; `dirty` until drawn."""

    phase: str = "not started"
    message: str = ""
    level_label: str = ""
    in_flight: int = 0
    done: int = 0
    total: int | None = None
    started_ns: int = 0
    records: list[RequestRecord] = field(default_factory=list)
    levels: list[LevelResult] = field(default_factory=list)
    dirty: bool = True

    def on_progress(self, p: LoadProgress) -> None:
        """Take one progress report from the runner."""
        self.phase, self.dirty = p.phase, True
        if p.message:
            self.message = p.message
        if p.phase == "level":
            self.records, self.done, self.total = [], 0, p.total
            self.level_label, self.started_ns = p.message, perf_counter_ns()
        elif p.phase == "request" and p.record is not None:
            self.records.append(p.record)
            self.in_flight, self.done = p.in_flight, p.done
        elif p.phase == "level-done" and p.result is not None:
            self.levels.append(p.result)
            self.in_flight = 0

    def live_line(self) -> Text:
        """The level running: its label, requests in flight, done/total, live TTFT p50/p90,
        TPOT p50 and ok requests/s so far."""
        if self.phase not in ("level", "request"):
            return Text(self.message or self.phase, style="dim")
        ok = [r for r in self.records if r.status == "ok"]
        ttft = Percentiles.of(r.metrics.ttft_ms for r in ok)
        tpot = Percentiles.of(r.metrics.tpot_ms for r in ok)
        elapsed_s = (perf_counter_ns() - self.started_ns) / 1e9
        rate = len(ok) / elapsed_s if elapsed_s > 0 else 0.0
        total = "?" if self.total is None else str(self.total)
        return Text(
            f"{self.level_label} · {self.in_flight} in flight · {self.done}/{total} done · "
            f"TTFT p50/p90 {_p(ttft.p50)}/{_p(ttft.p90)} ms · TPOT p50 {_p(tpot.p50)} ms · "
            f"{rate:.2f} req/s"
        )


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


LEVEL_COLUMNS = (  # a header may take two lines; a cell never wraps
    "level", "ok/fail", "TTFT ms\np50/p95", "TPOT ms\np50", "E2E s\np50", "req/s", "tok/s",
    "goodput\n(share)", "probes",
)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def level_cells(lv: LevelResult) -> tuple[str, ...]:
    """One finished level in LEVEL_COLUMNS order, short enough for 80 columns: TTFT p50/p95
    in whole ms ("812/1611"), TPOT p50 in ms with one decimal, E2E p50 in s with one decimal
    ("19.4"), the rates with two and one decimals, goodput req/s with its share. The
    scheduled-arrival times (open loop) stand in for TTFT and E2E as `llmtop report` does."""
    ttft = lv.ttft_scheduled if lv.ttft_scheduled is not None else lv.ttft
    e2e = lv.e2e_scheduled if lv.e2e_scheduled is not None else lv.e2e
    share = "n/a" if lv.goodput_share is None else f"{lv.goodput_share:.0%}"
    goodput = "n/a" if lv.goodput_per_s is None else f"{lv.goodput_per_s:.2f} ({share})"
    return (
        lv.label,
        f"{lv.ok}/{lv.failed}",
        "n/a" if ttft.n == 0 else f"{_ms(ttft.p50)}/{_ms(ttft.p95)}",
        "n/a" if lv.tpot.p50 is None else f"{lv.tpot.p50:.1f}",
        "n/a" if e2e.p50 is None else f"{e2e.p50 / 1000:.1f}",
        "n/a" if lv.req_per_s is None else f"{lv.req_per_s:.2f}",
        "n/a" if lv.tok_per_s is None else f"{lv.tok_per_s:.1f}",
        goodput,
        lv.verdict,
    )


def finished_text(analysis: LoadAnalysis, log_path: str) -> Text:
    """The finished sweep's lines under its table: the verdict (the report's word, green when
    CLEAN, red when CONTAMINATED, yellow otherwise), the knee as the report states it, the
    log's path."""
    v = analysis.verdict
    colour = "green" if v.label == "CLEAN" else "red" if v.contaminated else "yellow"
    out = Text("Verdict: ", style="bold")
    out.append(verdict_line(v), style=f"bold {colour}")
    out.append(f"\n{analysis.knee_line}", style="bold")
    out.append(f"\nlog {log_path}")
    return out


def levels_table(levels: Sequence[LevelResult]) -> Table:
    """The finished levels (`level_cells`): each row on one line at 80 columns (the
    report's "19,439.5 / 21,000.2 / 22,000.1" cells wrapped over 3 lines); `llmtop
    report` has every percentile."""
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for name in LEVEL_COLUMNS:
        table.add_column(name, no_wrap=True, overflow="ellipsis")
    for lv in levels:
        table.add_row(*level_cells(lv))
    return table


def curve(
    levels: Sequence[LevelResult], width: int = PLOT_WIDTH, height: int = PLOT_HEIGHT
) -> Text:
    """The throughput–latency curve: each finished level is a point at (req/s, TTFT p50 ms),
    marked with its position (1, 2, …); the axes say their ranges. Empty until a level ends.
    The axes start at 0: a negative figure (stamps from two clocks) has no place and is not
    drawn, its level's number left out."""
    points = [
        (n, lv.req_per_s, lv.ttft.p50)
        for n, lv in enumerate(levels, start=1)
        if lv.req_per_s is not None and lv.ttft.p50 is not None
        and lv.req_per_s >= 0 and lv.ttft.p50 >= 0
    ]
    if not points:
        return Text("the throughput–latency curve appears as levels finish", style="dim")
    x_hi = max(x for _, x, _ in points) or 1.0
    y_hi = max(y for _, _, y in points) or 1.0
    grid = [[" "] * width for _ in range(height)]
    for n, x, y in points:
        col = min(width - 1, round(x / x_hi * (width - 1)))
        row = height - 1 - min(height - 1, round(y / y_hi * (height - 1)))
        grid[row][col] = str(n % 10)
    out = Text()
    for i, cells in enumerate(grid):
        label = f"{y_hi:>7.0f} ┤" if i == 0 else ("      0 ┤" if i == height - 1 else "        │")
        out.append(label, style="dim").append("".join(cells) + "\n", style="bold cyan")
    out.append("        └" + "─" * width + "\n", style="dim")
    out.append(f"         0{' ' * (width - 12)}{x_hi:>8.2f} req/s   (y: TTFT p50 ms)", style="dim")
    return out
