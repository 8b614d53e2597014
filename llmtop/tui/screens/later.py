"""The main screen's parts that its first frame does without, mounted just after it.

Every widget in the tree is styled and laid out before Textual writes the first frame. The
engine panel (F4) and the history (F2) are hidden until their key, the machine badge shows
only on narrow screens, the footer only names keys, and the metrics' and the session's rows
say nothing before the first request ("TTFT —"): 31 of the 42 widgets (docs/performance.md,
"The TUI's first frame"). `LaterParts` mounts them once the first frame is out (their
modules are imported then too), in the places the stylesheet keeps for them (the strips'
lines, the footer's row: nothing moves when they come), and runs the keys that asked for them
meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.containers import Vertical

if TYPE_CHECKING:
    from textual.screen import Screen

    from llmtop.engines.live_state import EngineState
    from llmtop.probes.sampler import ProbeSample
    from llmtop.tui.widgets.engine_panel import EnginePanel
    from llmtop.tui.widgets.machine_badge import MachineBadge
    from llmtop.tui.widgets.request_history import RequestHistory


class LaterParts:
    """The deferred parts of `screen` (module docstring). `whole`: all mounted. The
    accessors raise textual's NoMatches before then; `when_whole` waits for it."""

    def __init__(self, screen: Screen[None], on_engine_state: Callable[[EngineState], None]
                 ) -> None:
        self.screen = screen
        self._on_engine_state = on_engine_state
        self.whole = False
        self._waiting: list[Callable[[], None]] = []  # keys that came before `mount`

    async def mount(self, latest: ProbeSample | None) -> None:
        """Mount the strips' rows into the lines they keep, the engine panel and the badge
        under the session strip, the history (hidden) above the prompt and the footer into the
        row kept for it (a footer added below would shorten the panels above by a line after
        they were laid out: the probe panel then kept a scrollbar's column); show `latest` on
        the badge; run the waiting keys."""
        from textual.widgets import Footer

        from llmtop.tui.widgets.engine_panel import EnginePanel
        from llmtop.tui.widgets.machine_badge import MachineBadge
        from llmtop.tui.widgets.metrics_strip import MetricsStrip
        from llmtop.tui.widgets.request_history import RequestHistory
        from llmtop.tui.widgets.session_strip import SessionStrip

        await self.screen.query_one(MetricsStrip).mount_rows()
        await self.screen.query_one(SessionStrip).mount_rows()
        history = RequestHistory(id="history")  # the whole width: every figure and the prompt
        history.display = False  # F2 shows it
        left = self.screen.query_one("#left", Vertical)
        await left.mount(EnginePanel(self._on_engine_state, id="engine"),  # F4
                         MachineBadge(id="machine-badge"))  # narrow screens: the panel in a line
        await self.screen.mount(history, before="#prompt")
        await self.screen.query_one("#footer-slot", Vertical).mount(Footer(compact=True))
        self.screen.refresh_bindings()  # a footer lists the keys once told of them
        if latest is not None:
            self.badge.show(latest)
        self.whole = True
        for call in self._waiting:
            call()
        self._waiting.clear()

    def when_whole(self, call: Callable[[], None]) -> None:
        """Run `call` now if everything is mounted, else once it is."""
        if self.whole:
            call()
        else:
            self._waiting.append(call)

    @property
    def history(self) -> RequestHistory:
        """The request history (F2)."""
        from llmtop.tui.widgets.request_history import RequestHistory

        return self.screen.query_one(RequestHistory)

    @property
    def engine_panel(self) -> EnginePanel:
        """The engine's own figures (F4)."""
        from llmtop.tui.widgets.engine_panel import EnginePanel

        return self.screen.query_one(EnginePanel)

    @property
    def badge(self) -> MachineBadge:
        """The narrow screens' one-line machine summary."""
        from llmtop.tui.widgets.machine_badge import MachineBadge

        return self.screen.query_one(MachineBadge)
