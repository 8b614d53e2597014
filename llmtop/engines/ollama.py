"""Ollama's native API through the official `ollama` client (`AsyncClient`).

Used for a real Ollama server and for llmtop's embedded engine, which speaks the same API.
Streams yield `StreamEvent`s stamped, once the client has parsed the chunk's JSON line and
before any UI work, with the arrival of the bytes that completed the line (`stamps.arrival_ns`:
the client's connections come from `arrivals.measured_transport`, which notes when each block
reached the event loop). The send stamp is httpcore's "request body written" trace event
(stamping/stamps.py). After the `done` chunk the response is read to its end before the done
event is handed on, so the connection goes back to the pool and the next request does not
reconnect inside its TTFT.

Every failure becomes a `StreamEvent(done=True, failure=Failure(...))` with a specific
message and remedy — connection refused, unknown model (with the installed ones listed), an
`{"error": …}` line mid-stream (text already yielded is kept by the caller), a stream that
ends without `done`, a read timeout. Nothing here raises for a server's misbehaviour.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from time import perf_counter_ns
from typing import Any

import httpx
import pydantic

from llmtop.engines.hosts import proxy_for, resolve_host

# The `ollama` package builds a module-level default client when it is imported, from
# $OLLAMA_HOST and from the proxy variables (httpx's trust_env): a host it cannot parse
# ("[::1", a port out of range) raises there, and so does a SOCKS proxy without the socksio
# package (ALL_PROXY=socks5://…: "ImportError: Using SOCKS proxy, but the 'socksio' package
# is not installed"). llmtop never uses that client: it passes every client its host and its
# proxy explicitly (llmtop/engines/hosts.py, which says what is wrong with a value), so the
# default client is built without them.
IMPORT_HIDDEN = ("OLLAMA_HOST", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy",
                 "HTTP_PROXY", "http_proxy")
_saved = {name: os.environ.pop(name) for name in IMPORT_HIDDEN if name in os.environ}
try:
    import ollama
finally:
    os.environ.update(_saved)

from llmtop.engines.base import EngineError, ModelInfo
from llmtop.engines.events import Failure, ServerStats, StreamEvent, tool_call_text
from llmtop.engines.http import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_READ_TIMEOUT_S,
    Autopsy,
    Peer,
    StreamProgress,
    failure_for_http,
    failure_for_transport,
    failure_in_stream,
    failure_protocol,
    failure_truncated,
    failure_unreachable,
)
from llmtop.stamping.arrivals import measured_transport
from llmtop.stamping.stamps import arrival_ns, drain, stamp_hooks


class OllamaEngine:
    """A client for one Ollama-API server (real Ollama or llmtop's embedded engine).

    host: base URL or anything `OLLAMA_HOST` accepts (`llmtop.engines.hosts`; raises
    HostError for one that names no server).
    proxy: the proxy requests go through (never one for a loopback host; else the
    environment's, `NO_PROXY` included), recorded in the session log; None = direct.
    connect_timeout_s / read_timeout_s: httpx timeouts in seconds (the client's default is
    none at all, so a hung server would block forever).
    name: the engine's label for headers and logs ("ollama" or "embedded").
    limits: the connection pool's size (default httpx's: 100 connections, 20 kept alive);
    a load generator sizes it to its concurrency (llmtop/sessions/runners/load/runner.py).
    """

    def __init__(
        self,
        host: str | None = None,
        *,
        name: str = "ollama",
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        limits: httpx.Limits | None = None,
    ) -> None:
        self.host = resolve_host(host)
        self.name = name
        self.read_timeout_s = read_timeout_s
        self.peer = Peer(
            self.host,
            "an Ollama server",
            "start it with `ollama serve`, set OLLAMA_HOST or --host, or use --engine embedded",
            read_timeout_s,
        )
        timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        self.autopsy: Autopsy | None = None  # set by connect() for a server llmtop started
        self.proxy = proxy_for(self.host)
        self._client = ollama.AsyncClient(
            host=self.host, timeout=timeout, trust_env=False, event_hooks=stamp_hooks(),
            transport=measured_transport(self.proxy, limits),
        )

    async def aclose(self) -> None:
        """Close the underlying HTTP connection pool (the ollama client has no public close;
        its httpx client is `_client`)."""
        await self._client._client.aclose()

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
        """Stream `/api/chat`. The request is sent on the first iteration (take the send stamp
        just before it). Yields text events, then exactly one final event with `done=True`
        (server stats, or a `failure`)."""

        async def start() -> AsyncIterator[Any]:
            return await self._client.chat(
                model=model,
                messages=list(messages),
                stream=True,
                options=dict(options) if options else None,
                think=think,
                keep_alive=keep_alive,
            )

        return self._stream(model, start, chat_texts)

    async def _stream(
        self, model: str, start: Any, texts: Any
    ) -> AsyncGenerator[StreamEvent, None]:
        progress = StreamProgress()
        try:
            parts = await start()
            async with contextlib.aclosing(parts):
                async for part in parts:
                    t_ns = arrival_ns()
                    progress.saw(t_ns)
                    content, thinking, tools = texts(part)
                    if part.done:
                        done = StreamEvent(t_ns, content or "", thinking or "", done=True,
                                           stats=ServerStats.from_mapping(part),
                                           tool_calls=tools)
                        await drain(parts)
                        yield done
                        return
                    yield StreamEvent(t_ns, content or "", thinking or "", tool_calls=tools)
            failure = failure_truncated(self.peer, progress)
        except ollama.ResponseError as exc:
            failure = await self._response_failure(model, exc)
        except Exception as exc:  # noqa: BLE001 - every transport failure becomes a Failure
            failure = self._transport_failure(exc, progress)
        t_failed = perf_counter_ns()
        if self.autopsy is not None:
            failure = await self.autopsy(failure, progress.words(t_failed))
        yield StreamEvent(t_failed, done=True, failure=failure)

    # ------------------------------------------------------------------ failures

    async def _response_failure(self, model: str, exc: ollama.ResponseError) -> Failure:
        if exc.status_code == -1:  # the client's code for an {"error": ...} line mid-stream
            return failure_in_stream(exc.error, peer=self.peer)
        installed = await self._installed_names() if exc.status_code == 404 and model else []
        return failure_for_http(
            exc.status_code, exc.error, peer=self.peer, model=model, installed=installed
        )

    def _transport_failure(self, exc: Exception, progress: StreamProgress | None = None
                           ) -> Failure:
        if isinstance(exc, ValueError | pydantic.ValidationError):
            detail = f"a reply that is not Ollama's protocol: {type(exc).__name__}: {exc}"
            return failure_protocol(detail, peer=self.peer)
        return failure_for_transport(exc, peer=self.peer, progress=progress)

    def unreachable(self, detail: str) -> Failure:
        """The failure for a server that does not answer at all."""
        return failure_unreachable(detail, peer=self.peer)

    async def _installed_names(self) -> list[str]:
        try:
            return await self.list_models()
        except EngineError:
            return []

    # ------------------------------------------------------------------ metadata

    async def _call(self, coro: Any) -> Any:
        try:
            return await coro
        except ollama.ResponseError as exc:
            raise EngineError(await self._response_failure("", exc)) from exc
        except Exception as exc:
            raise EngineError(self._transport_failure(exc)) from exc

    async def _weights_bytes(self, model: str) -> int | None:
        """The model's size on disk (`GET /api/tags`, its `size`: the GGUF's bytes); None
        when the listing does not say. Never raises (a detail, not a reason to stop)."""
        try:
            listed = await self._client.list()
        except Exception:  # noqa: BLE001 - optional detail
            return None
        names = {model, model if ":" in model else f"{model}:latest"}  # Ollama's default tag
        for m in listed.models:
            if names & {m.model, getattr(m, "name", None)}:
                size = m.size
                return size if isinstance(size, int) and size > 0 else None
        return None

    async def version(self) -> str:
        """The server's version string (`GET /api/version`). Raises EngineError."""
        try:
            resp = await self._client._client.get("/api/version")
            resp.raise_for_status()
            return str(resp.json().get("version", "unknown"))
        except Exception as exc:
            raise EngineError(self._transport_failure(exc)) from exc

    async def ps(self) -> Any:
        """The loaded models (`GET /api/ps`, the ollama client's `ProcessResponse`). Raises
        what the client raises (ollama.ResponseError, httpx errors)."""
        return await self._client.ps()

    async def list_models(self) -> list[str]:
        """Installed model names (`GET /api/tags`). Raises EngineError."""
        listing = await self._call(self._client.list())
        return [m.model for m in listing.models if m.model]

    async def model_info(self, model: str) -> ModelInfo:
        """Details of `model` from `/api/show`, plus size/size_vram/context from `/api/ps` when
        it is loaded. Raises EngineError (kind MODEL_NOT_FOUND for an unknown model)."""
        try:
            shown = await self._client.show(model)
        except ollama.ResponseError as exc:
            raise EngineError(await self._response_failure(model, exc)) from exc
        except Exception as exc:
            raise EngineError(self._transport_failure(exc)) from exc
        details = shown.details
        size = size_vram = context = None
        try:
            running = await self._client.ps()
            for m in running.models:
                if m.model == model or m.name == model:
                    size, size_vram = m.size, m.size_vram
                    context = getattr(m, "context_length", None)
        except Exception:  # noqa: BLE001, S110 - ps is optional detail: absent sizes stay None
            pass
        weights = await self._weights_bytes(model)
        return ModelInfo(
            name=model,
            family=details.family if details else None,
            parameter_size=details.parameter_size if details else None,
            quantization=details.quantization_level if details else None,
            format=details.format if details else None,
            size=size,
            size_vram=size_vram,
            context_length=context,
            model_info=dict(shown.modelinfo or {}),
            chat_template=_has_chat_template(getattr(shown, "template", None)),
            remote=cloud_host(model, getattr(shown, "remote_host", None)),
            weights_bytes=weights,
        )


def chat_texts(part: Any) -> tuple[str, str, str]:
    """(content, thinking, tool-call text) of one `/api/chat` chunk (the `ollama` client's
    `ChatResponse`). A tool call comes whole in `message.tool_calls`, in a `done: false` chunk
    with empty content or only in the `done: true` one (docs/method.md, "TTFT and E2E"): its
    text (`events.tool_call_text`) is the model's output as much as content is."""
    message = part.message
    return (message.content or "", message.thinking or "",
            tool_call_text(getattr(message, "tool_calls", None)))


OLLAMA_CLOUD = "ollama.com"
MAX_HOST_CHARS = 253  # a DNS name's length (RFC 1035): more of a `remote_host` is not kept


def cloud_host(model: str, remote_host: Any = None) -> str | None:
    """Where an Ollama model runs when not on the engine's machine, or None: the host of
    /api/show's `remote_host` ("https://ollama.com:443" → "ollama.com"; the `ollama` client
    0.6 drops that field, so the name decides there), else "ollama.com" for a cloud model's
    name — its tag "cloud" or ending "-cloud" ("minimax-m2:cloud", "gpt-oss:120b-cloud";
    Ollama names its cloud models so). Its figures then include the network to that host,
    and the probes of the engine's machine do not describe it."""
    if isinstance(remote_host, str) and remote_host.strip():
        text = remote_host.strip()[:MAX_HOST_CHARS]
        try:
            return httpx.URL(text if "://" in text else f"https://{text}").host or text
        except (httpx.InvalidURL, ValueError):
            return text
    name, sep, tag = model.strip().lower().rpartition(":")
    if sep and name and (tag == "cloud" or tag.endswith("-cloud")):
        return OLLAMA_CLOUD
    return None


def _has_chat_template(template: Any) -> bool | None:
    """Whether /api/show's `template` is a chat template: False for none or Ollama's default
    `{{ .Prompt }}` (the prompt alone), None when the server gave no template field."""
    if not isinstance(template, str):
        return None
    return template.replace(" ", "") not in ("", "{{.Prompt}}")


OLLAMA_PROBE_TIMEOUT_S = 0.5  # "answers quickly": a local Ollama replies to /api/version in ms


async def version_info(host: str, timeout_s: float = OLLAMA_PROBE_TIMEOUT_S
                       ) -> dict[str, Any] | None:
    """The JSON object an Ollama-API server at `host` (a base URL) answers at
    `GET /api/version` (`{"version": ...}`; llmtop's embedded engine adds `llama_config`), or
    None when nothing answers 200 with an object within `timeout_s` seconds. Never raises."""
    try:
        async with httpx.AsyncClient(base_url=host, timeout=timeout_s, trust_env=False,
                                     proxy=proxy_for(host)) as client:
            resp = await client.get("/api/version")
            if resp.status_code == 200:
                data = resp.json()
                return data if isinstance(data, dict) else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return None


async def ollama_version(host: str, timeout_s: float = OLLAMA_PROBE_TIMEOUT_S) -> str | None:
    """The version an Ollama-API server at `host` (a base URL) reports at `GET /api/version`,
    or None when nothing answers with one within `timeout_s` seconds. Never raises."""
    info = await version_info(host, timeout_s)
    return None if info is None else str(info.get("version", "unknown"))
