"""Honest statistics over a run's per-request values (pure functions).

Rules from the source documents (docs/method.md, "Statistics" and "Drift"):
* report n, median (p50), min and max;
* p95 only with at least 20 samples — below that it is the slowest request relabelled, so it
  is reported as missing with the reason "n < 20", never as the maximum;
* drift: the median of the first 5 vs the median of the last 5 values, as a signed percent
  change; a metric that *worsens* by more than 5 % marks the run contaminated. "Worse" is
  higher for times (ms) and lower for rates (tokens/s).

The drift rule (docs/method.md, "The drift rule"): a worsening counts only when it is larger
than all three of
1. the relative threshold (±5 % by default, the source's figure);
2. an absolute floor in the metric's unit (`floor`; for times, `DRIFT_FLOOR_MS`, what the
   client's clock and event loop can produce on their own);
3. what the run's own spread can produce: the first-5 and last-5 groups must differ by a
   one-sided Mann-Whitney U test at α = `DRIFT_ALPHA` (scipy.stats.mannwhitneyu, exact null
   distribution; Mann & Whitney 1947). With 5 against 5 values the smallest possible p is
   1/252 ≈ 0.004 (the groups do not overlap at all) and p < 0.05 needs U ≤ 4: at most 4 of
   the 25 (first, last) pairs may be in the "wrong" order.
A change beyond the threshold that fails 2 or 3 is shown (`beyond_threshold`, `note` says
which test it failed) but does not count (`worse` False). A change in the good direction
that passes the same three tests (the rank test mirrored) is `improved`: the run's verdict
counts it too (analysis/verdict.py: a run that gets faster was slowed at its start).
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
DRIFT_ALPHA = 0.05  # one-sided level of the first-5 vs last-5 rank test
# A TTFT is stamped when the event loop reads the chunk: on a busy machine that read can come
# a millisecond or two late (a quiet run's overhead wobbled by 3 ms around 8.7 ms).
# A time metric must move by more than this to drift, whatever its percentage.
DRIFT_FLOOR_MS = 2.0


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

    change_pct: (last − first) / first × 100, signed. beyond_threshold: the change goes in
    the bad direction by more than the relative threshold. p_value: the one-sided rank
    test's p that the last group is worse than the first (None when not computed). worse:
    the drift counts (the module docstring's three tests all passed). improved: the same
    three tests passed in the good direction (p mirrored). note: why a change
    beyond the threshold does not count, or why nothing was computed. None fields when
    there are too few values (fewer than 2 × window) or the first median is 0.
    """

    first_median: float | None
    last_median: float | None
    change_pct: float | None
    worse: bool
    note: str | None = None
    beyond_threshold: bool = False
    p_value: float | None = None
    improved: bool = False

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
        return Summary(
            n, statistics.median(xs), min(xs), max(xs), None, f"n/a (n < {P95_MIN_SAMPLES})"
        )
    return Summary(n, statistics.median(xs), min(xs), max(xs), percentile(xs, 95), None)


MEDIAN_CONFIDENCE = 0.95


def median_interval(values: Sequence[float | None], confidence: float = MEDIAN_CONFIDENCE
                    ) -> tuple[float, float] | None:
    """A distribution-free `confidence` interval of the median: the order statistics
    (x₍ₖ₎, x₍ₙ₋ₖ₊₁₎) with the largest k whose coverage, 1 − 2·P(Binomial(n, ½) ≤ k − 1),
    is at least `confidence` (the sign test's interval: it assumes no shape of the values,
    only that the requests are independent). None with too few values for any k: at 95 %
    n ≥ 6 (n = 5 covers 1 − 2/32 = 93.75 % with its min and max). None and non-finite
    values are skipped, as in `summarize`."""
    xs = sorted(_clean(values))
    n = len(xs)
    tail, found = 0.0, None
    for k in range(1, n // 2 + 1):
        tail += math.comb(n, k - 1) / 2**n  # P(Binomial(n, ½) ≤ k − 1)
        if 1 - 2 * tail < confidence:
            break
        found = k
    return None if found is None else (xs[found - 1], xs[n - found])


def drift(
    values: Sequence[float | None],
    *,
    higher_is_better: bool,
    window: int = DRIFT_WINDOW,
    threshold_pct: float = DRIFT_THRESHOLD_PCT,
    floor: float = 0.0,
    alpha: float = DRIFT_ALPHA,
) -> Drift:
    """Drift of an ordered series: median of the first `window` vs the last `window` values,
    judged by the rule in the module docstring.

    higher_is_better: True for rates (tokens/s), False for times (ms). floor: the smallest
    absolute change (in the values' unit) that can count. Needs at least 2 × window values
    (no overlap between the two windows).
    """
    xs = _clean(values)
    if len(xs) < 2 * window:
        return Drift(None, None, None, False, f"needs at least {2 * window} values, has {len(xs)}")
    head, tail = xs[:window], xs[-window:]
    first, last = statistics.median(head), statistics.median(tail)
    if first == 0:
        return Drift(first, last, None, False, "first median is 0")
    change = (last - first) / first * 100.0
    beyond = change < -threshold_pct if higher_is_better else change > threshold_pct
    if not beyond:
        gained = change > threshold_pct if higher_is_better else change < -threshold_pct
        if (gained and abs(last - first) > floor
                and worse_p_value(head, tail, not higher_is_better) < alpha):
            return Drift(first, last, change, False, improved=True)
        return Drift(first, last, change, False)
    p = worse_p_value(head, tail, higher_is_better)
    if abs(last - first) <= floor:
        note = f"a change of {abs(last - first):.3g}, within the {floor:g} floor: not counted"
        return Drift(first, last, change, False, note, True, p)
    if not p < alpha:
        note = (f"the first and last {window} overlap (rank test p = {p:.2f} ≥ {alpha:g}): "
                "within the run's own spread, not counted")
        return Drift(first, last, change, False, note, True, p)
    return Drift(first, last, change, True, None, True, p)


def worse_p_value(head: Sequence[float], tail: Sequence[float], higher_is_better: bool) -> float:
    """One-sided p of the Mann-Whitney U test that `tail` is worse than `head` (smaller for
    rates, larger for times): scipy.stats.mannwhitneyu with the exact null distribution (ties
    count one half in U, and the exact p is then approximate). 5 values against 5 that do not
    overlap give 1/252 ≈ 0.004."""
    from scipy.stats import mannwhitneyu  # imported here: ~0.3 s that only a drift check pays

    alternative = "greater" if higher_is_better else "less"  # head vs tail
    result = mannwhitneyu(head, tail, alternative=alternative, method="exact")
    return float(result.pvalue)


def better_p_value(
    values: Sequence[float | None], *, higher_is_better: bool, window: int = DRIFT_WINDOW
) -> float | None:
    """One-sided p of the rank test that the last `window` values are *better* than the first
    `window` (the mirror of `worse_p_value`: a canary part that got faster); None with fewer
    than 2 × window values (None and non-finite values are skipped, as in `drift`)."""
    xs = _clean(values)
    if len(xs) < 2 * window:
        return None
    return worse_p_value(xs[:window], xs[-window:], not higher_is_better)
