"""A watch log (`llmtop watch`, kind "watch") grouped by caller and model: what each app's
requests to each model cost.

Per group: the requests and how they ended, and over its ok requests the median and p95 (p95
from 20 requests: stats.summarize) of TTFT, TPOT and E2E, the median client and server
decode rates and the server's prefill rate, the prompt tokens' median, the share of prompt
tokens the engine served from its cache (Σ cached / Σ prompt over the requests that report
both: llama.cpp's cache_n, OpenAI's cached_tokens; Ollama reports none), and how many ran
while the machine was NOISY (the request's own verdict, sessions/runners/watch/session.py).
Groups are ordered by their request count, most first.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from llmtop.engines.events import Status
from llmtop.sessions.analysis.run import cold_starts
from llmtop.sessions.measure.metrics import (
    CLIENT_DECODE,
    E2E,
    SERVER_DECODE,
    SERVER_PREFILL,
    TPOT,
    TTFT,
    Metric,
)
from llmtop.sessions.measure.stats import Summary, summarize
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import RunLog

UNKNOWN_CALLER = "unknown caller"


@dataclass(frozen=True)
class WatchGroup:
    """One (caller, model) group; times in ms, rates in tokens/s, None where n/a."""

    caller: str
    model: str
    requests: int
    statuses: dict[str, int]
    ttft: Summary
    tpot: Summary
    e2e: Summary
    decode_tps: float | None
    server_decode_tps: float | None
    server_prefill_tps: float | None
    prompt_tokens: float | None
    cached_pct: float | None
    noisy: int
    endpoints: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """"caller · model" (how `compare` pairs groups)."""
        return f"{self.caller} · {self.model}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"caller": self.caller, "model": self.model, "requests": self.requests,
                "statuses": self.statuses, TTFT.key: self.ttft.to_dict(),
                TPOT.key: self.tpot.to_dict(), E2E.key: self.e2e.to_dict(),
                "decode_tps": self.decode_tps, SERVER_DECODE.key: self.server_decode_tps,
                SERVER_PREFILL.key: self.server_prefill_tps,
                "prompt_tokens": self.prompt_tokens, "cached_pct": self.cached_pct,
                "noisy": self.noisy, "endpoints": list(self.endpoints)}


@dataclass(frozen=True)
class WatchAnalysis:
    """A watch log's groups, with the log (header: the listen → upstream pairs)."""

    log: RunLog
    groups: list[WatchGroup] = field(default_factory=list)


def group_key(record: RequestRecord) -> tuple[str, str]:
    """(caller, model) of a watched request ("unknown caller", "?" when absent)."""
    return record.watch.caller or UNKNOWN_CALLER, record.model or "?"


def _median(values: list[float]) -> float | None:
    return summarize(values).median


def group(records: list[RequestRecord], caller: str, model: str) -> WatchGroup:
    """The figures of one group's records (module docstring). A request that paid a model
    load (`run.cold_starts` over the group's loads, as everywhere) is counted "cold-start"
    and left out of the figures (a 457 ms load in one of two
    requests made the TTFT p50 268.4 ms, no mark)."""
    answered = [r for r in records if r.status == Status.OK]
    loads = [(r.stats.load_duration or 0) / 1e6 if r.stats else 0.0 for r in answered]
    cold = {id(r) for r, (is_cold, _) in zip(answered, cold_starts(loads), strict=True)
            if is_cold}
    ok = [r for r in answered if id(r) not in cold]

    def values(metric: Metric) -> list[float]:
        return [v for r in ok if (v := r.metric(metric.key)) is not None]

    both = [(r.stats.prompt_cached_count, r.stats.prompt_eval_count) for r in records
            if r.stats is not None and r.stats.prompt_cached_count is not None
            and r.stats.prompt_eval_count]
    cached = (100 * sum(c for c, _ in both) / sum(p for _, p in both)) if both else None
    prompts = [float(r.stats.prompt_eval_count) for r in ok
               if r.stats is not None and r.stats.prompt_eval_count is not None]
    return WatchGroup(
        caller, model, len(records),
        dict(Counter("cold-start" if id(r) in cold else str(r.status) for r in records)),
        summarize(values(TTFT)), summarize(values(TPOT)), summarize(values(E2E)),
        _median(values(CLIENT_DECODE)), _median(values(SERVER_DECODE)),
        _median(values(SERVER_PREFILL)), _median(prompts),
        None if cached is None else round(cached, 1),
        sum(1 for r in records if r.watch.probe_verdict == "NOISY"),
        tuple(sorted({r.watch.endpoint for r in records if r.watch.endpoint})))


def analyze_watch(log: RunLog) -> WatchAnalysis:
    """Group a watch log's requests by caller and model."""
    by: dict[tuple[str, str], list[RequestRecord]] = {}
    for record in log.requests:
        by.setdefault(group_key(record), []).append(record)
    groups = [group(recs, *key) for key, recs in by.items()]
    groups.sort(key=lambda g: (-g.requests, g.label))
    return WatchAnalysis(log, groups)
