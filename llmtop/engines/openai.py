"""OpenAI-compatible servers: llama.cpp's llama-server, LM Studio, vLLM, llama-cpp-python's
server, Ollama's `/v1` — one client, `OpenAIEngine`, with the `Engine` shape.

Requests are `POST {base}/chat/completions` with `stream: true` and `stream_options:
{"include_usage": true}`; the SSE stream is parsed by httpx-sse (comment and keep-alive lines,
CRLF endings, `data:` without a space are its business) and each event is stamped, the moment
`aiter_sse` yields it, with the arrival of the bytes that completed it (`stamps.arrival_ns`;
the client's connections come from `arrivals.measured_transport`). What a chunk means
and how the server's figures map onto `ServerStats` is in `llmtop.engines.openai_stream`.

The end of a stream: `data: [DONE]` after a `finish_reason` is the done event (its stamp is
the end of the response; `finish_reason: "length"` is a normal end, cut by max tokens). A
stream that closes after a finish_reason without `[DONE]` ends the same way. For vLLM, the
prefill/decode/total times of its Prometheus `/metrics` are added to the done event's
figures when they can be attributed to the request (`llmtop.engines.openai_metrics`). Failures: an
HTTP status other than 200 (the JSON error's message quoted), an `error` object or an
`event: error` mid-stream, `[DONE]` or the end of the body before any finish_reason
(truncated: llama-cpp-python cuts a stream short that way when another request waits), a
read timeout, an unreachable server. A server that refuses `stream_options` is asked again
without it, once, and never again (that first request's times include the refused try; a
note says so).

To llama-server (`kind` "llama-server") the body also asks for `timings_per_token` (each
chunk's own token count: several tokens a chunk under speculative decoding) and
`return_progress` (prompt-processing progress chunks, without text: they never start TTFT
and feed the TUI's prefill line), both documented fields of its completion endpoint, and
sends `Connection: close`: llama-server closes the connection after each stream anyway, and
a request sent on it before its close arrives is lost (docs/protocols.md, "llama-server").
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncGenerator, Mapping
from dataclasses import replace
from time import perf_counter_ns
from typing import Any

import httpx
from httpx_sse import EventSource, aconnect_sse

from llmtop.engines.base import EngineError, ModelInfo
from llmtop.engines.events import Failure, FailureKind, StreamEvent
from llmtop.engines.hosts import API_KEY_ENV, proxy_for, resolve_host
from llmtop.engines.http import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_READ_TIMEOUT_S,
    Autopsy,
    Peer,
    failure_for_http,
    failure_for_transport,
    failure_in_stream,
    failure_protocol,
    failure_truncated,
    failure_unreachable,
)
from llmtop.engines.llama_props import model_query, read_config, read_metrics
from llmtop.engines.openai_metrics import Scrape, request_durations, scrape
from llmtop.engines.openai_options import request_body
from llmtop.engines.openai_server import ServerKind, identify, model_details, server_root
from llmtop.engines.openai_stream import ChunkReader, StreamError, error_body_text
from llmtop.engines.sse import end_stream, sse_events
from llmtop.stamping.arrivals import measured_transport
from llmtop.stamping.stamps import arrival_ns, stamp_hooks

DONE = "[DONE]"
# llama-server's own request fields (docs/protocols.md, "llama-server"): what each chunk
# carried, and the prompt's progress while it is processed
LLAMA_SERVER_FIELDS = {"timings_per_token": True, "return_progress": True}


def api_base(url: str) -> str:
    """The OpenAI API's base URL from `--host`: "http://h:8080" → "http://h:8080/v1"; a URL
    that already names a path ("…/v1", LM Studio's "…/api/v0") is kept as given."""
    url = resolve_host(url).rstrip("/")
    return url if httpx.URL(url).path.strip("/") else f"{url}/v1"


class OpenAIEngine:
    """A client for one OpenAI-compatible server.

    host: its address (`api_base` rules); api_key: sent as `Authorization: Bearer` (default
    `$OPENAI_API_KEY`, none when unset). name: the label for headers and logs (default
    "openai"); kind: what the server is, when already known (`identify`). Timeouts in
    seconds, as `OllamaEngine`'s. `notes`: what llmtop could not ask of this server (options
    it does not take), each said once, for the caller to show.
    """

    def __init__(
        self,
        host: str,
        *,
        api_key: str | None = None,
        name: str = "openai",
        kind: ServerKind | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        self.host = api_base(host)
        self.root = server_root(self.host)
        self.name = name
        self.kind = kind
        self.read_timeout_s = read_timeout_s
        self.notes: list[str] = []
        self.autopsy: Autopsy | None = None  # set by connect() for a server llmtop started
        self.peer = Peer(self.host, "an OpenAI-compatible server",
                         "start it (llama-server, LM Studio, vLLM, `python -m llama_cpp.server`) "
                         "or check --host", read_timeout_s)
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
            headers={"Authorization": f"Bearer {key}"} if key else {},
            trust_env=False, event_hooks=stamp_hooks(),
            transport=measured_transport(proxy_for(self.host)),
        )
        self._usage_refused = False
        self._metrics: Scrape | None = None  # vLLM's last /metrics reading
        # the model `model_info` was last asked about (the one measured): a llama-server
        # router's figures are that model's (`server_config`); `router` once it said so
        self.model: str | None = None
        self.router = False

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.aclose()

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

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
        """Stream one chat (`POST {base}/chat/completions`). Lazy: sent on the first iteration.
        Yields text events, then exactly one `done` event (server stats, or a failure).
        Ollama options are mapped by `openai_options.request_body`; those it cannot send are
        added to `notes`."""
        body, unsent = request_body(model, messages, options, think=think, keep_alive=keep_alive)
        for text in unsent:
            self._note(text)
        return self._stream(body)

    def _stream(self, body: dict[str, Any]) -> AsyncGenerator[StreamEvent, None]:
        if not self._usage_refused:
            body = {**body, "stream_options": {"include_usage": True}}
        if self.kind is not None and self.kind.kind == "llama-server":
            body = {**body, **LLAMA_SERVER_FIELDS}
        return end_stream(self._attempt(body), self.peer, self._rescrape, self.autopsy)

    async def _rescrape(self) -> None:
        """After a failed request: vLLM may count it too, so take a fresh baseline."""
        if self._metrics is not None:
            self._metrics = await scrape(self._client, self.root)

    async def _attempt(self, body: dict[str, Any]) -> AsyncGenerator[StreamEvent | Failure, None]:
        """One request (and one retry without `stream_options` when the server refuses it)."""
        url = f"{self.host}/chat/completions"
        # llama-server closes the connection after a streamed response, and its FIN can come
        # after the next request was sent on it ("Server disconnected without sending a
        # response": 2 requests of 32 in a closed-loop sweep); a stream there asks for a
        # connection of its own, opened before the send stamp (client_prep_ms, not TTFT)
        headers = {"Connection": "close"} if "timings_per_token" in body else {}
        async with aconnect_sse(self._client, "POST", url, json=body,
                                headers=headers) as source:
            status = source.response.status_code
            if status == 200:
                async for item in self._events(source):
                    yield item
                return
            text = error_body_text(await source.response.aread())
        if "stream_options" in body and 400 <= status < 500 and "stream_options" in text:
            self._usage_refused = True
            self._note("the server refused stream_options (usage in the stream): token counts "
                       "are chunk counts; the first request's times include the refused try")
            body = {k: v for k, v in body.items() if k != "stream_options"}
            async with contextlib.aclosing(self._attempt(body)) as retry:
                async for item in retry:
                    yield item
            return
        yield failure_for_http(status, text, peer=self.peer, model=str(body.get("model", "")))

    async def _events(self, source: EventSource) -> AsyncGenerator[StreamEvent | Failure, None]:
        """The SSE events as StreamEvents (text chunks, then one done event) or a Failure."""
        reader = ChunkReader()
        sses = sse_events(source)  # with llama-server's `error:` field (engines/sse.py)
        async for sse in sses:
            t_ns = arrival_ns()
            if sse.event == "error":
                yield failure_in_stream(error_body_text(sse.data.encode()), peer=self.peer)
                return
            if not sse.data:
                continue
            if sse.data.strip() == DONE:
                yield await self._end(reader, t_ns)
                async for _ in sses:  # the response's end, when pulled (stamps.drain)
                    pass
                return
            try:
                content, thinking = reader.read(json.loads(sse.data))
            except StreamError as exc:
                yield failure_in_stream(str(exc), peer=self.peer)
                return
            except (ValueError, TypeError, AttributeError, IndexError) as exc:
                yield failure_protocol(f"{type(exc).__name__}: {exc}", peer=self.peer)
                return
            if content or thinking or reader.tool_calls:
                yield StreamEvent(t_ns, content, thinking, tokens=reader.chunk_tokens,
                                  tool_calls=reader.tool_calls)
            elif reader.progress is not None:
                yield StreamEvent(t_ns, progress=reader.progress)
        yield await self._end(reader, perf_counter_ns())

    async def _end(self, reader: ChunkReader, t_ns: int) -> StreamEvent | Failure:
        """The done event at `t_ns` when a finish_reason was seen, else a truncation. For
        vLLM, the durations its `/metrics` gained since the last scrape are added (scraped
        now, after the stamp: `openai_metrics`)."""
        if reader.finish_reason is None:
            return failure_truncated(self.peer)
        stats = reader.stats()
        if self._metrics is not None:
            after = await scrape(self._client, self.root)
            found = request_durations(self._metrics, after) if after is not None else {}
            self._metrics = after
            added: dict[str, Any] = {k: v for k, v in found.items() if getattr(stats, k) is None}
            if added:
                added["source"] = f"{stats.source} + vLLM /metrics"
                stats = replace(stats, **added)
        return StreamEvent(t_ns, done=True, stats=stats)

    def unreachable(self, detail: str) -> Failure:
        """The failure for a server that does not answer at all."""
        return failure_unreachable(detail, peer=self.peer)

    # ------------------------------------------------------------------ metadata

    async def _get_json(self, url: str) -> Any:
        try:
            resp = await self._client.get(url)
        except httpx.HTTPError as exc:
            raise EngineError(failure_for_transport(exc, peer=self.peer)) from exc
        if resp.status_code != 200:
            raise EngineError(failure_for_http(resp.status_code, error_body_text(resp.content),
                                               peer=self.peer))
        try:
            return resp.json()
        except ValueError as exc:
            raise EngineError(failure_protocol(f"GET {url}: {exc}", peer=self.peer)) from exc

    async def _models(self) -> list[dict[str, Any]]:
        listing = await self._get_json(f"{self.host}/models")
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list):
            raise EngineError(failure_protocol("GET /models: no `data` list", peer=self.peer))
        return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

    async def list_models(self) -> list[str]:
        """The served model ids (`GET {base}/models`). Raises EngineError."""
        return [m["id"] for m in await self._models()]

    async def model_info(self, model: str) -> ModelInfo:
        """What `{base}/models` says of `model` (llama-server's `meta`, vLLM's `max_model_len`).
        Raises EngineError (MODEL_NOT_FOUND, listing the served ids, for an unknown one)."""
        self.model = model
        models = await self._models()
        for entry in models:
            if entry["id"] == model:
                return model_details(entry)
        listing = ", ".join(m["id"] for m in models) or "none"
        raise EngineError(Failure(FailureKind.MODEL_NOT_FOUND,
                                  f"model '{model}' not served at {self.host} (served: {listing})",
                                  "pick a served one with --model"))

    async def version(self, known: Mapping[str, Any] | None = None) -> str:
        """What the server is and its version, e.g. "llama-server b6500-0c1e570" (`identify`;
        `known`: its routes' answers already read, not asked again). Raises EngineError when
        it does not answer `{base}/models`."""
        if self.kind is None:
            await self._models()
            self.kind = await identify(self._client, self.host, known)
            if self.kind.kind == "vllm":  # the baseline its per-request figures start from
                self._metrics = await scrape(self._client, self.root)
        return self.kind.describe()

    async def server_config(self) -> dict[str, Any] | None:
        """llama-server's effective configuration from its `/props` and `/slots`
        (`llama_props.config_from`; a router's of the measured model, `self.model`:
        `llama_props.router_config`); None for any other kind of server. Never raises."""
        if self.kind is None or self.kind.kind != "llama-server":
            return None
        config = await read_config(self._client, self.root, self.model)
        self.router = config.get("mode") == "router"
        return config

    async def server_metrics(self) -> dict[str, float] | None:
        """llama-server's `/metrics` (`llamacpp:` series, prefix dropped), None for another
        kind of server or when it runs without `--metrics`. Never raises."""
        if self.kind is None or self.kind.kind != "llama-server":
            return None
        query = model_query(self.model) if self.router else ""  # a router: the model's own
        return await read_metrics(self._client, self.root, query)

    async def count_prompt_tokens(self, model: str, messages: list[Mapping[str, Any]]) -> int:
        """The server's own count of the templated prompt, for calibration. llama-server:
        its `/apply-template` then `/tokenize` (`add_special` as its chat endpoint tokenizes;
        nothing is generated); any other server, or when those routes fail:
        `usage.prompt_tokens` of a non-streamed request for one output token (every OpenAI
        server fills usage there, llama-cpp-python's included, whose streams carry none).
        Raises EngineError."""
        if self.kind is not None and self.kind.kind == "llama-server":
            counted = await self._tokenize(messages)
            if counted is not None:
                return counted
        body, _ = request_body(model, messages, {"num_predict": 1})
        body["stream"] = False
        try:
            resp = await self._client.post(f"{self.host}/chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise EngineError(failure_for_transport(exc, peer=self.peer)) from exc
        if resp.status_code != 200:
            raise EngineError(failure_for_http(resp.status_code, error_body_text(resp.content),
                                               peer=self.peer, model=model))
        try:
            count = resp.json()["usage"]["prompt_tokens"]
        except (ValueError, KeyError, TypeError) as exc:
            raise EngineError(failure_protocol(f"no usage.prompt_tokens: {exc}",
                                               peer=self.peer)) from exc
        if not isinstance(count, int) or isinstance(count, bool):
            raise EngineError(failure_protocol(f"usage.prompt_tokens {count!r}", peer=self.peer))
        return count

    async def _tokenize(self, messages: list[Mapping[str, Any]]) -> int | None:
        """llama-server's count: `POST /apply-template {messages}` → `{"prompt"}`, then
        `POST /tokenize {"content", "add_special": true, "parse_special": true}` →
        `{"tokens": [...]}` (tools/server/README.md); None when either route fails."""
        try:
            templated = await self._client.post(f"{self.root}/apply-template",
                                                json={"messages": [dict(m) for m in messages]})
            prompt = templated.json()["prompt"]
            tokens = await self._client.post(f"{self.root}/tokenize", json={
                "content": prompt, "add_special": True, "parse_special": True})
            found = tokens.json()["tokens"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None
        return len(found) if isinstance(found, list) else None
