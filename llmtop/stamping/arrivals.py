"""An httpcore network backend on asyncio that stamps every block of bytes as it arrives.

Why (docs/method.md, "TTFT and E2E"): a chunk is stamped when its bytes are in llmtop's hands.
With httpcore's default backend (anyio) the bytes wait, after the kernel has handed them to
the event loop, for one more turn of the loop (anyio's read event, its cancel scope) and then
for h11, httpx's line decoder, the `ollama` client's JSON and pydantic work before the engine
can stamp the parsed chunk: ~0.3 ms per chunk on a 2-core VM (bench/clock_truth.py). Here the
protocol's `data_received` — the first Python code to see the bytes, in the same turn of the
loop that found the socket readable — records `perf_counter_ns()` next to each block; a
read hands the block on and notes its arrival in the request's open `SendStamp`
(`stamps.note_arrival`), and the engine, once it has parsed a chunk and knows it carries
text, stamps it with that arrival (`stamps.arrival_ns`). httpcore reads only when h11 needs
more bytes, so the block read last is the one that completed the chunk being parsed.

On Linux a plain TCP connection goes one step further: once connected, its socket is handed
to `rxstamps.KernelStampedStream`, which reads it with `recvmsg` and stamps each block with
the kernel's receive time (docs/method.md, "Kernel receive stamps"); this module's
`ArrivalStream` serves the rest (TLS, Unix sockets, other systems, loops without
`add_reader`). Both streams note the moment before a request's last send
(`stamps.note_written`), which becomes its send stamp.

What else differs from the anyio backend: reading is not paused between reads (the loop takes
bytes off the socket as they come; a buffer over `HIGH_WATER` bytes pauses it), and the
readiness check of an idle pooled connection also counts bytes or an end of stream that the
loop has already taken. Errors map to httpcore's exceptions as its anyio backend maps them
(connect: timeout → ConnectTimeout, OSError → ConnectError; read/write: timeout →
Read/WriteTimeout, a broken or closed connection → ReadError/WriteError).

httpx has no public way to give its transport a network backend (encode/httpx#3749, open), so
`measured_transport` sets it on the transport's pool (`_pool._network_backend`); when a
future httpx or httpcore moves those names the transport is left as it was (plain stamps at
the parse) and tests/unit/test_arrivals.py fails.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Iterable
from time import perf_counter_ns
from typing import Any

import httpcore
import httpx

from llmtop.stamping import rxstamps
from llmtop.stamping.bounds import BoundedTransport
from llmtop.stamping.netbuffer import BlockBuffer, read_block, socket_readable
from llmtop.stamping.stamps import HeadJoin, hold, note_written


class ArrivalStream(httpcore.AsyncNetworkStream):
    """One connection (`httpcore.AsyncNetworkStream`) whose reads note each block's arrival."""

    def __init__(self, transport: asyncio.Transport, protocol: BlockBuffer) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closed = False
        self._join = HeadJoin()

    @property
    def transport(self) -> asyncio.Transport:
        """The asyncio transport under this stream."""
        return self._transport

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        """At most `max_bytes` bytes (b"" at the end of the stream), waiting up to `timeout`
        seconds (None: forever). Raises httpcore.ReadTimeout / ReadError."""
        if self._closed:
            raise httpcore.ReadError("the connection was closed")
        if head := self._join.flush():  # a read before the body: the head goes alone
            await self._send(head, timeout)
        return await read_block(self._protocol, max_bytes, timeout, self._transport.resume_reading)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Hand `buffer` to the socket; waits (up to `timeout` s) only while the transport's
        buffer is over its high-water mark. Raises httpcore.WriteTimeout / WriteError."""
        buffer = self._join.take(buffer)  # a head with a body goes with it, in one send
        if buffer:
            await self._send(buffer, timeout)

    async def _send(self, buffer: bytes, timeout: float | None) -> None:  # noqa: ASYNC109
        await hold()  # a request timed to leave at a set moment waits here, all else done
        if self._closed or self._protocol.ended or self._transport.is_closing():
            raise httpcore.WriteError("the connection was closed")
        t_ns = perf_counter_ns()  # before: see rxstamps.KernelStampedStream.write
        self._transport.write(buffer)  # asyncio sends at once what the socket takes
        note_written(t_ns)
        try:
            async with asyncio.timeout(timeout):
                await self._protocol.wait_writable()
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(f"could not write within {timeout} s") from exc
        if self._protocol.error is not None:
            raise httpcore.WriteError(str(self._protocol.error)) from self._protocol.error

    async def aclose(self) -> None:
        """Close the connection (pending writes are flushed first by asyncio)."""
        self._closed = True
        self._transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface, as all here
    ) -> httpcore.AsyncNetworkStream:
        """TLS over this connection (asyncio's `loop.start_tls`); the same protocol keeps
        stamping. Raises httpcore.ConnectTimeout / ConnectError (and closes the connection)."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                tls = await loop.start_tls(self._transport, self._protocol, ssl_context,
                                           server_hostname=server_hostname)
        except TimeoutError as exc:
            await self.aclose()
            raise httpcore.ConnectTimeout(f"TLS handshake over {timeout} s") from exc
        except (OSError, ssl.SSLError) as exc:
            await self.aclose()
            raise httpcore.ConnectError(str(exc)) from exc
        if tls is None:
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        self._protocol.transport = tls
        return ArrivalStream(tls, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        """httpcore's names: ssl_object, client_addr, server_addr, socket, is_readable (an
        idle connection with bytes or an end already arrived is not reusable)."""
        if info == "is_readable":
            p = self._protocol
            sock = self._transport.get_extra_info("socket")
            return bool(p.blocks) or p.ended or socket_readable(sock)
        names = {"ssl_object": "ssl_object", "client_addr": "sockname",
                 "server_addr": "peername", "socket": "socket"}
        return self._transport.get_extra_info(names[info]) if info in names else None


class ArrivalBackend(httpcore.AsyncNetworkBackend):
    """Connections as `ArrivalStream`s (asyncio only; TCP_NODELAY as asyncio sets it)."""

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to host:port within `timeout` s: a `rxstamps.KernelStampedStream` where the
        kernel stamps receipts (Linux, an event loop with `add_reader`), else an
        `ArrivalStream`. Raises ConnectTimeout / ConnectError."""
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        stream = await _connect(lambda: loop.create_connection(BlockBuffer, host, port,
                                                               local_addr=local),
                                timeout, socket_options)
        return _kernel_stamped(stream) or stream

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to the Unix socket `path`. Raises ConnectTimeout / ConnectError."""
        loop = asyncio.get_running_loop()
        return await _connect(lambda: loop.create_unix_connection(BlockBuffer, path),
                              timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        """asyncio.sleep (httpcore's retry back-off)."""
        await asyncio.sleep(seconds)


async def _connect(open_: Any, limit_s: float | None,
                   options: Iterable[httpcore.SOCKET_OPTION] | None) -> ArrivalStream:
    try:
        async with asyncio.timeout(limit_s):
            transport, protocol = await open_()
    except TimeoutError as exc:
        raise httpcore.ConnectTimeout(f"no connection within {limit_s} s") from exc
    except OSError as exc:
        raise httpcore.ConnectError(str(exc)) from exc
    sock: socket.socket | None = transport.get_extra_info("socket")
    for option in options or ():
        if sock is not None:
            sock.setsockopt(*option)
    return ArrivalStream(transport, protocol)


def _kernel_stamped(stream: ArrivalStream) -> rxstamps.KernelStampedStream | None:
    """The connection moved onto a `KernelStampedStream` reading its socket with recvmsg, or
    None (and `stream` left as it is) where the kernel cannot stamp it. Nothing has been read
    yet: httpcore has not sent its request."""
    transport = stream.transport
    sock = transport.get_extra_info("socket")
    if sock is None or not rxstamps.enable(sock):
        return None
    try:
        raw = socket.socket(sock.family, sock.type, sock.proto, fileno=os.dup(sock.fileno()))
    except OSError:
        return None
    raw.setblocking(False)
    try:
        kernel = rxstamps.KernelStampedStream(raw, BlockBuffer(), adopt_socket)
    except (NotImplementedError, RuntimeError, OSError):  # e.g. Windows' proactor: no add_reader
        raw.close()
        return None
    transport.abort()  # closes the loop's own descriptor; `raw` keeps the connection
    return kernel


async def adopt_socket(sock: socket.socket, limit_s: float | None) -> ArrivalStream:
    """An `ArrivalStream` over the connected socket `sock` (asyncio's transport takes it over;
    TLS goes through asyncio's `start_tls`). Raises ConnectTimeout / ConnectError."""
    loop = asyncio.get_running_loop()
    return await _connect(lambda: loop.create_connection(BlockBuffer, sock=sock), limit_s, ())


# An idle pooled connection is dropped after this many seconds, before the server's own
# keep-alive timeout closes it: llama-server (cpp-httplib) says `keep-alive: timeout=5` and
# closes at 5 s, httpx's default expiry is also 5 s, and a request sent on a connection the
# server is closing that instant fails with "Server disconnected without sending a response"
# (seen here: 1 request in 32 of a sweep whose calibration left the pool idle ~5 s).
KEEPALIVE_EXPIRY_S = 2.0


def measured_transport(
    proxy: str | None = None, limits: httpx.Limits | None = None
) -> httpx.AsyncHTTPTransport:
    """An httpx transport (httpx's pool sizes unless `limits` are given; idle connections
    expire after KEEPALIVE_EXPIRY_S whatever `limits` say; `proxy` as given) whose
    connections stamp arriving bytes (`ArrivalBackend`) and whose replies are bounded
    (bounds.BoundedTransport: line size, decompressed size). Pass it as `transport=` to
    httpx.AsyncClient (or the `ollama` client) instead of `proxy=` / `limits=`."""
    base = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
    expiry = min(base.keepalive_expiry or KEEPALIVE_EXPIRY_S, KEEPALIVE_EXPIRY_S)
    limits = httpx.Limits(max_connections=base.max_connections,
                          max_keepalive_connections=base.max_keepalive_connections,
                          keepalive_expiry=expiry)
    return stamp_arrivals(BoundedTransport(trust_env=False, proxy=proxy, limits=limits))


def stamp_arrivals(transport: httpx.AsyncHTTPTransport) -> httpx.AsyncHTTPTransport:
    """Give `transport`'s connection pool the `ArrivalBackend` (module docstring: httpx has no
    public way); returns `transport`. One whose pool lacks those names is left as it is."""
    pool = getattr(transport, "_pool", None)
    if pool is not None and hasattr(pool, "_network_backend"):
        pool._network_backend = ArrivalBackend()
    return transport
