"""Over-saturation: when an open loop's latency grows without bound (pure; no I/O).

An open loop sends on its timetable whatever the engine does. Below capacity its queue is
stationary: TTFT (from the scheduled send) wanders around a level. Above capacity (arrival
rate λ beyond the service rate μ) the queue grows by (λ − μ) requests per second, so the
k-th request waits about k × (1/μ − 1/λ): TTFT rises *linearly in the send index*, without
bound. Waiting for every planned request then only measures how long the generator kept
sending; `over_saturated` says when to stop.

The rule, checked after every answered request of an open-loop level:
* the fit: TTFT from the scheduled send of the answered requests, in send order (the last
  `WINDOW` of them), against their send index; the Theil–Sen slope (the median of the
  pairwise slopes, Sen 1968, `scipy.stats.theilslopes`) with its 95 % confidence interval
  (from Kendall's tau) — robust to the odd slow request and to the step pattern of a
  multi-slot server, where least squares is pulled by outliers;
* growth is *significant*: the interval's low end is above 0 (a one-sided test at 2.5 %);
* growth is *material*: the fitted rise over the fit, slope × (n − 1), exceeds the median
  TTFT of the fit's first quarter — latency at least doubled within the window, so the
  level is not merely noisy;
* with at least `MIN_POINTS` answered requests (a Kendall-tau interval on fewer is wide
  enough to pass on chance patterns).

A closed loop is never stopped by it: its N users each wait for their own answer, so at
most N − 1 requests queue ahead of any request and its latency is bounded (its first round,
while the queue fills, looks like a ramp and must not count as one). Checking after every
request is a sequential test with many looks; the materiality term is what keeps a stable
queue from tripping it, and a level near capacity (a long busy period of a Poisson loop)
may be stopped — near saturation counted as saturation, which is what the stop is for.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from scipy.stats import theilslopes

from llmtop.sessions.records.schema import SaturationStop

MIN_POINTS = 12
WINDOW = 200  # the fit's most recent answered requests (Theil–Sen is O(n²) pairs)
CONFIDENCE = 0.95


def over_saturated(points: Sequence[tuple[int, float]], sent: int) -> SaturationStop | None:
    """The stop (SaturationStop) when `points` — (send index, TTFT from the scheduled send in
    ms) of a level's answered requests, any order — grow without bound by the module's
    rule; None while they do not (or fewer than MIN_POINTS). `sent`: requests sent so far
    (recorded in the stop)."""
    if len(points) < MIN_POINTS:
        return None
    fit = sorted(points)[-WINDOW:]
    xs = [float(k) for k, _ in fit]
    ys = [y for _, y in fit]
    slope, _intercept, low, high = theilslopes(ys, xs, CONFIDENCE)
    if not low > 0:
        return None
    rise = float(slope) * (len(fit) - 1)
    baseline = statistics.median(ys[: max(1, len(ys) // 4)])
    if rise <= baseline:
        return None
    return SaturationStop(
        sent=sent,
        n=len(fit),
        slope_ms=float(slope),
        low_ms=float(low),
        high_ms=float(high),
        rise_ms=rise,
        baseline_ms=baseline,
    )


def describe_stop(label: str, stop: SaturationStop) -> str:
    """ "level 8 req/s stopped after 31 requests: TTFT grew 25.0 ms per request (95 % CI
    24.1–25.9 ms, Theil–Sen over 12 answered requests) — over-saturated"."""
    return (
        f"level {label} stopped after {stop.sent} requests: TTFT grew {stop.slope_ms:.1f} ms "
        f"per request (95 % CI {stop.low_ms:.1f}–{stop.high_ms:.1f} ms, Theil–Sen over "
        f"{stop.n} answered requests) — over-saturated"
    )
