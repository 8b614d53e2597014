"""A measuring session: the engine connection, the options, the log and the probe samples.

Shared by the TUI, `llmtop run`, bench and load so all record the same things the same way:
`SessionRecorder.measure` is the one choreography of a request (a new numbered request →
stream it → record it; a cancelled one is recorded with what arrived, then the cancel goes
on).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any, NamedTuple

from llmtop.engines.connection import Connection
from llmtop.engines.events import StreamEvent
from llmtop.sessions.measure.request import (
    TOKEN_TIMEOUT_S,
    RequestCollector,
    RequestResult,
    chat_messages,
    run_request,
)
from llmtop.sessions.records.log import SessionLog, default_log_path
from llmtop.sessions.records.schema import EnergyRecord, ProbeSourceRecord, RequestRecord
from llmtop.sessions.runners.energy import EnergyMeter
from llmtop.sessions.runners.environment import environment

LOCAL_SOURCE = {"kind": "local", "machine": socket.gethostname()}  # a sample from this machine
# An idle session logs fewer probe samples (a TUI left open for 12 minutes wrote 3.1 MB of
# 1 Hz samples): once no request has run for IDLE_AFTER_NS, a sample is
# logged at most every IDLE_PROBE_PERIOD_NS, or at once when the verdict changes (quiet or
# noisy, or another set of finding codes), so nothing the probes said is lost.
IDLE_AFTER_NS = 5 * 10**9
IDLE_PROBE_PERIOD_NS = 10 * 10**9


class Measured(NamedTuple):
    """One measured request: its result (events, stamps, metrics) and its record as logged."""

    result: RequestResult
    record: RequestRecord


def _both(first: Callable[[Any], None] | None,
          then: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    """A callback calling `first` then `then` (either may be None)."""
    if first is None or then is None:
        return first or then

    def call(value: Any) -> None:
        first(value)
        then(value)

    return call


class SessionRecorder:
    """Owns the session log of one connection and numbers its requests.

    log_path: where to append (None → a new file in the user data directory).
    options: the Ollama `options` sent with every request (recorded in the header).
    write_behind: request records are written in a thread, off the caller's path (a sweep's
    workers send their next request at once, not after the disk); `drain()` waits for them.
    streaming: the ids of the requests streaming now; peak_streaming: the most at once since
    the caller last reset it (a sweep's level).
    energy: this machine's energy sources (runners/energy.py): its "sources" record is logged
    first, and `measure` samples them at each request's edges and logs its "energy" records
    (`last_energy`), unless `energy_per_request` is False (a sweep's concurrent requests
    share the machine: their energy is measured per level, not per request).
    token_timeout_s: a request with no token for this long ends stalled (`run_request`,
    `--token-timeout`), seconds; written in the header as `token_timeout_s`.
    Raises LogError when the log cannot be created.
    """

    def __init__(
        self,
        conn: Connection,
        options: dict[str, Any],
        log_path: str | os.PathLike[str] | None = None,
        *,
        kind: str = "session",
        extra_header: dict[str, Any] | None = None,
        think: bool | None = None,
        write_behind: bool = False,
        energy: EnergyMeter | None = None,
        energy_per_request: bool = True,
        token_timeout_s: float = TOKEN_TIMEOUT_S,
    ) -> None:
        self.conn = conn
        self.token_timeout_s = token_timeout_s
        self.options = dict(options)
        self.think = think
        header = {"kind": kind, **self.header(), **(extra_header or {})}
        self.log = SessionLog(log_path or default_log_path(kind), header)
        self.requests = 0
        self.in_flight: int | None = None  # id of the request being streamed, for probe records
        self.streaming: set[int] = set()
        self.peak_streaming = 0
        self.write_behind = write_behind
        self._writes: set[asyncio.Task[bool]] = set()
        self.energy = energy
        self.energy_per_request = energy_per_request and energy is not None and energy.active
        self.last_energy: list[EnergyRecord] = []  # the last measured request's figures
        self.active_ns = time.perf_counter_ns()  # when a request last started or ended
        self._last_probe: tuple[int, Any] | None = None  # (t_ns, verdict key) last logged
        self.probes_thinned = 0  # idle samples not logged (IDLE_PROBE_PERIOD_NS)
        if energy is not None:
            self.log.write(energy.sources_record())

    def header(self) -> dict[str, Any]:
        """The header record's fields: engine, host, model and its details, options, machine."""
        return {
            "engine": self.conn.engine.name,
            "engine_version": self.conn.version,
            "engine_config": self.conn.engine_config,
            "host": self.conn.engine.host,
            "via": "relay" if self.conn.via_relay else "direct",
            "upstream": self.conn.upstream.host,
            # an HTTP proxy between llmtop and the engine lands inside every TTFT: say so
            "proxy": getattr(self.conn.upstream, "proxy", None),
            "model": self.conn.model,
            "model_details": self.conn.info.to_dict() if self.conn.info else None,
            "options": self.options,
            "token_timeout_s": self.token_timeout_s,
            "environment": environment(),
        }

    def new_request(self, prompt: str, options: dict[str, Any] | None = None) -> RequestCollector:
        """A collector for the next request (ids count from 1), sending `options` (default:
        the session's)."""
        self.requests += 1
        self.in_flight = self.requests
        self.active_ns = time.perf_counter_ns()
        self.streaming.add(self.requests)
        self.peak_streaming = max(self.peak_streaming, len(self.streaming))
        return RequestCollector(prompt=prompt, options=options or self.options,
                                model=self.conn.model, request_id=self.requests)

    def stream(self, prompt: str, engine: Any = None, options: dict[str, Any] | None = None,
               history: Sequence[Mapping[str, Any]] = ()) -> AsyncGenerator[StreamEvent, None]:
        """The lazy event stream for a chat ending with `prompt` after the messages of
        `history` (a conversation's earlier turns; none: a single turn), on `engine` (default
        the connection's own: the relay client when streaming through the relay), with
        `options` (default the session's)."""
        return (engine or self.conn.engine).stream_chat(
            self.conn.model, [*history, *chat_messages(prompt)],
            options=options or self.options, think=self.think,
        )

    async def measure(
        self,
        prompt: str,
        on_event: Callable[[StreamEvent], None] | None = None,
        *,
        engine: Any = None,
        options: dict[str, Any] | None = None,
        on_start: Callable[[RequestCollector], None] | None = None,
        on_end: Callable[[RequestResult, RequestRecord], None] | None = None,
        late: Callable[[RequestResult], Mapping[str, Any]] | None = None,
        history: Sequence[Mapping[str, Any]] = (),
        **fields: Any,
    ) -> Measured:
        """Measure one request: a new numbered request for `prompt`, streamed on `engine` with
        `options` (defaults: the connection's, the session's) after the chat messages of
        `history` (a conversation's earlier turns), recorded with `fields` (bench
        phase, index...) plus `late(result)` (fields known only after it: the machine's
        readings, a sweep's send offset). on_event: each event as it arrives (keep it cheap);
        on_start: the collector before the stream starts (a live view); on_end: the result
        and its record, once it is logged. A cancelled request (CancelledError) is recorded
        with what arrived (status "cancelled", without `late`), on_end is called, and the
        cancel goes on. Raises RecordError for a field of the wrong type."""
        if self.energy_per_request and self.energy is not None:
            energy_start, on_event = self.energy.hooks(on_event)
            on_start = _both(energy_start, on_start)
        collector = self.new_request(prompt, options)
        if on_start is not None:
            on_start(collector)
        try:
            result = await run_request(
                lambda: self.stream(prompt, engine, collector.options, history), collector,
                on_event, self.token_timeout_s,
            )
        except asyncio.CancelledError:
            cancelled = collector.finish(cancelled=True)
            record = self.record(cancelled, behind=False, **fields)
            if on_end is not None:
                on_end(cancelled, record)
            raise
        self.last_energy = self._energy(result)
        record = self.record(result, **fields, **(late(result) if late else {}))
        for energy in self.last_energy:
            self.log.write(energy)
        if on_end is not None:
            on_end(result, record)
        return Measured(result, record)

    def _energy(self, result: RequestResult) -> list[EnergyRecord]:
        """One more sample (a stream that ended without a done chunk) and the request's
        energy records; none without per-request energy."""
        if not self.energy_per_request or self.energy is None:
            return []
        self.energy.sample("end")
        return self.energy.request(result)

    def record(self, result: RequestResult, *, behind: bool | None = None,
               **extra: Any) -> RequestRecord:
        """Append a finished (or cancelled) request to the log, with `extra` fields (bench
        phase, index...); returns the record as it will read back (records.RequestRecord).
        behind: write it in a thread (default `write_behind`; needs a running event loop).
        Raises RecordError when an `extra` field has the wrong type (nothing is written)."""
        self.in_flight = None
        self.active_ns = time.perf_counter_ns()
        self.streaming.discard(result.request_id)
        record = RequestRecord.of(result, **extra)
        if self.write_behind if behind is None else behind:
            write = asyncio.create_task(asyncio.to_thread(self.log.write, record))
            self._writes.add(write)
            write.add_done_callback(self._writes.discard)
        else:
            self.log.write(record)
        return record

    async def drain(self) -> None:
        """Wait for the records written behind so far."""
        await asyncio.gather(*self._writes)

    def record_probe(self, sample: Any) -> None:
        """Append a probe sample (a ProbeSample); safe to call from the sampler thread. Its
        `source` says where it was taken: LOCAL_SOURCE, or the agent's (probes.remote)."""
        if not self._keep_probe(sample):
            self.probes_thinned += 1
            return
        record = sample.to_dict()
        if record.get("source") is None:
            record["source"] = LOCAL_SOURCE
        self.log.write_probe(record, self.in_flight)

    def record_end_probe(self, sample: Any, request_id: int) -> None:
        """Append a probe sample taken as request `request_id` ended, tagged with it: its
        figures are over the stretch since the sample before, which the request's end
        closes, so a request shorter than the sampling period still has one sample."""
        record = sample.to_dict()
        if record.get("source") is None:
            record["source"] = LOCAL_SOURCE
        self.log.write_probe(record, request_id)

    def _keep_probe(self, sample: Any) -> bool:
        """Whether to log `sample`: always while a request runs and for IDLE_AFTER_NS after
        one; idle, one every IDLE_PROBE_PERIOD_NS and every change of the verdict."""
        verdict = getattr(sample, "verdict", None)
        key = (getattr(verdict, "quiet", None),
               tuple(sorted(getattr(f, "code", "") for f in getattr(verdict, "findings", ()))))
        t_ns: int = getattr(sample, "t_ns", None) or time.perf_counter_ns()
        idle = (self.in_flight is None and not self.streaming
                and t_ns - self.active_ns > IDLE_AFTER_NS)
        last = self._last_probe
        if idle and last is not None and key == last[1] and t_ns - last[0] < IDLE_PROBE_PERIOD_NS:
            return False
        self._last_probe = (t_ns, key)
        return True

    def record_probe_state(self, state: str, detail: str) -> None:
        """Log a change of the probe source (an agent "connected", "lost", "refused")."""
        self.log.write(ProbeSourceRecord(state, detail))

    def close(self) -> None:
        """Write the end record and close the log."""
        self.log.close()
