"""Slow episodes in a run's ordered series: change points, then which levels are the
baseline, which are episodes, and whether the whole run is a trend instead. Pure (numbers
in, numbers out; no I/O).

Why: the source's "thermal" run (docs/method.md, "The source's pitfalls") was fast, slow,
fast again, slow again — an open browser, not heat — and a first-5 vs last-5 rule can only
call such a run contaminated, never say which requests were slowed and by how much. On a
shared machine (a laptop with a browser, a VM with neighbours) slow episodes come and go;
finding them lets the bench measure around them (docs/guide/bench.md, "Slow episodes").

**Change points: ruptures' PELT** (Killick, Fearnhead & Eckley 2012; `ruptures`, Truong,
Oudre & Vayatis 2020), the exact search for the segmentation that minimises the sum of
segment costs plus a penalty per change point, in linear time. Chosen over Binseg/BottomUp
(approximate searches that can miss one of two close change points, as the seed's
7 → 8 and 19 → 20) and over a hand-written CUSUM (a well-kept library, tested on its own).
Cost model "l2" (a change of mean, the segment's sum of squared deviations), with
`min_size` 3 (one or two slow requests are outliers, not an episode) and `jump` 1 (every
request may start an episode).

**Scale and penalty.** The series is first divided by its median (levels in units of the
run's typical value, so a size reads as a percentage) and then by its own noise, σ, the
robust standard deviation of its first differences:

    σ = max(1.4826 × MAD(Δy) / √2, 1 %)

(Δy: consecutive differences; MAD around their median, which also removes a steady slope;
1.4826 × MAD estimates a normal standard deviation, Rousseeuw & Croux 1993; a difference of
two values has √2 times one value's deviation). A step between levels appears in one
difference only, so σ is the noise *within* levels, even in a run that has episodes. The
1 % floor is attribution.SPREAD_FLOOR's: a scripted engine with exact timings (σ = 0)
still has a finite scale. On that unit-variance series the penalty per change point is

    pen = PENALTY_LOG_N × ln(n),   PENALTY_LOG_N = 3

Schwarz's criterion with a change point counted as 1.5 parameters. Set from quiet series
(25 values, the default protocol, no level change in them): with PENALTY_LOG_N 2 (plain BIC
for a location and a mean) 23 % of series of normal noise got a spurious change point (45 %
with heavy-tailed Student-t₃ noise, closer to request latencies), with 3 it is 8 % (25 %).
A change point alone makes no episode: its level must also differ by more than LEVEL_K × σ
and the run's relative threshold. With both, 0.3 % of 2000 normal series at 2 % noise came
out with an episode (MIN_SIZE 2), and of 300 t₃ series at 2 %, 14 % with MIN_SIZE 2 and
2.7 % with MIN_SIZE 3, hence 3: a spurious slower episode costs a few re-measured
requests. With the majority baseline (below), of another 300 t₃ series at 2 % (seed 7),
12 had an episode and 7 of them a *faster* one, which verdict.py calls CONTAMINATED: about
2 % of quiet series, per series, pay a false alarm for the rule that a faster level means
the majority was slowed (none of 300 normal series did). tests/unit/test_episodes.py
keeps a smaller check of the rate.

**Baseline and episodes.** Segments are cut at the change points and grouped by level:
for each segment, the segments whose median is within the margin of its own
(margin = max(LEVEL_K × σ, threshold_pct %, the absolute floor)). The baseline is the group
holding the most requests (a tie goes to the better level: contention only takes time); an
episode is every other segment, adjacent ones merged. The baseline must hold at least
MAJORITY_SHARE (half) of the requests: an episode is a departure from the run's level, so a
minority. Why the majority and not the fastest level: the method (docs/method.md, "Rules
for an honest run", 6 and 8) reads interference as "drops that recover" from the run's own
level, and its quiet rerun is the figure a user repeats; a few fast requests after a slow
run are not a baseline the next run will meet (seen: the fastest long segment made the
"baseline" 3 requests of 50, the "episode" 1–47). The seed's four phases keep their
baseline (requests 1–7 and 14–19 hold 13 of 25). A series whose largest level holds fewer
than half its requests has no baseline (`SeriesShape.majority` False): the verdict says so.

An episode is "slower" (the usual) or "faster" (`Span.worse` False: a level better than
the majority's). A faster episode says the majority itself ran slowed, or the engine
changed state; verdict.py never calls such a run clean, and the bench re-measures while the
run ends in one (the faster level may be the engine's own and become the majority).

**A trend, not episodes.** A steady change over the run (heat, a leak, a filling cache)
fits a line better than steps: a line costs one parameter (its slope) where a staircase
costs a change point per step. The run is a trend when the line's penalised cost,
SSE(line) + pen, is below the segmentation's, SSE(steps) + pen × (change points), and the
line moves by more than the margin from the first to the last request.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import ruptures as rpt

MAD_SCALE = 1.4826  # MAD → standard deviation under normality (as attribution.MAD_SCALE)
SIGMA_FLOOR = 0.01  # σ is at least 1 % of the median level (attribution.SPREAD_FLOOR)
PENALTY_LOG_N = 3.0  # pen = 3 ln n per change point (module docstring)
LEVEL_K = 2.0  # an episode's level is over 2 σ from the baseline's (attribution.K_SPREAD)
MIN_SIZE = 3  # requests in the shortest episode (module docstring)
MAJORITY_SHARE = 0.5  # the baseline level holds at least half of the requests (module docstring)
MIN_POINTS = 10  # fewer values: nothing is judged (the drift rule's 2 × 5, stats.py)
DEFAULT_THRESHOLD_PCT = 5.0  # the drift threshold's default (stats.DRIFT_THRESHOLD_PCT)


class Shape(StrEnum):
    """What a series' levels look like: steady, episodes, a trend, or too short to say."""

    STEADY = "steady"
    EPISODES = "episodes"
    TREND = "trend"
    TOO_SHORT = "too-short"


@dataclass(frozen=True, slots=True)
class Span:
    """An episode in one series: positions [start, stop) (0-based, into the values given)
    and its median's change from the baseline's median, % (signed, in the values' unit:
    a rate that fell is negative); worse: the change is in the bad direction."""

    start: int
    stop: int
    change_pct: float
    worse: bool


@dataclass(frozen=True, slots=True)
class SeriesShape:
    """One series judged. breakpoints: segment ends (ruptures' convention: the last is n).
    spans: the episodes, in order. baseline: the median of the values outside them (None
    when there are none). sigma: the noise, a fraction of the median. margin: the smallest
    level difference that counts, a fraction of the median. trend_pct: for a TREND, the
    fitted line's change from the first to the last value, % of its first value. held: the
    values at the baseline's level; n: the values judged."""

    shape: Shape
    breakpoints: tuple[int, ...] = ()
    spans: tuple[Span, ...] = ()
    baseline: float | None = None
    sigma: float | None = None
    margin: float | None = None
    trend_pct: float | None = None
    held: int = 0
    n: int = 0

    @property
    def majority(self) -> bool:
        """The baseline's level holds at least MAJORITY_SHARE of the values (True for a
        trend or a too-short series: no level to hold)."""
        if self.shape in (Shape.TREND, Shape.TOO_SHORT):
            return True
        return self.held >= MAJORITY_SHARE * self.n


def noise(levels: Sequence[float] | np.ndarray) -> float:
    """σ of a series already divided by its median: 1.4826 × MAD of the first differences
    / √2, at least SIGMA_FLOOR (module docstring). Needs 2 values or more."""
    d = np.diff(np.asarray(levels, dtype=float))
    mad = float(np.median(np.abs(d - np.median(d))))
    return max(MAD_SCALE * mad / math.sqrt(2), SIGMA_FLOOR)


def _sse(z: np.ndarray, bounds: Sequence[tuple[int, int]]) -> float:
    return float(sum(((z[a:b] - z[a:b].mean()) ** 2).sum() for a, b in bounds))


def _line(z: np.ndarray) -> tuple[float, np.ndarray]:
    t = np.arange(len(z), dtype=float)
    slope, intercept = np.polyfit(t, z, 1)
    fitted = slope * t + intercept
    return float(((z - fitted) ** 2).sum()), fitted


def _baseline_level(
    levels: Sequence[float], sizes: Sequence[int], margin: float, higher_is_better: bool
) -> tuple[list[bool], int]:
    """Which segments are at the baseline's level, and how many values they hold: the
    segment whose group (the segments within `margin` of its level) holds the most values,
    a tie to the better level (module docstring)."""

    def group(i: int) -> list[bool]:
        return [abs(level - levels[i]) <= margin for level in levels]

    def held(i: int) -> int:
        return sum(size for size, ok in zip(sizes, group(i), strict=True) if ok)

    best = max(range(len(levels)),
               key=lambda i: (held(i), levels[i] if higher_is_better else -levels[i]))
    return group(best), held(best)


def shape_of(
    values: Sequence[float],
    *,
    higher_is_better: bool,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    floor: float = 0.0,
) -> SeriesShape:
    """Judge one ordered series (the module docstring's rules). values: finite numbers in
    run order, in the metric's unit; higher_is_better: True for rates, False for times;
    threshold_pct: the run's relative threshold, %; floor: the smallest absolute level
    difference that counts, in the values' unit. Raises ValueError for a non-finite value
    or a median ≤ 0 (a time or a rate is positive)."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < MIN_POINTS:
        return SeriesShape(Shape.TOO_SHORT)
    if not np.all(np.isfinite(x)):
        raise ValueError("shape_of needs finite values: drop the n/a ones first")
    median = float(np.median(x))
    if median <= 0:
        raise ValueError(f"shape_of needs positive values (a time or a rate), median {median}")
    y = x / median
    sigma = noise(y)
    z = y / sigma
    pen = PENALTY_LOG_N * math.log(n)
    ends = rpt.Pelt(model="l2", min_size=MIN_SIZE, jump=1).fit(z.reshape(-1, 1)).predict(pen=pen)
    bounds = list(zip([0, *ends[:-1]], ends, strict=True))
    margin = max(LEVEL_K * sigma, threshold_pct / 100.0, floor / median)
    line_sse, fitted = _line(z)
    steps_cost = _sse(z, bounds) + pen * (len(bounds) - 1)
    line_move = float(fitted[-1] - fitted[0]) * sigma  # in units of the median
    if line_sse + pen < steps_cost and abs(line_move) > margin:
        start = float(fitted[0]) * sigma
        return SeriesShape(
            Shape.TREND,
            tuple(int(e) for e in ends),
            (),
            None,
            sigma,
            margin,
            100.0 * line_move / start if start > 0 else None,
            n=n,
        )
    levels = [float(np.median(y[a:b])) for a, b in bounds]
    inside, held = _baseline_level(levels, [b - a for a, b in bounds], margin, higher_is_better)
    base_values = [v for (a, b), ok in zip(bounds, inside, strict=True) if ok for v in x[a:b]]
    baseline = float(statistics.median(base_values))
    spans = []
    i = 0
    while i < len(bounds):
        if inside[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(bounds) and not inside[j + 1]:
            j += 1
        start, stop = bounds[i][0], bounds[j][1]
        change = (float(np.median(x[start:stop])) - baseline) / baseline * 100.0
        spans.append(Span(int(start), int(stop), change, bool((change < 0) == higher_is_better)))
        i = j + 1
    return SeriesShape(
        Shape.EPISODES if spans else Shape.STEADY,
        tuple(int(e) for e in ends),
        tuple(spans),
        baseline,
        sigma,
        margin,
        held=held,
        n=n,
    )


@dataclass(frozen=True, slots=True)
class Episode:
    """Consecutive requests slowed (or sped) beyond the noise in at least one deciding
    series. first / last: request numbers as the user sees them (1-based, inclusive);
    numbers: every request in it; changes: per series that found it, the change of its
    median over the episode from its median outside every episode, % (signed, the series'
    unit: decode −31 % is a rate that fell); faster: the series that found it at a better
    level than their baseline's (episodes.py's docstring: the run's majority was slowed)."""

    first: int
    last: int
    numbers: tuple[int, ...]
    changes: dict[str, float]
    faster: tuple[str, ...] = ()

    @property
    def requests(self) -> str:
        """ "7–12", or "7" for one request."""
        return str(self.first) if self.first == self.last else f"{self.first}–{self.last}"


@dataclass(frozen=True, slots=True)
class Episodes:
    """Every deciding series of one prompt size judged (`shapes`, by key) and what they say
    together: the episodes, merged over the series; trends: the series that are a trend,
    with the line's change over the run, %; numbers: the request numbers judged, in run
    order."""

    shapes: dict[str, SeriesShape]
    episodes: tuple[Episode, ...] = ()
    trends: dict[str, float] = field(default_factory=dict)
    numbers: tuple[int, ...] = ()

    @property
    def unsettled(self) -> dict[str, tuple[int, int]]:
        """The series with no baseline level: key → (values at their largest level, values
        judged), the largest holding under MAJORITY_SHARE of them."""
        return {k: (s.held, s.n) for k, s in self.shapes.items() if not s.majority}

    @property
    def outside(self) -> int:
        """The judged requests outside every episode: at every series' baseline level."""
        return len(set(self.numbers) - self.excluded)

    @property
    def disagree(self) -> bool:
        """Each series has its baseline, but fewer than MAJORITY_SHARE of the requests are at
        all of them at once (their episodes together are the majority)."""
        return bool(self.episodes) and self.outside < MAJORITY_SHARE * len(self.numbers)

    @property
    def faster(self) -> tuple[Episode, ...]:
        """The episodes some series found faster than its baseline."""
        return tuple(e for e in self.episodes if e.faster)

    @property
    def ends_faster(self) -> Episode | None:
        """The faster episode the run ends in (its last request judged is in it), if any:
        the engine runs at that level now, so more requests may make it the majority."""
        last = self.numbers[-1] if self.numbers else None
        return next((e for e in self.faster if last in e.numbers), None)

    @property
    def excluded(self) -> frozenset[int]:
        """The request numbers inside an episode."""
        return frozenset(n for e in self.episodes for n in e.numbers)

    @property
    def judged(self) -> bool:
        """At least one series was long enough to judge."""
        return any(s.shape != Shape.TOO_SHORT for s in self.shapes.values())


def find_episodes(
    numbers: Sequence[int],
    series: Mapping[str, Sequence[float | None]],
    higher_is_better: Mapping[str, bool],
    *,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    floors: Mapping[str, float] | None = None,
) -> Episodes:
    """Judge each series (`shape_of`, its n/a values left out) and merge what they found.

    numbers: the request numbers of the values, in run order (one per value of every
    series); series: per key, one value or None per request; higher_is_better and floors
    (default 0): per key. Values that are None, not finite or not positive (a degenerate
    time) are left out of their series. A request is in an episode when any series put it in one;
    requests next to each other in `numbers` that are all in episodes make one episode.
    Raises ValueError when a series' length differs from `numbers`'."""
    floors = floors or {}
    shapes: dict[str, SeriesShape] = {}
    flagged: dict[str, set[int]] = {}
    better: dict[str, set[int]] = {}
    trends: dict[str, float] = {}
    for key, values in series.items():
        if len(values) != len(numbers):
            raise ValueError(f"series {key!r} has {len(values)} values for {len(numbers)} requests")
        present = [
            (n, float(v))
            for n, v in zip(numbers, values, strict=True)
            if v is not None and math.isfinite(v) and v > 0
        ]
        shape = shape_of(
            [v for _, v in present],
            higher_is_better=higher_is_better[key],
            threshold_pct=threshold_pct,
            floor=floors.get(key, 0.0),
        )
        shapes[key] = shape
        if shape.shape == Shape.TREND and shape.trend_pct is not None:
            trends[key] = shape.trend_pct
        flagged[key] = {present[i][0] for s in shape.spans for i in range(s.start, s.stop)}
        better[key] = {present[i][0] for s in shape.spans if not s.worse
                       for i in range(s.start, s.stop)}
    inside = set().union(*flagged.values()) if flagged else set()
    runs: list[list[int]] = []
    for n in numbers:
        if n not in inside:
            runs.append([])
        elif runs and runs[-1]:
            runs[-1].append(n)
        else:
            runs.append([n])
    episodes = []
    for run in (r for r in runs if r):
        changes = {}
        for key, values in series.items():
            if not flagged[key] & set(run):
                continue
            during = [v for n, v in zip(numbers, values, strict=True) if n in run and v is not None]
            outside = [
                v for n, v in zip(numbers, values, strict=True) if n not in inside and v is not None
            ]
            if during and outside and (base := statistics.median(outside)) > 0:
                changes[key] = (statistics.median(during) - base) / base * 100.0
        faster = tuple(k for k in series if better[k] & set(run))
        episodes.append(Episode(run[0], run[-1], tuple(run), changes, faster))
    return Episodes(shapes, tuple(episodes), trends, tuple(numbers))
