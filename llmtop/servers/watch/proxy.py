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
  stops generating (Ollama and llama-server stop when their client's socket closes). It is
  recorded as cancelled only when it left before the answer's final event had passed: the
  official `openai` client closes its connection as soon as it reads `[DONE]`, often before
  the engine's body has ended, and that answer is whole.

Measurement, for `POST` to a generation endpoint (`meter.endpoint_of`): stamps in
perf_counter ns — `received_ns` when the request reached the app, `sent_ns` just before the
body's write upstream (aiohttp's trace `on_request_chunk_sent`, the point llmtop's own
requests stamp as their send), each block's arrival before it is forwarded (a block whose
bytes came with the headers, as a non-streamed answer's do: when the headers were read,
before the response's start was handed on); the block is
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
from time import perf_counter_ns
from types import SimpleNamespace
from typing import Any

import aiohttp

from llmtop.engines.events import StreamEvent
from llmtop.engines.hosts import resolve_host
from llmtop.engines.http import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_READ_TIMEOUT_S, Peer
from llmtop.probes.callers import Caller, CallerCache
from llmtop.servers.guard import Guard
from llmtop.servers.relay.upstream import UPSTREAM_ERRORS, upstream_failure
from llmtop.servers.watch.asgi import (
    MAX_MEASURED_BODY,
    TOKEN_HEADER,
    Answer,
    Receive,
    Scope,
    Send,
    TooLarge,
    disconnected,
    forward_headers,
    has_body,
    json_reply,
    response_headers,
    streamed_body,
    whole_body,
)
from llmtop.servers.watch.exchange import Exchange, Watcher
from llmtop.servers.watch.meter import Meter, endpoint_of

SKIP_AUTO = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
CALLER_WAIT_S = 2.0  # a finished request waits this long for its caller's name


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
            await json_reply(send, refused[0], {"error": refused[1]})
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
            try:
                body = await whole_body(receive)
            except TooLarge:
                await json_reply(send, 413, {"error": "llmtop watch: a generation request "
                                             f"over {MAX_MEASURED_BODY} bytes is not passed on"})
                return
            if body is None:
                return  # the client left before its request was whole
            body_done.set()
            data: Any = body
            exchange = Exchange(self.upstream, f"{self.listen[0]}:{self.listen[1]}",
                                endpoint[0], endpoint[1], path, body,
                                (client[0], client[1]) if client else None, t0)
            exchange.on_sent = self._look_up_caller  # during the engine's prefill
            self.watcher.started(exchange)
        else:
            data = streamed_body(receive, body_done) if has_body(headers) else None
            if data is None:
                body_done.set()
        answered = asyncio.Event()  # set right after the response's last message was sent
        # forwarded in this task (a task of its own would cost the way in a turn of the loop);
        # a client that leaves before the answer's end cancels it here (`client_left`)
        me = asyncio.current_task()
        left = False

        def client_left(watcher: asyncio.Future[None]) -> None:
            nonlocal left
            if watcher.cancelled() or watcher.exception() is not None or answered.is_set():
                return
            left = True
            if me is not None:
                me.cancel()  # stops the upstream at its current await (`_forward` closes it)

        gone = asyncio.ensure_future(disconnected(receive, body_done))
        gone.add_done_callback(client_left)
        try:
            await self._forward(Answer(send, answered), method, target, out_headers, data,
                                exchange)
        except asyncio.CancelledError:
            if not left:  # the server stops: record what passed, then go on
                if exchange is not None:
                    exchange.cancelled = True
                    exchange.end_ns = perf_counter_ns()
                    exchange.read_facts()
                    self.watcher.finished(exchange)
                raise
            if me is not None:
                me.uncancel()  # the client's leaving, not ours: this request ends here
            if exchange is not None and not exchange.answered:
                exchange.cancelled = True
        finally:
            gone.remove_done_callback(client_left)
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
                # body bytes that came with the headers are buffered already: they arrived
                # by now, not when the loop below reads them after the response's start
                head = (perf_counter_ns(), resp.content.total_bytes)
                await send({"type": "http.response.start", "status": resp.status,
                            "headers": response_headers(resp.raw_headers)})
                started = True
                try:
                    await self._body(send, resp, exchange, head)
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
                await json_reply(send, 502, {"error": f"llmtop watch: the upstream "
                                              f"{self.upstream} did not answer: {exc}"})
            # else: the response is left incomplete, so the client sees a cut, not an end

    async def _body(self, send: Send, resp: aiohttp.ClientResponse,
                    exchange: Exchange | None, head: tuple[int, int]) -> None:
        """Forward the body block by block; measure it when `exchange` is given. head: (when
        the headers were read, the body bytes buffered then): a block made only of those
        bytes is stamped as arrived then."""
        meter = None
        head_ns, early = head
        read = 0
        if exchange is not None:
            exchange.headers_ns = head_ns
            exchange.read_facts()
            exchange.status_code = resp.status
            encoding = resp.headers.get("Content-Encoding", "identity").lower()
            meter = exchange.meter = Meter(
                exchange.api, exchange.shape, streamed=exchange.facts.stream,
                status=resp.status, peer=self.peer, encoded=encoding != "identity",
                model=exchange.facts.model or "")
        async for block in resp.content.iter_any():
            read += len(block)
            t = head_ns if read <= early else perf_counter_ns()
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


async def _body_written(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
    # aiohttp calls this just before it writes (a part of) the body: the last one is the send
    exchange = ctx.trace_request_ctx
    if isinstance(exchange, Exchange):
        exchange.sent_ns = perf_counter_ns()
        asyncio.get_running_loop().call_soon(exchange.after_send)  # once it is written


__all__ = ["Exchange", "WatchProxy", "Watcher", "forward_headers", "response_headers"]
