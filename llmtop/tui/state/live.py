"""What the screen shows of the request being streamed (pure: no Textual, no clocks).

`LiveRequest.add` is the stream's `on_event` callback: it only appends to buffers and sets
`dirty`; the app's render timer (≤ 20 Hz) reads the buffers and clears `dirty`. Every number
here comes from the engine's own arrival stamps (`StreamEvent.t_ns`) and the collector's send
stamp, with the same formulas as `llmtop.sessions.measure.timeline` — the UI never reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmtop.engines.events import Failure, PromptProgress, Status, StreamEvent
from llmtop.safetext import visible
from llmtop.sessions.measure.timeline import NS_PER_MS, live_chunk_rate
from llmtop.tui.state.prefill import PrefillExpectation, progress_text, waiting_text

if TYPE_CHECKING:  # the records (pydantic) load after the first frame, the request's
    # collector with the connection
    from llmtop.sessions.measure.request import RequestCollector, RequestResult
    from llmtop.sessions.records.schema import EnergyRecord, FindingRecord

THINKING = "thinking"
CONTENT = "content"


@dataclass
class LiveRequest:
    """One request as it streams.

    parts: the text in arrival order as [kind, [pieces…]] runs, kind THINKING or CONTENT,
    each piece as shown (safetext.visible: its control characters as escapes).
    itl_ms: gaps between successive text-carrying chunks, ms (one per chunk after the first).
    result: set when the request ended (done, failed or cancelled).
    dirty: the text changed since it was last drawn; numbers_dirty: the live numbers did;
    urgent: a number the user waits for changed (the first chunk: TTFT; the end: status), so
    it is drawn on the next frame rather than at the slower numbers rate.
    noisy: the first finding of a NOISY probe sample taken while it streamed (see
    `llmtop.tui.state.noise`); None when every sample in its span was QUIET (or none was taken).
    energy: its energy records once it ended (runners/energy.py; empty without a source).
    offload: the `offload-mismatch` finding of the request once its end sample came
    (analysis/offload.py: the engine said the model was all on the GPU, the machine showed
    otherwise); None when the claim and the machine agreed or could not be set side by side.
    expected: the saved curve's prefill prediction for this prompt (None: no curve);
    waited_ms: how long it has waited for its first chunk, set by the app's clock while it
    waits (None before the send). progress: the server's last prompt-processing progress
    (llama-server's `prompt_progress`), None when it sends none.
    """

    collector: RequestCollector
    parts: list[tuple[str, list[str]]] = field(default_factory=list)
    first_text_ns: int | None = None
    last_text_ns: int | None = None
    chunks: int = 0
    itl_ms: list[float] = field(default_factory=list)
    failure: Failure | None = None
    result: RequestResult | None = None
    dirty: bool = True
    numbers_dirty: bool = True
    urgent: bool = True
    noisy: str | None = None
    energy: tuple[EnergyRecord, ...] = ()
    offload: FindingRecord | None = None
    expected: PrefillExpectation | None = None
    waited_ms: float | None = None
    progress: PromptProgress | None = None

    @property
    def prompt(self) -> str:
        """The prompt being answered."""
        return self.collector.prompt

    def add(self, event: StreamEvent) -> None:
        """Take one event (cheap: append and mark dirty; no rendering here)."""
        if event.progress is not None:
            self.progress = event.progress
        if event.thinking:
            self._append(THINKING, event.thinking)
        if event.content:
            self._append(CONTENT, event.content)
        if event.has_text:
            if self.last_text_ns is not None:
                self.itl_ms.append((event.t_ns - self.last_text_ns) / NS_PER_MS)
            else:
                self.first_text_ns = event.t_ns
                self.urgent = True
            self.last_text_ns = event.t_ns
            self.chunks += 1
        if event.failure is not None:
            self.failure = event.failure
        self.dirty = self.numbers_dirty = True

    def mark_noisy(self, message: str | None) -> bool:
        """Set the NOISY mark; True when it changed (the numbers are then redrawn)."""
        if message == self.noisy:
            return False
        self.noisy = message
        self.numbers_dirty = True
        return True

    def _append(self, kind: str, text: str) -> None:
        text = visible(text)  # shown, never obeyed; once per chunk, not per frame
        if self.parts and self.parts[-1][0] == kind:
            self.parts[-1][1].append(text)
        else:
            self.parts.append((kind, [text]))

    def finish(self, result: RequestResult) -> None:
        """The request ended; its result carries the final metrics and status."""
        self.result = result
        self.failure = result.failure
        self.dirty = self.numbers_dirty = self.urgent = True

    @property
    def streaming(self) -> bool:
        """True until `finish`."""
        return self.result is None

    @property
    def span_ns(self) -> tuple[int, int | None]:
        """(send stamp, last event stamp) in perf_counter_ns; the end is None while streaming
        (and the start 0 before the send)."""
        return request_span_ns(self.collector.sent_ns, self.result)

    @property
    def ttft_ms(self) -> float | None:
        """Send → first text chunk, ms (client stamps); None before the first chunk."""
        if self.result is not None:
            return self.result.metrics.ttft_ms
        if self.first_text_ns is None or not self.collector.sent_ns:
            return None
        return (self.first_text_ns - self.collector.sent_ns) / NS_PER_MS

    @property
    def waiting_for_prefill(self) -> bool:
        """Streaming and no text yet: the engine is (most likely) still reading the prompt."""
        return self.result is None and self.first_text_ns is None

    def wait_text(self) -> str | None:
        """While waiting for the first chunk: the server's prompt progress when it reports
        one (`prefill.progress_text`), else the prefill prediction and the wait so far
        (`prefill.waiting_text`); None without either, or once text arrived."""
        if not self.waiting_for_prefill:
            return None
        if self.progress is not None:
            return progress_text(self.progress, self.expected)
        if self.expected is None:
            return None
        return waiting_text(self.expected, self.waited_ms)

    @property
    def live_decode_cps(self) -> float | None:
        """Client decode rate so far, text chunks/s (`timeline.live_chunk_rate`)."""
        return live_chunk_rate(self.first_text_ns, self.last_text_ns, self.chunks)


@dataclass(frozen=True, slots=True)
class CutShort:
    """The client's figures of a request stopped before its done chunk (Esc, a new prompt),
    from the chunks it received: the server sent no counts, so they are per chunk.

    chunks: text chunks received; rate: chunks/s (`timeline.live_chunk_rate`, the figure shown
    while it streamed); tpot_ms: ms per chunk (1000 / rate); last_chunk_ms: send → the last
    text chunk, ms (E2E is measured to the done chunk, which never came)."""

    chunks: int
    rate: float
    tpot_ms: float
    last_chunk_ms: float


def cut_short(result: RequestResult) -> CutShort | None:
    """`CutShort` for a cancelled request with at least two text chunks; None otherwise (and
    for every request whose E2E the metrics have)."""
    if result.status != Status.CANCELLED or result.metrics.e2e_ms is not None:
        return None
    stamps = [e.t_ns for e in result.events if e.has_text]
    rate = live_chunk_rate(stamps[0], stamps[-1], len(stamps)) if stamps else None
    if rate is None:
        return None
    return CutShort(len(stamps), rate, 1000.0 / rate, (stamps[-1] - result.sent_ns) / NS_PER_MS)


def request_span_ns(sent_ns: int, result: RequestResult | None) -> tuple[int, int | None]:
    """When a request ran, perf_counter_ns: from its send stamp to its last event's stamp
    (the send stamp when nothing arrived); the end is None while it has no result yet."""
    if result is None:
        return sent_ns, None
    end = result.events[-1].t_ns if result.events else sent_ns
    return sent_ns, max(sent_ns, end)
