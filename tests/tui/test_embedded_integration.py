"""The TUI on the REAL embedded engine (llama.cpp + the bundled Gemma 3 270M), through connect()."""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import pytest

from llmtop.sessions.records.log import read_log
from llmtop.tui.app import make_app
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.probe_panel import ProbePanel
from llmtop.tui.widgets.spark_bars import SparkBars
from llmtop.tui.widgets.token_pane import TokenPane

from .fakes import shown, type_text, wait_for

pytestmark = pytest.mark.integration

PROMPT = "Why is the sky blue?"


async def test_stream_a_prompt_on_the_embedded_engine(tmp_path: Path) -> None:
    log_path = tmp_path / "session.jsonl"
    options = {"temperature": 0.0, "seed": 42, "num_predict": 16, "num_ctx": 2048}
    app = make_app(
        TuiSettings(
            engine="embedded", options=options, log_path=str(log_path), probe_interval_s=0.5
        )
    )
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(
            pilot, lambda: app.link.ready or app.link.connect_failure is not None, 120,
            "the embedded engine"
        )
        assert app.link.connect_failure is None, app.link.connect_failure
        engine_pids = set(app.link.conn.engine_pids)  # type: ignore[union-attr]
        assert engine_pids
        await type_text(pilot, PROMPT)
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: app.main_screen.live is not None
            and app.main_screen.live.result is not None, 120, "the request"
        )
        await pilot.pause(0.2)  # the render tick after done
        assert app.main_screen.live is not None and app.main_screen.live.result is not None
        result = app.main_screen.live.result
        assert result.status == "ok", result.failure
        # new-user pass N41: the engine the TUI started loaded the model before request 1
        # (a load-only request), so the first figure is a warm one, not a cold TTFT said ok
        assert result.metrics.load_ms is not None and result.metrics.load_ms < 50, (
            result.metrics.load_ms)
        assert app.main_screen.session.row(1).status == "ok"
        answer = app.query_one(TokenPane).text.plain.split(PROMPT, 1)[1].strip()
        assert answer and answer == result.content.strip()
        ttft = shown(app, "#ttft")
        assert re.fullmatch(r"TTFT \d+\.\d ms", ttft), ttft
        await wait_for(
            pilot, lambda: app.query_one(ProbePanel).sample is not None, 10, "a probe sample"
        )
        assert "llmtop itself:" in app.query_one(ProbePanel).texts["apps"].plain
        # the session's TTFT sparkline: one bar per request, the first request's TTFT
        ttfts = app.query_one("#session-ttft", SparkBars)
        await wait_for(pilot, lambda: len(ttfts.data or ()) == 1, 10, "one TTFT bar")
        assert tuple(ttfts.data or ()) == (result.metrics.ttft_ms,)
        await pilot.press("ctrl+r")  # the same prompt again: a second bar
        await wait_for(pilot, lambda: len(app.main_screen.session.requests) == 2, 120,
                       "the second request")
        await wait_for(pilot, lambda: len(ttfts.data or ()) == 2, 10, "two TTFT bars")
        second = app.main_screen.session.requests[1].result
        assert second is not None and second.status == "ok", second
        assert tuple(ttfts.data or ()) == (result.metrics.ttft_ms, second.metrics.ttft_ms)
    log = read_log(log_path)
    req, _ = log.requests
    assert req.status == "ok" and req.metrics.ttft_ms == pytest.approx(
        result.metrics.ttft_ms
    )
    assert log.probes
    for pid in engine_pids:  # the app stopped the embedded engine on exit
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
