"""One client connection through `llmtop watch`, as two asyncio protocols: `ClientSide` (the
app's connection, read with httptools' request parser) and `UpstreamSide` (the watch's own
connection to the engine, read with its response parser). servers/watch/proxy.py serves them.

Why protocols and not an HTTP framework: the watch is a measuring instrument, and what it adds
to an app's TTFT is its whole cost. uvicorn + aiohttp alone added 0.36-0.68 ms over a bare TCP
forwarder (bench/watch_overhead.py, docs/performance.md): a request crossed an ASGI scope, a
task, aiohttp's request builder and its connector. Here a request costs one parse by httptools
(llhttp, the parser uvicorn uses) and one write; a response block is written back to the
client the moment it arrives, before the watch parses a byte of it.

The pairing. Each client connection gets one engine connection, opened at its first request
and kept while both keep it: requests go on in order, answers come back in order, and a
client that leaves closes its engine connection at once, which stops the generation (Ollama
and llama-server stop when their client's socket closes). Connection-level headers therefore
mean the same on both sides and pass as sent (servers/watch/wire.py); an engine that closes
an idle connection is reconnected at the next request.

The answer's bytes go back exactly as the engine sent them: status line, headers (its own
Server and Date), chunked framing, body. The watch writes only its own short replies (403,
401, 413, 431, 400, 502: wire.json_reply, then the connection closes) and `100 Continue` for a
measured request that asked for it (its body is read whole first).

Measurement (a POST to a generation endpoint, meter.endpoint_of): `received_ns` is the
arrival of the segment that made the request whole (so `hop_in_ns` is the watch's own share,
not the app's upload of a long prompt); the body is read whole, then sent with its
head in one write, stamped `sent_ns` just before it (where llmtop's own requests stamp their
send). Each response block is stamped on arrival, written to the client, stamped again
(`first_text_out_ns` for the first text: `hop_out_ns`), and only then parsed: the body
pieces httptools hands over (de-chunked) go to the Meter with the block's arrival stamp.
A client that leaves before the answer's final event (Exchange.answered) is `cancelled`.

Flow control: when either side's send buffer fills, the other side's reading pauses until it
drains (asyncio's pause_writing / resume_writing), so a slow client slows the engine's
connection instead of filling memory. A request line and headers past MAX_HEAD_BYTES get 431.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from time import perf_counter_ns
from typing import Protocol
from urllib.parse import unquote

import httptools
import httpx

from llmtop.engines.events import StreamEvent
from llmtop.engines.http import Peer, failure_for_transport
from llmtop.servers.guard import Guard
from llmtop.servers.watch.exchange import Exchange, Watcher
from llmtop.servers.watch.meter import Meter, endpoint_of
from llmtop.servers.watch.wire import (
    CONTINUE,
    MAX_HEAD_BYTES,
    MAX_MEASURED_BODY,
    Upstream,
    chunk,
    framing_refusal,
    header,
    json_reply,
    request_head,
)

LINGER_S = 2.0  # after a reply of its own, the app's bytes are read and dropped this long
# a request head (line and headers) must be whole this long after its first byte: 10 s is
# far more than any client on a loopback or LAN needs, and less than the time a few hundred
# half-sent heads (slowloris) need to be worth anything
HEAD_TIMEOUT_S = 10.0



class ConnectionOwner(Protocol):
    """What a client connection needs of the watch that serves it (proxy.WatchProxy has it):
    the engine's address (`upstream`, its `wire` form, `tls` for https, `peer` for failures,
    `connect_timeout_s`), the listening address as text, the Host/Origin `guard` and the
    token rules (`guarded`, `refusal`, `drop_for`), the `watcher` told about measured
    requests, and the calls a connection makes as it lives. A protocol, so this module needs
    nothing of proxy.py, which imports it."""

    upstream: str
    wire: Upstream
    tls: ssl.SSLContext | None
    peer: Peer
    connect_timeout_s: float
    listen_text: str
    guard: Guard
    watcher: Watcher

    @property
    def guarded(self) -> bool: ...

    def refusal(self, headers: list[tuple[bytes, bytes]]) -> tuple[int, str] | None: ...

    def drop_for(self, headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]: ...

    def accepted(self, side: ClientSide) -> None: ...

    def checked(self, side: ClientSide) -> None: ...

    def left(self, side: ClientSide) -> None: ...

    def look_up_caller(self, exchange: Exchange) -> None: ...

    def finish(self, exchange: Exchange) -> None: ...


class Pending:
    """One request on a client connection, from its head to its answer's end. `reply`: the
    watch's own answer instead of the engine's (the connection closes after it); `parts`: a
    measured body being read whole; `chunked`: a streamed body to re-frame as chunks."""

    __slots__ = ("chunked", "done", "endpoint", "exchange", "expects", "headers", "keep_alive",
                 "length", "method", "parts", "path", "reply", "retried", "sent", "size",
                 "started", "target", "up", "upgrade", "version")

    def __init__(self) -> None:
        self.method = self.target = b""
        self.version = "1.1"
        self.path = ""
        self.headers: list[tuple[bytes, bytes]] = []
        self.endpoint: tuple[str, str] | None = None
        self.up: UpstreamSide | None = None  # the engine connection it was written on
        self.exchange: Exchange | None = None
        self.reply: bytes | None = None
        self.parts: list[bytes] | None = None
        self.size = 0
        self.chunked = False
        self.expects = False  # asked `100 Continue`, not yet said (answers before it are due)
        self.upgrade = False  # asked to switch protocols: not passed on (wire.request_head)
        self.length = 0  # its Content-Length (an Upgrade request's body is read by it)
        self.sent: bytes | None = None  # the whole request as written in one piece (a retry's)
        self.retried = False
        self.keep_alive = True
        self.started = False  # the engine's answer began (its final status line arrived)
        self.done = False  # its answer ended


class ClientSide(asyncio.Protocol):
    """The app's connection: parses its requests, forwards them on its `UpstreamSide`, keeps
    their answers in order (`queue`), and ends what it measured when the app leaves."""

    def __init__(self, proxy: ConnectionOwner) -> None:
        self.proxy = proxy
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.client: tuple[str, int] | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Pending] = deque()  # requests whose answer has not ended, in order
        self.current: Pending | None = None  # the request being parsed
        self.url: list[bytes] = []
        self.in_head = True  # what arrives is (part of) a request line and headers
        self.head_bytes = 0
        self.rx_ns = 0
        self.up: UpstreamSide | None = None
        self.outbox: list[tuple[bytes, Pending | None, bool]] = []  # waiting for a connection
        self.connecting: asyncio.Task[None] | None = None
        self.closing = False  # nothing more is read: a reply of the watch's own, or the end
        self.body_left = 0  # bytes of an Upgrade request's body still to read (`feed`)
        self.hung_up = False  # shut for writing after a reply of the watch's own (hang_up)
        self.head_timer: asyncio.TimerHandle | None = None  # a head must be whole in time

    # ------------------------------------------------------------ asyncio's calls

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.client = (peer[0], peer[1]) if isinstance(peer, tuple) else None
        self.proxy.accepted(self)
        self.head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self.head_timed_out)
        if not self.proxy.guarded:
            # no token to show: the engine connection opens while the app writes its request,
            # as a TCP forwarder's; with one, only for a request that showed it (proxy.checked)
            self.connecting = self.loop.create_task(self.connect())

    def head_timed_out(self) -> None:
        """A request head not whole HEAD_TIMEOUT_S after its first byte (or, for the first
        request, after the connection opened): answered 408 and closed, so a client that
        never finishes its head cannot hold a connection (slowloris)."""
        self.head_timer = None
        if self.in_head and not self.closing:
            self.refuse(408, f"llmtop watch: no whole request head within {HEAD_TIMEOUT_S:g} s")

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.rx_ns = perf_counter_ns()
        if self.in_head:
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                self.refuse(431, f"llmtop watch: a request head over {MAX_HEAD_BYTES} bytes")
                return
        self.feed(data)

    def feed(self, data: bytes) -> None:
        """Parse `data`. The watch switches no protocol (wire.request_head leaves Upgrade
        out, so the engine answers in HTTP/1.1, as RFC 9110 section 7.8 lets it): when llhttp
        stops at an Upgrade request's head, that request's body is taken by its length and
        the bytes after it are parsed as HTTP again, checked and measured like any other."""
        while data and not self.closing:
            if self.body_left:
                piece, data = data[:self.body_left], data[self.body_left:]
                self.body_left -= len(piece)
                self.on_body(piece)
                if not self.body_left:
                    self.end_message()
                continue
            try:
                self.parser.feed_data(data)
                return
            except httptools.HttpParserUpgrade as upgrade:
                data = data[upgrade.args[0]:]
                self.parser = httptools.HttpRequestParser(self)
            except httptools.HttpParserError as exc:
                self.refuse(400, f"llmtop watch: not an HTTP/1.1 request ({exc})")
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.closing = True
        self.proxy.left(self)
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        if self.connecting is not None:
            self.connecting.cancel()
        up, self.up = self.up, None
        if up is not None and up.transport is not None:
            up.transport.abort()  # the engine sees its client leave and stops generating
        t = perf_counter_ns()
        for p in self.queue:
            ex = p.exchange
            if ex is not None and not p.done:
                p.exchange = None
                ex.cancelled = not ex.answered
                ex.end_ns = ex.end_ns or t
                self.proxy.finish(ex)
        self.queue.clear()

    def pause_writing(self) -> None:
        if self.up is not None and self.up.transport is not None:
            self.up.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.up is not None and self.up.transport is not None:
            self.up.transport.resume_reading()

    # ------------------------------------------------------------ httptools' calls

    def on_message_begin(self) -> None:
        self.current = None if self.closing else Pending()
        self.url = []
        if self.head_timer is None and not self.closing:  # a new head's first byte
            self.head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self.head_timed_out)

    def on_url(self, url: bytes) -> None:
        self.url.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.current is not None:
            self.current.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.in_head, self.head_bytes = False, 0
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        p = self.current
        if p is None or self.closing:
            self.current = None
            return
        self.queue.append(p)
        p.method = self.parser.get_method()
        p.keep_alive = self.parser.should_keep_alive()
        p.target = b"".join(self.url)
        p.version = self.parser.get_http_version()
        refused = self.proxy.refusal(p.headers) or self.refusal(p)
        if refused is not None:
            p.reply = json_reply(refused[0], {"error": refused[1]})
            self.closing = True  # nothing after it is read: the reply ends the connection
            self.advance()
            return
        self.proxy.checked(self)
        p.upgrade = header(p.headers, b"upgrade") is not None
        length = header(p.headers, b"content-length")
        p.length = int(length) if length is not None else 0  # llhttp checked its digits
        p.path = unquote(p.target.partition(b"?")[0].decode("latin-1"))
        p.endpoint = endpoint_of(p.method.decode("latin-1"), p.path)
        if p.endpoint is not None:
            p.parts = []  # read whole, then sent with its head in one write
            p.expects = (header(p.headers, b"expect") or b"").lower() == b"100-continue"
            self.advance()  # says 100 Continue now, or when the answers before it are out
            return
        p.chunked = header(p.headers, b"transfer-encoding") is not None  # `chunked` alone
        head = request_head(p.method, p.target, p.version, p.headers, self.proxy.wire,
                            drop=self.proxy.drop_for(p.headers),
                            length=p.length if length is not None else None,
                            chunked=p.chunked)
        if not p.chunked and not p.length:
            p.sent = head  # the whole request: it can be sent again (upstream_lost)
        self.send_up(head, p)

    def refusal(self, p: Pending) -> tuple[int, str] | None:
        """(status, message) when request `p` may not pass for what its line or framing
        says (proxy.refusal has checked its Host, Origin and token); None when it may. An
        absolute-form target (`POST http://host/api/chat`, what a client whose HTTP_PROXY
        points at the watch sends) is made origin-form here, its authority checked as the
        Host it is (RFC 9112, section 3.2.2), so it is measured like any other."""
        if p.version not in ("1.0", "1.1"):
            return 505, f"llmtop watch: HTTP/{p.version} is not passed on; use HTTP/1.1"
        if p.method == b"CONNECT":
            return 405, "llmtop watch opens no tunnels: CONNECT is not passed on"
        target = p.target
        if not target.startswith(b"/") and target != b"*":
            scheme, sep, rest = target.partition(b"://")
            if not sep or scheme.lower() not in (b"http", b"https"):
                return 400, "llmtop watch: a request target must be a path or an http URL"
            authority, slash, path = rest.partition(b"/")
            host = authority.rpartition(b"@")[2].decode("latin-1")
            if not self.proxy.guard.host_allowed(host):
                return 403, (f"Host {host!r} (the request's URL) is not allowed: llmtop "
                             f"watch answers only to loopback names and "
                             f"{self.proxy.guard.bind_host}")
            p.target = slash + path if slash else b"/"
        elif p.version == "1.1" and header(p.headers, b"host") is None:
            return 400, "llmtop watch: an HTTP/1.1 request without Host (RFC 9112, 3.2)"
        why = framing_refusal(p.headers)
        if why is not None:
            return 400, f"llmtop watch: {why}"
        if header(p.headers, b"upgrade") is not None and (
                header(p.headers, b"transfer-encoding") is not None):
            return 400, "llmtop watch: an Upgrade request with a chunked body is not passed on"
        return None

    def on_body(self, body: bytes) -> None:
        p = self.current
        if p is None or p.reply is not None:
            return
        if p.parts is None:
            self.send_up(chunk(body) if p.chunked else body, p)
            return
        p.size += len(body)
        if p.size > MAX_MEASURED_BODY:
            p.parts = None
            p.reply = json_reply(413, {"error": "llmtop watch: a generation request over "
                                                f"{MAX_MEASURED_BODY} bytes is not passed on"})
            self.closing = True
            self.advance()
            return
        p.parts.append(body)

    def on_message_complete(self) -> None:
        p = self.current
        if p is not None and p.upgrade and p.length and p.reply is None:
            self.body_left = p.length  # llhttp skipped an Upgrade request's body: `feed` reads it
            return
        self.end_message()

    def end_message(self) -> None:
        """The current request is whole: send a measured one, end a chunked upload."""
        p, self.current = self.current, None
        self.in_head = True  # what comes next is a head again
        if p is None or p.reply is not None:
            return
        if p.endpoint is None or p.parts is None:
            if p.chunked:
                self.send_up(chunk(b""), p)
            return
        body = b"".join(p.parts)
        p.parts, p.expects = None, False  # the whole body is here: no `100 Continue` needed
        # received: the segment that made the request whole (hop_in is the watch's own share,
        # not the app's upload of a long prompt)
        ex = p.exchange = Exchange(self.proxy.upstream, self.proxy.listen_text, p.endpoint[0],
                                   p.endpoint[1], p.path, body, self.client, self.rx_ns)
        ex.on_sent = self.proxy.look_up_caller  # during the engine's prefill
        head = request_head(p.method, p.target, p.version, p.headers, self.proxy.wire,
                            drop=self.proxy.drop_for(p.headers), length=len(body),
                            measured=True)
        p.sent = head + body
        self.send_up(p.sent, p, measured=True)
        self.proxy.watcher.started(ex)  # after the write: numbering it delays nothing

    # ------------------------------------------------------------ the engine's side

    def send_up(self, data: bytes, p: Pending | None = None, measured: bool = False) -> None:
        """Write `data` (of request `p`) to the engine, or keep it until a connection is open.
        `measured`: `p`'s whole head and body, stamped `sent_ns` just before the write."""
        up = self.up
        if up is None or up.transport is None or up.transport.is_closing() or (
                up.last is not p and up.last is not None):
            self.outbox.append((data, p, measured))
            if self.connecting is None and (up is None or up.last is None):
                self.connecting = self.loop.create_task(self.connect())
            return
        if p is not None and p.method == b"HEAD":
            up.last = p  # its answer is the connection's last (UpstreamSide.on_headers_complete)
        ex = p.exchange if measured and p is not None else None
        if ex is not None:
            ex.sent_ns = perf_counter_ns()
        up.transport.write(data)
        if p is not None:
            p.up = up
        if ex is not None:
            self.loop.call_soon(ex.after_send)  # once it is written: facts, caller

    async def connect(self) -> None:
        """Open the engine connection, then write what waited for it, in order. A failure
        with nothing waiting is left for the next request to meet again (and answer 502)."""
        w = self.proxy.wire
        try:
            _, up = await asyncio.wait_for(self.loop.create_connection(
                lambda: UpstreamSide(self), w.host, w.port, ssl=self.proxy.tls),
                self.proxy.connect_timeout_s)
        except (TimeoutError, OSError) as exc:
            self.connecting = None
            if self.outbox:
                self.outbox.clear()
                self.upstream_failed(
                    httpx.ConnectTimeout(f"no connection within {self.proxy.connect_timeout_s:g}"
                                         " s") if isinstance(exc, TimeoutError)
                    else httpx.ConnectError(str(exc) or type(exc).__name__))
            return
        self.connecting = None
        if self.transport is None:  # the app left meanwhile
            if up.transport is not None:
                up.transport.abort()
            return
        self.up = up
        waiting, self.outbox = self.outbox, []
        for data, p, measured in waiting:
            self.send_up(data, p, measured)

    @staticmethod
    def _owed(p: Pending) -> bool:
        return not p.done and p.reply is None

    def owed(self) -> list[Pending]:
        """The requests the engine still owes an answer to (not ended, not the watch's), in
        order. No read timeout of the watch's own cuts them: the app's decides, as without
        the watch (WatchProxy)."""
        return [p for p in self.queue if self._owed(p)]

    def upstream_failed(self, exc: httpx.TransportError) -> None:
        """The engine could not be reached or broke off: each request it owed an
        answer records the failure; the first gets the watch's 502 if none of its answer was
        sent, else the app's connection is cut (it sees an incomplete answer, not an end).
        The app's connection closes either way."""
        t = perf_counter_ns()
        failure = failure_for_transport(exc, peer=self.proxy.peer)
        owed = self.owed()
        for i, p in enumerate(owed):
            ex, p.exchange = p.exchange, None  # recorded here, not again when the app leaves
            if ex is not None:
                meter = ex.meter
                if meter is None:
                    ex.failed.append(StreamEvent(t, done=True, failure=failure))
                elif not meter.done:
                    meter.events.append(StreamEvent(t, done=True, failure=failure))
                    meter.done = True
                ex.end_ns = t
                self.proxy.finish(ex)
            if i == 0 and not p.started:
                p.reply = json_reply(502, {"error": f"llmtop watch: the upstream "
                                                    f"{self.proxy.upstream} did not answer: {exc}"},
                                     head_only=p.method == b"HEAD")
            else:
                p.done = True
        up, self.up = self.up, None
        if up is not None and up.transport is not None:
            up.transport.abort()
        self.closing = True
        self.advance()
        if self.transport is not None:
            self.transport.close()  # after what was written: a cut answer, or the 502

    def upstream_lost(self, up: UpstreamSide) -> None:
        """The engine closed a connection: idle, the next request opens another; in the
        middle of an answer, that answer ends (a body delimited by the close) or failed."""
        if self.up is up:
            self.up = None
        if self.transport is None:
            return
        p = up.current
        if p is not None and p.started and not up.framed:
            up.complete()  # the body ran to the close (no Content-Length, not chunked)
            return
        lost = [q for q in self.owed() if q.up is up]
        if not lost:
            return
        if up.answers and all(q.sent is not None and not q.started and not q.retried
                              for q in lost):
            # a kept connection the engine closed as the request went out (an idle timeout:
            # uvicorn's and llama-server's are 5 s): no byte of an answer came, so the engine
            # did not take it up; sent again, once, on a new connection (Go's http.Transport
            # does the same)
            again = []
            for q in lost:
                q.retried, q.up = True, None
                assert q.sent is not None
                again.append((q.sent, q, q.exchange is not None))
            self.outbox = again + self.outbox  # before anything that came after them
            if self.connecting is None:
                self.connecting = self.loop.create_task(self.connect())
            return
        self.upstream_failed(httpx.RemoteProtocolError(
            "the engine closed the connection before its answer ended"))

    def answering(self) -> Pending | None:
        """The request the engine is answering now: the oldest it owes an answer."""
        return next((p for p in self.queue if self._owed(p)), None)

    def advance(self) -> None:
        """Drop the ended requests from the queue's head; write the watch's own reply when it
        is the next answer due (then close the connection); close it after the last answer
        when the app asked to (Connection: close, HTTP/1.0)."""
        transport = self.transport
        while self.queue:
            head = self.queue[0]
            if head.reply is not None:
                if transport is not None:
                    transport.write(head.reply)
                    self.hang_up(transport)
                self.closing = True
                self.queue.clear()
                return
            if not head.done:
                if head.expects and transport is not None:
                    head.expects = False
                    transport.write(CONTINUE)
                return
            self.queue.popleft()
            if not head.keep_alive:
                self.closing = True
                if transport is not None:
                    transport.close()
                return

    def hang_up(self, transport: asyncio.Transport) -> None:
        """Close after a reply of the watch's own while the app may still be sending (a body
        not read, a head too large): its side is shut for writing and what it still sends is
        read and dropped for up to LINGER_S, so the reply is not lost to a reset (a socket
        closed on unread bytes answers them with RST)."""
        if transport.is_closing() or self.hung_up:
            return
        self.hung_up = True  # nothing more is written to it (the engine's late bytes neither)
        if transport.can_write_eof():
            transport.write_eof()
            self.loop.call_later(LINGER_S, transport.close)
        else:
            transport.close()

    def eof_received(self) -> bool:
        """The app closed its side: it has left (a full close and a half close look alike
        here, and a client that leaves must stop the engine at once), so the connection
        closes and what was being answered ends `cancelled` (connection_lost)."""
        return False

    def refuse(self, status: int, message: str) -> None:
        """Answer a request the watch cannot read with `status` once the answers before it
        are out, and read nothing more."""
        p = self.current or Pending()
        if p not in self.queue:
            self.queue.append(p)
        p.exchange, p.parts = None, None
        p.reply = json_reply(status, {"error": message})
        self.closing = True
        self.advance()


class UpstreamSide(asyncio.Protocol):
    """The watch's connection to the engine for one ClientSide: every block goes back to the
    app as it arrives, then is parsed to end answers and feed the measured one's Meter."""

    def __init__(self, side: ClientSide) -> None:
        self.side = side
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.current: Pending | None = None
        self.meter: Meter | None = None
        self.interim = False  # a 1xx answer (100 Continue): the final one follows
        self.framed = False  # the answer says where its body ends (Content-Length, chunked)
        self.headers: list[tuple[bytes, bytes]] = []
        self.t = self.t_out = 0
        self.last: Pending | None = None  # a HEAD written here: nothing more is sent after it
        self.answers = 0  # answers ended on this connection (a kept one when > 0)
        self.left = False  # this connection is being closed: what it still parses is ignored

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        t = perf_counter_ns()
        side = self.side
        if side.transport is not None and not side.hung_up:
            side.transport.write(data)  # first: the app waits for nothing of the watch's
        self.t, self.t_out = t, perf_counter_ns()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # no Upgrade was passed on: not an answer to one
            side.upstream_failed(httpx.RemoteProtocolError("the engine switched protocols "
                                                           "unasked"))
        except httptools.HttpParserError as exc:
            side.upstream_failed(httpx.RemoteProtocolError(f"not an HTTP answer ({exc})"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.side.upstream_lost(self)

    def pause_writing(self) -> None:
        if self.side.transport is not None:
            self.side.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.side.transport is not None:
            self.side.transport.resume_reading()

    # ------------------------------------------------------------ httptools' calls

    def on_message_begin(self) -> None:
        self.current = None if self.left else self.side.answering()
        self.headers = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        p = self.current
        if status < 200 or p is None:
            self.interim = True
            return
        p.started = True
        headers = self.headers
        self.framed = (header(headers, b"content-length") is not None
                       or header(headers, b"transfer-encoding") is not None)
        ex = p.exchange
        if ex is not None:
            ex.headers_ns = self.t
            ex.read_facts()
            ex.status_code = status
            encoding = (header(headers, b"content-encoding") or b"identity").decode("latin-1")
            self.meter = ex.meter = Meter(
                ex.api, ex.shape, streamed=ex.facts.stream, status=status,
                peer=self.side.proxy.peer, encoding=encoding, model=ex.facts.model or "")
        if p.method == b"HEAD":
            # no body follows, whatever its headers say (RFC 9110, 9.3.2), and the parser
            # cannot be told: nothing was sent after a HEAD on this connection (`last`), so it
            # is left here, and what waited goes on a new one
            self.left = True
            side = self.side
            if side.up is self:
                side.up = None
            if self.transport is not None:
                self.transport.abort()
            self.complete()
            if side.outbox and side.connecting is None and side.transport is not None:
                side.connecting = side.loop.create_task(side.connect())

    def on_body(self, body: bytes) -> None:
        meter = self.meter
        if meter is None or meter.done:
            return
        ex = self.current.exchange if self.current is not None else None
        if ex is None:
            return
        before = len(meter.events)
        meter.feed(body, self.t)
        if len(meter.events) > before:
            if ex.first_text_out_ns is None and any(e.has_text for e in meter.events[before:]):
                ex.first_text_out_ns = self.t_out
                self.side.proxy.look_up_caller(ex)  # if the send was not stamped
            self.side.proxy.watcher.progressed(ex)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        self.complete()

    def complete(self) -> None:
        """The current answer ended: end its measurement, then let the app's side move on."""
        p, self.current = self.current, None
        meter, self.meter = self.meter, None
        if p is None or p.done:
            return
        p.done = True
        self.answers += 1
        ex = p.exchange
        t_end = perf_counter_ns()
        if ex is not None:
            if meter is not None:
                meter.end(t_end)
            ex.end_ns = t_end
            p.exchange = None
            self.side.proxy.finish(ex)
        after = self.side.answering()
        if after is not None and after.up is self and after.exchange is not None:
            # pipelined behind this answer: the engine takes it up only now (an HTTP/1.1
            # server answers a connection's requests in order), so its TTFT counts from here
            # and the wait is said (Exchange.ready_ns)
            after.exchange.ready_ns = t_end
        self.side.advance()


__all__ = ["ClientSide", "Pending", "UpstreamSide"]
