"""Snapshot tests (pytest-textual-snapshot): the main screen after a request, the probe panel
NOISY with a grouped browser, the main screen with a session of three requests and its history,
the bench verdict (CLEAN and CONTAMINATED) and the help screen; the main screen at 80×24,
120×40 and 240×70, after a resize, and each overlay (help, history, report) at 120×40, where
each of them scrolls (issue 32, rows 4 and 5).

Everything on screen is seeded: the scripted engine on its virtual clock (fakes.py), fixed probe
samples (no psutil), the session log at a relative path inside a temporary working directory,
and the bench log named at a fixed time. Nothing moves by itself on these screens: the inputs
do not blink, the progress bar is full, and each test waits until the app has drawn what it
received (its dirty flags are clear) before the screenshot.

A snapshot that changes: open snapshot_report.html (pytest writes it on a mismatch); when the
change is meant, `pytest tests/tui/test_snapshots.py --snapshot-update` rewrites the SVGs
under tests/tui/__snapshots__/.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from llmtop.probes.sampler import ProbeSample
from llmtop.probes.verdict import Verdict
from llmtop.tui.app import LlmtopApp
from llmtop.tui.messages import ProbeSampled
from llmtop.tui.screens.report import ReportScreen
from llmtop.tui.state import bench_config
from llmtop.tui.widgets.probe_panel import ProbePanel

from .fakes import (
    MS,
    SENT_NS,
    FakeEngine,
    Timing,
    browser_busy,
    busy_apps,
    machine_sample,
    wait_for,
)
from .test_bench_screen import build as bench_build
from .test_bench_screen import finish, open_and_start
from .test_fake_engine import build as main_build
from .test_fake_engine import drawn, send
from .test_session_view import TickingClock, run_three, session_app

MAIN_SIZE = (140, 36)
SESSION_SIZE = (140, 44)  # room for the history under the metrics
HELP_SIZE = (140, 54)  # tall enough for the whole help
BENCH_SIZE = (160, 45)  # wide enough for the bench screen's probe panel
THEME = "textual-dark"
BENCH_TIME = datetime(2026, 1, 2, 3, 4, 5)  # the bench log's name: s.bench-20260102-030405

Snap = Callable[..., bool]
RunBefore = Callable[[Pilot[Any]], Awaitable[None]]


@pytest.fixture(autouse=True)
def in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Logs at relative paths (the header shows "s.jsonl", not a temporary directory), a bench
    log name that does not depend on the wall clock, and colours whatever the terminal says
    (Textual drops every colour when NO_COLOR is set; see also `seeded`)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(
        "llmtop.tui.screens.bench.bench_log_path",
        lambda session: bench_config.bench_log_path(session, BENCH_TIME),
    )
    # samples are posted by hand, and a loaded machine can take longer than the panel's
    # staleness limit (real time) to draw a bench: "stale, 6 s old" must not enter a snapshot
    monkeypatch.setattr("llmtop.tui.widgets.probe_panel.STALE_AFTER_S", 1e9)


def main_app(monkeypatch: pytest.MonkeyPatch) -> LlmtopApp:
    """The app on the scripted engine, every request sent at SENT_NS (fakes.SCRIPTS); its log
    is "s.jsonl" in the working directory (`in_tmp_dir`)."""
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)
    app, _ = main_build(Path())
    return seeded(app)


def seeded(app: LlmtopApp) -> LlmtopApp:
    """The default theme, even where TEXTUAL_THEME names another."""
    app.theme = THEME
    return app


async def show_probe(pilot: Pilot[Any], app: LlmtopApp, sample: ProbeSample) -> None:
    """Post a probe sample as the sampler thread would; wait until the panel drew it."""
    app.post_message(ProbeSampled(sample))
    panel = app.screen.query_one(ProbePanel)
    await wait_for(pilot, lambda: panel.sample is sample, what="the probe sample drawn")


def hello_with(sample_at_ms: float, verdict: Verdict) -> RunBefore:
    """Send "hello" (TTFT 123.4 ms, E2E 200 ms), then post a sample taken `sample_at_ms` after
    the send; the screenshot is taken once the request's end and the sample are drawn."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, LlmtopApp)
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: drawn(app), what="request done and drawn")
        sample = machine_sample(SENT_NS + int(sample_at_ms * MS), 40.0, busy_apps(), verdict, 3.2)
        await show_probe(pilot, app, sample)
        await wait_for(pilot, lambda: drawn(app), what="its NOISY mark (or none) drawn")

    return run_before


def test_main_screen_after_a_request(snap_compare: Snap, monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer, its final figures (TTFT 123.4 ms, 3 tokens, server prefill 200 tok/s…),
    the ITL sparkline, and a QUIET probe panel; the header names the engine and the log."""
    app = main_app(monkeypatch)
    assert snap_compare(app, terminal_size=MAIN_SIZE, run_before=hello_with(500.0, Verdict.of([])))


def test_probe_panel_noisy_with_a_grouped_browser(
    snap_compare: Snap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NOISY sample taken 100 ms into the request: the badge with the browser finding and its
    remedy, "🌐Chromium ×14" in the apps, and the request marked "⚠ machine NOISY"."""
    app = main_app(monkeypatch)
    noisy = Verdict.of([browser_busy()])
    assert snap_compare(app, terminal_size=MAIN_SIZE, run_before=hello_with(100.0, noisy))


def test_main_screen_with_a_session(snap_compare: Snap, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three requests (test_session_view.py derives their figures), the 2nd during a NOISY
    sample: the TTFT sparkline with "!" under the 2nd and "▲" under the 3rd, the 3rd's token
    gaps with the 2nd's TPOT as reference, and the history (F2) with the 3rd compared to the 2nd
    (c); a QUIET sample last in the probe panel."""
    app = seeded(session_app(Path(), monkeypatch))

    async def run_before(pilot: Pilot[Any]) -> None:
        await run_three(pilot, app)
        live = app.main_screen.live
        await wait_for(pilot, lambda: live is not None and not live.numbers_dirty, what="drawn")
        quiet = machine_sample(SENT_NS + 10**12, 12.0, busy_apps()[1:], Verdict.of([]), 3.2)
        await show_probe(pilot, app, quiet)
        await pilot.press("f2", "c")
        compared = app.screen.query_one("#history-compare")
        await wait_for(pilot, lambda: "#3 ÷ #2" in str(compared.content), what="comparison")

    assert snap_compare(app, terminal_size=SESSION_SIZE, run_before=run_before)


def test_help_screen(snap_compare: Snap, monkeypatch: pytest.MonkeyPatch) -> None:
    """F1: the keys and what each number means."""
    app = main_app(monkeypatch)

    async def run_before(pilot: Pilot[Any]) -> None:
        await wait_for(pilot, lambda: app.link.ready, what="connection")

    assert snap_compare(app, press=["f1"], terminal_size=HELP_SIZE, run_before=run_before)


def bench_app(monkeypatch: pytest.MonkeyPatch, engine: FakeEngine) -> LlmtopApp:
    """The tiny bench of test_bench_screen.py (1 warm-up + 10 requests of 64 prompt tokens and
    8 output tokens, no preflight), its session log "s.jsonl" in the working directory."""
    return seeded(bench_build(Path(), engine, monkeypatch))


async def run_bench(pilot: Pilot[Any], noisy_rows: int) -> None:
    """Open the bench screen with a QUIET sample, run the bench, wait until its verdict, the
    series (with `noisy_rows` rows marked NOISY) and the Report button are drawn."""
    app = pilot.app
    assert isinstance(app, LlmtopApp)
    await show_probe(pilot, app, machine_sample(1, 12.0, busy_apps()[1:], Verdict.of([]), 3.2))
    screen = await open_and_start(pilot, app)
    await finish(pilot, screen)
    state = screen.state
    assert state is not None and state.error is None, state.error
    assert sum(1 for row in state.rows if row.noisy) == noisy_rows
    await wait_for(pilot, lambda: len(screen.query("#bench-report")) == 1, what="Report button")
    panel = screen.query_one(ProbePanel)
    await wait_for(pilot, lambda: panel.sample is app.latest_probe, what="the bench's panel")
    assert all(not field.disabled for field in screen.query(Input))


def test_bench_verdict_clean(snap_compare: Snap, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flat run: CLEAN, medians TTFT 39.0 ms · prefill 32.0 ms · decode 100.0 tok/s · E2E
    110.0 ms (test_bench_screen.py derives them), flat series, no NOISY request."""
    app = bench_app(monkeypatch, FakeEngine())

    async def run_before(pilot: Pilot[Any]) -> None:
        await run_bench(pilot, noisy_rows=0)

    assert snap_compare(app, terminal_size=BENCH_SIZE, run_before=run_before)


def test_bench_verdict_contaminated(snap_compare: Snap, monkeypatch: pytest.MonkeyPatch) -> None:
    """Decode slowing down 4 % per request: CONTAMINATED with the three deciding metrics that drift
    (TPOT drifts too but does not decide: docs/method.md, "The drift rule"), and the
    4th request of the run marked "!" by a NOISY sample taken while it streamed."""
    app: LlmtopApp | None = None
    noisy = Verdict.of([browser_busy()])

    def on_start(j: int, send_ns: int) -> None:
        if j == 3 and app is not None:  # measured request 3 = the 4th of the run
            sample = machine_sample(send_ns + MS, 40.0, busy_apps(), noisy, 3.2)
            app.post_message(ProbeSampled(sample))

    app = bench_app(monkeypatch, FakeEngine(timing=Timing(growth=0.04), on_start=on_start))

    async def run_before(pilot: Pilot[Any]) -> None:
        await run_bench(pilot, noisy_rows=1)

    assert snap_compare(app, terminal_size=BENCH_SIZE, run_before=run_before)


SIZES = [(80, 24), (120, 40), (240, 70)]


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_main_screen_at_every_size(
    snap_compare: Snap, monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]
) -> None:
    """After a request with a NOISY sample: at 80×24 the panel is the one-line badge and the
    response gets the width; at 120×40 the 46-column panel; at 240×70 a quarter of the width,
    with every app of the sample and the CPU history under the machine's lines."""
    app = main_app(monkeypatch)
    noisy = Verdict.of([browser_busy()])
    assert snap_compare(app, terminal_size=size, run_before=hello_with(100.0, noisy))


def test_main_screen_after_a_resize(snap_compare: Snap, monkeypatch: pytest.MonkeyPatch) -> None:
    """Drawn at 120×40, then resized to 80×24: the same screen as one started at 80×24."""
    app = main_app(monkeypatch)
    noisy = Verdict.of([browser_busy()])
    before = hello_with(100.0, noisy)

    async def run_before(pilot: Pilot[Any]) -> None:
        await before(pilot)
        await pilot.resize_terminal(80, 24)
        await wait_for(pilot, lambda: not app.query_one(ProbePanel).display, what="narrow")

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


@pytest.mark.parametrize("key", ["f1", "f2"])
def test_overlay_at_120x40(snap_compare: Snap, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """F1 (taller than the box: it scrolls) and F2 over the main screen after a request (its
    wall-clock time seeded: 03:04:05)."""
    TickingClock.calls = 0
    monkeypatch.setattr("llmtop.sessions.measure.request.datetime", TickingClock)
    app = main_app(monkeypatch)
    before = hello_with(500.0, Verdict.of([]))

    async def run_before(pilot: Pilot[Any]) -> None:
        await before(pilot)
        await pilot.press(key)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_report_overlay_at_120x40(snap_compare: Snap, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report box over the main screen, with a report longer than the box."""
    app = main_app(monkeypatch)
    report = "\n\n".join(f"paragraph {i} of the report" for i in range(40))

    async def run_before(pilot: Pilot[Any]) -> None:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        await app.push_screen(ReportScreen(report, "s.jsonl"))
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)
