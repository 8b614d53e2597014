"""The relay app: `POST /api/stream` turns an Ollama NDJSON stream into Server-Sent Events.

Routes (all JSON unless said):
* `GET /`: the one self-contained HTML page (page.html; inline CSS/JS, nothing external).
* `POST /api/stream`: body `{"model", "messages" | "prompt", "options"?, "think"?,
  "keep_alive"?}` → `text/event-stream` with these events, in order:
  - `token`, one per upstream chunk: `{"content", "thinking", "relay_recv_ns",
    "relay_offset_ms"}`; relay_recv_ns is the relay's `perf_counter_ns()` when the chunk's
    line was complete and parsed, relay_offset_ms the time since the relay received the
    request. (`perf_counter_ns` is CLOCK_MONOTONIC on Linux and macOS, one clock for every
    process on the machine, so a client on the same machine can subtract it from its own
    stamp to get the relay→client delivery time.)
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
  A body that is not a valid request is answered `400 {"error": ...}` (no stream).
* `GET /api/models`: `{"models": [...], "default": name, "upstream": url}` from the
  upstream's `/api/tags` (502 with `{"error"}` when it does not answer).
* `GET /api/relay`: `{"upstream": url, "version": llmtop's version}`.

Design choices, each for the ≤ 1 ms TTFT target or for honesty:
* The upstream is fixed by `create_app(upstream_url)`. A request body naming a host
  ("host", "upstream", "url", "base_url") is rejected with 400, never followed.
* One `httpx.AsyncClient` (one connection pool) for the app's lifetime (lifespan), so a
  request reuses a warm keep-alive connection; `trust_env=False` so an environment proxy can
  never add a hidden hop; `Accept-Encoding: identity` so nothing upstream compresses/buffers.
* The upstream request is started as a task as soon as the body is validated, so it is on
  its way while the SSE response's headers are written. Upstream bytes are split into lines
  here and parsed with `json.loads`; events are written as preformatted bytes (no pydantic,
  no per-event objects). Every event is one ASGI body message, written to the socket as
  sent (uvicorn does not buffer; asyncio sets TCP_NODELAY).
* No compression on the stream (`EventSourceResponse` refuses it, and no GZip middleware is
  installed), `Cache-Control: no-cache`, `X-Accel-Buffering: no`.
* Keep-alive pings: kept, every 15 s, as SSE *comment* lines (`: ping`). A comment has no
  event name and no data, so every spec-conforming parser (EventSource, this page's parser,
  `RelayEngine`) ignores it; it can never be mistaken for a token, and it keeps proxies
  from closing the connection while a cold model loads for tens of seconds.
* Client gone (closed tab, dropped socket): sse-starlette's disconnect listener cancels the
  generator at its current await; its `finally` closes the upstream response (shielded,
  at most 1 s), which closes that upstream connection, so the engine stops generating.
* Upstream timeouts: connect 5 s, read 300 s (a cold 7B load takes tens of seconds; a hung
  upstream must still end the stream with an `error` event, never hang it). A client that
  stops reading without leaving is cut off after 30 s (sse-starlette's send timeout), which
  closes the upstream as a disconnect does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import anyio
import httpx
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from llmtop import __version__
from llmtop.engines.events import FailureKind
from llmtop.engines.model_files import BUNDLED_MODEL_NAME
from llmtop.engines.ollama import resolve_host

try:  # Starlette imports anyio's asyncio backend on the first streamed response; pay it now.
    import anyio._backends._asyncio
except ImportError:  # pragma: no cover
    pass

DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_READ_TIMEOUT_S = 300.0
PING_INTERVAL_S = 15
CLOSE_TIMEOUT_S = 1.0  # closing the upstream connection after a client left
DRAIN_TIMEOUT_S = 0.5  # reading the upstream's body end after its done line
SEND_TIMEOUT_S = 30.0  # a client that stops reading (without leaving) is cut off after this
REDIRECT_KEYS = ("host", "upstream", "url", "base_url")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
PAGE_PATH = Path(__file__).with_name("page.html")

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_TOKEN = b"event: token\ndata: "
_END = b"\n\n"
_DROP_FROM_DONE = ("message", "response", "context")


class BadRequest(ValueError):
    """The stream request is not valid; answered with HTTP 400."""


@dataclass(frozen=True, slots=True)
class StreamJob:
    """A validated `/api/stream` request: the upstream path and the exact body to send."""

    path: str  # "/api/chat" or "/api/generate"
    model: str
    payload: bytes

    @property
    def chat(self) -> bool:
        """True for /api/chat (text under message.content), False for /api/generate."""
        return self.path == "/api/chat"


ACCEPTED_KEYS = frozenset({"model", "messages", "prompt", "options", "think", "keep_alive", "stream"})
OPTION_NAMES = frozenset({"temperature", "seed", "num_predict", "num_ctx", "top_k", "top_p", "min_p", "stop",
                          "repeat_penalty", "num_thread"})


def parse_stream_request(body: Any) -> StreamJob:
    """Validate a `/api/stream` body and build the upstream request. Raises BadRequest.

    Accepted: model (str), exactly one of messages (list of objects) or prompt (str),
    options (object), think (bool or "low"/"medium"/"high"), keep_alive (str or number).
    Fields that would name another host are refused as such; any other unknown field is
    refused too (a misplaced `num_predict` must not silently generate 200 tokens).
    """
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    for key in REDIRECT_KEYS:
        if key in body:
            raise BadRequest(
                f"'{key}' is not accepted: the relay's upstream is fixed when it starts "
                "(llmtop relay --upstream URL)"
            )
    unknown = sorted(set(body) - ACCEPTED_KEYS)
    if unknown:
        hint = " (generation options go inside \"options\")" if set(unknown) & OPTION_NAMES else ""
        raise BadRequest(f"unknown field(s) {', '.join(unknown)}: accepted are {', '.join(sorted(ACCEPTED_KEYS))}{hint}")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise BadRequest("model is required (a non-empty string)")
    messages, prompt = body.get("messages"), body.get("prompt")
    if (messages is None) == (prompt is None):
        raise BadRequest("send exactly one of 'messages' (a list) or 'prompt' (a string)")
    out: dict[str, Any] = {"model": model}
    if messages is not None:
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise BadRequest("messages must be a list of objects")
        out["messages"] = messages
        path = "/api/chat"
    else:
        if not isinstance(prompt, str):
            raise BadRequest("prompt must be a string")
        out["prompt"] = prompt
        path = "/api/generate"
    out["stream"] = True
    options = body.get("options")
    if options is not None:
        if not isinstance(options, dict):
            raise BadRequest("options must be an object")
        out["options"] = options
    think = body.get("think")
    if think is not None:
        if not (isinstance(think, bool) or think in ("low", "medium", "high")):
            raise BadRequest("think must be true, false, 'low', 'medium' or 'high'")
        out["think"] = think
    keep_alive = body.get("keep_alive")
    if keep_alive is not None:
        if isinstance(keep_alive, bool) or not isinstance(keep_alive, str | int | float):
            raise BadRequest("keep_alive must be a duration string or a number of seconds")
        out["keep_alive"] = keep_alive
    return StreamJob(path, model, _dumps(out).encode())


def _frame(event: str, data: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + _dumps(data).encode() + _END


def _ms(t_ns: int, t0_ns: int) -> float:
    return round((t_ns - t0_ns) / 1e6, 3)


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping")


class UpstreamCall:
    """One request to the upstream, started as a task at once; stamps in perf_counter ns.

    `close()` is idempotent and shielded (it runs while the request's scope may already be
    cancelled): it cancels a send still in flight, or closes the response, within 1 s.
    """

    def __init__(self, client: httpx.AsyncClient, job: StreamJob, t0: int) -> None:
        self.job = job
        self.t0 = t0
        self.marks: dict[str, int] = {}
        self.first_ns: int | None = None
        self.text_ns: int | None = None
        self.t_headers = 0
        self.sent = 0
        self._response: httpx.Response | None = None
        request = client.build_request(
            "POST",
            job.path,
            content=job.payload,
            headers={"Content-Type": "application/json"},
            extensions={"trace": self._trace},
        )
        self.t_send = perf_counter_ns()
        self._task = asyncio.ensure_future(client.send(request, stream=True))
        self._task.add_done_callback(self._stamp)

    async def _trace(self, name: str, _info: dict[str, Any]) -> None:
        if name.startswith("connection.connect_tcp"):
            self.marks[name] = perf_counter_ns()

    def _stamp(self, task: asyncio.Future[httpx.Response]) -> None:
        self.t_headers = perf_counter_ns()
        if not task.cancelled() and task.exception() is None:
            self._response = task.result()

    async def response(self) -> httpx.Response:
        """The upstream's response (headers read, body streaming). Raises httpx errors."""
        return await self._task

    async def close(self) -> None:
        """Cancel the send or close the response (shielded, at most CLOSE_TIMEOUT_S)."""
        with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
            if self._response is not None:
                await self._response.aclose()


class Relay:
    """The relay's state: the fixed upstream and the one HTTP client used to reach it."""

    def __init__(
        self,
        upstream_url: str,
        *,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        self.upstream = resolve_host(upstream_url)
        self.read_timeout_s = read_timeout_s
        self.timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        self.client: httpx.AsyncClient | None = None

    async def open(self) -> None:
        """Create the connection pool (app startup)."""
        self.client = httpx.AsyncClient(
            base_url=self.upstream,
            timeout=self.timeout,
            headers={"Accept-Encoding": "identity"},
            trust_env=False,
        )

    async def close(self) -> None:
        """Close the connection pool (app shutdown)."""
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    # ------------------------------------------------------------------ errors

    def _error(self, kind: FailureKind, message: str, remedy: str, t0: int, *,
               error: str | None = None, status: int | None = None) -> bytes:
        return _frame(
            "error",
            {
                "kind": kind.value,
                "message": message,
                "remedy": remedy,
                "error": error,
                "status": status,
                "upstream": self.upstream,
                "relay_offset_ms": _ms(perf_counter_ns(), t0),
            },
        )

    def _unreachable(self, exc: Exception, t0: int) -> bytes:
        return self._error(
            FailureKind.UNREACHABLE,
            f"the relay cannot reach its upstream at {self.upstream} ({exc or type(exc).__name__})",
            "start the upstream (`ollama serve` or `llmtop engine`), or restart the relay with "
            "--upstream URL",
            t0,
        )

    async def _status_error(self, job: StreamJob, response: httpx.Response, t0: int) -> bytes:
        raw = await response.aread()
        status = response.status_code
        upstream_error: str | None = None
        with contextlib.suppress(ValueError, AttributeError):
            upstream_error = json.loads(raw).get("error")
        if not isinstance(upstream_error, str):
            upstream_error = None
        text = upstream_error or raw[:200].decode(errors="replace").strip() or response.reason_phrase
        if status == 404 and upstream_error is not None:
            installed = await self.model_names()
            listing = ", ".join(installed) if installed else "none"
            return self._error(
                FailureKind.MODEL_NOT_FOUND,
                f"model '{job.model}' not found at {self.upstream}: {upstream_error} "
                f"(installed: {listing})",
                f"pull it with `ollama pull {job.model}` or pick an installed one",
                t0, error=upstream_error, status=status,
            )
        if status == 404:
            return self._error(
                FailureKind.PROTOCOL,
                f"{self.upstream} has no {job.path} (HTTP 404: {text})",
                "point --upstream at an Ollama-API server",
                t0, status=status,
            )
        if 400 <= status < 500:
            return self._error(
                FailureKind.BAD_REQUEST,
                f"the upstream rejected the request (HTTP {status}): {text}",
                "check the model name and options",
                t0, error=upstream_error, status=status,
            )
        return self._error(
            FailureKind.SERVER_ERROR,
            f"the upstream failed (HTTP {status}): {text}",
            "check the upstream's log and retry",
            t0, error=upstream_error, status=status,
        )

    # ------------------------------------------------------------------ streaming

    def start(self, job: StreamJob, t0: int) -> UpstreamCall:
        """Send `job` upstream now, as a task, so the upstream request is on its way while the
        SSE response's headers are written (both would otherwise sit in each other's path)."""
        assert self.client is not None, "the relay app was not started (lifespan)"
        return UpstreamCall(self.client, job, t0)

    def _line(self, call: UpstreamCall, line: bytes, t: int) -> tuple[bytes, bool]:
        """One upstream NDJSON line → (SSE frame, final?)."""
        t0, job = call.t0, call.job
        try:
            obj = json.loads(line)
            if job.chat:
                message = obj.get("message") or {}
                content = message.get("content") or ""
                thinking = message.get("thinking") or ""
            else:
                content = obj.get("response") or ""
                thinking = obj.get("thinking") or ""
        except (ValueError, AttributeError):
            return self._error(
                FailureKind.PROTOCOL,
                f"{self.upstream} sent a line that is not Ollama's protocol: "
                f"{line[:120].decode(errors='replace')!r}",
                "point --upstream at an Ollama-API server",
                t0,
            ), True
        if "error" in obj:
            error = str(obj["error"])
            return self._error(
                FailureKind.SERVER_ERROR,
                f"the upstream reported an error mid-stream: {error}",
                "the text received so far is kept; check the upstream's log",
                t0, error=error,
            ), True
        if call.first_ns is None:
            call.first_ns = t
        if call.text_ns is None and (content or thinking):
            call.text_ns = t
        if obj.get("done"):
            done = {k: v for k, v in obj.items() if k not in _DROP_FROM_DONE}
            marks = call.marks
            connected = "connection.connect_tcp.complete" in marks
            done.update(
                content=content,
                thinking=thinking,
                relay_recv_ns=t,
                relay_offset_ms=_ms(t, t0),
                relay_parse_ms=_ms(call.t_send, t0),
                upstream_headers_ms=_ms(call.t_headers, t0),
                relay_first_chunk_ms=_ms(call.first_ns, t0),
                relay_ttft_ms=_ms(call.text_ns, t0) if call.text_ns is not None else None,
                relay_request_ms=_ms(t, t0),
                upstream_connect_ms=(
                    _ms(marks["connection.connect_tcp.complete"],
                        marks.get("connection.connect_tcp.started", call.t_send))
                    if connected else None
                ),
                upstream_connection="new" if connected else "reused",
                relay_chunks=call.sent,
                upstream=self.upstream,
            )
            return _frame("done", done), True
        call.sent += 1
        return (
            _TOKEN
            + _dumps(
                {"content": content, "thinking": thinking, "relay_recv_ns": t, "relay_offset_ms": _ms(t, t0)}
            ).encode()
            + _END
        ), False

    async def events(self, call: UpstreamCall) -> AsyncIterator[bytes]:
        """The SSE byte frames for one request (see the module docstring). Never raises for
        the upstream's misbehaviour; always ends with exactly one `done` or `error` frame,
        unless the client leaves first."""
        t0 = call.t0
        try:
            try:
                response = await call.response()
            except (httpx.ConnectError, httpx.ConnectTimeout, OSError) as exc:
                yield self._unreachable(exc, t0)
                return
            if response.status_code != 200:
                yield await self._status_error(call.job, response, t0)
                return
            # Split lines ourselves (bytes in, json.loads on bytes): fewer layers than
            # aiter_lines' text decoding, on the path of every token.
            chunks = response.aiter_bytes()
            buf = b""
            async for raw in chunks:
                t = perf_counter_ns()
                buf = buf + raw if buf else raw
                if b"\n" not in buf:
                    continue
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    frame, final = self._line(call, line, t)
                    yield frame
                    if final:
                        # After done: read the rest of the body (the chunked terminator, already
                        # on its way) so the pooled connection is reused by the next request
                        # instead of being closed and reconnected inside that request's TTFT.
                        with anyio.move_on_after(DRAIN_TIMEOUT_S):
                            async for _ in chunks:
                                pass
                        return
            if buf.strip():  # a last line without its newline
                frame, final = self._line(call, buf, perf_counter_ns())
                yield frame
                if final:
                    return
            yield self._error(
                FailureKind.TRUNCATED,
                f"the stream from {self.upstream} ended without a done chunk (response truncated)",
                "the upstream may have crashed or dropped the connection; check its log and retry",
                t0,
            )
        except httpx.TimeoutException:
            yield self._error(
                FailureKind.TIMEOUT,
                f"no data from {self.upstream} for {self.read_timeout_s:g} s",
                "the upstream is stuck or overloaded; check it, or raise the relay's read timeout",
                t0,
            )
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            yield self._error(
                FailureKind.TRUNCATED,
                f"the connection to {self.upstream} broke mid-stream ({type(exc).__name__}: {exc})",
                "the upstream may have crashed; check its log and retry",
                t0,
            )
        finally:
            # Runs on success, on error and when the client left (the generator is cancelled
            # at its await, or closed at its yield): close the upstream response, which closes
            # a connection whose body was not read to the end, so the engine notices and
            # stops generating.
            await call.close()

    # ------------------------------------------------------------------ metadata

    async def model_names(self) -> list[str]:
        """The upstream's installed models (`/api/tags`), [] when it does not answer."""
        try:
            return await self._tags()
        except (httpx.HTTPError, ValueError, AttributeError, TypeError):
            return []

    async def _tags(self) -> list[str]:
        assert self.client is not None
        resp = await self.client.get("/api/tags", timeout=5.0)
        resp.raise_for_status()
        return [str(m.get("model") or m.get("name")) for m in resp.json().get("models", [])
                if m.get("model") or m.get("name")]


def choose_default(models: list[str]) -> str | None:
    """The model the page preselects: gemma3:270m when installed, else the first, else None."""
    if BUNDLED_MODEL_NAME in models:
        return BUNDLED_MODEL_NAME
    return models[0] if models else None


def create_app(
    upstream_url: str,
    *,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ping_interval_s: float = PING_INTERVAL_S,
) -> Starlette:
    """The relay app for one fixed upstream (an Ollama-API base URL, see `resolve_host`).

    Timeouts in seconds apply to the upstream; ping_interval_s is the SSE comment-ping
    interval (0 disables it with sse-starlette ≥ 3).
    """
    relay = Relay(upstream_url, connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s)
    page = PAGE_PATH.read_text(encoding="utf-8")

    async def root(_: Request) -> Response:
        return HTMLResponse(
            page,
            headers={
                "Cache-Control": "no-store",
                # The page is self-contained: forbid anything it would load from elsewhere.
                "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                "script-src 'unsafe-inline'; connect-src 'self'; img-src data:",
                "X-Llmtop-Relay": __version__,
            },
        )

    async def info(_: Request) -> Response:
        return JSONResponse({"upstream": relay.upstream, "version": __version__})

    async def models(_: Request) -> Response:
        try:
            names = await relay._tags()
        except (httpx.HTTPError, ValueError, AttributeError, TypeError) as exc:
            return JSONResponse(
                {"error": f"cannot list models at {relay.upstream} ({type(exc).__name__}: {exc})",
                 "upstream": relay.upstream},
                status_code=502,
            )
        return JSONResponse({"models": names, "default": choose_default(names), "upstream": relay.upstream})

    async def stream(request: Request) -> Response:
        t0 = perf_counter_ns()
        try:
            job = parse_stream_request(json.loads(await request.body()))
        except ValueError as exc:  # BadRequest, or JSONDecodeError
            message = str(exc) if isinstance(exc, BadRequest) else f"the request body is not JSON ({exc})"
            return JSONResponse({"error": message}, status_code=400)
        call = relay.start(job, t0)
        return EventSourceResponse(
            relay.events(call),
            headers=SSE_HEADERS,
            sep="\n",
            ping=ping_interval_s,
            send_timeout=SEND_TIMEOUT_S,
            ping_message_factory=_ping,
            # Runs after the response in every case, also when the stream never started
            # (a client gone before the first byte): the upstream call is never left open.
            background=BackgroundTask(call.close),
        )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await relay.open()
        try:
            yield
        finally:
            await relay.close()

    app = Starlette(
        routes=[
            Route("/", root, methods=["GET", "HEAD"]),
            Route("/api/relay", info, methods=["GET"]),
            Route("/api/models", models, methods=["GET"]),
            Route("/api/stream", stream, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.state.relay = relay
    return app


__all__ = ["BadRequest", "Relay", "StreamJob", "choose_default", "create_app", "parse_stream_request"]
