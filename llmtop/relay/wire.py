"""The relay's streamed upstream calls: HTTP/1.1 on asyncio, responses parsed by httptools.

Why not httpx on this path: per upstream chunk httpx walks a dozen coroutine frames (httpx,
httpcore, h11's pure-Python parser, anyio's per-read cancel scope) before the relay sees a
byte. Measured side by side on the scripted upstream (21 chunks, 10 ms apart; relay CPU per
relayed request, user+sys, 2-core VM): httpx 13.8 ms, aiohttp 8.3 ms, this module 6.3 ms
(the rest of each relay the same bare ASGI app). httptools is the C parser (llhttp) that
uvicorn already uses for the relay's own requests; here it parses the upstream's status
line, headers, chunked framing and keep-alive; this module only moves bytes.

* `Pool(url)`: the idle keep-alive connections to one upstream (`scheme://host:port/path`,
  https through the ssl module); `await pool.request(method, path, body, marks)` → a
  `WireResponse` once the status line and headers are in. On a pooled connection the
  request is written when `request` is called, before its result is awaited.
* Failures raise httpx's exception classes, so they map to the same `Failure`s as before
  (`llmtop.engines.http.failure_for_transport`): ConnectError / ConnectTimeout, ReadTimeout
  (no byte for read_timeout_s), RemoteProtocolError (a broken or cut-off response).
* A reused connection the upstream closed while idle (uvicorn's keep-alive timeout is 5 s)
  is retried once on a new connection, as long as not one byte of the answer came back.
* Backpressure: reading from the upstream pauses while more than MAX_BUFFERED chunks wait
  for a reader that is behind (a client that stops reading), so nothing grows unbounded.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from time import perf_counter_ns
from urllib.parse import urlsplit

import httptools
import httpx

from llmtop import __version__

CONNECT_START = "connection.connect_tcp.started"  # the names httpcore's trace uses
CONNECT_DONE = "connection.connect_tcp.complete"
MAX_BUFFERED = 64  # body chunks held for a slow reader before the upstream is paused


class _Connection(asyncio.Protocol):
    """One keep-alive connection carrying one response at a time. The parser's callbacks
    fill `chunks` (body bytes not yet taken) and the flags a reader waits on."""

    def __init__(self, read_timeout_s: float) -> None:
        self.read_timeout_s = read_timeout_s
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._waiter: asyncio.Future[None] | None = None
        self.reset()

    def reset(self) -> None:
        """Ready for the next response on this connection."""
        self.parser = httptools.HttpResponseParser(self)
        self.chunks: list[bytes] = []
        self.headers_done = False
        self.complete = False
        self.received = False  # any byte of this response
        self.framed = False  # Content-Length or chunked: the end is in the bytes, not the close
        self.keep_alive = False  # the parser's verdict, read with the headers
        self.error: Exception | None = None
        self.paused = False

    # ------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = httpx.RemoteProtocolError(f"the upstream's reply is not HTTP/1.1: {exc}")
            self.close()
        if len(self.chunks) > MAX_BUFFERED and not self.paused and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and self.error is None:
            if self.headers_done and not self.framed:
                self.complete = True  # a body delimited by the connection's close
            else:
                why = f" ({exc})" if exc else ""
                self.error = httpx.RemoteProtocolError(
                    "the upstream closed the connection before the end of its reply" + why
                )
        self._wake()

    # ------------------------------------------------------------- httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.headers_done = True
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.complete = True

    # ------------------------------------------------------------- the reader's side

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _time_out(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(httpx.ReadTimeout(
                f"no data from the upstream for {self.read_timeout_s:g} s"))

    async def wait(self) -> None:
        """Until the parser has news (headers, body, the end, an error); ReadTimeout after
        read_timeout_s without one."""
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        timer = loop.call_later(self.read_timeout_s, self._time_out)
        try:
            await self._waiter
        finally:
            timer.cancel()
            self._waiter = None

    def take(self) -> list[bytes]:
        """The body chunks received so far (emptied), resuming a paused upstream."""
        chunks, self.chunks = self.chunks, []
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return chunks

    def close(self) -> None:
        """Close the connection (the upstream sees it and stops generating)."""
        if self.transport is not None:
            self.transport.close()


class WireResponse:
    """The upstream's answer while its body streams: `status_code`, `aiter_bytes()`,
    `aread()`, `aclose()` (what the relay's stream uses of an httpx.Response)."""

    def __init__(self, pool: Pool, conn: _Connection) -> None:
        self._pool = pool
        self._conn = conn
        self._released = False
        self.status_code: int = conn.parser.get_status_code()

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives, one bytes object per read. Raises ReadTimeout or
        RemoteProtocolError (httpx's classes)."""
        conn = self._conn
        while True:
            if conn.chunks:
                for chunk in conn.take():
                    yield chunk
            elif conn.complete:
                self._release()
                return
            elif conn.error is not None:
                raise conn.error
            else:
                await conn.wait()

    async def aread(self) -> bytes:
        """The whole body (an error reply's)."""
        return b"".join([chunk async for chunk in self.aiter_bytes()])

    async def aclose(self) -> None:
        """Done with the response: its connection goes back to the pool when the reply was
        read to its end, else it is closed."""
        if not self._released:
            self._released = True
            self._conn.close()

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self._pool.release(self._conn)


class Pool:
    """Keep-alive connections to one upstream base URL ("http://127.0.0.1:11434[/path]").
    Timeouts in seconds; headers: sent with every request (a dict of str)."""

    def __init__(self, url: str, *, connect_timeout_s: float, read_timeout_s: float,
                 headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        netloc = f"[{self.host}]" if ":" in self.host else self.host
        fields = {"Host": f"{netloc}:{self.port}", "User-Agent": f"llmtop-relay/{__version__}",
                  **(headers or {})}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fields.items()).encode("latin-1")
        self._idle: list[_Connection] = []

    def request(self, method: str, path: str, body: bytes,
                marks: dict[str, int]) -> asyncio.Future[WireResponse]:
        """Send one request; the task's result is the response once its headers are in.

        On a pooled connection the request is written before this returns (so it is on the
        wire before anything else the relay does for it); a new connection's TCP connect is
        stamped in `marks` (perf_counter ns, httpcore's trace names). Awaiting raises
        ConnectError, ConnectTimeout, ReadTimeout or RemoteProtocolError. Cancelling the task
        closes the connection."""
        request = (f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1") + self._head
                   + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        conn = self._idle_connection()
        answer = asyncio.ensure_future(self._answer(conn, request, marks))
        if conn is not None and conn.transport is not None:
            conn.transport.write(request)
            # cancelled before it ran (the client left at once): the request is out, so close
            close = conn.close
            answer.add_done_callback(lambda task: task.cancelled() and close())
        return answer

    async def _answer(self, conn: _Connection | None, request: bytes,
                      marks: dict[str, int]) -> WireResponse:
        if conn is not None:
            try:
                return await self._headers(conn)
            except httpx.RemoteProtocolError:
                if conn.received:
                    raise  # the upstream answered: not a stale keep-alive connection
        conn = await self._connect(marks)
        assert conn.transport is not None
        conn.transport.write(request)
        return await self._headers(conn)

    def release(self, conn: _Connection) -> None:
        """Take back a connection whose response was read to its end."""
        if conn.closed or not conn.keep_alive:
            conn.close()
            return
        conn.reset()
        self._idle.append(conn)

    async def aclose(self) -> None:
        """Close every idle connection."""
        while self._idle:
            self._idle.pop().close()

    def _idle_connection(self) -> _Connection | None:
        """The most recently used idle connection still open, which sent nothing while idle
        (a stray reply there would be taken for the next request's)."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and not conn.received:
                return conn
            conn.close()
        return None

    async def _connect(self, marks: dict[str, int]) -> _Connection:
        loop = asyncio.get_running_loop()
        marks[CONNECT_START] = perf_counter_ns()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self.read_timeout_s), self.host, self.port, ssl=self.ssl)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(
                f"no connection to {self.host}:{self.port} within {self.connect_timeout_s:g} s"
            ) from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        marks[CONNECT_DONE] = perf_counter_ns()
        return conn

    async def _headers(self, conn: _Connection) -> WireResponse:
        try:
            while not conn.headers_done:
                if conn.error is not None:
                    raise conn.error
                await conn.wait()
        except BaseException:
            conn.close()
            raise
        return WireResponse(self, conn)


__all__ = ["CONNECT_DONE", "CONNECT_START", "Pool", "WireResponse"]
