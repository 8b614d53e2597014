"""A session log read back as typed, frozen records (log.py writes them as JSON lines).

Analysis, attribution and reports read attributes (`r.metrics.ttft_ms`, `p.verdict.quiet`)
instead of walking dicts, so a misspelt field fails in mypy rather than reading as "n/a".

Each record type has `from_json`, which checks every field it declares against its type with
pydantic in strict JSON mode (an int where a string belongs, "5" where a number belongs, an
unknown status are errors; an int is a valid float). Fields a record does not declare are
ignored, and declared fields missing from the JSON take their defaults, so logs written by
older llmtop versions (fewer fields) still read. `read_log` skips a record that fails, with a
warning naming the line and the field, and keeps going.

Only what llmtop reads back is typed. A probe record keeps the processes, GPU and verdict
parts that attribution and reports use; the other record types (calibration, environment,
preflight, summary, interrupted, end) stay JSON objects in `RunLog.records`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeVar

from pydantic import TypeAdapter, ValidationError

from llmtop.engines.events import FailureKind, ServerStats, Status
from llmtop.sessions.stats import DRIFT_THRESHOLD_PCT
from llmtop.sessions.timeline import RequestMetrics

T = TypeVar("T")

Phase = Literal["load", "warmup", "measure"]
"""A bench request's phase: the run's first request (pays the model load), a warm-up, or a
measured request. Requests of an interactive session have no phase."""


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


def parse(cls: type[T], kind: str, data: str | bytes | Mapping[str, Any]) -> T:
    """Validate one JSON record (a line, or an object already decoded) into `cls`.

    Raises RecordError naming the first bad field. A decoded object is re-encoded so both
    paths validate JSON types (a JSON array is a valid tuple; a Python list would not be in
    strict mode).
    """
    text = data if isinstance(data, str | bytes) else json.dumps(data, default=str)
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


class Chunk(NamedTuple):
    """One streamed chunk as logged: `[offset_ns, content, thinking]`, the offset being ns
    from the request's send stamp (client clock)."""

    offset_ns: int
    content: str
    thinking: str


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
class CanaryRecord:
    """One machine-speed canary run (`type: "canary"`; probes.canary), taken between requests.

    before_request: the id of the request that ran next (None: not tied to a request).
    cpu_ms / mem_ms / simd_ms: the median of `repeats` timings of each part (simd_ms None in
    logs written before that part existed); threads: the simd part's threads. t_ns:
    perf_counter_ns when it began.
    """

    cpu_ms: float
    mem_ms: float
    simd_ms: float | None = None
    before_request: int | None = None
    repeats: int = 1
    threads: int | None = None
    t_ns: int | None = None

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> CanaryRecord:
        """Validate a canary record (see `parse`); raises RecordError."""
        return parse(cls, "canary", data)

    @property
    def total_ms(self) -> float:
        """cpu_ms + mem_ms + simd_ms (0 when absent)."""
        return self.cpu_ms + self.mem_ms + (self.simd_ms or 0.0)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as logged (`type: "request"`; log.request_record writes it).

    id: the session's request number (from 1). status: how the stream ended. error /
    error_kind: the failure's text and kind, None when it did not fail. stats: the server's
    own statistics (Ollama names, ns, tokens), None when it sent none. metrics: derived
    (timeline.RequestMetrics: ms, tokens/s). chunks: arrival offsets and text.
    Bench fields (None in an interactive session): phase; index, the position within its
    prompt size (0-based, warm-ups first); prompt_tokens_target and prompt_words, the
    calibrated prompt size; path ("direct" / "relay") and pair, in a --compare-relay run.
    client_prep_ms: the client's own time from asking for the request until its body was on
    the socket (ms; outside TTFT since the send stamp is that socket write); None in older
    logs and from engines that cannot stamp the write. machine: the machine's speed readings
    over a bench request (None in older logs).
    """

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
    machine: MachineRecord | None = None

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> RequestRecord:
        """Validate a request record (see `parse`); raises RecordError."""
        return parse(cls, "request", data)

    @property
    def measured(self) -> bool:
        """A measured request: phase "measure", or no phase (an interactive session)."""
        return self.phase in (None, "measure")

    def metric(self, name: str) -> float | None:
        """One derived metric by its field name in timeline.RequestMetrics ("ttft_ms"); None
        when n/a. Raises AttributeError for a name that is not a metric."""
        value = getattr(self.metrics, name)
        return float(value) if isinstance(value, int | float) else None

    @property
    def position(self) -> int:
        """Its index within its prompt size, else (interactive) its id."""
        return self.id if self.index is None else self.index


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
    """One GPU in a probe sample (NVML): utilisation %, memory used and total in bytes."""

    name: str | None = None
    util_percent: float | None = None
    memory_used: int | None = None
    memory_total: int | None = None


@dataclass(frozen=True, slots=True)
class GpuRecord:
    """The GPU part of a probe sample; `reason` says why there is no reading."""

    available: bool | None = None
    reason: str | None = None
    devices: tuple[GpuDeviceRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class ProbeVerdict:
    """The probe verdict of a sample: quiet is False when any finding was WARN or FAIL."""

    quiet: bool = True


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
class ProbeRecord:
    """One probe sample as logged (`type: "probe"`; probes.sampler.ProbeSample.to_dict).

    request_id: the request it overlapped (None between requests). t_ns: perf_counter_ns
    when sampling began. processes / gpu / verdict: None when that probe failed (or, for an
    older log, was not written). cost_ms: the sampling thread's CPU time, ms. source: where
    it was taken (None in logs written before llmtop recorded it: this machine).
    """

    request_id: int | None = None
    t_ns: int | None = None
    wall_time: str | None = None
    processes: ProcessesRecord | None = None
    gpu: GpuRecord | None = None
    verdict: ProbeVerdict | None = None
    cost_ms: float | None = None
    source: ProbeSource | None = None

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> ProbeRecord:
        """Validate a probe record (see `parse`); raises RecordError."""
        return parse(cls, "probe", data)

    @property
    def noisy(self) -> bool:
        """True when the sample's verdict was NOISY (False when it had none)."""
        return self.verdict is not None and not self.verdict.quiet


@dataclass(frozen=True, slots=True)
class Header:
    """A session log's first record (`type: "header"`).

    format: the session-log format (log.FORMAT_VERSION). kind: "session" or "bench".
    engine / engine_version / host / model: what was measured; engine_config: the embedded
    engine's llama.cpp configuration (engines/llama_config.Choice.to_dict), else None;
    via: "direct" or "relay",
    upstream: the engine behind the relay; proxy: the HTTP proxy requests to the engine went
    through (None: direct; never for a loopback engine). model_details: /api/show's summary.
    options: the
    Ollama options sent with every request. environment: the machine
    (sessions.environment). bench: a bench's BenchConfig.to_dict(), else None. machine:
    only in bench logs written before the machine record moved into `environment` (it held
    the GPU and power there); read both through `machine_environment`.
    """

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
    environment: dict[str, Any] = field(default_factory=dict)
    bench: dict[str, Any] | None = None
    machine: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> Header:
        """Validate a header record (see `parse`); raises RecordError."""
        return parse(cls, "header", data)

    @property
    def machine_environment(self) -> dict[str, Any]:
        """The machine (OS, CPU, RAM, GPU, power), from either place a log keeps it."""
        return {**self.environment, **(self.machine or {})}

    @property
    def drift_threshold_pct(self) -> float:
        """A bench's drift threshold, % (stats.DRIFT_THRESHOLD_PCT when not a bench)."""
        value = (self.bench or {}).get("drift_threshold_pct")
        return float(value) if isinstance(value, int | float) else DRIFT_THRESHOLD_PCT


@dataclass(frozen=True)
class RunLog:
    """A whole session log read back (log.read_log).

    requests / probes / canaries: the typed records in file order (no canaries in logs written
    before llmtop had the canary). records: every other record as its
    JSON object, in file order. warnings: one line per record that was skipped (torn,
    unreadable, or with a field of the wrong type), "line N: …".
    """

    header: Header
    requests: tuple[RequestRecord, ...] = ()
    probes: tuple[ProbeRecord, ...] = ()
    records: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    canaries: tuple[CanaryRecord, ...] = ()

    def of_type(self, kind: str) -> Iterator[dict[str, Any]]:
        """The untyped records of one type, in file order. Raises ValueError for "request"
        and "probe": those are `requests` and `probes`."""
        if kind in ("request", "probe", "header", "canary"):
            raise ValueError(f"{kind} records are typed: use RunLog.{kind}s or .header")
        return (r for r in self.records if r.get("type") == kind)

    def first(self, kind: str) -> dict[str, Any] | None:
        """The first untyped record of a type, None when there is none."""
        return next(self.of_type(kind), None)

    def environment(self, phase: str) -> dict[str, Any]:
        """The engine environment record of a phase ("start" / "end"), {} when absent."""
        return next((e for e in self.of_type("environment") if e.get("phase") == phase), {})

    @property
    def interrupted(self) -> bool:
        """True when the run logged an interruption (a cancelled bench)."""
        return self.first("interrupted") is not None

    @property
    def ended_at(self) -> str | None:
        """When the log was closed cleanly (wall clock), None when it was not."""
        end = self.first("end")
        return None if end is None else end.get("ended_at")
