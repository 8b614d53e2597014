"""SLO search: the highest concurrency (closed loop) or rate (open loop) that meets an SLO,
by bisection (pure; no I/O — the runner, runners/load/search.py, runs the points).

A *point* (one level) meets the SLO when at least ATTAINMENT (90 %, slo.py) of its requests
meet every term — the knee's rule (analysis/load.py). A share measured on n requests is
uncertain, so each point is judged by the 95 % Wilson score interval of its share (Wilson
1927; the interval Brown, Cai & DasGupta 2001 recommend for small n, where the normal
approximation undercovers near 0 and 1; `scipy.stats.binomtest(...).proportion_ci`):
* "meets" when the interval's low end is ≥ ATTAINMENT, "misses" when its high end is below;
* otherwise the point is *repeated* — another batch of the level's requests, the interval
  taken over all of them — until it is decided or MAX_REPEATS batches ran ("undecided",
  bisected as a miss: the answer is the highest point *shown* to meet the SLO);
* a level the over-saturation rule stopped (analysis/saturation.py) misses: its latency was
  growing without bound.
All requests meeting gives the low end n / (n + z²), z = 1.96: ≥ 0.90 needs n ≥ 35.

The bisection: the low bound (the lowest level given) must meet and the high bound (the
highest) must miss, or the answer is "none meets" / "at least the high bound". Then the
midpoint of the bracket (concurrency: ⌊(lo + hi) / 2⌋; rate: (lo + hi) / 2 to 3 significant
digits) is tried and replaces the bound it agrees with, until the bracket is one user wide
(the answer is exact) or, for a rate, hi / lo ≤ 1 + RATE_RESOLUTION. The answer is `lo`;
its uncertainty is the bracket [lo, hi) and lo's and hi's intervals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from scipy.stats import binomtest

from llmtop.sessions.measure.slo import ATTAINMENT, Slo

CONFIDENCE = 0.95
MAX_REPEATS = 5  # batches per point before it is called undecided
RATE_RESOLUTION = 0.10  # an open loop's bracket is narrow enough when hi / lo ≤ 1.10

Outcome = Literal["meets", "misses", "undecided"]


def wilson(met: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval (low, high) of a share met / n; (0, 1) for n = 0. Raises
    ValueError when met is outside 0..n."""
    if n == 0:
        return 0.0, 1.0
    if not 0 <= met <= n:
        raise ValueError(f"{met} of {n} requests cannot meet the SLO")
    ci = binomtest(met, n).proportion_ci(confidence, method="wilson")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class PointVerdict:
    """One point of the search: value (users or req/s), requests judged, met (requests that
    met every SLO term), the share's Wilson interval, repeats (batches run), stopped (the
    over-saturation stop ended it), outcome."""

    value: float
    requests: int
    met: int
    low: float
    high: float
    repeats: int
    stopped: bool
    outcome: Outcome

    @property
    def share(self) -> float:
        """met / requests (0 without requests)."""
        return self.met / self.requests if self.requests else 0.0

    def describe(self) -> str:
        """ "meets: 100% of 36 (95 % CI 90.4%–100.0%)"."""
        why = ", stopped: over-saturated" if self.stopped else ""
        return (
            f"{self.outcome}: {self.share:.0%} of {self.requests} "
            f"(95 % CI {self.low:.1%}–{self.high:.1%}){why}"
        )


def judge(value: float, met: int, requests: int, repeats: int = 1,
          stopped: bool = False) -> PointVerdict:
    """The verdict on a point from its counts (module docstring's rule); the runner repeats
    a point while its outcome is "undecided" and fewer than MAX_REPEATS batches ran."""
    low, high = wilson(met, requests)
    outcome: Outcome
    if stopped or high < ATTAINMENT:
        outcome = "misses"
    elif low >= ATTAINMENT:
        outcome = "meets"
    else:
        outcome = "undecided"
    return PointVerdict(value, requests, met, low, high, repeats, stopped, outcome)


@dataclass
class SloSearch:
    """The bisection's state: `next_value()` says which point to run (None: done), `add()`
    takes its verdict. mode: "concurrency" or "rate"; low/high: the bounds (low < high).
    Raises ValueError for bounds out of order or a fractional concurrency."""

    mode: str
    low: float
    high: float
    points: list[PointVerdict] = field(default_factory=list)
    lo: float | None = None  # highest value shown to meet
    hi: float | None = None  # lowest value that misses

    def __post_init__(self) -> None:
        if not 0 < self.low < self.high:
            raise ValueError("an SLO search needs two bounds, low < high (e.g. 1,16)")
        if self.mode == "concurrency" and (self.low != int(self.low) or
                                           self.high != int(self.high)):
            raise ValueError("concurrency bounds must be whole numbers")

    def next_value(self) -> float | None:
        """The next point to run, or None when the search is over."""
        if not self.points:
            return self.low
        if self.lo is None:
            return None  # the low bound missed: nothing meets
        if self.hi is None:
            return self.high if len(self.points) == 1 else None  # at least the high bound
        if self.mode == "concurrency":
            if self.hi - self.lo <= 1:
                return None
            return float((int(self.lo) + int(self.hi)) // 2)
        if self.hi / self.lo <= 1 + RATE_RESOLUTION:
            return None
        return _round3((self.lo + self.hi) / 2)

    def add(self, verdict: PointVerdict) -> None:
        """Record a point's verdict ("undecided" counts as a miss)."""
        self.points.append(verdict)
        if verdict.outcome == "meets":
            self.lo = verdict.value
        elif self.hi is None or verdict.value < self.hi:
            self.hi = verdict.value

    def result(self, slo: Slo) -> SearchResult:
        """The answer so far (final once `next_value()` is None)."""
        return SearchResult.of(self, slo)


def _round3(x: float) -> float:
    digits = 2 - math.floor(math.log10(abs(x)))
    return round(x, max(0, digits))


@dataclass(frozen=True)
class SearchResult:
    """The search's answer: `answer` (the highest value shown to meet the SLO; None when even
    the low bound missed), `above` (the lowest value that missed; None when the high bound
    met), whether the bracket is closed (`exact`: one user apart, or within the rate
    resolution), the points in the order run, and one sentence."""

    mode: str
    answer: float | None
    above: float | None
    exact: bool
    points: tuple[PointVerdict, ...]
    sentence: str
    rule: str

    @classmethod
    def of(cls, search: SloSearch, slo: Slo) -> SearchResult:
        """From a search's state (see SloSearch.result)."""
        unit = "users" if search.mode == "concurrency" else "req/s"
        what = "concurrency" if search.mode == "concurrency" else "rate"
        lo, hi = search.lo, search.hi
        by_value = {p.value: p for p in search.points}
        done = search.next_value() is None
        if lo is None:
            sentence = (
                f"no {what} tried meets {slo.describe()} for {ATTAINMENT:.0%} of requests "
                f"(lowest tried: {search.low:g} {unit}, {by_value[search.low].describe()})"
                if search.points else "the search ran no point"
            )
        elif hi is None:
            sentence = (
                f"the highest {what} tried, {lo:g} {unit}, still meets {slo.describe()} "
                f"({by_value[lo].describe()}): search higher"
            )
        else:
            width = "exact" if search.mode == "concurrency" and hi - lo <= 1 else (
                f"within {hi / lo - 1:.0%}" if search.mode == "rate" else "not narrowed")
            sentence = (
                f"highest {what} meeting {slo.describe()} for ≥ {ATTAINMENT:.0%} of "
                f"requests: {lo:g} {unit} ({by_value[lo].describe()}); {hi:g} {unit} "
                f"{by_value[hi].describe()} — answer in [{lo:g}, {hi:g}) {unit}, {width}"
            )
        if not done:
            sentence += " (search cut short)"
        exact = done and lo is not None and hi is not None
        rule = (
            f"bisection; a point meets when the 95 % Wilson interval of its SLO share is ≥ "
            f"{ATTAINMENT:.0%}, misses when below, else is repeated (≤ {MAX_REPEATS} batches)"
        )
        return cls(search.mode, lo, hi, exact, tuple(search.points), sentence, rule)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        data = asdict(self)
        data["points"] = [asdict(p) | {"share": p.share} for p in self.points]
        return data


def replay(mode: str, low: float, high: float,
           points: Sequence[PointVerdict]) -> SloSearch:
    """The search state after `points` (in the order run), as the runner built it; raises
    ValueError for bounds out of order (SloSearch)."""
    search = SloSearch(mode, low, high)
    for p in points:
        search.add(p)
    return search
