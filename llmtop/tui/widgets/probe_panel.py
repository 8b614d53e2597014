"""The right-hand panel: what else the machine is doing, from the latest `ProbeSample`."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.containers import VerticalScroll

from llmtop.probes.remote import RemoteSample
from llmtop.probes.sampler import ProbeSample
from llmtop.tui.widgets.apps_view import AppsView
from llmtop.tui.widgets.system_view import SystemView
from llmtop.tui.widgets.verdict_badge import VerdictBadge

STALE_AFTER_S = 5.0  # no new sample for this long: the probes are stuck (interval is 0.25-2 s)
SLOW_AFTER_S = 2.0  # an agent's sample this old came late (it samples every 0.5 s)


class ProbePanel(VerticalScroll):
    """Verdict badge, system view and apps view; `show` renders one sample into all three.

    When a sample has no process data (its read gave up, see `ProcessProbe`), the last good
    process data is shown marked stale with its age. When no sample at all has arrived for
    STALE_AFTER_S, the border title says how old the shown data is.

    label: the border title, naming the machine shown ("machine"; the app names the agent's
    machine, or says this is not the engine's). A sample from an agent (`RemoteSample`) is
    aged from when it was taken (its stamp, mapped onto our clock), not from when it came.
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.label = "machine"
        self._title = self.label  # the border title as last set (plain text)
        self.border_title = self.label
        self.sample: ProbeSample | None = None
        self._good: ProbeSample | None = None  # the last sample with process data
        self._shown_ns: int | None = None

    def compose(self) -> ComposeResult:
        yield VerdictBadge("probes starting…", id="verdict")
        yield SystemView("", id="system")
        yield AppsView("", id="apps")

    def on_mount(self) -> None:
        self.set_interval(1.0, self.check_age, name="probe-age")

    def show(self, sample: ProbeSample) -> None:
        """Render one sample (called by the app's capped render timer)."""
        self.sample = sample
        self._shown_ns = time.perf_counter_ns()
        if isinstance(sample, RemoteSample):
            self._shown_ns = min(self._shown_ns, sample.t_ns)
        self._set_title(self.label)
        if sample.processes is not None:
            self._good = sample
        good = self._good
        stale = good is not None and good is not sample
        self.query_one(VerdictBadge).verdict = sample.verdict
        self.query_one(SystemView).show(sample.system, sample.gpu)
        self.query_one(AppsView).show(
            good.processes if stale and good else sample.processes,
            sample.cost_ms,
            (sample.t_ns - good.t_ns) / 1e9 if stale and good else None,
        )

    def check_age(self, now_ns: int | None = None) -> float | None:
        """Seconds since the last sample was shown, or for an agent's since it was taken
        (`now_ns`: perf_counter_ns, default now);
        past STALE_AFTER_S the border title reads "machine — stale, 7 s old"; an agent's
        sample past SLOW_AFTER_S (a slow agent) reads "… — 3 s old". None before the first."""
        if self._shown_ns is None:
            return None
        age = ((now_ns if now_ns is not None else time.perf_counter_ns()) - self._shown_ns) / 1e9
        title = self.label
        if age > STALE_AFTER_S:
            title = f"{self.label} — stale, {age:.0f} s old"
        elif age > SLOW_AFTER_S and isinstance(self.sample, RemoteSample):
            title = f"{self.label} — {age:.0f} s old"
        self._set_title(title)
        return age

    def _set_title(self, title: str) -> None:
        """Set the border title when it changed: setting it repaints the whole panel, even
        to the same text (this ran every second: a frame a second for nothing)."""
        if title != self._title:
            self._title = title
            self.border_title = title
