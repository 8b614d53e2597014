"""Reports of a session log — markdown, CSV, JSON — computed from the log alone.

`build(log)` analyses the log's request records (analysis.py) and gathers the header,
calibration, environment and probe records; `render(report, fmt)` writes it out. The markdown
follows the source's form (docs/method.md, "Result table"): a row per prompt size, every cell filled
from measurements (or saying why it cannot be).
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from llmtop.sessions.analysis import METRICS, Analysis, SizeAnalysis, analyze
from llmtop.sessions.attribution import Attribution, attribute
from llmtop.sessions.log import LoadedLog
from llmtop.sessions.stats import percentile

FORMATS = ("md", "csv", "json")


@dataclass
class Report:
    """A log's analysis plus the records a report shows beside it.

    attributions: per prompt size (target), which application likely slowed the slow
    requests, or that none stands out (attribution.py).
    """

    log: LoadedLog
    analysis: Analysis
    calibration: dict[str, Any] | None
    env_start: dict[str, Any]
    env_end: dict[str, Any]
    summary: dict[str, Any] | None
    interrupted: bool
    preflight: dict[str, Any] | None = None
    attributions: dict[Any, Attribution] = field(default_factory=dict)


def size_key(size: SizeAnalysis) -> Any:
    """How a size is keyed in `attributions`: its target, or "target:path" in a relay comparison."""
    return size.target if size.path is None else f"{size.target}:{size.path}"


# Which drifted metric decides "slow" for attribution, most telling first: decode rate is
# where the source's browser showed (−30.8 %); overhead, a small difference, comes last.
ATTRIBUTION_ORDER = ("server_decode_tps", "client_decode_tps", "tpot_ms", "ttft_ms", "prompt_eval_ms",
                     "server_prefill_tps", "e2e_ms", "overhead_ms")


def slow_by_drift(size: SizeAnalysis) -> tuple[str, bool, set[int]] | None:
    """For a drifted size: the first drifted metric in ATTRIBUTION_ORDER, its direction, and
    the ids of the ok requests worse than its first-5 median by more than 5 %. None when clean."""
    drifted = [key for key in ATTRIBUTION_ORDER if size.drifts[key].worse]
    if not drifted:
        return None
    key = drifted[0]
    better = next(b for k, _l, _u, b in METRICS if k == key)
    base = size.drifts[key].first_median
    if base is None:
        return None
    limit = 0.05 * abs(base)
    slow = set()
    for r in size.ok:
        value = (r.record.get("metrics") or {}).get(key)
        if value is None:
            continue
        if (better and value < base - limit) or (not better and value > base + limit):
            slow.add(int(r.record.get("id", r.index)))
    return key, better, slow


def _attribute(size: SizeAnalysis, probes: list[dict[str, Any]]) -> Attribution:
    requests = [dict(r.record) for r in size.ok]
    by_drift = slow_by_drift(size)
    if by_drift is not None:
        key, better, slow = by_drift
        return attribute(requests, probes, key, better, slow_ids=slow)
    return attribute(requests, probes)


def build(log: LoadedLog) -> Report:
    """Analyse a loaded log (bench or interactive session)."""
    calibration = next(log.of_type("calibration"), None)
    expected = {}
    if calibration:
        expected = {int(t): p["tokens"] for t, p in calibration.get("targets", {}).items()}
    threshold = (log.header.get("bench") or {}).get("drift_threshold_pct", 5.0)
    envs = list(log.of_type("environment"))
    analysis = analyze(log.of_type("request"), expected, threshold)
    probes = list(log.of_type("probe"))
    return Report(
        log=log,
        analysis=analysis,
        calibration=calibration,
        env_start=next((e for e in envs if e.get("phase") == "start"), {}),
        env_end=next((e for e in envs if e.get("phase") == "end"), {}),
        summary=next(log.of_type("summary"), None),
        interrupted=any(True for _ in log.of_type("interrupted")),
        preflight=next(log.of_type("preflight"), None),
        attributions={size_key(s): _attribute(s, probes) for s in analysis.sizes},
    )


def render(report: Report, fmt: str) -> str:
    """The report as text in `fmt` ("md", "csv" or "json"). Raises ValueError otherwise."""
    if fmt == "md":
        return _markdown(report)
    if fmt == "csv":
        return _csv(report)
    if fmt == "json":
        return json.dumps(_json(report), indent=2, ensure_ascii=False, default=str) + "\n"
    raise ValueError(f"unknown report format {fmt!r}: use one of {', '.join(FORMATS)}")


# ---------------------------------------------------------------------- helpers


def _num(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _size_label(size: SizeAnalysis, calibration: dict[str, Any] | None) -> str:
    via = f" · {size.path}" if size.path else ""
    if size.target is None:
        return "interactive" + via
    point = ((calibration or {}).get("targets") or {}).get(str(size.target)) or {}
    if point:
        return f"{size.target} tok ({point.get('words')} words → {point.get('tokens')}){via}"
    return f"{size.target} tok{via}"


@dataclass(frozen=True)
class RelayComparison:
    """Paired direct vs relayed requests of one prompt size (a --compare-relay run).

    pairs: pairs where both requests were ok. ttft_diff_*: relay − direct client TTFT, ms
    (median and the interquartile range). overhead_*: median client TTFT − (load + server
    prefill) per path, ms.
    """

    target: int | None
    pairs: int
    ttft_diff_median: float | None
    ttft_diff_p25: float | None
    ttft_diff_p75: float | None
    overhead_direct: float | None
    overhead_relay: float | None
    decode_direct: float | None
    decode_relay: float | None


def relay_comparisons(analysis: Analysis) -> list[RelayComparison]:
    """Pair each relayed request with the direct one of the same pair index and size."""
    out = []
    targets = dict.fromkeys(s.target for s in analysis.sizes if s.path)
    for target in targets:
        by_path = {s.path: s for s in analysis.sizes if s.target == target and s.path}
        direct, relay = by_path.get("direct"), by_path.get("relay")
        if direct is None or relay is None:
            continue

        def ok_by_pair(size: SizeAnalysis) -> dict[int, dict[str, Any]]:
            return {int(r.record.get("pair", r.index)): r.record.get("metrics") or {} for r in size.ok}

        d, r = ok_by_pair(direct), ok_by_pair(relay)
        diffs = [r[i]["ttft_ms"] - d[i]["ttft_ms"] for i in sorted(d.keys() & r.keys())
                 if r[i].get("ttft_ms") is not None and d[i].get("ttft_ms") is not None]
        out.append(RelayComparison(
            target=target, pairs=len(diffs),
            ttft_diff_median=statistics.median(diffs) if diffs else None,
            ttft_diff_p25=percentile(diffs, 25) if diffs else None,
            ttft_diff_p75=percentile(diffs, 75) if diffs else None,
            overhead_direct=direct.summaries["overhead_ms"].median,
            overhead_relay=relay.summaries["overhead_ms"].median,
            decode_direct=direct.summaries["client_decode_tps"].median,
            decode_relay=relay.summaries["client_decode_tps"].median,
        ))
    return out


def _markdown_relay(report: Report) -> list[str]:
    rows = relay_comparisons(report.analysis)
    if not rows:
        return []
    lines = ["", "## Relay overhead (direct and relayed requests interleaved)", "",
             ("| prompt | pairs | TTFT relay − direct, median [IQR] | TTFT − load − prefill: direct / relay "
              "| decode tok/s (client): direct / relay |"), "|---|---|---|---|---|"]
    for c in rows:
        lines.append(
            f"| {c.target} tok | {c.pairs} | {_num(c.ttft_diff_median, 2)} ms [{_num(c.ttft_diff_p25, 2)}, "
            f"{_num(c.ttft_diff_p75, 2)}] | {_num(c.overhead_direct, 2)} / {_num(c.overhead_relay, 2)} ms "
            f"| {_num(c.decode_direct)} / {_num(c.decode_relay)} |"
        )
    return lines


def _gpu_cells(report: Report) -> tuple[str, str]:
    """GPU util % (median of probe samples during measured requests) and VRAM with its tool."""
    utils, used = [], []
    for probe in report.log.of_type("probe"):
        gpu = probe.get("gpu") or {}
        for dev in gpu.get("devices") or []:
            if dev.get("util_percent") is not None:
                utils.append(dev["util_percent"])
            if dev.get("memory_used") is not None:
                used.append(dev["memory_used"])
    loaded = report.env_end.get("loaded") or report.env_start.get("loaded") or {}
    ps = f"{_bytes(loaded.get('size_vram'))} of {_bytes(loaded.get('size'))} (/api/ps)" if loaded.get("size") else ""
    if not utils:
        machine = report.log.header.get("environment") or {}
        reason = (machine.get("gpu") or {}).get("reason") or "no GPU samples"
        return f"n/a ({reason})", ps or "n/a"
    util = f"{statistics.median(utils):.0f} (nvml, median)"
    vram = f"{_bytes(int(max(used)))} peak (nvml)" + (f"; {ps}" if ps else "")
    return util, vram


def _warmup_load(size: SizeAnalysis, analysis: Analysis) -> str:
    """The largest load among the run's first request and this size's warm-ups, in ms."""
    candidates = [(r.record.get("metrics") or {}).get("load_ms") for r in size.warmups] + [analysis.load_ms]
    loads = [float(x) for x in candidates if x is not None]
    return f"{_num(max(loads))} ms" if loads else "n/a (no warm-up)"


def _notes(size: SizeAnalysis) -> str:
    notes = []
    worse = [f"{label} {size.drifts[key].change_pct:+.1f} %" for key, label, unit, _ in METRICS if size.drifts[key].worse]
    notes.append(("drifted: " + ", ".join(worse)) if worse else "drift clean")
    if size.excluded:
        notes.append(f"{len(size.excluded)} excluded")
    return "; ".join(notes)


# ---------------------------------------------------------------------- markdown


def _markdown(report: Report) -> str:
    h, a = report.log.header, report.analysis
    lines = [f"# llmtop {h.get('kind', 'session')} report — {h.get('model')} on {h.get('engine')}", ""]
    why = {"inconclusive": " — too few ok requests to judge drift (it needs 10 per prompt size)"}.get(a.verdict, "")
    lines.append(
        f"**Verdict: {a.verdict.upper()}**{why} (drift threshold ±{a.drift_threshold_pct:g} % between the medians "
        f"of the first and last 5 ok requests). {a.ok_count} requests in the statistics."
    )
    noisy, total = noisy_samples(report)
    if noisy:
        lines.append(f"**The machine was NOISY** in {noisy} of {total} probe samples taken during requests: "
                     "see \"Was the machine quiet?\" before trusting these numbers.")
    if report.log.warnings:
        lines.append("**Log problems**: " + "; ".join(report.log.warnings) + ".")
    if report.interrupted:
        lines.append("**The run was interrupted**: the statistics cover the requests that finished.")
    util, vram = _gpu_cells(report)
    lines += ["", "## Results", ""]
    lines.append("| prompt | n (after warm-up) | TTFT p50 / p95 (client) | E2E p50 | prefill tok/s (server) "
                 "| decode tok/s (server) | load (warm-up) | GPU util % | VRAM (tool) | notes |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for s in a.sizes:
        t, e = s.summaries["ttft_ms"], s.summaries["e2e_ms"]
        p95 = _num(t.p95) if t.p95 is not None else (t.p95_note or "n/a")
        lines.append(
            f"| {_size_label(s, report.calibration)} | {len(s.ok)} | {_num(t.median)} / {p95} ms | {_num(e.median)} ms "
            f"| {_num(s.summaries['server_prefill_tps'].median)} | {_num(s.summaries['server_decode_tps'].median)} "
            f"| {_warmup_load(s, a)} | {util} | {vram} | {_notes(s)} |"
        )
    for s in a.sizes:
        lines += ["", f"## Statistics — {_size_label(s, report.calibration)}", ""]
        lines.append("| metric | unit | n | median | min | max | p95 | first 5 → last 5 | drift | series |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for key, label, unit, _better in METRICS:
            m, d = s.summaries[key], s.drifts[key]
            p95 = _num(m.p95, 2) if m.p95 is not None else (m.p95_note or "n/a")
            change = "n/a" if d.change_pct is None else f"{d.change_pct:+.1f} %" + (" ⚠" if d.worse else "")
            trend = f"{_num(d.first_median, 2)} → {_num(d.last_median, 2)}" if d.change_pct is not None else (d.note or "n/a")
            lines.append(
                f"| {label} | {unit} | {m.n} | {_num(m.median, 2)} | {_num(m.min, 2)} | {_num(m.max, 2)} | {p95} "
                f"| {trend} | {change} | `{s.sparkline(key)}` |"
            )
    lines += _markdown_relay(report)
    lines += _markdown_machine(report)
    lines += _markdown_requests(a) + _markdown_calibration(report) + _markdown_environment(report)
    return "\n".join(lines) + "\n"


def noisy_samples(report: Report) -> tuple[int, int]:
    """(NOISY probe samples, all probe samples) among those taken during a request."""
    during = [p for p in report.log.of_type("probe") if p.get("request_id") is not None]
    return sum(1 for p in during if not (p.get("verdict") or {}).get("quiet", True)), len(during)


def _measured(f: dict[str, Any]) -> str:
    if f.get("value") is None:
        return ""
    threshold = f" vs threshold {f.get('threshold')} {f.get('unit')}" if f.get("threshold") is not None else ""
    return f" (measured {f.get('value')} {f.get('unit')}{threshold})"


def _markdown_machine(report: Report) -> list[str]:
    """Preflight findings and, per prompt size, who likely slowed the slow requests."""
    lines = ["", "## Was the machine quiet?", ""]
    pf = report.preflight
    if pf is None:
        lines.append("No preflight check was recorded.")
    else:
        lines.append(f"Preflight ({pf.get('duration_s')} s, {pf.get('samples')} samples): **{pf.get('verdict')}**, "
                     f"background CPU {_num(pf.get('background_cpu_median'))} % of the machine (median).")
        for f in pf.get("findings", []):
            lines.append(f"- {str(f.get('level', '')).upper()} {f.get('code')}: {f.get('message')}{_measured(f)}"
                         f" — {f.get('remedy')}")
    noisy, total = noisy_samples(report)
    lines.append("")
    lines.append(f"During the requests: {noisy} of {total} probe samples found the machine NOISY.")
    for s in report.analysis.sizes:
        att = report.attributions.get(size_key(s))
        if att is not None:
            who = f"likely culprit **{att.culprit}**: " if att.culprit else ""
            lines.append(f"- {_size_label(s, report.calibration)}: {who}{att.evidence}")
    return lines


def _markdown_requests(a: Analysis) -> list[str]:
    lines = ["", "## Warm-up requests (kept, not in the statistics)", ""]
    warm = [("first request", rec.get("status"), rec) for rec in a.load_requests]
    warm += [(f"{r.prompt_tokens_target} tok #{r.index + 1}", r.status, r.record) for s in a.sizes for r in s.warmups]
    if warm:
        lines.append("| request | status | TTFT ms | load ms | prefill ms | decode tok/s (server) |")
        lines.append("|---|---|---|---|---|---|")
        for label, status, rec in warm:
            m = rec.get("metrics") or {}
            lines.append(f"| {label} | {status} | {_num(m.get('ttft_ms'))} | {_num(m.get('load_ms'))} "
                         f"| {_num(m.get('prompt_eval_ms'))} | {_num(m.get('server_decode_tps'))} |")
    else:
        lines.append("none")
    lines += ["", "## Excluded requests", ""]
    excluded = [r for s in a.sizes for r in s.excluded]
    if excluded:
        lines.append("| prompt | # | status | reason |")
        lines.append("|---|---|---|---|")
        lines += [f"| {r.prompt_tokens_target} | {r.index + 1} | {r.status} | {r.reason} |" for r in excluded]
    else:
        lines.append("none: every measured request was ok")
    if a.timing_warnings:
        lines += ["", "## Server timings that do not add up", ""]
        for r in a.timing_warnings:
            lines.append(f"- request {r.index + 1} ({r.prompt_tokens_target} tok): {r.timing_gap_share:.0%} of "
                         "total_duration is neither load, prompt eval nor eval; its derived rates are estimates")
    return lines


def _markdown_calibration(report: Report) -> list[str]:
    c = report.calibration
    lines = ["", "## Calibration", ""]
    if not c:
        return lines + ["none (not a bench run)"]
    lines.append(f"Chat template's own cost: {c.get('template_tokens')} tokens. "
                 f"{'From the cache (one target re-checked).' if c.get('from_cache') else 'Measured for this run.'}")
    lines += ["", "| words | prompt_eval_count |", "|---|---|"]
    lines += [f"| {w} | {t} |" for w, t in c.get("probes") or []]
    return lines


def _markdown_environment(report: Report) -> list[str]:
    h = report.log.header
    m = h.get("environment") or {}
    md = h.get("model_details") or {}
    loaded = report.env_end.get("loaded") or report.env_start.get("loaded") or {}
    gpu = m.get("gpu") or {}
    gpus = ", ".join(f"{d.get('name')} ({_bytes(d.get('memory_total'))})" for d in gpu.get("devices") or []) or (
        f"none ({gpu.get('reason', 'not checked')})"
    )
    rows = [
        ("llmtop", h.get("llmtop_version")),
        ("engine", f"{h.get('engine')} {h.get('engine_version') or ''} at {h.get('host')}"),
        ("model", f"{h.get('model')} · {md.get('family')} · {md.get('parameter_size')} · {md.get('quantization')}"),
        ("loaded (/api/ps)", f"size {_bytes(loaded.get('size'))}, size_vram {_bytes(loaded.get('size_vram'))}"
         + (f" — {loaded['note']}" if loaded.get("note") else "")),
        ("options", json.dumps(h.get("options"))),
        ("OS", m.get("os")),
        ("CPU", f"{m.get('cpu_model')} · {m.get('cpu_cores_physical')} cores / {m.get('cpu_cores_logical')} threads"),
        ("RAM", _bytes(m.get("ram_bytes"))),
        ("GPU", gpus + (f" · driver {gpu['driver_version']}" if gpu.get("driver_version") else "")),
        ("power", m.get("power", "unknown")),
        ("Python", m.get("python")),
        ("started", h.get("started_at")),
        ("ended", next((r.get("ended_at") for r in report.log.of_type("end")), "n/a (log not closed)")),
    ]
    return ["", "## Environment", "", "| item | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]


# ---------------------------------------------------------------------- CSV and JSON

CSV_COLUMNS = ("prompt_tokens_target", "index", "phase", "status", "reason", "ttft_ms", "e2e_ms", "prompt_eval_ms",
               "server_prefill_tps", "client_decode_tps", "server_decode_tps", "tpot_ms", "overhead_ms", "load_ms",
               "prompt_eval_count", "eval_count", "prompt_words", "started_at")


def _csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for s in report.analysis.sizes:
        for r in s.requests:
            m, st = r.record.get("metrics") or {}, r.record.get("stats") or {}
            writer.writerow({
                "prompt_tokens_target": r.prompt_tokens_target, "index": r.index + 1, "phase": r.phase,
                "status": r.status, "reason": r.reason, **{k: m.get(k) for k in CSV_COLUMNS if k in m},
                "prompt_eval_count": st.get("prompt_eval_count"), "eval_count": st.get("eval_count"),
                "prompt_words": r.record.get("prompt_words"), "started_at": r.record.get("started_at"),
            })
    return out.getvalue()


def _json(report: Report) -> dict[str, Any]:
    a = report.analysis
    return {
        "header": report.log.header,
        "verdict": a.verdict,
        "noisy_probe_samples": dict(zip(("noisy", "during_requests"), noisy_samples(report), strict=True)),
        "interrupted": report.interrupted,
        "drift_threshold_pct": a.drift_threshold_pct,
        "calibration": report.calibration,
        "environment": {"start": report.env_start, "end": report.env_end},
        "preflight": report.preflight,
        "relay_comparison": [asdict(c) for c in relay_comparisons(report.analysis)],
        "attribution": {str(k): v.to_dict() for k, v in report.attributions.items()},
        "sizes": [
            {
                "prompt_tokens_target": s.target,
                "path": s.path,
                "n_ok": len(s.ok),
                "contaminated": s.contaminated,
                "summaries": {k: v.to_dict() for k, v in s.summaries.items()},
                "drift": {k: v.to_dict() for k, v in s.drifts.items()},
                "series": s.series,
                "requests": [
                    {"index": r.index + 1, "phase": r.phase, "status": r.status, "reason": r.reason,
                     "timing_gap_share": r.timing_gap_share, "metrics": r.record.get("metrics"),
                     "stats": r.record.get("stats")}
                    for r in s.requests
                ],
            }
            for s in a.sizes
        ],
        "warnings": report.log.warnings,
    }
