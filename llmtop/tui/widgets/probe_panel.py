"""The right-hand panel: what else the machine is doing, from the latest `ProbeSample`."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll

from llmtop.probes.sampler import ProbeSample
from llmtop.tui.widgets.apps_view import AppsView
from llmtop.tui.widgets.system_view import SystemView
from llmtop.tui.widgets.verdict_badge import VerdictBadge


class ProbePanel(VerticalScroll):
    """Verdict badge, system view and apps view; `show` renders one sample into all three."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = "machine"
        self.sample: ProbeSample | None = None

    def compose(self) -> ComposeResult:
        yield VerdictBadge("probes starting…", id="verdict")
        yield SystemView("", id="system")
        yield AppsView("", id="apps")

    def show(self, sample: ProbeSample) -> None:
        """Render one sample (called by the app's capped render timer)."""
        self.sample = sample
        self.query_one(VerdictBadge).verdict = sample.verdict
        self.query_one(SystemView).show(sample.system, sample.gpu)
        self.query_one(AppsView).show(sample.processes, sample.cost_ms)
