"""One metric of two runs compared: the ratio of medians, its interval, and its verdict.

`ratio_test`: the medians of both samples, the ratio median(B) / median(A) with a 95 %
confidence interval from scipy's bootstrap (requests resampled within each run, seeded),
and scipy's Mann-Whitney U test. A difference is *significant* when the interval excludes 1
and the test's p-value is under ALPHA: both must agree, so equal runs read "no significant
difference" at least 1 − ALPHA of the time (tests/unit/test_compare.py checks it over seeded
trials). `judge` puts one metric's test in words ("B is 1.31× faster …") and says whether
it is a regression. compare.py compares whole runs with these; analysis/compare/runs.py and
analysis/compare/energy.py reuse the test's constants and types.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmtop.sessions.measure.metrics import DEFAULT_THRESHOLD_PCT, Metric

if TYPE_CHECKING:
    import numpy as np

ALPHA = 0.05  # two-sided: a 95 % interval and a 5 % test
CONFIDENCE = 1 - ALPHA
N_RESAMPLES = 4999  # bootstrap resamples: the interval's ends move < 1 % between seeds at n=20
MIN_OK = 5  # ok requests per run and group below which no comparison is made (drift's window)
DEFAULT_SEED = 0


@dataclass(frozen=True, slots=True)
class RatioTest:
    """median(B) / median(A) of one metric, with its bootstrap interval and the U test.

    n_a / n_b: values on each side. ci_low / ci_high: the CONFIDENCE interval of the ratio
    (percentile bootstrap over requests, `N_RESAMPLES`, seeded). p_value: Mann-Whitney U,
    two-sided.
    """

    n_a: int
    n_b: int
    median_a: float
    median_b: float
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float

    @property
    def significant(self) -> bool:
        """The interval excludes 1 and p < ALPHA."""
        return (self.ci_low > 1 or self.ci_high < 1) and self.p_value < ALPHA

    def ratio_ci_text(self) -> str:
        """"1.02, 0.97–1.08": the ratio and its interval."""
        return f"{self.ratio:.2f}, {self.ci_low:.2f}–{self.ci_high:.2f}"


def _median_ratio(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any], axis: int) -> Any:
    import numpy as np

    return np.median(y, axis=axis) / np.median(x, axis=axis)


def ratio_test(a: Sequence[float], b: Sequence[float], seed: int = DEFAULT_SEED) -> RatioTest:
    """Compare two samples of one positive metric (any unit, the same for both).

    Raises ValueError when either has fewer than MIN_OK values or a median that is not
    positive (a ratio of medians needs both above 0). The interval comes from
    `scipy.stats.bootstrap` (independent samples, percentile method: BCa's jackknife fails on
    the flat resample distribution a median of few values has); the test from
    `scipy.stats.mannwhitneyu`.
    """
    # Imported here: the CLI reads this module's names for its flags on every start, and
    # scipy.stats takes about half a second to import.
    import numpy as np
    from scipy import stats as sps

    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if min(len(xa), len(xb)) < MIN_OK:
        raise ValueError(f"too few values ({len(xa)} and {len(xb)}; at least {MIN_OK} each)")
    med_a, med_b = float(np.median(xa)), float(np.median(xb))
    if med_a <= 0 or med_b <= 0:
        raise ValueError(f"medians must be positive for a ratio (got {med_a:g} and {med_b:g})")
    if np.ptp(xa) == 0 and np.ptp(xb) == 0:  # constant samples: no spread to resample
        low = high = med_b / med_a
    else:
        res = sps.bootstrap((xa, xb), _median_ratio, n_resamples=N_RESAMPLES, vectorized=True,
                            paired=False, confidence_level=CONFIDENCE, method="percentile",
                            rng=np.random.default_rng(seed))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    p = float(sps.mannwhitneyu(xa, xb, alternative="two-sided").pvalue)
    return RatioTest(len(xa), len(xb), med_a, med_b, med_b / med_a, low, high,
                     1.0 if math.isnan(p) else p)


@dataclass(frozen=True, slots=True)
class MetricComparison:
    """One metric in one group (prompt size): the test, its verdict line, and whether B
    regressed. test is None when a side had fewer than MIN_OK values (verdict says so).
    speedup: how many times faster B is (> 1 faster, < 1 slower; ms metrics are inverted so
    that faster is always > 1), with speedup_low / speedup_high its interval."""

    metric: Metric
    group: str
    n_a: int
    n_b: int
    test: RatioTest | None
    verdict: str
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    regression: bool = False

    @property
    def significant(self) -> bool:
        """A significant difference either way."""
        return self.test is not None and self.test.significant


def judge(metric: Metric, group: str, a: Sequence[float], b: Sequence[float],
          threshold_pct: float = DEFAULT_THRESHOLD_PCT, seed: int = DEFAULT_SEED,
          tester: Callable[[], RatioTest] | None = None) -> MetricComparison:
    """The comparison of one metric in one group, in words: "B is 1.31× faster (95 % CI
    1.24–1.38)", "B is 1.20× slower (…)", "no significant difference (…)", or "too few ok
    requests …". A regression is a significant slowdown by more than threshold_pct %.
    tester: the test to make instead of `ratio_test(a, b)` (compare_runs.runs_ratio_test
    over a set of runs; it raises ValueError for too few)."""
    if tester is None and min(len(a), len(b)) < MIN_OK:
        return MetricComparison(metric, group, len(a), len(b), None, (
            f"too few ok requests to compare (A {len(a)}, B {len(b)}; at least {MIN_OK} each)"))
    try:
        t = tester() if tester is not None else ratio_test(a, b, seed)
    except ValueError as exc:
        return MetricComparison(metric, group, len(a), len(b), None, f"not compared: {exc}")
    if metric.higher_is_better:
        speed, low, high = t.ratio, t.ci_low, t.ci_high
    else:
        speed, low, high = 1 / t.ratio, 1 / t.ci_high, 1 / t.ci_low
    ci = f"{CONFIDENCE:.0%} CI".replace("%", " %")
    if not t.significant:
        verdict = f"no significant difference ({ci} of B/A {t.ratio_ci_text()}, p={t.p_value:.2g})"
    elif speed >= 1:
        verdict = f"B is {speed:.2f}× faster ({ci} {low:.2f}–{high:.2f})"
    else:
        verdict = f"B is {1 / speed:.2f}× slower ({ci} {1 / high:.2f}–{1 / low:.2f})"
    regression = t.significant and speed < 1 and (1 / speed - 1) * 100 > threshold_pct
    return MetricComparison(metric, group, t.n_a, t.n_b, t, verdict, speed, low, high, regression)
