"""Renderings of a load sweep (analysis/load.py): markdown, CSV, JSON (formats.render picks
one, or the HTML page: html.load_html).

The markdown has one row per level (ok/failed, TTFT/TPOT/ITL/E2E percentiles, throughput,
goodput, queueing, probe verdict, generator CPU), the knee in one line, the engine's parallel
slots where it revealed them, and the warnings. Missing cells read "n/a" with the reason in
the notes (a p95 below 20 samples is not shown: docs/method.md, "Statistics").
"""

from __future__ import annotations

import io
import json
from typing import Any

from llmtop.engines.connection import describe_config
from llmtop.safetext import one_line
from llmtop.sessions.analysis.load import LevelResult, LoadAnalysis, Percentiles
from llmtop.sessions.analysis.load_verdict import knee_head, noisy_levels, verdict_line
from llmtop.sessions.analysis.saturation import describe_stop
from llmtop.sessions.analysis.search import SearchResult
from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.measure.dataset import describe
from llmtop.sessions.reports.csvcells import CsvWriter
from llmtop.sessions.reports.text import md_table


def _n(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _pcts(p: Percentiles | None) -> str:
    """ "p50 / p90 / p95" with n/a where the sample is too small."""
    if p is None or p.n == 0:
        return "n/a"
    return " / ".join(_n(x) for x in (p.p50, p.p90, p.p95))


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def level_row(lv: LevelResult) -> list[str]:
    """The markdown cells of one level (same order as TABLE_HEAD)."""
    ttft = lv.ttft_scheduled if lv.ttft_scheduled is not None else lv.ttft
    e2e = lv.e2e_scheduled if lv.e2e_scheduled is not None else lv.e2e
    goodput = (
        "n/a"
        if lv.goodput_per_s is None
        else f"{lv.goodput_per_s:.2f} ({_share(lv.goodput_share)})"
    )
    cpu = (
        "n/a"
        if lv.generator_cpu_share is None
        else (f"{lv.generator_cpu_share:.0%} ({_n(lv.generator_cpu_ms_per_request, 2)} ms/req)")
    )
    return [
        lv.label,
        f"{lv.ok}/{lv.failed}",
        _pcts(ttft),
        _pcts(lv.tpot),
        _pcts(lv.itl),
        _pcts(e2e),
        _n(lv.req_per_s, 2),
        _n(lv.tok_per_s),
        goodput,
        _n(lv.queue_ms.p50),
        lv.verdict,
        cpu,
    ]


TABLE_HEAD = [
    "level",
    "ok/failed",
    "TTFT ms p50/p90/p95",
    "TPOT ms",
    "ITL ms",
    "E2E ms",
    "req/s",
    "tok/s",
    "goodput req/s (share)",
    "queue or unexplained ms p50",
    "probes",
    "generator CPU",
]


def markdown(a: LoadAnalysis) -> str:
    """The markdown report. A replay's (its header's load.replay) is one level at the
    recorded pace: no curve, so no knee; its level is named as the replay (`replay_label`)."""
    h = a.header
    label = replay_label(a)
    lines = [
        # the embedded engine's address is a port llmtop picked and closed: not a title's
        f"# llmtop load — {h.model or '?'} on {h.engine or '?'}"
        + ("" if h.engine == "embedded" else f" ({h.host or '?'})"),
        "",
        _how_line(a) if label is None else _replay_how_line(a),
        "",
        f"**Verdict:** {_verdict_text(a, label)}",
        "",
    ]
    if label is None:
        lines += [f"**{knee_head(a.verdict)}:** {a.knee.sentence}.",
                  f"(rule: {a.knee.rule})", "", *markdown_search(a.search)]
    lines += ["| " + " | ".join(TABLE_HEAD) + " |", "|" + "---|" * len(TABLE_HEAD)]
    for lv in a.levels:
        cells = level_row(lv)
        lines.append("| " + " | ".join([label or cells[0], *cells[1:]]) + " |")
    stops = [describe_stop(lv.label, lv.stopped) for lv in a.levels if lv.stopped is not None]
    if stops:
        lines += ["", *[f"- {line}: nothing more was sent and the requests in flight were "
                        "cancelled (counted as not meeting the SLO)" for line in stops]]
    lines += ["", "p95 needs ≥ 20 samples and p90 ≥ 10 (else n/a); p99 (JSON) needs ≥ 100."]
    if a.mode == "rate":
        lines += [_lag_line(lv, label) for lv in a.levels if lv.lag_ms is not None]
    lines += parallelism_lines(a)
    lines += [_server_line(lv) for lv in a.levels if lv.server]
    described = describe_config(h.engine_config)
    if described:
        lines += ["", f"Engine configuration: {described}."]
    lines += markdown_energy(a)
    if a.warnings:
        lines += ["", "## Warnings", *[f"- {w}" for w in a.warnings]]
    return "\n".join(lines) + "\n"


def _how_line(a: LoadAnalysis) -> str:
    """How the sweep ran: its loop, what each level sent, the prompts, the output tokens
    and the SLO."""
    # a load log's header has its config; LoadConfig(): a hand-made log's
    cfg = a.header.load or LoadConfig()
    loop = (
        "closed loop (each user sends its next request when the last one ends)"
        if a.mode == "concurrency"
        else f"open loop, {cfg.arrivals} arrivals "
        "(latencies from the scheduled send)"
    )
    per_level = (
        f"{cfg.requests} {'request' if cfg.requests == 1 else 'requests'}"
        if cfg.requests is not None
        else f"{cfg.duration_s} s"
    )
    prompt = (
        f"~{cfg.prompt_tokens} tokens"
        if cfg.prompt_tokens
        else f"{'?' if cfg.prompt_words is None else cfg.prompt_words} words"
    )
    if cfg.dataset is not None:  # the user's file, not calibrated prompts
        prompt = f"from the dataset {describe(cfg.dataset, a.dataset_used)}"
        prompt += " (as sent: a prefix cache may serve them)" if cfg.measure_cache \
            else " (each cache-busted)"
    return (f"{loop}; {per_level} per level; prompt {prompt}, "
            f"max {cfg.max_tokens} output tokens; SLO: {a.slo.describe()}")


def replay_label(a: LoadAnalysis) -> str | None:
    """A replay's level as the report names it: "replay (back to back)" or "replay (recorded
    gaps / 2)"; None for a sweep. Not its req/s value: that is the recorded mean rate × speed,
    which the level's achieved req/s (its own column) need not match."""
    r = a.header.load.replay if a.header.load is not None else None
    if not r:
        return None
    return replay_name(bool(r.get("back_to_back")), float(r.get("speed") or 1.0))


def replay_name(back_to_back: bool, speed: float) -> str:
    """A replay's level by its pace: "replay (back to back)", "replay (recorded gaps / 2)"
    (the progress lines of `llmtop load --replay` and its report say the same)."""
    return "replay (back to back)" if back_to_back else f"replay (recorded gaps / {speed:g})"


def _verdict_text(a: LoadAnalysis, label: str | None) -> str:
    """verdict_line, a replay's NOISY level named by its replay label (its reasons name the
    level by its req/s value, the recorded mean rate, not a rate the user asked for)."""
    if label is None or not a.verdict.contaminated:
        return verdict_line(a.verdict)
    noisy = "; ".join(f"{label}: {lv.verdict}" for lv in noisy_levels(a.levels))
    return f"{a.verdict.label} — {noisy}"


def _replay_how_line(a: LoadAnalysis) -> str:
    """How a replay ran: the watch log, the pace (the recorded gaps / speed, their mean rate
    labelled as recorded; or back to back), the prompts, the per-request output caps, the
    SLO."""
    cfg = a.header.load or LoadConfig()
    r = cfg.replay or {}
    n, span, speed = int(r.get("requests") or 0), float(r.get("span_s") or 0.0), \
        float(r.get("speed") or 1.0)
    if r.get("back_to_back"):
        pace = "back to back (each sent when the one before it ended)"
    else:
        mean = f"{(n - 1) / span:.3g} req/s" if n > 1 and span > 0 else "n/a"
        pace = (f"at the recorded arrival gaps / {speed:g} (open loop, latencies from the "
                f"scheduled send; the recorded mean rate {mean}; achieved: the req/s column)")
    prompts = ("their recorded text" if r.get("bodies") else
               "llmtop's words sized to their recorded prompt counts")
    return (f"replay of the watch log {one_line(str(r.get('watch_log')))}: its {n} ok requests "
            f"({r.get('left_out', 0)} others not), sent once {pace}; prompts {prompts}; each "
            "request's output capped at its original's output token count (num_predict; "
            f"{cfg.max_tokens} where none was recorded); SLO: {a.slo.describe()}")


def parallelism_lines(a: LoadAnalysis) -> list[str]:
    """The engine's parallelism: what the engine revealed (its slots, Ollama's variables)
    and, where it revealed no slot count, what the sweep's queueing shows (analysis/load.py,
    `infer_parallelism`), said to be inferred; [] when neither is known."""
    parallel = a.environment.get("parallel") or {}
    detail = ", ".join(f"{k} {v}" for k, v in parallel.items() if k != "source")
    inferred = a.parallelism
    lines = []
    if parallel and (detail or inferred is None):
        lines.append(f"Engine parallelism: {detail or 'unknown'} ({parallel.get('source')}).")
    if inferred is not None and "slots" not in parallel:
        lines.append(f"Engine parallelism (inferred): {inferred.sentence}.")
    return ["", *lines] if lines else []


def _label(mode: str, value: float) -> str:
    if mode != "concurrency":
        return f"{value:g} req/s"
    return f"{value:g} {'user' if value == 1 else 'users'}"


def markdown_search(search: SearchResult | None) -> list[str]:
    """The SLO search's lines: its answer, its rule and one row per point in the order run
    (requests, batches, met, share and its 95 % Wilson interval, verdict); [] for a sweep."""
    if search is None:
        return []
    rows = [
        (str(k + 1), _label(search.mode, p.value), f"{p.requests} ({p.repeats})", str(p.met),
         f"{p.share:.0%}", f"{p.low:.1%}–{p.high:.1%}",
         p.outcome + (" (over-saturated)" if p.stopped else ""))
        for k, p in enumerate(search.points)
    ]
    return [
        f"**SLO search:** {search.sentence}.",
        f"(rule: {search.rule})",
        "",
        *md_table(("point", "level", "requests (batches)", "met SLO", "share", "95 % CI",
                   "verdict"), rows),
        "",
    ]


def _j(value: float | None, unit: str = "J") -> str:
    return "n/a" if value is None else f"{value:.3g} {unit}"


def markdown_energy(a: LoadAnalysis) -> list[str]:
    """The "Energy" section of a sweep: per source and level, the level's joules (first
    send → last chunk), its mean power and the all-in J per output token, total and above
    idle; the sources line alone (n/a and why) when none was read."""
    energy = a.energy
    lines = ["", "## Energy", ""]
    if energy is None or not energy.available:
        return [*lines, energy.line if energy is not None else "energy: n/a"]
    lines += [energy.line, ""]
    labels = {lv.level: lv.label for lv in a.levels}
    rows = [
        (f"{s.source} ({s.covers})", labels.get(r.level or 0, str(r.level)),
         _j(r.energy_j), _j(r.mean_power_w, "W"), r.output_tokens,
         _j(r.output_j_per_token), _j(r.output_above_idle_j_per_token),
         r.reason or "—")
        for s in energy.sources for r in s.levels
    ]
    lines += md_table(("source (covers)", "level", "energy", "mean power", "output tokens",
                       "J / output token (all-in)", "above idle", "notes"), rows)
    idle = [f"{s.source} {_j(s.idle_power_w, 'W')}" for s in energy.sources]
    note = (f"Idle power (preflight's window): {', '.join(idle)}. J / output token: the "
            "level's joules / the output tokens of its ok requests (prefill included: "
            "concurrent requests share the machine, so energy is not split per request).")
    lines += ["", note]
    return lines


def _server_line(lv: LevelResult) -> str:
    """'Level 3 (4 users), llama-server /metrics: at most 4 slots busy, 2 requests waiting
    for one; 1,200 prompt tokens (0 cached), 400 predicted' (runners/load/server_metrics.py)."""
    s = lv.server or {}
    busy, waiting = s.get("max_requests_processing"), s.get("max_requests_deferred")
    unit = "users" if lv.mode == "concurrency" else "req/s"
    text = (f"Level {lv.level + 1} ({_n(lv.value, 0)} {unit}), {s.get('source', 'server')}: "
            + (f"at most {_n(busy, 0)} slots busy" if busy is not None else
               "slots busy not reported (no requests_processing)")
            + (f", {_n(waiting, 0)} requests waiting for one" if waiting is not None else
               ", requests waiting not reported (no requests_deferred)"))
    if s.get("prompt_tokens") is not None:
        cached = s.get("prompt_tokens_cached")
        text += (f"; {s['prompt_tokens']:,.0f} prompt tokens"
                 + (f" ({cached:,.0f} cached)" if cached is not None else "")
                 + f", {_n(s.get('tokens_predicted'), 0)} predicted")
    if s.get("draft_tokens"):
        text += (f"; draft acceptance {s.get('draft_accepted', 0) / s['draft_tokens']:.0%} "
                 f"of {s['draft_tokens']:,.0f} drafted")
    return text + "."


def _lag_line(lv: LevelResult, label: str | None = None) -> str:
    lag = lv.lag_ms
    assert lag is not None
    return (
        f"- {label or lv.label}: sends lagged the timetable by {_n(lag.p50, 2)} ms (median), "
        f"{_n(lag.p90, 2)} ms (p90); TTFT from the actual send {_pcts(lv.ttft)} ms"
    )


CSV_FIELDS = (
    "level",
    "mode",
    "value",
    "requests",
    "ok",
    "failed",
    "wall_s",
    "req_per_s",
    "tok_per_s",
    "goodput_per_s",
    "goodput_share",
    "verdict",
    "generator_cpu_share",
    "generator_cpu_ms_per_request",
    "max_in_flight",
)
CSV_METRICS = (
    "ttft",
    "tpot",
    "itl",
    "e2e",
    "ttft_scheduled",
    "e2e_scheduled",
    "lag_ms",
    "queue_ms",
)


CSV_ENERGY = ("energy_j", "mean_power_w", "output_j_per_token", "output_above_idle_j_per_token")


def csv_text(a: LoadAnalysis) -> str:
    """One CSV row per level; with energy sources, each one's level figures in columns named
    "FIELD[SOURCE]" (CSV_ENERGY: J, W, J/token)."""
    out = io.StringIO()
    writer = CsvWriter(out)  # no cell from a log (an energy source's name) starts a formula
    quantiles = ("n", "p50", "p90", "p95", "p99")
    sources = a.energy.sources if a.energy else []
    writer.writerow([*CSV_FIELDS, *(f"{m}_{q}" for m in CSV_METRICS for q in quantiles),
                     *(f"{f}[{s.source}]" for s in sources for f in CSV_ENERGY)])
    for lv in a.levels:
        row: list[Any] = [lv.failed if f == "failed" else getattr(lv, f) for f in CSV_FIELDS]
        for m in CSV_METRICS:
            p = getattr(lv, m)
            row += [getattr(p, q) if p is not None else None for q in quantiles]
        for s in sources:
            mine = next((r for r in s.levels if r.level == lv.level), None)
            row += [getattr(mine, f) if mine else None for f in CSV_ENERGY]
        writer.writerow(["" if v is None else v for v in row])
    return out.getvalue()


def json_text(a: LoadAnalysis) -> str:
    """The sweep as one JSON document (`as_json`)."""
    return json.dumps(as_json(a), indent=2, ensure_ascii=False, default=str) + "\n"


def as_json(a: LoadAnalysis) -> dict[str, Any]:
    """The JSON report: header, SLO, levels, knee, environment, the parallelism inferred
    from the queueing (None when the sweep cannot show it), warnings."""
    return {
        "kind": "load",
        "header": a.header.to_json(),
        "mode": a.mode,
        "slo": a.slo.to_dict(),
        "levels": [lv.to_dict() for lv in a.levels],
        "verdict": {"word": str(a.verdict.word), "reasons": list(a.verdict.reasons)},
        "knee": None if replay_label(a) is not None else {  # a replay has no curve
            "trusted": not a.verdict.contaminated,
            "level": a.knee.level.level if a.knee.level else None,
            "value": a.knee.level.value if a.knee.level else None,
            "rule": a.knee.rule,
            "sentence": a.knee.sentence,
        },
        "environment": a.environment,
        "parallelism_inferred": None if a.parallelism is None else {
            "slots": a.parallelism.slots, "at_least": a.parallelism.at_least,
            "in_service": round(a.parallelism.in_service, 2),
            "level": a.parallelism.level.value, "sentence": a.parallelism.sentence},
        "energy": a.energy.to_dict() if a.energy else None,
        "search": a.search.to_dict() if a.search else None,
        "warnings": list(a.warnings),
    }
