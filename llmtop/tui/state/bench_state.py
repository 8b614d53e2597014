"""What the bench screen shows of a running `BenchRunner` (pure: no Textual, no clocks).

`on_progress` / `on_event` are the runner's callbacks: they only update fields and set dirty
flags; the screen's render timer draws what is dirty. Rows come from the runner's own results
(client stamps and the server's statistics); after the run, `finish` re-marks each row with
the analysis' status (cached, cold start, prompt cut… are only known from the whole run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llmtop.engines.events import StreamEvent
from llmtop.sessions.analysis.run import (
    CONTEXT_PHASES,
    Analysis,
    BenchStatus,
    first_pass_status,
)
from llmtop.sessions.measure.config import BenchConfig
from llmtop.sessions.measure.request import RequestCollector
from llmtop.sessions.runners.bench import BenchOutcome, BenchProgress
from llmtop.tui.state.live import LiveRequest, request_span_ns
from llmtop.tui.state.noise import NoiseTracker

WARMUP = "warmup"
MEASURE = "measure"


@dataclass
class BenchRow:
    """One finished bench request (warm-ups included), in run order.

    n: 1-based position over the whole run; index: position within its prompt size (as in
    the log). status: the bench status ("ok" or why it does not count) and its reason.
    ttft_ms / prefill_ms: client TTFT and server prompt-eval time, ms; decode_tps: server
    eval_count / eval_duration, tok/s. span_ns: (send, last event), perf_counter_ns.
    noisy: the first finding of a NOISY probe sample taken in that span, else None.
    episode: after the run, the 1-based number of the slow episode it fell in (None: outside
    every episode, or not analysed yet).
    """

    n: int
    phase: str
    target: int | None
    index: int
    status: str
    reason: str
    ttft_ms: float | None
    prefill_ms: float | None
    decode_tps: float | None
    span_ns: tuple[int, int | None]
    noisy: str | None = None
    episode: int | None = None

    @property
    def counts(self) -> bool:
        """A measured request with bench status ok (it enters the statistics)."""
        return self.phase == MEASURE and self.status == BenchStatus.OK


def request_label(config: BenchConfig, phase: str, i: int, target: int | None) -> str:
    """e.g. "warm-up 1/1 · 200 tok", "request 7/25 · 200 tok" or, past the protocol's count,
    "request 27 (re-measure 2 of at most 25) · 200 tok" (i: 0-based within a size)."""
    size = f" · {target} tok" if target is not None else ""
    return f"{config.position(phase, i)}{size}"


@dataclass
class BenchState:
    """A run as it progresses. `total`: every request of the run (warm-ups included, all
    prompt sizes); `done`: those finished. `live`: the request streaming now (its tokens)."""

    config: BenchConfig
    phase_text: str = "starting…"
    details: dict[str, str] = field(default_factory=dict)  # by phase: preflight, calibration
    done: int = 0
    rows: list[BenchRow] = field(default_factory=list)
    live: LiveRequest | None = None
    outcome: BenchOutcome | None = None
    report_md: str | None = None
    error: str | None = None
    cancelled: bool = False
    progress_dirty: bool = True
    series_dirty: bool = True
    summary_dirty: bool = True
    noise_version: int = -1

    @property
    def per_size(self) -> int:
        """Requests per prompt size (warm-ups included)."""
        return self.config.warmup + self.config.requests

    @property
    def total(self) -> int:
        """Requests in the whole run (warm-ups included, then the cache pairs and the
        conversation with its cold replay)."""
        c = self.config
        context = 2 * c.cache_pairs + c.turns * (2 if c.cold_turns else 1)
        return self.per_size * len(c.prompt_tokens) + context

    @property
    def finished(self) -> bool:
        """The run ended: done, failed or cancelled."""
        return self.outcome is not None or self.error is not None or self.cancelled

    def _offset(self, target: int | None) -> int:
        sizes = self.config.prompt_tokens
        return sizes.index(target) * self.per_size if target in sizes else 0

    def on_progress(self, p: BenchProgress) -> None:
        """The runner's progress callback."""
        self.progress_dirty = True
        if p.phase in (WARMUP, MEASURE) and p.total:
            if p.result is None:  # a request starts
                label = request_label(self.config, p.phase, p.done, p.target)
                self.phase_text = label
                # the collector only carries the label: the runner owns the real one
                self.live = LiveRequest(RequestCollector(prompt=label, options={}, model=""))
            else:
                self._add_row(p)
        elif p.phase == "calibrating":
            if p.message.startswith("calibration "):
                self.details[p.phase] = p.message
            else:
                self.phase_text = "calibrating…"
        elif p.phase == "preflight" and not p.message.startswith("preflight:"):
            self.details[p.phase] = p.message  # the preflight verdict and its findings
        elif p.phase == WARMUP:
            self.phase_text = "first request (pays the model load, if any)…"
        elif p.phase == "done":
            self.phase_text = "done"
        elif p.phase in CONTEXT_PHASES:  # the cache pairs, the conversation, its replay
            self.phase_text = f"{p.message}…"
            self.done += p.result is not None
        else:  # "environment", "preflight: sampling…", or a phase added later
            self.phase_text = f"{p.message or p.phase}…"

    @property
    def detail(self) -> str:
        """The preflight verdict with its first finding, and the calibration table: one line
        each (the probe panel and the bench log have every finding)."""
        lines = []
        for text in self.details.values():
            first, *rest = text.splitlines() or [""]
            if rest:
                first += f": {rest[0].strip()}"
            if len(rest) > 1:
                first += f" (+{len(rest) - 1} more in the log)"
            lines.append(first)
        return "\n".join(lines)

    def _add_row(self, p: BenchProgress) -> None:
        result, record = p.result, p.record
        assert result is not None and record is not None  # the runner sends both at the end
        status, reason = first_pass_status(record, None)
        m = result.metrics
        self.rows.append(
            BenchRow(
                n=len(self.rows) + 1,
                phase=p.phase,
                target=p.target,
                index=p.done - 1,
                status=str(status),
                reason=reason,
                ttft_ms=m.ttft_ms,
                prefill_ms=m.prompt_eval_ms,
                decode_tps=m.server_decode_tps,
                span_ns=request_span_ns(result.sent_ns, result),
            )
        )
        self.done = self._offset(p.target) + p.done
        if self.live is not None:
            self.live.finish(result)
        self.series_dirty = True
        self.noise_version = -1  # mark the new row against the samples already seen

    def on_event(self, event: StreamEvent) -> None:
        """The runner's token callback (measured and warm-up requests only)."""
        if self.live is not None:
            self.live.add(event)

    def mark_noise(self, noise: NoiseTracker) -> bool:
        """Re-mark every row from the noisy samples seen so far (only when new ones came)."""
        if noise.version == self.noise_version:
            return False
        self.noise_version = noise.version
        changed = False
        for row in self.rows:
            noisy = noise.first_during(*row.span_ns)
            if noisy != row.noisy:
                row.noisy, changed = noisy, True
        if changed:
            self.series_dirty = self.summary_dirty = True
        return changed

    def finish(self, outcome: BenchOutcome, report_md: str) -> None:
        """The run ended normally: keep the outcome and re-mark rows with the analysis."""
        self.outcome, self.report_md = outcome, report_md
        self.phase_text = "done"
        _apply_analysis(self.rows, outcome.analysis)
        self.progress_dirty = self.series_dirty = self.summary_dirty = True

    def fail(self, message: str) -> None:
        """The run stopped with an error (calibration, log…)."""
        self.error = message
        self.phase_text = "failed"
        self.progress_dirty = self.summary_dirty = True

    def cancel(self) -> None:
        """The user cancelled the run (the runner logged the interruption)."""
        self.cancelled = True
        self.phase_text = "cancelled"
        self.progress_dirty = self.summary_dirty = True


def _apply_analysis(rows: list[BenchRow], analysis: Analysis) -> None:
    verdicts = {
        (r.prompt_tokens_target, r.phase, r.index): r for s in analysis.sizes for r in s.requests
    }
    for row in rows:
        verdict = verdicts.get((row.target, row.phase, row.index))
        if verdict is not None:
            row.status, row.reason = str(verdict.status), verdict.reason
            row.episode = verdict.episode


def warm_note(noisy: Sequence[BenchRow]) -> str:
    """" (1 of them a warm-up)" when warm-ups are among `noisy`: the verdict counts the
    measured requests only (12 NOISY here beside "11 of the 12 measured" in the verdict,
    with nothing said of the one apart, read as a contradiction)."""
    warm = sum(1 for r in noisy if r.phase == WARMUP)
    if not warm:
        return ""
    return f" ({warm} of them {'a warm-up' if warm == 1 else 'warm-ups'})"
