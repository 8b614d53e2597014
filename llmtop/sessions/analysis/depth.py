"""A context-depth sweep (`bench --depths`): per depth, prefill and decode with intervals.

Each depth is one of the bench's prompt sizes (measure/depths.py: a cache-busted prompt that
fills the depth), so its requests are the size's: the run's analysis (analysis/run.py) has
already set aside warm-ups, failed and excluded requests and the requests of slow episodes.
A depth's figures are its baseline's (the requests the report's "Results" are of), one row
per depth:

* tokens: the server's own count of the context (median `prompt_eval_count`: llama-server's
  `timings.prompt_n`, the OpenAI `usage.prompt_tokens`), the depth as measured rather than
  as asked (calibration lands within a few tokens of it);
* per metric of `DEPTH_METRICS` (the metric table's Carrier.DEPTH): the median and its
  distribution-free 95 % interval (measure/stats.median_interval: the sign test's order
  statistics, none below 6 requests), with n.

`compare` of two depth-sweep logs reads the same requests, grouped by depth
(analysis/compare/groups.py), for a verdict per depth.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmtop.sessions.analysis.run import Analysis, SizeAnalysis
from llmtop.sessions.measure.metrics import (
    SERVER_DECODE,
    SERVER_PREFILL,
    TPOT,
    TTFT,
    Metric,
)
from llmtop.sessions.measure.stats import MEDIAN_CONFIDENCE, median_interval

# The table's columns in the order a depth is read: how fast the context is read, how fast
# tokens come after it (as a rate and as time per token), and the wait it costs; the same
# metrics as the table's Carrier.DEPTH (tests/unit/test_depths.py holds them equal)
DEPTH_METRICS: tuple[Metric, ...] = (SERVER_PREFILL, SERVER_DECODE, TPOT, TTFT)


@dataclass(frozen=True, slots=True)
class Estimate:
    """One metric at one depth: the median of n values with its MEDIAN_CONFIDENCE interval
    (low, high; None with fewer than 6 values: `note` says so), in the metric's unit."""

    n: int
    median: float | None
    low: float | None
    high: float | None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"n": self.n, "median": self.median, "ci_low": self.low, "ci_high": self.high,
                "note": self.note}


@dataclass(frozen=True, slots=True)
class DepthRow:
    """One depth: asked (tokens), the server's median count of it (None: the server gave
    none), and an Estimate per DEPTH_METRICS key."""

    depth: int
    tokens: float | None
    estimates: dict[str, Estimate]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: depth, server_tokens and each metric by its key."""
        return {"depth": self.depth, "server_tokens": self.tokens,
                **{k: e.to_dict() for k, e in self.estimates.items()}}


def estimate(values: Sequence[float]) -> Estimate:
    """The median of `values` with its interval (see Estimate)."""
    if not values:
        return Estimate(0, None, None, None, "no ok request gave it")
    found = median_interval(values)
    note = (None if found is not None else
            f"n = {len(values)}: a {MEDIAN_CONFIDENCE * 100:g} % interval of a median needs 6 or "
            "more requests (--requests)")
    low, high = found if found is not None else (None, None)
    return Estimate(len(values), statistics.median(values), low, high, note)


def _row(size: SizeAnalysis, depth: int) -> DepthRow:
    counts = [float(r.record.stats.prompt_eval_count) for r in size.baseline
              if r.record.stats is not None and r.record.stats.prompt_eval_count]
    return DepthRow(depth, statistics.median(counts) if counts else None,
                    {m.key: estimate(size.baseline_values(m.key)) for m in DEPTH_METRICS})


def depth_sweep(analysis: Analysis) -> list[DepthRow]:
    """One row per depth of a depth sweep, in the order run; empty when the run swept no
    depths (its requests carry no `depth`: a prompt-size sweep, a dataset, a session)."""
    rows = []
    for size in analysis.sizes:
        depth = next((r.record.plan.depth for r in size.requests
                      if r.record.plan.depth is not None), None)
        if depth is not None and size.path is None:
            rows.append(_row(size, depth))
    return rows
