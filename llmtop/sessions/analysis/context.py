"""Context from a bench log's records: the prefill curve of a prompt-size sweep, the prefix
cache pairs, and a conversation's turns (docs/guide/context.md).

* `prefill_sweep`: fits prefill (the server's `prompt_eval_duration`) and client TTFT against
  the server's own prompt token count over every ok measured request (prefill.fit_curve),
  with each size's measured median beside the curve's prediction and the decode rate after
  that many tokens of context; a saved curve from an earlier run (`prior`) is checked
  against each size's median.
* `cache_pairs`: a cold request (fresh prefix) and a warm one (the same prefix, a new
  suffix); the tokens the warm one took from the cache as the server reports them, and the
  prefill saved per cached token; inferred from time, and labelled so, when the server
  reports nothing.
* `conversation`: per turn, the context the server counted, TTFT, prefill, cached tokens and
  what the curve predicts for a cold prefill of that context; the turn where the context
  filled (the server's count fell while the history grew, or count + output reached num_ctx)
  is marked, never averaged in.

Pure: reads typed records, never the network or the disk.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmtop.sessions.analysis.prefill import (
    Curve,
    CurveError,
    PredictionCheck,
    check_prediction,
    fit_curve,
)
from llmtop.sessions.analysis.run import Analysis
from llmtop.sessions.measure.metrics import PROMPT_EVAL, SERVER_DECODE, TTFT
from llmtop.sessions.records.request import RequestRecord

INFERRED_MIN_SAVING = 0.10  # a warm prefill under 90 % of the cold one counts as a hit by time
# A server that leaves cached tokens out of prompt_eval_count (Ollama) reports a warm count
# smaller by about the whole shared prefix. A drop under half of the prefix is the two random
# suffixes tokenizing to different lengths (the embedded engine, which counts every token:
# 1 token on a 2,048-token prefix, measured), not a count of cached tokens.
COUNT_DROP_MIN = 0.5


def _median(values: Iterable[float | None]) -> float | None:
    xs = [x for x in values if x is not None]
    return statistics.median(xs) if xs else None


@dataclass(frozen=True)
class SweepRow:
    """One prompt size of a sweep: its target, the median server token count (T), how many
    ok requests, median prefill and TTFT (ms) beside the curves' predictions at T, and the
    median server decode rate (tok/s) after T tokens of context."""

    target: int | None
    tokens: float
    n: int
    prefill_ms: float | None
    prefill_predicted_ms: float | None
    ttft_ms: float | None
    ttft_predicted_ms: float | None
    decode_tps: float | None


@dataclass(frozen=True)
class PrefillSweep:
    """A sweep's curves (None with `note` saying why: too few sizes or points), its rows,
    and `prior_checks`: what a saved curve (`prior_label`: where it came from) predicted
    at each size against the measured median prefill."""

    prefill: Curve | None
    ttft: Curve | None
    rows: tuple[SweepRow, ...]
    note: str = ""
    prior_label: str | None = None
    prior_checks: tuple[PredictionCheck, ...] = ()

    def poor_fit(self) -> str:
        """Why the prefill curve should not be trusted ("" when it can; `Curve.poor_fit`
        against each size's median prefill), or that there is no curve."""
        if self.prefill is None:
            return self.note or "no curve"
        sizes = [(r.tokens, r.prefill_ms) for r in self.rows
                 if r.prefill_ms is not None and r.prefill_ms > 0]
        medians = [ms for _, ms in sizes]
        return self.prefill.poor_fit(statistics.median(medians) if medians else None, sizes)


def _fit(points: Sequence[tuple[float, float]], metric: str) -> tuple[Curve | None, str]:
    try:
        return fit_curve([t for t, _ in points], [y for _, y in points], metric), ""
    except CurveError as exc:
        return None, str(exc)


def prefill_sweep(analysis: Analysis, prior: dict[str, Any] | None = None) -> PrefillSweep | None:
    """The curve of a sweep (a run with 2 or more prompt sizes; None otherwise). prior: a
    saved curve entry ({"curve": Curve.to_dict(), "label": ...}; header `bench.prior_curve`)."""
    sizes = [s for s in analysis.sizes if s.target is not None and s.path is None]
    if len(sizes) < 2:
        return None
    prefill_pts: list[tuple[float, float]] = []
    ttft_pts: list[tuple[float, float]] = []
    per_size = []
    for s in sizes:
        counts = []
        for r in s.ok:
            stats = r.record.stats
            if stats is None or not stats.prompt_eval_count:
                continue
            t = float(stats.prompt_eval_count)
            counts.append(t)
            if (p := r.record.metrics.prompt_eval_ms) is not None:
                prefill_pts.append((t, p))
            if (f := r.record.metrics.ttft_ms) is not None:
                ttft_pts.append((t, f))
        per_size.append((s, _median(counts)))
    prefill, note = _fit(prefill_pts, "prefill")
    ttft, _ = _fit(ttft_pts, "ttft")
    rows = tuple(
        SweepRow(
            s.target,
            t,
            len(s.ok),
            s.summaries[PROMPT_EVAL.key].median,
            prefill.predict(t) if prefill else None,
            s.summaries[TTFT.key].median,
            ttft.predict(t) if ttft else None,
            s.summaries[SERVER_DECODE.key].median,
        )
        for s, t in per_size
        if t is not None
    )
    label: str | None = None
    checks: tuple[PredictionCheck, ...] = ()
    if prior:
        try:
            saved = Curve.from_dict(prior.get("curve"))
        except CurveError as exc:
            note = f"{note}; the saved curve could not be read: {exc}".lstrip("; ")
        else:
            label = str(prior.get("label") or "your saved curve")
            checks = tuple(
                check_prediction(saved, row.tokens, row.prefill_ms)
                for row in rows
                if row.prefill_ms
            )
    return PrefillSweep(prefill, ttft, rows, note, label, checks)


def curve_checks(baseline: Analysis, other: Analysis) -> list[PredictionCheck]:
    """What `baseline`'s prefill curve (a sweep's; none: []) predicts for each prompt size of
    `other`, at its median server token count, against its median prefill (`llmtop
    compare`: how A's curve predicts B)."""
    sweep = prefill_sweep(baseline)
    if sweep is None or sweep.prefill is None:
        return []
    out = []
    for s in other.sizes:
        if s.target is None or s.path is not None:
            continue
        counts = [r.record.stats.prompt_eval_count for r in s.ok if r.record.stats]
        tokens = _median(float(c) for c in counts if c)
        measured = s.summaries[PROMPT_EVAL.key].median
        if tokens and measured:
            out.append(check_prediction(sweep.prefill, tokens, measured))
    return out


# ---------------------------------------------------------------------- the prefix cache


@dataclass(frozen=True)
class CachePair:
    """One cold/warm pair. cached_tokens: the tokens the warm request took from the cache
    beyond the cold one's (None: unknown); source: how they were known — "reported"
    (the server's cached-token count), "prompt_eval_count" (the warm count was smaller by
    that much, and by over half the shared prefix: COUNT_DROP_MIN), "inferred" (the counts
    equal or nearly so, the warm prefill faster: the shared prefix's calibrated size is
    taken, by time only), or "none" (no sign of a hit). saving_ms_per_token:
    (cold prefill − warm prefill) / cached_tokens, ms."""

    pair: int
    cold: RequestRecord = field(repr=False)
    warm: RequestRecord = field(repr=False)
    cached_tokens: int | None
    source: str

    @property
    def saving_ms_per_token(self) -> float | None:
        """Prefill saved per cached token, ms (None without both prefills or a count)."""
        c, w = self.cold.metrics.prompt_eval_ms, self.warm.metrics.prompt_eval_ms
        if c is None or w is None or not self.cached_tokens:
            return None
        return (c - w) / self.cached_tokens


def _pair_of(pair: int, cold: RequestRecord, warm: RequestRecord) -> CachePair:
    cs, ws = cold.stats, warm.stats
    if ws is not None and ws.prompt_cached_count is not None:
        extra = ws.prompt_cached_count - ((cs.prompt_cached_count or 0) if cs else 0)
        return CachePair(pair, cold, warm, extra, "reported")
    cc = cs.prompt_eval_count if cs else None
    wc = ws.prompt_eval_count if ws else None
    if cc and wc and cc - wc > COUNT_DROP_MIN * (warm.plan.prompt_tokens_target or 0):
        return CachePair(pair, cold, warm, cc - wc, "prompt_eval_count")
    cp, wp = cold.metrics.prompt_eval_ms, warm.metrics.prompt_eval_ms
    if cp and wp is not None and wp < (1 - INFERRED_MIN_SAVING) * cp:
        return CachePair(pair, cold, warm, warm.plan.prompt_tokens_target, "inferred")
    return CachePair(pair, cold, warm, None, "none")


def cache_pairs(records: Iterable[RequestRecord]) -> list[CachePair]:
    """The log's cold/warm pairs (phase "cache-cold" / "cache-warm", same `pair`), in order;
    a pair missing either request, or with one that failed, is left out."""
    cold: dict[int, RequestRecord] = {}
    out = []
    for r in records:
        if r.plan.pair is None or r.status != "ok":
            continue
        if r.phase == "cache-cold":
            cold[r.plan.pair] = r
        elif r.phase == "cache-warm" and r.plan.pair in cold:
            out.append(_pair_of(r.plan.pair, cold.pop(r.plan.pair), r))
    return out


# ---------------------------------------------------------------------- conversations


@dataclass(frozen=True)
class Turn:
    """One turn. context_tokens: the prompt the server counted (`prompt_eval_count`: the
    whole prompt, cached tokens included, on current Ollama, llama-server and the embedded
    engine; only the evaluated tokens on Ollama before v0.1.49 — docs/protocols.md); cached:
    its reported cached tokens (None: not reported); evaluated: context − cached (None
    without a cached count); predicted_ms: the sweep's prefill curve at context_tokens (a
    cold prefill); full: why the context is marked full at this turn ("" when it is not)."""

    turn: int
    record: RequestRecord = field(repr=False)
    context_tokens: int | None
    evaluated: int | None
    cached: int | None
    predicted_ms: float | None
    full: str = ""


def conversation(
    records: Iterable[RequestRecord], curve: Curve | None = None, num_ctx: int | None = None,
    phase: str = "turn",
) -> list[Turn]:
    """The turns of the log's conversation (`phase` "turn"; "turn-cold" for its replay with
    the cache defeated), in order, each judged against the one before (the context must grow
    by at least the previous answer)."""
    turns: list[Turn] = []
    prev: tuple[int, int] | None = None  # (context tokens, output tokens) of the turn before
    for r in records:
        if r.phase != phase or r.status != "ok":
            continue
        s = r.stats
        context = s.prompt_eval_count if s else None
        cached = s.prompt_cached_count if s else None
        evaluated = None if context is None or cached is None else context - cached
        out = (s.eval_count if s else None) or 0
        full = ""
        if context is not None and num_ctx and context + out >= num_ctx:
            full = f"{context} prompt + {out} output tokens reach num_ctx {num_ctx}"
        elif (
            context is not None
            and prev is not None
            and context < prev[0] + prev[1]
            and _counts_history(turns)
        ):
            full = (
                f"the server counted {context} tokens, fewer than the previous turn's "
                f"{prev[0]} + {prev[1]} answered: it cut or shifted the context"
            )
        predicted = curve.predict(context) if curve and context is not None else None
        turns.append(Turn((r.plan.index or 0) + 1, r, context, evaluated, cached, predicted, full))
        if context is not None:
            prev = (context, out)
    return turns


def _counts_history(turns: Sequence[Turn]) -> bool:
    """Whether the server counts the whole history (its count grew from turn 1 to turn 2):
    a server that counts only uncached tokens makes a falling count mean nothing."""
    if len(turns) < 2 or turns[0].context_tokens is None or turns[1].context_tokens is None:
        return False
    return turns[1].context_tokens > turns[0].context_tokens


def cache_saving(turns: Sequence[Turn], cold: Sequence[Turn]) -> dict[int, float]:
    """turn number → TTFT saved by the cache at that turn (ms): the cold replay's TTFT minus
    the conversation's, for turns measured both ways (both sent the same history and message;
    docs/guide/context.md). Negative when the cached turn was slower (noise, or no cache).
    The first turn has no history for a cache to hold: it is left out (its difference is
    the two runs' noise, once read as "saved by the cache 41.4 ms")."""
    cold_ttft = {t.turn: t.record.metrics.ttft_ms for t in cold}
    first = min((t.turn for t in turns), default=None)
    out: dict[int, float] = {}
    for t in turns:
        if t.turn == first:
            continue
        warm, c = t.record.metrics.ttft_ms, cold_ttft.get(t.turn)
        if warm is not None and c is not None:
            out[t.turn] = c - warm
    return out
