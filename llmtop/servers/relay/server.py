"""The relay app: `POST /api/stream` turns an Ollama NDJSON stream into Server-Sent Events.

Routes (all JSON unless said):
* `GET /`: the one self-contained HTML page (page.html; inline CSS/JS, nothing external).
* `POST /api/stream`: body `{"model", "messages" | "prompt", "options"?, "think"?,
  "keep_alive"?}` → `text/event-stream` with these events, in order:
  - `token`, one per upstream chunk: `{"content", "thinking", "relay_recv_ns",
    "relay_offset_ms"}`; relay_recv_ns is the relay's `perf_counter_ns()` when the block of
    bytes that completed the chunk was handed to it (an OpenAI upstream's: when httpx-sse
    yielded the event), before the chunk was parsed; relay_offset_ms the time since the
    relay received the request. (`perf_counter_ns` is CLOCK_MONOTONIC on Linux and macOS,
    one clock for every process on the machine, so a client on the same machine can
    subtract it from its own stamp to get the relay→client delivery time.)
  - `done`, once, from the upstream's final chunk: every field of that chunk unchanged
    (Ollama names, durations in ns: total_duration, load_duration, prompt_eval_count,
    prompt_eval_duration, eval_count, eval_duration, done_reason, …) except the text
    (moved to "content"/"thinking") and "context", plus the relay's own timings in ms from
    its receipt of the request: relay_parse_ms (body parsed, upstream call starts),
    upstream_headers_ms (upstream answered with headers), relay_first_chunk_ms (first
    upstream chunk), relay_ttft_ms (first chunk with text), relay_request_ms (done chunk);
    upstream_connect_ms (TCP connect, None when a pooled connection was reused) and
    upstream_connection ("new" | "reused"); relay_chunks (token events sent).
  - or `error`, once, instead of `done`: `{"kind", "message", "remedy", "error", "status",
    "upstream", "relay_offset_ms"}`. kind is a `FailureKind` value; "error" is the upstream's
    own message when it sent one (e.g. its 404 text for an unknown model), "status" its HTTP
    status when it answered with one. Tokens already relayed stay relayed.
  A body that is not a valid request is answered `400 {"error": ...}` (no stream), one over
  the size limit `413`; a request from a foreign Host or Origin `403` (llmtop/servers/guard.py).
* `GET /api/models`: `{"models": [...], "default": name, "upstream": url}` from the
  upstream's `/api/tags` (502 with `{"error"}` when it does not answer).
* `GET /api/relay`: `{"upstream": url, "version": llmtop's version}`.

Design choices, each for the relay's cost (its added TTFT and CPU per request, measured by
bench/relay_overhead.py against a bare TCP forwarder in the same run) or for honesty:
* The upstream is fixed by `create_app(upstream_url)`. A request body naming a host
  ("host", "upstream", "url", "base_url") is rejected with 400, never followed.
* One aiohttp client session (one connection pool) for the app's lifetime (lifespan), for
  every upstream call: aiohttp's C parser and flat per-chunk path cost about 5 ms less CPU
  per relayed request than httpx's (httpcore, h11, anyio), and a well-kept library beats the
  hand-written client that was 2 ms cheaper still (servers/relay/upstream.py). On a pooled
  connection the upstream request is written as soon as the body is validated, before the
  SSE response starts.
* Upstream lines parsed with json's C decoder, events written as preformatted bytes, the
  lines of one upstream block in one ASGI body message, sent past the middleware
  (servers/relay/stream.py, sse.py); uvicorn does not buffer, asyncio sets TCP_NODELAY.
* The SSE response is servers/relay/sse.py's `SSEResponse`, not sse-starlette's
  EventSourceResponse (a cancel scope per frame, a task group per response) nor Starlette's
  StreamingResponse (no pings, no send timeout): a frame costs one `send`.
* Request validation: servers/relay/request.py. Failure wording: llmtop/engines/http.py.
* No compression on the stream (no GZip middleware is installed), `Cache-Control:
  no-cache`, `X-Accel-Buffering: no`.
* Keep-alive pings: kept, every 15 s, as SSE *comment* lines (`: ping`). A comment has no
  event name and no data, so every spec-conforming parser (EventSource, this page's parser,
  `RelayEngine`) ignores it; it can never be mistaken for a token, and it keeps proxies
  from closing the connection while a cold model loads for tens of seconds.
* Client gone (closed tab, dropped socket): `SSEResponse` sees `http.disconnect` and
  cancels the generator at its current await; its `finally` closes the upstream response
  (shielded, at most 1 s), which closes that upstream connection, so the engine stops
  generating.
* Upstream timeouts: connect 5 s, read 300 s (a cold 7B load takes tens of seconds; a hung
  upstream must still end the stream with an `error` event, never hang it). A client that
  stops reading without leaving is cut off after 30 s (`SSEResponse`'s send timeout), which
  closes the upstream as a disconnect does.
* Served by `llmtop.commands.serving.QuietServer`: uvicorn with its housekeeping tick once a
  second instead of ten times, so an idle relay costs 0.3 ms of CPU a second, not 1.35.
* What remains of the CPU per request is mostly the machine's price for waking a process
  once per chunk: on a 2-core VM, 21 chunks 10 ms apart cost a bare ASGI app that only sends
  them (bench/sse_floor.py, printed by bench/relay_overhead.py) about 300 µs each. Measured
  with bench/relay_overhead.py --no-engine, 4 runs each, alternating with the hand-written
  upstream client this replaced, same minutes (2-core VM, load 0.3–1.0): relay CPU per
  request 10.1 ms against its floor's 7.7 (that client: 9.4 against 8.2), i.e. about 1 ms
  more of the relay's own work; added TTFT, paired median, bare readers: +1.6 ms (that
  client: +1.0). aiohttp builds each request in a task and writes its body in another
  (Python 3.11), where the old client wrote on the spot: about 0.2 ms before the request
  is on the wire.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from time import perf_counter_ns

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from llmtop import __version__
from llmtop.engines.http import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_READ_TIMEOUT_S, BadRequest
from llmtop.servers.embedded.model_files import BUNDLED_MODEL_NAME
from llmtop.servers.guard import Guard, LocalOnly, parse_json, read_body
from llmtop.servers.relay.request import parse_stream_request
from llmtop.servers.relay.sse import DirectSend, SSEResponse
from llmtop.servers.relay.stream import events
from llmtop.servers.relay.upstream import METADATA_ERRORS, Relay

try:  # Starlette imports anyio's asyncio backend on the first streamed response; pay it now.
    import anyio._backends._asyncio  # noqa: F401
except ImportError:  # pragma: no cover
    pass

PING_INTERVAL_S = 15
SEND_TIMEOUT_S = 30.0  # a client that stops reading (without leaving) is cut off after this
PAGE_PATH = Path(__file__).with_name("page.html")
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    # The page is self-contained: forbid anything it would load from elsewhere.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "script-src 'unsafe-inline'; connect-src 'self'; img-src data:",
    "X-Llmtop-Relay": __version__,
}


def choose_default(models: list[str]) -> str | None:
    """The model the page preselects: gemma3:270m when installed, else the first, else None."""
    if BUNDLED_MODEL_NAME in models:
        return BUNDLED_MODEL_NAME
    return models[0] if models else None


# ---------------------------------------------------------------------- routes
# Each reads the relay's state from `request.app.state` (set by create_app): `relay` (Relay),
# `page` (the HTML text) and `ping_interval_s`.


async def root(request: Request) -> Response:
    """`GET /`: the self-contained page."""
    return HTMLResponse(request.app.state.page, headers=PAGE_HEADERS)


async def info(request: Request) -> Response:
    """`GET /api/relay`: the upstream's URL and llmtop's version."""
    return JSONResponse({"upstream": request.app.state.relay.upstream, "version": __version__})


async def models(request: Request) -> Response:
    """`GET /api/models`: the upstream's models and the page's default; 502 when the
    upstream does not answer."""
    relay: Relay = request.app.state.relay
    try:
        names = await relay.tags()
    except METADATA_ERRORS as exc:
        return JSONResponse(
            {"error": f"cannot list models at {relay.upstream} ({type(exc).__name__}: {exc})",
             "upstream": relay.upstream},
            status_code=502,
        )
    return JSONResponse(
        {"models": names, "default": choose_default(names), "upstream": relay.upstream}
    )


async def capabilities(request: Request) -> Response:
    """`GET /api/capabilities?model=NAME`: `{"model", "capabilities", "thinking"}` — the
    upstream's list for the model and whether it thinks (null when the upstream does not
    say), so the page can disable "think" for a model that answers every think request with
    400; 400 without a model. An upstream that cannot tell (down, or the model unknown to
    it) is still a 200, `thinking` null with its `error`: the page leaves "think" as it is,
    and a browser logs no failed request while the user is still typing a model's name."""
    relay: Relay = request.app.state.relay
    model = request.query_params.get("model", "").strip()
    if not model:
        return JSONResponse({"error": "give the model: /api/capabilities?model=NAME"},
                            status_code=400)
    try:
        found = await relay.capabilities(model)
    except METADATA_ERRORS as exc:
        return JSONResponse(
            {"model": model, "capabilities": None, "thinking": None,
             "error": f"cannot read {model!r} at {relay.upstream} ({type(exc).__name__}: {exc})"})
    return JSONResponse({"model": model, "capabilities": found,
                         "thinking": None if found is None else "thinking" in found})


async def stream(request: Request) -> Response:
    """`POST /api/stream`: validate, start the upstream call, answer with its SSE frames."""
    t0 = perf_counter_ns()
    relay: Relay = request.app.state.relay
    try:
        raw = await read_body(request, request.app.state.guard.max_body_bytes)
        job = parse_stream_request(parse_json(raw), relay.api)
    except BadRequest as exc:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)
    call = await relay.start(job, t0)
    return SSEResponse(
        events(relay, call),
        ping_interval_s=request.app.state.ping_interval_s,
        send_timeout_s=SEND_TIMEOUT_S,
        # Runs after the response in every case, also when the stream never started
        # (a client gone before the first byte): the upstream call is never left open.
        background=BackgroundTask(call.close),
    )


ROUTES = [
    Route("/", root, methods=["GET", "HEAD"]),
    Route("/api/relay", info, methods=["GET"]),
    Route("/api/models", models, methods=["GET"]),
    Route("/api/capabilities", capabilities, methods=["GET"]),
    Route("/api/stream", stream, methods=["POST"]),
]


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """Open the relay's connection pools for the app's lifetime."""
    await app.state.relay.open()
    try:
        yield
    finally:
        await app.state.relay.close()


def create_app(
    upstream_url: str,
    *,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ping_interval_s: float = PING_INTERVAL_S,
    guard: Guard | None = None,
    api: str = "ollama",
) -> Starlette:
    """The relay app for one fixed upstream (an Ollama-API base URL, see `resolve_host`; or
    with api "openai" an OpenAI-compatible server, whose SSE chunks become the same frames).

    Timeouts in seconds apply to the upstream; ping_interval_s is the SSE comment-ping
    interval (0 disables it). guard: the Host, Origin and size rules
    (`llmtop.servers.guard`; default: a loopback server's).
    """
    guard = guard or Guard()
    app = Starlette(routes=ROUTES, lifespan=lifespan,
                    middleware=[Middleware(DirectSend), Middleware(LocalOnly, guard=guard)])
    app.state.guard = guard
    app.state.relay = Relay(upstream_url, api=api, connect_timeout_s=connect_timeout_s,
                            read_timeout_s=read_timeout_s)
    app.state.page = PAGE_PATH.read_text(encoding="utf-8")
    app.state.ping_interval_s = ping_interval_s
    return app


__all__ = ["choose_default", "create_app"]
