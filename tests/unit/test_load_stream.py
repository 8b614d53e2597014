"""llmtop/loadtest/stream.py: one measured request over the blocking client Locust's users
hold, against a loopback server that writes known bytes (tests/unit/loopback.py). The client
runs in a thread, as a gevent user blocks its own greenlet."""

from __future__ import annotations

import asyncio
import threading

import httpx

from llmtop.engines.events import FailureKind, Status, StreamEvent
from llmtop.engines.http import Peer
from llmtop.loadtest.stream import stream_chat
from llmtop.sessions.measure.request import RequestCollector, RequestResult
from llmtop.stamping.blocking import BlockingArrivalBackend, arrival_transport
from tests.unit.loopback import END_CHUNKED, HEAD_200_CHUNKED, Server, answer_every_request, chunk

LINES = (b'{"message":{"content":"He"},"done":false}\n'
         b'{"message":{"content":"llo"},"done":false}\n'
         b'{"message":{"content":""},"done":true,"eval_count":2,"eval_duration":4000000}\n')


async def measure(url: str, collector: RequestCollector | None = None) -> RequestResult:
    """One stream_chat against `url` with the client a Locust user makes."""
    peer = Peer(url, "an Ollama server", "check --host", 5.0)
    collector = collector or RequestCollector(prompt="hi", options={}, model="m")
    with httpx.Client(base_url=url, timeout=5.0, transport=arrival_transport()) as client:
        return await asyncio.to_thread(stream_chat, client, peer, collector)


def test_the_transport_carries_the_arrival_backend():
    # the guard for httpx/httpcore moving the private names arrival_transport sets
    assert isinstance(arrival_transport()._pool._network_backend, BlockingArrivalBackend)


async def test_lines_that_arrived_in_one_read_share_its_arrival_stamp():
    # the whole reply in one write, so one read: every line carries that block's arrival,
    # not each the end of its own parse (which would all differ)
    async with Server(answer_every_request(HEAD_200_CHUNKED + chunk(LINES) + END_CHUNKED)) as srv:
        result = await measure(srv.url)
    assert result.status == Status.OK and result.content == "Hello"
    assert result.stats.eval_count == 2
    stamps = {e.t_ns for e in result.events}
    assert len(stamps) == 1 and stamps.pop() > result.sent_ns


async def test_lines_in_separate_reads_carry_their_own_arrivals():
    # the server writes the rest only once the client has taken in the first line: two
    # blocks, two stamps, in order (the done line shares the second block's)
    first, rest = LINES.split(b"\n", 1)
    collector = RequestCollector(prompt="hi", options={}, model="m")
    took_first = threading.Event()
    add = collector.add

    def noting(event: StreamEvent) -> None:
        add(event)
        took_first.set()

    collector.add = noting  # type: ignore[method-assign]

    async def handler(srv: Server, reader, writer, _n: int) -> None:
        await srv.read(reader)
        writer.write(HEAD_200_CHUNKED + chunk(first + b"\n"))
        await writer.drain()
        assert await asyncio.to_thread(took_first.wait, 10)
        writer.write(chunk(rest) + END_CHUNKED)
        await writer.drain()

    async with Server(handler) as srv:
        result = await measure(srv.url, collector)
    t_first, t_second, t_done = (e.t_ns for e in result.events)
    assert result.content == "Hello" and t_first < t_second == t_done


async def test_a_reply_cut_mid_stream_is_truncated_with_the_text_kept():
    async def handler(srv: Server, reader, writer, _n: int) -> None:
        await srv.read(reader)
        writer.write(HEAD_200_CHUNKED + chunk(LINES.split(b"\n")[0] + b"\n"))
        await writer.drain()
        writer.close()

    async with Server(handler) as srv:
        result = await measure(srv.url)
    assert result.content == "He" and result.failure.kind == FailureKind.TRUNCATED
