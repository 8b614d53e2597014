"""The plots screen (Ctrl+G; also from the sessions screen): a session log's requests as
pictures, drawn with textual-plotext's PlotextPlot widget.

Four plots of one prompt size: TTFT and the server's decode rate per request in run order
(ok requests joined, warm-ups and excluded requests as separate marked series), and the
distributions of TTFT and of the inter-token gaps. The log is read afresh when the screen
opens (the session log is flushed per record), so it shows the session up to now; `[` and
`]` step through the prompt sizes of a bench log.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid
from textual.screen import Screen
from textual.widgets import Footer, Static
from textual_plotext import PlotextPlot

from llmtop.sessions.analysis.compare import run_analysis
from llmtop.sessions.analysis.series import SizeSeries, run_series
from llmtop.sessions.records.log import LogError, read_log

MARKS = {"ok": "dot", "warmup": "o", "excluded": "x"}  # plotext markers (a name or a character)
BINS = 30


class PlotsScreen(Screen[None]):
    """TTFT and decode series, TTFT and ITL histograms of one log's prompt size."""

    DEFAULT_CSS = """
    #plots-grid { grid-size: 2 2; height: 1fr; }
    #plots-title { height: auto; padding: 0 1; color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back"),
        Binding("right_square_bracket", "step(1)", "Next size"),
        Binding("left_square_bracket", "step(-1)", "Previous size"),
    ]

    def __init__(self, log_path: str) -> None:
        super().__init__()
        self.log_path = log_path
        self.series: list[SizeSeries] = []
        self.index = 0
        self.problem: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="plots-title")
        with Grid(id="plots-grid"):
            for name in ("ttft", "decode", "ttft-hist", "itl-hist"):
                yield PlotextPlot(id=f"plot-{name}")
        yield Footer()

    def on_mount(self) -> None:
        try:
            self.series = run_series(run_analysis(read_log(self.log_path)))
        except LogError as exc:
            self.problem = str(exc)
        self.draw()

    def action_step(self, delta: int) -> None:
        """Show the next (1) or previous (-1) prompt size."""
        if self.series:
            self.index = (self.index + delta) % len(self.series)
            self.draw()

    def draw(self) -> None:
        """Redraw the four plots for the current prompt size (or say why there are none)."""
        title = self.query_one("#plots-title", Static)
        if self.problem or not self.series:
            title.update(self.problem or f"{self.log_path}: no requests yet")
            return
        s = self.series[self.index]
        title.update(f"{s.label} ({self.index + 1} of {len(self.series)}; [ ] switch) · "
                     f"{self.log_path}")
        for column, name, label in ((1, "ttft", "TTFT ms"), (2, "decode", "decode tok/s")):
            plt = self._fresh(f"#plot-{name}", f"{label} per request", "request #")
            for kind, points in s.points.items():
                xy = [(p[0], p[column]) for p in points if p[column] is not None]
                if xy:
                    draw = plt.plot if kind == "ok" else plt.scatter
                    draw([x for x, _ in xy], [y for _, y in xy], marker=MARKS[kind], label=kind)
        plt = self._fresh("#plot-ttft-hist", "TTFT distribution (ok requests)", "ms")
        if s.ok_ttft:
            plt.hist(s.ok_ttft, bins=BINS)
        plt = self._fresh("#plot-itl-hist", "inter-token gaps (ok requests)", "ms")
        if s.gaps:
            plt.hist(s.gaps, bins=BINS)
        for plot in self.query(PlotextPlot):
            plot.refresh()

    def _fresh(self, selector: str, title: str, xlabel: str):  # type: ignore[no-untyped-def]
        plt = self.query_one(selector, PlotextPlot).plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(title)
        plt.xlabel(xlabel)
        return plt
