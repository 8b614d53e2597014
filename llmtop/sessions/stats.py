"""Honest statistics over a run's per-request values (pure functions).

Rules from the source documents (docs/method.md, "Statistics" and "Drift"):
* report n, median (p50), min and max;
* p95 only with at least 20 samples — below that it is the slowest request relabelled, so it
  is reported as missing with the reason "n < 20", never as the maximum;
* drift: the median of the first 5 vs the median of the last 5 values, as a signed percent
  change; a metric that *worsens* by more than 5 % marks the run contaminated. "Worse" is
  higher for times (ms) and lower for rates (tokens/s).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

P95_MIN_SAMPLES = 20
DRIFT_WINDOW = 5
DRIFT_THRESHOLD_PCT = 5.0


@dataclass(frozen=True, slots=True)
class Summary:
    """n, median, min, max and p95 of one metric. p95 is None when n < 20 (`p95_note` says
    why); every statistic is None when n == 0. Values keep the metric's unit."""

    n: int
    median: float | None
    min: float | None
    max: float | None
    p95: float | None
    p95_note: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Drift:
    """First-5 vs last-5 medians of one metric, in order of the requests.

    change_pct: (last − first) / first × 100, signed. worse: the change goes in the bad
    direction by more than the threshold. None fields when there are too few values
    (fewer than 2 × window) or the first median is 0.
    """

    first_median: float | None
    last_median: float | None
    change_pct: float | None
    worse: bool
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def _clean(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation between closest ranks
    (numpy's default "linear" method). Raises ValueError on an empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def summarize(values: Sequence[float | None]) -> Summary:
    """Summary of the values that are present (None and non-finite values are skipped)."""
    xs = _clean(values)
    n = len(xs)
    if n == 0:
        return Summary(0, None, None, None, None, "no samples")
    if n < P95_MIN_SAMPLES:
        return Summary(n, statistics.median(xs), min(xs), max(xs), None, f"n/a (n < {P95_MIN_SAMPLES})")
    return Summary(n, statistics.median(xs), min(xs), max(xs), percentile(xs, 95), None)


def drift(
    values: Sequence[float | None],
    *,
    higher_is_better: bool,
    window: int = DRIFT_WINDOW,
    threshold_pct: float = DRIFT_THRESHOLD_PCT,
) -> Drift:
    """Drift of an ordered series: median of the first `window` vs the last `window` values.

    higher_is_better: True for rates (tokens/s), False for times (ms).
    Needs at least 2 × window values (no overlap between the two windows).
    """
    xs = _clean(values)
    if len(xs) < 2 * window:
        return Drift(None, None, None, False, f"needs at least {2 * window} values, has {len(xs)}")
    first = statistics.median(xs[:window])
    last = statistics.median(xs[-window:])
    if first == 0:
        return Drift(first, last, None, False, "first median is 0")
    change = (last - first) / first * 100.0
    worse = change < -threshold_pct if higher_is_better else change > threshold_pct
    return Drift(first, last, change, worse)
