"""TTFT across the session's requests: bars (`SparkBars`), one cell per request (the last
`session_state.MAX_BARS`), a row of marks under it (▲ the request on screen, ! a request that
ran while the machine was NOISY), and the session's median and min–max beside it.

Drawn from `SessionState.ttft_view` only when the session changed (a request ended, a NOISY
mark moved) or the request on screen got its first chunk; between those it costs nothing.
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from llmtop.sessions.measure.stats import DRIFT_THRESHOLD_PCT
from llmtop.tui.state import fmt
from llmtop.tui.state.live import LiveRequest
from llmtop.tui.state.session_state import SessionState, TtftView
from llmtop.tui.widgets.spark_bars import SparkBars

CURRENT_MARK = "▲"
NOISY_MARK = "!"


def marks_text(view: TtftView) -> Text:
    """One cell per sparkline value: ▲ under the request on screen (yellow when NOISY), !
    under a NOISY one, a space otherwise."""
    text = Text()
    for i, noisy in enumerate(view.noisy):
        if i == view.current:
            text.append(CURRENT_MARK, "bold yellow" if noisy else "bold cyan")
        else:
            text.append(NOISY_MARK if noisy else " ", "bold yellow")
    return text


def summary_text(view: TtftView) -> Text:
    """"median 17.5 ms · 17.0–18.0 · n 3 ok · #3 ×1.03": the session's TTFT median, min–max
    (ms) over its ok requests, how many (and "(+2)" for the bars left out: a cold start, a
    cache hit, a cancel), and the request on screen against the median — red when slower
    by more than the bench's drift threshold (`stats.DRIFT_THRESHOLD_PCT`, 5 %), green when
    faster."""
    if not view.n:
        if view.values:
            return Text(f"no ok request yet ({len(view.values)} not counted)", style="dim")
        return Text("no request yet", style="dim")
    others = f" (+{view.others})" if view.others else ""  # short: it fits at 120
    text = Text.assemble(
        "median ",
        (fmt.ms(view.median_ms), "bold"),
        (f" · {view.min_ms:.1f}–{view.max_ms:.1f} · n {view.n} ok{others}", "dim"),
    )
    versus = view.current_vs_median
    if view.current is not None and versus is not None:
        text.append(f" · #{view.numbers[view.current]} ")
        text.append(f"×{versus:.2f}", _versus_style(versus))
    return text


def _versus_style(versus: float) -> str:
    band = DRIFT_THRESHOLD_PCT / 100.0
    if versus > 1.0 + band:
        return "bold red"
    return "bold green" if versus < 1.0 - band else "bold"


class SessionStrip(Vertical):
    """The session's TTFT sparkline, its marks and summary (see the module docstring)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._key: object = None
        self.view = TtftView()

    async def mount_rows(self) -> None:
        """Mount the two lines: the label, the TTFT-per-request bars (hidden until a request
        ends) and the summary, then the marks. Just after the first frame
        (`later.LaterParts`: before the first connection, so before any request); the strip
        is two lines tall before them (CSS)."""
        spark = SparkBars(id="session-ttft")
        spark.display = False
        row = Horizontal(Static("TTFT/req ms", id="session-label"), spark,
                         Static(summary_text(self.view), id="session-summary"), id="session-row")
        await self.mount_all([row, Static("", id="session-marks")])

    def sync(self, session: SessionState, shown: LiveRequest | None) -> bool:
        """Redraw when the session or the request on screen's TTFT/mark changed; True then."""
        key = (
            session.version,
            id(shown),
            shown is not None and shown.ttft_ms is not None,
            shown is not None and shown.noisy,
        )
        if key == self._key:
            return False
        self._key = key
        self.show(session.ttft_view(shown))
        return True

    def show(self, view: TtftView) -> None:
        """Draw `view` (values are finite: `SessionState.ttft_view` keeps only those)."""
        if view == self.view:
            return
        old, self.view = self.view, view
        spark = self.query_one("#session-ttft", SparkBars)
        if len(view.values) != len(old.values):
            spark.styles.width = len(view.values)  # one cell per request
            spark.display = bool(view.values)
        spark.data = view.values
        # one line each (CSS): repainted in place, no layout of the screen
        self.query_one("#session-summary", Static).update(summary_text(view), layout=False)
        self.query_one("#session-marks", Static).update(marks_text(view), layout=False)
