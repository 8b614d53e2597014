"""Small real HTTP/1.1 servers on loopback for client tests: each is a plain asyncio server
whose handler writes the exact bytes under test (framing, splits, closes, silences)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Self

from llmtop.servers.child import free_port

Handler = Callable[["Server", asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
HEAD_200_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n" \
                   b"Transfer-Encoding: chunked\r\n\r\n"
END_CHUNKED = b"0\r\n\r\n"


def chunk(data: bytes) -> bytes:
    """`data` as one HTTP/1.1 chunk (hex size line, data, CRLF)."""
    return b"%x\r\n" % len(data) + data + b"\r\n"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and Content-Length body; b"" when the client closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return b""
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return head + await reader.readexactly(length)


class Server:
    """A loopback server running `handler(server, reader, writer, n)` for its n-th connection
    (from 1);
    `requests` holds every request its handlers read through `self.read`; `url` is its base
    URL once entered (`async with Server(handler) as srv`)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.url = ""
        self._server: asyncio.Server | None = None

    async def read(self, reader: asyncio.StreamReader) -> bytes:
        """One request (see read_request), recorded in `requests`."""
        request = await read_request(reader)
        if request:
            self.requests.append(request)
        return request

    async def __aenter__(self) -> Self:
        port = free_port()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            self.writers.append(writer)
            await self.handler(self, reader, writer, self.connections)

        self._server = await asyncio.start_server(serve, "127.0.0.1", port)
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        for writer in self.writers:
            writer.close()
        self._server.close()


def answer_every_request(reply: bytes) -> Handler:
    """A handler that answers each request on its connection with `reply`, in one write."""

    async def handler(server: Server, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, _n: int) -> None:
        while await server.read(reader):
            writer.write(reply)
            await writer.drain()

    return handler
