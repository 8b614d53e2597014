"""A run in another tool's metric definitions (`llmtop report LOG --as TOOL`; pure).

Every tool names TTFT, TPOT and ITL, and each computes them its own way, so the same stream
gives different numbers. llmtop's log keeps every chunk's arrival (offset from the send,
empty chunks included: `RequestRecord.chunks`), the done stamp (E2E) and the server's token
count, which is enough to recompute each tool's figures for each request. The definitions,
read from each tool's public code and docs (docs/guide/peers.md cites them):

* llmtop (docs/method.md): TTFT = send → first chunk with text (answer or thinking);
  TPOT = (E2E − TTFT) / (n − 1), n = the server's token count; ITL = gaps between text chunks;
  E2E = send → done.
* vllm (`vllm bench serve`, openai-chat backend): TTFT = send → the first chunk carrying
  `choices`, *whatever its content* — the role-only first chunk counts; ITL = gaps between
  all successive such chunks; latency = send → the last such chunk; TPOT = (latency − TTFT) /
  (n − 1).
* aiperf (NVIDIA AIPerf): TTFT = send → the first response with content (empty ones are
  disregarded; reasoning text counts); request latency = send → the final response; ITL =
  (request latency − TTFT) / (n − 1) — what the others call TPOT; AIPerf has no separate
  TPOT, so it is ITL's.
* guidellm (0.8): TTFT = send → first token (first chunk with text); TPOT = (last token −
  send) / n — *the whole request to its last token, TTFT included, over all n tokens*;
  ITL = (last token − first token) / (n − 1); request latency = send → end.
* llama-server (its `timings`): TTFT = prompt_ms, per-token = predicted_ms / predicted_n — a
  span of n − 1 gaps divided by n (slightly optimistic, by (n − 1) / n); server clock, so
  no network. From the record's server stats (prompt eval and eval durations and counts).

n is the server's output-token count (`metrics.output_tokens`); where the engine reported
none, llmtop's count of text chunks stands in (its `tokens_basis` says so).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from llmtop.sessions.measure.metrics import E2E, ITL, TPOT, TTFT
from llmtop.sessions.records.request import RequestRecord

NS_PER_MS = 1e6


@dataclass(frozen=True, slots=True)
class PeerMetrics:
    """One request in one tool's definitions, ms (None: n/a under that tool's rules). itl:
    the request's mean ITL (a tool reporting a list, vllm, is averaged per request)."""

    ttft_ms: float | None
    tpot_ms: float | None
    itl_ms: float | None
    e2e_ms: float | None


def _ms(ns: float) -> float:
    return ns / NS_PER_MS


def _text_offsets(r: RequestRecord) -> list[int]:
    return [c[0] for c in r.chunks if c[1] or c[2]]


def _per_token(span_ms: float | None, n: int | None, minus: int) -> float | None:
    if span_ms is None or n is None or n - minus < 1:
        return None
    return span_ms / (n - minus)


def as_llmtop(r: RequestRecord) -> PeerMetrics:
    """llmtop's own figures (the record's metrics; its ITL list averaged)."""
    m = r.metrics
    itl = statistics.fmean(m.itl_ms) if m.itl_ms else None
    return PeerMetrics(m.ttft_ms, m.tpot_ms, itl, m.e2e_ms)


def as_vllm(r: RequestRecord) -> PeerMetrics:
    """`vllm bench serve`'s: every chunk counts, the role-only first one included."""
    offsets = [c[0] for c in r.chunks]
    if not offsets:
        return PeerMetrics(None, None, None, None)
    ttft, latency = _ms(offsets[0]), _ms(offsets[-1])
    gaps = [_ms(b - a) for a, b in pairwise(offsets)]
    tpot = _per_token(latency - ttft, r.metrics.output_tokens, 1)
    return PeerMetrics(ttft, tpot, statistics.fmean(gaps) if gaps else None, latency)


def as_aiperf(r: RequestRecord) -> PeerMetrics:
    """AIPerf's: TTFT at the first response with content, ITL over the rest of the request."""
    text = _text_offsets(r)
    e2e = r.metrics.e2e_ms
    if not text or e2e is None:
        return PeerMetrics(None, None, None, e2e)
    ttft = _ms(text[0])
    itl = _per_token(e2e - ttft, r.metrics.output_tokens, 1)
    return PeerMetrics(ttft, itl, itl, e2e)


def as_guidellm(r: RequestRecord) -> PeerMetrics:
    """GuideLLM's: TPOT from the send to the last token over n tokens (TTFT included), ITL
    from the first token to the last over n − 1."""
    text = _text_offsets(r)
    if not text:
        return PeerMetrics(None, None, None, r.metrics.e2e_ms)
    n = r.metrics.output_tokens
    return PeerMetrics(_ms(text[0]), _per_token(_ms(text[-1]), n, 0),
                       _per_token(_ms(text[-1] - text[0]), n, 1), r.metrics.e2e_ms)


def as_llama_server(r: RequestRecord) -> PeerMetrics:
    """llama-server's `timings`: prompt_ms, predicted_ms / predicted_n (server clock)."""
    s = r.stats
    if s is None:
        return PeerMetrics(None, None, None, None)
    prompt = None if s.prompt_eval_duration is None else _ms(s.prompt_eval_duration)
    decode = None if s.eval_duration is None else _ms(s.eval_duration)
    per_token = _per_token(decode, s.eval_count, 0)
    e2e = None if prompt is None or decode is None else prompt + decode
    return PeerMetrics(prompt, per_token, per_token, e2e)


TOOLS: dict[str, Callable[[RequestRecord], PeerMetrics]] = {
    "llmtop": as_llmtop,
    "vllm": as_vllm,
    "aiperf": as_aiperf,
    "guidellm": as_guidellm,
    "llama-server": as_llama_server,
}

DEFINITIONS: dict[str, dict[str, str]] = {
    "llmtop": {
        "TTFT": "send → first chunk with text",
        "TPOT": "(E2E − TTFT) / (n − 1)",
        "ITL": "mean gap between text chunks",
        "E2E": "send → done",
    },
    "vllm": {
        "TTFT": "send → first chunk with `choices` (the role-only chunk counts)",
        "TPOT": "(latency − TTFT) / (n − 1)",
        "ITL": "mean gap between all chunks",
        "E2E": "send → last chunk with `choices`",
    },
    "aiperf": {
        "TTFT": "send → first response with content",
        "TPOT": "AIPerf has none: its ITL",
        "ITL": "(request latency − TTFT) / (n − 1)",
        "E2E": "send → final response",
    },
    "guidellm": {
        "TTFT": "send → first token",
        "TPOT": "(last token − send) / n (TTFT and the first token included)",
        "ITL": "(last token − first token) / (n − 1)",
        "E2E": "send → end",
    },
    "llama-server": {
        "TTFT": "prompt_ms (server clock, no network)",
        "TPOT": "predicted_ms / predicted_n (n − 1 gaps over n)",
        "ITL": "the same per-token figure",
        "E2E": "prompt_ms + predicted_ms",
    },
}


@dataclass(frozen=True)
class PeerSummary:
    """A tool's figures over a run's ok measured requests: n, and per metric the median and
    the mean (ms; None when no request has it); `llmtop`: llmtop's own, for the difference."""

    tool: str
    n: int
    median: dict[str, float | None]
    mean: dict[str, float | None]


METRICS = (TTFT, TPOT, ITL, E2E)  # what other tools define; PeerMetrics' fields by key


def summarize(records: Iterable[RequestRecord], tool: str) -> PeerSummary:
    """The ok measured requests of `records` in `tool`'s definitions (TOOLS). Raises
    KeyError for an unknown tool (the CLI offers only TOOLS)."""
    convert = TOOLS[tool]
    rows = [convert(r) for r in records if r.status == "ok" and r.measured]
    median: dict[str, float | None] = {}
    mean: dict[str, float | None] = {}
    for metric in METRICS:
        xs = [v for row in rows if (v := getattr(row, metric.key)) is not None]
        median[metric.key] = statistics.median(xs) if xs else None
        mean[metric.key] = statistics.fmean(xs) if xs else None
    return PeerSummary(tool, len(rows), median, mean)


def compare(records: Sequence[RequestRecord], tool: str) -> tuple[PeerSummary, PeerSummary]:
    """(`tool`'s summary, llmtop's) over the same requests."""
    return summarize(records, tool), summarize(records, "llmtop")
