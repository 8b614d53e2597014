"""The client side of llmtop's SSE relay (`llmtop relay`, server in `llmtop.servers.relay`).

`RelayEngine` has the same interface as `OllamaEngine` where llmtop uses one (`name`, `host`,
`stream_chat`, `list_models`, `model_info`, `version`, `aclose`), so the
TUI and the bench can measure a model *through* the relay exactly as they measure it
directly, and the difference is the relay's cost (docs/method.md, "Server-layer overhead").

The SSE stream is parsed by httpx-sse. Each event is stamped, the moment `aiter_sse` yields
it (its blank line read) and before its JSON is parsed, with the arrival of the bytes that
completed it (`stamps.arrival_ns`; the client's connections come from
`arrivals.measured_transport`, which notes when each block reached the event loop) — as
`OllamaEngine` stamps a complete NDJSON line (bench/relay_overhead.py measures both).
Metadata calls go straight to the relay's upstream (learned from `GET /api/relay`) through
an `OllamaEngine`: they are not what is being measured.

Failures never raise from a stream: the final event carries a `Failure` — the relay's
`error` event (kind, message, remedy as the relay wrote them), a relay that cannot be
reached, a non-200 answer (e.g. 400 for a bad request), a stream that ends without `done`,
or a read timeout.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent, aconnect_sse

from llmtop.engines.base import Engine, EngineError, ModelInfo
from llmtop.engines.events import Failure, FailureKind, ServerStats, StreamEvent
from llmtop.engines.http import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_READ_TIMEOUT_S,
    Autopsy,
    Peer,
    failure_for_http,
    failure_protocol,
    failure_truncated,
    failure_unreachable,
)
from llmtop.engines.ollama import OllamaEngine
from llmtop.engines.sse import end_stream
from llmtop.stamping.arrivals import measured_transport
from llmtop.stamping.stamps import arrival_ns, stamp_hooks


def _base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


class RelayEngine:
    """A client for one llmtop relay.

    relay_url: the relay's base URL, e.g. "http://127.0.0.1:8000".
    name: the engine's label for headers and logs.
    upstream: the upstream's URL for metadata calls; by default asked from the relay.
    metadata: the client metadata calls go to (e.g. an `OpenAIEngine` for an OpenAI
    upstream; not closed by `aclose`); by default an `OllamaEngine` at `upstream`. When it
    can count a prompt's tokens (`count_prompt_tokens`), so can this client (calibration).
    Timeouts in seconds; the read timeout applies between two SSE events (the relay's own
    comment pings every 15 s count as data, so a cold load does not trip it; a hung upstream
    is reported by the relay with an error event).
    """

    def __init__(
        self,
        relay_url: str,
        name: str = "relay",
        *,
        upstream: str | None = None,
        metadata: Engine | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        self.host = _base_url(relay_url)
        self.name = name
        self.read_timeout_s = read_timeout_s
        self.autopsy: Autopsy | None = None  # set by connect() for a server llmtop started
        self.peer = Peer(
            self.host,
            "the llmtop relay",
            "start it with `llmtop relay --upstream URL`, or check the relay URL",
            read_timeout_s,
        )
        self._connect_timeout_s = connect_timeout_s
        self._client = httpx.AsyncClient(
            base_url=self.host,
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
            trust_env=False,
            event_hooks=stamp_hooks(),
            transport=measured_transport(),
        )
        self._upstream_url = upstream
        self._upstream: Engine | None = metadata
        self._owns_upstream = metadata is None
        if hasattr(metadata, "count_prompt_tokens"):  # calibration's count, asked directly
            self.count_prompt_tokens = metadata.count_prompt_tokens  # type: ignore[union-attr]

    async def aclose(self) -> None:
        """Close the HTTP connection pools (relay and upstream metadata)."""
        await self._client.aclose()
        if self._upstream is not None and self._owns_upstream:
            await self._upstream.aclose()

    # ------------------------------------------------------------------ streaming

    def stream_chat(
        self,
        model: str,
        messages: list[Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
        think: bool | str | None = None,
        keep_alive: float | str | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Stream a chat through the relay (`POST /api/stream` → upstream `/api/chat`).

        Lazy: the request is sent on the first iteration. Yields text events, then exactly
        one final event with `done=True` (server stats unchanged from the upstream, or a
        `failure`)."""
        body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages]}
        if options:
            body["options"] = dict(options)
        if think is not None:
            body["think"] = think
        if keep_alive is not None:
            body["keep_alive"] = keep_alive
        return self._stream(json.dumps(body).encode())

    def _stream(self, payload: bytes) -> AsyncGenerator[StreamEvent, None]:
        return end_stream(self._attempt(payload), self.peer, autopsy=self.autopsy)

    async def _attempt(self, payload: bytes) -> AsyncGenerator[StreamEvent | Failure, None]:
        """POST /api/stream: the relay's events, or a Failure for a status other than 200."""
        headers = {"Content-Type": "application/json"}
        async with aconnect_sse(
            self._client, "POST", "/api/stream", content=payload, headers=headers
        ) as source:
            if source.response.status_code != 200:
                body = await source.response.aread()
                yield failure_for_http(source.response.status_code, body, peer=self.peer)
                return
            async with contextlib.aclosing(self._events(source)) as events:
                async for event in events:
                    yield event

    async def _events(self, source: EventSource) -> AsyncGenerator[StreamEvent | Failure, None]:
        """The relay's SSE events as StreamEvents, each stamped, when httpx-sse yields it (its
        blank line read), with the arrival of the bytes that completed it; then a Failure
        when the stream ends badly. The last item is a done StreamEvent or a Failure."""
        sses = source.aiter_sse()
        async for sse in sses:
            t_ns = arrival_ns()
            if not sse.data:
                continue  # the SSE spec dispatches no event without data
            try:
                event = self._event(sse, t_ns)
            except (ValueError, AttributeError, TypeError) as exc:
                yield failure_protocol(f"{type(exc).__name__}: {exc}", peer=self.peer)
                return
            if event is not None:
                yield event
                if isinstance(event, Failure) or event.done:
                    async for _ in sses:  # the response's end, when pulled (stamps.drain)
                        pass
                    return
        yield failure_truncated(self.peer)

    @staticmethod
    def _event(sse: ServerSentEvent, t_ns: int) -> StreamEvent | Failure | None:
        """One SSE event → a StreamEvent (`token`, `done`), a Failure (`error`), or None for
        an event name llmtop does not know (ignored: forward compatible). Raises ValueError
        etc. for data that is not a JSON object."""
        obj = json.loads(sse.data)
        if sse.event == "token":
            return StreamEvent(t_ns, obj.get("content") or "", obj.get("thinking") or "")
        if sse.event == "done":
            content, thinking = obj.get("content") or "", obj.get("thinking") or ""
            return StreamEvent(
                t_ns, content, thinking, done=True, stats=ServerStats.from_mapping(obj)
            )
        if sse.event == "error":
            return _relay_failure(obj)
        return None

    def unreachable(self, detail: str) -> Failure:
        """The failure for a relay that does not answer at all."""
        return failure_unreachable(detail, peer=self.peer)

    # ------------------------------------------------------------------ metadata

    async def upstream_url(self) -> str:
        """The relay's upstream base URL (`GET /api/relay`). Raises EngineError."""
        if self._upstream_url is None:
            try:
                resp = await self._client.get("/api/relay")
                resp.raise_for_status()
                self._upstream_url = str(resp.json()["upstream"])
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                raise EngineError(self.unreachable(str(exc) or type(exc).__name__)) from exc
            except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
                detail = f"GET /api/relay: {type(exc).__name__}: {exc}"
                raise EngineError(failure_protocol(detail, peer=self.peer)) from exc
        return self._upstream_url

    async def _delegate(self) -> Engine:
        if self._upstream is None:
            self._upstream = OllamaEngine(
                await self.upstream_url(),
                name=f"{self.name}-upstream",
                connect_timeout_s=self._connect_timeout_s,
                read_timeout_s=self.read_timeout_s,
            )
        return self._upstream

    async def version(self) -> str:
        """The upstream's version string. Raises EngineError."""
        return await (await self._delegate()).version()

    async def list_models(self) -> list[str]:
        """The upstream's installed models. Raises EngineError."""
        return await (await self._delegate()).list_models()

    async def model_info(self, model: str) -> ModelInfo:
        """The upstream's details of `model`. Raises EngineError."""
        return await (await self._delegate()).model_info(model)


def _relay_failure(obj: Mapping[str, Any]) -> Failure:
    """The relay's `error` event as a Failure (kind, message and remedy as the relay wrote them)."""
    try:
        kind = FailureKind(str(obj.get("kind")))
    except ValueError:
        kind = FailureKind.SERVER_ERROR
    message = obj.get("message") or obj.get("error") or "the relay reported an error"
    return Failure(kind, str(message), str(obj.get("remedy") or ""))
