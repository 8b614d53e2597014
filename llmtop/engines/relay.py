"""The client side of llmtop's SSE relay (`llmtop relay`, server in `llmtop.relay`).

`RelayEngine` has the same interface as `OllamaEngine` where llmtop uses one (`name`, `host`,
`stream_chat`, `stream_generate`, `list_models`, `model_info`, `version`, `aclose`), so the
TUI and the bench can measure a model *through* the relay exactly as they measure it
directly, and the difference is the relay's cost (docs/method.md, "Server-layer overhead").

Each SSE event is stamped with `perf_counter_ns()` the moment it is complete (blank line
read) and its JSON parsed — the same point at which `OllamaEngine` stamps an NDJSON chunk.
Metadata calls go straight to the relay's upstream (learned from `GET /api/relay`) through
an `OllamaEngine`: they are not what is being measured.

Failures never raise from a stream: the final event carries a `Failure` — the relay's
`error` event (kind, message, remedy as the relay wrote them), a relay that cannot be
reached, a non-200 answer (e.g. 400 for a bad request), a stream that ends without `done`,
or a read timeout.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from time import perf_counter_ns
from typing import Any

import httpx

from llmtop.engines.events import Failure, FailureKind, ServerStats, StreamEvent
from llmtop.engines.ollama import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_READ_TIMEOUT_S,
    EngineError,
    ModelInfo,
    OllamaEngine,
)


def _base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


class RelayEngine:
    """A client for one llmtop relay.

    relay_url: the relay's base URL, e.g. "http://127.0.0.1:8000".
    name: the engine's label for headers and logs.
    upstream: the upstream's URL for metadata calls; by default asked from the relay.
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
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        self.host = _base_url(relay_url)
        self.name = name
        self.read_timeout_s = read_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._client = httpx.AsyncClient(
            base_url=self.host,
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
            trust_env=False,
        )
        self._upstream_url = upstream
        self._upstream: OllamaEngine | None = None

    async def aclose(self) -> None:
        """Close the HTTP connection pools (relay and upstream metadata)."""
        await self._client.aclose()
        if self._upstream is not None:
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
    ) -> AsyncIterator[StreamEvent]:
        """Stream a chat through the relay (`POST /api/stream` → upstream `/api/chat`).

        Lazy: the request is sent on the first iteration. Yields text events, then exactly
        one final event with `done=True` (server stats unchanged from the upstream, or a
        `failure`)."""
        body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages]}
        return self._stream(body, options, think, keep_alive)

    def stream_generate(
        self,
        model: str,
        prompt: str,
        *,
        options: Mapping[str, Any] | None = None,
        think: bool | str | None = None,
        keep_alive: float | str | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Stream a completion through the relay (upstream `/api/generate`); same contract."""
        return self._stream({"model": model, "prompt": prompt}, options, think, keep_alive)

    async def _stream(
        self,
        body: dict[str, Any],
        options: Mapping[str, Any] | None,
        think: bool | str | None,
        keep_alive: float | str | None,
    ) -> AsyncIterator[StreamEvent]:
        if options:
            body["options"] = dict(options)
        if think is not None:
            body["think"] = think
        if keep_alive is not None:
            body["keep_alive"] = keep_alive
        payload = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        failure: Failure
        try:
            async with self._client.stream("POST", "/api/stream", content=payload, headers=headers) as resp:
                if resp.status_code != 200:
                    failure = await self._status_failure(resp)
                else:
                    event, data = "message", []
                    async for line in resp.aiter_lines():
                        if line:
                            if line[0] == ":":
                                continue  # a comment: the relay's keep-alive ping
                            field, _, value = line.partition(":")
                            if value[:1] == " ":
                                value = value[1:]
                            if field == "data":
                                data.append(value)
                            elif field == "event":
                                event = value
                            continue
                        if not data:  # a blank line ending nothing
                            event = "message"
                            continue
                        raw, name = "\n".join(data), event
                        event, data = "message", []
                        try:
                            obj = json.loads(raw)
                            t_ns = perf_counter_ns()
                            if name == "token":
                                yield StreamEvent(t_ns, obj.get("content") or "", obj.get("thinking") or "")
                                continue
                            if name == "done":
                                yield StreamEvent(
                                    t_ns,
                                    obj.get("content") or "",
                                    obj.get("thinking") or "",
                                    done=True,
                                    stats=ServerStats.from_mapping(obj),
                                )
                                return
                            if name == "error":
                                failure = _relay_failure(obj)
                                break
                        except (ValueError, AttributeError, TypeError) as exc:
                            failure = self._protocol(f"{type(exc).__name__}: {exc}")
                            break
                        # an event name llmtop does not know: ignore it (forward compatible)
                    else:
                        failure = Failure(
                            FailureKind.TRUNCATED,
                            f"the stream from the relay at {self.host} ended without a done event",
                            "the relay or its upstream may have crashed; check their logs and retry",
                        )
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            failure = self.unreachable(str(exc) or type(exc).__name__)
        except httpx.TimeoutException:
            failure = Failure(
                FailureKind.TIMEOUT,
                f"no data from the relay at {self.host} for {self.read_timeout_s:.0f} s",
                "the relay is stuck; check it, or raise the read timeout",
            )
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            failure = Failure(
                FailureKind.TRUNCATED,
                f"the connection to the relay at {self.host} broke mid-stream ({type(exc).__name__}: {exc})",
                "the relay may have stopped; check it and retry",
            )
        except httpx.HTTPError as exc:
            failure = Failure(
                FailureKind.SERVER_ERROR,
                f"request to the relay at {self.host} failed: {type(exc).__name__}: {exc}",
                "check the relay and retry",
            )
        yield StreamEvent(perf_counter_ns(), done=True, failure=failure)

    async def _status_failure(self, resp: httpx.Response) -> Failure:
        raw = await resp.aread()
        try:
            message = str(json.loads(raw).get("error"))
        except (ValueError, AttributeError):
            message = raw[:200].decode(errors="replace").strip() or resp.reason_phrase
        if resp.status_code == 404:
            return self._protocol(f"HTTP 404 for /api/stream: {message}")
        kind = FailureKind.BAD_REQUEST if 400 <= resp.status_code < 500 else FailureKind.SERVER_ERROR
        return Failure(
            kind,
            f"the relay at {self.host} rejected the request (HTTP {resp.status_code}): {message}",
            "check the model name and options" if kind is FailureKind.BAD_REQUEST else "check the relay's log",
        )

    def _protocol(self, detail: str) -> Failure:
        return Failure(
            FailureKind.PROTOCOL,
            f"{self.host} did not answer as an llmtop relay ({detail})",
            "check that the URL points at `llmtop relay`",
        )

    def unreachable(self, detail: str) -> Failure:
        """The failure for a relay that does not answer at all."""
        return Failure(
            FailureKind.UNREACHABLE,
            f"cannot reach the llmtop relay at {self.host} ({detail})",
            "start it with `llmtop relay --upstream URL`, or check the relay URL",
        )

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
                raise EngineError(self._protocol(f"GET /api/relay: {type(exc).__name__}: {exc}")) from exc
        return self._upstream_url

    async def _delegate(self) -> OllamaEngine:
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
