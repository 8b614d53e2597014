"""Receive stamps from the kernel: when a TCP segment reached the machine, not when llmtop ran.

Why (docs/method.md, "Chunk stamps"): a stamp taken in Python is late by however long the
process waited to run after its bytes arrived: ~0.1–0.2 ms on a quiet 2-core VM, and several
milliseconds when other programs keep both cores busy (bench/clock_truth.py's maxima). With
`SO_TIMESTAMPNS` set on a socket, Linux stamps each arriving segment as it is received and
`recvmsg` returns the stamp of the last segment it read (`SCM_TIMESTAMPNS`, a CLOCK_REALTIME
timespec; Linux's Documentation/networking/timestamping.rst, "SO_TIMESTAMPNS"). The stamp is
moved onto `perf_counter_ns`'s clock (CLOCK_MONOTONIC) by the offset between the two clocks
read together at the read; a stamp that does not fit (later than now, or older than
`MAX_AGE_NS`: the wall clock was stepped) is replaced by the read's own time.

Linux stamps arriving packets only while some socket on the machine has asked, and it turns
stamping on from a deferred work item (net/core/dev.c, `net_enable_timestamp` schedules
`netstamp_work`), off again the same way when the last such socket closes. Until that work has
run, segments arrive unstamped: on a busy machine the first reply on a fresh connection was
stamped by Python (seen once in a cold CI run). So the first `enable` in a process also opens
one stamping UDP socket that stays open (`_keep_stamping_on`: from then on no connection waits
for the work item, and closing connections never toggles it), and waits, at most
`STAMPING_WAIT_S`, until a loopback segment comes back stamped.

`KernelStampedStream` is an httpcore network stream over a plain TCP socket read with
`recvmsg`; `stamping/arrivals.py` uses it for plain TCP connections on Linux and keeps its
asyncio-protocol stream elsewhere (TLS, Unix sockets, other systems, event loops without
`add_reader`).

Who reads. The kernel keeps one stamp per queued block, and a segment that arrives while an
earlier one is still unread is merged into it with the newer stamp (net/ipv4/tcp_input.c,
`tcp_try_coalesce`; bench/rx_coalesce.py measured it). So a first chunk left unread until
the next one arrives is dated at the next one: TTFT too long by a token gap. Read from the
event loop's reader callback (the default), a socket waits while the loop runs anything else;
in the TUI a frame or a layout takes 5–15 ms, longer than many engines' token gap, and
bench/clock_truth.py's tui path read p90 +5.3 ms, max +10.7 ms quiet. A process whose loop
does other heavy work therefore calls `use_reader_threads()`: each connection's socket is
then read by its own thread blocked in `recvmsg` (started at the connection's first use),
which the kernel wakes as a segment arrives, without waiting for the event loop or the GIL
(the system call runs without it); the blocks and their stamps go to the loop with
`call_soon_threadsafe`, the first after a pause at once and those that follow at most every
POST_EVERY_NS together (each hand-over wakes the loop: 56 → 36 wake-ups a second in the TUI
streaming 50 chunks a second). The thread checks every READER_POLL_S whether it should stop
(`start_tls` hands the socket to asyncio; an HTTPS tunnel's set-up waits that long once);
closing the stream shuts the socket down, which wakes the thread at once, and the thread
closes it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import sys
import threading
from collections.abc import Awaitable, Callable
from time import perf_counter_ns, sleep, time_ns
from typing import Any

import httpcore

from llmtop.stamping.netbuffer import HIGH_WATER, BlockBuffer, read_block, socket_readable, wake
from llmtop.stamping.stamps import HeadJoin, hold, note_written

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux asm-generic/socket.h
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
READ_SIZE = 1 << 16  # bytes per recvmsg, as httpcore asks for
ANC_SIZE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0  # one timespec
MAX_AGE_NS = 10 * 10**9  # an older kernel stamp means the wall clock moved: not used
STAMPING_WAIT_S = 0.5  # the most the first connection waits for the kernel to stamp packets
READER_POLL_S = 0.1  # a reader thread's longest wait in recvmsg before it checks for a stop
# A reader thread hands blocks to the event loop at most this often, the first after a pause
# at once: each hand-over wakes the loop (a system call and a switch, ~0.1-0.2 ms of CPU on a
# small VM), and a stream's consumer gains nothing from waking 85 times a second; every block
# keeps its own stamp. Under stamping/stamps.py's DRAIN_TIMEOUT_S (50 ms): a done chunk and the
# body's end held together still reach the engine before it gives up on the end.
POST_EVERY_NS = 30_000_000
_keeper: socket.socket | None = None  # the process's stamping socket (module docstring)
_reader_threads = False  # use_reader_threads()


def use_reader_threads(on: bool = True) -> None:
    """Read every kernel-stamped connection opened from now on in its own thread (module
    docstring, "Who reads"): for a process whose event loop is often busy (the TUI)."""
    global _reader_threads
    _reader_threads = on


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp `sock`'s arriving segments; False where it cannot (not Linux,
    not TCP, or the option refused)."""
    if sys.platform != "linux" or sock.type != socket.SOCK_STREAM:
        return False
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    if _keeper is None:
        _keep_stamping_on()
    return True


def _keep_stamping_on() -> None:
    """Open the process's stamping socket (module docstring) and wait, at most
    STAMPING_WAIT_S, until the kernel stamps a loopback segment. Where the machine refuses
    (no loopback, option refused), stamps fall back to the read's own time, as without this."""
    global _keeper
    try:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return
    _keeper = keeper
    stamps_arrive(STAMPING_WAIT_S)


def stamps_arrive(wait_s: float) -> bool:
    """Whether a byte sent over a loopback TCP connection comes back with a kernel stamp,
    trying every 0.5 ms for at most `wait_s` seconds; False also where the machine has no
    loopback or refuses the option (OSError)."""
    deadline = perf_counter_ns() + int(wait_s * 1e9)
    try:
        with socket.create_server(("127.0.0.1", 0)) as server, \
                socket.create_connection(server.getsockname()[:2], timeout=wait_s + 1) as out:
            conn, _ = server.accept()
            with conn:
                conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                conn.settimeout(wait_s + 1)
                while True:
                    out.sendall(b"x")
                    _, anc, _, _ = conn.recvmsg(1, ANC_SIZE)
                    if kernel_stamp(anc) is not None:
                        return True
                    if perf_counter_ns() > deadline:
                        return False
                    sleep(0.0005)
    except OSError:
        return False


def kernel_stamp(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    """The kernel's receive stamp in `ancdata` (recvmsg's ancillary data) as CLOCK_REALTIME
    ns, or None when it holds none."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            return int(sec * 1_000_000_000 + nsec)
    return None


def to_perf_ns(ancdata: list[tuple[int, int, bytes]], now_ns: int, offset_ns: int) -> int:
    """The perf_counter_ns of the kernel's stamp in `ancdata` (recvmsg's ancillary data),
    given `now_ns` (perf_counter_ns at the read) and `offset_ns` (time_ns() − perf_counter_ns()
    then); `now_ns` when there is no stamp or it does not fit (module docstring)."""
    wall = kernel_stamp(ancdata)
    if wall is not None and now_ns - MAX_AGE_NS <= wall - offset_ns <= now_ns:
        return wall - offset_ns
    return now_ns


def stamp_of(ancdata: list[tuple[int, int, bytes]]) -> int:
    """The perf_counter_ns at which the bytes a recvmsg just returned with `ancdata` arrived:
    the kernel's stamp where it fits, else now (`to_perf_ns`, the clocks read here)."""
    now = perf_counter_ns()
    return to_perf_ns(ancdata, now, time_ns() - perf_counter_ns())


Adopt = Callable[[socket.socket, "float | None"], Awaitable[httpcore.AsyncNetworkStream]]


class KernelStampedStream(httpcore.AsyncNetworkStream):
    """A connected non-blocking TCP socket `sock` read with recvmsg; each block of bytes goes
    into `sink` with the kernel's receive stamp. Read from the event loop's reader callback, or
    (`threaded`, default `use_reader_threads()`'s choice) by a thread of its own from the
    first read or write on (module docstring, "Who reads"). Reading pauses while `sink` holds
    more than netbuffer.HIGH_WATER bytes. `adopt(sock, timeout)` gives the socket to a stream
    that can do TLS (`start_tls`). The stream belongs to the event loop it was made in; used
    from another it raises ReadError/WriteError and reports itself unusable to httpcore's
    pool. Raises NotImplementedError, RuntimeError or OSError when the running event loop
    cannot watch the socket (`add_reader`)."""

    def __init__(self, sock: socket.socket, sink: BlockBuffer, adopt: Adopt,
                 threaded: bool | None = None) -> None:
        self.sock = sock
        self.sink = sink
        self._adopt = adopt
        self._loop = asyncio.get_running_loop()
        self._reading = False
        self._closed = False
        self._writable: asyncio.Future[None] | None = None
        self._join = HeadJoin()
        self.threaded = _reader_threads if threaded is None else threaded
        self._thread: threading.Thread | None = None
        self._go = threading.Event()  # the reader thread may read (cleared: paused)
        self._go.set()
        self._stop = False  # the reader thread is to leave the socket (start_tls)
        if self.threaded:
            self._loop.add_writer(sock.fileno(), lambda: None)  # fails as add_reader would
            self._loop.remove_writer(sock.fileno())
        else:
            self._start_reading()

    def _start_reading(self) -> None:
        if self.threaded:
            self._go.set()
            if self._thread is None and not self._closed and not self.sink.ended:
                self.sock.setblocking(True)  # recvmsg waits in the kernel; sends pass DONTWAIT
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                                     struct.pack("ll", 0, int(READER_POLL_S * 1e6)))
                self._thread = threading.Thread(target=self._read_on, daemon=True,
                                                name="llmtop-rx")
                self._thread.start()
            return
        if not self._reading and not self.sink.ended and not self._closed:
            self._loop.add_reader(self.sock.fileno(), self._on_readable)
            self._reading = True

    def _stop_reading(self) -> None:
        if self.threaded:
            self._go.clear()
            return
        if self._reading:
            self._reading = False
            if not self._loop.is_closed():
                self._loop.remove_reader(self.sock.fileno())

    def resume_reading(self) -> None:
        """Read again once the consumer has drained the buffer."""
        self._start_reading()

    def _on_readable(self) -> None:
        """One recvmsg per wake-up, its block with its stamp (as asyncio's own transports read:
        the loop calls again while bytes remain, and reading on to EAGAIN would cost a
        system call and an exception per chunk)."""
        try:
            data, anc, _, _ = self.sock.recvmsg(READ_SIZE, ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._stop_reading()
            self.sink.end(exc)
            return
        if not data:
            self._stop_reading()
            self.sink.end(None)
            return
        self._arrived(stamp_of(anc), data)

    def _arrived(self, t_ns: int, data: bytes) -> None:
        """A block read (on the loop's thread): into the sink; pause past HIGH_WATER."""
        self.sink.add_block(t_ns, data)
        if self.sink.buffered > HIGH_WATER:
            self._stop_reading()
            self.sink.paused_reading = True

    def _read_on(self) -> None:
        """The reader thread: recvmsg until the end, an error, a stop or its loop's end; every
        block goes to the loop with its stamp, the first after a pause at once, those that
        follow within POST_EVERY_NS of the last hand-over together (`_timeout_for`). It
        closes the socket as it leaves, unless it was stopped (the socket goes on to TLS)."""
        end: tuple[BaseException | None] | None = None
        held: list[tuple[int, bytes]] = []  # read, not yet handed to the loop
        posted_ns = 0  # the last hand-over
        timeout_us = int(READER_POLL_S * 1e6)  # SO_RCVTIMEO as set now
        while not self._stop:
            if self._loop.is_closed():  # left open by a loop that has ended: nobody reads
                break
            if not held and not self._go.wait(READER_POLL_S):
                continue
            wait_us = self._timeout_for(held, posted_ns)
            if wait_us == 0:  # the held blocks are due
                if not self._post(self._arrived_all, held):
                    break
                held, posted_ns = [], perf_counter_ns()
                continue
            if wait_us != timeout_us:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                                     struct.pack("ll", *divmod(wait_us, 1_000_000)))
                timeout_us = wait_us
            try:
                data, anc, _, _ = self.sock.recvmsg(READ_SIZE, ANC_SIZE)
            except (BlockingIOError, InterruptedError):  # nothing came within the wait
                continue
            except OSError as exc:
                end = (None if self._closed else exc,)
                break
            if not data:
                end = (None,)
                break
            held.append((stamp_of(anc), data))
        if held and not self._closed:
            self._post(self._arrived_all, held)
        if end is not None and not self._closed:  # closed: aclose has ended the sink
            self._post(self.sink.end, end[0])
        if not self._stop:
            self.sock.close()

    @staticmethod
    def _timeout_for(held: list[tuple[int, bytes]], posted_ns: int) -> int:
        """How long the next recvmsg may wait (µs): READER_POLL_S with nothing held; with
        blocks held, until POST_EVERY_NS after the last hand-over, 0 once that has come (or
        when the first held block came after a pause: it goes at once)."""
        if not held:
            return int(READER_POLL_S * 1e6)
        due_ns = posted_ns + POST_EVERY_NS
        if held[0][0] >= due_ns:
            return 0
        return max(0, (due_ns - perf_counter_ns()) // 1000)

    def _arrived_all(self, blocks: list[tuple[int, bytes]]) -> None:
        """Blocks read by the reader thread, each with its stamp (on the loop's thread)."""
        for t_ns, data in blocks:
            self._arrived(t_ns, data)

    def _post(self, fn: Callable[..., None], *args: Any) -> bool:
        """Run fn(*args) on the loop's thread; False once the loop is closed."""
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            return False
        return True

    def _usable_here(self) -> bool:
        """Open, and used from the event loop it belongs to."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return not self._closed and running is self._loop

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        """At most `max_bytes` bytes (b"" at the end), within `timeout` s (netbuffer.read_block).
        Raises httpcore.ReadTimeout / ReadError."""
        if not self._usable_here():
            raise httpcore.ReadError("the connection was closed or belongs to another loop")
        if head := self._join.flush():  # a read before the body: the head goes alone
            await self._send(head, timeout)
        if self.threaded and self._thread is None:
            self._start_reading()
        return await read_block(self.sink, max_bytes, timeout, self.resume_reading)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Send all of `buffer` within `timeout` s, and note (`stamps.note_written`) the moment
        just before the send that completed it: on loopback the receiver is woken inside that
        send and may take this CPU as it returns, so a stamp after it could be late by the
        receiver's whole turn. Raises httpcore.WriteTimeout / WriteError."""
        buffer = self._join.take(buffer)  # a head with a body goes with it, in one send
        if buffer:
            await self._send(buffer, timeout)

    async def _send(self, buffer: bytes, timeout: float | None) -> None:  # noqa: ASYNC109
        await hold()  # a request timed to leave at a set moment waits here, all else done
        if not self._usable_here() or self.sink.ended:
            raise httpcore.WriteError("the connection was closed or belongs to another loop")
        if self.threaded and self._thread is None:
            self._start_reading()  # before the send: the reply may come at once
        view = memoryview(buffer)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    t_ns = perf_counter_ns()
                    try:
                        view = view[self.sock.send(view, socket.MSG_DONTWAIT):]
                    except (BlockingIOError, InterruptedError):
                        pass
                    if not view:
                        note_written(t_ns)
                        return
                    await self._wait_writable()
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(f"could not write within {timeout} s") from exc
        except OSError as exc:
            raise httpcore.WriteError(str(exc) or type(exc).__name__) from exc

    async def _wait_writable(self) -> None:
        """Until the socket takes more bytes; raises ConnectionAbortedError if closed first."""
        fd = self.sock.fileno()
        self._writable = self._loop.create_future()
        self._loop.add_writer(fd, wake, self._writable)
        try:
            await self._writable
        finally:
            self._writable = None
            if not self._loop.is_closed():
                self._loop.remove_writer(fd)

    async def aclose(self) -> None:
        """Stop reading, wake a read or write still waiting (they end with ReadError /
        WriteError or the end of the stream), and close the socket (a reader thread is woken
        by the shutdown and closes it)."""
        if not self._closed:
            self._closed = True
            self._stop_reading()
            if self._writable is not None and not self._writable.done():
                self._writable.set_exception(ConnectionAbortedError("the connection was closed"))
                await asyncio.sleep(0)  # let the writer remove its registration first
            self.sink.end(self.sink.error)
            if self._thread is not None:
                self._go.set()
                try:
                    self.sock.shutdown(socket.SHUT_RDWR)
                except OSError:  # already closed by the thread, or never connected
                    pass
            else:
                self.sock.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> httpcore.AsyncNetworkStream:
        """TLS over this connection: the socket is handed to an asyncio transport (TLS bytes
        are stamped in Python from then on, as `arrivals.ArrivalStream` does); a reader thread
        is stopped first (within READER_POLL_S)."""
        self._stop_reading()
        if self._thread is not None:
            self._stop = True
            self._go.set()
            await asyncio.to_thread(self._thread.join)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
            self.sock.setblocking(False)
        self._closed = True  # the socket now belongs to the new stream
        plain = await self._adopt(self.sock, timeout)
        return await plain.start_tls(ssl_context, server_hostname, timeout)

    def get_extra_info(self, info: str) -> Any:
        """httpcore's names: client_addr, server_addr, socket, is_readable (an idle connection
        with bytes or an end already arrived is not reusable); no ssl_object (plain TCP)."""
        if info == "is_readable":  # True also drops a connection of another event loop
            return (not self._usable_here() or bool(self.sink.blocks) or self.sink.ended
                    or socket_readable(self.sock))
        if info == "socket":
            return self.sock
        if info in ("client_addr", "server_addr"):
            try:
                return self.sock.getsockname() if info == "client_addr" else self.sock.getpeername()
            except OSError:
                return None
        return None
