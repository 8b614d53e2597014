"""The bench screen (Ctrl+B): `llmtop bench`'s protocol, through the same `BenchRunner`, on the
app's connection, with the progress, the streaming tokens, the per-request series, the verdict
and the full report.

The runner runs in an exclusive worker of this screen; its callbacks only update a
`BenchState`, and one timer (RENDER_HZ) draws what is dirty, as on the main screen. The
app's probe sampler keeps running: this screen shows its latest sample in its own probe panel
and marks the requests a NOISY sample fell in (`llmtop.tui.state.noise`). The runner writes its
own bench log (shown); the app's session log gets a `bench` record pointing at it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import PurePath
from typing import ClassVar, Protocol

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, ProgressBar, Static
from textual.worker import Worker

from llmtop.engines.connection import Connection
from llmtop.probes.sampler import ProbeSample
from llmtop.sessions.measure.config import BenchConfig
from llmtop.sessions.records.log import LogError
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from llmtop.sessions.runners.bench import BenchRunner
from llmtop.sessions.runners.calibration import CalibrationError
from llmtop.tui.screens.report import ReportScreen
from llmtop.tui.state.bench_config import (
    BenchFormError,
    bench_log_path,
    config_from_form,
    form_defaults,
)
from llmtop.tui.state.bench_state import BenchState
from llmtop.tui.state.noise import NoiseTracker
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.bench_form import BenchForm
from llmtop.tui.widgets.bench_series import BenchSeries
from llmtop.tui.widgets.bench_summary import BenchSummary, verdict
from llmtop.tui.widgets.header_line import LOG_ROOM, fit_parts, identity, identity_parts
from llmtop.tui.widgets.machine_badge import badge_text
from llmtop.tui.widgets.path_label import PathLabel
from llmtop.tui.widgets.probe_panel import ProbePanel
from llmtop.tui.widgets.token_pane import TokenPane

RENDER_HZ = 10  # the bench screen's redraws per second at most
PANEL_MIN_WIDTH = 130  # narrower terminals: the probe panel gives way to a QUIET/NOISY badge
CANCEL_WAIT_S = 10.0  # how long Esc waits for the runner to record the interruption
HINT = (
    "Set the run and press Start (or Enter). Each request gets a fresh random prompt "
    "calibrated to the size in tokens; warm-ups are kept apart; drift compares the first 5 "
    "and last 5 ok requests."
)


@dataclass
class LastBench:
    """The session's last bench, kept by the app when its screen closes, so Ctrl+B opens on
    it again (its verdict, series, log and report; the form as it was started) instead of an
    empty form (without it, Esc after a bench lost its result)."""

    state: BenchState
    log_path: str
    form: dict[str, str]


class BenchHost(Protocol):
    """What the screen needs from the app (`LlmtopApp` provides it); last_bench: what the
    screen leaves for the next one."""

    settings: TuiSettings
    noise: NoiseTracker
    last_bench: LastBench | None

    @property
    def latest_probe(self) -> ProbeSample | None: ...

    def bench_started(self, log_path: str, config: BenchConfig) -> None: ...

    def bench_ended(self, log_path: str, how: str) -> None: ...


CSS_FILES: list[str | PurePath] = ["../forms.tcss", "../bench.tcss"]  # read when it opens


class BenchScreen(Screen[None]):
    """Form, progress, tokens, series and verdict on the left; the probe panel on the right."""

    CSS_PATH = CSS_FILES

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Cancel bench / back", priority=True),
        Binding("r", "report", "Report"),
    ]

    def __init__(self, host: BenchHost, conn: Connection, session_log: str | None) -> None:
        super().__init__()
        self.host = host
        self.conn = conn
        self.session_log = session_log
        self.state: BenchState | None = None
        self.log_path: str | None = None
        self.worker: Worker[None] | None = None
        self._probe_shown: ProbeSample | None = None
        self._form: dict[str, str] = form_defaults(host.settings)
        last = host.last_bench
        if last is not None:  # reopened: the last run, drawn again by the render timer
            self.state, self.log_path, self._form = last.state, last.log_path, dict(last.form)
            last.state.progress_dirty = last.state.series_dirty = True
            last.state.summary_dirty = True

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        with Horizontal(id="bench-header"):
            yield Static(
                Text(f"llmtop bench · {identity(self.conn)}", style="bold"), id="bench-title"
            )
            yield PathLabel("bench log ", id="bench-log")
        with Horizontal(id="bench-main"):
            with Vertical(id="bench-left"):
                yield BenchForm(self._form, id="bench-form")
                with Horizontal(id="bench-phase-row"):
                    yield Static("not started", id="bench-phase")
                    yield ProgressBar(total=1, show_eta=False, id="bench-progress")
                    yield Static("", id="bench-badge")
                yield Static("", id="bench-detail")
                yield TokenPane(id="bench-tokens")
                yield BenchSeries(id="bench-series")
                yield BenchSummary(Text(HINT, style="dim"), id="bench-summary")
            yield ProbePanel(id="bench-probes")
        yield Footer()

    def on_resize(self) -> None:
        wide = self.size.width >= PANEL_MIN_WIDTH
        self.query_one(ProbePanel).display = wide
        self.query_one("#bench-badge", Static).display = not wide
        # whole parts of the identity, as the main header (not cut mid-word: "llama.cpp re")
        parts = [(0, "llmtop bench"), *identity_parts(self.conn)]
        self.query_one("#bench-title", Static).update(
            Text(fit_parts(parts, self.size.width - 2 - LOG_ROOM - len("bench ")), style="bold"))

    def on_mount(self) -> None:
        if self.log_path is not None and self.worker is None:  # the last bench, reopened
            self.query_one("#bench-log", PathLabel).set_path(self.log_path)
            self.query_one(TokenPane).show_message(
                "the session's last bench, as it ended (Esc kept it); Start measures again")
        else:
            self.query_one(TokenPane).show_message(
                "tokens of the request being measured appear here")
        self.query_one("#bench-requests", Input).focus()
        self.set_interval(1 / RENDER_HZ, self._render_dirty, name="bench-render")
        self._render_probe()

    # ------------------------------------------------------------------ running

    def on_bench_form_start_requested(self, message: BenchForm.StartRequested) -> None:
        if self.running:
            return
        v = message.values
        try:
            config = config_from_form(
                self.host.settings, v["requests"], v["warmup"], v["prompt-tokens"],
                v["max-tokens"], v.get("cache-pairs", "0"), v.get("turns", "0"),
            )
        except BenchFormError as exc:
            self.query_one(BenchSummary).show_text(Text(f"✗ {exc}", style="bold red"))
            return
        self._form = dict(v)
        self.worker = self._run_bench(config)

    @property
    def running(self) -> bool:
        """True while a bench worker runs."""
        return self.worker is not None and not self.worker.is_finished

    @work(exclusive=True, group="bench", exit_on_error=False)
    async def _run_bench(self, config: BenchConfig) -> None:
        """Run one bench; a cancellation is recorded by the runner (an `interrupted` record)."""
        state = self.state = BenchState(config)
        self.query_one(BenchForm).set_running(True)
        for old in self.query("#bench-report"):
            await old.remove()
        self.query_one(BenchSeries).set_rows([])
        self.query_one(BenchSummary).show_text(Text("running…", style="dim"))
        self.query_one(TokenPane).focus()
        how = "failed"
        try:
            runner = await self._make_runner(config, state)
            self.log_path = runner.log_path
            self.query_one("#bench-log", PathLabel).set_path(runner.log_path)
            self.host.bench_started(runner.log_path, config)
            outcome = await runner.run()
            report = await asyncio.to_thread(
                lambda: render(build(outcome.log, outcome.analysis), "md"))
            state.finish(outcome, report)
            how = verdict(outcome.analysis)
        except asyncio.CancelledError:
            state.cancel()
            how = "cancelled"
            raise
        except (CalibrationError, LogError) as exc:
            state.fail(f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 — show it; the app stays usable
            state.fail(f"the bench failed unexpectedly: {type(exc).__name__}: {exc}")
        finally:
            if self.log_path is not None:
                self.host.bench_ended(self.log_path, how)
                self.host.last_bench = LastBench(state, self.log_path, self._form)
            with contextlib.suppress(NoMatches):
                self.query_one(BenchForm).set_running(False)

    async def _make_runner(self, config: BenchConfig, state: BenchState) -> BenchRunner:
        """Build the runner off the event loop (it reads the machine's environment and opens
        the log); a cancellation meanwhile still closes the log it opened."""
        path = bench_log_path(self.session_log) if self.session_log else None

        def make() -> BenchRunner:
            return BenchRunner(
                self.conn,
                config,
                str(path) if path else None,
                state.on_progress,
                state.on_event,
                agent=self.host.settings.agent,
                token_timeout_s=self.host.settings.token_timeout_s,
            )

        task = asyncio.ensure_future(asyncio.to_thread(make))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            runner = await task
            runner.recorder.close()
            raise

    async def cancel_bench(self) -> None:
        """Cancel a running bench and wait until the runner has recorded it."""
        worker = self.worker
        if worker is None or worker.is_finished:
            return
        worker.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(worker.wait(), CANCEL_WAIT_S)

    # ------------------------------------------------------------------ keys

    async def action_leave(self) -> None:
        """Esc: cancel a running bench (recorded as interrupted), then back to the main screen."""
        if self.running:
            await self.cancel_bench()
            self.notify(f"bench cancelled; the partial run is in {self.log_path}", timeout=8)
        self.app.pop_screen()

    def action_report(self) -> None:
        """Show the full markdown report of the finished run."""
        state = self.state
        if state is None or state.report_md is None or self.log_path is None:
            self.notify("no report yet: the bench has not finished")
            return
        self.app.push_screen(ReportScreen(state.report_md, self.log_path))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "bench-report":
            self.action_report()

    # ------------------------------------------------------------------ rendering

    def _render_dirty(self) -> None:
        with contextlib.suppress(NoMatches):  # widgets gone while the screen closes
            self._render_state()
            self._render_probe()

    def _render_probe(self) -> None:
        sample = self.host.latest_probe
        if sample is not None and sample is not self._probe_shown:
            self._probe_shown = sample
            self.query_one(ProbePanel).show(sample)
            self.query_one("#bench-badge", Static).update(badge_text(sample, cpu=False))

    def _render_state(self) -> None:
        state = self.state
        if state is None:
            return
        state.mark_noise(self.host.noise)
        if state.progress_dirty:
            state.progress_dirty = False
            self.query_one("#bench-phase", Static).update(state.phase_text)
            self.query_one("#bench-detail", Static).update(Text(state.detail, style="dim"))
            self.query_one(ProgressBar).update(total=state.total, progress=state.done)
        live = state.live
        if live is not None and live.dirty:
            live.dirty = False
            self.query_one(TokenPane).show_live(live)
        if state.series_dirty:
            state.series_dirty = False
            self.query_one(BenchSeries).set_rows(state.rows)
        if state.summary_dirty and state.finished:
            state.summary_dirty = False
            self._render_summary(state)

    def _render_summary(self, state: BenchState) -> None:
        summary = self.query_one(BenchSummary)
        if state.outcome is not None:
            summary.show_outcome(state.outcome.analysis, state.rows, state.outcome.log_path)
            self._offer_report()
        elif state.error is not None:
            summary.show_text(Text(f"✗ {state.error}\nlog {self.log_path}", style="bold red"))
        elif state.cancelled:
            summary.show_text(Text("cancelled: the log records the interruption", style="yellow"))

    def _offer_report(self) -> None:
        with contextlib.suppress(NoMatches):
            self.query_one("#bench-report", Button)
            return
        button = Button("Report (R)", id="bench-report")
        self.query_one(BenchForm).mount(button)
        button.focus()
