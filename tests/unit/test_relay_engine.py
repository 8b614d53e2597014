"""RelayEngine (llmtop/engines/relay.py) through a real relay gives what OllamaEngine gives
directly: the same events, text, stats and failure kinds, from the same scripted upstream."""

from __future__ import annotations

import asyncio
import contextlib
from time import perf_counter_ns

import pytest

from llmtop.engines.base import EngineError
from llmtop.engines.events import FailureKind, Status
from llmtop.engines.ollama import OllamaEngine
from llmtop.engines.relay import RelayEngine
from llmtop.servers.child import free_port
from llmtop.servers.relay.server import create_app
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request
from llmtop.testing.scripted import STATS, ScriptedUpstream, ServeInThread, Timing
from tests.unit.loopback import Server, answer_every_request


@pytest.fixture(scope="module")
def upstream():
    with ScriptedUpstream(Timing(first_s=0.02, chunks=10, gap_s=0.005)) as server:
        yield server


@pytest.fixture(scope="module")
def relay(upstream):
    with ServeInThread(create_app(upstream.url)) as url:
        yield url


async def collect(engine, model, **kw):
    try:
        return [e async for e in engine.stream_chat(model, chat_messages("hi"), **kw)]
    finally:
        await engine.aclose()


def shape(events):
    """What must match between direct and relayed: everything but the stamps and messages."""
    return [
        (e.content, e.thinking, e.done, e.stats, e.failure.kind if e.failure else None)
        for e in events
    ]


@pytest.mark.parametrize(
    "model",
    [
        "ok",
        "sparse",
        "thinking",
        "timed",
        "midstream-error",
        "truncated",
        "garbage",
        "load",
        "nope",
    ],
)
async def test_relayed_events_match_direct_events(upstream, relay, model):
    direct = await collect(OllamaEngine(upstream.url), model)
    relayed = await collect(RelayEngine(relay), model)
    assert shape(relayed) == shape(direct)
    assert sum(e.done for e in relayed) == 1 and relayed[-1].done
    stamps = [e.t_ns for e in relayed]
    assert stamps == sorted(stamps)


async def test_stats_come_through_unchanged(relay):
    events = await collect(RelayEngine(relay), "ok")
    stats = events[-1].stats
    assert stats is not None and stats.to_dict() == {**STATS, "done_reason": "stop"}


async def test_run_request_through_the_relay_is_ok_with_text_and_metrics(relay):
    engine = RelayEngine(relay)
    collector = RequestCollector(prompt="hi", options={}, model="ok")
    try:
        result = await run_request(lambda: engine.stream_chat("ok", chat_messages("hi")), collector)
    finally:
        await engine.aclose()
    assert result.status == Status.OK and result.content == "Hello!"
    assert result.events[0].t_ns > result.sent_ns


async def test_events_that_arrived_in_one_read_share_its_arrival_stamp():
    # A relay stand-in writes its whole answer in one write, so the client reads it in one
    # block: every event is stamped with that block's arrival (docs/method.md, "Chunk
    # stamps"), not each with the time its own parse ended (which would all differ).
    frames = (b'event: token\ndata: {"content":"a","thinking":""}\n\n'
              b'event: token\ndata: {"content":"b","thinking":""}\n\n'
              b'event: done\ndata: {"done":true,"content":"","thinking":"","eval_count":2}\n\n')
    reply = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
             b"Content-Length: %d\r\n\r\n" % len(frames) + frames)
    async with Server(answer_every_request(reply)) as srv:
        engine = RelayEngine(srv.url, upstream="http://127.0.0.1:9")  # never asked
        collector = RequestCollector(prompt="hi", options={}, model="m")
        try:
            result = await run_request(lambda: engine.stream_chat("m", chat_messages("hi")),
                                       collector)
        finally:
            await engine.aclose()
    assert result.content == "ab" and [e.done for e in result.events] == [False, False, True]
    stamps = {e.t_ns for e in result.events}
    assert len(stamps) == 1 and stamps.pop() > result.sent_ns


async def test_stream_is_lazy_nothing_is_sent_before_iteration(relay, upstream):
    engine = RelayEngine(relay)
    upstream.recorder.reset()
    stream = engine.stream_chat("ok", chat_messages("hi"))
    await asyncio.sleep(0.1)
    assert upstream.recorder.requests == []
    assert (await anext(stream)).content == "Hel"
    await stream.aclose()
    await engine.aclose()


async def test_options_think_and_keep_alive_reach_the_upstream(relay, upstream):
    upstream.recorder.reset()
    await collect(RelayEngine(relay), "ok", options={"seed": 42}, think=False, keep_alive="1m")
    path, body = upstream.recorder.requests[-1]
    assert path == "/api/chat"
    assert body == {"model": "ok", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                    "options": {"seed": 42}, "think": False, "keep_alive": "1m"}


async def test_relay_error_event_becomes_the_failure(relay, upstream):
    events = await collect(RelayEngine(relay), "nope")
    failure = events[-1].failure
    assert failure.kind == FailureKind.MODEL_NOT_FOUND
    assert "model 'nope' not found" in failure.message and upstream.url in failure.message
    assert failure.remedy


async def test_unreachable_relay_is_a_specific_failure():
    url = f"http://127.0.0.1:{free_port()}"
    events = await collect(RelayEngine(url), "ok")
    assert len(events) == 1 and events[0].done
    assert events[0].failure.kind == FailureKind.UNREACHABLE
    assert url in events[0].failure.message and "llmtop relay" in events[0].failure.remedy


async def test_a_request_the_relay_rejects_is_a_bad_request_failure(relay):
    events = await collect(RelayEngine(relay), "ok", think="bogus")
    assert events[-1].failure.kind == FailureKind.BAD_REQUEST
    assert "think must be" in events[-1].failure.message


async def test_comment_pings_are_ignored(upstream):
    # pings every 20 ms on a stream that lasts ≈ 70 ms
    with ServeInThread(create_app(upstream.url, ping_interval_s=0.02)) as relay:
        events = await collect(RelayEngine(relay), "timed")
    assert "".join(e.content for e in events) == "t0" + "".join(f" t{i}" for i in range(1, 10))
    assert events[-1].stats.eval_count == 10


async def test_closing_the_stream_early_stops_the_upstream_through_both_hops():
    with ScriptedUpstream() as upstream, ServeInThread(create_app(upstream.url)) as relay:
        engine = RelayEngine(relay)
        stream = engine.stream_chat("slow", chat_messages("hi"))
        async with contextlib.aclosing(stream):
            got = [await anext(stream), await anext(stream)]
        t_closed = perf_counter_ns()
        assert [e.content for e in got] == ["s0 ", "s1 "]
        assert await asyncio.to_thread(upstream.recorder.closed.wait, 3.0)
        assert upstream.recorder.cut_short == [True]
        assert (upstream.recorder.closed_ns[0] - t_closed) / 1e9 < 1.0
        await engine.aclose()


async def test_metadata_is_delegated_to_the_upstream(relay, upstream):
    engine = RelayEngine(relay)
    try:
        assert engine.host == relay and engine.name == "relay"
        assert await engine.upstream_url() == upstream.url
        assert await engine.list_models() == ["ok", "timed", "thinking", "slow"]
        assert await engine.version() == "0.0.0-scripted"
        info = await engine.model_info("ok")
        assert info.name == "ok" and info.family == "scripted"
        with pytest.raises(EngineError) as exc:
            await engine.model_info("nope")
        assert exc.value.failure.kind == FailureKind.MODEL_NOT_FOUND
    finally:
        await engine.aclose()


async def test_metadata_from_an_unreachable_relay_raises_engine_error():
    engine = RelayEngine(f"127.0.0.1:{free_port()}")
    try:
        with pytest.raises(EngineError) as exc:
            await engine.list_models()
        assert exc.value.failure.kind == FailureKind.UNREACHABLE
    finally:
        await engine.aclose()


async def test_a_server_that_is_not_a_relay_is_a_protocol_failure(upstream):
    # the scripted Ollama server has no /api/stream: Starlette answers 404 "Not Found"
    events = await collect(RelayEngine(upstream.url), "ok")
    assert len(events) == 1 and events[0].failure.kind == FailureKind.PROTOCOL
    assert events[0].failure.message == (
        f"{upstream.url} did not answer as the llmtop relay (HTTP 404: Not Found)"
    )
