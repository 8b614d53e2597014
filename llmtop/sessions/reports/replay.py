"""A replay's comparison with its originals as text: a markdown section (per request, then
the verdicts) and JSON (analysis/replay.py makes the comparison); `ReplayReport`, what
`llmtop report` shows of a replay's log (formats.render writes it, html.replay_html its
page)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmtop.sessions.analysis.load import LoadAnalysis
from llmtop.sessions.analysis.replay import (
    ARRIVAL_LIMIT_MS,
    CLOCK,
    COMPARED,
    ReplayComparison,
)
from llmtop.sessions.measure.metrics import E2E, SERVER_DECODE, TTFT
from llmtop.sessions.records.request import RequestRecord


def _cell(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _tokens(rec: RequestRecord | None, which: str) -> int | None:
    stats = rec.stats if rec is not None else None
    return getattr(stats, which) if stats is not None else None


def _late_hint(c: ReplayComparison) -> str:
    """Where sends were off: which, and the usual cause with its remedy."""
    if not c.arrivals_off():
        return ""
    return (" (each record's lag_ms says which: a send falls late when the machine wakes "
            "llmtop late, most often while the engine keeps every core busy; a lower "
            "priority for the engine, `renice 10 -p PID`, or cores of its own, "
            "docs/guide/load.md)")


def markdown(c: ReplayComparison) -> str:
    """The comparison as a markdown section (per request, then the verdicts); it starts
    with its heading, no blank line (`llmtop load --replay` prints it alone; `llmtop report`
    sets it a blank line below the level's report)."""
    t = c.trace
    how = ("the recorded text of each request's last user message" if t.bodies else
           "prompts of llmtop's random words sized to each original's server prompt count "
           "(no bodies were recorded: run the watch with --log-bodies for the same prompts)")
    lines = [f"## Replay of {t.path}", "",
             (f"{len(t.originals)} ok requests replayed ({t.left_out} others not); prompts: "
             f"{how}; num_predict set to each original's output tokens; arrival gaps from "
             f"{CLOCK}."), ""]
    if c.arrival_errors_ms is not None:
        lines += [(f"Open loop: replayed arrival gaps within {_cell(c.max_arrival_error_ms, 3)} "
                  "ms of the recorded ones (the largest |error| over the requests); "
                  f"{c.arrivals_off()} of {len(c.arrival_errors_ms)} sends more than "
                  f"{ARRIVAL_LIMIT_MS:g} ms off{_late_hint(c)}."), ""]
    head = ("| # | original id | status | TTFT ms A → B | decode tok/s A → B | E2E ms A → B "
            "| prompt tok A → B | output tok A → B |")
    lines += [head, "|---|---|---|---|---|---|---|---|"]
    for k, p in enumerate(c.pairs, 1):
        o, r = p.original, p.replay
        row = [str(k), str(o.id), str(r.status) if r else "not sent"]
        for spec in COMPARED:
            a_value, b_value = o.metric(spec.key), r.metric(spec.key) if r else None
            row.append(f"{_cell(a_value)} → {_cell(b_value)}")
        for which in ("prompt_eval_count", "eval_count"):
            a, b = _tokens(o, which), _tokens(r, which)
            row.append(f"{'n/a' if a is None else a} → {'n/a' if b is None else b}")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "A: the originals as the watch measured them; B: this replay.", ""]
    lines += [f"- {m.metric.label}: {m.verdict}" for m in c.metrics]
    return "\n".join(lines) + "\n"


def as_json(c: ReplayComparison) -> dict[str, Any]:
    """The comparison as JSON: the trace, each pair's ids and figures, the verdicts."""
    def figures(rec: RequestRecord | None) -> Mapping[str, Any] | None:
        if rec is None:
            return None
        return {"id": rec.id, "status": str(rec.status), TTFT.key: rec.metric(TTFT.key),
                "decode_tps": rec.metric(SERVER_DECODE.key), E2E.key: rec.metric(E2E.key),
                "prompt_tokens": _tokens(rec, "prompt_eval_count"),
                "output_tokens": _tokens(rec, "eval_count")}
    return {"trace": c.trace.identity(), "max_arrival_error_ms": c.max_arrival_error_ms,
            "arrival_errors_ms": c.arrival_errors_ms,
            "arrivals_over_limit": c.arrivals_off(), "arrival_limit_ms": ARRIVAL_LIMIT_MS,
            "pairs": [{"original": figures(p.original), "replay": figures(p.replay)}
                      for p in c.pairs],
            "metrics": [{"metric": m.metric.name, "verdict": m.verdict,
                         "speedup": m.speedup, "speedup_low": m.speedup_low,
                         "speedup_high": m.speedup_high} for m in c.metrics]}


def json_text(c: ReplayComparison) -> str:
    """`as_json` as indented JSON text."""
    return json.dumps(as_json(c), indent=2, ensure_ascii=False, default=str) + "\n"


@dataclass(frozen=True)
class ReplayReport:
    """What `llmtop report` shows of a replay's log: its one level as a sweep's report, then
    the comparison with the originals (formats.render writes both)."""

    sweep: LoadAnalysis
    comparison: ReplayComparison
