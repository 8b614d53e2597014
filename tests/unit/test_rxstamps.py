"""stamping/rxstamps.py: the kernel's receive stamps on plain TCP connections (Linux).

A stamp taken in Python cannot be earlier than the moment the event loop ran; the kernel's
is taken while the sender's `send` is still in progress. So the check is an ordering on one
clock: with the client's event loop held up until after the server's send has returned, the
chunk's stamp still falls between the server's stamps just before and just after its send.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import threading
from time import perf_counter_ns

import httpcore
import httpx
import pytest

from llmtop.stamping import rxstamps
from llmtop.stamping.arrivals import ArrivalBackend, ArrivalStream, measured_transport
from llmtop.stamping.blocking import BlockingArrivalBackend
from llmtop.stamping.netbuffer import HIGH_WATER
from llmtop.stamping.rxstamps import MAX_AGE_NS, SCM_TIMESTAMPNS, KernelStampedStream, to_perf_ns
from llmtop.stamping.stamps import stamping

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="SO_TIMESTAMPNS is Linux's")


@pytest.fixture(params=["loop", "thread"])
def reader(request):
    """Each connection read from the event loop's callback, or by its own thread (the TUI's
    way: rxstamps.use_reader_threads)."""
    rxstamps.use_reader_threads(request.param == "thread")
    yield request.param
    rxstamps.use_reader_threads(False)


def _timespec(ns: int) -> list[tuple[int, int, bytes]]:
    return [(socket.SOL_SOCKET, SCM_TIMESTAMPNS, struct.pack("qq", *divmod(ns, 10**9)))]


def test_the_kernel_stamp_moves_onto_perf_counter_and_odd_ones_are_not_used():
    # wall clock 1_700_000_000.5 s, perf_counter 1000 s at the read, so offset = wall − perf
    offset = 1_700_000_000_500_000_000 - 1_000_000_000_000
    now = 1_000_000_000_000
    # a segment received 2.25 ms before the read: wall 1_700_000_000.49775 s
    assert to_perf_ns(_timespec(1_700_000_000_497_750_000), now, offset) == now - 2_250_000
    assert to_perf_ns([], now, offset) == now  # no stamp: the read's own time
    future = 1_700_000_000_500_000_000 + 1  # later than the read: the wall clock moved
    assert to_perf_ns(_timespec(future), now, offset) == now
    stale = 1_700_000_000_500_000_000 - MAX_AGE_NS - 1
    assert to_perf_ns(_timespec(stale), now, offset) == now


TOL_NS = 200_000  # see test_a_chunk_read_late_keeps_the_kernels_stamp


class _Sender:
    """A server thread: accepts one connection, waits for a request, and on `go` sends
    `reply`, noting perf_counter_ns just before and just after the send."""

    def __init__(self, reply: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.go, self.sent = threading.Event(), threading.Event()
        self.before = self.after = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(65536)
            self.go.wait(10)
            self.before = perf_counter_ns()
            conn.sendall(self.reply)
            self.after = perf_counter_ns()
            self.sent.set()
            conn.recv(1)  # until the client closes


@linux_only
async def test_a_chunk_read_late_keeps_the_kernels_stamp(reader):
    sender = _Sender(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
    stream = await ArrivalBackend().connect_tcp("127.0.0.1", sender.port, timeout=5)
    try:
        assert isinstance(stream, KernelStampedStream)
        await stream.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        sender.go.set()
        assert sender.sent.wait(10)  # blocks the event loop: nothing can read until after
        while perf_counter_ns() < sender.after + 5_000_000:
            pass  # the loop held 5 ms more: the read comes 5 ms after the send, by construction
        late = perf_counter_ns()
        with stamping() as stamp:
            data = await stream.read(65536)
        assert data.endswith(b"hello")
        # stamped inside the server's send, not when this loop got to read (after `late`).
        # The kernel's CLOCK_REALTIME stamp is moved onto perf_counter_ns by an offset read
        # with two clock calls (rxstamps.to_perf_ns), which a preemption between them can
        # skew: TOL_NS allows for that, 0.2 ms, far under the 5 ms the read was late by.
        assert sender.before - TOL_NS <= stamp.received_ns <= sender.after + TOL_NS
        assert stamp.received_ns < late - 4_000_000
    finally:
        await stream.aclose()
        sender.sock.close()


class _TwoSegments(_Sender):
    """A server thread that, on `go`, sends two parts GAP_NS apart, noting perf_counter_ns
    just before each send (`starts`)."""

    GAP_NS = 50_000_000

    def __init__(self) -> None:
        self.starts: list[int] = []
        super().__init__(b"")

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.recv(65536)
            self.go.wait(10)
            self.starts.append(perf_counter_ns())
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nfirst")
            while perf_counter_ns() < self.starts[0] + self.GAP_NS:
                pass
            self.starts.append(perf_counter_ns())
            conn.sendall(b"again")
            self.sent.set()
            conn.recv(1)


@linux_only
async def test_a_reader_thread_keeps_a_segment_its_own_stamp_while_the_loop_is_busy():
    # the kernel merges a segment into an unread one before it and keeps the newer stamp
    # (rxstamps' docstring, "Who reads"); with the event loop held up through both sends, a
    # loop reader would date "first" at the second send. A reader thread takes it off the
    # socket as it arrives: its stamp is before the second send began (GAP_NS, 50 ms, after).
    rxstamps.use_reader_threads(True)
    sender = _TwoSegments()
    try:
        stream = await ArrivalBackend().connect_tcp("127.0.0.1", sender.port, timeout=5)
        assert isinstance(stream, KernelStampedStream) and stream.threaded
        await stream.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        sender.go.set()
        assert sender.sent.wait(10)  # the loop is held through both sends
        await asyncio.sleep(0.05)  # the thread's two blocks reach the loop
        stamps = []
        data = b""
        while not data.endswith(b"again"):
            with stamping() as stamp:
                data += await asyncio.wait_for(stream.read(65536), 10)
            stamps.append(stamp.received_ns)
        first, second = sender.starts
        assert len(stamps) == 2  # two blocks, not one merged
        assert first - TOL_NS <= stamps[0] < second
        assert second - TOL_NS <= stamps[1]
        await stream.aclose()
    finally:
        rxstamps.use_reader_threads(False)
        sender.sock.close()


@linux_only
def test_once_one_socket_asked_for_stamps_the_kernel_stamps_at_once():
    # Linux turns stamping on and off machine-wide from a deferred work item (rxstamps'
    # docstring); the first enable() keeps a stamping socket open, so after this connection is
    # closed the next fresh connection's first segment is stamped without waiting: one try.
    with socket.create_server(("127.0.0.1", 0)) as server:
        sock = socket.create_connection(server.getsockname()[:2])
        assert rxstamps.enable(sock)
        sock.close()
    assert rxstamps._keeper is not None
    assert rxstamps.stamps_arrive(0)


@linux_only
async def test_a_body_past_the_high_water_mark_pauses_and_resumes_reading(reader):
    body = bytes(range(256)) * ((3 * HIGH_WATER) // 256)  # 3 MiB: pauses at least twice
    sender = _Sender(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    sender.go.set()
    async with httpx.AsyncClient(transport=measured_transport()) as client:
        resp = await client.get(f"http://127.0.0.1:{sender.port}/")
        assert isinstance(resp.extensions["network_stream"], KernelStampedStream)
        assert resp.content == body
    sender.sock.close()


async def test_an_event_loop_that_cannot_watch_sockets_keeps_python_stamps(monkeypatch):
    # Windows' proactor loop has no add_reader: the connection stays an ArrivalStream
    loop = asyncio.get_running_loop()

    def no_reader(*args: object) -> None:
        raise NotImplementedError

    monkeypatch.setattr(loop, "add_reader", no_reader)
    sender = _Sender(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    sender.go.set()
    async with httpx.AsyncClient(transport=measured_transport()) as client:
        resp = await client.get(f"http://127.0.0.1:{sender.port}/")
        assert isinstance(resp.extensions["network_stream"], ArrivalStream)
        assert resp.text == "ok"
    sender.sock.close()


@linux_only
def test_the_load_generators_blocking_reads_keep_the_kernels_stamp_too():
    sender = _Sender(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
    stream = BlockingArrivalBackend().connect_tcp("127.0.0.1", sender.port, timeout=5)
    try:
        stream.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        sender.go.set()
        assert sender.sent.wait(10)
        late = perf_counter_ns()
        with stamping() as stamp:
            assert stream.read(65536).endswith(b"hello")
        assert sender.before <= stamp.received_ns <= sender.after < late
    finally:
        stream.close()
        sender.sock.close()


class _Silent:
    """A server thread that accepts connections and neither reads nor writes until closed."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted(conn)

    def accepted(self, conn: socket.socket) -> None:
        """What to do with a new connection: nothing (a server that says nothing)."""

    def close(self) -> None:
        for c in self.conns:
            c.close()
        self.sock.close()


@linux_only
async def test_closing_the_stream_ends_a_read_and_a_write_that_wait(reader):
    # found in review: a read waiting on a silent server, and a write blocked on one that
    # never reads, must end when the connection is closed, not at their timeouts (none here;
    # the wait_for bounds only guard the test against hanging)
    silent = _Silent()
    try:
        reading = await ArrivalBackend().connect_tcp("127.0.0.1", silent.port, timeout=5)
        writing = await ArrivalBackend().connect_tcp("127.0.0.1", silent.port, timeout=5)
        assert isinstance(reading, KernelStampedStream)
        assert reading.threaded == (reader == "thread")
        read = asyncio.create_task(reading.read(65536))
        write = asyncio.create_task(writing.write(b"x" * (64 << 20)))  # far over the buffers
        await asyncio.sleep(0)  # one turn: the write fills the socket's buffers and waits
        assert writing._writable is not None
        await reading.aclose()
        await writing.aclose()
        assert await asyncio.wait_for(read, 30) == b""
        with pytest.raises(httpcore.WriteError):
            await asyncio.wait_for(write, 30)
        # nothing of the closed sockets is left watched: a new connection works, even one
        # that gets the same descriptor number
        again = await ArrivalBackend().connect_tcp("127.0.0.1", silent.port, timeout=5)
        assert isinstance(again, KernelStampedStream)
        await again.write(b"ping")
        await again.aclose()
    finally:
        silent.close()


@linux_only
def test_a_pooled_connection_is_not_reused_from_another_event_loop(reader):
    # found in review: a client kept across two asyncio.run calls sent its second request on
    # the first loop's connection and waited forever for the reply
    class KeepAlive(_Silent):
        def accepted(self, conn: socket.socket) -> None:
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

        def _answer(self, conn: socket.socket) -> None:
            try:
                while conn.recv(65536):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            except OSError:
                return  # close() shut the socket under this thread's recv (EBADF): done

    server = KeepAlive()
    client = httpx.AsyncClient(transport=measured_transport(), timeout=30)
    url = f"http://127.0.0.1:{server.port}/"
    try:
        assert asyncio.run(client.get(url)).text == "ok"
        assert asyncio.run(client.get(url)).text == "ok"  # a new connection, in the new loop
        assert len(server.conns) == 2
    finally:
        server.close()


def test_a_reader_thread_hands_blocks_over_at_most_every_post_every_ns():
    # KernelStampedStream._timeout_for: how long the thread's next recvmsg may wait (µs)
    wait = KernelStampedStream._timeout_for
    poll_us = int(rxstamps.READER_POLL_S * 1e6)
    assert wait([], 0) == poll_us  # nothing held: the stop check's period
    now = perf_counter_ns()
    every = rxstamps.POST_EVERY_NS
    # the first block after a pause (its stamp past the window of the last hand-over): at once
    assert wait([(now, b"x")], now - every) == 0
    # a block held inside the window: until the window ends, never longer than the window
    held = wait([(now, b"x")], now - every // 3)
    assert 0 < held <= (every - every // 3) // 1000
    # the window has passed while the block waited: at once
    assert wait([(now - every, b"x")], now - 2 * every + 1) == 0
