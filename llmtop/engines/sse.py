"""The end of an SSE-based stream, shared by `RelayEngine` and `OpenAIEngine`.

Both read their server's events with httpx-sse in a generator of `StreamEvent`s and
`Failure`s; `end_stream` turns that into the `Engine` contract: the text events, then exactly
one done event (handed on once the response has been read to its end, so its connection is
reused: stamping/stamps.py) — the server's own, or one carrying the first Failure (an HTTP error, an
error event, a truncation) or the transport error that cut the stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from time import perf_counter_ns

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError

from llmtop.engines.events import Failure, StreamEvent
from llmtop.engines.http import (
    Autopsy,
    Peer,
    StreamProgress,
    failure_for_transport,
    failure_protocol,
)
from llmtop.stamping.stamps import drain


async def end_stream(
    items: AsyncGenerator[StreamEvent | Failure, None],
    peer: Peer,
    before_failure: Callable[[], Awaitable[None]] | None = None,
    autopsy: Autopsy | None = None,
) -> AsyncGenerator[StreamEvent, None]:
    """Yield `items`' StreamEvents until the done one; a Failure among them, an SSEError (a
    200 that is not `text/event-stream`: PROTOCOL) or an httpx error (`failure_for_transport`,
    naming how long it had streamed) ends the stream with `StreamEvent(done=True,
    failure=...)`, stamped when it happened. `before_failure` runs after that stamp, before
    the event is yielded (e.g. a re-scrape); `autopsy` may then replace the failure (a child
    server of llmtop's that died: servers/child.autopsy)."""
    failure: Failure | None = None
    progress = StreamProgress()
    try:
        async with contextlib.aclosing(items) as events:
            async for item in events:
                if isinstance(item, Failure):
                    failure = item
                    break
                progress.saw(item.t_ns)
                if item.done:
                    await drain(events)  # `items` reads the rest of the response when pulled
                yield item
                if item.done:
                    return
    except SSEError as exc:
        failure = failure_protocol(str(exc), peer=peer)
    except httpx.HTTPError as exc:
        failure = failure_for_transport(exc, peer=peer, progress=progress)
    t_ns = perf_counter_ns()
    if before_failure is not None:
        await before_failure()
    if autopsy is not None and failure is not None:
        failure = await autopsy(failure, progress.words(t_ns))
    yield StreamEvent(t_ns, done=True, failure=failure)


async def sse_events(source: EventSource) -> AsyncIterator[ServerSentEvent]:
    """`source`'s events, as httpx-sse's `aiter_sse` reads them (the WHATWG event-stream
    format: `data`, `event`, `id` fields, `:` comments, a blank line dispatching), and one
    field more: an `error:` line, which an older llama-server writes for an error mid-stream
    (then `data: [DONE]`), becomes an event named "error" carrying its value, where httpx-sse
    drops it as an unknown field and the stream looked merely cut short. Raises SSEError for a
    reply that is not `text/event-stream`."""
    content_type = source.response.headers.get("content-type", "").partition(";")[0]
    if "text/event-stream" not in content_type:
        raise SSEError(f"Expected response header Content-Type to contain 'text/event-stream', "
                       f"got {content_type!r}")
    event, last_id = "", ""
    data: list[str] = []
    error: str | None = None
    async for line in source.response.aiter_lines():
        line = line.rstrip("\r\n")
        if not line:
            if error is not None:
                yield ServerSentEvent(event="error", data=error, id=last_id)
                error = None
            elif data:
                yield ServerSentEvent(event=event or "message", data="\n".join(data), id=last_id)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            last_id = value
        elif name == "error":
            error = value
    if error is not None:  # the body ended right after it
        yield ServerSentEvent(event="error", data=error, id=last_id)
