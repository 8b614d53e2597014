"""One measured /api/chat request over a blocking httpx client, for Locust's gevent users.

The same stamping and classification as `llmtop.sessions.measure.request.run_request`: each NDJSON
line is stamped, once complete and before it is parsed, with the arrival of the bytes that
completed it (`stamps.arrival_ns`, as `OllamaEngine` stamps its lines), becomes a
`StreamEvent`, goes into a `RequestCollector`, and `finish()` decides the status and derives
the metrics. Failures become the engines' `Failure`s (llmtop.engines.http), never exceptions.

Arrivals: the client's connections come from `llmtop.stamping.blocking.arrival_transport()`,
whose reads note when their bytes arrived (the kernel's receive stamp where Linux gives one).

Bounds, as the asyncio clients': the transport's (`stamping.bounds.BlockingBoundedTransport`:
no compression asked for, a line at most 16 MiB, at most 64 MiB decoded), the chunks past
num_predict and the time without a token (`_events`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from time import perf_counter_ns
from typing import Any

import httpx

from llmtop.engines.events import ServerStats, StreamEvent
from llmtop.engines.http import (
    Peer,
    failure_for_http,
    failure_for_transport,
    failure_in_stream,
    failure_protocol,
    failure_truncated,
)
from llmtop.sessions.measure.request import (
    TOKEN_TIMEOUT_S,
    RequestCollector,
    RequestResult,
    chat_messages,
    past_predict,
    stalled,
)
from llmtop.stamping.bounds import chunk_limit
from llmtop.stamping.stamps import arrival_ns, stamping


def _events(lines: Iterator[str], peer: Peer, options: Mapping[str, Any],
            token_timeout_s: float = TOKEN_TIMEOUT_S) -> Iterator[StreamEvent]:
    """StreamEvents from the reply's lines, each stamped with the arrival of the bytes that
    completed it (httpx reads only when it needs more, so the last block read is that one);
    the last event is done (server stats) or carries the failure. As `run_request`: more
    text chunks than `chunk_limit(options)` end it with `past_predict`, and a line that
    arrives more than `token_timeout_s` after the last event (a blank keep-alive line
    included, which is no event) ends it `stalled` (a blocking read sees the time only when
    a line comes; a server that sends nothing meets the client's read timeout)."""
    most = chunk_limit(options)
    limit_ns = token_timeout_s * 1e9
    chunks = 0
    last_ns = perf_counter_ns()
    for line in lines:
        t_ns = arrival_ns()
        if t_ns - last_ns > limit_ns:
            yield StreamEvent(t_ns, done=True, failure=stalled(token_timeout_s, chunks))
            return
        if not line.strip():
            continue
        last_ns = t_ns
        try:
            part: Any = json.loads(line)
            if "error" in part:
                yield StreamEvent(
                    t_ns, done=True, failure=failure_in_stream(str(part["error"]), peer=peer)
                )
                return
            message = part.get("message") or {}
            content, thinking = message.get("content") or "", message.get("thinking") or ""
        except (ValueError, TypeError, AttributeError) as exc:
            detail = f"a reply that is not Ollama's protocol: {type(exc).__name__}: {exc}"
            yield StreamEvent(t_ns, done=True, failure=failure_protocol(detail, peer=peer))
            return
        if part.get("done"):
            yield StreamEvent(
                t_ns, content, thinking, done=True, stats=ServerStats.from_mapping(part)
            )
            return
        yield StreamEvent(t_ns, content, thinking)
        chunks += bool(content or thinking)
        if most is not None and chunks > most:
            yield StreamEvent(perf_counter_ns(), done=True, failure=past_predict(chunks, options))
            return
    yield StreamEvent(perf_counter_ns(), done=True, failure=failure_truncated(peer))


def stream_chat(
    client: httpx.Client, peer: Peer, collector: RequestCollector, think: bool | None = None,
    token_timeout_s: float = TOKEN_TIMEOUT_S,
) -> RequestResult:
    """POST /api/chat for the collector's prompt, model and options, streamed into it.

    client: an httpx.Client whose base_url is the engine, its transport
    `llmtop.stamping.blocking.arrival_transport()`
    (another one stamps lines when they are parsed). The send stamp is taken just before the
    request is sent. token_timeout_s: `_events`' limit on the time without a token (s).
    Never raises for the server's or the network's misbehaviour: the
    result's status and failure say what happened.
    """
    body: dict[str, Any] = {
        "model": collector.model,
        "messages": chat_messages(collector.prompt),
        "options": collector.options,
        "stream": True,
    }
    if think is not None:
        body["think"] = think
    with stamping() as stamp:
        collector.sent_ns = stamp.prepare_ns
        _send(client, peer, collector, body, token_timeout_s)
    return collector.finish()


def _send(client: httpx.Client, peer: Peer, collector: RequestCollector,
          body: dict[str, Any], token_timeout_s: float) -> None:
    """POST `body` and add its events (or its failure) to the collector."""
    try:
        with client.stream("POST", "/api/chat", json=body) as response:
            if response.status_code != 200:
                failure = failure_for_http(
                    response.status_code, response.read(), peer=peer, model=collector.model
                )
                collector.add(StreamEvent(perf_counter_ns(), done=True, failure=failure))
                return
            for event in _events(response.iter_lines(), peer, collector.options,
                                 token_timeout_s):
                collector.add(event)
    except httpx.HTTPError as exc:
        collector.add(
            StreamEvent(perf_counter_ns(), done=True, failure=failure_for_transport(exc, peer=peer))
        )
