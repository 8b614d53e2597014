"""One measured request as it passes `llmtop watch` (`Exchange`), and what the proxy tells
about it (`Watcher`): the types servers/watch/proxy.py fills and
sessions/runners/watch/session.py reads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from time import time_ns
from typing import Protocol

from llmtop.engines.events import StreamEvent
from llmtop.probes.callers import Caller
from llmtop.servers.watch.meter import Meter, RequestFacts, read_request


@dataclass
class Exchange:
    """One measured request as it passes (mutable while it streams; stamps perf_counter ns).

    upstream: the engine's URL; listen: the watch's own "host:port". api / shape: from
    `meter.endpoint_of`; facts: what the body said (model, stream, prompt preview, options),
    read by `read_facts` once the body is on its way upstream (a 30,000-token prompt takes
    about a millisecond to parse: never before it is sent).
    client: the peer's (host, port); caller: its process when local and visible (`lookup`
    names it, started once the request is written upstream: never on its way in). status_code:
    the upstream's HTTP status (None: it never answered). meter: reads the response (None
    until it started). cancelled: the client left before the response ended. id: set by the Watcher.
    """

    upstream: str
    listen: str
    api: str
    shape: str
    path: str
    body: bytes
    client: tuple[str, int] | None
    received_ns: int
    facts: RequestFacts = field(default_factory=RequestFacts)
    facts_read: bool = False
    wall_ns: int = field(default_factory=time_ns)  # the arrival, wall clock (a label only)
    sent_ns: int | None = None
    ready_ns: int | None = None  # pipelined: the previous answer on its connection ended
    headers_ns: int | None = None
    status_code: int | None = None
    meter: Meter | None = None
    failed: list[StreamEvent] = field(default_factory=list)
    first_text_out_ns: int | None = None
    end_ns: int | None = None
    cancelled: bool = False
    caller: Caller | None = None
    lookup: asyncio.Future[Caller | None] | None = None
    on_sent: Callable[[Exchange], None] | None = None
    id: int = 0

    @property
    def wall_start(self) -> str:
        """The arrival as a local ISO 8601 time (formatted when asked: off the way in)."""
        return datetime.fromtimestamp(self.wall_ns / 1e9).astimezone().isoformat()

    def after_send(self) -> None:
        """Once the request is on the wire: read the body's facts, run `on_sent`."""
        self.read_facts()
        if self.on_sent is not None:
            self.on_sent(self)

    def read_facts(self) -> None:
        """Parse the body into `facts` (once), then let it go."""
        if not self.facts_read:
            self.facts = read_request(self.api, self.shape, self.body)
            self.facts_read, self.body = True, b""

    @property
    def events(self) -> list[StreamEvent]:
        """The response's events so far (a failure before any answer: one done event)."""
        return self.meter.events if self.meter is not None else self.failed

    @property
    def answered(self) -> bool:
        """The response's final event (a done line, `[DONE]`, a failure) was read: it passed
        to the client whole, whatever the client does next."""
        events = self.events
        return bool(events) and events[-1].done

    @property
    def send_ns(self) -> int:
        """The send stamp TTFT counts from: the body's write (else the request's arrival),
        or, for a request pipelined behind another answer on its connection, that answer's
        end, when the engine could take it up (`pipeline_wait_ns` says how long it waited)."""
        sent = self.sent_ns if self.sent_ns is not None else self.received_ns
        return max(sent, self.ready_ns) if self.ready_ns is not None else sent

    @property
    def pipeline_wait_ns(self) -> int | None:
        """How long the request waited, written to the engine, behind the answer before it
        on the same connection (ns); None when it did not wait."""
        if self.ready_ns is None or self.sent_ns is None or self.ready_ns <= self.sent_ns:
            return None
        return self.ready_ns - self.sent_ns

    @property
    def hop_in_ns(self) -> int | None:
        """The proxy's time from receiving the request to sending it upstream (ns)."""
        return None if self.sent_ns is None else self.sent_ns - self.received_ns

    @property
    def hop_out_ns(self) -> int | None:
        """The proxy's time from the first text's arrival to handing it on (ns)."""
        first = next((e.t_ns for e in self.events if e.has_text), None)
        if first is None or self.first_text_out_ns is None:
            return None
        return self.first_text_out_ns - first


class Watcher(Protocol):
    """What the proxy tells about each measured request, on its event loop (keep it cheap):
    `started` once its body is read (set `exchange.id` there), `progressed` after each block
    that added events, `finished` once, when it ended (ok, failed or cancelled)."""

    def started(self, exchange: Exchange) -> None:
        """A measured request arrived."""

    def progressed(self, exchange: Exchange) -> None:
        """A block added events."""

    def finished(self, exchange: Exchange) -> None:
        """The request ended."""


__all__ = ["Exchange", "Watcher"]
