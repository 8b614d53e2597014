"""Energy alongside a run: the sources found once, sampled with the probes and at
each request's edges, and turned into the session log's "energy" records.

`EnergyMeter` owns one `EnergyReader` over this machine's readable sources (none: every
method is a no-op that returns no records, and `line` says why). The probe sampler samples
it on its beat (`ProbeSampler(energy=meter.reader)`); a runner adds a sample just before a
request is sent, at its first token and at its last chunk (`hooks`), so the windows
send → first token → last chunk each have a reading at (or within microseconds of) both
ends, and the counter is interpolated only across those microseconds. The figures
(probes/energy/window.py): per request total, prefill and decode J, J per output token
(decode J / output tokens) and per prompt token (prefill J / prompt tokens); per run or load
level the all-in J per output token; idle power from preflight's window, subtracted for the
above-idle figures.

An edge read is taken where the stream is unless reading costs more than `EDGE_INLINE_MAX_NS`
(the reader's own measure of its last sample): then it runs on the meter's one worker thread,
stamped there at the midpoint of its own read, so the stream's next chunk is not stamped late
by it. Measured on an H200 (bench/gpu_check.py): NVML's energy counter cost 3.0 ms of CPU a
read, and it moves every ~100 ms; a RAPL read costs tens of µs and stays inline. Every figure
waits for the edge reads still pending (`settle`).

Energy is read on this machine only: when the engine runs elsewhere the meter reads nothing
and says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from llmtop.engines.events import StreamEvent
from llmtop.probes.energy import (
    Discovery,
    EnergyReader,
    RequestEnergy,
    RunEnergy,
    describe_sources,
    discover_sources,
    run_from_window,
)
from llmtop.probes.energy.process import engine_source
from llmtop.probes.engine_identity import is_local_host
from llmtop.sessions.measure.request import RequestResult
from llmtop.sessions.records.schema import EnergyRecord

log = logging.getLogger(__name__)

# An edge read costing more than this (ns of the reader's last sample) leaves the stream for
# the meter's worker thread: 250 µs is a tenth of a fast decode's ITL (~2.5 ms at 400 tok/s)
EDGE_INLINE_MAX_NS = 250_000


def no_sources() -> Discovery:
    """A discovery that found nothing (for a meter that must not read this machine)."""
    return Discovery(())


def remote_line(host: str) -> str:
    """The energy line when the engine is not on this machine."""
    return (
        f"energy: n/a — the engine at {host} runs on another machine, and energy is "
        "read on this machine only"
    )


def request_tokens(result: RequestResult) -> tuple[int, int]:
    """(prompt tokens, output tokens) of a request: the server's counts (Ollama's
    prompt_eval_count, eval_count); without them, 0 prompt tokens and one output token per
    text chunk."""
    stats = result.stats
    chunks = sum(1 for e in result.events if e.has_text)
    if stats is None:
        return 0, chunks
    prompt = stats.prompt_eval_count or 0
    output = stats.eval_count if stats.eval_count is not None else chunks
    return prompt, output


def request_stamps(result: RequestResult) -> tuple[int, int | None, int] | None:
    """(send, first token, last chunk) perf_counter ns of a request; None without events."""
    if not result.events:
        return None
    first = next((e.t_ns for e in result.events if e.has_text), None)
    return result.sent_ns, first, result.events[-1].t_ns


class EnergyMeter:
    """This machine's energy sources for one run.

    discovery: the sources (default `discover_sources()`: tests pass fake trees).
    remote_host: the engine's host when it is not this machine (then nothing is looked for
    or read, and `line` says why).
    clock: the reader's stamp function (default time.perf_counter_ns).
    inline_max_ns: the edge reads' threshold (default `EDGE_INLINE_MAX_NS`; a test passes -1
    to send every edge read to the worker).
    engine_pids: the measured engine's pids now (`Connection.engine_pids`): on macOS its
    processes' own energy is one more figure ("apple:engine", probes/energy/process.py);
    elsewhere nothing is read.
    `line`: the one line every command prints once ("energy: …" or "energy: n/a — …").
    """

    def __init__(
        self,
        discovery: Discovery | None = None,
        *,
        remote_host: str | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        inline_max_ns: int = EDGE_INLINE_MAX_NS,
        engine_pids: Callable[[], Iterable[int]] | None = None,
    ) -> None:
        if discovery is not None:
            found = discovery
        else:  # an engine elsewhere: this machine's sources are not looked for
            found = discover_sources() if remote_host is None else no_sources()
        if engine_pids is not None and remote_host is None:
            found = with_engine_source(found, engine_pids)
        self.summary = describe_sources(found)
        self.line = self.summary.line if remote_host is None else remote_line(remote_host)
        readable = found.readable if remote_host is None else ()
        self.reader: EnergyReader | None = EnergyReader(readable, clock=clock) if readable else None
        self.idle_w: dict[str, float | None] = {}
        self._clock = clock
        self._inline_max_ns = inline_max_ns
        self._worker: ThreadPoolExecutor | None = None
        self._pending: list[Future[Any]] = []

    @property
    def active(self) -> bool:
        """True when some source is read."""
        return self.reader is not None

    def sources_record(self) -> EnergyRecord:
        """The "sources" record: the line and every source's description."""
        return EnergyRecord(
            scope="sources",
            line=self.line,
            sources=tuple(i.to_dict() for i in self.summary.sources),
            readable=self.active,
        )

    def sample(self, edge: str = "start") -> int:
        """Read every source now (a window's edge) and return a stamp for that edge,
        perf_counter ns: for "start" the latest of the new samples' stamps (every source has
        a sample at or before it), for "end" the earliest (one at or after it). Without a
        source, the clock now."""
        if self.reader is None:
            return self._clock()
        self.settle()
        stamps = [s.t_ns for s in self.reader.sample().values()]
        return max(stamps) if edge == "start" else min(stamps)

    def edge(self) -> None:
        """A request's edge reading: here when the last read was cheap, else on the worker
        thread (returns at once; `settle` waits for it)."""
        reader = self.reader
        if reader is None:
            return
        if reader.last_cost_ns <= self._inline_max_ns:
            reader.sample()
            return
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="llmtop-energy")
        self._pending.append(self._worker.submit(reader.sample))

    def settle(self) -> None:
        """Wait for the edge readings still on the worker thread (none: returns at once)."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def hooks(
        self, on_event: Callable[[StreamEvent], None] | None
    ) -> tuple[Callable[[Any], None] | None, Callable[[StreamEvent], None] | None]:
        """(on_start, on_event) for `SessionRecorder.measure`: a sample just before the
        request starts, one at its first token (the prefill/decode split) and one at its
        done chunk (the last), each then `on_event` as given; take one more with
        `sample("end")` after it, for a stream that ended without a done chunk."""
        if self.reader is None:
            return None, on_event
        seen = False

        def start(_collector: Any) -> None:
            self.edge()

        def hook(event: StreamEvent) -> None:
            nonlocal seen
            if event.done or (not seen and event.has_text):
                self.edge()
            seen = seen or event.has_text
            if on_event is not None:
                on_event(event)

        return start, hook

    def measure_idle(self, t0_ns: int, t1_ns: int) -> list[EnergyRecord]:
        """Idle power of each figure over [t0_ns, t1_ns] (a quiet window before the run:
        preflight's), kept for the above-idle figures; one "idle" record each."""
        self.settle()
        if self.reader is None:
            return []
        out = []
        for label, names in self.reader.groups():
            window = self.reader.group_window(label, names, t0_ns, t1_ns)
            self.idle_w[label] = window.mean_power_w
            out.append(
                EnergyRecord(
                    scope="idle",
                    source=label,
                    covers=self.reader.covers(label),
                    duration_s=window.duration_s,
                    energy_j=window.joules,
                    mean_power_w=window.mean_power_w,
                    idle_power_w=window.mean_power_w,
                    coarse=window.coarse,
                    reason=window.reason,
                    integrated=window.integrated,
                )
            )
        return out

    def request(self, result: RequestResult) -> list[EnergyRecord]:
        """The "request" records of one finished request (one per figure); none without a
        source, without events, or with stamps out of order (logged as a warning). Never
        raises."""
        stamps = request_stamps(result)
        self.settle()
        if self.reader is None or stamps is None:
            return []
        prompt, output = request_tokens(result)
        out = []
        for label, names in self.reader.groups():
            try:
                figures = self.reader.group_request(
                    label, names, *stamps, prompt, output, self.idle_w.get(label)
                )
            except ValueError as exc:  # stamps out of order: no figure, never a failed request
                log.warning("request %d: no energy figure: %s", result.request_id, exc)
                return []
            out.append(request_record(figures, result.request_id, self.reader.covers(label)))
        return out

    def span(
        self,
        scope: str,
        t0_ns: int,
        t1_ns: int,
        results: Iterable[RequestResult],
        level: int | None = None,
    ) -> list[EnergyRecord]:
        """The "run" or "level" records over [t0_ns, t1_ns]: all-in J per output token of
        `results` (the requests that ran in it)."""
        self.settle()
        if self.reader is None:
            return []
        done = list(results)
        prompt = sum(request_tokens(r)[0] for r in done)
        output = sum(request_tokens(r)[1] for r in done)
        out = []
        for label, names in self.reader.groups():
            window = self.reader.group_window(label, names, t0_ns, t1_ns)
            figures = run_from_window(
                label, window, prompt, output, len(done), self.idle_w.get(label)
            )
            out.append(span_record(scope, figures, self.reader.covers(label), level))
        return out

    def in_requests(self, results: Iterable[RequestResult]) -> list[EnergyRecord]:
        """The bench's "run" records: the joules of every request's own window (send → last
        chunk) summed, over the seconds those windows last and the output tokens of
        `results`: all-in J per output token (prefill included) without what ran between
        the requests (the machine-speed canary, the log). For a source too coarse for one
        request the sum is still the figure to read: its edge errors are a smaller share of
        a whole run's joules; it is coarse when the run's span is (the source's coarse rule
        over first send → last chunk)."""
        self.settle()
        if self.reader is None:
            return []
        done = [(r, s) for r in results if (s := request_stamps(r)) is not None]
        if not done:
            return []
        prompt = sum(request_tokens(r)[0] for r, _ in done)
        output = sum(request_tokens(r)[1] for r, _ in done)
        seconds = sum((s[2] - s[0]) / 1e9 for _, s in done)
        span = (min(s[0] for _, s in done), max(s[2] for _, s in done))
        out = []
        for label, names in self.reader.groups():
            parts = [self.reader.group_window(label, names, s[0], s[2]) for _, s in done]
            whole = self.reader.group_window(label, names, *span)
            missing = next((w.reason for w in parts if w.joules is None), None)
            joules = None if missing else sum(w.joules or 0.0 for w in parts)
            idle = self.idle_w.get(label)
            above = None if joules is None or idle is None else joules - idle * seconds
            out.append(
                EnergyRecord(
                    scope="run",
                    source=label,
                    covers=self.reader.covers(label),
                    duration_s=seconds,
                    energy_j=joules,
                    mean_power_w=None if joules is None or seconds <= 0 else joules / seconds,
                    prompt_tokens=prompt,
                    output_tokens=output,
                    requests=len(done),
                    output_j_per_token=None if joules is None or not output else joules / output,
                    idle_power_w=idle,
                    energy_above_idle_j=above,
                    output_above_idle_j_per_token=None
                    if above is None or not output
                    else above / output,
                    coarse=whole.coarse,
                    reason=missing or whole.reason,
                    integrated=whole.integrated,
                )
            )
        return out


def request_record(e: RequestEnergy, request_id: int, covers: str) -> EnergyRecord:
    """A RequestEnergy as the log's "request" energy record."""
    reasons = [w.reason for w in (e.total, e.prefill, e.decode) if w is not None and w.reason]
    return EnergyRecord(
        scope="request",
        source=e.source,
        covers=covers,
        request_id=request_id,
        duration_s=e.total.duration_s,
        energy_j=e.total.joules,
        mean_power_w=e.total.mean_power_w,
        prefill_j=e.prefill.joules if e.prefill else None,
        decode_j=e.decode.joules if e.decode else None,
        prompt_tokens=e.prompt_tokens,
        output_tokens=e.output_tokens,
        output_j_per_token=e.j_per_output_token,
        prompt_j_per_token=e.j_per_prompt_token,
        idle_power_w=e.idle_power_w,
        energy_above_idle_j=e.total_above_idle_j,
        output_above_idle_j_per_token=e.j_per_output_token_above_idle,
        prompt_above_idle_j_per_token=e.j_per_prompt_token_above_idle,
        coarse=e.coarse,
        reason="; ".join(dict.fromkeys(reasons)) or None,
        integrated=e.total.integrated,
    )


def span_record(scope: str, e: RunEnergy, covers: str, level: int | None = None) -> EnergyRecord:
    """A RunEnergy as the log's "run" or "level" energy record."""
    fields: dict[str, Any] = {"scope": scope, "level": level}
    return EnergyRecord(
        **fields,
        source=e.source,
        covers=covers,
        duration_s=e.window.duration_s,
        energy_j=e.window.joules,
        mean_power_w=e.window.mean_power_w,
        prompt_tokens=e.prompt_tokens,
        output_tokens=e.output_tokens,
        requests=e.requests,
        output_j_per_token=e.j_per_output_token,
        idle_power_w=e.idle_power_w,
        energy_above_idle_j=e.above_idle_j,
        output_above_idle_j_per_token=e.j_per_output_token_above_idle,
        coarse=e.window.coarse,
        reason=e.window.reason,
        integrated=e.window.integrated,
    )


def local_meter(engine_host: str, agent: object | None = None,
                engine_pids: Callable[[], Iterable[int]] | None = None) -> EnergyMeter:
    """The meter a command uses: this machine's sources when the engine runs here and the
    probes watch this machine, else none (the line says the engine is elsewhere);
    engine_pids: as EnergyMeter takes them (the engine's own energy on macOS)."""
    here = agent is None and is_local_host(engine_host)
    return EnergyMeter(remote_host=None if here else engine_host, engine_pids=engine_pids)


def with_engine_source(found: Discovery,
                       engine_pids: Callable[[], Iterable[int]]) -> Discovery:
    """`found` and, on macOS, the engine's processes' energy source (probes/energy/
    process.py); `found` unchanged elsewhere (libproc is never loaded there)."""
    source, _why = engine_source(engine_pids)
    if source is None:
        return found
    return Discovery((*found.sources, source), found.absent)


def request_line(e: EnergyRecord) -> str:
    """One request's energy in words: "rapl:cpu 0.267 J/output token (decode 2.4 J),
    0.075 J/prompt token (prefill 3 J), 5.4 J in all", with "(coarse: …)" when so."""

    def j(value: float | None, unit: str = "J") -> str:
        return "n/a" if value is None else f"{value:.3g} {unit}"

    text = (
        f"{e.source} {j(e.output_j_per_token, 'J/output token')} (decode {j(e.decode_j)}), "
        f"{j(e.prompt_j_per_token, 'J/prompt token')} (prefill {j(e.prefill_j)}), "
        f"{j(e.energy_j)} in all"
    )
    return text + (f" (coarse: {e.reason})" if e.coarse else "")
