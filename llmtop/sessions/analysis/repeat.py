"""Repeatability across independent bench runs (`llmtop bench --runs K`, issue 25 item 4).
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
  far, and a difference inside the threshold never counts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from llmtop.sessions.analysis.attribution import K_SPREAD, MAD_SCALE
from llmtop.sessions.analysis.run import Analysis

CI_LEVEL = 0.95
METRICS = (("ttft_ms", "TTFT", "ms"), ("server_decode_tps", "decode (server)", "tok/s"))


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
    spread of each METRICS entry over `runs` (module docstring). Raises ValueError with no
    run."""
    if not runs:
        raise ValueError("repeatability needs at least one run")
    targets = list(dict.fromkeys(s.target for a in runs for s in a.sizes if s.path is None))
    out = []
    for target in targets:
        spreads = []
        for key, label, unit in METRICS:
            medians = []
            for a in runs:
                size = next((s for s in a.sizes if s.target == target and s.path is None), None)
                medians.append(None if size is None else size.summaries[key].median)
            spreads.append(spread(key, label, unit, medians, runs[0].drift_threshold_pct))
        out.append(SizeSpread(target, tuple(spreads)))
    return out
