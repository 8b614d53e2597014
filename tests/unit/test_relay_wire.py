"""The relay's upstream client (llmtop/relay/wire.py) against small real HTTP servers on
loopback: framing, keep-alive reuse, a stale pooled connection, cut and silent replies,
backpressure. Each server is a plain asyncio server writing the exact bytes under test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Self

import httpx
import pytest

from llmtop.engines.child import free_port
from llmtop.relay.wire import CONNECT_DONE, CONNECT_START, Pool

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
HEAD_200_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n" \
                   b"Transfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    """`data` as one HTTP/1.1 chunk (hex size line, data, CRLF)."""
    return b"%x\r\n" % len(data) + data + b"\r\n"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and Content-Length body; b"" when the client closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return b""
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    return head + await reader.readexactly(length)


class Server:
    """A loopback server running `handler(reader, writer, n)` for its n-th connection;
    `requests` holds every request read with `read_request` through `self.read`."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.url = ""
        self._server: asyncio.Server | None = None

    async def read(self, reader: asyncio.StreamReader) -> bytes:
        request = await read_request(reader)
        if request:
            self.requests.append(request)
        return request

    async def __aenter__(self) -> Self:
        port = free_port()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            self.writers.append(writer)
            await self.handler(reader, writer, self.connections)

        self._server = await asyncio.start_server(serve, "127.0.0.1", port)
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        for writer in self.writers:
            writer.close()
        self._server.close()


def pool_for(server: Server, read_timeout_s: float = 5.0) -> Pool:
    return Pool(server.url, connect_timeout_s=2.0, read_timeout_s=read_timeout_s,
                headers={"Content-Type": "application/json"})


async def body_of(pool: Pool, marks: dict[str, int] | None = None) -> tuple[int, bytes]:
    response = await pool.request("POST", "/api/chat", b'{"model":"m"}', {} if marks is None
                                  else marks)
    return response.status_code, b"".join([part async for part in response.aiter_bytes()])


@pytest.fixture
async def ndjson_server() -> AsyncIterator[Server]:
    """Answers every request on a connection with two NDJSON lines, split mid-line and
    mid-chunk-header across writes."""
    lines = b'{"a":1}\n{"done":true}\n'

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int):
        server = srv
        while await server.read(reader):
            wire = HEAD_200_CHUNKED + chunk(lines[:5]) + chunk(lines[5:]) + b"0\r\n\r\n"
            for cut in (10, 57, 60, 61, len(wire)):  # arbitrary split points
                writer.write(wire[:cut])
                wire = wire[cut:]
                await writer.drain()

    async with Server(handler) as srv:
        yield srv


async def test_a_chunked_reply_split_anywhere_arrives_whole(ndjson_server):
    pool = pool_for(ndjson_server)
    status, body = await body_of(pool)
    assert (status, body) == (200, b'{"a":1}\n{"done":true}\n')
    request = ndjson_server.requests[0]
    assert request.startswith(b"POST /api/chat HTTP/1.1\r\n")
    assert b"Content-Length: 13\r\n" in request and request.endswith(b'{"model":"m"}')
    await pool.aclose()


async def test_one_connection_serves_consecutive_requests_and_only_a_new_one_is_stamped(
        ndjson_server):
    pool = pool_for(ndjson_server)
    first: dict[str, int] = {}
    second: dict[str, int] = {}
    await body_of(pool, first)
    await body_of(pool, second)
    assert ndjson_server.connections == 1 and len(ndjson_server.requests) == 2
    assert first[CONNECT_START] <= first[CONNECT_DONE] and second == {}
    await pool.aclose()


async def test_a_pooled_connection_the_server_dropped_is_retried_on_a_new_one():
    # connection 1 answers once, then reads the next request and closes without a byte:
    # the race of a keep-alive timeout. Connection 2 answers.
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int):
        await srv.read(reader)
        if n == 1:
            writer.write(HEAD_200_CHUNKED + chunk(b"one\n") + b"0\r\n\r\n")
            await writer.drain()
            await srv.read(reader)
            writer.close()
            return
        writer.write(HEAD_200_CHUNKED + chunk(b"two\n") + b"0\r\n\r\n")
        await writer.drain()

    async with Server(handler) as srv:
        pool = pool_for(srv)
        assert await body_of(pool) == (200, b"one\n")
        marks: dict[str, int] = {}
        assert await body_of(pool, marks) == (200, b"two\n")
        assert srv.connections == 2 and CONNECT_DONE in marks
        await pool.aclose()


async def test_a_reply_cut_mid_body_raises_after_the_bytes_that_came():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int):
        await srv.read(reader)
        writer.write(HEAD_200_CHUNKED + chunk(b"partial\n"))
        await writer.drain()
        writer.close()

    async with Server(handler) as srv:
        response = await pool_for(srv).request("POST", "/api/chat", b"{}", {})
        got = []
        with pytest.raises(httpx.RemoteProtocolError):
            async for part in response.aiter_bytes():
                got.append(part)
        assert got == [b"partial\n"]


async def test_a_silent_upstream_raises_read_timeout():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int):
        await srv.read(reader)
        writer.write(HEAD_200_CHUNKED)  # headers, then nothing
        await writer.drain()
        await reader.read()  # until the client closes

    async with Server(handler) as srv:
        response = await pool_for(srv, read_timeout_s=0.2).request("POST", "/", b"{}", {})
        with pytest.raises(httpx.ReadTimeout):
            await response.aread()
        await response.aclose()


async def test_nothing_listening_is_a_connect_error():
    pool = Pool(f"http://127.0.0.1:{free_port()}", connect_timeout_s=2.0, read_timeout_s=1.0)
    with pytest.raises(httpx.ConnectError):
        await pool.request("POST", "/api/chat", b"{}", {})


async def test_a_connection_close_reply_is_not_pooled_and_a_sized_body_is_read():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int):
        await srv.read(reader)
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\n"
                     b"not found")
        await writer.drain()
        writer.close()

    async with Server(handler) as srv:
        pool = pool_for(srv)
        assert await body_of(pool) == (404, b"not found")
        assert await body_of(pool) == (404, b"not found")
        assert srv.connections == 2


async def test_a_reader_that_falls_behind_pauses_the_upstream_and_loses_nothing():
    total = 4 << 20  # 4 MiB in 1 KiB chunks: more than loopback buffers take at once
    piece = chunk(b"x" * 1024)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int):
        await srv.read(reader)
        writer.write(HEAD_200_CHUNKED)
        for _ in range(total // 1024):
            writer.write(piece)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with Server(handler) as srv:
        response = await pool_for(srv).request("POST", "/", b"{}", {})
        # Nobody reads yet: once more than MAX_BUFFERED chunks wait, reading is paused, so
        # what the relay holds stays at most one socket read past that.
        conn = response._conn
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not conn.paused:
            assert loop.time() < deadline, "reading was never paused"
            await asyncio.sleep(0.01)
        assert sum(len(part) for part in conn.chunks) < total // 4
        assert len(await response.aread()) == total  # resumed: nothing lost
