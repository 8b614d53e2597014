"""Repeatability across independent bench runs (`llmtop bench --runs K`).
Pure: the runs' analyses in, per prompt size and metric the spread of their baseline
medians, a confidence interval and the runs that disagree, out.

Per run the figure is its baseline's median (the ok requests outside every slow episode,
run.SizeAnalysis.baseline). Across the K runs:

* the centre is the median of those medians and the spread their range, % of the centre;
* the 95 % confidence interval is Student's t interval of the mean of the K run medians
  (scipy.stats.t.interval with K − 1 degrees of freedom and the standard error s / √K):
  the runs are independent repeats (a cool-down between, the engine kept warm), their
  medians roughly normal; with K = 2 the interval is wide, as it should be;
* a run disagrees when its median is farther from the centre than both K_SPREAD × the
  runs' robust spread (1.4826 × MAD, attribution's outlier rule) and the run's drift
  threshold (5 % by default): the other runs' agreement, not a fixed figure, says what is
  far, and a difference inside the threshold never counts;
* whether the spread is the machine's: with MIN_TRACK_RUNS runs or more, each canary part's
  run medians (probes/canary.py, timed before the requests) are rank-correlated with the
  metric's (Spearman's ρ, scipy.stats.spearmanr); a part that moved with the metric in the
  direction a slower machine moves it (longer canary, longer TTFT; longer canary, lower
  decode) at p < TRACK_ALPHA says the runs differed because the machine's speed did. On
  this project's 2-core VM, 10 quiet runs: the CPU loop's run medians tracked prefill at
  ρ = 0.93 (p < 0.001) and decode at ρ = −0.67 (p = 0.03) (docs/method.md).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from llmtop.sessions.analysis.attribution import K_SPREAD, MAD_SCALE
from llmtop.sessions.analysis.run import Analysis, SizeAnalysis
from llmtop.sessions.measure.metrics import SERVER_DECODE, TTFT

CI_LEVEL = 0.95
METRICS = (TTFT, SERVER_DECODE)  # what --runs K spreads over the runs
CANARY_PARTS = (("canary_cpu_ms", "the canary's CPU loop"),
                ("canary_mem_ms", "the canary's memory stride"),
                ("canary_simd_ms", "the canary's SIMD part"))
MIN_TRACK_RUNS = 5  # fewer runs cannot show a rank correlation at p < 0.05 from chance alone
TRACK_ALPHA = 0.05


@dataclass(frozen=True, slots=True)
class Tracking:
    """A canary part whose run medians moved with a metric's across the runs. part: its
    label; medians: its median per run (ms, None where a run had no canary), in run order;
    rho, p: Spearman's rank correlation with the metric's run medians and its p-value."""

    part: str
    medians: tuple[float | None, ...]
    rho: float
    p: float


def tracking(metric: Sequence[float | None], part: Sequence[float | None],
             higher_is_better: bool) -> tuple[float, float] | None:
    """(ρ, p) when `part`'s run medians track `metric`'s the way a slower machine moves them
    (ρ > 0 for a time, ρ < 0 for a rate) at p < TRACK_ALPHA over MIN_TRACK_RUNS or more runs
    with both; else None."""
    from scipy.stats import spearmanr  # imported here: only --runs pays for it

    pairs = [(m, c) for m, c in zip(metric, part, strict=True) if m is not None and c is not None]
    if len(pairs) < MIN_TRACK_RUNS or len({c for _, c in pairs}) < 2 \
            or len({m for m, _ in pairs}) < 2:
        return None
    result = spearmanr([m for m, _ in pairs], [c for _, c in pairs])
    rho, p = float(result.statistic), float(result.pvalue)
    slower = rho < 0 if higher_is_better else rho > 0
    return (rho, p) if slower and p < TRACK_ALPHA else None


@dataclass(frozen=True, slots=True)
class Spread:
    """One metric of one prompt size across the runs. medians: each run's baseline median
    (None where a run had none), in run order; centre: their median; range_pct: (max − min)
    / centre × 100; ci: the 95 % interval of the mean (None with fewer than 2 runs or no
    spread to speak of); disagree: the 1-based numbers of the runs that disagree."""

    key: str
    label: str
    unit: str
    medians: tuple[float | None, ...]
    centre: float | None
    range_pct: float | None
    ci: tuple[float, float] | None
    disagree: tuple[int, ...]
    machine: Tracking | None = None  # the canary part that tracked it best (module docstring)


@dataclass(frozen=True, slots=True)
class SizeSpread:
    """A prompt size's spreads, one per METRICS entry."""

    target: int | None
    spreads: tuple[Spread, ...]


def _interval(values: Sequence[float]) -> tuple[float, float] | None:
    from scipy.stats import t  # imported here: only --runs pays for it

    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    sem = statistics.stdev(values) / math.sqrt(len(values))
    if sem == 0:
        return mean, mean
    lo, hi = t.interval(CI_LEVEL, len(values) - 1, loc=mean, scale=sem)
    return float(lo), float(hi)


def spread(
    key: str, label: str, unit: str, medians: Sequence[float | None], threshold_pct: float
) -> Spread:
    """The spread of one metric's run medians (module docstring)."""
    known = [m for m in medians if m is not None]
    if not known:
        return Spread(key, label, unit, tuple(medians), None, None, None, ())
    centre = statistics.median(known)
    range_pct = (max(known) - min(known)) / centre * 100 if centre else None
    mad = statistics.median(abs(m - centre) for m in known)
    limit = max(K_SPREAD * MAD_SCALE * mad, threshold_pct / 100 * abs(centre))
    disagree = tuple(
        i for i, m in enumerate(medians, start=1) if m is not None and abs(m - centre) > limit
    )
    return Spread(key, label, unit, tuple(medians), centre, range_pct, _interval(known), disagree)


def repeatability(runs: Sequence[Analysis]) -> list[SizeSpread]:
    """Per prompt size (direct requests; a relay comparison's paths are left out), the
    spread of each METRICS entry over `runs`, and the canary part that tracked it (module
    docstring). Raises ValueError with no run."""
    if not runs:
        raise ValueError("repeatability needs at least one run")
    targets = list(dict.fromkeys(s.target for a in runs for s in a.sizes if s.path is None))
    out = []
    for target in targets:
        sizes = [next((s for s in a.sizes if s.target == target and s.path is None), None)
                 for a in runs]

        def medians(key: str, sizes: list[SizeAnalysis | None] = sizes) -> list[float | None]:
            return [None if s is None or key not in s.summaries else s.summaries[key].median
                    for s in sizes]

        spreads = []
        for metric in METRICS:
            found = spread(metric.key, metric.label, metric.unit, medians(metric.key),
                           runs[0].drift_threshold_pct)
            best = None
            for part, part_label in CANARY_PARTS:
                hit = tracking(found.medians, medians(part), metric.higher_is_better)
                if hit is not None and (best is None or abs(hit[0]) > abs(best.rho)):
                    best = Tracking(part_label, tuple(medians(part)), *hit)
            spreads.append(replace(found, machine=best))
        out.append(SizeSpread(target, tuple(spreads)))
    return out
