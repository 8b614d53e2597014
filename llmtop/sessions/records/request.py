"""The request record: one request as the session log holds it, typed in parts and written
flat.

`RequestRecord` holds what every request has (status, text, the server's statistics, the
derived metrics, the chunks) and one part per mode that sent it: `plan` (a bench's or sweep's
request: PlanTags), `load` (a sweep's: LoadTags), `watch` (another app's, seen by `llmtop
watch`: WatchTags). On disk a request is one flat JSON object (`RequestLine`), the parts'
fields beside the common ones, in a fixed order: the format users' scripts and every older
log read. `check_request` bounds what a request read back may hold; `without_chunks` cuts a
line's chunks for a reader that uses none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from llmtop.engines.events import FailureKind, ServerStats, Status
from llmtop.sessions.measure.metrics import CLIENT_PREP, MS, OVERHEAD, TOK_S, Carrier, carried_by
from llmtop.sessions.measure.request import RequestResult
from llmtop.sessions.measure.timeline import RequestMetrics
from llmtop.sessions.records.base import MAX_DURATION_MS, Record, RecordError, adapter, parse

Phase = Literal["load", "warmup", "measure", "cache-cold", "cache-warm", "turn", "turn-cold"]
"""A bench request's phase: the run's first request (pays the model load), a warm-up, a
measured request, one of a cache pair (`pair` numbers it: a fresh prefix, then the same
prefix with a new suffix), or a conversation's turn (`index` numbers it from 0). Requests of
an interactive session have no phase."""


Chunk = tuple[int, str, str]
"""One streamed chunk as logged: `[offset_ns, content, thinking]`, the offset being ns from
the request's send stamp (client clock); read back as a plain tuple (`chunk[0]` the offset,
`[1]` the content, `[2]` the thinking): a named tuple cost a Python call per chunk in the
validator, half the reading time of a long log (1M chunks: 3.3 of 6.8 s)."""


@dataclass(frozen=True, slots=True)
class GpuClocksRecord:
    """One GPU's clocks (MHz) and active throttle reasons at the end of a request (NVML)."""

    index: int
    graphics_mhz: int | None = None
    sm_mhz: int | None = None
    memory_mhz: int | None = None
    throttle_reasons: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ThrottleRecord:
    """A throttle seen at a request's edges (probes.thermal.Throttle): part held back ("GPU",
    "CPU", "machine"), cause ("power", "thermal", "slowdown"), source ("nvml",
    "thermal_zone", "hwmon"), device ("gpu0", "thermal_zone0 x86_pkg_temp") and detail
    ("sw_power_cap", "97.0 °C >= passive trip 95.0 °C")."""

    part: str = ""
    cause: str = ""
    source: str = ""
    device: str = ""
    detail: str = ""

    @property
    def phrase(self) -> str:
        """"the GPU was power-capped", "the CPU was at its thermal limit"."""
        return f"the {self.part} was {THROTTLE_WORDS.get(self.cause, self.cause)}"


# how a throttle's cause is said: "power" a power cap (NVML sw_power_cap,
# hw_power_brake_slowdown), "thermal" a temperature limit or trip point reached, "slowdown"
# NVML's hw_slowdown (heat, power brake or power supply: it does not say which)
THROTTLE_WORDS = {"power": "power-capped", "thermal": "at its thermal limit",
                  "slowdown": "slowed down by its hardware (heat or power)"}


@dataclass(frozen=True, slots=True)
class MachineRecord:
    """The machine over one bench request (probes.machine_speed.MachineInterval, read right
    before and right after it): seconds spanned; CPU steal, 0–100 %; each core's clock at
    the end, MHz; cgroup CPU throttling, ms and periods; GPU clocks; throttle: the power caps
    and thermal limits seen at either edge (empty: none seen; a log from before they were
    read has none either). None: not readable."""

    seconds: float | None = None
    steal_percent: float | None = None
    freq_mhz: tuple[float | None, ...] = ()
    throttled_ms: float | None = None
    throttled_periods: int | None = None
    gpu: tuple[GpuClocksRecord, ...] = ()
    throttle: tuple[ThrottleRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class PlanTags:
    """Where a request stands in the plan of the bench or sweep that sent it (its phase is
    the record's own: RequestRecord.phase).

    index: its position within its prompt size (bench: 0-based, warm-ups first) or its level
    (sweep). prompt_tokens_target / prompt_words: the calibrated prompt size, tokens, and the
    words that make it. pair: a `--compare-relay` pair's number (its direct and relayed
    request share it), or a cache pair's (`bench --cache-pairs`). dataset_line: the line of
    the `--dataset` file whose request this is (a JSON array: the element's index). depth:
    a context-depth sweep's depth, tokens (`bench --depths`): the context asked for, which
    the prompt of `prompt_tokens_target` tokens fills; the server's own count of it is the
    request's `stats.prompt_eval_count`.
    """

    index: int | None = None
    prompt_tokens_target: int | None = None
    prompt_words: int | None = None
    pair: int | None = None
    dataset_line: int | None = None
    depth: int | None = None


@dataclass(frozen=True, slots=True)
class LoadTags:
    """When a sweep's request left, within its level (`llmtop load`, the Locust user class).

    level: the sweep level's index. sent_offset_ns: its send from the level's start, ns.
    scheduled_offset_ns / lag_ms: an open loop's timetable (ns from the level's start) and how
    far the send lagged it (ms). sent_unix_ns / end_unix_ns / client: a Locust worker's wall
    clock (ns since the epoch) at send and end, and the worker's name. replay_of: the id, in
    the watch log a `load --replay` sends again, of the request this one repeats.
    """

    level: int | None = None
    sent_offset_ns: int | None = None
    scheduled_offset_ns: int | None = None
    lag_ms: float | None = None
    sent_unix_ns: int | None = None
    end_unix_ns: int | None = None
    client: str | None = None
    replay_of: int | None = None


@dataclass(frozen=True, slots=True)
class WatchTags:
    """Another app's request that `llmtop watch` saw passing.

    endpoint: the path it was sent to ("/api/chat", "/v1/chat/completions"). upstream /
    listen: the engine's URL and the watch's "host:port". caller / caller_category /
    caller_pid: the app that sent it (probes/callers.py; None when not local or not visible).
    http_status: the engine's. hop_in_ms / hop_out_ms: the watch's own time on the way in
    (request received → sent on) and out (first text arrived → handed on), ms.
    pipeline_wait_ms: how long a request pipelined on its connection waited, written, for the
    answer before it to end, ms (TTFT and E2E count from that end, when the engine could take
    it up; None when it did not wait). probe_verdict ("QUIET" / "NOISY"; None without a
    sample) and probe_findings (the codes of its WARN/FAIL findings) over the request's span.
    """

    endpoint: str | None = None
    upstream: str | None = None
    listen: str | None = None
    caller: str | None = None
    caller_category: str | None = None
    caller_pid: int | None = None
    http_status: int | None = None
    hop_in_ms: float | None = None
    hop_out_ms: float | None = None
    pipeline_wait_ms: float | None = None
    probe_verdict: str | None = None
    probe_findings: tuple[str, ...] = ()


NO_PLAN, NO_LOAD, NO_WATCH = PlanTags(), LoadTags(), WatchTags()
"""The parts of a request that no bench, sweep or watch sent: every field unset."""


@dataclass(frozen=True, slots=True)
class RequestRecord(Record):
    """One request as logged (`type: "request"`; `RequestRecord.of` builds it from a result).

    id: the session's request number (from 1). status: how the stream ended. prompt / model /
    started_at (wall clock) / options (the Ollama options sent). error / error_kind: the
    failure's text and kind, None when it did not fail. stats: the server's own statistics
    (Ollama names, ns, tokens), None when it sent none. metrics: derived
    (timeline.RequestMetrics: ms, tokens/s). content / thinking: the answer's text. chunks:
    arrival offsets and text. phase: a bench's or sweep's request's (Phase), None for a
    request no run planned (an interactive session's, `run`'s, a watched one). path: the route
    to the engine in a `--compare-relay` run, "direct" or "relay"; None otherwise.
    client_prep_ms: the client's own time from asking for the
    request until its body was on the socket (ms; outside TTFT since the send stamp is that
    socket write; None from engines that cannot stamp the write; an open loop's hold of a
    prepared request until its scheduled moment is not counted: stamping/stamps.py).
    new_connection: the request opened a new TCP connection (the previous one was not
    reusable: a server that closes it after each response; inside client_prep_ms, not
    TTFT); None when unknown. machine: the machine's speed readings over a bench request.

    The mode that sent it fills its part: plan (a bench's or a sweep's request), load (a
    sweep's), watch (a request another app sent through `llmtop watch`); a part of another
    mode has every field unset (None, or empty), so a reader asks `r.watch.caller` of any
    record. On disk the record is one flat JSON object (RequestLine): the parts' fields stand
    beside the common ones.
    """

    TYPE: ClassVar[str] = "request"
    id: int
    status: Status
    prompt: str = ""
    model: str | None = None
    started_at: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_kind: FailureKind | None = None
    stats: ServerStats | None = None
    metrics: RequestMetrics = field(default_factory=RequestMetrics)
    content: str = ""
    thinking: str = ""
    chunks: tuple[Chunk, ...] = ()
    phase: Phase | None = None
    path: str | None = None
    client_prep_ms: float | None = None
    new_connection: bool | None = None
    machine: MachineRecord | None = None
    plan: PlanTags = NO_PLAN
    load: LoadTags = NO_LOAD
    watch: WatchTags = NO_WATCH

    @classmethod
    def of(cls, result: RequestResult, **fields: Any) -> RequestRecord:
        """The record of one finished (or cancelled) request, with the caller's `fields` by
        their names on disk (RequestLine: phase, index, level, ...), validated as it will read
        back; chunk stamps become offsets from the send, ns. Raises RecordError for a field
        of the wrong type."""
        return cls.from_json({
            "id": result.request_id,
            "started_at": result.wall_start,
            "model": result.model,
            "prompt": result.prompt,
            "options": result.options,
            "status": str(result.status),
            "error": str(result.failure) if result.failure else None,
            "error_kind": str(result.failure.kind) if result.failure else None,
            "stats": result.stats.to_dict() if result.stats else None,
            "metrics": result.metrics.to_dict(),
            CLIENT_PREP.key: None if result.prep_ns is None else round(result.prep_ns / 1e6, 3),
            "new_connection": result.new_connection,
            "content": result.content,
            "thinking": result.thinking,
            "chunks": [
                [e.t_ns - result.sent_ns, e.content, e.thinking]
                for e in result.events
                if (not e.done or e.has_text) and e.progress is None
            ],
            **fields,
        })

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> RequestRecord:
        """Validate one request line (the flat RequestLine: see `parse`) into its typed parts;
        raises RecordError naming the first bad field by its name on disk."""
        return parse(RequestLine, cls.TYPE, data).record()

    def to_json(self) -> dict[str, Any]:
        """The flat JSON object one log line holds (`type` first, then RequestLine's fields in
        their order, every one written, unset ones as null or [])."""
        body: dict[str, Any] = adapter(RequestLine).dump_python(RequestLine.of(self),
                                                                  mode="json")
        return {"type": self.TYPE, **body}

    @property
    def measured(self) -> bool:
        """A measured request: phase "measure", or no phase (an interactive session)."""
        return self.phase in (None, "measure")

    def metric(self, name: str) -> float | None:
        """One derived metric by its key (measure/metrics.py: `TTFT.key`, its field in
        timeline.RequestMetrics), as a float; None when n/a. Raises AttributeError for a name
        that is not a field."""
        value = getattr(self.metrics, name)
        return float(value) if isinstance(value, int | float) else None

    @property
    def position(self) -> int:
        """Its 0-based position: the index within its prompt size (bench), else (an
        interactive session or `run`, which number requests by id from 1) its id − 1, so a
        report's "#n" (position + 1) is the number the TUI showed."""
        return self.id - 1 if self.plan.index is None else self.plan.index


@dataclass(frozen=True, slots=True)
class RequestLine:
    """A request record as one log line holds it: flat, its fields in the order written (the
    format: users' scripts and every older log read this shape; `without_chunks` relies on
    `phase` following `chunks`). Fields as RequestRecord and its parts document them. Read
    and written only through RequestRecord (`record`, `of`): pydantic validates a line into
    this type straight from its text, in Rust, and `record` groups the parts in one pass."""

    id: int
    status: Status
    prompt: str = ""
    model: str | None = None
    started_at: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_kind: FailureKind | None = None
    stats: ServerStats | None = None
    metrics: RequestMetrics = field(default_factory=RequestMetrics)
    content: str = ""
    thinking: str = ""
    chunks: tuple[Chunk, ...] = ()
    phase: Phase | None = None
    index: int | None = None
    prompt_tokens_target: int | None = None
    prompt_words: int | None = None
    path: str | None = None
    pair: int | None = None
    client_prep_ms: float | None = None
    new_connection: bool | None = None
    machine: MachineRecord | None = None
    level: int | None = None
    sent_offset_ns: int | None = None
    scheduled_offset_ns: int | None = None
    lag_ms: float | None = None
    sent_unix_ns: int | None = None
    end_unix_ns: int | None = None
    client: str | None = None
    endpoint: str | None = None
    upstream: str | None = None
    listen: str | None = None
    caller: str | None = None
    caller_category: str | None = None
    caller_pid: int | None = None
    http_status: int | None = None
    hop_in_ms: float | None = None
    hop_out_ms: float | None = None
    pipeline_wait_ms: float | None = None
    probe_verdict: str | None = None
    probe_findings: tuple[str, ...] = ()
    dataset_line: int | None = None
    replay_of: int | None = None
    depth: int | None = None

    def record(self) -> RequestRecord:
        """The typed record, in one pass: a part none of whose fields is set is the shared
        unset one (NO_PLAN, NO_LOAD, NO_WATCH)."""
        plan, load, watch = NO_PLAN, NO_LOAD, NO_WATCH
        if (self.index is not None or self.prompt_tokens_target is not None
                or self.prompt_words is not None or self.pair is not None
                or self.dataset_line is not None or self.depth is not None):
            plan = PlanTags(self.index, self.prompt_tokens_target, self.prompt_words, self.pair,
                            self.dataset_line, self.depth)
        if (self.level is not None or self.sent_offset_ns is not None
                or self.scheduled_offset_ns is not None or self.lag_ms is not None
                or self.sent_unix_ns is not None or self.end_unix_ns is not None
                or self.client is not None or self.replay_of is not None):
            load = LoadTags(self.level, self.sent_offset_ns, self.scheduled_offset_ns,
                            self.lag_ms, self.sent_unix_ns, self.end_unix_ns, self.client,
                            self.replay_of)
        if (self.endpoint is not None or self.upstream is not None or self.listen is not None
                or self.caller is not None or self.caller_category is not None
                or self.caller_pid is not None or self.http_status is not None
                or self.hop_in_ms is not None or self.hop_out_ms is not None
                or self.pipeline_wait_ms is not None or self.probe_verdict is not None
                or self.probe_findings):
            watch = WatchTags(self.endpoint, self.upstream, self.listen, self.caller,
                              self.caller_category, self.caller_pid, self.http_status,
                              self.hop_in_ms, self.hop_out_ms, self.pipeline_wait_ms,
                              self.probe_verdict, self.probe_findings)
        return RequestRecord(self.id, self.status, self.prompt, self.model, self.started_at,
                             self.options, self.error, self.error_kind, self.stats, self.metrics,
                             self.content, self.thinking, self.chunks, self.phase, self.path,
                             self.client_prep_ms, self.new_connection, self.machine, plan, load,
                             watch)

    @classmethod
    def of(cls, r: RequestRecord) -> RequestLine:
        """The line of a typed record: its parts' fields flat."""
        p, ld, w = r.plan, r.load, r.watch
        return cls(r.id, r.status, r.prompt, r.model, r.started_at, r.options, r.error,
                   r.error_kind, r.stats, r.metrics, r.content, r.thinking, r.chunks,
                   r.phase, p.index, p.prompt_tokens_target, p.prompt_words, r.path, p.pair,
                   r.client_prep_ms, r.new_connection, r.machine, ld.level, ld.sent_offset_ns,
                   ld.scheduled_offset_ns, ld.lag_ms, ld.sent_unix_ns, ld.end_unix_ns,
                   ld.client, w.endpoint, w.upstream, w.listen, w.caller, w.caller_category,
                   w.caller_pid, w.http_status, w.hop_in_ms, w.hop_out_ms, w.pipeline_wait_ms,
                   w.probe_verdict, w.probe_findings, p.dataset_line, ld.replay_of, p.depth)


_CHUNKS_OPEN = '"chunks": ['
_CHUNKS_CLOSE = '], "phase": '  # RequestLine's field after `chunks`, as json_line writes it


def without_chunks(line: str) -> str:
    """A request line as llmtop writes it with its `chunks` array emptied ("[]"), for a
    reader that uses no chunk (a markdown, CSV or JSON report: 3 of a long log's 6.5 KB a
    line, half its reading time). The array runs from `"chunks": [` to the first `], "phase": `:
    inside it, strings hold every quote escaped, so an unescaped `"phase": ` (a key) can only
    follow its end; and a cut that would hold any key (`": ` unescaped) is not made. Any
    other line comes back whole."""
    start = line.find(_CHUNKS_OPEN)
    if start < 0:
        return line
    start += len(_CHUNKS_OPEN)
    end = line.find(_CHUNKS_CLOSE, start)
    if end <= start or _holds_key(line, start, end):
        return line
    return line[:start] + line[end:]


def _holds_key(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] holds an unescaped `": ` (an object's key ends there): a
    quote is escaped when an odd number of backslashes stands before it."""
    at = text.find('": ', start, end)
    while at >= 0:
        slashes = len(text[start:at]) - len(text[start:at].rstrip("\\"))
        if slashes % 2 == 0:
            return True
        at = text.find('": ', at + 1, end)
    return False


# What check_request bounds among a request's metrics, read from the metric table so that a new
# metric is bounded too: every duration (overhead apart: a server that over-reports its own
# time makes it negative, so only its size is bounded), each ITL series, every rate.
_DURATIONS_MS = tuple(m.key for m in carried_by(Carrier.REQUEST)
                      if m.unit == MS and not m.series and m is not OVERHEAD)
_SERIES_MS = tuple(m.key for m in carried_by(Carrier.REQUEST) if m.series)
_RATES = tuple(m.key for m in carried_by(Carrier.REQUEST) if m.unit == TOK_S)
_STATS_COUNTS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
                 "eval_count", "eval_duration", "prompt_cached_count", "draft_count",
                 "draft_accepted_count")


def _duration_problem(value: float) -> str | None:
    """Why `value` ms is no duration of a request (negative, or over MAX_DURATION_MS)."""
    if value < 0:
        return f"{value:g} ms is negative, which no duration can be"
    if value > MAX_DURATION_MS:
        return f"{value:.3g} ms is over a year ({MAX_DURATION_MS:.3g} ms), which no request lasts"
    return None


def request_problem(record: RequestRecord) -> tuple[str, str] | None:
    """(field, why) for the first figure of `record` that time or its other figures
    contradict, or None (check_request's rules)."""
    m = record.metrics
    for name in _DURATIONS_MS:
        value = getattr(m, name)
        why = None if value is None else _duration_problem(value)
        if why is not None:
            return f"metrics.{name}", why
    for name in _SERIES_MS:
        series = getattr(m, name)
        if series and (min(series) < 0 or max(series) > MAX_DURATION_MS):  # C-speed first
            for i, value in enumerate(series):
                why = _duration_problem(value)
                if why is not None:
                    return f"metrics.{name}[{i}]", why
    for name, value in ((CLIENT_PREP.key, record.client_prep_ms),
                        (f"metrics.{OVERHEAD.key}", None if m.overhead_ms is None
                         else abs(m.overhead_ms))):  # overhead may be below 0: a server's lie
        why = None if value is None else _duration_problem(value)
        if why is not None:
            return name, why
    for name in _RATES:
        value = getattr(m, name)
        if value is not None and value < 0:
            return f"metrics.{name}", f"{value:g} tokens/s is negative, which no rate can be"
    counts = [(f"metrics.{n}", getattr(m, n)) for n in ("output_tokens", "text_chunks")]
    if record.stats is not None:
        counts += [(f"stats.{n}", getattr(record.stats, n)) for n in _STATS_COUNTS]
    for name, value in counts:
        if value is not None and value < 0:
            return name, f"{value} is negative, which no count or duration can be"
    if m.ttft_ms is not None and m.e2e_ms is not None and m.e2e_ms < m.ttft_ms:
        return "metrics.e2e_ms", (f"{m.e2e_ms:g} ms ends before the first token "
                                  f"(ttft_ms {m.ttft_ms:g}): a request ends after it begins")
    return None


def check_request(record: RequestRecord) -> None:
    """Raise RecordError naming the first figure of a request record read back that cannot
    be a measurement: a duration (ms) that is negative or over MAX_DURATION_MS (TTFT, E2E,
    TPOT, each ITL, the server's times, client_prep_ms; overhead_ms by its size only: a
    server that over-reports its own time makes it negative), a negative rate or count
    (the server's stats too), or an E2E shorter than the TTFT (the last chunk before the
    first). Such a record is skipped by the reader, as a NaN is: entered into statistics it
    would make a median or a minimum of what never happened."""
    found = request_problem(record)
    if found is not None:
        raise RecordError(RequestRecord.TYPE, *found)
