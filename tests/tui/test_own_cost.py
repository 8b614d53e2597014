"""llmtop names itself when it costs more than its budget, as it would any noisy program; and
it spends nothing on drawing while idle."""

from pathlib import Path
from typing import Any

from llmtop.probes.processes import ProcessSample
from llmtop.probes.verdict import Verdict
from llmtop.tui.app import make_app
from llmtop.tui.messages import ProbeSampled
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.apps_view import (
    ENGINE_STARTING,
    ENGINE_UNKNOWN,
    SELF_BUDGET_PERCENT,
    apps_text,
)
from llmtop.tui.widgets.probe_panel import STARTED_NS, STARTUP_GRACE_NS, ProbePanel

from .fakes import (
    browser_busy,
    busy_apps,
    fake_connection,
    machine_sample,
    type_text,
    wait_for,
)


def sample(self_cpu: float | None) -> ProcessSample:
    return ProcessSample(
        apps=(), self_cpu_percent=self_cpu, engine_cpu_percent=None, warming_up=False
    )


def test_within_budget_is_plain() -> None:
    text = apps_text(sample(SELF_BUDGET_PERCENT)).plain  # at the budget: not over it
    assert "llmtop itself" in text and "budget" not in text


def test_over_budget_says_so() -> None:
    text = apps_text(sample(SELF_BUDGET_PERCENT + 7.0)).plain
    assert "⚠ over its 5 % budget" in text


def test_unknown_own_cpu_is_not_over_budget() -> None:
    assert "budget" not in apps_text(sample(None)).plain


async def test_idle_app_does_not_tick_and_a_sample_wakes_it(tmp_path: Path) -> None:
    """Idle with everything drawn, the render timer is paused: no tick at all (each would cost
    CPU for nothing); a probe sample resumes it, is drawn, and the timer pauses again."""
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready and app.main_screen.render_paused, what="idle")
        ticks: list[int] = []
        render = app.main_screen._render_widgets

        def counting() -> None:
            ticks.append(1)
            render()

        app.main_screen._render_widgets = counting  # type: ignore[method-assign]
        await pilot.pause(0.5)  # 5 ticks at RENDER_HZ if the timer ran
        assert ticks == []
        sample = machine_sample(1, 40.0, busy_apps(), Verdict.of([browser_busy()]), 3.2)
        app.post_message(ProbeSampled(sample))
        panel = app.query_one(ProbePanel)
        await wait_for(pilot, lambda: panel.sample is sample, what="the sample drawn")
        woken = len(ticks)
        assert woken >= 1
        assert app.main_screen.render_paused  # again, once the sample was drawn
        await pilot.pause(0.5)
        assert len(ticks) == woken


class IntervalLog:
    """Stands in for the sampler: records the intervals the app asks for."""

    def __init__(self) -> None:
        self.intervals: list[float] = []

    def set_interval(self, interval_s: float) -> None:
        self.intervals.append(interval_s)

    def stop(self) -> None:
        """The app stops its sampler when it closes."""


async def test_probes_every_2_s_idle_and_every_second_during_a_request(tmp_path: Path) -> None:
    """(An agent's sampler, as this stand-in, gets no end-of-request sample: see test_noise.)"""
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    assert settings.probe_interval_s == 2.0
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40)) as pilot:
        log = IntervalLog()
        app.link.sampler = log  # type: ignore[assignment]
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        app.main_screen.send("hello")
        await wait_for(pilot, lambda: len(app.main_screen.session.requests) == 1,
                       what="the request")
        assert log.intervals == [1.0, 2.0]  # from its start, back to idle at its end


async def test_a_request_that_fits_lays_out_only_the_session_row(tmp_path: Path) -> None:
    """A layout re-arranges the whole screen (~12 ms of CPU on 2 cores). Typing a prompt and
    streaming an answer that fits in the pane asks for none; the only one left is the session
    row's, whose TTFT sparkline grows a cell per request."""
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        await type_text(pilot, "hello")
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.main_screen.session.requests) == 1, what="request 1")
        await wait_for(pilot, lambda: app.main_screen.render_paused, what="request 1 drawn")
        screen = app.screen
        laid_out: list[str] = []
        refresh_layout = screen._refresh_layout

        def counting(*args: Any, **kwargs: Any) -> None:
            laid_out.extend(str(w.id) for w in screen._layout_widgets)
            refresh_layout(*args, **kwargs)

        screen._refresh_layout = counting  # type: ignore[method-assign]
        await type_text(pilot, "hello")
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.main_screen.session.requests) == 2, what="request 2")
        await wait_for(pilot, lambda: app.main_screen.render_paused, what="request 2 drawn")
        await pilot.pause()  # the messages already posted (the session row's layout) handled
        assert set(laid_out) == {"session-row"}, laid_out  # was also the prompt (each key),
        # the metrics rows and the token pane (new text, trimmed text): 8 layouts in all


async def test_idle_reuses_the_engine_pids_a_request_asks_each_sample(tmp_path: Path) -> None:
    """Looking up the engine's pids costs ~20 ms of CPU; idle, the last answer is reused (for
    up to IDLE_PIDS_REUSE_NS); while a request streams every sample asks the connection."""
    asked: list[int] = []

    def find() -> set[int]:
        asked.append(1)
        return {4242}

    conn = fake_connection()
    conn.find_engine_pids = find
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=conn)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready and app.main_screen.render_paused, what="idle")
        assert app.link._engine_pids() == app.link._engine_pids() == {4242}  # as the sampler asks
        assert len(asked) == 1
        app.main_screen.send("slow")  # its first chunk, then no end: streaming until stopped
        main = app.main_screen
        await wait_for(pilot, lambda: main.streaming and not main.render_paused, what="stream")
        app.link._engine_pids()
        app.link._engine_pids()
        assert len(asked) == 3
        await pilot.press("escape")


def engine_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("engine:"))


async def test_no_budget_warning_during_llmtop_start_up(tmp_path: Path) -> None:
    """llmtop's first samples measure its own start-up (the newcomer's first frame: "llmtop
    itself: 22.8 % ⚠ over its 5 % budget"): a sample taken within STARTUP_GRACE_NS of the TUI's
    start shows the figure without the mark; one taken after it marks it."""
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40)) as pilot:
        panel = app.query_one(ProbePanel)
        for after_ns, marked in ((10**9, False), (STARTUP_GRACE_NS + 10**9, True)):
            s = machine_sample(STARTED_NS + after_ns, 40.0, busy_apps(), Verdict.of([]), 22.8)
            app.post_message(ProbeSampled(s))
            await wait_for(pilot, lambda s=s: panel.sample is s, what="the sample drawn")
            text = panel.texts["apps"].plain
            assert "llmtop itself:          22.8 %" in text
            assert ("⚠ over its 5 % budget" in text) is marked


def test_engine_line_while_the_engine_starts() -> None:
    """No engine CPU in the sample: "starting…" while connecting, "n/a (not identified)" once
    connected (the engine's process was not found)."""
    procs = sample(1.0)
    assert engine_line(apps_text(procs, engine_unknown=ENGINE_STARTING).plain) == (
        "engine:              starting…"
    )
    assert engine_line(apps_text(procs).plain) == "engine:            n/a (not identified)"


async def test_the_panel_says_no_engine_when_none_answered(tmp_path: Path) -> None:
    """Nothing listens at port 9: connecting fails, and the engine line no longer says
    "starting…" but "n/a (no engine)"; a connection made says the ordinary wording."""
    settings = TuiSettings(
        engine="ollama", host="http://127.0.0.1:9", log_path=str(tmp_path / "s.jsonl"), probes=False
    )
    app = make_app(settings)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.connect_failure is not None, 30.0, "the failure")
        assert app.query_one(ProbePanel).engine_unknown == "n/a (no engine)"
    app = make_app(
        TuiSettings(log_path=str(tmp_path / "t.jsonl"), probes=False), connection=fake_connection()
    )
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        assert app.query_one(ProbePanel).engine_unknown == ENGINE_UNKNOWN


def test_while_connecting_llmtops_own_children_are_the_engine(tmp_path: Path) -> None:
    # new-user pass N20: the embedded engine llmtop was starting read as "python -m llmtop
    # started since the last sample", background CPU, and turned the first frames NOISY
    import subprocess
    import sys

    from llmtop.tui.app import make_app
    from llmtop.tui.state.settings import TuiSettings

    app = make_app(TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False))
    assert app.link.conn is None  # not connected: nothing has run yet
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.pid in app.link._engine_pids()
    finally:
        child.kill()
        child.wait()
