"""A watch log's report (`llmtop report` on a log of kind "watch"): per caller and model,
what the requests cost (analysis/watch.py), as markdown, CSV or JSON; the HTML page is
html.watch_html."""

from __future__ import annotations

import io
import json
from dataclasses import asdict

from llmtop.sessions.analysis.watch import WatchAnalysis, WatchGroup
from llmtop.sessions.reports.csvcells import CsvWriter
from llmtop.sessions.reports.text import md_table
from llmtop.sessions.reports.text import num as _num

HEADERS = ("caller", "model", "requests", "ok", "TTFT p50 ms", "TTFT p95 ms", "TPOT p50 ms",
           "E2E p50 ms", "decode tok/s", "server decode tok/s", "prefill tok/s",
           "prompt tokens", "cached %", "noisy")


NOTE = ("TTFT: from the watch's send of the request to the engine to the first text; p95 "
        "needs 20 ok requests. cached %: prompt tokens the engine served from its cache, "
        "where it says (llama.cpp, OpenAI usage). noisy: requests that ran while the machine "
        "was NOISY.")


def row(g: WatchGroup) -> tuple[str, ...]:
    """One group's cells, in HEADERS' order ("–" for n/a)."""
    return (g.caller, g.model, str(g.requests), str(g.statuses.get("ok", 0)),
            _num(g.ttft.median), _num(g.ttft.p95), _num(g.tpot.median, 2), _num(g.e2e.median),
            _num(g.decode_tps), _num(g.server_decode_tps), _num(g.server_prefill_tps),
            _num(g.prompt_tokens, 0), _num(g.cached_pct), str(g.noisy))


def markdown(a: WatchAnalysis) -> str:
    """The markdown report: the routes watched, then one row per caller and model."""
    h = a.log.header
    pairs = h.watch.pairs if h.watch else ()
    n = sum(g.requests for g in a.groups)
    lines = ["# llmtop watch report", "",
             f"{n} request{'s' if n != 1 else ''} seen, started {h.started_at or '?'}; "
             "routes: " + (", ".join(f"{p.listen} → {p.upstream}" for p in pairs)
                           or "?") + ".", "",
             NOTE, "",
             "## By caller and model", "", *md_table(HEADERS, [row(g) for g in a.groups])]
    errors = [r for r in a.log.requests if r.error]
    if errors:
        lines += ["", "## Failed requests", "",
                  *md_table(("#", "caller", "model", "status", "error"),
                            [(str(r.id), r.watch.caller or "?", r.model or "?", str(r.status),
                              r.error or "") for r in errors[:50]])]
    if a.log.warnings:
        lines += ["", "**Log problems**: " + "; ".join(a.log.warnings) + "."]
    return "\n".join(lines) + "\n"


def csv_text(a: WatchAnalysis) -> str:
    """One CSV row per caller and model, HEADERS as the header."""
    out = io.StringIO()
    writer = CsvWriter(out)  # a caller's or model's name never starts a formula
    writer.writerow(HEADERS)
    writer.writerows(row(g) for g in a.groups)
    return out.getvalue()


def json_text(a: WatchAnalysis) -> str:
    """{"kind": "watch", "pairs": [...], "groups": [WatchGroup.to_dict(), ...]}."""
    pairs = [asdict(p) for p in a.log.header.watch.pairs] if a.log.header.watch else []
    return json.dumps({"kind": "watch", "pairs": pairs,
                       "groups": [g.to_dict() for g in a.groups]}, indent=2) + "\n"
