"""`llmtop compare` written out: markdown and JSON (analysis/compare/logs.py computes; html.py
draws)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llmtop.sessions.analysis.catalog import traffic
from llmtop.sessions.analysis.compare.energy import EnergyComparison
from llmtop.sessions.analysis.compare.logs import Comparison
from llmtop.sessions.analysis.compare.stats import ALPHA, CONFIDENCE, MIN_OK, MetricComparison
from llmtop.sessions.analysis.context import curve_checks
from llmtop.sessions.analysis.run import analyze_run
from llmtop.sessions.records.schema import RunLog
from llmtop.sessions.reports.text import md_table, num


@dataclass(frozen=True)
class Comparisons:
    """`llmtop compare`'s subject for formats.render: the comparisons (each B against the
    baseline A) and the logs they came from (A first, then each B in the same order);
    energy: per comparison, its energy per output token (analysis/compare/energy.py; empty
    for a refused comparison or when not computed)."""

    comparisons: Sequence[Comparison]
    logs: Sequence[RunLog]
    energy: Sequence[Sequence[EnergyComparison]] = field(default_factory=tuple)

CI = f"{CONFIDENCE:.0%}".replace("%", " %") + " CI"  # "95 % CI"


def headline(c: Comparison) -> str:
    """One line for a whole comparison: refused; not attributable (either run drifted or met
    a NOISY machine: the rows are shown, no claim is made); a regression; or the count of
    faster and slower rows; either of the last two followed by the engine settings that
    differ, when some do (a difference is then the configuration's as much as the change's)."""
    if c.refused:
        return f"NOT COMPARABLE: {c.name_b} vs {c.name_a}: " + "; ".join(c.checks.problems)
    if not c.trusted:
        return (f"NOT ATTRIBUTABLE: {c.name_b} vs {c.name_a}: {'; '.join(c.distrust)}; the "
                "differences below may be the machine's, not the change's (measure again on "
                "a quiet machine: `llmtop preflight`)")
    faster = sum(1 for r in c.rows if r.significant and (r.speedup or 0) >= 1)
    slower = sum(1 for r in c.rows if r.significant and (r.speedup or 0) < 1)
    state = (f"REGRESSION (slower by over {c.threshold_pct:g} %)" if c.regression
             else "no regression")
    config = (f"; the engines' configurations differ ({'; '.join(c.checks.config)}), so a "
              "difference may be the configuration's" if c.checks.config else "")
    return (f"{c.name_b} vs {c.name_a}: {state}; {faster} faster, {slower} slower, "
            f"{len(c.rows) - faster - slower} without a significant difference{config}")


def row_cells(r: MetricComparison) -> tuple[object, ...]:
    """One row of the results table: group, metric, n, both medians, B/A with its interval,
    p-value, verdict."""
    t = r.test
    unit = r.metric.unit
    return (
        r.group, r.metric.label, f"{r.n_a} / {r.n_b}",
        f"{num(t.median_a, 2)} {unit}" if t else "n/a",
        f"{num(t.median_b, 2)} {unit}" if t else "n/a",
        t.ratio_ci_text() if t else "n/a",
        f"{t.p_value:.2g}" if t else "n/a",
        ("⚠ " if r.regression else "") + r.verdict,
    )


ROW_HEADERS = ("prompt", "metric", "n A / B", "median A", "median B",
               f"B/A, {CI}", "p (U test)", "verdict")


def method_note() -> str:
    """How the verdicts were reached, one paragraph."""
    return (f"Medians of the ok requests outside every slow episode, as the bench report "
            f"gives them (warm-ups, excluded requests and episodes never count); B/A "
            f"with a {CI} from a seeded bootstrap over requests "
            f"(scipy.stats.bootstrap) and a Mann-Whitney U test (scipy.stats.mannwhitneyu). "
            f"A difference is significant when the interval excludes 1 and p < {ALPHA:g}; "
            f"fewer than {MIN_OK} ok requests per side are not compared.")


def curve_lines(baseline: RunLog, other: RunLog, name_a: str) -> list[str]:
    """How the baseline's prefill curve (when it swept sizes) predicts the other run's
    sizes: one sentence per size ([] without a curve)."""
    checks = curve_checks(analyze_run(baseline), analyze_run(other))
    if not checks:
        return []
    return ["", f"{name_a}'s prefill curve against these prefill times:", "",
            *(f"- {c.sentence('it')}" for c in checks)]


def markdown(comparisons: Sequence[Comparison],
             energy: Sequence[Sequence[EnergyComparison]] = (),
             logs: Sequence[RunLog] = ()) -> str:
    """Every comparison (each B against the baseline A) as one markdown document, each with
    its energy per output token where `energy` gives it; with the `logs` (A, then each B),
    also how A's prefill curve predicts each B."""
    lines = ["# llmtop compare", "", method_note()]
    for k, c in enumerate(comparisons):
        lines += ["", f"## {c.name_b} against {c.name_a}", "", f"**{headline(c)}**"]
        if len(logs) > k + 1:  # what each run sent, when not llmtop's own prompts
            pairs = ((c.name_a, traffic(logs[0])), (c.name_b, traffic(logs[k + 1])))
            sent = [f"- {name} sent: {what}" for name, what in pairs if what]
            lines += ["", *sent] if sent else []
        if c.checks.warnings:
            lines += ["", *(f"- warning: {w}" for w in c.checks.warnings)]
        if c.rows:
            lines += ["", *md_table(ROW_HEADERS, [row_cells(r) for r in c.rows])]
        mine = energy[k] if k < len(energy) else ()
        if mine:
            lines += ["", "Energy per output token (per request: decode J / output tokens):",
                      *(f"- {e.source + ': ' if e.source else ''}{e.verdict}" for e in mine)]
        if len(logs) > k + 1:
            lines += curve_lines(logs[0], logs[k + 1], c.name_a)
    return "\n".join(lines) + "\n"


def _row_json(r: MetricComparison) -> dict[str, Any]:
    t = r.test
    return {
        "group": r.group, "metric": r.metric.name, "field": r.metric.key, "unit": r.metric.unit,
        "n_a": r.n_a, "n_b": r.n_b,
        "median_a": t.median_a if t else None, "median_b": t.median_b if t else None,
        "ratio": t.ratio if t else None, "ci_low": t.ci_low if t else None,
        "ci_high": t.ci_high if t else None, "p_value": t.p_value if t else None,
        "significant": r.significant, "speedup": r.speedup, "speedup_low": r.speedup_low,
        "speedup_high": r.speedup_high, "regression": r.regression, "verdict": r.verdict,
    }


def to_json(comparisons: Sequence[Comparison],
            energy: Sequence[Sequence[EnergyComparison]] = ()) -> str:
    """Every comparison as one JSON document ({"confidence", "alpha", "comparisons": […]}),
    each with its "energy" comparisons (a list; empty when none was made)."""
    doc = {
        "confidence": CONFIDENCE, "alpha": ALPHA, "min_ok": MIN_OK,
        "comparisons": [
            {"a": c.name_a, "b": c.name_b, "refused": c.refused, "problems": c.checks.problems,
             "warnings": c.checks.warnings, "config_differs": c.checks.config,
             "regression": c.regression,
             "threshold_pct": c.threshold_pct, "headline": headline(c),
             "trusted": c.trusted, "distrust": c.distrust,
             "rows": [_row_json(r) for r in c.rows],
             "energy": [e.to_dict() for e in (energy[k] if k < len(energy) else ())]}
            for k, c in enumerate(comparisons)
        ],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
