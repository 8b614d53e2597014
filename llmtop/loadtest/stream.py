"""One measured /api/chat request over a blocking httpx client, for Locust's gevent users.

The same stamping and classification as `llmtop.sessions.measure.request.run_request`: each NDJSON
line is stamped, once complete and before it is parsed, with the arrival of the bytes that
completed it (`stamps.arrival_ns`, as `OllamaEngine` stamps its lines), becomes a
`StreamEvent`, goes into a `RequestCollector`, and `finish()` decides the status and derives
the metrics. Failures become the engines' `Failure`s (llmtop.engines.http), never exceptions.

Arrivals: the client's connections come from `llmtop.stamping.blocking.arrival_transport()`,
whose reads note when their bytes arrived (the kernel's receive stamp where Linux gives one).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
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
from llmtop.sessions.measure.request import RequestCollector, RequestResult, chat_messages
from llmtop.stamping.stamps import arrival_ns, stamping


def _events(lines: Iterator[str], peer: Peer) -> Iterator[StreamEvent]:
    """StreamEvents from the reply's lines, each stamped with the arrival of the bytes that
    completed it (httpx reads only when it needs more, so the last block read is that one);
    the last event is done (server stats) or carries the failure."""
    for line in lines:
        t_ns = arrival_ns()
        if not line.strip():
            continue
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
    yield StreamEvent(perf_counter_ns(), done=True, failure=failure_truncated(peer))


def stream_chat(
    client: httpx.Client, peer: Peer, collector: RequestCollector, think: bool | None = None
) -> RequestResult:
    """POST /api/chat for the collector's prompt, model and options, streamed into it.

    client: an httpx.Client whose base_url is the engine, its transport
    `llmtop.stamping.blocking.arrival_transport()`
    (another one stamps lines when they are parsed). The send stamp is taken just before the
    request is sent. Never raises for the server's or the network's misbehaviour: the
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
        _send(client, peer, collector, body)
    return collector.finish()


def _send(client: httpx.Client, peer: Peer, collector: RequestCollector,
          body: dict[str, Any]) -> None:
    """POST `body` and add its events (or its failure) to the collector."""
    try:
        with client.stream("POST", "/api/chat", json=body) as response:
            if response.status_code != 200:
                failure = failure_for_http(
                    response.status_code, response.read(), peer=peer, model=collector.model
                )
                collector.add(StreamEvent(perf_counter_ns(), done=True, failure=failure))
                return
            for event in _events(response.iter_lines(), peer):
                collector.add(event)
    except httpx.HTTPError as exc:
        collector.add(
            StreamEvent(perf_counter_ns(), done=True, failure=failure_for_transport(exc, peer=peer))
        )
