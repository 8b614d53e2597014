"""Analysis of a bench run from its request records alone (so a report is reproducible from
the session log): per-request bench status, per prompt size statistics, drift, verdict.

Works on the JSON request records of the log (see log.py), never on live objects.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from llmtop.sessions.stats import DRIFT_THRESHOLD_PCT, Drift, Summary, drift, sparkline, summarize

# (key in the request's "metrics", label, unit, higher_is_better)
METRICS: tuple[tuple[str, str, str, bool], ...] = (
    ("ttft_ms", "TTFT", "ms", False),
    ("e2e_ms", "E2E", "ms", False),
    ("prompt_eval_ms", "prefill", "ms", False),
    ("server_prefill_tps", "prefill", "tok/s", True),
    ("client_decode_tps", "decode (client)", "tok/s", True),
    ("server_decode_tps", "decode (server)", "tok/s", True),
    ("tpot_ms", "TPOT", "ms", False),
    ("overhead_ms", "overhead", "ms", False),
)

# Thresholds chosen by llmtop (documented in README):
TRUNCATED_FRACTION = 0.8  # evaluated < 80 % of the calibrated prompt size → the server cut it
CACHED_FRACTION = 0.25  # prefill time per token < 25 % of the run's median → a cache hit
COLD_START_MS = 1000.0  # load_duration over 1 s ...
COLD_START_FACTOR = 10.0  # ... or over 10 × the warm median (and over 50 ms) is a (re)load
COLD_START_FLOOR_MS = 50.0
TIMING_GAP_SHARE = 0.25  # total − load − prompt eval − eval over 25 % of total: timings don't add up


class BenchStatus(StrEnum):
    """A bench request's status; only OK requests enter the statistics."""

    OK = "ok"
    ERROR = "error"
    TRUNCATED = "truncated"  # the server evaluated far fewer prompt tokens than calibrated
    CACHED = "cached"  # the server evaluated far fewer tokens than sent (prefix cache)
    NO_GENERATION = "no-generation"
    DEGENERATE = "degenerate"  # < 2 output tokens or non-positive durations
    COLD_START = "cold-start"  # the model was (re)loaded inside a measured request


def _stats(record: Mapping[str, Any]) -> dict[str, Any]:
    return record.get("stats") or {}


def _metric(record: Mapping[str, Any], key: str) -> float | None:
    value = (record.get("metrics") or {}).get(key)
    return float(value) if isinstance(value, int | float) else None


def first_pass_status(record: Mapping[str, Any], expected_prompt_tokens: float | None) -> tuple[BenchStatus, str]:
    """Status of one request judged on its own (the cached and cold-start checks need the
    whole run: see `analyze`). Returns (status, reason; "" for ok)."""
    status = record.get("status")
    if status in ("error", "truncated", "cancelled"):
        return BenchStatus.ERROR, record.get("error") or f"request {status}"
    if status == "no-generation":
        return BenchStatus.NO_GENERATION, "the server loaded the model but generated nothing (done_reason load)"
    s = _stats(record)
    count = s.get("prompt_eval_count")
    if expected_prompt_tokens and count is not None and count < TRUNCATED_FRACTION * expected_prompt_tokens:
        return BenchStatus.TRUNCATED, (
            f"the server evaluated {count} prompt tokens, calibration predicts ~{expected_prompt_tokens:.0f}: "
            "it cut the prompt — raise num_ctx"
        )
    eval_count = s.get("eval_count")
    # An OpenAI-compatible server (stats `source` set) may offer no count or durations at
    # all: then the client's chunk count stands in and absent durations are n/a, not 0.
    absent_is_na = s.get("source") not in (None, "ollama")
    if eval_count is None and absent_is_na:
        eval_count = (record.get("metrics") or {}).get("output_tokens")
    if eval_count is None or eval_count < 2:
        return BenchStatus.DEGENERATE, f"{eval_count or 0} output token(s): no decode rate can be measured"
    for name in ("eval_duration", "prompt_eval_duration"):
        if absent_is_na and s.get(name) is None:
            continue
        if not s.get(name) or s[name] <= 0:
            if name == "prompt_eval_duration":
                return BenchStatus.CACHED, "no prompt evaluation time: the prompt came from the cache"
            return BenchStatus.DEGENERATE, f"{name} missing or not positive"
    return BenchStatus.OK, ""


def timing_gap_share(record: Mapping[str, Any]) -> float | None:
    """(total − load − prompt eval − eval) / total, from the server's own durations."""
    s = _stats(record)
    total = s.get("total_duration")
    if not total:
        return None
    parts = sum(s.get(k) or 0 for k in ("load_duration", "prompt_eval_duration", "eval_duration"))
    return (total - parts) / total


@dataclass
class RequestVerdict:
    """One request as the analysis sees it."""

    index: int
    phase: str  # "warmup" or "measure"
    prompt_tokens_target: int | None
    status: BenchStatus
    reason: str
    timing_gap_share: float | None
    record: Mapping[str, Any] = field(repr=False)


@dataclass
class SizeAnalysis:
    """Everything about one prompt size: requests, statistics of the OK ones, drift."""

    target: int | None
    requests: list[RequestVerdict]
    summaries: dict[str, Summary]
    drifts: dict[str, Drift]
    series: dict[str, list[float | None]]
    path: str | None = None  # "direct" / "relay" in a --compare-relay run, else None

    @property
    def ok(self) -> list[RequestVerdict]:
        """The measured requests that count."""
        return [r for r in self.requests if r.phase == "measure" and r.status == BenchStatus.OK]

    @property
    def excluded(self) -> list[RequestVerdict]:
        """Measured requests that do not count, each with its reason."""
        return [r for r in self.requests if r.phase == "measure" and r.status != BenchStatus.OK]

    @property
    def warmups(self) -> list[RequestVerdict]:
        """The warm-up requests (kept, marked, never in the statistics)."""
        return [r for r in self.requests if r.phase == "warmup"]

    @property
    def contaminated(self) -> bool:
        """True when any metric worsened by more than the drift threshold."""
        return any(d.worse for d in self.drifts.values())

    def sparkline(self, key: str) -> str:
        """The ordered per-request series of a metric as a text sparkline."""
        return sparkline(self.series.get(key, []))


@dataclass
class Analysis:
    """A whole run: one SizeAnalysis per prompt size, in the order the sizes ran."""

    sizes: list[SizeAnalysis]
    drift_threshold_pct: float
    load_requests: list[Mapping[str, Any]] = field(default_factory=list)  # phase "load" records

    @property
    def load_ms(self) -> float | None:
        """The model load the run paid (the first request's load_duration), in ms."""
        loads = [float(x) for r in self.load_requests if (x := (r.get("metrics") or {}).get("load_ms")) is not None]
        return max(loads) if loads else None

    @property
    def contaminated(self) -> bool:
        """True when any size's run drifted."""
        return any(s.contaminated for s in self.sizes)

    @property
    def judged(self) -> bool:
        """True when drift could be computed for at least one metric of one size (it needs
        2 × 5 ok requests); otherwise a clean verdict would claim what was never checked."""
        return any(d.change_pct is not None for s in self.sizes for d in s.drifts.values())

    @property
    def verdict(self) -> str:
        """"contaminated", "clean", or "inconclusive" (too few ok requests to judge drift)."""
        if self.contaminated:
            return "contaminated"
        return "clean" if self.judged else "inconclusive"

    @property
    def ok_count(self) -> int:
        """Requests that entered the statistics."""
        return sum(len(s.ok) for s in self.sizes)

    @property
    def timing_warnings(self) -> list[RequestVerdict]:
        """OK requests whose server timings do not add up (a large unexplained share)."""
        return [
            r for s in self.sizes for r in s.ok if r.timing_gap_share is not None and r.timing_gap_share > TIMING_GAP_SHARE
        ]


def analyze(
    records: Iterable[Mapping[str, Any]],
    expected_tokens: Mapping[int, float] | None = None,
    drift_threshold_pct: float = DRIFT_THRESHOLD_PCT,
) -> Analysis:
    """Analyse bench request records (`type == "request"` with `phase`, `index`,
    `prompt_tokens_target`); `expected_tokens` maps a target to the calibrated token count."""
    expected_tokens = expected_tokens or {}
    by_size: dict[tuple[int | None, str | None], list[RequestVerdict]] = {}
    load_requests = []
    for rec in records:
        if rec.get("type") != "request":
            continue
        if rec.get("phase") == "load":
            load_requests.append(rec)
            continue
        target = rec.get("prompt_tokens_target")
        status, reason = first_pass_status(rec, expected_tokens.get(target) if target else None)
        verdict = RequestVerdict(
            index=int(rec.get("index", rec.get("id", 0))),
            phase=str(rec.get("phase", "measure")),
            prompt_tokens_target=target,
            status=status,
            reason=reason,
            timing_gap_share=timing_gap_share(rec),
            record=rec,
        )
        by_size.setdefault((target, rec.get("path")), []).append(verdict)
    sizes = [_analyze_size(key[0], reqs, drift_threshold_pct, key[1]) for key, reqs in by_size.items()]
    return Analysis(sizes=sizes, drift_threshold_pct=drift_threshold_pct, load_requests=load_requests)


def _analyze_size(
    target: int | None, requests: list[RequestVerdict], threshold: float, path: str | None = None
) -> SizeAnalysis:
    measured = [r for r in requests if r.phase == "measure" and r.status == BenchStatus.OK]
    _mark_cold_starts(measured)
    _mark_cached(measured)
    ok = [r for r in measured if r.status == BenchStatus.OK]
    series = {key: [_metric(r.record, key) for r in ok] for key, *_ in METRICS}
    summaries = {key: summarize(values) for key, values in series.items()}
    drifts = {
        key: drift(series[key], higher_is_better=better, threshold_pct=threshold) for key, _l, _u, better in METRICS
    }
    return SizeAnalysis(target=target, requests=requests, summaries=summaries, drifts=drifts, series=series, path=path)


def _mark_cold_starts(requests: list[RequestVerdict]) -> None:
    loads = [(_stats(r.record).get("load_duration") or 0) / 1e6 for r in requests]
    if not loads:
        return
    warm = statistics.median(loads)
    for r, load in zip(requests, loads, strict=True):
        if load > COLD_START_MS or (load > COLD_START_FLOOR_MS and load > COLD_START_FACTOR * warm):
            r.status = BenchStatus.COLD_START
            r.reason = f"load_duration {load:.0f} ms (warm median {warm:.1f} ms): the model was (re)loaded"


def _mark_cached(requests: list[RequestVerdict]) -> None:
    per_token = {}
    for r in requests:
        s = _stats(r.record)
        if s.get("prompt_eval_count") and s.get("prompt_eval_duration"):
            per_token[id(r)] = s["prompt_eval_duration"] / s["prompt_eval_count"]
    if len(per_token) < 3:
        return
    median = statistics.median(per_token.values())
    for r in requests:
        value = per_token.get(id(r))
        if value is not None and value < CACHED_FRACTION * median:
            r.status = BenchStatus.CACHED
            r.reason = (
                f"prefill took {value / 1e6:.3f} ms/token, under {CACHED_FRACTION:.0%} of the run's median "
                f"{median / 1e6:.3f} ms/token: most of the prompt came from the cache"
            )
