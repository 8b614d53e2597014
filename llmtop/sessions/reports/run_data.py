"""A run's report as data: every request as a CSV row (`csv_text`), the whole report as
one JSON document (`json_text`).

The CSV's first columns are CSV_COLUMNS (llmtop/files.py names them beside the load
report's), then an energy source's figures per request ("FIELD[SOURCE]", CSV_ENERGY). The
JSON carries the header, the verdict, every size's summaries, drift and requests, the slow
episodes, attribution and causes, the context sections (context.py's `context_json`),
energy and `preflight_held` (run_environment.py). The `Report` they read is run.py's.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from llmtop.sessions.analysis.machine import throttle_sentences
from llmtop.sessions.analysis.run import BENCH_METRICS, CONTEXT_PHASES, SizeAnalysis
from llmtop.sessions.measure.metrics import LOAD
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import AnyRecord, EnergyRecord, ProbeRecord, RunLog
from llmtop.sessions.reports.context import context_json, depth_json
from llmtop.sessions.reports.csvcells import CsvWriter
from llmtop.sessions.reports.run import Report
from llmtop.sessions.reports.run_environment import preflight_held

CSV_METRICS = (*(m.key for m in BENCH_METRICS), LOAD.key)  # each request's, by key
# noisy: a NOISY probe sample was taken during the request (true / false; empty: no sample
# saw it), so a sheet made from the CSV keeps the noise
CSV_COLUMNS = ("prompt_tokens_target", "index", "phase", "status", "reason", *CSV_METRICS,
               "prompt_eval_count", "eval_count", "prompt_words", "started_at", "episode",
               "noisy")


CSV_ENERGY = ("energy_j", "prefill_j", "decode_j", "output_j_per_token", "prompt_j_per_token",
              "energy_above_idle_j", "output_above_idle_j_per_token", "coarse")


def _csv_row(rec: RequestRecord, index: int, phase: str | None, status: str, reason: str,
             energy: dict[int, dict[str, EnergyRecord]],
             episode: int | None = None,
             noisy: dict[int, bool] | None = None) -> dict[str, Any]:
    return {
        "noisy": (noisy or {}).get(rec.id),
        "prompt_tokens_target": rec.plan.prompt_tokens_target, "index": index, "phase": phase,
        "status": status, "reason": reason,
        **{k: getattr(rec.metrics, k) for k in CSV_METRICS},
        "prompt_eval_count": rec.stats.prompt_eval_count if rec.stats else None,
        "eval_count": rec.stats.eval_count if rec.stats else None,
        "prompt_words": rec.plan.prompt_words, "started_at": rec.started_at, "episode": episode,
        **{f"{f}[{src}]": getattr(e, f) for src, e in energy.get(rec.id, {}).items()
           for f in CSV_ENERGY},
    }


def csv_text(report: Report) -> str:
    """Every request of the run as one CSV row: the sizes' (with their bench status), then
    the cache pairs' and the conversation's (with the stream's status); with energy sources,
    their figures per request in columns named "FIELD[SOURCE]" (J, J/token; CSV_ENERGY),
    empty where n/a."""
    energy = _energy_by_request(report.log)
    noisy = noisy_by_request(report.log.probes)
    sources = list(dict.fromkeys(src for per in energy.values() for src in per))
    extra = [f"{f}[{src}]" for src in sources for f in CSV_ENERGY]
    fields = [*CSV_COLUMNS, *extra]
    rows = [_csv_row(r.record, r.index + 1, r.phase, r.status, r.reason, energy, r.episode,
                     noisy)
            for s in report.analysis.sizes for r in s.requests]
    rows += [_csv_row(rec, (rec.plan.index or 0) + 1, rec.phase, rec.status, "", energy,
                      noisy=noisy)
             for rec in report.log.requests if rec.phase in CONTEXT_PHASES]
    out = io.StringIO()
    writer = CsvWriter(out, lineterminator="\n")  # no cell from a log starts a formula
    writer.writerow(fields)
    writer.writerows([row.get(f) for f in fields] for row in rows)
    return out.getvalue()


def noisy_by_request(probes: Iterable[ProbeRecord]) -> dict[int, bool]:
    """request id → whether a NOISY probe sample was taken during it (ids no sample was
    tagged with are absent)."""
    out: dict[int, bool] = {}
    for p in probes:
        if p.request_id is not None:
            out[p.request_id] = out.get(p.request_id, False) or p.noisy
    return out


def _energy_by_request(log: RunLog) -> dict[int, dict[str, EnergyRecord]]:
    """request id → source → its "request" energy record."""
    out: dict[int, dict[str, EnergyRecord]] = {}
    for e in log.energy:
        if e.scope == "request" and e.request_id is not None:
            out.setdefault(e.request_id, {})[e.source] = e
    return out


def _body(record: AnyRecord | None) -> dict[str, Any] | None:
    """A record's JSON without its `type` (None stays None)."""
    if record is None:
        return None
    return {k: v for k, v in record.to_json().items() if k != "type"}


def json_text(report: Report) -> str:
    """The report as one JSON document."""
    return json.dumps(_json(report), indent=2, ensure_ascii=False, default=str) + "\n"


def _json(report: Report) -> dict[str, Any]:
    a = report.analysis
    return {
        "header": asdict(report.log.header),
        "verdict": a.verdict,
        "verdict_reasons": list(a.judgement.reasons),
        "episodes": {str(k): [e.to_dict() for e in v] for k, v in report.episodes.items()},
        "noisy_probe_samples": dict(zip(("noisy", "during_requests"), report.noisy, strict=True)),
        "interrupted": report.interrupted,
        "drift_threshold_pct": a.drift_threshold_pct,
        "calibration": _body(report.calibration),
        "environment": {"start": _body(report.env_start) or {}, "end": _body(report.env_end) or {}},
        "preflight": _body(report.preflight),
        "preflight_held": preflight_held(report),
        "relay_comparison": [asdict(c) for c in report.relay],
        "attribution": {str(k): v.to_dict() for k, v in report.attributions.items()},
        "cause": {str(k): v.to_dict() for k, v in report.causes.items()},
        "sizes": [_json_size(s) for s in a.sizes],
        "energy": report.energy.to_dict() if report.energy else None,
        "bandwidth": report.bandwidth.to_dict() if report.bandwidth else None,
        "offload": asdict(report.offload) if report.offload else None,
        "soc_findings": [asdict(f) for f in report.soc],
        "engine_own": report.engine_own.to_json() if report.engine_own else None,
        **context_json(report.sweep, report.pairs, report.turns, report.cold_turns),
        **depth_json(report.depths),
        "warnings": list(report.log.warnings),
        **_json_repeatability(report),
    }


def _json_repeatability(report: Report) -> dict[str, Any]:
    """`bench --runs K`' key, last ({} for one run)."""
    found = report.repeatability
    if found is None:
        return {}
    return {"repeatability": {"logs": found.logs, "sizes": [asdict(s) for s in found.sizes]}}


def _json_size(s: SizeAnalysis) -> dict[str, Any]:
    return {
        "prompt_tokens_target": s.target,
        "path": s.path,
        "n_ok": len(s.ok),
        "n_baseline": len(s.baseline),
        "trends": s.episodes.trends,
        "contaminated": s.contaminated,
        "drifted": s.drifted,
        "summaries": {k: v.to_dict() for k, v in s.summaries.items()},
        "drift": {k: v.to_dict() for k, v in s.drifts.items()},
        "series": s.series,
        "throttles": throttle_sentences((r.number, r.record) for r in s.ok
                                        if r.number is not None),
        "requests": [
            {"index": r.index + 1, "number": r.number, "episode": r.episode,
             "phase": r.phase, "status": r.status, "reason": r.reason,
             "timing_gap_share": r.timing_gap_share, "metrics": r.record.metrics.to_dict(),
             "stats": r.record.stats.to_dict() if r.record.stats else None}
            for r in s.requests
        ],
    }
