"""The session log's schema: every record type, written and read through the same types.

This module owns the format (FORMAT_VERSION); which field appeared when, and the older shapes
still read, are docs/reference/session-log.md's "Version history". Each record type is a frozen
dataclass with a `TYPE` (the record's `type` field), `to_json()` (the JSON object written as
one line; log.SessionLog.write takes the record) and `from_json()` (the typed record read
back; log.read_log returns them). Analysis, attribution and reports read attributes
(`r.metrics.ttft_ms`, `p.verdict.quiet`) instead of walking dicts, so a misspelt field fails
in mypy rather than reading as "n/a".

`from_json` checks every field a type declares against its type with pydantic in strict JSON
mode (an int where a string belongs, "5" where a number belongs, an unknown status are
errors; an int is a valid float). A declared field missing from the JSON takes its default
(None, empty, or the value the field means when unsaid), so a log that lacks a field reads;
fields a type does not declare are ignored, so a newer writer's log reads too.

A request record is typed in parts (RequestRecord: the common fields, then what a bench's or
sweep's plan, a sweep or a watch added), and written flat, one JSON object, as RequestLine.

Two kinds of record:
* closed records (request, canary, header, calibration's points, level, summary, interrupted,
  end, probe_source, bench): `to_json` writes the declared fields, nothing else;
* open records (probe, environment, preflight, calibration): the body comes whole from
  another module (a probe sample, the engine's environment, the preflight result), so the
  record keeps it as `body` (written as is, read back as is) and declares, typed, the fields
  llmtop reads back. `of(body)` builds one, validating it as a read would.

`decode` turns any JSON record into its type (`UnknownRecord` for a type this llmtop does not
know: a newer writer's), and `read_log` skips a record that fails, with a warning naming the
line and the field.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple, Self, TypeVar

from pydantic import TypeAdapter, ValidationError

from llmtop.engines.events import FailureKind, ServerStats, Status
from llmtop.safetext import may_hold_surrogate, without_surrogates
from llmtop.sessions.measure.config import BenchConfig, LoadConfig, WatchSetup, config_json
from llmtop.sessions.measure.metrics import (
    CLIENT_PREP,
    MS,
    OVERHEAD,
    TOK_S,
    Carrier,
    carried_by,
)
from llmtop.sessions.measure.request import RequestResult
from llmtop.sessions.measure.stats import DRIFT_THRESHOLD_PCT
from llmtop.sessions.measure.timeline import RequestMetrics

T = TypeVar("T")
R = TypeVar("R", bound="Record")

FORMAT_VERSION = 1
# Bump it when a reader of the previous version would misread a new log; a field that older
# readers ignore needs no bump, and readers default a missing one, so every version-1 log
# reads. What each version added: docs/reference/session-log.md, "Version history".
SUPPORTED_FORMATS = (1,)

Phase = Literal["load", "warmup", "measure", "cache-cold", "cache-warm", "turn", "turn-cold"]
"""A bench request's phase: the run's first request (pays the model load), a warm-up, a
measured request, one of a cache pair (`pair` numbers it: a fresh prefix, then the same
prefix with a new suffix), or a conversation's turn (`index` numbers it from 0). Requests of
an interactive session have no phase."""


class RecordError(ValueError):
    """A JSON record whose shape does not match its type.

    kind: the record type ("request", "probe", "header"). field: the first bad field as a
    dotted path ("metrics.ttft_ms"; "" for the record itself). The message says what the
    field should be and what it held.
    """

    def __init__(self, kind: str, field_path: str, problem: str) -> None:
        where = f"field {field_path}" if field_path else "the record"
        super().__init__(f"{kind} record: {where}: {problem}")
        self.kind = kind
        self.field = field_path


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}  # built on first use: a few ms per record type


def _refuse_non_finite(kind: str, text: str | bytes) -> None:
    """Raise RecordError for a bare NaN/Infinity/-Infinity in a record: Python's json writes
    and reads them, JSON does not have them, and no figure llmtop shows may be one (a NaN
    crashes Textual's Sparkline and poisons every median). Strings containing the words are
    fine: only a full parse, done when the words appear at all, can tell the two apart."""
    probe = text if isinstance(text, str) else text.decode("utf-8", "replace")
    if "NaN" not in probe and "Infinity" not in probe:
        return

    def refuse(constant: str) -> float:
        raise RecordError(kind, "", f"holds {constant}, which no measurement can be")

    with contextlib.suppress(json.JSONDecodeError):  # not JSON at all: validation says so
        json.loads(probe, parse_constant=refuse)


# Bounds on what a record read back may hold (`check_numbers`, `check_request`): past them
# a figure is no measurement, and the record is skipped as a NaN is, naming line and field.
MAX_MAGNITUDE = 2**64
"""The largest magnitude of any number in a record other than the header: every counter and
stamp llmtop writes fits a 64-bit integer (ns since the epoch until 2262 included), and with
every value under 2^64 (1.8e19) the squares and sums a statistic takes over a billion of
them stay under 1e48, far inside a float's 1.8e308: no median, mean or histogram of accepted
values overflows to infinity or turns NaN (1e308 did: the markdown report died on it)."""
MAX_DURATION_MS = 365.25 * 24 * 3600 * 1000
"""A year in ms (3.16e10): the longest duration a request record may hold. No request
llmtop times lasts a year (run's read timeout is minutes); a bigger figure is a corrupt or
hostile record, and would dominate every mean it entered."""
MAX_INT_DIGITS = 40  # digits an integer may have before it is read as a marker (see _loads)
# What `suspect` looks for, after a translation that keeps only the shape of numbers: every
# digit becomes "0", "e"/"E" becomes "e", "+" stays, everything else is a space. A number of
# 2^64 or more has 20 digits in a row or a two-digit exponent (1.8e+19); NaN and Infinity
# are found by name. One str.translate and a few substring searches run in C (~40 µs for a
# 6.5 KB request line, where one regular expression took ~600 µs).
_SHAPE = str.maketrans({**{chr(c): " " for c in range(128)}, **dict.fromkeys("0123456789", "0"),
                        "e": "e", "E": "e", "+": "+"})
_LONG_RUN = "0" * 20


def suspect(text: str) -> bool:
    """Whether a record's line may hold a number `check_numbers` refuses: the word NaN or
    Infinity, a run of 20 digits, or an exponent of two digits or more (with or without
    "+"). False says for sure it holds none; True is a "maybe" (a string in the record can
    look like one), settled by walking the decoded record."""
    if "NaN" in text or "Infinity" in text:
        return True
    shape = text.translate(_SHAPE)
    return _LONG_RUN in shape or "e+00" in shape or "0e00" in shape


class _Unreadable(NamedTuple):
    """A number `check_numbers` refuses, kept as what it was written as: a NaN/Infinity
    constant, or an integer of more than MAX_INT_DIGITS digits (Python refuses to convert
    one of over 4,300, so it is never converted)."""

    text: str


def _constant(text: str) -> _Unreadable:
    return _Unreadable(text)


def _bounded_int(text: str) -> int | _Unreadable:
    return int(text) if len(text) <= MAX_INT_DIGITS else _Unreadable(text)


def loads(text: str | bytes) -> Any:
    """`json.loads` for a record: NaN, Infinity and -Infinity read as markers that
    `check_numbers` names (JSON has no such constants), and an integer too long for Python
    to convert (over 4,300 digits: ValueError) read as a marker instead of failing the
    line. Raises json.JSONDecodeError and RecursionError as json.loads does."""
    try:
        return json.loads(text, parse_constant=_constant)
    except json.JSONDecodeError:
        raise
    except ValueError:  # the only other: an int past sys.get_int_max_str_digits()
        return json.loads(text, parse_constant=_constant, parse_int=_bounded_int)


def check_numbers(kind: str, obj: Any, text: str | bytes | None = None) -> None:
    """Raise RecordError naming the first field of `obj` (a decoded record, from `loads`)
    that holds a number no measurement can be: NaN or ±Infinity, a float that overflowed to
    infinity (1e400), or a magnitude of MAX_MAGNITUDE or more. `text`: the line it was
    decoded from; when given, a line that cannot hold such a number (no "NaN", "Infinity",
    20-digit run or two-digit exponent: `suspect`) is not walked, so a record costs a scan
    of its text in C, not a second pass over its values."""
    if text is not None:
        probe = text if isinstance(text, str) else text.decode("utf-8", "replace")
        if not suspect(probe):
            return
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):  # pushed last first: fields are named in file order
            stack.extend(reversed([(f"{path}.{k}" if path else str(k), v)
                                   for k, v in value.items()]))
        elif isinstance(value, list):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(value)]))
        else:
            problem = _number_problem(value)
            if problem is not None:
                raise RecordError(kind, path, problem)


def _number_problem(value: Any) -> str | None:
    """Why `value` is no measurement (check_numbers' rules), or None."""
    if isinstance(value, _Unreadable):
        digits = value.text.lstrip("-")
        if digits.isdigit():
            return f"holds an integer of {len(digits)} digits, which no measurement can be"
        return f"holds {value.text}, which no measurement can be"
    if isinstance(value, float):
        if math.isnan(value):
            return "holds NaN, which no measurement can be"
        if math.isinf(value):
            return ("holds a number past a float's range (read as infinity), which no "
                    "measurement can be")
    elif not isinstance(value, int) or isinstance(value, bool):
        return None
    if abs(value) >= MAX_MAGNITUDE:
        return f"holds {value:.3g}, past {MAX_MAGNITUDE:.3g}, which no measurement can be"
    return None


def parse(cls: type[T], kind: str, data: str | bytes | Mapping[str, Any]) -> T:
    """Validate one JSON record (a line, or an object already decoded) into `cls`.

    Raises RecordError naming the first bad field. A decoded object is re-encoded so both
    paths validate JSON types (a JSON array is a valid tuple; a Python list would not be in
    strict mode). A lone surrogate in a string (a JSON `"\\ud800"` from an engine or a log)
    is read as U+FFFD, the replacement character (safetext.without_surrogates): the record
    stays valid Unicode, written and read back whole.
    """
    if isinstance(data, str | bytes) and may_hold_surrogate(data):
        with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
            data = json.loads(data)  # a lone surrogate becomes U+FFFD: valid Unicode
    text = (data if isinstance(data, str | bytes)
            else json.dumps(without_surrogates(data), default=str))
    _refuse_non_finite(kind, text)
    adapter = _ADAPTERS.get(cls) or _ADAPTERS.setdefault(cls, TypeAdapter(cls))
    try:
        record: T = adapter.validate_json(text, strict=True)
        return record
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(part) for part in first["loc"])
        got = first.get("input")
        shown = "" if isinstance(got, dict) else f", got {json.dumps(got, default=str)[:60]}"
        raise RecordError(kind, path, f"{first['msg']}{shown}") from None


def _adapter(cls: type[T]) -> TypeAdapter[T]:
    adapter: TypeAdapter[T] = _ADAPTERS.get(cls) or _ADAPTERS.setdefault(cls, TypeAdapter(cls))
    return adapter


class Record:
    """A closed record type: `to_json` writes its declared fields under its `TYPE`."""

    __slots__ = ()
    TYPE: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this record (`type` first), as one log line holds it."""
        body: dict[str, Any] = _adapter(type(self)).dump_python(self, mode="json")
        return {"type": self.TYPE, **body}

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> Self:
        """Validate one record (see `parse`); raises RecordError naming the first bad field."""
        return parse(cls, cls.TYPE, data)


class OpenRecord(Record):
    """A record whose body comes whole from elsewhere: `body` is written and read as is, and
    the declared fields are its typed view (module docstring)."""

    __slots__ = ()
    body: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The body under this record's `type`."""
        return {"type": self.TYPE, **self.body}

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> Self:
        """Validate the typed view (raises RecordError) and keep the whole body."""
        text = data if isinstance(data, str | bytes) else json.dumps(data, default=str)
        typed = parse(cls, cls.TYPE, text)
        decoded = json.loads(text)
        # the body is the record's own JSON, set once on the instance just built (frozen)
        object.__setattr__(typed, "body", {k: v for k, v in decoded.items() if k != "type"})
        return typed

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Self:
        """A record of `body` (JSON-ready), validated as it will read back; raises
        RecordError."""
        return cls.from_json(dict(body))


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
class MachineRecord:
    """The machine over one bench request (probes.machine_speed.MachineInterval, read right
    before and right after it): seconds spanned; CPU steal, 0–100 %; each core's clock at
    the end, MHz; cgroup CPU throttling, ms and periods; GPU clocks. None: not readable."""

    seconds: float | None = None
    steal_percent: float | None = None
    freq_mhz: tuple[float | None, ...] = ()
    throttled_ms: float | None = None
    throttled_periods: int | None = None
    gpu: tuple[GpuClocksRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class CanaryRecord(Record):
    """One machine-speed canary run (`type: "canary"`; probes.canary), taken between requests.

    before_request: the id of the request that ran next (None: not tied to a request).
    cpu_ms / mem_ms / simd_ms: the median of `repeats` timings of each part, ms (simd_ms None:
    not timed); threads: the simd part's threads. t_ns: perf_counter_ns when it began.
    """

    TYPE: ClassVar[str] = "canary"
    cpu_ms: float
    mem_ms: float
    simd_ms: float | None = None
    before_request: int | None = None
    repeats: int = 1
    threads: int | None = None
    t_ns: int | None = None

    @property
    def total_ms(self) -> float:
        """cpu_ms + mem_ms + simd_ms (0 when absent)."""
        return self.cpu_ms + self.mem_ms + (self.simd_ms or 0.0)


@dataclass(frozen=True, slots=True)
class PlanTags:
    """Where a request stands in the plan of the bench or sweep that sent it (its phase is
    the record's own: RequestRecord.phase).

    index: its position within its prompt size (bench: 0-based, warm-ups first) or its level
    (sweep). prompt_tokens_target / prompt_words: the calibrated prompt size, tokens, and the
    words that make it. pair: a `--compare-relay` pair's number (its direct and relayed
    request share it), or a cache pair's (`bench --cache-pairs`). dataset_line: the line of
    the `--dataset` file whose request this is (a JSON array: the element's index).
    """

    index: int | None = None
    prompt_tokens_target: int | None = None
    prompt_words: int | None = None
    pair: int | None = None
    dataset_line: int | None = None


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
        body: dict[str, Any] = _adapter(RequestLine).dump_python(RequestLine.of(self),
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

    def record(self) -> RequestRecord:
        """The typed record, in one pass: a part none of whose fields is set is the shared
        unset one (NO_PLAN, NO_LOAD, NO_WATCH)."""
        plan, load, watch = NO_PLAN, NO_LOAD, NO_WATCH
        if (self.index is not None or self.prompt_tokens_target is not None
                or self.prompt_words is not None or self.pair is not None
                or self.dataset_line is not None):
            plan = PlanTags(self.index, self.prompt_tokens_target, self.prompt_words, self.pair,
                            self.dataset_line)
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
                   w.probe_verdict, w.probe_findings, p.dataset_line, ld.replay_of)


@dataclass(frozen=True, slots=True)
class AppCpu:
    """One application in a probe sample: name, category (probes.processes.Category value),
    CPU in % of one core (None: unknown this sample)."""

    app: str
    category: str | None = None
    cpu_percent: float | None = None


@dataclass(frozen=True, slots=True)
class ProcessesRecord:
    """The processes part of a probe sample: the busiest apps (at most 20 are logged), and
    warming_up, True on the probe's first sample (no CPU reading yet)."""

    warming_up: bool = False
    apps: tuple[AppCpu, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuDeviceRecord:
    """One GPU in a probe sample, any vendor (probes.gpu.GpuDevice): busy % (util_reason:
    why none), memory used and total in bytes, board power in W (power_from: which
    reading), energy_j: the board's cumulative counter in J; vendor / driver / source
    ("nvml", "sysfs") / card: which GPU and who read it; None: not read."""

    name: str | None = None
    util_percent: float | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    util_reason: str | None = None
    power_w: float | None = None
    power_from: str | None = None
    energy_j: float | None = None
    vendor: str | None = None
    driver: str | None = None
    source: str | None = None
    card: str | None = None


@dataclass(frozen=True, slots=True)
class GpuRecord:
    """The GPU part of a probe sample; `reason` says why there is no reading."""

    available: bool | None = None
    reason: str | None = None
    devices: tuple[GpuDeviceRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class FindingRecord:
    """One finding of a probe verdict or a preflight check (probes.preflight.finding_dict):
    its code, level ("info", "warn", "fail"), message and remedy, and the measured value
    against its threshold (in `unit`)."""

    code: str = ""
    level: str = "info"
    message: str = ""
    remedy: str = ""
    value: float | None = None
    threshold: float | None = None
    unit: str = ""


@dataclass(frozen=True, slots=True)
class ProbeVerdict:
    """The probe verdict of a sample: quiet is False when any finding was WARN or FAIL."""

    quiet: bool = True
    findings: tuple[FindingRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class ProbeSource:
    """Where a probe sample was taken: kind "local" (this machine) or "agent" (`llmtop agent`
    at `url` on `machine`, its stamps mapped onto ours with `clock_offset_ns` ±
    `clock_uncertainty_ns`; received_ns: our perf_counter_ns when it arrived)."""

    kind: str = "local"
    machine: str | None = None
    url: str | None = None
    clock_offset_ns: int | None = None
    clock_uncertainty_ns: int | None = None
    received_ns: int | None = None


@dataclass(frozen=True, slots=True)
class ProbeRecord(OpenRecord):
    """One probe sample as logged (`type: "probe"`; an open record whose body is
    probes.sampler.ProbeSample.to_dict plus the fields below).

    request_id: the request it overlapped (None between requests); in a load sweep, level
    and request_ids: the level running and the ids in flight. t_ns: perf_counter_ns
    when sampling began. processes / gpu / verdict: None when that probe failed or was not
    written. cost_ms: the sampling thread's CPU time, ms. source: where it was taken (None:
    this machine).
    """

    request_id: int | None = None
    t_ns: int | None = None
    wall_time: str | None = None
    processes: ProcessesRecord | None = None
    gpu: GpuRecord | None = None
    verdict: ProbeVerdict | None = None
    cost_ms: float | None = None
    source: ProbeSource | None = None
    level: int | None = None
    request_ids: tuple[int, ...] = ()
    body: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    TYPE: ClassVar[str] = "probe"

    @property
    def noisy(self) -> bool:
        """True when the sample's verdict was NOISY (False when it had none)."""
        return self.verdict is not None and not self.verdict.quiet


@dataclass(frozen=True, slots=True)
class Header(Record):
    """A session log's first record (`type: "header"`).

    format: the session-log format (FORMAT_VERSION). kind: "session", "bench", "load" or
    "watch". engine / engine_version / host / model: what was measured; engine_config: the
    embedded engine's or llama-server's configuration (servers/embedded/llama_config.py
    `Choice.to_dict`), else None. via: "direct", "relay" or "watch"; upstream: the engine
    behind the relay or the watch; proxy: the HTTP proxy requests to the engine went through
    (None: direct; never for a loopback engine). model_details: /api/show's summary.
    options: the Ollama options sent with every request. token_timeout_s: the time without a
    token after which a request ended stalled (`--token-timeout`, s). environment: the
    machine (OS, CPU, RAM, GPU, power: runners/environment.py); machine: where bench logs
    once kept the machine, read through `machine_environment`. bench / load / watch: what a
    bench, a sweep or a watch was set up to do (measure/config.py), None for other kinds;
    generator: what sent a sweep's requests ("locust"; None: llmtop).
    """

    TYPE: ClassVar[str] = "header"
    format: int
    llmtop_version: str | None = None
    distribution: str | None = None  # the package's name on the index: "llmtop-latency"
    started_at: str | None = None
    kind: str = "session"
    engine: str | None = None
    engine_version: str | None = None
    engine_config: dict[str, Any] | None = None
    host: str | None = None
    via: str | None = None
    upstream: str | None = None
    proxy: str | None = None
    model: str | None = None
    model_details: dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    token_timeout_s: float | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    bench: BenchConfig | None = None
    machine: dict[str, Any] | None = None
    load: LoadConfig | None = None
    generator: str | None = None
    watch: WatchSetup | None = None

    def to_json(self) -> dict[str, Any]:
        """The header's JSON object; a config's keys that are unset and written only when set
        (config.WRITTEN_WHEN_SET) are left out, as its `to_dict` leaves them."""
        data = Record.to_json(self)
        for part in ("bench", "load"):
            if data.get(part) is not None:
                data[part] = config_json(data[part])
        return data

    @property
    def machine_environment(self) -> dict[str, Any]:
        """The machine (OS, CPU, RAM, GPU, power), from either place a log keeps it."""
        return {**self.environment, **(self.machine or {})}

    @property
    def drift_threshold_pct(self) -> float:
        """A bench's drift threshold, % (stats.DRIFT_THRESHOLD_PCT when not a bench)."""
        return DRIFT_THRESHOLD_PCT if self.bench is None else self.bench.drift_threshold_pct


@dataclass(frozen=True, slots=True)
class EndRecord(Record):
    """The last record of a log closed cleanly (`type: "end"`): when, wall clock."""

    TYPE: ClassVar[str] = "end"
    ended_at: str | None = None


@dataclass(frozen=True, slots=True)
class InterruptedRecord(Record):
    """A bench or sweep cancelled before its end (`type: "interrupted"`): when, wall clock."""

    TYPE: ClassVar[str] = "interrupted"
    at: str | None = None


@dataclass(frozen=True, slots=True)
class SummaryRecord(Record):
    """A bench's closing summary (`type: "summary"`): whether the run was contaminated, its
    ok requests, and the drift threshold it judged against (%); verdict: the verdict's word
    (analysis/verdict.py: "clean", "clean after re-measuring", "contaminated",
    "inconclusive"); episodes: the slow episodes, each {"prompt_tokens_target", "path",
    "first", "last" (request numbers within the size, 1 = the first measured), "request_ids"
    (the request records' `id`s in it), "changes_pct" (per series key)}: every request's
    episode tag. None: not written."""

    TYPE: ClassVar[str] = "summary"
    contaminated: bool | None = None
    ok_requests: int | None = None
    drift_threshold_pct: float | None = None
    verdict: str | None = None
    episodes: list[dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class CalibrationPoint:
    """One calibrated prompt size: the words that make it and the tokens the server counted."""

    words: int
    tokens: float


@dataclass(frozen=True, slots=True)
class CalibrationRecord(Record):
    """The prompt calibration of a bench or sweep (`type: "calibration"`;
    calibration.Calibration.to_dict). targets: per target size in tokens (a string key, as
    JSON has it), its point; probes: (words, prompt_eval_count) pairs measured;
    template_tokens: the chat template's own cost; from_cache: read from the cache."""

    TYPE: ClassVar[str] = "calibration"
    calibration_format: int | None = None
    engine_host: str | None = None
    model: str | None = None
    options_key: str | None = None
    template_tokens: int | None = None
    targets: dict[str, CalibrationPoint] = field(default_factory=dict)
    probes: tuple[tuple[int, int], ...] = ()
    from_cache: bool = False

    @classmethod
    def of(cls, calibration: Mapping[str, Any]) -> CalibrationRecord:
        """The record of a Calibration.to_dict(); raises RecordError."""
        return cls.from_json(dict(calibration))


@dataclass(frozen=True, slots=True)
class EnvironmentRecord(OpenRecord):
    """The engine's environment at a run's "start" or "end" (`type: "environment"`; an open
    record whose body is runners' engine_environment: engine, version, model details, and
    `loaded`, /api/ps's view of the loaded model; a sweep adds `parallel`)."""

    TYPE: ClassVar[str] = "environment"
    phase: str = "start"
    loaded: dict[str, Any] | None = None
    body: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class PreflightRecord(OpenRecord):
    """The preflight verdict of a bench or sweep (`type: "preflight"`; an open record whose
    body is probes.preflight.PreflightResult.to_dict): QUIET / NOISY / CANNOT CHECK, quiet,
    its findings, and the error when it could not check."""

    TYPE: ClassVar[str] = "preflight"
    verdict: str = "CANNOT CHECK"
    quiet: bool = False
    findings: tuple[FindingRecord, ...] = ()
    error: str | None = None
    body: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def problems(self) -> tuple[FindingRecord, ...]:
        """The findings above "info"."""
        return tuple(f for f in self.findings if f.level != "info")


@dataclass(frozen=True, slots=True)
class SaturationStop:
    """Why an open-loop level was stopped early (analysis/saturation.py's rule): after `sent`
    requests had left, the TTFTs from the scheduled send of the last `n` answered ones, in
    send order, rose by `slope_ms` per request (Theil–Sen; `low_ms`..`high_ms` its 95 %
    confidence interval), `rise_ms` = slope × (n − 1) over the fit, above `baseline_ms`
    (the median TTFT of the fit's first quarter)."""

    sent: int
    n: int
    slope_ms: float
    low_ms: float
    high_ms: float
    rise_ms: float
    baseline_ms: float


@dataclass(frozen=True, slots=True)
class LevelRecord(Record):
    """One end of a sweep level (`type: "level"`). phase "start": mode, value (users or
    req/s), requests planned (None: by duration), duration_s. phase "end": wall_ns (first send
    to last completion; with repeats, the repeats' wall times summed), generator_cpu_ns (the
    event loop's CPU time), max_in_flight, repeats (batches of `requests` run at this level by
    an SLO search: runners/load/search.py; 1 otherwise), stopped (the over-saturation stop,
    None when the level ran to its end), server_metrics (llama-server's /metrics over the
    level: runners/load/server_metrics.py)."""

    TYPE: ClassVar[str] = "level"
    phase: Literal["start", "end"]
    level: int
    value: float = 0.0
    mode: str | None = None
    requests: int | None = None
    duration_s: float | None = None
    wall_ns: int | None = None
    generator_cpu_ns: int | None = None
    max_in_flight: int | None = None
    repeats: int | None = None
    stopped: SaturationStop | None = None
    server_metrics: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ProbeSourceRecord(Record):
    """A change of the probe source (`type: "probe_source"`): an agent "connected", "lost",
    "refused", with a line saying why."""

    TYPE: ClassVar[str] = "probe_source"
    state: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class BenchMarkRecord(Record):
    """A bench started or ended from the TUI (`type: "bench"`, in the interactive session's
    log): phase "start" (with the BenchConfig.to_dict()) or "end" (with its outcome), and the
    bench's own log."""

    TYPE: ClassVar[str] = "bench"
    phase: str
    log: str
    bench: dict[str, Any] | None = None
    outcome: str | None = None


EnergyScope = Literal["sources", "idle", "request", "run", "level"]
"""What an energy record covers: the machine's sources (once, at the start), the idle power
(preflight's window), one request, a bench run, or one sweep level."""


@dataclass(frozen=True, slots=True)
class EnergyRecord(Record):
    """Energy figures from one source (`type: "energy"`; runners/energy.py writes them).

    scope: see EnergyScope. source: the figure's source ("rapl:cpu", the CPU packages summed;
    "nvml:gpu0", "battery:BAT0", …; "" for scope "sources"); covers: what its joules include.
    "sources": line (the `describe_sources` line: "energy: …" or "energy: n/a — …"),
    sources (each SourceInfo.to_dict()), readable (any source readable).
    "idle": duration_s of the window and mean_power_w, W, in it (idle_power_w the same).
    "request" (request_id), "run", "level" (level): energy_j (J: send → last chunk for a
    request; for a run the measured requests' windows summed, duration_s their seconds; for
    a level its first send → last chunk), prefill_j (send → first
    token) and decode_j (first token → last chunk) for a request; prompt_tokens and
    output_tokens (the server's counts); output_j_per_token (decode J / output tokens for a
    request; all-in energy J / output tokens for a run or level), prompt_j_per_token
    (prefill J / prompt tokens); idle_power_w subtracted for the *_above_idle figures.
    coarse: the source cannot resolve this window (reason says which rule): aggregate.
    integrated: joules from integrated power samples rather than a counter.
    """

    TYPE: ClassVar[str] = "energy"
    scope: EnergyScope
    source: str = ""
    covers: str = ""
    line: str | None = None
    sources: tuple[dict[str, Any], ...] = ()
    readable: bool = True
    request_id: int | None = None
    level: int | None = None
    duration_s: float | None = None
    energy_j: float | None = None
    mean_power_w: float | None = None
    prefill_j: float | None = None
    decode_j: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    requests: int | None = None
    output_j_per_token: float | None = None
    prompt_j_per_token: float | None = None
    idle_power_w: float | None = None
    energy_above_idle_j: float | None = None
    output_above_idle_j_per_token: float | None = None
    prompt_above_idle_j_per_token: float | None = None
    coarse: bool = False
    reason: str | None = None
    integrated: bool = False


@dataclass(frozen=True, slots=True)
class UnknownRecord:
    """A record of a type this llmtop does not know (a newer writer's), kept as written."""

    kind: str
    body: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The record as it was written."""
        return {"type": self.kind, **self.body}


RECORD_TYPES: dict[str, type[Record]] = {
    cls.TYPE: cls
    for cls in (Header, RequestRecord, ProbeRecord, CanaryRecord, CalibrationRecord,
                EnvironmentRecord, PreflightRecord, SummaryRecord, InterruptedRecord, EndRecord,
                LevelRecord, ProbeSourceRecord, BenchMarkRecord, EnergyRecord)
}
"""Every record type of the session log, by its `type` field."""

AnyRecord = Record | UnknownRecord


def decode(data: str | bytes | Mapping[str, Any], decoded: Any = None) -> AnyRecord:
    """Any JSON record into its type (UnknownRecord for an unknown `type`). Raises RecordError
    for a record that is not a JSON object or whose fields do not match its type; for a
    record other than the header that holds a number no measurement can be (`check_numbers`);
    and for a request record whose figures contradict each other or time itself
    (`check_request`). decoded: `data` (a line) already decoded by `loads`, when the caller
    has it (a reader that looked at the line first decodes it once, not twice)."""
    text = data if isinstance(data, str | bytes) else None
    if decoded is not None:
        obj = decoded
    else:
        obj = loads(data) if isinstance(data, str | bytes) else dict(data)
    if not isinstance(obj, dict):
        raise RecordError("?", "", "not a JSON object")
    kind = str(obj.get("type", ""))
    cls = RECORD_TYPES.get(kind)
    if cls is None:
        return UnknownRecord(kind, {k: v for k, v in obj.items() if k != "type"})
    if cls is not Header:  # the header describes; a bad figure in it loses no measurement
        check_numbers(kind, obj, text)
    record = cls.from_json(text if text is not None else obj)
    if isinstance(record, RequestRecord):
        check_request(record)
    return record


_FAST_PREFIX = '{"type": "'  # how every record llmtop writes begins (json_line's spacing)


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


def fast_decode(line: str, chunks: bool = True) -> AnyRecord | None:
    """The record of a line as llmtop writes it, validated by pydantic straight from the text
    (one parse, in Rust), or None when this path cannot tell: the line does not begin with
    its type, its type is not a closed record's (the header and open records keep their
    whole JSON and take `decode`), it may hold a refused number (`suspect`) or a lone
    surrogate, or it does not validate. A None costs nothing but the tries: the caller then
    decodes the line the long way, which names whatever is wrong. Same checks as `decode`.
    chunks: False reads a request's `chunks` as empty (`without_chunks`)."""
    if not line.startswith(_FAST_PREFIX):
        return None
    kind = line[len(_FAST_PREFIX):line.find('"', len(_FAST_PREFIX))]
    cls = RECORD_TYPES.get(kind)
    if cls is None or cls is Header or issubclass(cls, OpenRecord):
        return None
    if suspect(line) or may_hold_surrogate(line):
        return None
    try:
        if cls is RequestRecord:
            text = line if chunks else without_chunks(line)
            record: AnyRecord = _adapter(RequestLine).validate_json(text, strict=True).record()
        else:
            record = _adapter(cls).validate_json(line, strict=True)
    except ValidationError:
        return None
    if isinstance(record, RequestRecord) and _request_problem(record) is not None:
        return None
    return record


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


def _request_problem(record: RequestRecord) -> tuple[str, str] | None:
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
    found = _request_problem(record)
    if found is not None:
        raise RecordError(RequestRecord.TYPE, *found)


@dataclass(frozen=True)
class RunLog:
    """A whole session log read back (log.read_log).

    requests / probes / canaries: the typed records in file order. records: every other
    record, typed, in file order.
    warnings: one line per record that was skipped (torn, unreadable, or with a field of the
    wrong type), "line N: …".
    """

    header: Header
    requests: tuple[RequestRecord, ...] = ()
    probes: tuple[ProbeRecord, ...] = ()
    records: tuple[AnyRecord, ...] = ()
    warnings: tuple[str, ...] = ()
    canaries: tuple[CanaryRecord, ...] = ()

    @classmethod
    def of(cls, header: Header, records: Iterable[AnyRecord],
           warnings: Iterable[str] = ()) -> RunLog:
        """A log from its header and its other records in file order (sorted into requests,
        probes, canaries and the rest)."""
        kinds: dict[type, list[Any]] = {RequestRecord: [], ProbeRecord: [], CanaryRecord: []}
        others: list[AnyRecord] = []
        for record in records:
            kinds.get(type(record), others).append(record)
        return cls(header, tuple(kinds[RequestRecord]), tuple(kinds[ProbeRecord]),
                   tuple(others), tuple(warnings), tuple(kinds[CanaryRecord]))

    @classmethod
    def from_json(cls, header: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> RunLog:
        """A log from JSON objects (a header, then its records), each through `decode`; a
        record that fails is skipped with a warning, as `read_log` does."""
        typed: list[AnyRecord] = []
        warnings: list[str] = []
        for number, record in enumerate(records, start=2):
            try:
                typed.append(decode(record))
            except RecordError as exc:
                warnings.append(f"record {number}: {exc}; skipped")
        return cls.of(Header.from_json(header), typed, warnings)

    def of_type(self, kind: type[R]) -> Iterator[R]:
        """The records of one type among `records`, in file order (requests, probes and
        canaries are `requests`, `probes`, `canaries`)."""
        return (r for r in self.records if isinstance(r, kind))

    def first(self, kind: type[R]) -> R | None:
        """The first record of a type among `records`, None when there is none."""
        return next(self.of_type(kind), None)

    def environment(self, phase: str) -> EnvironmentRecord | None:
        """The engine environment record of a phase ("start" / "end"), None when absent."""
        return next((e for e in self.of_type(EnvironmentRecord) if e.phase == phase), None)

    @property
    def calibration(self) -> CalibrationRecord | None:
        """The run's calibration, None when not a bench or sweep."""
        return self.first(CalibrationRecord)

    @property
    def preflight(self) -> PreflightRecord | None:
        """The run's preflight verdict, None when none was taken."""
        return self.first(PreflightRecord)

    @property
    def summary(self) -> SummaryRecord | None:
        """A bench's closing summary, None when it has none."""
        return self.first(SummaryRecord)

    @property
    def energy(self) -> tuple[EnergyRecord, ...]:
        """The run's energy records in file order."""
        return tuple(self.of_type(EnergyRecord))

    @property
    def interrupted(self) -> bool:
        """True when the run logged an interruption (a cancelled bench)."""
        return self.first(InterruptedRecord) is not None

    @property
    def ended_at(self) -> str | None:
        """When the log was closed cleanly (wall clock), None when it was not."""
        end = self.first(EndRecord)
        return None if end is None else end.ended_at
