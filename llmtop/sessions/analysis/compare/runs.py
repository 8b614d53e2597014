"""`compare` over the runs of `bench --runs K`: when a side is a set of
independent runs, the claim rests on the spread of their baselines, not on one run's
requests. Pure, apart from `run_set`, which reads a set's logs.

Why: on a shared machine one run's requests agree closely with each other while two runs
differ by more than their intervals (bench/false_alarms.py measured decode ±10 % across
runs, each run's bootstrap interval a few %); a comparison of one run against another then
reads the machine's mood as the change's effect.

Per metric and prompt size, each run contributes its *baseline* (the ok requests outside
every slow episode, run.SizeAnalysis.baseline), and:

* the centre of a side is the median of its runs' medians (a single run: its median);
* the interval of B/A is a two-level bootstrap (the standard resampling for nested data:
  runs with replacement, then requests with replacement within each drawn run, the
  statistic the median of the drawn runs' medians), N_RESAMPLES draws, seeded, percentile
  95 %; so the runs' spread widens it as it should;
* the test is Welch's t test on the run medians (scipy.stats.ttest_ind, equal_var False)
  when both sides have 2 runs or more, else the one-sample t test of the side with runs
  against the other's median (scipy.stats.ttest_1samp);
* significant, as in analysis/compare/stats.py: the interval excludes 1 and p < ALPHA.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from llmtop.sessions.analysis.compare.stats import ALPHA, N_RESAMPLES, RatioTest
from llmtop.sessions.records.log import LogError, read_log
from llmtop.sessions.records.schema import RunLog

MIN_RUN_VALUES = 3  # a run with fewer baseline values than this is left out of the set


def run_set(path: str, log: RunLog) -> tuple[list[RunLog], list[str]]:
    """The logs of the `bench --runs K` set that `log` (read from `path`) belongs to, in run
    order, and a note per run that could not be read; ([log], []) for a log that is not
    one of a set. The set's logs are named as `bench` names them (commands/bench.py,
    `run_log`): "<stem>-run<k>.jsonl" beside it; the header's bench config says run k of K."""
    bench = log.header.bench
    if bench is None or bench.runs < 2:
        return [log], []
    runs, run = bench.runs, bench.run
    p = Path(path)
    stem = p.stem.removesuffix(f"-run{run}")
    logs, notes = [], []
    for k in range(1, runs + 1):
        sibling = p.with_name(f"{stem}-run{k}{p.suffix}")
        if k == run:
            logs.append(log)
            continue
        try:
            logs.append(read_log(sibling))
        except LogError as exc:
            notes.append(f"run {k} of {runs} left out: {exc}")
    return logs, notes


def runs_ratio_test(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]],
                    seed: int = 0) -> RatioTest:
    """B/A over runs (module docstring). a, b: per run its baseline values of one positive
    metric. n_a / n_b of the answer: the runs on each side. Raises ValueError when a side
    has no run with MIN_RUN_VALUES values, or a median that is not positive."""
    import numpy as np
    from scipy import stats as sps

    xa = [np.asarray(r, dtype=float) for r in a if len(r) >= MIN_RUN_VALUES]
    xb = [np.asarray(r, dtype=float) for r in b if len(r) >= MIN_RUN_VALUES]
    if not xa or not xb:
        raise ValueError(f"too few runs with {MIN_RUN_VALUES} values or more "
                         f"(A {len(xa)}, B {len(xb)})")
    ma = np.array([np.median(r) for r in xa])
    mb = np.array([np.median(r) for r in xb])
    centre_a, centre_b = float(np.median(ma)), float(np.median(mb))
    if centre_a <= 0 or centre_b <= 0:
        raise ValueError(f"medians must be positive for a ratio (got {centre_a:g} and "
                         f"{centre_b:g})")
    rng = np.random.default_rng(seed)

    def draws(runs: list[np.ndarray]) -> np.ndarray:
        picks = rng.integers(0, len(runs), size=(N_RESAMPLES, len(runs)))
        medians = np.empty((N_RESAMPLES, len(runs)))
        for j, run in enumerate(runs):
            idx = rng.integers(0, len(run), size=(N_RESAMPLES, len(run)))
            medians[:, j] = np.median(run[idx], axis=1)
        return np.median(np.take_along_axis(medians, picks, axis=1), axis=1)

    ratios = draws(xb) / draws(xa)
    low, high = (float(q) for q in np.percentile(ratios, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)]))
    if len(ma) >= 2 and len(mb) >= 2:
        p = float(sps.ttest_ind(mb, ma, equal_var=False).pvalue)
    elif len(ma) >= 2:
        p = float(sps.ttest_1samp(ma, centre_b).pvalue)
    elif len(mb) >= 2:
        p = float(sps.ttest_1samp(mb, centre_a).pvalue)
    else:
        p = 1.0  # one run a side: not this test's case (compare_stats.ratio_test is)
    return RatioTest(len(xa), len(xb), centre_a, centre_b, centre_b / centre_a, low, high,
                     1.0 if math.isnan(p) else p)
