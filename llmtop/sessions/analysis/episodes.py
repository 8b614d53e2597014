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
segment costs plus a penalty per change point. Chosen over Binseg/BottomUp (approximate
searches that can miss one of two close change points, as the seed's 7 → 8 and 19 → 20)
and over a hand-written CUSUM (a well-kept library, tested on its own). Cost: a change of
mean (the segment's sum of squared deviations), with `min_size` 3 and `jump` 1 (every
request may start an episode). It runs as ruptures' `KernelCPD(kernel="linear")`: the
linear kernel's cost *is* the l2 cost, and that class runs the same PELT search in C with
each segment's cost from cumulative sums, O(1) where `Pelt(model="l2")` computes a
variance over the segment in Python. PELT only prunes when change points are found, so on a
steady series it tries every pair of ends: `Pelt(model="l2", jump=1)` took 17 s for 1,000
requests, 86 s for 2,000 and never finished 100,000; the C search, the same breakpoints on
300 random series with steps, takes 0.5 ms for 250 values and 15 ms for 2,000.

**Long series: blocks.** Beyond EXACT_POINTS (2,000) values even the C search grows as n²
(0.2 s for 5,000; some 80 s for 100,000 by n²), so the series is cut into EXACT_POINTS blocks of
nearly equal size b (n / 2,000, rounded) and the search runs on the blocks' means × √b,
with the same penalty. For blocks of one size this is the exact search restricted to block
ends: a segmentation's l2 cost is the within-block sum of squares (the same for every
segmentation at block ends) plus b × the block means' squared deviations from their
segment's mean. Change points then sit at block ends, and the episode rule below places
each episode's ends on the requests themselves (trimmed to its off requests, grown over the
off ones beside it). A segment's level is then its mean (the search's own measure: a block
with 20 slow requests of 50 has the baseline's median), and a segment of one or two blocks
is a candidate whatever its level (the search set it apart; its mean is diluted by the rest
of its blocks). An episode much shorter than a block can be missed (its block's mean moves
by its share of the block); at 100,000 requests a block is 50, 20 requests at 1.5 × under
5 % noise are found whole, in one block or across two (tests/unit/test_report_scale.py),
and the whole of `shape_of` takes 0.06 s.

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
(margin = max(LEVEL_K × σ, threshold_pct %, the absolute floor)). The baseline's level is
the group holding the most requests (a tie goes to the better level: contention only takes
time); every other segment is a candidate. Why the majority and not the fastest level: the
method (docs/method.md, "Rules for an honest run", 6 and 8) reads interference as "drops
that recover" from the run's own level, and its quiet rerun is the figure a user repeats; a
few fast requests after a slow run are not a baseline the next run will meet (seen: the
fastest long segment made the "baseline" 3 requests of 50, the "episode" 1–47). The seed's
four phases keep their baseline (requests 1–7 and 14–19 hold 13 of 25).

**Episodes and outliers.** A change point says a stretch's *level* differs; it does not say
each request in it was slowed. Two 3 × spikes at requests 7 and 10 made one segment 7–10
at +99 % (its median, of two spikes and two ordinary requests), which called 8 and 9
slowed: of 200 log-normal series of 25 with isolated 3 × spikes, 57 had such an episode, and
of 200 with noise only, 17. So an episode must be made of requests that are off themselves:

* a request is *off* when it differs from the baseline's level by more than
  max(margin, OFF_K × σ), OFF_K = 3 (a request beyond 3 σ of a level is an outlier of it
  under any noise close to normal);
* an episode is a run of at least MIN_SIZE (3) *consecutive* candidate requests off on the
  same side, grown over the off requests next to it on that side (a change point one
  request early or late, or at a block end); a request that is not off ends it;
* the off candidates of a shorter run are *outliers* (`SeriesShape.outliers`): reported as
  such, never an episode, and kept in the statistics (a median is not moved by a spike).

Measured on seeded series of 25 (numpy's default_rng, tests/unit/test_episodes_noise.py):
of 400 log-normal noise-only series at σ 0.05, 0.1, 0.2 or 0.3, 1 got an episode at each σ
(10–23 of 200 before; 17 in the report that found it); with 2–3 isolated 3 × spikes, 0, 0, 1
and 2 of 400 (35–61 of 200 before, most spanning two spikes), the 3 left being series where
noise itself put the request between two spikes beyond 3 σ (+68 %, +117 %). An episode of 8
requests at 2 × is found in 400 of 400 at σ ≤ 0.1, 279 at σ 0.2 and 139 at σ 0.3 (196 and 147
of 200 before, with 9 and 18 calling an unslowed neighbour slowed): under heavy noise a
request of a real episode can fall within 3 σ of the baseline, which splits the episode or
leaves it short, the price of never calling an ordinary request slowed. With OFF_K 2 the
noise-only rate was 5–6 of 200 at each σ; with 2.5, 3–4 of 400.

The baseline's value is the median of the requests outside every episode. The baseline must
hold at least MAJORITY_SHARE (half) of the requests (`held`: those outside every episode):
an episode is a departure from the run's level, so a minority. A series whose episodes
hold half its requests or more has no baseline (`SeriesShape.majority` False): the verdict
says so.

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
from typing import TYPE_CHECKING

# numpy (and ruptures) are imported by the functions that compute: a module that only names
# an episode (the TUI's session strip, before its first frame) starts without them
if TYPE_CHECKING:
    import numpy as np

MAD_SCALE = 1.4826  # MAD → standard deviation under normality (as attribution.MAD_SCALE)
SIGMA_FLOOR = 0.01  # σ is at least 1 % of the median level (attribution.SPREAD_FLOOR)
PENALTY_LOG_N = 3.0  # pen = 3 ln n per change point (module docstring)
OFF_K = 3.0  # one request is off the baseline beyond 3 σ (module docstring)
LEVEL_K = 2.0  # an episode's level is over 2 σ from the baseline's (attribution.K_SPREAD)
MIN_SIZE = 3  # requests in the shortest episode (module docstring)
MAJORITY_SHARE = 0.5  # the baseline level holds at least half of the requests (module docstring)
MIN_POINTS = 10  # fewer values: nothing is judged (the drift rule's 2 × 5, stats.py)
EXACT_POINTS = 2000  # the longest series searched request by request (module docstring)
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
    values outside every episode; n: the values judged. outliers: positions of values off
    the baseline's level in a run too short to be an episode (isolated spikes), in order;
    they stay in the baseline's values."""

    shape: Shape
    breakpoints: tuple[int, ...] = ()
    spans: tuple[Span, ...] = ()
    baseline: float | None = None
    sigma: float | None = None
    margin: float | None = None
    trend_pct: float | None = None
    held: int = 0
    n: int = 0
    outliers: tuple[int, ...] = ()

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
    import numpy as np

    d = np.diff(np.asarray(levels, dtype=float))
    mad = float(np.median(np.abs(d - np.median(d))))
    return max(MAD_SCALE * mad / math.sqrt(2), SIGMA_FLOOR)


def _sse(z: np.ndarray, bounds: Sequence[tuple[int, int]]) -> float:
    return float(sum(((z[a:b] - z[a:b].mean()) ** 2).sum() for a, b in bounds))


def _line(z: np.ndarray) -> tuple[float, np.ndarray]:
    import numpy as np

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


def _change_points(z: np.ndarray, pen: float) -> list[int]:
    """Segment ends (ruptures' convention: the last is len(z)) of the unit-noise series `z`.

    Up to EXACT_POINTS values: PELT, l2, MIN_SIZE, jump 1 (module docstring). Longer: the
    series is cut into EXACT_POINTS blocks of nearly equal size b (numpy.array_split), and
    PELT runs on the blocks' means × √b̄ (b̄ = n / blocks) with the same penalty: for blocks
    of one size the l2 cost of a segmentation at block ends is the within-block sum of
    squares (the same for every segmentation) plus b × the blocks' sum of squares around
    the segment's mean, so the search is the exact one restricted to block ends (sizes b
    and b + 1 make it an approximation within 1/b). Its ends are block ends; the episodes'
    own rule (`_episode_runs`) then places each end on the requests themselves."""
    import numpy as np

    # ruptures pulls in scipy.stats and scipy.spatial (over a second of imports on 2 cores):
    # imported when a series is judged, not by every module that names an episode
    import ruptures as rpt

    n = len(z)
    if n <= EXACT_POINTS:
        return [int(e) for e in rpt.KernelCPD(kernel="linear", min_size=MIN_SIZE, jump=1)
                .fit(z.reshape(-1, 1)).predict(pen=pen)]
    blocks = np.array_split(z, EXACT_POINTS)
    sizes = np.array([len(b) for b in blocks])
    means = np.array([b.mean() for b in blocks]) * math.sqrt(n / len(blocks))
    min_blocks = max(1, math.ceil(MIN_SIZE / int(sizes.min())))
    ends = rpt.KernelCPD(kernel="linear", min_size=min_blocks, jump=1).fit(
        means.reshape(-1, 1)).predict(pen=pen)
    cut = np.cumsum(sizes)
    return [int(cut[e - 1]) for e in ends]


def _episode_runs(
    dev: np.ndarray, candidate: np.ndarray, off: float
) -> tuple[list[tuple[int, int]], list[int]]:
    """The episodes ([start, stop) positions, in order) and the outliers (positions) of one
    series (the module docstring's "Episodes and outliers").

    dev: each value's difference from the baseline level (fractions of the median);
    candidate: True where a change point put the value in a level apart from the baseline;
    off: the difference beyond which one value is itself off the baseline. An episode is a
    run of at least MIN_SIZE consecutive candidates off on one side, grown over the values
    next to it that are off on that side (a change point placed at a block end, or a
    request early or late); the off candidates of a shorter run are outliers."""
    import numpy as np

    side = np.where(dev > off, 1, np.where(dev < -off, -1, 0))
    marked = np.where(candidate, side, 0)
    n = len(dev)
    runs: list[tuple[int, int]] = []
    outliers: list[int] = []
    i = 0
    while i < n:
        if marked[i] == 0:
            i += 1
            continue
        j = i
        while j + 1 < n and marked[j + 1] == marked[i]:
            j += 1
        if j + 1 - i < MIN_SIZE:
            outliers.extend(range(i, j + 1))
            i = j + 1
            continue
        start, stop = i, j + 1
        low = runs[-1][1] if runs else 0
        while start > low and side[start - 1] == marked[i]:
            start -= 1
        while stop < n and side[stop] == marked[i]:
            stop += 1
        runs.append((start, stop))
        i = stop
    taken = np.zeros(n, dtype=bool)
    for a, b in runs:
        taken[a:b] = True
    return runs, [k for k in outliers if not taken[k]]


def _candidates(
    y: np.ndarray, bounds: Sequence[tuple[int, int]], margin: float, higher_is_better: bool
) -> np.ndarray:
    """True for each value in a segment apart from the baseline's level (`_baseline_level`
    over the segments' levels: medians, or past EXACT_POINTS values means, the block
    search's own measure). Past EXACT_POINTS, a segment of at most two blocks is apart
    whatever its level: the search set it apart for a change within it, and its level is
    diluted by the requests of its blocks outside that change (20 requests at 1.5 × in a
    block of 50 have a median at the baseline's and a mean 20 % above it; split over two
    blocks, 10 % each); the episode rule then keeps only its off requests."""
    import numpy as np

    n = len(y)
    exact = n <= EXACT_POINTS
    levels = [float(np.median(y[a:b]) if exact else np.mean(y[a:b])) for a, b in bounds]
    inside, _held = _baseline_level(levels, [b - a for a, b in bounds], margin, higher_is_better)
    short = 0 if exact else 2 * math.ceil(n / EXACT_POINTS)
    candidate = np.ones(n, dtype=bool)
    for (a, b), ok in zip(bounds, inside, strict=True):
        if ok and b - a > short:
            candidate[a:b] = False
    if candidate.all():  # every segment short: the baseline group's are not candidates
        for (a, b), ok in zip(bounds, inside, strict=True):
            candidate[a:b] = not ok
    return candidate


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
    or a median ≤ 0 (a time or a rate is positive). O(n) beyond EXACT_POINTS values."""
    import numpy as np

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
    ends = _change_points(z, pen)
    bounds = list(zip([0, *ends[:-1]], ends, strict=True))
    margin = max(LEVEL_K * sigma, threshold_pct / 100.0, floor / median)
    line_sse, fitted = _line(z)
    steps_cost = _sse(z, bounds) + pen * (len(bounds) - 1)
    line_move = float(fitted[-1] - fitted[0]) * sigma  # in units of the median
    if line_sse + pen < steps_cost and abs(line_move) > margin:
        start = float(fitted[0]) * sigma
        return SeriesShape(Shape.TREND, tuple(ends), (), None, sigma, margin,
                           100.0 * line_move / start if start > 0 else None, n=n)
    candidate = _candidates(y, bounds, margin, higher_is_better)
    level = float(np.median(y[~candidate]))
    runs, outliers = _episode_runs(y - level, candidate, max(margin, OFF_K * sigma))
    in_runs = np.zeros(n, dtype=bool)
    for a, b in runs:
        in_runs[a:b] = True
    baseline = float(np.median(x[~in_runs]))
    spans = []
    for a, b in runs:
        change = (float(np.median(x[a:b])) - baseline) / baseline * 100.0
        spans.append(Span(a, b, change, bool((change < 0) == higher_is_better)))
    return SeriesShape(
        Shape.EPISODES if spans else Shape.STEADY,
        tuple(ends),
        tuple(spans),
        baseline,
        sigma,
        margin,
        held=n - int(in_runs.sum()),
        n=n,
        outliers=tuple(outliers),
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
    order; outliers: per series, the request numbers it found off its level in a run too
    short to be an episode (isolated spikes, kept in the statistics), none in an episode."""

    shapes: dict[str, SeriesShape]
    episodes: tuple[Episode, ...] = ()
    trends: dict[str, float] = field(default_factory=dict)
    numbers: tuple[int, ...] = ()
    outliers: dict[str, tuple[int, ...]] = field(default_factory=dict)

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
    requests next to each other in `numbers` that are all in episodes make one episode; a
    series' outliers are kept (by request number) where no episode holds them. O(n) in the
    requests beyond shape_of's own work. Raises ValueError when a series' length differs
    from `numbers`'."""
    floors = floors or {}
    shapes: dict[str, SeriesShape] = {}
    flagged: dict[str, set[int]] = {}
    better: dict[str, set[int]] = {}
    spikes: dict[str, list[int]] = {}
    for key, values in series.items():
        if len(values) != len(numbers):
            raise ValueError(f"series {key!r} has {len(values)} values for {len(numbers)} requests")
        shapes[key], flagged[key], better[key], spikes[key] = _judge_series(
            numbers, values, higher_is_better[key], threshold_pct, floors.get(key, 0.0))
    trends = {k: s.trend_pct for k, s in shapes.items()
              if s.shape == Shape.TREND and s.trend_pct is not None}
    inside = set().union(*flagged.values()) if flagged else set()
    # a request some series found slower is in a slow episode; one that series found only
    # faster, in a fast one: the two never merge (a run of faster requests next to slower
    # ones is two episodes, not one that is both)
    worse = {n for k in flagged for n in flagged[k] - better[k]}
    runs = _runs(numbers, inside, worse)
    position = {n: i for i, n in enumerate(numbers)}
    bases = {}
    for key, values in series.items():
        outside = [v for n, v in zip(numbers, values, strict=True)
                   if n not in inside and v is not None]
        bases[key] = statistics.median(outside) if outside else None
    episodes = [_episode(run, [position[n] for n in run], series, bases, flagged, better)
                for run in runs if run]
    outliers = {k: tuple(n for n in v if n not in inside) for k, v in spikes.items()}
    return Episodes(shapes, tuple(episodes), trends, tuple(numbers),
                    {k: v for k, v in outliers.items() if v})


def _judge_series(
    numbers: Sequence[int],
    values: Sequence[float | None],
    higher_is_better: bool,
    threshold_pct: float,
    floor: float,
) -> tuple[SeriesShape, set[int], set[int], list[int]]:
    """One series judged (`shape_of` over its present values: not None, finite, positive):
    its shape, the request numbers its episodes hold, those of them at a better level than
    its baseline, and its outliers' request numbers."""
    present = [
        (n, float(v))
        for n, v in zip(numbers, values, strict=True)
        if v is not None and math.isfinite(v) and v > 0
    ]
    shape = shape_of(
        [v for _, v in present],
        higher_is_better=higher_is_better,
        threshold_pct=threshold_pct,
        floor=floor,
    )
    flagged = {present[i][0] for s in shape.spans for i in range(s.start, s.stop)}
    better = {present[i][0] for s in shape.spans if not s.worse for i in range(s.start, s.stop)}
    return shape, flagged, better, [present[i][0] for i in shape.outliers]


def _runs(numbers: Sequence[int], inside: set[int], worse: set[int]) -> list[list[int]]:
    """The request numbers in episodes, cut into runs of neighbours in `numbers` that are
    all slower (in `worse`) or all only faster; an empty run marks each request outside."""
    runs: list[list[int]] = []
    for n in numbers:
        if n not in inside:
            runs.append([])
        elif runs and runs[-1] and (runs[-1][-1] in worse) == (n in worse):
            runs[-1].append(n)
        else:
            runs.append([n])
    return runs


def _episode(
    run: list[int],
    at: list[int],
    series: Mapping[str, Sequence[float | None]],
    bases: Mapping[str, float | None],
    flagged: Mapping[str, set[int]],
    better: Mapping[str, set[int]],
) -> Episode:
    """One merged episode (request numbers `run`, at positions `at` of the series): per
    series that found it, its median over the run against `bases`, its median outside
    every episode, %."""
    members = set(run)
    changes = {}
    for key, values in series.items():
        if not flagged[key] & members:
            continue
        during = [v for i in at if (v := values[i]) is not None]
        base = bases[key]
        if during and base is not None and base > 0:
            changes[key] = (statistics.median(during) - base) / base * 100.0
    faster = tuple(k for k in series if better[k] & members)
    return Episode(run[0], run[-1], tuple(run), changes, faster)
