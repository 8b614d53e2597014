"""Is B faster than A? Two session logs compared metric by metric, with a confidence interval.

For each metric and prompt size: the medians of the ok requests of both runs (analysis.py's
rules: warm-ups and excluded requests never count), the ratio median(B) / median(A) with a
95 % confidence interval from scipy's bootstrap (requests resampled within each run, seeded),
and scipy's Mann-Whitney U test. A difference is *significant* when the interval excludes 1
and the test's p-value is under ALPHA: both must agree, so equal runs read "no significant
difference" at least 1 − ALPHA of the time (tests/unit/test_compare.py checks it over seeded
trials). The baseline-first form follows docs/method.md: a claim like "2× faster" needs a
baseline measured the same way, so runs that were not measured the same way are refused
(`comparability`), and a run the machine disturbed is named in the warnings.

Bench, load and TUI session logs all read the same way: requests grouped by prompt size
(`prompt_tokens_target`), relay path and, in a load log, level.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from llmtop.engines.events import Status
from llmtop.sessions.analysis.compare_spec import (
    DEFAULT_METRICS,
    DEFAULT_THRESHOLD_PCT,
    METRICS,
    OPTION_KEYS,
    MetricSpec,
)
from llmtop.sessions.analysis.run import Analysis, analyze_log, noisy_samples
from llmtop.sessions.analysis.watch import group_key
from llmtop.sessions.records.schema import RunLog

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

    metric: MetricSpec
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


def judge(metric: MetricSpec, group: str, a: Sequence[float], b: Sequence[float],
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


# ---------------------------------------------------------------------- groups of requests


@dataclass(frozen=True)
class Group:
    """The ok requests of one prompt size (and relay path, and load level) of one run.

    label: "200 tok", "200 tok · relay", "200 tok · level 3", "interactive". values: the
    metric field name → the ok requests' values, in request order (n/a ones left out)."""

    target: int | None
    label: str
    values: dict[str, list[float]]


def run_analysis(log: RunLog) -> Analysis:
    """A log's bench analysis (analysis.analyze_log: the one the report and the verdict
    use)."""
    return analyze_log(log)


def groups(analysis: Analysis, keys: Iterable[str]) -> list[Group]:
    """The ok requests of a run, grouped by prompt size, relay path and load level (a
    request's `level`, present once load logs type it; None otherwise), in run order; a
    watch log's by caller and model ("caller · model"), every request that ended ok."""
    keys = list(keys)
    out: dict[tuple[Any, ...], Group] = {}
    for size in analysis.sizes:
        # a watched app's request counts when it ended ok: a prefix-cache hit (no prompt
        # evaluation time) is what apps' traffic is made of, not a bench's flaw
        ok = [r for r in size.requests if r.record.endpoint is not None
              and r.record.status == Status.OK] or size.ok
        for r in ok:
            level = getattr(r.record, "level", None)
            key: tuple[Any, ...] = (size.target, size.path, level)
            if r.record.endpoint is not None:  # a watched app's request: by caller and model
                caller, model = group_key(r.record)
                key = ("watch", caller, model)
                if key not in out:
                    out[key] = Group(None, f"{caller} · {model}", {k: [] for k in keys})
            if key not in out:
                label = "interactive" if size.target is None else f"{size.target} tok"
                label += f" · {size.path}" if size.path else ""
                label += f" · level {level}" if level is not None else ""
                out[key] = Group(size.target, label, {k: [] for k in keys})
            for k in keys:
                value = r.record.metric(k)
                if value is not None and math.isfinite(value):
                    out[key].values[k].append(value)
    return list(out.values())


def common_groups(ga: Sequence[Group], gb: Sequence[Group]
                  ) -> tuple[list[Group], list[Group], list[str]]:
    """Two watch logs' groups paired by label ("caller · model"), in A's order, and a
    warning naming the groups only one of them has (they are left out)."""
    by_b = {g.label: g for g in gb}
    both = [g for g in ga if g.label in by_b]
    only = [f"A: {g.label}" for g in ga if g.label not in by_b]
    only += [f"B: {g.label}" for g in gb if g.label not in {x.label for x in ga}]
    warning = ([f"compared only the callers and models both logs saw; left out {', '.join(only)}"]
               if only else [])
    return both, [by_b[g.label] for g in both], warning


# ---------------------------------------------------------------------- comparability


@dataclass(frozen=True)
class Checks:
    """Why two runs cannot be compared (problems: refuse) and what to keep in mind
    (warnings: compared anyway)."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _differs(what: str, a: object, b: object) -> str:
    return f"{what} differ: A {a}, B {b}"


def comparability(a: RunLog, b: RunLog, ga: Sequence[Group], gb: Sequence[Group],
                  vary: Iterable[str] = ()) -> Checks:
    """Refuse what was not measured the same way, unless `vary` names it as the point of
    the comparison (VARY_CHOICES): other prompt sizes, generation options (temperature,
    num_ctx, max tokens = num_predict) or engines. Warn for another model, model digest,
    llmtop version, power source or relay path, and for a run that drifted (contaminated)
    or met a NOISY machine in its probe samples."""
    vary = set(vary)
    checks = Checks()
    sizes_a, sizes_b = [g.label for g in ga], [g.label for g in gb]
    if sizes_a != sizes_b and "prompt" not in vary:
        checks.problems.append(_differs("prompt sizes", ", ".join(sizes_a) or "none",
                                        ", ".join(sizes_b) or "none") + " (--vary prompt "
                               "pairs them in run order)")
    oa, ob = a.header.options or {}, b.header.options or {}
    for name, key in OPTION_KEYS.items():
        if oa.get(key) != ob.get(key) and not vary & {name, "options"}:
            checks.problems.append(_differs(f"options ({name})", oa.get(key), ob.get(key))
                                   + f" (--vary {name} if that is the point)")
    ha, hb = a.header, b.header
    if ha.engine != hb.engine and "engine" not in vary:
        checks.problems.append(_differs("engines", ha.engine, hb.engine) + " (--vary engine)")
    _environment_warnings(a, b, vary, checks.warnings)
    for name, log in (("A", a), ("B", b)):
        checks.warnings.extend(_run_warnings(name, log))
    return checks


def _environment_warnings(a: RunLog, b: RunLog, vary: set[str], out: list[str]) -> None:
    ha, hb = a.header, b.header
    digest_a = (ha.model_details or {}).get("digest")
    digest_b = (hb.model_details or {}).get("digest")
    if ha.model != hb.model and "model" not in vary:
        out.append(_differs("models", ha.model, hb.model))
    elif digest_a != digest_b and "model" not in vary:
        out.append(_differs("model digests", digest_a, digest_b) + ": another build of it")
    if ha.llmtop_version != hb.llmtop_version:
        out.append(_differs("llmtop versions", ha.llmtop_version, hb.llmtop_version))
    power_a = ha.machine_environment.get("power")
    power_b = hb.machine_environment.get("power")
    if power_a != power_b:
        out.append(_differs("power sources", power_a, power_b))
    if (ha.via or "direct") != (hb.via or "direct") and "via" not in vary:
        out.append(_differs("paths", ha.via or "direct", hb.via or "direct"))
    if ha.kind != hb.kind:
        out.append(_differs("kinds of run", ha.kind, hb.kind))


# A side whose measured requests met a NOISY machine in at least this share of their probe
# samples cannot carry a claim: a tenth of the measured time is enough to move the spread,
# and so the interval, of a 25-request run (newcomer test: two runs NOISY in 100 % of their
# samples were headlined "B is 2.26x faster").
NOISY_SHARE = 0.10


def distrust(name: str, log: RunLog) -> str | None:
    """Why a difference involving this run cannot be attributed to what was changed: its
    verdict is CONTAMINATED (with the verdict's first reason), or NOISY_SHARE or more of the
    probe samples taken during its requests were NOISY; None when neither. name: "A" or "B"."""
    judgement = run_analysis(log).judgement
    if judgement.contaminated:
        why = f": {judgement.reasons[0]}" if judgement.reasons else ""
        return f"{name} was CONTAMINATED{why}"
    noisy, total = noisy_samples(log.probes)
    if total and noisy / total >= NOISY_SHARE:
        return f"{name} was NOISY in {noisy} of {total} probe samples"
    return None


def _run_warnings(name: str, log: RunLog) -> list[str]:
    out = []
    analysis = run_analysis(log)
    judgement = analysis.judgement
    if judgement.contaminated:
        out.append(f"{name}'s verdict is CONTAMINATED: " + "; ".join(judgement.reasons)
                   + "; `llmtop report` shows which metric")
    noisy, total = noisy_samples(log.probes)
    if noisy:
        out.append(f"{name} was measured on a NOISY machine ({noisy} of {total} probe "
                   "samples during requests)")
    if log.interrupted:
        out.append(f"{name} was interrupted")
    if log.header.kind == "session":
        out.append(f"{name} is an interactive session: each request had its own prompt")
    return out


# ---------------------------------------------------------------------- whole runs


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


def baseline_values(analysis: Analysis, keys: Iterable[str]) -> list[Group]:
    """As `groups`, of each prompt size's baseline (the ok requests outside every slow
    episode) instead of all its ok requests: what a run of a `--runs` set contributes."""
    keys = list(keys)
    out = []
    for size in analysis.sizes:
        label = "interactive" if size.target is None else f"{size.target} tok"
        label += f" · {size.path}" if size.path else ""
        values = {k: [v for r in size.baseline if (v := r.record.metric(k)) is not None
                      and math.isfinite(v)] for k in keys}
        out.append(Group(size.target, label, values))
    return out


def compare_logs(a: RunLog, b: RunLog, names: tuple[str, str] = ("A", "B"),
                 metrics: Sequence[str] = DEFAULT_METRICS, vary: Iterable[str] = (),
                 threshold_pct: float = DEFAULT_THRESHOLD_PCT, seed: int = DEFAULT_SEED,
                 on_row: Callable[[MetricComparison], None] | None = None,
                 runs: tuple[Sequence[RunLog], Sequence[RunLog]] = ((), ())) -> Comparison:
    """Compare run B with the baseline A (see the module docstring). Raises KeyError for a
    metric not in METRICS. Groups pair by label, or in run order with --vary prompt.
    runs: the `bench --runs K` sets A and B belong to (compare_runs.run_set; empty or one
    log: a single run); when either has 2 runs or more, each row is
    compare_runs.runs_ratio_test over the runs' baselines, its verdict ending "over K / L
    runs"."""
    from llmtop.sessions.analysis.compare_runs import runs_ratio_test  # it imports this module

    specs = [METRICS[m] for m in metrics]
    keys = [s.key for s in specs]
    ga, gb = groups(run_analysis(a), keys), groups(run_analysis(b), keys)
    unpaired: list[str] = []
    if a.header.kind == b.header.kind == "watch":  # pair the callers and models both saw
        ga, gb, unpaired = common_groups(ga, gb)
    checks = comparability(a, b, ga, gb, vary)
    checks.warnings.extend(unpaired)
    set_a, set_b = list(runs[0]) or [a], list(runs[1]) or [b]
    by_run = max(len(set_a), len(set_b)) > 1
    ra = [baseline_values(run_analysis(log), keys) for log in set_a] if by_run else []
    rb = [baseline_values(run_analysis(log), keys) for log in set_b] if by_run else []
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
