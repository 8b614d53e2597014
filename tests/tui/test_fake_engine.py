"""Pilot tests on a scripted engine: exact numbers, thinking, failures, cancellation, keys."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from rich.text import Text
from textual import events
from textual.widgets import Input

from llmtop.engines.connection import Connection
from llmtop.sessions.records.log import read_log
from llmtop.tui.app import LlmtopApp, make_app
from llmtop.tui.screens.help import METRICS, HelpScreen
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.header_line import identity
from llmtop.tui.widgets.metrics_strip import result_texts
from llmtop.tui.widgets.path_label import PathLabel
from llmtop.tui.widgets.token_pane import TokenPane

from .fakes import SENT_NS, FakeEngine, ev, fake_connection, shown, type_text, wait_for


@pytest.fixture(autouse=True)
def fixed_send_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The send stamp the fake's event offsets are relative to."""
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)


def build(tmp_path: Path, conn: Connection | None = None,
          num_predict: int = 8) -> tuple[LlmtopApp, Connection]:
    conn = conn or fake_connection()
    settings = TuiSettings(engine="fake", options={"num_predict": num_predict},
                           log_path=str(tmp_path / "s.jsonl"), probes=False)
    return make_app(settings, connection=conn), conn


def done(app: LlmtopApp, n: int = 1) -> bool:
    return (
        app.link.recorder is not None
        and app.link.recorder.requests >= n
        and app.main_screen.live is not None
        and not app.main_screen.live.streaming
    )


def drawn(app: LlmtopApp, n: int = 1) -> bool:
    """`done`, and the render timer drew its end (text and numbers)."""
    live = app.main_screen.live
    return done(app, n) and live is not None and not (live.dirty or live.numbers_dirty)


async def send(pilot, app: LlmtopApp, prompt: str) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: app.link.ready, what="connection")
    app.query_one("#prompt", Input).focus()
    await type_text(pilot, prompt)
    await pilot.press("enter")


async def test_exact_numbers_header_and_log(tmp_path: Path) -> None:
    app, conn = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: drawn(app), what="request done and drawn")
        assert app.main_screen.live is not None and app.main_screen.live.result is not None
        texts = {wid: str(text) for wid, text in result_texts(app.main_screen.live.result).items()}
        assert texts["ttft"] == "TTFT 123.4 ms"
        assert texts["count"] == "tokens 3"
        # client decode = (3 − 1) / (200 − 123.4 ms) = 26.1 tok/s
        assert texts["decode"] == "decode 26.1 tok/s"
        assert texts["client"] == " ok   TPOT 38.30 ms · E2E 200.0 ms"
        # prefill 20 / 0.1 s = 200; decode 3 / 0.04 s = 75; overhead 123.4 − (10 + 100) = 13.4
        assert texts["server"] == (
            "server  prefill 200.0 tok/s · decode 75.0 tok/s · load 10.0 ms · overhead 13.4 ms"
        )
        for wid in ("ttft", "count", "decode", "client", "server"):  # what the strip shows
            assert shown(app, f"#{wid}") == texts[wid], wid
        assert "Hello world!" in app.query_one(TokenPane).text.plain
        engine = identity(conn)  # type: ignore[arg-type]
        assert engine == "fake · http://fake:1 · fake-model · Q4_K_M · 1.0M · v9.9"
        assert shown(app, "#hdr-engine") == f"llmtop · {engine}"
        assert app.query_one(PathLabel).path == str(tmp_path / "s.jsonl")
    assert conn.engine.closed  # type: ignore[attr-defined]  # the app closed the connection on exit
    log = read_log(tmp_path / "s.jsonl")
    (req,) = log.requests
    assert req.status == "ok" and req.metrics.ttft_ms == pytest.approx(123.4)
    assert log.ended_at


async def test_thinking_is_dim_italic(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "think")
        await wait_for(pilot, lambda: drawn(app), what="request done and drawn")
        text: Text = app.query_one(TokenPane).text
        start = text.plain.index("Let me think.")
        answer = text.plain.index("Answer.")

        def styles_at(i: int) -> str:
            return " ".join(str(s.style) for s in text.spans if s.start <= i < s.end)

        assert "italic" in styles_at(start) and "dim" in styles_at(start)
        assert "italic" not in styles_at(answer)


async def test_failure_message_and_remedy(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "fail")
        await wait_for(pilot, lambda: drawn(app), what="request done and drawn")
        pane = app.query_one(TokenPane).text.plain
        assert "partial" in pane and "the runner crashed" in pane and "restart the engine" in pane
        assert app.main_screen.live is not None and app.main_screen.live.result is not None
        texts = result_texts(app.main_screen.live.result)
        assert str(texts["failure"]) == "✗ the runner crashed\n→ restart the engine"
        assert str(texts["client"]).startswith(" error ")
        assert shown(app, "#failure") == str(texts["failure"])
        assert shown(app, "#client") == str(texts["client"])


async def test_new_prompt_cancels_running_one(tmp_path: Path) -> None:
    app, conn = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "slow")
        await wait_for(
            pilot, lambda: app.main_screen.live is not None and app.main_screen.live.chunks == 1,
            what="first chunk"
        )
        await send(pilot, app, "hello")
        await wait_for(
            pilot,
            lambda: done(app, 2) and app.main_screen.live is not None
            and app.main_screen.live.prompt == "hello",
            what="second request",
        )
        assert conn.engine.prompts == ["slow", "hello"]
    reqs = read_log(tmp_path / "s.jsonl").requests
    assert [(r.id, r.prompt, r.status) for r in reqs] == [
        (1, "slow", "cancelled"),
        (2, "hello", "ok"),
    ]
    assert reqs[0].content == "first chunk"


async def test_escape_cancels_and_quit_records_cancelled(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "slow")
        await wait_for(
            pilot, lambda: app.main_screen.live is not None and app.main_screen.live.chunks == 1,
            what="first chunk"
        )
        await pilot.press("escape")
        await wait_for(pilot, lambda: drawn(app), what="cancelled and drawn")
        assert "[cancelled]" in app.query_one(TokenPane).text.plain
        await send(pilot, app, "slow")  # Ctrl+C stops it too (new-user pass N28)
        await wait_for(
            pilot, lambda: (live := app.main_screen.live) is not None and live.streaming
            and live.chunks == 1
        )
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: drawn(app, 2), what="cancelled by Ctrl+C")
        assert app.is_running
        await send(pilot, app, "slow")
        await wait_for(
            pilot, lambda: (live := app.main_screen.live) is not None and live.streaming
            and live.chunks == 1
        )
        await pilot.press("ctrl+q")
    reqs = read_log(tmp_path / "s.jsonl").requests
    assert [r.status for r in reqs] == ["cancelled", "cancelled", "cancelled"]


async def test_ctrl_r_repeats_last_prompt(tmp_path: Path) -> None:
    app, conn = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: done(app), what="first request")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: done(app, 2), what="repeat")
        assert conn.engine.prompts == ["hello", "hello"]


async def test_help_opens_and_keys_still_type_in_prompt(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready)
        prompt = app.query_one("#prompt", Input)
        assert prompt.has_focus
        await pilot.press("question_mark")  # empty prompt: help
        assert isinstance(app.screen, HelpScreen)
        defined = {name for name, _ in METRICS}  # what it shows: test_snapshots.py
        assert {"TTFT", "TPOT", "ITL", "prefill", "overhead"} <= defined
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await type_text(pilot, "q? quit")  # "q" and "?" typed into a prompt stay there
        assert prompt.value == "q? quit"
        assert app.is_running and not isinstance(app.screen, HelpScreen)
        prompt.clear()
        await pilot.press("escape")  # idle: leave the prompt box
        assert not prompt.has_focus
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("escape")  # the response pane has the focus
        assert not prompt.has_focus
        # new-user pass N2: typed outside the prompt box, a prompt's keys go into it ("q"
        # quit the app, "?" opened the help, the other letters were lost)
        await type_text(pilot, "q is it?")
        assert prompt.has_focus and prompt.value == "q is it?" and app.is_running
        assert not isinstance(app.screen, HelpScreen)
        prompt.clear()
        await pilot.press("escape")
        await pilot.press("question_mark")  # an empty prompt's "?": the help, as in the box
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not app.is_running, what="quit")
    assert app.return_value == 0


async def test_render_is_throttled(tmp_path: Path) -> None:
    """300 chunks arriving back to back are drawn in a handful of frames, not 300."""
    many = [ev(10.0 + i, f"t{i} ") for i in range(300)] + [ev(400.0, done=True)]
    # num_predict 300: the 300 chunks are what was asked (more than 2 × num_predict + 16
    # without done would end the stream: sessions/measure/request.py, chunk_limit)
    app, _ = build(tmp_path, fake_connection(FakeEngine({"many": many})), num_predict=300)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready)
        pane = app.query_one(TokenPane)
        calls = 0
        original = pane.show_live

        def counting(live):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            original(live)

        pane.show_live = counting  # type: ignore[method-assign]
        await send(pilot, app, "many")
        await wait_for(pilot, lambda: drawn(app), what="request done and drawn")
        assert "t299" in pane.text.plain
        assert app.main_screen.live is not None and app.main_screen.live.result is not None
        result = app.main_screen.live.result
        assert str(result_texts(result)["count"]) == "chunks 300"  # no eval_count
        assert shown(app, "#count") == "chunks 300"
        assert 1 <= calls < 30, calls


async def test_prompt_sent_while_connecting_is_queued(tmp_path: Path) -> None:
    gate = asyncio.Event()
    app, conn = build(tmp_path)

    async def slow_connect(*_a, **_k):  # type: ignore[no-untyped-def]
        await gate.wait()
        return conn

    app.link.injected = None
    # the link imports `connect` where it connects (after the first frame): replaced at home
    import llmtop.connect as connect_module

    original = connect_module.connect
    connect_module.connect = slow_connect  # type: ignore[assignment]
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause(0.05)
            assert shown(app, "#hdr-engine") == "llmtop · starting engine… (fake)"
            await type_text(pilot, "hello")
            await pilot.press("enter")
            gate.set()
            await wait_for(pilot, lambda: done(app), what="queued request")
            assert conn.engine.prompts == ["hello"]
    finally:
        connect_module.connect = original  # type: ignore[assignment]


async def test_engine_unreachable_shows_message_and_remedy(tmp_path: Path) -> None:
    from llmtop.servers.child import free_port

    settings = TuiSettings(
        engine="ollama",
        host=f"http://127.0.0.1:{free_port()}",
        log_path=str(tmp_path / "s.jsonl"),
        probes=False,
    )
    app = make_app(settings)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.connect_failure is not None, what="connect failure")
        await pilot.pause(0.1)
        failure = app.link.connect_failure.failure  # type: ignore[union-attr]
        pane = app.query_one(TokenPane).text.plain
        assert failure.message in pane and failure.remedy and failure.remedy in pane
        assert shown(app, "#hdr-engine") == "llmtop · no engine"
        await type_text(pilot, "hello")
        await pilot.press("enter")  # refused politely, the app stays usable
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not app.is_running, what="quit")
    assert app.return_value == 3  # ExitCode.ENGINE_UNREACHABLE
    assert not (tmp_path / "s.jsonl").exists()


async def test_burst_typing_keeps_question_mark_in_prompt(tmp_path: Path) -> None:
    """Keys arriving in one burst (tmux send-keys, a fast typist) reach the app before the
    Input has processed the earlier ones: the "?" must still land in the prompt."""
    from textual import events
    from textual.keys import _character_to_key

    app, _ = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready)
        for c in "Why? ok":
            app.post_message(events.Key(_character_to_key(c), c))
        await pilot.pause(0.1)
        assert not isinstance(app.screen, HelpScreen)
        assert app.query_one("#prompt", Input).value == "Why? ok"


async def test_a_burst_typed_after_esc_is_sent_whole(tmp_path: Path) -> None:
    # second new-user pass P1: after Esc, "idle esc fast" + Enter in one burst (a paste,
    # tmux send-keys) typed the text and lost the Enter: nothing was sent
    app, conn = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        await pilot.press("escape")  # idle: the response pane takes the focus
        prompt = app.query_one("#prompt", Input)
        assert not prompt.has_focus
        # a burst: every key reaches the pane before the first has moved the focus
        for key, char in (("h", "h"), ("i", "i"), ("backspace", None), ("o", "o"),
                          ("enter", "\r")):
            app.query_one(TokenPane).post_message(events.Key(key, char))
        await wait_for(pilot, lambda: done(app), what="the request")
        assert conn.engine.prompts == ["ho"]  # "hi", a backspace, "o", then Enter


async def test_typing_with_the_machine_panel_focused_goes_to_the_prompt(tmp_path: Path) -> None:
    # second new-user pass P1: after Tab, letters typed were lost in the focused panel
    from llmtop.tui.widgets.probe_panel import ProbePanel

    app, conn = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        app.query_one(ProbePanel).focus()
        await pilot.pause()
        await type_text(pilot, "hello")
        await pilot.press("enter")
        await wait_for(pilot, lambda: done(app), what="the request")
        assert conn.engine.prompts == ["hello"]
