"""The session on the main screen: every request so far, as numbers (pure: no Textual, no clocks).

The main screen shows three things from here, all derived from figures already computed (the
`LiveRequest` buffers while a request streams, its `RequestResult.metrics` once it ended):

* `ttft_view`: TTFT of each request of the session (ms), one value per request that got a
  first chunk, the request on screen marked, the NOISY ones marked, and their median and
  min–max (`llmtop.sessions.measure.stats.summarize`).
* `gaps_view`: the request's inter-chunk gaps (ms) with an honest label — per *token* only
  when the server's eval_count equals the number of text chunks — its running TPOT and decode
  rate, and the previous request's TPOT as a reference.
* `history_row` / `compare`: one history row per finished request, and the ratio of each figure
  of a request to the one before it.

`SessionState.version` counts changes (a request added, a NOISY mark changed), so the widgets
recompute and redraw only when it moves.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from llmtop.engines.events import Status
from llmtop.sessions.measure.stats import summarize
from llmtop.sessions.measure.timeline import RequestMetrics
from llmtop.tui.state.live import LiveRequest, cut_short

if TYPE_CHECKING:  # the request's collector loads with the connection, after the first frame
    from llmtop.sessions.measure.request import RequestResult

MAX_BARS = 40  # the TTFT sparkline shows the last 40 requests (one cell each)
PROMPT_CHARS = 18  # a history row's prompt before its table knows its width (request_history)
PROMPT_KEPT = 400  # a history row keeps the prompt's first 400 characters: wider than a screen


def finite(values: Sequence[float | None]) -> tuple[float, ...]:
    """The values that are numbers (None, NaN and ±inf dropped): what a Sparkline may draw."""
    return tuple(v for v in values if v is not None and math.isfinite(v))


def ratio(value: float | None, reference: float | None) -> float | None:
    """value / reference, or None when either is missing or the reference is 0 (no ratio)."""
    if value is None or reference is None or reference == 0:
        return None
    out = value / reference
    return out if math.isfinite(out) else None


@dataclass(frozen=True, slots=True)
class TtftView:
    """The TTFT sparkline across the session.

    values: TTFT (ms) of the last ≤ MAX_BARS requests that have one, oldest first (finite).
    numbers: each value's request number in the session (1-based).
    noisy: each value's request ran while a probe sample was NOISY.
    current: the index in `values` of the request on screen, None when it has no TTFT (yet).
    median_ms, min_ms, max_ms: over the session's ok requests with a TTFT, as the report
    counts them (not a cold start, a prefix-cache hit, a cancelled or failed request:
    else the TUI said "median 54.5 ms · 22.3–760.9 · n 11" beside the report's 47.9 ms
    over 8); None when none.
    n: how many requests those statistics cover; others: the bars not in them.
    """

    values: tuple[float, ...] = ()
    numbers: tuple[int, ...] = ()
    noisy: tuple[bool, ...] = ()
    current: int | None = None
    median_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    n: int = 0
    others: int = 0

    @property
    def current_vs_median(self) -> float | None:
        """The request on screen's TTFT / the session median (1.25 = 25 % slower)."""
        if self.current is None:
            return None
        return ratio(self.values[self.current], self.median_ms)


@dataclass(frozen=True, slots=True)
class GapsView:
    """The inter-chunk gaps of one request and the figures beside them.

    gaps_ms: successive text-chunk gaps, ms (finite values only).
    per_token: True when each chunk carried one token (the server's eval_count equals the
    chunk count), so the gaps are per-token TPOT; False while streaming (unknown yet) and
    when the counts differ or the server sent none.
    tokens_per_chunk: eval_count / text chunks when that is not 1 (None otherwise).
    tpot_ms, rate: the running time per chunk (ms) and chunks/s while streaming; per output
    token and tokens/s once the server's counts arrived (`unit` says which: "chunk" / "tok").
    previous_tpot_ms, previous_unit: the request before's TPOT (None when there is none).
    """

    gaps_ms: tuple[float, ...]
    per_token: bool
    tokens_per_chunk: float | None
    tpot_ms: float | None
    rate: float | None
    unit: str
    previous_tpot_ms: float | None = None
    previous_unit: str = "tok"

    @property
    def label(self) -> str:
        """What the sparkline shows, e.g. "token gaps ms" or "chunk gaps ms (2.0 tok/chunk)"."""
        if self.per_token:
            return "token gaps ms"
        if self.tokens_per_chunk is not None:
            return f"chunk gaps ms ({self.tokens_per_chunk:.1f} tok/chunk)"
        return "chunk gaps ms"


def unit_of(metrics: RequestMetrics) -> str:
    """"tok" when the output count is the server's eval_count, "chunk" when it is the client's
    chunk count (the server sent none)."""
    return "chunk" if metrics.tokens_basis == "chunks" else "tok"


def gaps_view(live: LiveRequest, previous: RequestResult | None) -> GapsView:
    """The gaps sparkline's data and figures for `live` (see `GapsView`).

    While streaming: TPOT = 1000 / `live_decode_cps` ms per chunk (the mean gap so far).
    Done: the result's TPOT and client decode rate (`timeline.compute_metrics`).
    """
    gaps = finite(live.itl_ms)
    previous_tpot = previous.metrics.tpot_ms if previous is not None else None
    previous_unit = unit_of(previous.metrics) if previous is not None else "tok"
    result = live.result
    if result is None:
        rate = live.live_decode_cps
        tpot = 1000.0 / rate if rate else None
        return GapsView(gaps, False, None, tpot, rate, "chunk", previous_tpot, previous_unit)
    cut = cut_short(result)
    if cut is not None:  # cancelled before its done chunk: per chunk, as while it streamed
        return GapsView(gaps, False, None, cut.tpot_ms, cut.rate, "chunk", previous_tpot,
                        previous_unit)
    m = result.metrics
    per_chunk = None
    if m.tokens_basis == "eval_count" and m.output_tokens is not None and m.text_chunks:
        per_chunk = m.output_tokens / m.text_chunks
    per_token = per_chunk == 1.0
    return GapsView(
        gaps,
        per_token,
        None if per_token else per_chunk,
        m.tpot_ms,
        m.client_decode_tps,
        unit_of(m),
        previous_tpot,
        previous_unit,
    )


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One finished request as the history shows it.

    number: 1-based in this session; time: its send's wall clock, "HH:MM:SS"; prompt: its
    first PROMPT_KEPT characters on one line (the table cuts it to the room it has). Figures
    in ms and tokens/s (None = n/a); decode is the client's rate, server_decode the
    server's; tokens the output count (`tokens_basis` "eval_count" or "chunks"); noisy: the
    NOISY finding, or None.
    """

    number: int
    time: str
    prompt: str
    status: str
    ttft_ms: float | None
    tpot_ms: float | None
    decode_tps: float | None
    server_decode_tps: float | None
    tokens: int | None
    tokens_basis: str | None
    e2e_ms: float | None
    noisy: str | None


def clock_time(wall_start: str) -> str:
    """"HH:MM:SS" of an ISO 8601 timestamp; the text itself when it is not one."""
    try:
        return datetime.fromisoformat(wall_start).strftime("%H:%M:%S")
    except ValueError:
        return wall_start


def prompt_start(prompt: str, chars: int = PROMPT_CHARS) -> str:
    """The prompt's first `chars` characters on one line, "…" when cut."""
    flat = " ".join(prompt.split())
    return flat if len(flat) <= chars else flat[: chars - 1] + "…"


def history_row(number: int, result: RequestResult, noisy: str | None,
                cold: bool | None = None, cached: bool = False) -> HistoryRow:
    """The history row of request `number` (see `HistoryRow`). An ok request that paid a
    model load is "cold-start", the report's status for it (it counts in no statistics
    there), as `run` says it (one vocabulary for both). `cold`: the session's verdict
    on it (`analysis.run.cold_starts` over the session's loads, `SessionState.row`); None: its
    load alone, over analysis.run.COLD_START_MS. `cached`: the session's verdict that its
    prompt came from the engine's prefix cache (`SessionState.cached_flags`). A cancelled
    request's TPOT and decode are its
    chunks' (`live.cut_short`: it has no server counts), like the strip's "(chunks,
    cancelled)"."""
    from llmtop.sessions.analysis.run import BenchStatus, cold_starts  # see `_cached_flags`

    m = result.metrics
    status = str(result.status)
    if cold is None:  # judged alone: the same rule with no other request to compare
        cold = cold_starts([m.load_ms or 0.0])[0][0]
    if result.status == Status.OK and cold:
        status = str(BenchStatus.COLD_START)
    elif result.status == Status.OK and cached:
        status = str(BenchStatus.CACHED)
    cut = cut_short(result)  # cancelled: the client's per-chunk figures, as the strip shows
    tpot_ms, decode_tps = (cut.tpot_ms, cut.rate) if cut else (m.tpot_ms, m.client_decode_tps)
    return HistoryRow(
        number=number,
        time=clock_time(result.wall_start),
        prompt=prompt_start(result.prompt, PROMPT_KEPT),
        status=status,
        ttft_ms=m.ttft_ms,
        tpot_ms=tpot_ms,
        decode_tps=decode_tps,
        server_decode_tps=m.server_decode_tps,
        tokens=m.output_tokens,
        tokens_basis=m.tokens_basis,
        e2e_ms=m.e2e_ms,
        noisy=noisy,
    )


def _per_token_ns(result: RequestResult | None) -> float | None:
    s = result.stats if result else None
    if s is None or not s.prompt_eval_count or not s.prompt_eval_duration:
        return None
    return s.prompt_eval_duration / s.prompt_eval_count


def _cached_flags(requests: Sequence[LiveRequest]) -> list[bool]:
    """The report's rule (analysis/run.py, `_mark_cached`) over the session's ok requests:
    the server's reuse share, the same prompt's first time, or the median of requests of a
    similar prompt length (at least 3): the TUI and the report call the same requests
    cached."""
    results = [live.result if live.result is not None and live.result.status == Status.OK
               else None for live in requests]
    # analysis.run (its records are pydantic models) is imported when requests are judged:
    # the session strip is drawn in the first frame, before any request
    from llmtop.sessions.analysis.run import CACHED_FRACTION, CACHED_REPORTED_SHARE, SIMILAR_COUNT

    per_token = [_per_token_ns(r) for r in results]
    counts = [r.stats.prompt_eval_count if r is not None and r.stats else None for r in results]
    known = [(v, c) for v, c in zip(per_token, counts, strict=True) if v is not None and c]
    flags: list[bool] = []
    first_seen: dict[str, float] = {}
    for result, value, count in zip(results, per_token, counts, strict=True):
        cached = False
        if result is not None:
            s = result.stats
            reused = s.prompt_cached_count if s else None
            if count and reused and reused > CACHED_REPORTED_SHARE * count:
                cached = True
            if value is not None and count:
                earlier = first_seen.get(result.prompt)
                if earlier is not None and value < CACHED_FRACTION * earlier:
                    cached = True
                else:
                    first_seen.setdefault(result.prompt, value)
                    like = [v for v, c in known
                            if count / SIMILAR_COUNT <= c <= count * SIMILAR_COUNT]
                    if len(like) >= 3 and value < CACHED_FRACTION * statistics.median(like):
                        cached = True
        flags.append(cached)
    return flags


COMPARED: tuple[tuple[str, Callable[[HistoryRow], float | None]], ...] = (
    ("TTFT", lambda r: r.ttft_ms),
    ("TPOT", lambda r: r.tpot_ms),
    ("decode", lambda r: r.decode_tps),
    ("srv decode", lambda r: r.server_decode_tps),
    ("tokens", lambda r: r.tokens),
    ("E2E", lambda r: r.e2e_ms),
)


def compare(row: HistoryRow, before: HistoryRow) -> dict[str, float | None]:
    """Each figure of `row` divided by the same figure of `before`, by name (COMPARED's
    order): 1.25 = 25 % higher. None where either is n/a or the earlier one is 0."""
    return {name: ratio(get(row), get(before)) for name, get in COMPARED}


class SessionState:
    """The requests of this session in order: each finished request's `LiveRequest` (its text
    and NOISY mark, as drawn) and so its `RequestResult`.

    version: bumped by `add` and by a NOISY mark that changed; the views depend on nothing else
    but the request on screen, so widgets redraw when (version, request on screen) moves.
    """

    def __init__(self) -> None:
        self.requests: list[LiveRequest] = []
        self.version = 0
        self._numbers: dict[int, int] = {}  # id(request) → its number (the list holds it)
        self._cold: tuple[int, list[bool]] = (-1, [])  # (requests, cold_flags)
        self._cached: tuple[int, list[bool]] = (-1, [])  # (requests, cached_flags)

    def add(self, live: LiveRequest) -> int:
        """Add a finished request (its `result` set); returns its 1-based number.
        Raises ValueError when it has no result yet."""
        if live.result is None:
            raise ValueError("only finished requests join the history")
        self.requests.append(live)
        self._numbers[id(live)] = len(self.requests)
        self.version += 1
        return len(self.requests)

    def mark_noisy(self, live: LiveRequest, message: str | None) -> bool:
        """Set `live`'s NOISY mark (`LiveRequest.mark_noisy`); True when it changed."""
        changed = live.mark_noisy(message)
        if changed and self.number_of(live) is not None:
            self.version += 1
        return changed

    def number_of(self, live: LiveRequest | None) -> int | None:
        """The 1-based number of a finished request, None for one not (yet) in the session."""
        return self._numbers.get(id(live))

    def row(self, number: int) -> HistoryRow:
        """The history row of request `number` (1-based). Raises IndexError when out of range."""
        if not 1 <= number <= len(self.requests):
            raise IndexError(f"no request {number} in this session")
        live = self.requests[number - 1]
        assert live.result is not None
        return history_row(number, live.result, live.noisy, self.cold_flags()[number - 1],
                           self.cached_flags()[number - 1])

    def word(self, number: int) -> str:
        """Request `number`'s status as the report says it: "cold-start", "cached", else its
        own status ("ok", "cancelled", "error"…). Raises IndexError when out of range."""
        return self.row(number).status

    def cached_flags(self) -> list[bool]:
        """Per request, whether its prompt came from the engine's prefix cache (unmarked,
        a Ctrl+R of a 280-word prompt read TTFT 54.8 ms against 1296.9, "ok", in the
        median): the server says it reused over CACHED_REPORTED_SHARE of the prompt, or the
        request repeats an earlier prompt and prefilled a token in under CACHED_FRACTION of
        that request's time (the bench's thresholds, analysis/run.py; the same prompt, so
        the per-token times are comparable). Cached per request count."""
        # keyed by the request count, not `version`: a NOISY mark moves the version and
        # changes no result, and the rule is a pass over the session's requests
        if self._cached[0] != len(self.requests):
            self._cached = (len(self.requests), _cached_flags(self.requests))
        return self._cached[1]

    def cold_flags(self) -> list[bool]:
        """Per request, whether it paid a model load, judged as a report judges it: against
        the other requests' loads (`analysis.run.cold_starts`), so the first of a session (826
        ms, the next ones 0.3) is one even under COLD_START_MS. Cached per request count."""
        if self._cold[0] != len(self.requests):  # results change only by an add
            from llmtop.sessions.analysis.run import cold_starts  # see `_cached_flags`

            loads = [(live.result.metrics.load_ms or 0.0) if live.result else 0.0
                     for live in self.requests]
            self._cold = (len(self.requests), [cold for cold, _ in cold_starts(loads)])
        return self._cold[1]

    def previous(self, live: LiveRequest | None) -> RequestResult | None:
        """The finished request before `live` (the last one when `live` is not in the
        session yet, i.e. streaming); None for the first."""
        number = self.number_of(live)
        before = len(self.requests) if number is None else number - 1
        return self.requests[before - 1].result if before >= 1 else None

    def ttft_view(self, shown: LiveRequest | None) -> TtftView:
        """The TTFT sparkline's data, with `shown` (the request on screen) marked; a request
        still streaming is included once its first chunk arrived."""
        entries = [(i + 1, live) for i, live in enumerate(self.requests)]
        if shown is not None and shown.streaming:
            entries.append((len(self.requests) + 1, shown))
        picked = [(n, live, live.ttft_ms) for n, live in entries]
        picked = [p for p in picked if p[2] is not None and math.isfinite(p[2])]
        finished = [p for p in picked if p[0] <= len(self.requests)]  # the streaming one: not
        counted = [p[2] for p in finished if self.word(p[0]) == Status.OK]  # judged yet
        stats = summarize(counted)
        last = picked[-MAX_BARS:]
        current = next((i for i, p in enumerate(last) if p[1] is shown), None)
        return TtftView(
            values=tuple(float(p[2]) for p in last),  # type: ignore[arg-type]
            numbers=tuple(p[0] for p in last),
            noisy=tuple(p[1].noisy is not None for p in last),
            current=current,
            median_ms=stats.median,
            min_ms=stats.min,
            max_ms=stats.max,
            n=stats.n,
            others=len(finished) - len(counted),
        )

