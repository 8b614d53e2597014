"""`llmtop watch`'s pass-through: an ASGI app that forwards every request to one upstream
engine unchanged and measures the generation requests on their way back.

Transparency (docs/guide/watch.md):
* Every method and path is forwarded: the body as received (a generation request's body is
  read whole first, to know its model; any other body is streamed through as it arrives),
  the headers but the hop-by-hop ones (RFC 9110, section 7.6.1: Connection and the headers
  it names, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade) and Host (the
  upstream's own is sent, so Ollama's Host check passes). aiohttp adds nothing of its own:
  no User-Agent, Accept or Content-Type, no cookie jar, no redirects followed, no
  decompression (`auto_decompress=False`), no environment proxy.
* The response goes back with the upstream's status and headers (but hop-by-hop ones; uvicorn
  adds no Server or Date header of its own) and its body block by block as the socket gave
  it (`iter_any`), each block one ASGI message written at once: nothing is held back. CORS
  preflights and headers are the upstream's own (Ollama answers its allowed origins).
* A client that leaves (uvicorn's `http.disconnect`) cancels the forwarding at its current
  await and closes the upstream response, and with it the upstream connection, so the engine
  stops generating (Ollama and llama-server stop when their client's socket closes).

Measurement, for `POST` to a generation endpoint (`meter.endpoint_of`): stamps in
perf_counter ns — `received_ns` when the request reached the app, `sent_ns` just before the
body's write upstream (aiohttp's trace `on_request_chunk_sent`, the point llmtop's own
requests stamp as their send), each block's arrival before it is forwarded; the block is
parsed (`meter.Meter`) only after it was handed to the client, so measuring adds nothing to
what the client waits for. `hop_in_ns` (received → sent) and `hop_out_ns` (the first text's
arrival → handed to the client) are the proxy's own share of the app's TTFT.

Safety: the Host and Origin rules of llmtop's other servers (servers/guard.py; 403), and
with a token (required by `llmtop watch` off loopback) every request must carry it as
`Authorization: Bearer TOKEN` or `X-Llmtop-Token: TOKEN` (401 otherwise); the Authorization
header that carried it is not forwarded. Bodies are kept in memory only while a request is
measured; whether its text reaches a log is the caller's choice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from time import perf_counter_ns
from types import SimpleNamespace
from typing import Any, Protocol

import aiohttp

from llmtop.engines.events import StreamEvent
from llmtop.engines.hosts import resolve_host
from llmtop.engines.http import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_READ_TIMEOUT_S, Peer
from llmtop.probes.callers import Caller, CallerCache
from llmtop.servers.guard import Guard
from llmtop.servers.relay.upstream import UPSTREAM_ERRORS, upstream_failure
from llmtop.servers.watch.meter import Meter, RequestFacts, endpoint_of, read_request

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate",
                        b"proxy-authorization", b"te", b"trailer", b"transfer-encoding",
                        b"upgrade"})
NOT_FORWARDED = HOP_BY_HOP | {b"host"}
SKIP_AUTO = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
MAX_MEASURED_BODY = 256 << 20  # a generation request read whole: 256 MiB (images included)
TOKEN_HEADER = b"x-llmtop-token"
CALLER_WAIT_S = 2.0  # a finished request waits this long for its caller's name


@dataclass
class Exchange:
    """One measured request as it passes (mutable while it streams; stamps perf_counter ns).

    upstream: the engine's URL; listen: the watch's own "host:port". api / shape: from
    `meter.endpoint_of`; facts: what the body said (model, stream, prompt preview, options),
    read by `read_facts` once the body is on its way upstream (a 30,000-token prompt takes
    about a millisecond to parse: never before it is sent).
    client: the peer's (host, port); caller: its process when local and visible (`lookup`
    names it, started once the request is written upstream: never on its way in). status_code:
    the upstream's HTTP status (None: it never answered). meter: reads the response (None
    until it started). cancelled: the client left before the response ended. id: set by the Watcher.
    """

    upstream: str
    listen: str
    api: str
    shape: str
    path: str
    body: bytes
    client: tuple[str, int] | None
    received_ns: int
    facts: RequestFacts = field(default_factory=RequestFacts)
    facts_read: bool = False
    wall_start: str = field(default_factory=lambda: datetime.now().astimezone().isoformat())
    sent_ns: int | None = None
    headers_ns: int | None = None
    status_code: int | None = None
    meter: Meter | None = None
    failed: list[StreamEvent] = field(default_factory=list)
    first_text_out_ns: int | None = None
    end_ns: int | None = None
    cancelled: bool = False
    caller: Caller | None = None
    lookup: asyncio.Future[Caller | None] | None = None
    on_sent: Callable[[Exchange], None] | None = None
    id: int = 0

    def after_send(self) -> None:
        """Once the request is on the wire: read the body's facts, run `on_sent`."""
        self.read_facts()
        if self.on_sent is not None:
            self.on_sent(self)

    def read_facts(self) -> None:
        """Parse the body into `facts` (once), then let it go."""
        if not self.facts_read:
            self.facts = read_request(self.api, self.shape, self.body)
            self.facts_read, self.body = True, b""

    @property
    def events(self) -> list[StreamEvent]:
        """The response's events so far (a failure before any answer: one done event)."""
        return self.meter.events if self.meter is not None else self.failed

    @property
    def send_ns(self) -> int:
        """The send stamp TTFT counts from (the body's write, else the request's arrival)."""
        return self.sent_ns if self.sent_ns is not None else self.received_ns

    @property
    def hop_in_ns(self) -> int | None:
        """The proxy's time from receiving the request to sending it upstream (ns)."""
        return None if self.sent_ns is None else self.sent_ns - self.received_ns

    @property
    def hop_out_ns(self) -> int | None:
        """The proxy's time from the first text's arrival to handing it on (ns)."""
        first = next((e.t_ns for e in self.events if e.has_text), None)
        if first is None or self.first_text_out_ns is None:
            return None
        return self.first_text_out_ns - first


class Watcher(Protocol):
    """What the proxy tells about each measured request, on its event loop (keep it cheap):
    `started` once its body is read (set `exchange.id` there), `progressed` after each block
    that added events, `finished` once, when it ended (ok, failed or cancelled)."""

    def started(self, exchange: Exchange) -> None:
        """A measured request arrived."""

    def progressed(self, exchange: Exchange) -> None:
        """A block added events."""

    def finished(self, exchange: Exchange) -> None:
        """The request ended."""


def forward_headers(raw: list[tuple[bytes, bytes]], *, drop_authorization: bool = False
                    ) -> list[tuple[str, str]]:
    """Request headers to send upstream: all but hop-by-hop ones, those named by
    Connection, Host, and the token's (`drop_authorization`, X-Llmtop-Token)."""
    named = {t.strip().lower() for k, v in raw if k.lower() == b"connection"
             for t in v.split(b",")}
    skip = NOT_FORWARDED | named | {TOKEN_HEADER}
    if drop_authorization:
        skip = skip | {b"authorization"}
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw if k.lower() not in skip]


def response_headers(raw: tuple[tuple[bytes, bytes], ...]) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers for the client: all but hop-by-hop ones and those
    named by Connection (lower-cased names, as ASGI wants)."""
    named = {t.strip().lower() for k, v in raw if k.lower() == b"connection"
             for t in v.split(b",")}
    skip = HOP_BY_HOP | named
    return [(k.lower(), v) for k, v in raw if k.lower() not in skip]


class WatchProxy:
    """The ASGI app for one upstream. upstream_url: anything `resolve_host` accepts (raises
    HostError otherwise); listen: (host, port) the app is served on (for Host checks and the
    caller lookup); guard: Host/Origin rules; token: required on every request when given;
    watcher: told about measured requests; callers: the caller lookup (None: none)."""

    def __init__(self, upstream_url: str, listen: tuple[str, int], watcher: Watcher, *,
                 guard: Guard | None = None, token: str | None = None,
                 callers: CallerCache | None = None,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 read_timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> None:
        self.upstream = resolve_host(upstream_url)
        self.listen = listen
        self.watcher = watcher
        self.guard = guard or Guard(listen[0])
        self._token = None if token is None else token.encode()
        self.callers = callers
        self.peer = Peer(self.upstream, "the watched engine",
                         "start the engine, or restart `llmtop watch` with --upstream URL",
                         read_timeout_s)
        self._timeouts = (connect_timeout_s, read_timeout_s)
        self.session: aiohttp.ClientSession | None = None
        self._finishing: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        """Create the client session (lifespan start)."""
        trace = aiohttp.TraceConfig()
        trace.on_request_chunk_sent.append(_body_written)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeouts[0],
                                          sock_read=self._timeouts[1]),
            trust_env=False, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=SKIP_AUTO, trace_configs=[trace],
        )

    async def close(self) -> None:
        """Close the client session (lifespan end)."""
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.open()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ---------------------------------------------------------------- one request

    def refusal(self, headers: list[tuple[bytes, bytes]]) -> tuple[int, str] | None:
        """(status, message) when the request may not pass: a foreign Host or Origin (403,
        servers/guard.py's rules), a missing or wrong token (401); None when it may."""
        found = {k.lower(): v for k, v in headers}
        host = found.get(b"host", b"").decode("latin-1") or None
        if not self.guard.host_allowed(host):
            return 403, (f"Host {host!r} is not allowed: llmtop watch answers only to loopback "
                         f"names and {self.guard.bind_host}")
        origin = found.get(b"origin")
        if origin is not None and not self.guard.origin_allowed(origin.decode("latin-1")):
            return 403, (f"origin {origin.decode('latin-1')!r} is not allowed; add it to "
                         "$LLMTOP_ORIGINS (comma-separated, * as a wildcard) and restart")
        if self._token is not None and not self._token_ok(found):
            return 401, ("this llmtop watch needs its token: send `Authorization: Bearer "
                         "TOKEN` (an OpenAI client's api_key) or `X-Llmtop-Token: TOKEN`")
        return None

    def _token_ok(self, found: dict[bytes, bytes]) -> bool:
        assert self._token is not None
        bearer = found.get(b"authorization", b"")
        return (hmac.compare_digest(bearer, b"Bearer " + self._token)
                or hmac.compare_digest(found.get(TOKEN_HEADER, b""), self._token))

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = perf_counter_ns()
        headers: list[tuple[bytes, bytes]] = list(scope["headers"])
        refused = self.refusal(headers)
        if refused is not None:
            await _json_reply(send, refused[0], {"error": refused[1]})
            return
        method, path = scope["method"], scope["path"]
        target = self.upstream + scope.get("raw_path", path.encode()).decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        out_headers = forward_headers(headers, drop_authorization=self._token is not None)
        client = scope.get("client")
        endpoint = endpoint_of(method, path)
        body_done = asyncio.Event()
        exchange = None
        if endpoint is not None:
            body = await _whole_body(receive)
            if body is None:
                return  # the client left, or sent more than MAX_MEASURED_BODY (answered)
            body_done.set()
            data: Any = body
            exchange = Exchange(self.upstream, f"{self.listen[0]}:{self.listen[1]}",
                                endpoint[0], endpoint[1], path, body,
                                (client[0], client[1]) if client else None, t0)
            exchange.on_sent = self._look_up_caller  # during the engine's prefill
            self.watcher.started(exchange)
        else:
            data = _streamed_body(receive, body_done) if _has_body(headers) else None
            if data is None:
                body_done.set()
        answered = asyncio.Event()  # set right after the response's last message was sent
        forward = asyncio.ensure_future(
            self._forward(_Answer(send, answered), method, target, out_headers, data, exchange))
        gone = asyncio.ensure_future(_disconnected(receive, body_done))
        try:
            await asyncio.wait({forward, gone}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the server stops: record what passed, then go on
            forward.cancel()
            if exchange is not None:
                exchange.cancelled = True
                exchange.end_ns = perf_counter_ns()
                exchange.read_facts()
                self.watcher.finished(exchange)
            raise
        finally:
            if not forward.done() and not answered.is_set():
                forward.cancel()  # the client left first: stop the upstream now
                if exchange is not None:
                    exchange.cancelled = True
            with contextlib.suppress(BaseException):
                await forward
            gone.cancel()
        if exchange is not None:
            exchange.end_ns = exchange.end_ns or perf_counter_ns()
            exchange.read_facts()
            self._look_up_caller(exchange)
            if exchange.lookup is None or exchange.lookup.done():
                self.watcher.finished(exchange)
            else:  # the response is complete: the handler need not wait for the name
                task = asyncio.ensure_future(self._finish(exchange))
                self._finishing.add(task)
                task.add_done_callback(self._finishing.discard)

    def _look_up_caller(self, exchange: Exchange) -> None:
        """Start naming the caller (once; in the CallerCache's executor)."""
        if self.callers is None or exchange.client is None or exchange.lookup is not None:
            return

        def found(task: asyncio.Future[Caller | None]) -> None:
            if not task.cancelled() and task.exception() is None:
                exchange.caller = task.result()

        exchange.lookup = asyncio.ensure_future(self.callers.find(exchange.client, self.listen))
        exchange.lookup.add_done_callback(found)

    async def _finish(self, exchange: Exchange) -> None:
        """Tell the watcher, once the caller lookup is done (at most CALLER_WAIT_S)."""
        if exchange.lookup is not None and not exchange.lookup.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(exchange.lookup), CALLER_WAIT_S)
        self.watcher.finished(exchange)

    async def _forward(self, send: Send, method: str, target: str,
                       headers: list[tuple[str, str]], data: Any,
                       exchange: Exchange | None) -> None:
        assert self.session is not None, "the watch app was not started (lifespan)"
        started = False
        try:
            async with self.session.request(method, target, headers=headers, data=data,
                                            allow_redirects=False,
                                            trace_request_ctx=exchange) as resp:
                await send({"type": "http.response.start", "status": resp.status,
                            "headers": response_headers(resp.raw_headers)})
                started = True
                try:
                    await self._body(send, resp, exchange)
                except BaseException:
                    resp.close()  # closes the upstream connection: the engine stops
                    raise
        except UPSTREAM_ERRORS as exc:
            if exchange is not None:
                t = perf_counter_ns()
                failure = upstream_failure(exc, peer=self.peer)
                if exchange.meter is None:
                    exchange.failed.append(StreamEvent(t, done=True, failure=failure))
                elif not exchange.meter.done:
                    exchange.meter.events.append(StreamEvent(t, done=True, failure=failure))
                    exchange.meter.done = True
            if not started:
                await _json_reply(send, 502, {"error": f"llmtop watch: the upstream "
                                              f"{self.upstream} did not answer: {exc}"})
            # else: the response is left incomplete, so the client sees a cut, not an end

    async def _body(self, send: Send, resp: aiohttp.ClientResponse,
                    exchange: Exchange | None) -> None:
        meter = None
        if exchange is not None:
            exchange.headers_ns = perf_counter_ns()
            exchange.read_facts()
            exchange.status_code = resp.status
            encoding = resp.headers.get("Content-Encoding", "identity").lower()
            meter = exchange.meter = Meter(
                exchange.api, exchange.shape, streamed=exchange.facts.stream,
                status=resp.status, peer=self.peer, encoded=encoding != "identity",
                model=exchange.facts.model or "")
        async for block in resp.content.iter_any():
            t = perf_counter_ns()
            await send({"type": "http.response.body", "body": block, "more_body": True})
            if meter is not None and exchange is not None and not meter.done:
                t_out = perf_counter_ns()
                before = len(meter.events)
                meter.feed(block, t)
                if len(meter.events) > before:
                    if exchange.first_text_out_ns is None and any(
                            e.has_text for e in meter.events[before:]):
                        exchange.first_text_out_ns = t_out
                        self._look_up_caller(exchange)  # if the send was not stamped
                    self.watcher.progressed(exchange)
        t_end = perf_counter_ns()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        if meter is not None and exchange is not None:
            meter.end(t_end)
            exchange.end_ns = t_end


class _Answer:
    """The ASGI `send` of one request, setting `answered` once the response's last
    message went out (after that, uvicorn's `receive` says "disconnect" for every request,
    which must not read as a client that left)."""

    def __init__(self, send: Send, answered: asyncio.Event) -> None:
        self._send, self.answered = send, answered

    async def __call__(self, message: Message) -> None:
        await self._send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.answered.set()


async def _body_written(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
    # aiohttp calls this just before it writes (a part of) the body: the last one is the send
    exchange = ctx.trace_request_ctx
    if isinstance(exchange, Exchange):
        exchange.sent_ns = perf_counter_ns()
        asyncio.get_running_loop().call_soon(exchange.after_send)  # once it is written


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    for key, value in headers:
        name = key.lower()
        if name == b"content-length" and value.strip() not in (b"", b"0"):
            return True
        if name == b"transfer-encoding":
            return True
    return False


async def _whole_body(receive: Receive) -> bytes | None:
    """The request body, or None when the client left first (or it exceeded
    MAX_MEASURED_BODY: the upstream would refuse it anyway)."""
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        part = message.get("body", b"")
        size += len(part)
        if size > MAX_MEASURED_BODY:
            return None
        parts.append(part)
        if not message.get("more_body", False):
            return b"".join(parts)


async def _streamed_body(receive: Receive, done: asyncio.Event) -> AsyncIterator[bytes]:
    """The request body as it arrives (a blob upload, a model push), then `done` set."""
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise aiohttp.ClientConnectionError("the client left while sending its body")
            part = message.get("body", b"")
            if part:
                yield part
            if not message.get("more_body", False):
                return
    finally:
        done.set()


async def _disconnected(receive: Receive, body_done: asyncio.Event) -> None:
    """Returns when the client has gone (read only after the body was read whole)."""
    await body_done.wait()
    while (await receive())["type"] != "http.disconnect":
        pass


async def _json_reply(send: Send, status: int, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(raw)).encode())]})
    await send({"type": "http.response.body", "body": raw, "more_body": False})


__all__ = ["Exchange", "WatchProxy", "Watcher", "forward_headers", "response_headers"]
