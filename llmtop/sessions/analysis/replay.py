"""A `llmtop load --replay` log set against the watch log it replayed: the trace (the watch
log's ok requests, their arrival offsets), each replayed request paired with its original
(`replay_of`), and compare's verdict for TTFT, decode and E2E over the pairs.

What a watch log holds per request (runners/watch/session.py): the endpoint, the options the app
set, the server's statistics (prompt and output token counts), the arrival as a wall-clock
ISO time (`started_at`, microseconds) and, only with `--log-bodies`, the text of the last
user message. It records no monotonic offset, so the arrival gaps come from `started_at`
(a wall clock: an NTP step between two arrivals would show in their gap; its resolution is
1 µs). The runner (runners/replay.py) sends the trace; `llmtop report` on its log reads the
watch log again (`comparison_of`) and shows the same comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from llmtop.sessions.analysis.compare.stats import MetricComparison, judge
from llmtop.sessions.measure.metrics import E2E, SERVER_DECODE, TTFT
from llmtop.sessions.records.log import LogError, read_log
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import RunLog

COMPARED = (TTFT, SERVER_DECODE, E2E)  # compare's metrics the replay judges and shows
CLOCK = "started_at (wall clock, µs; the watch records no monotonic offset)"


class ReplayError(ValueError):
    """A log that cannot be replayed (not a watch log, unreadable, no ok request)."""


@dataclass(frozen=True)
class Trace:
    """A watch log's ok requests in arrival order, their arrival offsets from the first (s,
    from `started_at`), whether the texts were recorded, and how many were left out."""

    path: str
    originals: tuple[RequestRecord, ...]
    offsets_s: tuple[float, ...]
    bodies: bool
    left_out: int

    def identity(self) -> dict[str, Any]:
        """The log header's `replay` entry."""
        return {"watch_log": self.path, "requests": len(self.originals),
                "left_out": self.left_out, "bodies": self.bodies, "clock": CLOCK,
                "span_s": self.offsets_s[-1] if self.offsets_s else 0.0}


def read_trace(path: str) -> Trace:
    """The replayable requests of the watch log at `path`. Raises ReplayError."""
    try:
        log = read_log(path)
    except LogError as exc:
        raise ReplayError(str(exc)) from None
    if log.header.kind != "watch":
        raise ReplayError(f"{path} is a {log.header.kind} log; --replay needs a `llmtop "
                          "watch` log (the requests an app sent)")
    timed = []
    for rec in log.requests:
        when = _wall(rec.started_at)
        if rec.status == "ok" and when is not None and rec.stats is not None:
            timed.append((when, rec))
    if not timed:
        raise ReplayError(f"{path} holds no ok request with its arrival time and server "
                          "counts to replay")
    timed.sort(key=lambda t: t[0])
    first = timed[0][0]
    bodies = log.header.watch is not None and log.header.watch.bodies_logged
    # exact: whole microseconds between the ISO times (a float POSIX time of today holds
    # about 0.2 µs, which would blur the recorded gaps)
    offsets = tuple((t - first) // timedelta(microseconds=1) / 1e6 for t, _ in timed)
    return Trace(path, tuple(r for _, r in timed), offsets,
                 bodies and all(r.prompt for _, r in timed), len(log.requests) - len(timed))


def _wall(text: str | None) -> datetime | None:
    """An ISO time with its zone (µs resolution), None when absent, unreadable or without
    a zone (a naive time cannot be set against an aware one)."""
    try:
        when = datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
    return when if when is not None and when.tzinfo is not None else None


@dataclass(frozen=True)
class Pair:
    """One original and its replay (None: not logged)."""

    original: RequestRecord
    replay: RequestRecord | None


# How near a replayed send should come to its recorded gap: a millisecond is finer than any
# engine's step (a decode step of a small model is 5-20 ms), so a send this near arrives as
# the original did for the engine's scheduler.
ARRIVAL_LIMIT_MS = 1.0


@dataclass(frozen=True)
class ReplayComparison:
    """The replay against its originals: the pairs in arrival order, compare's verdict per
    metric (A the originals, B the replay), the open loop's arrival errors (ms: each replayed
    send's offset from the first less the recorded one / speed; None back to back)."""

    trace: Trace
    pairs: tuple[Pair, ...]
    metrics: tuple[MetricComparison, ...]
    arrival_errors_ms: tuple[float, ...] | None

    @property
    def max_arrival_error_ms(self) -> float | None:
        """The largest |arrival error| (ms), None back to back."""
        errors = self.arrival_errors_ms
        return max((abs(e) for e in errors), default=None) if errors is not None else None

    def arrivals_off(self, limit_ms: float = ARRIVAL_LIMIT_MS) -> int | None:
        """How many replayed sends were more than `limit_ms` off their recorded gap; None
        back to back."""
        errors = self.arrival_errors_ms
        return None if errors is None else sum(abs(e) > limit_ms for e in errors)


def compare_replay(trace: Trace, log: RunLog, speed: float = 1.0,
                   back_to_back: bool = False) -> ReplayComparison:
    """Pair each original with its replay (`replay_of`) and judge TTFT, decode and E2E with
    compare's test over the pairs where both ended ok."""
    replayed = {r.load.replay_of: r for r in log.requests if r.load.replay_of is not None
                and r.phase == "measure"}
    pairs = tuple(Pair(o, replayed.get(o.id)) for o in trace.originals)
    both = [p for p in pairs if p.replay is not None and p.replay.status == "ok"]
    metrics = []
    for spec in COMPARED:
        a = [v for p in both if (v := p.original.metric(spec.key)) is not None]
        b = [v for p in both if p.replay and (v := p.replay.metric(spec.key)) is not None]
        metrics.append(judge(spec, "replay", a, b))
    errors = None
    sent = [(o, p.replay.load.sent_offset_ns) for o, p in zip(trace.offsets_s, pairs, strict=True)
            if p.replay is not None and p.replay.load.sent_offset_ns is not None]
    if not back_to_back and sent:
        o0, s0 = sent[0]
        errors = tuple(round((s - s0) / 1e6 - (o - o0) / speed * 1e3, 4) for o, s in sent)
    return ReplayComparison(trace, pairs, tuple(metrics), errors)




def comparison_of(log: RunLog) -> ReplayComparison | None:
    """A replay's log against the watch log its header names (load.replay); None for a log
    that is no replay. Raises ReplayError when that watch log cannot be read any more (moved,
    removed), naming it."""
    replay = log.header.load.replay if log.header.load is not None else None
    if not replay:
        return None
    path = str(replay.get("watch_log", ""))
    try:
        trace = read_trace(path)
    except ReplayError as exc:
        raise ReplayError(f"the replayed watch log cannot be read: {exc}") from None
    return compare_replay(trace, log, float(replay.get("speed") or 1.0),
                          bool(replay.get("back_to_back")))
