"""One measured request: stream it, collect its events, decide its status, derive metrics.

Shared by the TUI and `llmtop run`, so both measure the same way. The send stamp is the
moment the request body was written to the socket (stamping/stamps.py, taken by the engine's
HTTP client); the time from asking for the request until then is kept apart as `prep_ns`.
An engine that cannot stamp the socket write leaves the stamp taken just before the stream's
first iteration, when the `ollama` client sends the request (docs/protocols.md: its streams
are lazy), and `prep_ns` None.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from llmtop.engines import timeouts
from llmtop.engines.events import Failure, FailureKind, ServerStats, Status, StreamEvent
from llmtop.sessions.measure.timeline import RequestMetrics, compute_metrics

if TYPE_CHECKING:
    from llmtop.stamping.stamps import SendStamp

# The wire's modules (httpx under them) are imported where a request runs: the TUI draws its
# first frame with this module's types loaded and no HTTP client (docs/performance.md, "The
# TUI's first frame").


class EventText:
    """The answer and thinking text of a request's `events` (the collector's so far, the
    result's in full), joined in arrival order."""

    events: Sequence[StreamEvent]

    @property
    def content(self) -> str:
        """The answer text."""
        return "".join(e.content for e in self.events)

    @property
    def thinking(self) -> str:
        """The thinking text."""
        return "".join(e.thinking for e in self.events)

    @property
    def tool_calls(self) -> str:
        """The tool calls' text (engines/events.py, `tool_call_text`)."""
        return "".join(e.tool_calls for e in self.events)


@dataclass
class RequestCollector(EventText):
    """Accumulates one request's events as they arrive; `finish()` freezes the result.

    Kept outside the streaming loop so a caller that is cancelled mid-stream (a new prompt in
    the TUI) can still record what arrived.
    """

    prompt: str
    options: dict[str, Any]
    model: str
    request_id: int = 0
    wall_start: str = field(default_factory=lambda: datetime.now().astimezone().isoformat())
    sent_ns: int = 0
    prep_ns: int | None = None
    new_connection: bool | None = None
    events: list[StreamEvent] = field(default_factory=list)

    def add(self, event: StreamEvent) -> None:
        """Append one event (already stamped by the engine)."""
        self.events.append(event)

    def sent(self, stamp: SendStamp) -> None:
        """Take the send stamp (and the client's preparation time) from `stamp`."""
        self.sent_ns, self.prep_ns = stamp.send_ns, stamp.prep_ns
        self.new_connection = stamp.connected if stamp.sent_ns is not None else None

    def finish(self, cancelled: bool = False) -> RequestResult:
        """Freeze into a RequestResult with its status and metrics."""
        final = self.events[-1] if self.events and self.events[-1].done else None
        failure = final.failure if final else None
        stats = final.stats if final else None
        if cancelled:
            status = Status.CANCELLED
        elif failure is not None:
            status = Status.TRUNCATED if failure.kind == FailureKind.TRUNCATED else Status.ERROR
        elif final is None:
            status = Status.TRUNCATED
        elif (
            stats is not None
            and stats.done_reason in ("load", "unload")
            and not any(e.has_text for e in self.events)
        ):
            status = Status.NO_GENERATION
        else:
            status = Status.OK
        return RequestResult(
            request_id=self.request_id,
            wall_start=self.wall_start,
            model=self.model,
            prompt=self.prompt,
            options=dict(self.options),
            sent_ns=self.sent_ns,
            prep_ns=self.prep_ns,
            new_connection=self.new_connection,
            events=tuple(self.events),
            stats=stats,
            status=status,
            failure=failure,
            metrics=compute_metrics(self.sent_ns, self.events, stats),
        )


@dataclass(frozen=True)
class RequestResult(EventText):
    """A finished request. `events` keep every chunk's perf_counter_ns stamp (offsets from
    `sent_ns` go to the log); `metrics` are derived (ms, tokens/s); `stats` the server's own.
    `prep_ns`: the client's time from asking for the request to its body on the socket (ns),
    None when the engine could not stamp the socket write. `new_connection`: a TCP connection
    was opened for it (none could be reused: stamping/stamps.py); None when unknown."""

    request_id: int
    wall_start: str
    model: str
    prompt: str
    options: dict[str, Any]
    sent_ns: int
    events: tuple[StreamEvent, ...]
    stats: ServerStats | None
    status: Status
    failure: Failure | None
    metrics: RequestMetrics
    prep_ns: int | None = None
    new_connection: bool | None = None


StreamFactory = Callable[[], AsyncGenerator[StreamEvent, None]]
# The time without a token (or, before the first, without any event), seconds: the engines'
# read timeout, but measured from the last event the engine yielded, so a server's
# keep-alive pings (SSE `: ping` comments, llama-server's --sse-ping-interval), which reset
# the read timeout and yield nothing, cannot reset it. `--token-timeout` sets it, up to
# engines/timeouts.py's MAX_TOKEN_TIMEOUT_S (which says why).
TOKEN_TIMEOUT_S = timeouts.TOKEN_TIMEOUT_S


def stalled(limit_s: float, chunks: int) -> Failure:
    """The failure of a stream with no token for `limit_s` seconds after `chunks` chunks."""
    where = "before its first token" if not chunks else f"after {chunks} chunks"
    return Failure(FailureKind.STALLED,
                   f"no token for {limit_s:g} s {where} (keep-alive pings do not count)",
                   "the server is stuck (its keep-alive pings say only that the connection "
                   "is open): check its log, and retry")


def past_predict(chunks: int, options: Mapping[str, Any]) -> Failure:
    """The failure of a stream read `chunks` text chunks, past its num_predict, without done
    (engines/http.py, `failure_past_predict`)."""
    from llmtop.engines.http import failure_past_predict

    return failure_past_predict(chunks, options.get("num_predict"))


async def run_request(
    start_stream: StreamFactory,
    collector: RequestCollector,
    on_event: Callable[[StreamEvent], None] | None = None,
    token_timeout_s: float = TOKEN_TIMEOUT_S,
) -> RequestResult:
    """Stream one request into `collector` and return its result.

    start_stream: builds the (lazy) event stream, e.g. `lambda: engine.stream_chat(...)`.
    on_event: called with each event right after it is recorded (keep it cheap: the UI only
    marks itself dirty here; rendering happens on its own capped timer).
    token_timeout_s: the longest wait for the next event (TOKEN_TIMEOUT_S); past it the
    request ends `stalled` (FailureKind.STALLED). A stream that sends more text chunks than
    `stamping.bounds.chunk_limit(collector.options)` (shared with the relay) without its done
    chunk ends with a PROTOCOL failure. Cancellation (CancelledError) propagates; call
    `collector.finish(cancelled=True)` then.
    """
    from llmtop.stamping.bounds import chunk_limit
    from llmtop.stamping.stamps import stamping

    stream = start_stream()  # lazy: nothing is built or sent before the first iteration
    most = chunk_limit(collector.options)
    chunks = 0
    with stamping(perf_counter_ns()) as stamp:
        collector.sent(stamp)  # provisional: the socket stamp comes with the first event
        async with contextlib.aclosing(stream):
            while True:
                try:
                    async with asyncio.timeout(token_timeout_s):
                        event = await anext(stream)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    collector.add(StreamEvent(perf_counter_ns(), done=True,
                                              failure=stalled(token_timeout_s, chunks)))
                    break
                if not collector.events:
                    collector.sent(stamp)
                collector.add(event)
                if on_event is not None:
                    on_event(event)
                if event.done:
                    break
                chunks += event.has_text
                if most is not None and chunks > most:
                    collector.add(StreamEvent(perf_counter_ns(), done=True,
                                              failure=past_predict(chunks, collector.options)))
                    break
    return collector.finish()


def chat_messages(prompt: str) -> list[Mapping[str, Any]]:
    """A single-turn chat for a prompt."""
    return [{"role": "user", "content": prompt}]
