"""The relay's side towards its upstream: one aiohttp client session for the app's lifetime,
and one call per request.

* One `aiohttp.ClientSession`, so one connection pool, for every upstream call: an Ollama
  upstream's NDJSON streams, an OpenAI upstream's SSE streams and the metadata calls
  (`/api/tags`, `{base}/models`). `trust_env=False`, so an environment proxy can never add a
  hidden hop; `auto_decompress=False` and `Accept-Encoding: identity`, so nothing upstream
  compresses or buffers; no cap on connections (a load test through the relay must not queue
  inside it). Timeouts: `sock_connect` for the TCP connect, `sock_read` between two reads
  (also before the headers), no total: a long answer is not cut.
* Why a library here: a general HTTP client (pooling, framing, stale connections) is not what
  llmtop measures, and a well-kept one beats our own even when slower. Measured per relayed
  request (relay CPU, scripted upstream, 21 chunks 10 ms apart, one bare ASGI app, 2-core VM):
  httpx 13.8 ms, aiohttp 8.3 ms, the hand-written asyncio + httptools client this replaced
  6.3 ms; servers/relay/server.py has the side-by-side numbers for the whole relay.
* Each upstream request is started as soon as the body is validated (`Relay.start`), which
  returns once the request is on the wire when a pooled connection carried it (aiohttp's
  trace `on_request_chunk_sent` fires just before the body's write, in the same step), or
  once a new connection is being opened (the SSE response does not wait for the connect).
  The TCP connect is stamped by the trace's `on_connection_create_start` / `_end`.
* A pooled connection the upstream closed while idle, found out only when the request was
  sent (it broke before one byte of an answer), is retried once on a new connection.
  aiohttp itself retries only idempotent methods (RFC 9112, "Retrying Requests"); the
  relay's POST is retried because nothing was answered, as uvicorn's 5 s keep-alive timeout
  makes this race common on a relay that idles.
* Failures: `upstream_failure` gives the same `Failure` (kind and words) that `OllamaEngine`
  gives for a direct request, from llmtop/engines/http.py (aiohttp's exceptions mapped onto
  the httpx classes `failure_for_transport` reads).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from time import perf_counter_ns
from types import SimpleNamespace
from typing import Any

import aiohttp
import anyio
import httpx

from llmtop import __version__
from llmtop.engines.events import Failure
from llmtop.engines.hosts import API_KEY_ENV, resolve_host
from llmtop.engines.http import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_READ_TIMEOUT_S,
    Peer,
    failure_for_transport,
)
from llmtop.engines.openai import api_base
from llmtop.servers.relay.request import StreamJob

CLOSE_TIMEOUT_S = 1.0  # closing the upstream connection after a client left
TAGS_TIMEOUT_S = 5.0  # listing the upstream's models
CONNECT_START = "connect_start"  # UpstreamCall.marks: the TCP connect (perf_counter ns)
CONNECT_DONE = "connect_done"
JSON_HEADERS = {"Content-Type": "application/json"}
# What an upstream call can raise (TimeoutError is an OSError; aiohttp's own are ClientErrors)
UPSTREAM_ERRORS = (aiohttp.ClientError, OSError)
METADATA_ERRORS = (aiohttp.ClientError, OSError, ValueError, AttributeError, TypeError, KeyError)


class UpstreamCall:
    """One request to the upstream, started as a task at once; stamps in perf_counter ns.

    t0: when the relay received the request. send: sends the request (`Relay._send`). marks:
    the TCP connect's CONNECT_START / CONNECT_DONE (absent when a pooled connection was
    reused). first_ns / text_ns: the first chunk, the first chunk with text. t_headers: the
    upstream's headers arrived. sent: token events written. `close()` is idempotent and
    shielded (it runs while the request's scope may already be cancelled): it cancels a send
    still in flight, or closes the response, within CLOSE_TIMEOUT_S.
    """

    def __init__(self, job: StreamJob, t0: int,
                 send: Callable[[UpstreamCall], Awaitable[aiohttp.ClientResponse]]) -> None:
        self.job = job
        self.t0 = t0
        self.marks: dict[str, int] = {}
        self.first_ns: int | None = None
        self.text_ns: int | None = None
        self.t_headers = 0
        self.sent = 0
        self._response: aiohttp.ClientResponse | None = None
        self._under_way: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.t_send = perf_counter_ns()
        self._task = asyncio.ensure_future(send(self))
        self._task.add_done_callback(self._stamp)

    def _stamp(self, task: asyncio.Future[aiohttp.ClientResponse]) -> None:
        self.t_headers = perf_counter_ns()
        self.under_way()
        if not task.cancelled() and task.exception() is None:
            self._response = task.result()

    def under_way(self) -> None:
        """Mark the request as on its way (written, or its connection being opened)."""
        if not self._under_way.done():
            self._under_way.set_result(None)

    async def on_its_way(self) -> None:
        """Until the request is written, its new connection is being opened, or it ended."""
        await self._under_way

    async def response(self) -> aiohttp.ClientResponse:
        """The upstream's response (headers read, body streaming). Raises UPSTREAM_ERRORS."""
        return await self._task

    async def close(self) -> None:
        """Cancel the send or close the response (shielded, at most CLOSE_TIMEOUT_S). A
        response read to its end has already gone back to the pool; closing it is a no-op."""
        with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
            if self._response is not None:
                self._response.close()


class Relay:
    """The relay's state: the fixed upstream and the client session used to reach it.

    upstream_url: anything `resolve_host` accepts; timeouts in seconds apply upstream.
    api: what the upstream speaks — "ollama" (NDJSON `/api/chat`) or "openai" (SSE
    `{base}/chat/completions`, the base as `llmtop.engines.openai.api_base` makes it).
    """

    def __init__(
        self,
        upstream_url: str,
        *,
        api: str = "ollama",
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        self.api = api
        self.upstream = api_base(upstream_url) if api == "openai" else resolve_host(upstream_url)
        self.read_timeout_s = read_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.peer = Peer(
            self.upstream,
            "an OpenAI-compatible server" if api == "openai" else "an Ollama-API server",
            "start the upstream (`ollama serve` or `llmtop engine`), or restart the relay "
            "with --upstream URL",
            read_timeout_s,
        )
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        """Create the client session (app startup)."""
        headers = {"Accept-Encoding": "identity", "User-Agent": f"llmtop-relay/{__version__}"}
        key = os.environ.get(API_KEY_ENV) if self.api == "openai" else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s,
                                          sock_read=self.read_timeout_s),
            headers=headers,
            trust_env=False,
            auto_decompress=False,
            trace_configs=[_trace_config()],
        )

    async def close(self) -> None:
        """Close the client session and its connections (app shutdown)."""
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def start(self, job: StreamJob, t0: int) -> UpstreamCall:
        """Send `job` upstream now; return once it is on its way (module docstring), so on a
        pooled connection the request is written before the SSE response's headers are."""
        call = UpstreamCall(job, t0, self._send)
        try:
            await call.on_its_way()
        except BaseException:
            await call.close()
            raise
        return call

    async def _send(self, call: UpstreamCall) -> aiohttp.ClientResponse:
        """POST the job; a reused connection that broke before any answer is retried once."""
        try:
            return await self._post(call)
        except aiohttp.ClientConnectionError as exc:
            stale = not isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ServerTimeoutError)
            if not stale or CONNECT_DONE in call.marks:
                raise  # a refused connect, a timeout, or a new connection that broke
        return await self._post(call)

    def _post(self, call: UpstreamCall) -> Awaitable[aiohttp.ClientResponse]:
        session = self._session()
        return session.post(self.upstream + call.job.path, data=call.job.payload,
                            headers=JSON_HEADERS, trace_request_ctx=call)

    def _session(self) -> aiohttp.ClientSession:
        assert self.session is not None, "the relay app was not started (lifespan)"
        return self.session

    async def model_names(self) -> list[str]:
        """The upstream's installed models (`/api/tags`), [] when it does not answer."""
        try:
            return await self.tags()
        except METADATA_ERRORS:
            return []

    async def capabilities(self, model: str) -> list[str] | None:
        """What the upstream says `model` can do (Ollama's `/api/show` `capabilities`:
        "completion", "thinking", "tools", ...), within TAGS_TIMEOUT_S; None when it does not
        say (an OpenAI-compatible upstream, an older Ollama, a reply without the list).
        Raises METADATA_ERRORS as `tags` does (a 404 for an unknown model too)."""
        if self.api == "openai":
            return None
        timeout = aiohttp.ClientTimeout(total=TAGS_TIMEOUT_S)
        async with self._session().post(self.upstream + "/api/show", json={"model": model},
                                        timeout=timeout) as resp:
            resp.raise_for_status()
            reply = await resp.json(content_type=None)
        found = reply.get("capabilities")
        return [str(c) for c in found] if isinstance(found, list) else None

    async def tags(self) -> list[str]:
        """The upstream's installed models (`/api/tags`, or `{base}/models` for an OpenAI
        upstream), within TAGS_TIMEOUT_S. Raises METADATA_ERRORS: aiohttp's errors (an HTTP
        error status too), a timeout, or ValueError and friends for a reply of another
        shape."""
        path = "/models" if self.api == "openai" else "/api/tags"
        timeout = aiohttp.ClientTimeout(total=TAGS_TIMEOUT_S)
        async with self._session().get(self.upstream + path, timeout=timeout) as resp:
            resp.raise_for_status()
            reply = await resp.json(content_type=None)
        if self.api == "openai":  # `{base}/models`: {"data": [{"id": ...}, ...]}
            return [str(m["id"]) for m in reply.get("data", []) if m.get("id")]
        models = reply.get("models", [])
        return [str(m.get("model") or m.get("name")) for m in models
                if m.get("model") or m.get("name")]


# ---------------------------------------------------------------------- aiohttp's trace


async def _connect_started(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
    call = ctx.trace_request_ctx
    if isinstance(call, UpstreamCall):
        call.marks.pop(CONNECT_DONE, None)  # a retry's new connection
        call.marks[CONNECT_START] = perf_counter_ns()
        call.under_way()  # the SSE response does not wait for a new connection


async def _connect_done(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
    call = ctx.trace_request_ctx
    if isinstance(call, UpstreamCall):
        call.marks[CONNECT_DONE] = perf_counter_ns()


async def _body_sent(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
    # aiohttp calls this just before it writes the body, in the same step (no await between)
    call = ctx.trace_request_ctx
    if isinstance(call, UpstreamCall):
        call.under_way()


def _trace_config() -> aiohttp.TraceConfig:
    """The trace that stamps an UpstreamCall (passed as `trace_request_ctx`)."""
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(_connect_started)
    trace.on_connection_create_end.append(_connect_done)
    trace.on_request_chunk_sent.append(_body_sent)
    return trace


# ---------------------------------------------------------------------- failures


def upstream_failure(exc: BaseException, *, peer: Peer) -> Failure:
    """The Failure for an exception from an upstream call (UPSTREAM_ERRORS), in the words
    `llmtop.engines.http.failure_for_transport` uses for httpx's: refused or no connection
    within the connect timeout → UNREACHABLE; no byte for the read timeout → TIMEOUT; the
    connection closed or broken mid-reply, or a reply that is not HTTP → TRUNCATED."""
    detail = str(exc) or type(exc).__name__
    mapped: BaseException = exc
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        mapped = httpx.ConnectTimeout(detail)
    elif isinstance(exc, aiohttp.ClientConnectorError):
        mapped = httpx.ConnectError(detail)
    elif isinstance(exc, TimeoutError):  # aiohttp's SocketTimeoutError (sock_read) included
        mapped = httpx.ReadTimeout(detail)
    elif isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError
                    | aiohttp.ClientResponseError):
        mapped = httpx.RemoteProtocolError(detail)
    elif isinstance(exc, aiohttp.ClientConnectionError):  # reset, broken pipe
        mapped = httpx.ReadError(detail)
    return failure_for_transport(mapped, peer=peer)
