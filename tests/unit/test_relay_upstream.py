"""The relay's upstream side (llmtop/servers/relay/upstream.py: one aiohttp session) against small
real HTTP servers on loopback (tests/unit/loopback.py): framing, keep-alive reuse and the
connect stamps, a stale pooled connection, refused ports, cut and silent replies,
backpressure, the request on the wire before `start` returns, and the failure each error
becomes. Expected values are the bytes the servers were told to write."""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import socket
import threading
from collections.abc import AsyncIterator
from time import perf_counter_ns

import aiohttp
import pytest

from llmtop.engines.events import FailureKind
from llmtop.engines.http import Peer
from llmtop.servers.child import free_port
from llmtop.servers.relay.request import StreamJob
from llmtop.servers.relay.upstream import (
    CONNECT_DONE,
    CONNECT_START,
    Relay,
    UpstreamCall,
    upstream_failure,
)
from tests.unit.loopback import END_CHUNKED, HEAD_200_CHUNKED, Server, chunk

JOB = StreamJob("/api/chat", "m", b'{"model":"m"}')
LINES = b'{"a":1}\n{"done":true}\n'


@contextlib.asynccontextmanager
async def opened(url: str, read_timeout_s: float = 5.0) -> AsyncIterator[Relay]:
    """A Relay's session open for the block, as the app's lifespan opens it."""
    relay = Relay(url, connect_timeout_s=2.0, read_timeout_s=read_timeout_s)
    await relay.open()
    try:
        yield relay
    finally:
        await relay.close()


async def start(relay: Relay) -> UpstreamCall:
    return await relay.start(JOB, perf_counter_ns())


async def body_of(relay: Relay) -> tuple[int, bytes, dict[str, int]]:
    """(status, body read block by block, connect marks) of one call."""
    call = await start(relay)
    response = await call.response()
    body = b"".join([block async for block in response.content.iter_any()])
    return response.status, body, call.marks


async def split_ndjson(srv: Server, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter, _n: int) -> None:
    """Answers every request with LINES, split mid-line and mid-chunk-header across writes."""
    while await srv.read(reader):
        wire = HEAD_200_CHUNKED + chunk(LINES[:5]) + chunk(LINES[5:]) + END_CHUNKED
        for cut in (10, 57, 60, 61, len(wire)):  # arbitrary split points
            writer.write(wire[:cut])
            wire = wire[cut:]
            await writer.drain()


async def test_a_chunked_reply_split_anywhere_arrives_whole():
    async with Server(split_ndjson) as srv, opened(srv.url) as relay:
        status, body, _ = await body_of(relay)
    assert (status, body) == (200, LINES)
    request = srv.requests[0]
    head = request.lower()
    assert request.startswith(b"POST /api/chat HTTP/1.1\r\n") and request.endswith(JOB.payload)
    assert b"content-length: 13\r\n" in head and b"content-type: application/json\r\n" in head
    assert b"accept-encoding: identity\r\n" in head and b"user-agent: llmtop-relay/" in head


async def test_one_connection_serves_consecutive_requests_and_only_a_new_one_is_stamped():
    async with Server(split_ndjson) as srv, opened(srv.url) as relay:
        *_, first = await body_of(relay)
        *_, second = await body_of(relay)
    assert srv.connections == 1 and len(srv.requests) == 2
    assert first[CONNECT_START] <= first[CONNECT_DONE] and second == {}


async def test_metadata_calls_share_the_streams_connection():
    tags = json.dumps({"models": [{"model": "a"}, {"name": "b"}]}).encode()

    async def handler(srv: Server, reader, writer, _n: int) -> None:
        while request := await srv.read(reader):
            if request.startswith(b"GET /api/tags "):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(tags) + tags)
            else:
                writer.write(HEAD_200_CHUNKED + chunk(LINES) + END_CHUNKED)
            await writer.drain()

    async with Server(handler) as srv, opened(srv.url) as relay:
        assert (await body_of(relay))[:2] == (200, LINES)
        assert await relay.tags() == ["a", "b"]
    assert srv.connections == 1  # one session, one pool


async def test_a_pooled_connection_the_server_dropped_is_retried_on_a_new_one():
    # connection 1 answers once, then reads the next request and closes without a byte:
    # the race of a keep-alive timeout. Connection 2 answers.
    async def handler(srv: Server, reader, writer, n: int) -> None:
        await srv.read(reader)
        if n == 1:
            writer.write(HEAD_200_CHUNKED + chunk(b"one\n") + END_CHUNKED)
            await writer.drain()
            await srv.read(reader)
            writer.close()
            return
        writer.write(HEAD_200_CHUNKED + chunk(b"two\n") + END_CHUNKED)
        await writer.drain()

    async with Server(handler) as srv, opened(srv.url) as relay:
        assert (await body_of(relay))[:2] == (200, b"one\n")
        status, body, marks = await body_of(relay)
    assert (status, body) == (200, b"two\n")
    assert srv.connections == 2 and len(srv.requests) == 3 and CONNECT_DONE in marks


async def test_a_new_connection_closed_before_an_answer_is_not_retried():
    # the upstream got the request on a fresh connection and closed it: that is its answer
    async def handler(srv: Server, reader, writer, _n: int) -> None:
        await srv.read(reader)
        writer.close()

    async with Server(handler) as srv, opened(srv.url) as relay:
        call = await start(relay)
        with pytest.raises(aiohttp.ServerDisconnectedError) as caught:
            await call.response()
    assert srv.connections == 1
    assert upstream_failure(caught.value, peer=relay.peer).kind == FailureKind.TRUNCATED


async def test_a_reply_cut_mid_body_raises_after_the_bytes_that_came():
    async def handler(srv: Server, reader, writer, _n: int) -> None:
        await srv.read(reader)
        writer.write(HEAD_200_CHUNKED + chunk(b"partial\n"))
        await writer.drain()
        writer.close()

    async with Server(handler) as srv, opened(srv.url) as relay:
        response = await (await start(relay)).response()
        got = []
        with pytest.raises(aiohttp.ClientPayloadError) as caught:
            async for block in response.content.iter_any():
                got.append(block)
    assert got == [b"partial\n"]
    failure = upstream_failure(caught.value, peer=relay.peer)
    assert failure.kind == FailureKind.TRUNCATED and srv.url in failure.message


async def test_a_silent_upstream_is_a_read_timeout():
    async def handler(srv: Server, reader, writer, _n: int) -> None:
        await srv.read(reader)
        writer.write(HEAD_200_CHUNKED)  # headers, then nothing
        await writer.drain()
        await reader.read()  # until the client closes

    async with Server(handler) as srv, opened(srv.url, read_timeout_s=0.2) as relay:
        call = await start(relay)
        response = await call.response()
        with pytest.raises(TimeoutError) as caught:
            await response.read()
        await call.close()
    failure = upstream_failure(caught.value, peer=relay.peer)
    assert failure.kind == FailureKind.TIMEOUT and "for 0.2 s" in failure.message


async def test_nothing_listening_is_unreachable():
    async with opened(f"http://127.0.0.1:{free_port()}") as relay:
        call = await start(relay)
        with pytest.raises(aiohttp.ClientConnectorError) as caught:
            await call.response()
    failure = upstream_failure(caught.value, peer=relay.peer)
    assert failure.kind == FailureKind.UNREACHABLE and relay.upstream in failure.message


async def test_a_connection_close_reply_is_not_pooled_and_a_sized_body_is_read():
    async def handler(srv: Server, reader, writer, _n: int) -> None:
        await srv.read(reader)
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\n"
                     b"not found")
        await writer.drain()
        writer.close()

    async with Server(handler) as srv, opened(srv.url) as relay:
        assert (await body_of(relay))[:2] == (404, b"not found")
        assert (await body_of(relay))[:2] == (404, b"not found")
    assert srv.connections == 2


async def test_a_reader_that_falls_behind_pauses_the_upstream_and_loses_nothing():
    total = 4 << 20  # 4 MiB in 1 KiB chunks: more than loopback buffers take at once
    piece = chunk(b"x" * 1024)

    async def handler(srv: Server, reader, writer, _n: int) -> None:
        await srv.read(reader)
        writer.write(HEAD_200_CHUNKED)
        for _ in range(total // 1024):
            writer.write(piece)
        writer.write(END_CHUNKED)
        await writer.drain()

    async with Server(handler) as srv, opened(srv.url) as relay:
        response = await (await start(relay)).response()
        # Nobody reads yet: aiohttp's StreamReader pauses the socket past its high-water mark
        # (2 × its 64 KiB limit), so what the relay holds stays far below what was sent.
        transport = response.connection.transport
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while transport.is_reading():
            assert loop.time() < deadline, "reading was never paused"
            await asyncio.sleep(0.01)
        assert response.content.total_bytes < total // 4
        assert len(await response.read()) == total  # resumed: nothing lost


def _read_blocking(conn: socket.socket) -> bytes:
    """One request (head and Content-Length body) from a blocking socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += conn.recv(65536)
    return data


async def test_on_a_pooled_connection_the_request_is_on_the_wire_when_start_returns():
    # The server thread answers the first request, then leaves the socket unread until the
    # test has looked. The test does not yield to the event loop between `start` returning
    # and its look, so bytes the server can read then were written before `start` returned.
    listener = socket.create_server(("127.0.0.1", 0))
    reply = HEAD_200_CHUNKED + chunk(b"ok\n") + END_CHUNKED
    accepted: list[socket.socket] = []
    looked = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        accepted.append(conn)
        _read_blocking(conn)
        conn.sendall(reply)
        looked.wait(10)  # the second request waits in the socket until the test has looked
        assert _read_blocking(conn).startswith(b"POST /api/chat ")
        conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    with listener:
        async with opened(f"http://127.0.0.1:{listener.getsockname()[1]}") as relay:
            assert (await body_of(relay))[:2] == (200, b"ok\n")
            second = await start(relay)
            readable, _, _ = select.select(accepted, [], [], 1.0)
            looked.set()
            assert readable and second.marks == {}  # a reused connection, written at once
            assert await (await second.response()).read() == b"ok\n"


async def test_environment_proxies_are_ignored(monkeypatch):
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with Server(split_ndjson) as srv, opened(srv.url) as relay:
        assert (await body_of(relay))[:2] == (200, LINES)


@pytest.mark.parametrize(
    "exc, kind",
    [
        (aiohttp.ConnectionTimeoutError("Connection timeout to host"), FailureKind.UNREACHABLE),
        (aiohttp.SocketTimeoutError("Timeout on reading data from socket"), FailureKind.TIMEOUT),
        (TimeoutError(), FailureKind.TIMEOUT),
        (aiohttp.ServerDisconnectedError(), FailureKind.TRUNCATED),
        (aiohttp.ClientPayloadError("Response payload is not completed"), FailureKind.TRUNCATED),
        (aiohttp.ClientOSError(104, "Connection reset by peer"), FailureKind.TRUNCATED),
        (aiohttp.InvalidURL("http://[x"), FailureKind.SERVER_ERROR),
    ],
)
def test_each_aiohttp_error_becomes_the_failure_httpx_s_would(exc, kind):
    # the kinds are those failure_for_transport gives httpx's ConnectTimeout, ReadTimeout,
    # RemoteProtocolError, ReadError and any other error (engines/http.py)
    peer = Peer("http://127.0.0.1:1", "an Ollama-API server", "start it", 0.5)
    assert upstream_failure(exc, peer=peer).kind == kind
