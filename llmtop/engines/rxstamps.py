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

`KernelStampedStream` is an httpcore network stream over a plain non-blocking TCP socket read
with `recvmsg` from the event loop's reader callback; `engines/arrivals.py` uses it for plain
TCP connections on Linux and keeps its asyncio-protocol stream elsewhere (TLS, Unix sockets,
other systems, event loops without `add_reader`).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import sys
from collections.abc import Awaitable, Callable
from time import perf_counter_ns, time_ns
from typing import Any

import httpcore

from llmtop.engines.netbuffer import BlockBuffer, read_block, socket_readable
from llmtop.engines.stamps import note_written

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux asm-generic/socket.h
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
READ_SIZE = 1 << 16  # bytes per recvmsg, as httpcore asks for
ANC_SIZE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0  # one timespec
MAX_AGE_NS = 10 * 10**9  # an older kernel stamp means the wall clock moved: not used


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
    return True


def to_perf_ns(ancdata: list[tuple[int, int, bytes]], now_ns: int, offset_ns: int) -> int:
    """The perf_counter_ns of the kernel's stamp in `ancdata` (recvmsg's ancillary data),
    given `now_ns` (perf_counter_ns at the read) and `offset_ns` (time_ns() − perf_counter_ns()
    then); `now_ns` when there is no stamp or it does not fit (module docstring)."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            t: int = sec * 1_000_000_000 + nsec - offset_ns
            if now_ns - MAX_AGE_NS <= t <= now_ns:
                return t
    return now_ns


Adopt = Callable[[socket.socket, "float | None"], Awaitable[httpcore.AsyncNetworkStream]]


class KernelStampedStream(httpcore.AsyncNetworkStream):
    """A connected non-blocking TCP socket `sock` read with recvmsg; each block of bytes goes
    into `sink` with the kernel's receive stamp. Reading pauses while `sink` holds more than
    `high_water` bytes. `adopt(sock, timeout)` gives the socket to a stream that can do TLS
    (`start_tls`). Raises NotImplementedError or RuntimeError when the running event loop
    cannot watch a socket (`add_reader`)."""

    def __init__(self, sock: socket.socket, sink: BlockBuffer, high_water: int,
                 adopt: Adopt) -> None:
        self.sock = sock
        self.sink = sink
        self.high_water = high_water
        self._adopt = adopt
        self._loop = asyncio.get_running_loop()
        self._reading = False
        self._closed = False
        self._start_reading()

    def _start_reading(self) -> None:
        if not self._reading and not self.sink.ended and not self._closed:
            self._loop.add_reader(self.sock.fileno(), self._on_readable)
            self._reading = True

    def _stop_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self.sock.fileno())
            self._reading = False

    def resume_reading(self) -> None:
        """Read again once the consumer has drained the buffer."""
        self._start_reading()

    def _on_readable(self) -> None:
        """Take what the socket holds, one recvmsg at a time, each block with its stamp."""
        while True:
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
            now = perf_counter_ns()
            self.sink.add_block(to_perf_ns(anc, now, time_ns() - perf_counter_ns()), data)
            if self.sink.buffered > self.high_water:
                self._stop_reading()
                self.sink.paused_reading = True
                return

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        """At most `max_bytes` bytes (b"" at the end), within `timeout` s (netbuffer.read_block).
        Raises httpcore.ReadTimeout / ReadError."""
        if self._closed:
            raise httpcore.ReadError("the connection was closed")
        return await read_block(self.sink, max_bytes, timeout, self.resume_reading)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Send all of `buffer` within `timeout` s. Raises httpcore.WriteTimeout / WriteError."""
        if not buffer:
            return
        if self._closed or self.sink.ended:
            raise httpcore.WriteError("the connection was closed")
        try:
            async with asyncio.timeout(timeout):
                await self._loop.sock_sendall(self.sock, buffer)
            note_written(perf_counter_ns())
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(f"could not write within {timeout} s") from exc
        except OSError as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        """Stop reading and close the socket."""
        if not self._closed:
            self._closed = True
            self._stop_reading()
            self.sock.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> httpcore.AsyncNetworkStream:
        """TLS over this connection: the socket is handed to an asyncio transport (TLS bytes
        are stamped in Python from then on, as `arrivals.ArrivalStream` does)."""
        self._stop_reading()
        self._closed = True  # the socket now belongs to the new stream
        plain = await self._adopt(self.sock, timeout)
        return await plain.start_tls(ssl_context, server_hostname, timeout)

    def get_extra_info(self, info: str) -> Any:
        """httpcore's names: client_addr, server_addr, socket, is_readable (an idle connection
        with bytes or an end already arrived is not reusable); no ssl_object (plain TCP)."""
        if info == "is_readable":
            return bool(self.sink.blocks) or self.sink.ended or socket_readable(self.sock)
        if info == "socket":
            return self.sock
        if info in ("client_addr", "server_addr"):
            try:
                return self.sock.getsockname() if info == "client_addr" else self.sock.getpeername()
            except OSError:
                return None
        return None
