"""Does B use less energy per output token than A? (analysis/compare/stats.py's machinery.)

Per energy source both runs read (the CPU packages summed as "rapl:cpu", a GPU, …): the
per-request J per output token (decode J / output tokens, analysis/energy.py) of the
measured ok requests whose windows were not coarse, compared as analysis/compare/stats.py compares a
latency: the ratio median(B) / median(A) with its bootstrap interval and the Mann-Whitney
U test (`ratio_test`), significant when both agree. In words: "B uses 23 % less energy per
output token (95 % CI 18–27 %)", with 23 = 100 × (1 − ratio) and the interval's ends
100 × (1 − ci_high) and 100 × (1 − ci_low). Where per-request figures are too few (a coarse
source gives none), the runs' all-in figures are set side by side, without an interval (one
figure per run cannot give one), and said so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmtop.sessions.analysis.compare.stats import (
    CONFIDENCE,
    DEFAULT_SEED,
    MIN_OK,
    RatioTest,
    ratio_test,
)
from llmtop.sessions.analysis.energy import SourceEnergy, summarize_energy
from llmtop.sessions.records.schema import RunLog

CI = f"{CONFIDENCE:.0%}".replace("%", " %") + " CI"  # "95 % CI"


@dataclass(frozen=True, slots=True)
class EnergyComparison:
    """One source's J per output token, B against A.

    source: the figure's source ("" when neither run has one: `verdict` says why). test: the
    ratio test over per-request figures, None when too few. less_pct: how much less energy
    per output token B uses, % (negative: more), with less_low / less_high its interval
    (None without a test). run_a / run_b: the runs' all-in J per output token.
    """

    source: str
    n_a: int
    n_b: int
    test: RatioTest | None
    verdict: str
    less_pct: float | None = None
    less_low: float | None = None
    less_high: float | None = None
    run_a: float | None = None
    run_b: float | None = None

    @property
    def significant(self) -> bool:
        """A significant difference either way."""
        return self.test is not None and self.test.significant

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        t = self.test
        return {
            "source": self.source,
            "n_a": self.n_a,
            "n_b": self.n_b,
            "median_a_j_per_token": t.median_a if t else None,
            "median_b_j_per_token": t.median_b if t else None,
            "ratio": t.ratio if t else None,
            "ci_low": t.ci_low if t else None,
            "ci_high": t.ci_high if t else None,
            "p_value": t.p_value if t else None,
            "significant": self.significant,
            "less_pct": self.less_pct,
            "less_low_pct": self.less_low,
            "less_high_pct": self.less_high,
            "run_a_j_per_token": self.run_a,
            "run_b_j_per_token": self.run_b,
            "verdict": self.verdict,
        }


def compare_energy(a: RunLog, b: RunLog, seed: int = DEFAULT_SEED) -> list[EnergyComparison]:
    """One EnergyComparison per source both runs read; one with source "" and the reason
    when they share none."""
    ea, eb = summarize_energy(a), summarize_energy(b)
    if not ea.available or not eb.available:
        missing = [f"{n}: {e.line}" for n, e in (("A", ea), ("B", eb)) if not e.available]
        if len(missing) == 2 and ea.line == eb.line:  # one machine, one reason: said once
            missing = [f"A and B: {ea.line}"]
        return [
            EnergyComparison("", 0, 0, None, "energy not compared (" + "; ".join(missing) + ")")
        ]
    by_b = {s.source: s for s in eb.sources}
    common = [(s, by_b[s.source]) for s in ea.sources if s.source in by_b]
    if not common:
        return [
            EnergyComparison(
                "",
                0,
                0,
                None,
                "energy not compared: the runs read different "
                f"sources (A {', '.join(s.source for s in ea.sources)}; "
                f"B {', '.join(s.source for s in eb.sources)})",
            )
        ]
    return [judge_energy(sa, sb, seed) for sa, sb in common]


def _run_figure(s: SourceEnergy) -> float | None:
    return s.run.output_j_per_token if s.run is not None else None


def judge_energy(sa: SourceEnergy, sb: SourceEnergy, seed: int = DEFAULT_SEED) -> EnergyComparison:
    """The comparison of one source's J per output token (module docstring)."""
    ra, rb = _run_figure(sa), _run_figure(sb)
    na, nb = len(sa.values), len(sb.values)
    if min(na, nb) < MIN_OK:
        why = (
            f"too few per-request figures (A {na}, B {nb}; at least {MIN_OK} each"
            + (f"; {sa.note or sb.note}" if sa.note or sb.note else "")
            + ")"
        )
        if ra and rb:
            diff = 100 * (1 - rb / ra)
            return EnergyComparison(
                sa.source,
                na,
                nb,
                None,
                f"{why}: the runs' all-in figures, {ra:.3g} → {rb:.3g} J/output token "
                f"({_less(diff)}; one figure per run: no interval)",
                run_a=ra,
                run_b=rb,
            )
        return EnergyComparison(sa.source, na, nb, None, f"not compared: {why}", run_a=ra, run_b=rb)
    try:
        t = ratio_test(sa.values, sb.values, seed)
    except ValueError as exc:
        return EnergyComparison(sa.source, na, nb, None, f"not compared: {exc}", run_a=ra, run_b=rb)
    less, low, high = 100 * (1 - t.ratio), 100 * (1 - t.ci_high), 100 * (1 - t.ci_low)
    if not t.significant:
        verdict = (
            f"no significant difference in energy per output token ({CI} of B/A "
            f"{t.ratio_ci_text()}, p={t.p_value:.2g})"
        )
    elif less > 0:
        verdict = f"B uses {less:.0f} % less energy per output token ({CI} {low:.0f}–{high:.0f} %)"
    else:
        verdict = (
            f"B uses {-less:.0f} % more energy per output token ({CI} {-high:.0f}–{-low:.0f} %)"
        )
    return EnergyComparison(sa.source, t.n_a, t.n_b, t, verdict, less, low, high, ra, rb)


def _less(pct: float) -> str:
    return f"B {pct:.0f} % less" if pct >= 0 else f"B {-pct:.0f} % more"
