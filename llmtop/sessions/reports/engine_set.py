"""`llmtop bench --engines` written out (and `llmtop report SET.engines.json`): markdown and
JSON of one comparison of several engines (analysis/engine_set.py computes).

The markdown: the engines (kind, version, address, model, configuration, verdict, log), how
the model was matched, the interleaving (each round's order), one table per metric and
prompt size with a row per engine (n, median, its 95 % interval), then each pair's headline
and verdicts as `llmtop compare` gives them.
"""

from __future__ import annotations

import json
from typing import Any

from llmtop.sessions.analysis.compare.logs import Comparison
from llmtop.sessions.analysis.engine_set import MetricTable, SetAnalysis
from llmtop.sessions.reports.compare import headline
from llmtop.sessions.reports.text import md_table, num

SHOWN_ROUNDS = 12  # rounds listed one by one in the markdown; the JSON keeps them all


def _settings(settings: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in settings.items()) or "not recorded"


def _table(t: MetricTable) -> list[str]:
    rows = [(r.label, r.n, num(r.median),
             "n/a (n < 6)" if r.low is None or r.high is None
             else f"{num(r.low)}–{num(r.high)}") for r in t.rows]
    return [f"### {t.metric.label} ({t.metric.unit}), {t.group}", "",
            *md_table(("engine", "n", "median", "95 % CI of the median"), rows), ""]


def _pair(c: Comparison) -> list[str]:
    lines = [f"### {c.name_a} vs {c.name_b} (A: {c.name_a}, B: {c.name_b})", "",
             headline(c), ""]
    lines += [f"- {r.metric.label}, {r.group}: {r.verdict}" for r in c.rows]
    lines += [f"- warning: {w}" for w in c.checks.warnings]
    return [*lines, ""]


def markdown(s: SetAnalysis) -> str:
    """The set's report as markdown (the module docstring's sections)."""
    lines = ["# llmtop bench --engines", "", "## Engines", ""]
    lines += md_table(("engine", "kind", "version", "address", "model", "configuration",
                       "verdict", "log"),
                      [(e.label, e.kind, e.version or "n/a", e.url, e.model,
                        _settings(e.settings), e.verdict, e.log) for e in s.engines])
    lines += ["", f"Model matched {s.match.get('how', 'n/a')}: {s.match.get('said', '')}", ""]
    lines += [(f"Interleaved in {len(s.rounds)} rounds, the order rotated by one engine "
               "each round (a drifting machine spreads its drift over every engine):"), ""]
    shown = s.rounds[:SHOWN_ROUNDS]
    lines += md_table(("round", "size", "phase", "order"),
                      [(r.get("round"), f"{r.get('target')} tok", r.get("phase"),
                        " → ".join(map(str, r.get("order", ())))) for r in shown])
    if len(s.rounds) > len(shown):
        lines.append(f"… {len(s.rounds) - len(shown)} more rounds (the JSON lists them all)")
    lines += [""] + [f"Note: {n}" for n in s.notes] + ([""] if s.notes else [])
    lines += ["## Metrics", ""]
    for t in s.tables:
        lines += _table(t)
    lines += ["## Each pair (compare's verdict)", ""]
    for c in s.pairs:
        lines += _pair(c)
    return "\n".join(lines).rstrip() + "\n"


def to_dict(s: SetAnalysis) -> dict[str, Any]:
    """JSON-ready: engines, match, rounds, notes, tables (metric name, unit, group, rows of
    engine, n, median, ci_low, ci_high), pairs (a, b, headline, refused, trusted, problems,
    warnings, rows of metric, group, n_a, n_b, speedup and its interval, verdict)."""
    return {
        "kind": "engines",
        "engines": [{"label": e.label, "kind": e.kind, "version": e.version, "url": e.url,
                     "model": e.model, "settings": e.settings, "verdict": e.verdict,
                     "log": e.log} for e in s.engines],
        "match": s.match, "rounds": s.rounds, "notes": s.notes,
        "tables": [{"metric": t.metric.name, "label": t.metric.label, "unit": t.metric.unit,
                    "group": t.group,
                    "rows": [{"engine": r.label, "n": r.n, "median": r.median,
                              "ci_low": r.low, "ci_high": r.high} for r in t.rows]}
                   for t in s.tables],
        "pairs": [{"a": c.name_a, "b": c.name_b, "headline": headline(c),
                   "refused": c.refused, "trusted": c.trusted, "problems": c.checks.problems,
                   "warnings": c.checks.warnings,
                   "rows": [{"metric": r.metric.name, "group": r.group, "n_a": r.n_a,
                             "n_b": r.n_b, "speedup": r.speedup, "speedup_low": r.speedup_low,
                             "speedup_high": r.speedup_high, "verdict": r.verdict}
                            for r in c.rows]} for c in s.pairs],
    }


def json_text(s: SetAnalysis) -> str:
    """The set's report as one JSON object (`to_dict`)."""
    return json.dumps(to_dict(s), indent=2)
