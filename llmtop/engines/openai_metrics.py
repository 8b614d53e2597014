"""vLLM's Prometheus `/metrics` as per-request server figures (docs/protocols.md,
"OpenAI-compatible servers: vLLM").

vLLM streams only `usage` (counts), but its `/metrics` keeps histograms of each request's
phases: `vllm:request_prefill_time_seconds`, `vllm:request_decode_time_seconds` and
`vllm:e2e_request_latency_seconds`. Each histogram's `_sum` grows by the request's own time
and `_count` by one when a request finishes, so the difference between a scrape before a
request and one after it is that request's prefill, decode and total time — provided exactly
one request finished in between. When another client's request finished too (a count grew by
more than one) the difference mixes requests, and the figures are left out (n/a).

The text is parsed by `prometheus_client`'s parser (the reference implementation), never by
hand. Scrapes happen outside the measured span: after the stream's done event is stamped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 1.0
# ServerStats field ← vLLM histogram (seconds)
HISTOGRAMS = {
    "prompt_eval_duration": "vllm:request_prefill_time_seconds",
    "eval_duration": "vllm:request_decode_time_seconds",
    "total_duration": "vllm:e2e_request_latency_seconds",
}
NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Scrape:
    """One reading of the histograms: name → (sum in seconds, count), over all label sets."""

    totals: Mapping[str, tuple[float, float]]


def parse_metrics(text: str) -> Scrape:
    """The `_sum` and `_count` of each histogram in HISTOGRAMS, summed over their labels
    (one per served model). Raises ValueError for text that is not Prometheus' format."""
    wanted = set(HISTOGRAMS.values())
    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in wanted:
            continue
        acc = totals.setdefault(family.name, [0.0, 0.0])
        for sample in family.samples:
            if sample.name == f"{family.name}_sum":
                acc[0] += sample.value
            elif sample.name == f"{family.name}_count":
                acc[1] += sample.value
    return Scrape({name: (v[0], v[1]) for name, v in totals.items()})


def request_durations(before: Scrape, after: Scrape) -> dict[str, int]:
    """ServerStats durations in ns of the one request that finished between two scrapes:
    {"prompt_eval_duration": …, "eval_duration": …, "total_duration": …}, each present only
    when its histogram's count grew by exactly one."""
    out = {}
    for field, name in HISTOGRAMS.items():
        if name not in before.totals or name not in after.totals:
            continue
        (sum0, count0), (sum1, count1) = before.totals[name], after.totals[name]
        if count1 - count0 == 1 and sum1 >= sum0:
            out[field] = round((sum1 - sum0) * NS_PER_S)
    return out


async def scrape(client: httpx.AsyncClient, root: str) -> Scrape | None:
    """`GET {root}/metrics` parsed, or None when it is not there or not Prometheus text."""
    try:
        resp = await client.get(f"{root}/metrics", timeout=SCRAPE_TIMEOUT_S)
        if resp.status_code != 200:
            return None
        return parse_metrics(resp.text)
    except (httpx.HTTPError, ValueError):
        return None
