"""`llmtop watch`'s pass-through: `WatchProxy` (one upstream engine: its rules, its caller
lookup, its measured requests' ends) and `WatchServer` (serving it on one address until told
to stop). The bytes themselves pass through servers/watch/connection.py, which says how.

Transparency (docs/guide/watch.md):
* Every method and path is forwarded: the body as received (a generation request's body is
  read whole first, to know its model; any other body is streamed through as it arrives),
  the headers as sent but Host (the upstream's own, so Ollama's Host check passes), the
  watch's token and the proxy-only ones (servers/watch/wire.py). Nothing is added: no
  User-Agent, Accept or Content-Type, no redirects followed, no decompression.
* The response goes back as the engine's bytes, block by block as the socket gave them
  (status line, headers, framing and body), each written to the client before the watch
  reads it: nothing is held back. CORS preflights and headers are the upstream's own.
* A client that leaves closes the engine connection paired with its own, so the engine stops
  generating (Ollama and llama-server stop when their client's socket closes). It is recorded
  as cancelled only when it left before the answer's final event had passed: the official
  `openai` client closes its connection as soon as it reads `[DONE]`, often before the
  engine's body has ended, and that answer is whole.

Measurement, for `POST` to a generation endpoint (`meter.endpoint_of`): stamps in
perf_counter ns — `received_ns` when the request's last segment arrived, `sent_ns` just before
its write to the engine (the point llmtop's own requests stamp as their send), each block's
arrival before it is forwarded; the block is parsed (`meter.Meter`) only after it was handed
to the client, so measuring adds nothing to what the client waits for. `hop_in_ns` (received
→ sent) and `hop_out_ns` (the first text's arrival → handed to the client) are the proxy's
own share of the app's TTFT.

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
import ssl
from collections.abc import Callable
from time import perf_counter_ns

from llmtop.engines.hosts import resolve_host
from llmtop.engines.http import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_READ_TIMEOUT_S, Peer
from llmtop.probes.callers import Caller, CallerCache
from llmtop.servers.guard import Guard
from llmtop.servers.watch.connection import ClientSide
from llmtop.servers.watch.exchange import Exchange, Watcher
from llmtop.servers.watch.wire import TOKEN_HEADER, Upstream, header

CALLER_WAIT_S = 2.0  # a finished request waits this long for its caller's name
GRACE_S = 0.2  # open streams get this long after a stop (commands/serving.py's value)
TICK_S = 0.1  # how often a server looks at `should_exit` (uvicorn's own tick)


class WatchProxy:
    """One upstream's pass-through. upstream_url: anything `resolve_host` accepts (raises
    HostError otherwise; ValueError for a scheme other than http/https); listen: (host,
    port) it is served on (for Host checks and the caller lookup); guard: Host/Origin rules;
    token: required on every request when given; watcher: told about measured requests;
    callers: the caller lookup (None: none); connect_timeout_s: the engine's connect, in
    seconds. There is no read timeout of the watch's own: the app's decides, as it would
    without the watch (a non-streamed answer from a model on a CPU can take longer than any
    figure the watch could pick, and a slow app's paused reading is not the engine's
    silence)."""

    def __init__(self, upstream_url: str, listen: tuple[str, int], watcher: Watcher, *,
                 guard: Guard | None = None, token: str | None = None,
                 callers: CallerCache | None = None,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
        self.upstream = resolve_host(upstream_url)
        self.wire = Upstream(self.upstream)
        # an https engine: the system's trust store, read once (tens of ms), not per connection
        self.tls = ssl.create_default_context() if self.wire.tls else None
        self.listen = listen
        shown = f"[{listen[0]}]" if ":" in listen[0] else listen[0]
        self.listen_text = f"{shown}:{listen[1]}"
        self.watcher = watcher
        self.guard = guard or Guard(listen[0])
        self._token = None if token is None else token.encode()
        # the watch's own header never reaches the engine; Authorization only when it carried
        # the token (`drop_for`): an engine started with an API key still gets the app's
        self.drop = frozenset({TOKEN_HEADER})
        self.callers = callers
        self.peer = Peer(self.upstream, "the watched engine",
                         "start the engine, or restart `llmtop watch` with --upstream URL",
                         DEFAULT_READ_TIMEOUT_S)
        self.connect_timeout_s = connect_timeout_s
        self.connections: set[ClientSide] = set()
        # connections whose first request has not yet passed the checks, oldest first
        self.unchecked: dict[ClientSide, None] = {}
        self.max_unchecked = unchecked_bound()
        self._finishing: set[asyncio.Task[None]] = set()

    @property
    def guarded(self) -> bool:
        """Requests must show a token: no engine connection before one did."""
        return self._token is not None

    def accepted(self, side: ClientSide) -> None:
        """A client connected. Past `max_unchecked` connections that have not yet sent a
        request that passed the checks, the oldest of them is closed: a flood of half-open
        connections cannot take every file descriptor from a client that holds the token
        (the newest is the likeliest to be a client about to send its request)."""
        self.connections.add(side)
        self.unchecked[side] = None
        while len(self.unchecked) > self.max_unchecked:
            oldest = next(iter(self.unchecked))
            del self.unchecked[oldest]
            if oldest.transport is not None:
                oldest.transport.abort()

    def checked(self, side: ClientSide) -> None:
        """A request of `side` passed the Host, Origin and token checks."""
        self.unchecked.pop(side, None)

    def left(self, side: ClientSide) -> None:
        """A client connection closed."""
        self.connections.discard(side)
        self.unchecked.pop(side, None)

    def protocol(self) -> ClientSide:
        """A new client connection's protocol (the server's factory)."""
        return ClientSide(self)

    def refusal(self, headers: list[tuple[bytes, bytes]]) -> tuple[int, str] | None:
        """(status, message) when the request may not pass: two Host or Origin headers (400),
        a foreign Host or Origin (403, servers/guard.py's rules), a missing or wrong token
        (401); None when it may."""
        for name in (b"host", b"origin"):
            if sum(k.lower() == name for k, _ in headers) > 1:
                return 400, (f"llmtop watch: more than one {name.decode().title()} header "
                             "(RFC 9112, 3.2): which one to check?")
        host_value = header(headers, b"host")
        host = host_value.decode("latin-1") if host_value else None
        if not self.guard.host_allowed(host):
            return 403, (f"Host {host!r} is not allowed: llmtop watch answers only to loopback "
                         f"names and {self.guard.bind_host}")
        origin = header(headers, b"origin")
        if origin is not None and not self.guard.origin_allowed(origin.decode("latin-1")):
            return 403, (f"origin {origin.decode('latin-1')!r} is not allowed; add it to "
                         "$LLMTOP_ORIGINS (comma-separated, * as a wildcard) and restart")
        if self._token is not None and not self._token_ok(headers):
            return 401, ("this llmtop watch needs its token: send `Authorization: Bearer "
                         "TOKEN` (an OpenAI client's api_key) or `X-Llmtop-Token: TOKEN`")
        return None

    def _bearer_ok(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """Authorization carries the token (the scheme's case is free: RFC 9110, 11.1)."""
        assert self._token is not None
        scheme, _, value = (header(headers, b"authorization") or b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self._token)

    def _token_ok(self, headers: list[tuple[bytes, bytes]]) -> bool:
        assert self._token is not None
        return (self._bearer_ok(headers)
                or hmac.compare_digest(header(headers, TOKEN_HEADER) or b"", self._token))

    def drop_for(self, headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
        """The request headers that stop here: the watch's token header, and Authorization
        when it carried the token (else it is the app's, for the engine)."""
        if self._token is not None and self._bearer_ok(headers):
            return self.drop | {b"authorization"}
        return self.drop

    def look_up_caller(self, exchange: Exchange) -> None:
        """Start naming the caller (once; in the CallerCache's executor)."""
        if self.callers is None or exchange.client is None or exchange.lookup is not None:
            return

        def found(task: asyncio.Future[Caller | None]) -> None:
            if not task.cancelled() and task.exception() is None:
                exchange.caller = task.result()

        exchange.lookup = asyncio.ensure_future(self.callers.find(exchange.client, self.listen))
        exchange.lookup.add_done_callback(found)

    def finish(self, exchange: Exchange) -> None:
        """A measured request ended (ok, failed or cancelled): tell the watcher, at once when
        its caller is named (or cannot be), else once the lookup ends (at most CALLER_WAIT_S)."""
        exchange.end_ns = exchange.end_ns or perf_counter_ns()
        exchange.read_facts()
        self.look_up_caller(exchange)
        if exchange.lookup is None or exchange.lookup.done():
            self.watcher.finished(exchange)
            return
        task = asyncio.ensure_future(self._finish(exchange))
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    async def _finish(self, exchange: Exchange) -> None:
        if exchange.lookup is not None and not exchange.lookup.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(exchange.lookup), CALLER_WAIT_S)
        self.watcher.finished(exchange)

    async def drain(self, grace_s: float) -> None:
        """At a stop: open connections get `grace_s` to end, then are closed (what they were
        measuring is recorded cancelled); the finished requests still naming their caller are
        told to the watcher."""
        deadline = asyncio.get_running_loop().time() + grace_s
        while self.connections and asyncio.get_running_loop().time() < deadline:
            if not any(c.queue for c in self.connections):
                break
            await asyncio.sleep(0.01)
        for side in list(self.connections):
            if side.transport is not None:
                side.transport.abort()
            side.connection_lost(None)
        if self._finishing:
            await asyncio.gather(*self._finishing, return_exceptions=True)


class WatchServer:
    """Serves one WatchProxy on its listen address until `should_exit` is set (from a signal
    handler or another thread: it is read every TICK_S), then gives open streams GRACE_S.
    `started` is True once it listens. `serve()` raises OSError when the address cannot be
    bound; `run()` serves in a new event loop (uvloop where installed) of this thread."""

    def __init__(self, proxy: WatchProxy, grace_s: float = GRACE_S) -> None:
        self.proxy = proxy
        self.grace_s = grace_s
        self.should_exit = False
        self.started = False

    async def serve(self) -> None:
        """Listen, serve until `should_exit`, drain."""
        loop = asyncio.get_running_loop()
        raise_fd_limit()
        self.proxy.max_unchecked = unchecked_bound()
        host, port = self.proxy.listen
        server = await loop.create_server(self.proxy.protocol, host, port)
        self.started = True
        try:
            # polled, not an Event: `should_exit` is set from signal handlers and other
            # threads, which cannot wake this loop by themselves (uvicorn's tick, too)
            while not self.should_exit:  # noqa: ASYNC110
                await asyncio.sleep(TICK_S)
        finally:
            server.close()
            await self.proxy.drain(self.grace_s)
            await server.wait_closed()

    def run(self) -> None:
        """Serve in this thread (its own event loop) until `should_exit`."""
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(self.serve())


def raise_fd_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (as Go's runtime does
    at start since 1.19) and return the soft limit now in force. A watch pairs each client
    connection with an engine connection, and the usual soft limit of 1024 is the first
    thing a busy app, or a flood, runs into; the hard limit is the administrator's."""
    try:
        import resource
    except ImportError:  # not Unix
        return 1 << 16
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def unchecked_bound() -> int:
    """How many connections may wait for their first checked request at once: a quarter of
    the open-file limit (each may hold an engine connection too, and the rest are for the
    clients that passed, the log and the probes), at least 16."""
    try:
        import resource
    except ImportError:
        return 1024
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return 1 << 16
    return max(16, soft // 4)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (it sends and wakes up for less), else
    asyncio's default (None)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


__all__ = ["Exchange", "WatchProxy", "WatchServer", "Watcher", "loop_factory"]
