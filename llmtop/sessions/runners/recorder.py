"""A measuring session: the engine connection, the options, the log and the probe samples.

Shared by the TUI, `llmtop run`, bench and load so all record the same things the same way:
`SessionRecorder.measure` is the one choreography of a request (a new numbered request →
stream it → record it; a cancelled one is recorded with what arrived, then the cancel goes
on).

A bench keeps what it writes (`keep=True`): the log's records as they read back, in memory,
so the runner decides its next step and the report analyses the run without reading its own
file again (`SessionRecorder.kept`); the file on disk stays the source of `llmtop report`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import threading
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from llmtop.engines.base import Engine
from llmtop.engines.connection import Connection
from llmtop.engines.events import StreamEvent
from llmtop.probes.sampler import ProbeSample
from llmtop.safetext import json_line
from llmtop.sessions.measure.request import (
    TOKEN_TIMEOUT_S,
    RequestCollector,
    RequestResult,
    chat_messages,
    run_request,
)
from llmtop.sessions.records.base import RecordError
from llmtop.sessions.records.log import SessionLog, default_log_path
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import (
    AnyRecord,
    EnergyRecord,
    Header,
    ProbeSourceRecord,
    RunLog,
    decode,
    fast_decode,
)
from llmtop.sessions.runners.energy import EnergyMeter
from llmtop.sessions.runners.environment import environment

LOCAL_SOURCE = {"kind": "local", "machine": socket.gethostname()}  # a sample from this machine
# An idle session logs fewer probe samples (a TUI left open for 12 minutes wrote 3.1 MB of
# 1 Hz samples): once no request has run for IDLE_AFTER_NS, a sample is
# logged at most every IDLE_PROBE_PERIOD_NS, or at once when the verdict changes (quiet or
# noisy, or another set of finding codes), so nothing the probes said is lost.
IDLE_AFTER_NS = 5 * 10**9
IDLE_PROBE_PERIOD_NS = 10 * 10**9


@dataclass(frozen=True, slots=True)
class RequestFields:
    """The fields of a request record that the mode sending it sets, beside what the request
    measured, by their names in the log's line (schema.RequestLine, which RequestRecord.of
    takes): a bench's or a sweep's plan (phase, index, prompt size, relay path and pair,
    dataset line, context depth: schema.PlanTags), a sweep's level, send offsets and
    replayed request (schema.LoadTags), a bench request's machine readings
    (RequestRecord.machine). A field left None is written as the record's default, so a mode
    sets only its own."""

    phase: str | None = None
    index: int | None = None
    prompt_tokens_target: int | None = None
    prompt_words: int | None = None
    path: str | None = None
    pair: int | None = None
    level: int | None = None
    dataset_line: int | None = None
    replay_of: int | None = None
    depth: int | None = None
    machine: Mapping[str, Any] | None = None
    sent_offset_ns: int | None = None
    scheduled_offset_ns: int | None = None
    lag_ms: float | None = None

    def given(self) -> dict[str, Any]:
        """The fields set (not None), by their record names."""
        return {f.name: value for f in dataclasses.fields(self)
                if (value := getattr(self, f.name)) is not None}


NO_FIELDS = RequestFields()


class KeptLog(SessionLog):
    """A SessionLog that keeps what it wrote: each line, as it is written, read back into its
    typed record by the reader's own rule (schema.fast_decode, else schema.decode: a record
    that would not read back is left out with the reader's warning, "line N: …; skipped"),
    so `kept()` is what `read_log` would give for the file so far without reading it. One
    lock orders the keeping as the file (the sampler thread writes probe records)."""

    def __init__(self, path: str | os.PathLike[str], header: Mapping[str, Any]) -> None:
        self._order = threading.Lock()
        self._first: Header | None = None
        self._records: list[AnyRecord] = []
        self._warnings: list[str] = []
        super().__init__(path, header)

    def write_raw(self, record: Mapping[str, Any], *, sync: bool = True) -> bool:
        """SessionLog.write_raw, keeping the record when it reached the file."""
        with self._order:
            if not super().write_raw(record, sync=sync):
                return False
            self._keep(json_line(record))
        return True

    def _keep(self, line: str) -> None:
        if self._first is None:  # the header, as log._read_header reads it
            self._first = Header.from_json(line)
            return
        kept = fast_decode(line)
        if kept is None:
            try:
                kept = decode(line)
            except RecordError as exc:
                self._warnings.append(f"line {self.written}: {exc}; skipped")
                return
        self._records.append(kept)

    def kept(self) -> RunLog:
        """The log written so far as typed records (schema.RunLog)."""
        with self._order:
            records, warnings = list(self._records), list(self._warnings)
        assert self._first is not None  # __init__ wrote the header or raised
        return RunLog.of(self._first, records, warnings)


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
    keep: the log keeps its records in memory (KeptLog; `kept()`), for a run that decides
    its next step and its report from what it wrote (a bench); off for the sessions that
    run for hours (the TUI, a sweep of thousands of requests), whose records would only grow.
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
        keep: bool = False,
    ) -> None:
        self.conn = conn
        self.token_timeout_s = token_timeout_s
        self.options = dict(options)
        self.think = think
        header = {"kind": kind, **self.header(), **(extra_header or {})}
        path = log_path or default_log_path(kind)
        self._keeping = KeptLog(path, header) if keep else None
        self.log: SessionLog = self._keeping or SessionLog(path, header)
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
        # (t_ns, verdict key: quiet and its findings' codes) of the sample logged last
        self._last_probe: tuple[int, tuple[bool, tuple[str, ...]]] | None = None
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

    def kept(self) -> RunLog:
        """The records written so far, as `read_log` would read them (needs `keep`; raises
        ValueError without it)."""
        if self._keeping is None:
            raise ValueError("this session's log keeps no records (SessionRecorder keep=False)")
        return self._keeping.kept()

    def stream(self, prompt: str, engine: Engine | None = None,
               options: dict[str, Any] | None = None,
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
        engine: Engine | None = None,
        options: dict[str, Any] | None = None,
        on_start: Callable[[RequestCollector], None] | None = None,
        on_end: Callable[[RequestResult, RequestRecord], None] | None = None,
        late: Callable[[RequestResult], RequestFields] | None = None,
        history: Sequence[Mapping[str, Any]] = (),
        fields: RequestFields = NO_FIELDS,
    ) -> Measured:
        """Measure one request: a new numbered request for `prompt`, streamed on `engine` with
        `options` (defaults: the connection's, the session's) after the chat messages of
        `history` (a conversation's earlier turns), recorded with its mode's `fields` (a
        bench's phase, index...) plus `late(result)` (those known only after it: the
        machine's readings, a sweep's send offset). on_event: each event as it arrives
        (keep it cheap); on_start: the collector before the stream starts (a live view);
        on_end: the result and its record, once it is logged. A cancelled request
        (CancelledError) is recorded with what arrived (status "cancelled", without `late`),
        on_end is called, and the cancel goes on. Raises RecordError for a field of the
        wrong type."""
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
            record = self.record(cancelled, fields, behind=False)
            if on_end is not None:
                on_end(cancelled, record)
            raise
        self.last_energy = self._energy(result)
        record = self.record(result, fields, late(result) if late else NO_FIELDS)
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

    def record(self, result: RequestResult, fields: RequestFields = NO_FIELDS,
               late: RequestFields = NO_FIELDS, *, behind: bool | None = None) -> RequestRecord:
        """Append a finished (or cancelled) request to the log, with its mode's `fields`
        (bench phase, index...) and the `late` ones known once it ended (a field set in both
        is `late`'s); returns the record as it will read back (records.request.RequestRecord).
        behind: write it in a thread (default `write_behind`; needs a running event loop).
        Raises RecordError when a field has the wrong type (nothing is written)."""
        self.in_flight = None
        self.active_ns = time.perf_counter_ns()
        self.streaming.discard(result.request_id)
        record = RequestRecord.of(result, **{**fields.given(), **late.given()})
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

    def record_probe(self, sample: ProbeSample) -> None:
        """Append a probe sample (this machine's, or an agent's RemoteSample); safe to call
        from the sampler thread. Its `source` says where it was taken: LOCAL_SOURCE, or the
        agent's (probes.remote)."""
        if not self._keep_probe(sample):
            self.probes_thinned += 1
            return
        record = sample.to_dict()
        if record.get("source") is None:
            record["source"] = LOCAL_SOURCE
        self.log.write_probe(record, self.in_flight)

    def record_end_probe(self, sample: ProbeSample, request_id: int) -> None:
        """Append a probe sample taken as request `request_id` ended, tagged with it: its
        figures are over the stretch since the sample before, which the request's end
        closes, so a request shorter than the sampling period still has one sample."""
        record = sample.to_dict()
        if record.get("source") is None:
            record["source"] = LOCAL_SOURCE
        self.log.write_probe(record, request_id)

    def _keep_probe(self, sample: ProbeSample) -> bool:
        """Whether to log `sample`: always while a request runs and for IDLE_AFTER_NS after
        one; idle, one every IDLE_PROBE_PERIOD_NS and every change of the verdict."""
        verdict = sample.verdict
        key = (verdict.quiet, tuple(sorted(f.code for f in verdict.findings)))
        t_ns = sample.t_ns or time.perf_counter_ns()
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
