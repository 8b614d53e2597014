"""Pilot tests of the session on the main screen: three generated requests on the fake engine's
virtual clock, the second one overlapping a NOISY probe sample, then a fourth that hangs after
its first chunk.

Expected numbers, from fakes.py's generated timeline (num_predict 8, gap × (1 + 0.5 j)):
TTFT = load 2 + 0.5 ms × (19 + words) + overhead 5 → "one" 17.0, "two words" 17.5,
"now three words" 18.0, "four words in it" 18.5 ms. Gaps 10, 15, 20 ms; E2E = TTFT + 7 gaps
+ 1 ms = 88.0, 123.5, 159.0 ms; TPOT = (E2E − TTFT) / 7 = 71/7, 106/7, 141/7 ms; client decode
= 1000 / TPOT; server decode = 8 tokens / (8 × gap) = 100, 66.7, 50 tok/s.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Input

from llmtop.tui.app import LlmtopApp, make_app
from llmtop.tui.messages import ProbeSampled
from llmtop.tui.state.session_state import compare
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.request_history import RequestHistory
from llmtop.tui.widgets.spark_bars import SparkBars
from llmtop.tui.widgets.token_pane import TokenPane

from .fakes import (
    BROWSER_BUSY,
    MS,
    FakeEngine,
    Timing,
    fake_connection,
    probe_sample,
    shown,
    type_text,
    wait_for,
)

PROMPTS = ("one", "two words", "now three words")
HANGING = "four words in it"


class TickingClock(datetime):
    """`datetime.now()` for the requests' wall_start: 03:04:05, then one second later each."""

    calls = 0

    @classmethod
    def now(cls, tz: Any = None) -> TickingClock:  # type: ignore[override]
        cls.calls += 1
        return cls(2026, 1, 2, 3, 4, 4 + cls.calls)


def session_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LlmtopApp:
    """The app on a FakeEngine whose clock stamps the sends; the 2nd generated request gets a
    NOISY sample 1 ms after its send; the 4th hangs after its first chunk."""
    app: LlmtopApp | None = None

    def on_start(j: int, send_ns: int) -> None:
        if j == 1 and app is not None:
            app.post_message(ProbeSampled(probe_sample(send_ns + MS, noisy=BROWSER_BUSY)))

    engine = FakeEngine(timing=Timing(growth=0.5), on_start=on_start, hang_at=3)
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", engine.clock)
    TickingClock.calls = 0
    monkeypatch.setattr("llmtop.sessions.measure.request.datetime", TickingClock)
    settings = TuiSettings(
        engine="fake", options={"num_predict": 8}, log_path=str(tmp_path / "s.jsonl"), probes=False
    )
    app = make_app(settings, connection=fake_connection(engine))
    return app


async def send_and_draw(pilot: Pilot[Any], app: LlmtopApp, prompt: str, n: int) -> None:
    """Type `prompt`, send it, wait until request `n` ended, joined the session and is drawn."""
    await wait_for(pilot, lambda: app.link.ready, what="connection")
    app.query_one("#prompt", Input).focus()
    await type_text(pilot, prompt)
    await pilot.press("enter")
    strip = app.query_one("#session-ttft", SparkBars)
    await wait_for(
        pilot,
        lambda: len(app.main_screen.session.requests) == n and len(strip.data or ()) == n,
        what=f"request {n} in the session and drawn",
    )


async def run_three(pilot: Pilot[Any], app: LlmtopApp) -> None:
    """The three requests; the NOISY mark of the 2nd is in before the 3rd is sent."""
    for n, prompt in enumerate(PROMPTS, 1):
        await send_and_draw(pilot, app, prompt, n)
        if n == 2:
            await wait_for(pilot, lambda: app.main_screen.session.requests[1].noisy is not None,
                           what="NOISY")


def spark(app: LlmtopApp, wid: str) -> tuple[float, ...]:
    return tuple(app.query_one(f"#{wid}", SparkBars).data or ())


async def test_three_requests_sparkline_history_and_compare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = session_app(tmp_path, monkeypatch)
    async with app.run_test(size=(140, 44)) as pilot:
        await run_three(pilot, app)
        assert spark(app, "session-ttft") == (17.0, 17.5, 18.0)
        assert shown(app, "#session-marks") == " !▲"
        # median 17.5, min–max 17.0–18.0; the 3rd against the median: 18 / 17.5 = 1.03
        assert shown(app, "#session-summary") == "median 17.5 ms · 17.0–18.0 · n 3 ok · #3 ×1.03"
        assert spark(app, "itl") == (20.0,) * 7
        assert shown(app, "#itl-label") == (
            "token gaps ms  TPOT 20.14 ms/tok · 49.6 tok/s · prev 15.14 ms/tok"
        )

        history = app.query_one(RequestHistory)
        assert not history.display
        await pilot.press("f2")
        table: DataTable[Any] = history.table
        assert history.display and table.has_focus and table.cursor_row == 2
        rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]
        # server decode: 8 tokens over the 7 gaps between them, 8 / (7 gap): 114.3, 76.2, 57.1
        assert rows == [
            ["1", "03:04:05", "17.0", "10.14", "98.6/114.3", "8", "ok", "", "one"],
            ["2", "03:04:06", "17.5", "15.14", "66.0/76.2", "8", "ok", "⚠", "two words"],
            ["3", "03:04:07", "18.0", "20.14", "49.6/57.1", "8", "ok", "", "now three words"],
        ]

        await pilot.press("c")  # the 3rd against the 2nd
        ratios = compare(history.rows[2], history.rows[1])
        assert ratios == pytest.approx({
            "TTFT": 18.0 / 17.5,
            "TPOT": 141 / 106,
            "decode": 106 / 141,
            "srv decode": 50.0 / (200.0 / 3),
            "tokens": 1.0,
            "E2E": 159.0 / 123.5,
        })
        assert shown(app, "#history-compare") == (
            "#3 ÷ #2  TTFT ×1.03  TPOT ×1.33  decode ×0.75  srv decode ×0.75  tokens ×1.00"
            "  E2E ×1.29"
        )

        await pilot.press("up", "up", "enter")  # the 1st request back on screen
        first = app.main_screen.session.requests[0]
        await wait_for(pilot, lambda: app.main_screen.shown is first and not first.numbers_dirty)
        await wait_for(pilot, lambda: shown(app, "#session-marks") == "▲! ", what="marks")
        assert app.query_one(TokenPane).text.plain.startswith("› one")
        assert shown(app, "#ttft") == "TTFT 17.0 ms"
        assert spark(app, "itl") == (10.0,) * 7
        assert shown(app, "#itl-label") == "token gaps ms  TPOT 10.14 ms/tok · 98.6 tok/s"

        await pilot.press("f2")  # hidden again, back in the prompt box
        assert not history.display and app.query_one("#prompt", Input).has_focus


async def test_ttft_sparkline_grows_at_the_first_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 4th request hangs after its first chunk: its TTFT is in the sparkline, marked as
    the one on screen, while it streams; its gaps are chunk gaps with no rate yet. A NOISY
    sample from the 3rd request's span that arrives meanwhile still marks the 3rd."""
    app = session_app(tmp_path, monkeypatch)
    async with app.run_test(size=(140, 44)) as pilot:
        await run_three(pilot, app)
        app.query_one("#prompt", Input).focus()
        await type_text(pilot, HANGING)
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(spark(app, "session-ttft")) == 4, what="4th TTFT")
        assert app.main_screen.streaming and len(app.main_screen.session.requests) == 3
        assert spark(app, "session-ttft") == (17.0, 17.5, 18.0, 18.5)
        assert shown(app, "#session-marks") == " ! ▲"
        assert shown(app, "#itl-label") == "chunk gaps ms  TPOT n/a · n/a · prev 20.14 ms/tok"
        # a NOISY sample taken during the 3rd request, received only now: the 3rd is marked
        third_sent, _ = app.main_screen.session.requests[2].span_ns
        app.post_message(ProbeSampled(probe_sample(third_sent + 50 * MS, noisy=BROWSER_BUSY)))
        await wait_for(pilot, lambda: shown(app, "#session-marks") == " !!▲", what="late mark")
        assert app.main_screen.live is not None and app.main_screen.live.noisy is None
        await pilot.press("escape")  # cancelled: it joins the history with its TTFT
        await wait_for(pilot, lambda: len(app.main_screen.session.requests) == 4, what="cancelled")
        row = app.main_screen.session.row(4)
        assert row.status == "cancelled" and row.ttft_ms == 18.5


async def test_session_views_redraw_only_when_they_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 chunks back to back: the TTFT sparkline is computed at most when the request starts,
    gets its first chunk and ends (≤ 3 times; fewer when those fall in one frame), redrawn at
    most twice (its first bar, then its end); once the end is drawn the render timer is
    paused, so no idle tick even checks it."""
    from llmtop.tui.widgets.session_strip import SessionStrip

    from .fakes import SENT_NS, ev

    many = [ev(10.0 + i, f"t{i} ") for i in range(300)] + [ev(400.0, done=True)]
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)
    settings = TuiSettings(engine="fake", log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection(FakeEngine({"many": many})))
    async with app.run_test(size=(140, 44)) as pilot:
        # the empty session drawn
        await wait_for(pilot, lambda: app.link.ready and app.main_screen.render_paused)
        strip = app.query_one(SessionStrip)
        syncs: list[bool] = []
        draws = 0
        sync, show = strip.sync, strip.show

        def counting_sync(*args: Any) -> bool:
            syncs.append(sync(*args))
            return syncs[-1]

        def counting_show(view: Any) -> None:
            nonlocal draws
            draws += view != strip.view
            show(view)

        strip.sync = counting_sync  # type: ignore[method-assign]
        strip.show = counting_show  # type: ignore[method-assign]
        await send_and_draw(pilot, app, "many", 1)
        ended = len(syncs)
        await pilot.pause(1.2)  # idle: the render timer is paused, nothing is even checked
        assert len(syncs) == ended
        assert 1 <= syncs.count(True) <= 3 and 1 <= draws <= 2, (syncs, draws)
        assert spark(app, "session-ttft") == (10.0,)
