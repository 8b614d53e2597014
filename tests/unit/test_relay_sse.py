"""The relay's SSE response (llmtop/servers/relay/sse.py) served by uvicorn to raw-socket clients:
pings while no frame comes, a client that stops reading is cut off, a client that leaves
closes the frames at once; the background task runs in every case."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmtop.servers.relay.sse import PING, SSEResponse
from llmtop.testing.scripted import ServeInThread

WAIT_S = 10.0  # deadline for what must happen (the checks poll; nothing sleeps for a result)


class Frames:
    """An SSE source whose end (closed, cancelled or exhausted) and background run are
    recorded as threading Events, read from the test's thread."""

    def __init__(self, frames: list[bytes], pause_s: float = 0.0, forever: bytes = b"") -> None:
        self.frames, self.pause_s, self.forever = frames, pause_s, forever
        self.closed = threading.Event()
        self.background_ran = threading.Event()

    async def __call__(self) -> AsyncIterator[bytes]:
        try:
            for frame in self.frames:
                yield frame
                await asyncio.sleep(self.pause_s)
            while self.forever:
                yield self.forever
        finally:
            self.closed.set()

    def app(self, *, ping_interval_s: float, send_timeout_s: float = 30.0) -> Starlette:
        async def endpoint(_request: Request) -> Response:
            return SSEResponse(self(), ping_interval_s=ping_interval_s,
                               send_timeout_s=send_timeout_s,
                               background=BackgroundTask(self.background_ran.set))

        return Starlette(routes=[Route("/", endpoint)])


def open_stream(url: str) -> socket.socket:
    """A raw client that sent `GET /` and has read the response's headers."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"content-type: text/event-stream" in head.lower()
    return sock


def read_body(sock: socket.socket) -> bytes:
    """The chunked body up to its last (empty) chunk."""
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        part = sock.recv(65536)
        assert part, "closed before the end of the body"
        data += part
    return data


def test_frames_are_sent_as_given_with_pings_while_none_comes():
    one, two = b"event: token\ndata: {}\n\n", b"event: done\ndata: {}\n\n"
    frames = Frames([one, two], pause_s=0.3)  # 0.3 s without a frame, pings every 0.05 s
    with ServeInThread(frames.app(ping_interval_s=0.05)) as url:
        sock = open_stream(url)
        body = read_body(sock)  # chunked transfer: the frames, with chunk-size lines between
        sock.close()
    assert body.index(one) < body.index(PING) < body.index(two)
    assert frames.closed.wait(WAIT_S) and frames.background_ran.wait(WAIT_S)


def test_a_client_that_stops_reading_is_cut_off_after_the_send_timeout():
    # 64 KiB frames without end; the client reads none of them, so sends block once the
    # socket buffers are full, and the 0.5 s send timeout must end the stream.
    frames = Frames([], forever=b"data: " + b"x" * 65536 + b"\n\n")
    with ServeInThread(frames.app(ping_interval_s=0, send_timeout_s=0.5)) as url:
        sock = open_stream(url)
        assert frames.closed.wait(WAIT_S), "the stream went on for a client that stopped reading"
        assert frames.background_ran.wait(WAIT_S)
        sock.close()


def test_a_client_that_leaves_closes_the_frames_at_once():
    frames = Frames([b"event: token\ndata: {}\n\n"], pause_s=60.0)  # then 60 s of silence
    with ServeInThread(frames.app(ping_interval_s=15)) as url:
        sock = open_stream(url)
        assert sock.recv(100)  # the first frame
        sock.close()
        assert frames.closed.wait(WAIT_S), "the frames were not closed when the client left"
        assert frames.background_ran.wait(WAIT_S)
