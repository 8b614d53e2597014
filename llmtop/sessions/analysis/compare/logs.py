"""Is B faster than A? Two session logs compared metric by metric, with a confidence interval.

For each metric and prompt size: the medians of both runs' baselines (analysis/run.py's
rules: warm-ups, excluded requests and the requests of a slow episode never count, so the
medians and n are the bench report's), the ratio median(B) / median(A) with a
95 % confidence interval from scipy's bootstrap (requests resampled within each run, seeded),
and scipy's Mann-Whitney U test. A difference is *significant* when the interval excludes 1
and the test's p-value is under ALPHA: both must agree, so equal runs read "no significant
difference" at least 1 − ALPHA of the time (tests/unit/test_compare.py checks it over seeded
trials). The baseline-first form follows docs/method.md: a claim like "2× faster" needs a
baseline measured the same way, so runs that were not measured the same way are refused
(`comparability`), and a run the machine disturbed is named in the warnings.

Bench, load and TUI session logs all read the same way: requests grouped by prompt size
(`prompt_tokens_target`), relay path and, in a load log, level.

This module holds the whole comparison (`Comparison`, `compare_logs`); its parts sit beside
it: stats.py (the test and one metric's verdict), groups.py (the groups of requests) and
checks.py (comparability, distrust).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from llmtop.sessions.analysis.compare.checks import Checks, comparability, distrust
from llmtop.sessions.analysis.compare.groups import (
    baseline_values,
    common_groups,
    groups,
)
from llmtop.sessions.analysis.compare.runs import runs_ratio_test
from llmtop.sessions.analysis.compare.stats import (
    DEFAULT_SEED,
    MetricComparison,
    judge,
)
from llmtop.sessions.analysis.run import analyze_run
from llmtop.sessions.measure.metrics import (
    COMPARE_METRICS,
    DEFAULT_COMPARE_METRICS,
    DEFAULT_THRESHOLD_PCT,
)
from llmtop.sessions.records.schema import RunLog


@dataclass(frozen=True)
class Comparison:
    """B against the baseline A. rows: one MetricComparison per group and metric (empty
    when refused). names: how A and B are shown (their file names)."""

    name_a: str
    name_b: str
    checks: Checks
    rows: list[MetricComparison]
    threshold_pct: float
    distrust: list[str] = field(default_factory=list)  # why no claim holds (see `distrust`)

    @property
    def trusted(self) -> bool:
        """False when either run's machine or drift makes a difference unattributable."""
        return not self.distrust

    @property
    def refused(self) -> bool:
        """True when the runs were not comparable (checks.problems says why)."""
        return bool(self.checks.problems)

    @property
    def regression(self) -> bool:
        """True when B is significantly slower than A by over threshold_pct in any row."""
        return any(r.regression for r in self.rows)


def compare_logs(a: RunLog, b: RunLog, names: tuple[str, str] = ("A", "B"),
                 metrics: Sequence[str] = DEFAULT_COMPARE_METRICS, vary: Iterable[str] = (),
                 threshold_pct: float = DEFAULT_THRESHOLD_PCT, seed: int = DEFAULT_SEED,
                 on_row: Callable[[MetricComparison], None] | None = None,
                 runs: tuple[Sequence[RunLog], Sequence[RunLog]] = ((), ())) -> Comparison:
    """Compare run B with the baseline A (see the module docstring). Raises KeyError for a
    metric not in COMPARE_METRICS. Groups pair by label, or in run order with --vary prompt.
    runs: the `bench --runs K` sets A and B belong to (compare_runs.run_set; empty or one
    log: a single run); when either has 2 runs or more, each row is
    compare_runs.runs_ratio_test over the runs' baselines, its verdict ending "over K / L
    runs"."""
    specs = [COMPARE_METRICS[m] for m in metrics]
    keys = [s.key for s in specs]
    ga, gb = groups(analyze_run(a), keys), groups(analyze_run(b), keys)
    unpaired: list[str] = []
    if a.header.kind == b.header.kind == "watch":  # pair the callers and models both saw
        ga, gb, unpaired = common_groups(ga, gb)
    checks = comparability(a, b, ga, gb, vary)
    checks.warnings.extend(unpaired)
    set_a, set_b = list(runs[0]) or [a], list(runs[1]) or [b]
    by_run = max(len(set_a), len(set_b)) > 1
    ra = [baseline_values(analyze_run(log), keys) for log in set_a] if by_run else []
    rb = [baseline_values(analyze_run(log), keys) for log in set_b] if by_run else []
    rows: list[MetricComparison] = []
    if not checks.problems:
        for x, y in zip(ga, gb, strict=False):
            label = x.label if x.label == y.label else f"{x.label} → {y.label}"
            for spec in specs:
                tester = None
                if by_run:  # each run's group of the same label (a run without it: left out)
                    va = [g.values[spec.key] for run in ra for g in run if g.label == x.label]
                    vb = [g.values[spec.key] for run in rb for g in run if g.label == y.label]
                    tester = partial(runs_ratio_test, va, vb, seed)
                row = judge(spec, label, x.values[spec.key], y.values[spec.key],
                            threshold_pct, seed, tester)
                if by_run and row.test is not None:
                    row = replace(row, verdict=f"{row.verdict} over {len(set_a)} / "
                                  f"{len(set_b)} runs")
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    why = [w for name, log in (("A", a), ("B", b)) if (w := distrust(name, log)) is not None]
    return Comparison(names[0], names[1], checks, rows, threshold_pct, why)
