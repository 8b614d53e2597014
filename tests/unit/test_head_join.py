"""A timed request's head and body leave in one send (stamping/stamps.HeadJoin).

httpcore writes an HTTP/1.1 request as two writes, the head and then the body. Sent apart, the
head wakes the server on loopback and the body can follow milliseconds later; a timed send
(`released_at`) was measured leaving 1-5 ms late that way. The stamping streams keep a timed
request's head until the body's write and send the two together; a head without a body goes
at once, and a request not timed goes as httpx sends it (two sends, as the user's own clients
do). The sends are counted on the stream's own socket or transport, which a thin wrapper
records (the bytes still go to a real server, which checks what arrived).
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
from time import perf_counter_ns

import pytest

from llmtop.stamping.arrivals import ArrivalBackend, ArrivalStream
from llmtop.stamping.rxstamps import KernelStampedStream
from llmtop.stamping.stamps import HeadJoin, announces_body, released_at, stamping

POST_HEAD = b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n"
BODY = b'{"a": "hi"}'  # 11 bytes, as the head says
GET_HEAD = b"GET /api/tags HTTP/1.1\r\nHost: x\r\n\r\n"


def test_a_head_announces_a_body_only_with_a_content_length_above_zero():
    assert announces_body(POST_HEAD)
    assert announces_body(POST_HEAD.replace(b"Content-Length", b"content-length"))
    assert not announces_body(GET_HEAD)
    assert not announces_body(POST_HEAD.replace(b"11", b"0"))
    chunked = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert not announces_body(chunked)  # its chunks may come slowly: the head goes at once
    assert not announces_body(BODY)
    assert not announces_body(b'{"text": "a\r\n\r\n"}')  # a body that ends as a head does
    assert not announces_body(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")  # a response
    assert not announces_body(POST_HEAD[:-2])  # not a whole head


def test_the_join_keeps_a_timed_head_for_its_body_and_gives_it_up_on_a_flush():
    join = HeadJoin()
    with released_at(perf_counter_ns() + 10**9), stamping():
        assert join.take(POST_HEAD) == b""
        assert join.take(BODY) == POST_HEAD + BODY
        assert join.take(BODY) == BODY  # nothing kept any more
        assert join.take(GET_HEAD) == GET_HEAD
        assert join.take(POST_HEAD) == b"" and join.flush() == POST_HEAD and join.flush() == b""
    with stamping():  # not timed: as httpx sends it
        assert join.take(POST_HEAD) == POST_HEAD and join.take(BODY) == BODY
    assert join.take(POST_HEAD) == POST_HEAD  # no request open (metadata calls)


class _Server:
    """Accepts one connection and reads until it has `want` bytes (noting perf_counter_ns of
    the first bytes' arrival), then closes."""

    def __init__(self, sock: socket.socket, want: int) -> None:
        self.sock, self.want = sock, want
        self.got = b""
        self.first_ns = 0
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            while len(self.got) < self.want:
                data = conn.recv(65536)
                if not data:
                    break
                self.first_ns = self.first_ns or perf_counter_ns()
                self.got += data
        self.done.set()


class _Counting:
    """Delegates to `inner`, recording the bytes of each `method` call."""

    def __init__(self, inner: object, method: str) -> None:
        self._inner, self._method, self.calls = inner, method, []

    def __getattr__(self, name: str):
        attr = getattr(self._inner, name)
        if name != self._method:
            return attr

        def counted(data, *args):
            self.calls.append(bytes(data))
            return attr(data, *args)
        return counted


@pytest.mark.skipif(sys.platform != "linux", reason="the kernel-stamped stream is Linux's")
async def test_a_kernel_stamped_connection_sends_a_timed_head_and_body_at_once():
    listener = socket.create_server(("127.0.0.1", 0))
    server = _Server(listener, 2 * (len(POST_HEAD) + len(BODY)))
    stream = await ArrivalBackend().connect_tcp("127.0.0.1", listener.getsockname()[1], 5)
    try:
        assert isinstance(stream, KernelStampedStream)
        stream.sock = counting = _Counting(stream.sock, "send")
        with released_at(perf_counter_ns()), stamping():  # due now: timed, not held long
            await stream.write(POST_HEAD)
            assert counting.calls == []  # kept for the body
            await stream.write(BODY)
        assert counting.calls == [POST_HEAD + BODY]
        with stamping():  # the next request, not timed: head and body apart
            await stream.write(POST_HEAD)
            await stream.write(BODY)
        assert counting.calls[1:] == [POST_HEAD, BODY]
        assert server.done.wait(10) and server.got == (POST_HEAD + BODY) * 2
    finally:
        await stream.aclose()
        listener.close()


@pytest.fixture
def unix_path(tmp_path):
    """A listening Unix socket's path (the streams there are ArrivalStream, asyncio's)."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "s"))
    listener.listen()
    yield listener
    listener.close()


async def test_a_timed_request_leaves_whole_at_its_moment(unix_path):
    # a release 30 ms ahead: the head's write returns at once, the body's is held, and
    # nothing reaches the server early
    server = _Server(unix_path, len(POST_HEAD) + len(BODY))
    stream = await ArrivalBackend().connect_unix_socket(unix_path.getsockname(), 5)
    try:
        assert isinstance(stream, ArrivalStream)
        stream._transport = counting = _Counting(stream._transport, "write")
        release = perf_counter_ns() + 30_000_000
        with released_at(release), stamping() as stamp:
            await stream.write(POST_HEAD)
            assert stamp.held_ns is None and counting.calls == []
            await stream.write(BODY)
        assert counting.calls == [POST_HEAD + BODY]
        assert stamp.written_ns is not None and stamp.written_ns >= release
        assert server.done.wait(10) and server.first_ns >= release
    finally:
        await stream.aclose()


async def test_a_read_before_the_body_sends_the_head_alone(unix_path):
    server = _Server(unix_path, len(POST_HEAD))
    stream = await ArrivalBackend().connect_unix_socket(unix_path.getsockname(), 5)
    try:
        with released_at(perf_counter_ns() + 10**9), stamping():
            await stream.write(POST_HEAD)
        # the server closes once it has the head: the read ends with the stream's end
        assert await asyncio.wait_for(stream.read(100, 5), 10) == b""
        assert server.done.wait(10) and server.got == POST_HEAD
    finally:
        await stream.aclose()
