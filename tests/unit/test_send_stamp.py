"""The send stamp is the socket write of the request body, and connections are reused.

Against the scripted Ollama-API server (llmtop/testing/scripted.py): the expected relations
follow from the order of events on one task — asking for the request, then httpcore writing
its body, then the first chunk — not from any timing.
"""

from time import perf_counter_ns

import pytest

from llmtop.engines.ollama import OllamaEngine
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request
from llmtop.sessions.records.request import RequestRecord
from llmtop.stamping.stamps import SendStamp, hold, released_at, stamping
from llmtop.testing.scripted import ScriptedUpstream


@pytest.fixture(scope="module")
def server():
    with ScriptedUpstream() as upstream:
        yield upstream.url


async def _one(engine: OllamaEngine, prompt: str = "hi"):
    collector = RequestCollector(prompt=prompt, options={}, model="ok")
    return await run_request(lambda: engine.stream_chat("ok", chat_messages(prompt)), collector)


def _pool(engine: OllamaEngine):
    return engine._client._client._transport._pool.connections


async def test_send_stamp_is_after_preparation_and_before_the_first_chunk(server):
    engine = OllamaEngine(server)
    try:
        result = await _one(engine)
    finally:
        await engine.aclose()
    assert result.prep_ns is not None and result.prep_ns > 0
    assert result.events[0].t_ns > result.sent_ns
    record = RequestRecord.of(result).to_json()
    assert record["client_prep_ms"] == round(result.prep_ns / 1e6, 3)


async def test_the_connection_goes_back_to_the_pool_and_is_reused(server):
    engine = OllamaEngine(server)
    try:
        await _one(engine)
        first = list(_pool(engine))
        assert len(first) == 1 and first[0].is_idle()  # the body was read to its end
        await _one(engine)
        assert list(_pool(engine)) == first  # the same connection, not a new one
    finally:
        await engine.aclose()


def test_without_a_socket_stamp_the_prepare_stamp_stands():
    with stamping() as stamp:
        assert isinstance(stamp, SendStamp)
    assert stamp.prep_ns is None and stamp.send_ns == stamp.prepare_ns
    stamp.sent_ns = stamp.prepare_ns + 1500
    assert stamp.prep_ns == 1500 and stamp.send_ns == stamp.prepare_ns + 1500


async def test_a_released_request_is_held_to_its_moment_and_the_hold_is_not_preparation():
    # the scripted server stamps each request's arrival on this process's perf_counter_ns
    # clock: a send released at `release` cannot reach it before `release`
    with ScriptedUpstream() as up:
        engine = OllamaEngine(up.url)
        try:
            await _one(engine)  # a pooled connection, as an open loop's later requests have
            asked = perf_counter_ns()
            release = asked + 200_000_000
            with released_at(release):
                result = await _one(engine)
        finally:
            await engine.aclose()
        arrived = up.recorder.received_ns[-1]
    assert result.sent_ns >= release and arrived >= release
    # sent − asked ≥ 200 ms, all but the client's own work (~1 ms) spent held: a prep that
    # counted the hold would be ≥ 200 ms
    assert result.prep_ns is not None and 0 < result.prep_ns < 200_000_000


def test_hold_is_kept_only_for_a_request_with_a_release():
    with stamping() as plain:
        pass
    with released_at(123), stamping() as timed:
        pass
    with stamping() as after:
        pass
    assert plain.release_ns is None and timed.release_ns == 123 and after.release_ns is None


async def test_only_the_first_write_waits():
    with released_at(perf_counter_ns() + 5_000_000), stamping() as stamp:
        await hold()
        first = stamp.held_ns
        await hold()  # the body's write after the head's: no second wait
    assert first is not None and first > 0 and stamp.held_ns == first
    # a past release does not wait either
    with released_at(perf_counter_ns() - 1), stamping() as late:
        t = perf_counter_ns()
        await hold()
    assert late.held_ns is not None and late.held_ns < perf_counter_ns() - t + 1
