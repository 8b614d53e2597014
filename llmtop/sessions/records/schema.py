"""The session log's schema: every record type, written and read through the same types.

This module owns the format (FORMAT_VERSION); which field appeared when, and the older shapes
still read, are docs/reference/session-log.md's "Version history". Each record type is a frozen
dataclass with a `TYPE` (the record's `type` field), `to_json()` (the JSON object written as
one line; log.SessionLog.write takes the record) and `from_json()` (the typed record read
back; log.read_log returns them). Analysis, attribution and reports read attributes
(`r.metrics.ttft_ms`, `p.verdict.quiet`) instead of walking dicts, so a misspelt field fails
in mypy rather than reading as "n/a".

`from_json` checks every field a type declares against its type with pydantic in strict JSON
mode (base.parse: an int where a string belongs, "5" where a number belongs, an unknown
status are errors; an int is a valid float). A declared field missing from the JSON takes its
default (None, empty, or the value the field means when unsaid), so a log that lacks a field
reads; fields a type does not declare are ignored, so a newer writer's log reads too.

The request record has a module of its own (request.py: typed in parts, written flat); the
record bases and the checks every record goes through are base.py's.

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

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import ValidationError

from llmtop.safetext import may_hold_surrogate
from llmtop.sessions.measure.config import BenchConfig, LoadConfig, WatchSetup, config_json
from llmtop.sessions.measure.stats import DRIFT_THRESHOLD_PCT
from llmtop.sessions.records.base import (
    OpenRecord,
    Record,
    RecordError,
    adapter,
    check_numbers,
    loads,
    suspect,
)
from llmtop.sessions.records.request import (
    RequestLine,
    RequestRecord,
    check_request,
    request_problem,
    without_chunks,
)

R = TypeVar("R", bound="Record")

FORMAT_VERSION = 1
# Bump it when a reader of the previous version would misread a new log; a field that older
# readers ignore needs no bump, and readers default a missing one, so every version-1 log
# reads. What each version added: docs/reference/session-log.md, "Version history".
SUPPORTED_FORMATS = (1,)


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
    ("nvml", "sysfs", "apple") / card: which GPU and who read it; thermal_state: the machine's
    thermal pressure ("nominal", "fair", "serious", "critical") and rails_w: W per SoC rail
    ("cpu", "gpu", "ane", "dram"), both Apple Silicon's; None: not read."""

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
    thermal_state: str | None = None
    rails_w: dict[str, float] | None = None


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
    log): phase "start" (with its configuration) or "end" (with its outcome), and the
    bench's own log."""

    TYPE: ClassVar[str] = "bench"
    phase: str
    log: str
    bench: BenchConfig | None = None
    outcome: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record's JSON object, its config written as the header writes one
        (config.config_json)."""
        data = Record.to_json(self)
        if data.get("bench") is not None:
            data["bench"] = config_json(data["bench"])
        return data


@dataclass(frozen=True, slots=True)
class EngineStateRecord(OpenRecord):
    """The engine's own figures, read live (`type: "engine_state"`; an open record whose body
    is engines.live_state.EngineState.to_dict plus `request_id`), written by the TUI's engine
    panel when a reading differs from the one before.

    kind: "llama-server", "vllm" or "ollama"; url: the engine's root. processing / waiting:
    requests it runs / queues; kv_pct: KV cache in use, %; tokens_per_s: tokens it generated
    per second since the reading before; decode_tok_s: its own decode rate over requests
    that finished since then. request_id: the request streaming in the TUI as it was read
    (None: between requests). t_ns: perf_counter_ns of the reading. None: not published.
    """

    kind: str
    url: str = ""
    t_ns: int | None = None
    wall_time: str | None = None
    processing: float | None = None
    waiting: float | None = None
    kv_pct: float | None = None
    tokens_per_s: float | None = None
    decode_tok_s: float | None = None
    request_id: int | None = None
    body: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    TYPE: ClassVar[str] = "engine_state"


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
                LevelRecord, ProbeSourceRecord, BenchMarkRecord, EnergyRecord,
                EngineStateRecord)
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
            record: AnyRecord = adapter(RequestLine).validate_json(text, strict=True).record()
        else:
            record = adapter(cls).validate_json(line, strict=True)
    except ValidationError:
        return None
    if isinstance(record, RequestRecord) and request_problem(record) is not None:
        return None
    return record


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
