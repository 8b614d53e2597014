"""The relay's side towards its upstream: connection pools for the app's lifetime, and one
call per request.

* An Ollama upstream's streams go through `llmtop.relay.wire.Pool` (asyncio + httptools: the
  cheapest path per chunk, measured there); an OpenAI upstream's streams and every metadata
  call (`/api/tags`, `/models`) through one `httpx.AsyncClient` (`trust_env=False`, so an
  environment proxy can never add a hidden hop). Both keep connections alive between
  requests and send `Accept-Encoding: identity`, so nothing upstream compresses or buffers.
* Each upstream request is started as soon as the body is validated (`Relay.start`): on a
  pooled wire connection it is written there and then, before the SSE response starts;
  otherwise (a new connection, httpx) in a task that runs when the handler first yields.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from time import perf_counter_ns
from typing import Any, Protocol

import anyio
import httpx

from llmtop.engines.hosts import resolve_host
from llmtop.engines.http import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_READ_TIMEOUT_S, Peer
from llmtop.engines.openai import API_KEY_ENV, api_base
from llmtop.relay.request import StreamJob
from llmtop.relay.wire import Pool

CLOSE_TIMEOUT_S = 1.0  # closing the upstream connection after a client left
TAGS_TIMEOUT_S = 5.0  # listing the upstream's models


class Streamed(Protocol):
    """What the relay's stream uses of an upstream response: an httpx.Response (OpenAI
    upstream) or a `wire.WireResponse` (Ollama upstream)."""

    status_code: int

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...

    async def aread(self) -> bytes: ...

    async def aclose(self) -> None: ...


class UpstreamCall:
    """One request to the upstream, started as a task at once; stamps in perf_counter ns.

    t0: when the relay received the request. send: sends the request (`Relay.start` picks
    it). marks: stamps of the TCP connect under httpcore's trace names (absent when a pooled
    connection was reused). first_ns / text_ns: the first chunk, the first chunk with text.
    t_headers: the upstream's headers arrived. sent: token events written. `close()` is
    idempotent and shielded (it runs while the request's scope may already be cancelled): it
    cancels a send still in flight, or closes the response, within CLOSE_TIMEOUT_S.
    """

    def __init__(self, job: StreamJob, t0: int,
                 send: Callable[[UpstreamCall], Awaitable[Streamed]]) -> None:
        self.job = job
        self.t0 = t0
        self.marks: dict[str, int] = {}
        self.first_ns: int | None = None
        self.text_ns: int | None = None
        self.t_headers = 0
        self.sent = 0
        self._response: Streamed | None = None
        self.t_send = perf_counter_ns()
        self._task = asyncio.ensure_future(send(self))
        self._task.add_done_callback(self._stamp)

    def _stamp(self, task: asyncio.Future[Streamed]) -> None:
        self.t_headers = perf_counter_ns()
        if not task.cancelled() and task.exception() is None:
            self._response = task.result()

    async def response(self) -> Streamed:
        """The upstream's response (headers read, body streaming). Raises httpx's errors."""
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
    """The relay's state: the fixed upstream and the connection pools used to reach it.

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
        self.timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        self.client: httpx.AsyncClient | None = None
        self.pool: Pool | None = None

    async def open(self) -> None:
        """Create the connection pools (app startup)."""
        headers = {"Accept-Encoding": "identity"}
        key = os.environ.get(API_KEY_ENV) if self.api == "openai" else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.client = httpx.AsyncClient(
            base_url=self.upstream,
            timeout=self.timeout,
            headers=headers,
            trust_env=False,
        )
        if self.api == "ollama":
            self.pool = Pool(self.upstream, connect_timeout_s=self.connect_timeout_s,
                             read_timeout_s=self.read_timeout_s,
                             headers={**headers, "Content-Type": "application/json"})

    async def close(self) -> None:
        """Close the connection pools (app shutdown)."""
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        if self.pool is not None:
            await self.pool.aclose()
            self.pool = None

    def start(self, job: StreamJob, t0: int) -> UpstreamCall:
        """Send `job` upstream now (see the module docstring), so the upstream request is on
        its way before the SSE response's headers are written."""
        assert self.client is not None, "the relay app was not started (lifespan)"
        return UpstreamCall(job, t0, self._send_wire if self.pool is not None else self._send)

    def _send_wire(self, call: UpstreamCall) -> Awaitable[Streamed]:
        """The request through the wire pool: on a pooled connection it is written now."""
        assert self.pool is not None
        return self.pool.request("POST", call.job.path, call.job.payload, call.marks)

    async def _send(self, call: UpstreamCall) -> Streamed:
        """The request through httpx (an OpenAI upstream), TCP connect stamped by its trace."""
        assert self.client is not None

        async def trace(name: str, _info: dict[str, Any]) -> None:
            if name.startswith("connection.connect_tcp"):
                call.marks[name] = perf_counter_ns()

        request = self.client.build_request(
            "POST", call.job.path, content=call.job.payload,
            headers={"Content-Type": "application/json"}, extensions={"trace": trace},
        )
        return await self.client.send(request, stream=True)

    async def model_names(self) -> list[str]:
        """The upstream's installed models (`/api/tags`), [] when it does not answer."""
        try:
            return await self.tags()
        except (httpx.HTTPError, ValueError, AttributeError, TypeError):
            return []

    async def tags(self) -> list[str]:
        """The upstream's installed models (`/api/tags`, or `{base}/models` for an OpenAI
        upstream). Raises httpx errors, or ValueError and friends for a reply of another
        shape."""
        assert self.client is not None, "the relay app was not started (lifespan)"
        if self.api == "openai":  # `{base}/models`: {"data": [{"id": ...}, ...]}
            resp = await self.client.get("/models", timeout=TAGS_TIMEOUT_S)
            resp.raise_for_status()
            return [str(m["id"]) for m in resp.json().get("data", []) if m.get("id")]
        resp = await self.client.get("/api/tags", timeout=TAGS_TIMEOUT_S)
        resp.raise_for_status()
        models = resp.json().get("models", [])
        return [str(m.get("model") or m.get("name")) for m in models
                if m.get("model") or m.get("name")]

