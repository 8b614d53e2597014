"""Reports of a session log — markdown, CSV, JSON — computed from the log alone.

`build(log)` gathers a log's analysis (analysis/run.py: statistics, drift, attribution,
relay comparison, probe figures) into a `Report`; `markdown`, `csv_text` and `json_text`
write it out (formats.render picks one, or the HTML page). This module only renders. The
markdown follows the source's form (docs/method.md, "Result table"): a row per prompt size,
every cell filled from measurements (or saying why it cannot be). Every markdown table goes
through `md_table` (text.py), which escapes the cells.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from llmtop.engines.connection import describe_config
from llmtop.sessions.analysis.attribution import Attribution, Cause
from llmtop.sessions.analysis.context import (
    CachePair,
    PrefillSweep,
    Turn,
    cache_pairs,
    conversation,
    prefill_sweep,
)
from llmtop.sessions.analysis.energy import EnergySummary, summarize_energy
from llmtop.sessions.analysis.episode_causes import EpisodeCause, episode_causes
from llmtop.sessions.analysis.machine import CANARY_METRICS, READINGS
from llmtop.sessions.analysis.repeat import SizeSpread
from llmtop.sessions.analysis.run import (
    CONTEXT_PHASES,
    METRICS,
    Analysis,
    GpuUsage,
    RelayComparison,
    SizeAnalysis,
    analyze_log,
    attribute_size,
    cause_of,
    gpu_usage,
    noisy_samples,
    relay_comparisons,
    size_key,
    warmup_load_ms,
)
from llmtop.sessions.measure.stats import DRIFT_ALPHA, DRIFT_FLOOR_MS
from llmtop.sessions.records.schema import (
    AnyRecord,
    CalibrationRecord,
    EnergyRecord,
    EnvironmentRecord,
    FindingRecord,
    PreflightRecord,
    RequestRecord,
    RunLog,
    SummaryRecord,
)
from llmtop.sessions.reports.context import (
    context_json,
    pairs_markdown,
    sweep_markdown,
    turns_markdown,
)
from llmtop.sessions.reports.csvcells import CsvWriter
from llmtop.sessions.reports.text import md_table, sparkline
from llmtop.sessions.reports.text import num as _num
from llmtop.sessions.reports.text import size as _bytes


@dataclass
class Report:
    """A log's analysis plus what a report shows beside it, all computed by analysis.py.

    attributions: per prompt size (`analysis.size_key`), which application likely slowed
    the slow requests, or that none stands out. noisy: (NOISY probe samples, all probe
    samples) taken during requests. relay: the --compare-relay pairs (empty otherwise).
    causes: per drifted prompt size, who slowed it (an app, the machine, or unexplained);
    for a size with slow episodes and no drift, its costliest episode's cause. episodes: per
    prompt size, every slow episode with its cost and cause (episode_causes.py).
    sweep / pairs / turns: the prefill curve of a sweep of 2+ sizes, the prefix-cache pairs
    and the conversation's turns (analysis/context.py; None / empty when the run had none);
    cold_turns: the conversation replayed with the cache defeated (bench --turns).
    """

    log: RunLog
    analysis: Analysis
    calibration: CalibrationRecord | None
    env_start: EnvironmentRecord | None
    env_end: EnvironmentRecord | None
    summary: SummaryRecord | None
    interrupted: bool
    preflight: PreflightRecord | None = None

    @property
    def loaded(self) -> dict[str, Any]:
        """/api/ps's view of the loaded model, from the end environment else the start's."""
        return ((self.env_end.loaded if self.env_end else None)
                or (self.env_start.loaded if self.env_start else None) or {})
    attributions: dict[int | str | None, Attribution] = field(default_factory=dict)
    noisy: tuple[int, int] = (0, 0)
    gpu: GpuUsage = field(default_factory=GpuUsage)
    relay: list[RelayComparison] = field(default_factory=list)
    causes: dict[int | str | None, Cause] = field(default_factory=dict)
    energy: EnergySummary | None = None
    sweep: PrefillSweep | None = None
    pairs: list[CachePair] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    cold_turns: list[Turn] = field(default_factory=list)
    episodes: dict[int | str | None, list[EpisodeCause]] = field(default_factory=dict)


def build(log: RunLog) -> Report:
    """Analyse a log read back (bench or interactive session)."""
    calibration = log.calibration
    analysis = analyze_log(log)
    episodes = {size_key(s): episode_causes(s, log.probes) for s in analysis.sizes}
    attributions = {size_key(s): attribute_size(s, log.probes) for s in analysis.sizes}
    causes = {size_key(s): c for s in analysis.sizes
              if (c := cause_of(s, attributions[size_key(s)])) is not None}
    for key, found in episodes.items():
        costly = max(found, key=lambda e: e.slowdown.slower_pct if e.slowdown else 0.0,
                     default=None)
        if costly is not None and key not in causes:
            attributions[key] = costly.attribution
            if costly.cause is not None:
                causes[key] = costly.cause
    sweep = prefill_sweep(analysis, (log.header.bench or {}).get("prior_curve"))
    num_ctx = (log.header.options or {}).get("num_ctx")
    return Report(
        log=log,
        analysis=analysis,
        calibration=calibration,
        env_start=log.environment("start"),
        env_end=log.environment("end"),
        summary=log.summary,
        interrupted=log.interrupted,
        preflight=log.preflight,
        attributions=attributions,
        noisy=noisy_samples(log.probes),
        gpu=gpu_usage(log.probes),
        relay=relay_comparisons(analysis),
        causes=causes,
        energy=summarize_energy(log),
        sweep=sweep,
        pairs=cache_pairs(log.requests),
        turns=conversation(log.requests, sweep.prefill if sweep else None,
                           num_ctx if isinstance(num_ctx, int) else None),
        cold_turns=conversation(log.requests, sweep.prefill if sweep else None,
                                num_ctx if isinstance(num_ctx, int) else None, "turn-cold"),
        episodes=episodes,
    )


# A series of fewer values shows no shape, only a block whose height means nothing.
MIN_SERIES = 3


def _series_cell(values: Sequence[float | None]) -> str:
    """The series column: the sparkline in backticks, "—" below MIN_SERIES values."""
    if sum(v is not None for v in values) < MIN_SERIES:
        return "—"
    return f"`{sparkline(values)}`"


def _size_label(size: SizeAnalysis, calibration: CalibrationRecord | None) -> str:
    via = f" · {size.path}" if size.path else ""
    if size.target is None:
        return "interactive" + via
    point = calibration.targets.get(str(size.target)) if calibration else None
    if point:
        return f"{size.target} tok ({point.words} words → {point.tokens:g}){via}"
    return f"{size.target} tok{via}"


def _markdown_relay(report: Report) -> list[str]:
    if not report.relay:
        return []
    headers = ("prompt", "pairs", "TTFT relay − direct, median [IQR]",
               "TTFT − load − prefill: direct / relay", "decode tok/s (client): direct / relay")
    rows = [
        (f"{c.target} tok", c.pairs,
         (f"{_num(c.ttft_diff_median, 2)} ms "
          f"[{_num(c.ttft_diff_p25, 2)}, {_num(c.ttft_diff_p75, 2)}]"),
         f"{_num(c.overhead_direct, 2)} / {_num(c.overhead_relay, 2)} ms",
         f"{_num(c.decode_direct)} / {_num(c.decode_relay)}")
        for c in report.relay
    ]
    return ["", "## Relay overhead (direct and relayed requests interleaved)", "",
            *md_table(headers, rows)]


NO_NVIDIA_DRIVER = ("Shared Library Not Found", "cannot open shared object", "No module named")


def gpu_absent(reason: str | None) -> str:
    """Why there is no GPU figure, in words: "none" when NVML's library is not there at all (no
    NVIDIA driver: the machine has no GPU llmtop can read), else the probe's reason (a driver
    not loaded, no permission) — the library's own error text was a report's GPU line before
    (issue 32, row 13)."""
    if reason is None:
        return "not checked"
    if any(mark in reason for mark in NO_NVIDIA_DRIVER):
        return "none"
    return reason


def _gpu_cells(report: Report) -> tuple[str, str]:
    """GPU util % (median of the probe samples) and VRAM, each with the tool it came from."""
    loaded = report.loaded
    ps = ""
    if loaded.get("size"):
        ps = f"{_bytes(loaded.get('size_vram'))} of {_bytes(loaded.get('size'))} (/api/ps)"
    gpu = report.gpu
    if gpu.util_median is None:
        reason = (report.log.header.machine_environment.get("gpu") or {}).get("reason")
        said = "no GPU samples" if reason is None else gpu_absent(reason)
        return ("n/a (no GPU)" if said == "none" else f"n/a ({said})"), ps or "n/a"
    util = f"{gpu.util_median:.0f} (nvml, median)"
    vram = f"{_bytes(gpu.peak_used)} peak (nvml)" + (f"; {ps}" if ps else "")
    return util, vram


def _warmup_load(size: SizeAnalysis, analysis: Analysis) -> str:
    load = warmup_load_ms(size, analysis)
    return "n/a (no warm-up)" if load is None else f"{_num(load)} ms"


def _notes(size: SizeAnalysis) -> str:
    notes = []
    worse = [f"{label} {d.change_pct:+.1f} %" for key, label, _unit, _ in METRICS
             if key in size.drifted and (d := size.drifts[key]).change_pct is not None]
    shown = [f"{label} {d.change_pct:+.1f} % (does not decide)" for key, label, _u, _ in METRICS
             if key not in size.drifted and (d := size.drifts[key]).worse
             and d.change_pct is not None]
    notes.append(("drifted: " + ", ".join(worse)) if worse else "drift clean")
    if shown:
        notes.append("derived: " + ", ".join(shown))
    in_episodes = len(size.ok) - len(size.baseline)
    if in_episodes:
        notes.append(f"{in_episodes} in slow episodes (requests "
                     f"{', '.join(e.requests for e in size.episodes.episodes)})")
    if size.episodes.trends:
        notes.append("trend: " + ", ".join(f"{k} {v:+.0f} %"
                                           for k, v in size.episodes.trends.items()))
    if size.excluded:
        notes.append(f"{len(size.excluded)} excluded")
    return "; ".join(notes)


# ---------------------------------------------------------------------- markdown


def _cpu_line(m: Mapping[str, Any]) -> str:
    """"model · 8 cores / 16 threads"; a count the machine did not tell (psutil's
    cpu_count(logical=False) is None in some VMs and containers) is "cores unknown", never
    "None cores"."""
    model = m.get("cpu_model") or "CPU model unknown"
    cores, threads = m.get("cpu_cores_physical"), m.get("cpu_cores_logical")
    return (f"{model} · " + (f"{cores} cores" if cores else "cores unknown") + " / "
            + (f"{threads} threads" if threads else "threads unknown"))


def markdown(report: Report) -> str:
    """The markdown report (the source's form: docs/method.md, "Result table")."""
    h, a = report.log.header, report.analysis
    lines = [f"# llmtop {h.kind} report — {h.model} on {h.engine}", ""]
    j = a.judgement
    why = {"inconclusive": " — too few ok requests to judge drift (it needs 10 per prompt size)"}
    reasons = "" if j.word == "inconclusive" or not j.reasons else " — " + "; ".join(j.reasons)
    lines.append(
        f"**Verdict: {j.label}**{why.get(a.verdict, '')}{reasons} (slow episodes: change points "
        "in the ordered TTFT, prefill, decode and E2E series, beyond their own noise; drift "
        f"threshold ±{a.drift_threshold_pct:g} %, either way, between the medians of the first "
        f"and last 5 baseline requests, counted when over {DRIFT_FLOOR_MS:g} ms for times and "
        f"the two groups differ by a one-sided rank test at p < {DRIFT_ALPHA:g}). "
        f"{(n := sum(len(s.baseline) for s in a.sizes))} {'request' if n == 1 else 'requests'} "
        "in the statistics."
    )
    noisy, total = report.noisy
    if noisy:
        lines.append(f"**The machine was NOISY** in {noisy} of {total} probe samples taken during "
                     "requests: see \"Was the machine quiet?\" before trusting these numbers.")
    buffered = [r for r in report.log.requests if r.metrics.buffered]
    if buffered:
        lines.append(
            f"**{len(buffered)} request{'s were' if len(buffered) != 1 else ' was a'} buffered "
            f"stream{'s' if len(buffered) != 1 else ''}** (e.g. request {buffered[0].id}: "
            f"{buffered[0].metrics.buffered}): their client TPOT, decode rate and overhead are "
            "n/a and left out of the statistics; their TTFT is the time to the whole answer.")
    if report.log.warnings:
        lines.append("**Log problems**: " + "; ".join(report.log.warnings) + ".")
    if report.interrupted:
        lines.append("**The run was interrupted**: the statistics cover the requests that "
                     "finished.")
    for s in a.sizes:
        cause = report.causes.get(size_key(s))
        if cause is not None:
            lines.append(f"**Cause ({_size_label(s, report.calibration)}): {cause.kind}** — "
                         f"{cause.summary}.")
    lines += ["", "## Results", "", *_results_table(report)]
    for s in a.sizes:
        title = f"## Statistics — {_size_label(s, report.calibration)}"
        lines += ["", title, "", *_stats_table(s)]
    lines += _markdown_episodes(report)
    lines += sweep_markdown(report.sweep) + pairs_markdown(report.pairs)
    lines += turns_markdown(report.turns, report.cold_turns)
    lines += _markdown_relay(report)
    lines += _markdown_machine(report)
    lines += markdown_energy(report.energy)
    lines += _markdown_requests(a) + _markdown_calibration(report) + _markdown_environment(report)
    return "\n".join(lines) + "\n"


def _markdown_episodes(report: Report) -> list[str]:
    """Every slow episode, its size, its cost and cause; what was re-measured."""
    lines = ["", "## Slow episodes", ""]
    labels = {k: label for k, label, _u, _b in METRICS}
    required = report.analysis.required
    rows = []
    for s in report.analysis.sizes:
        for e in report.episodes.get(size_key(s), []):
            sizes = ", ".join(f"{labels[k]} {v:+.0f} %" for k, v in e.episode.changes.items())
            cause = e.cause.summary if e.cause is not None else "n/a"
            when = e.episode.requests + (" (faster)" if e.episode.faster else "")
            rows.append((_size_label(s, report.calibration), when, sizes, e.sentence, cause))
    if rows:
        lines += md_table(("prompt", "requests", "size", "cost", "cause"), rows)
    else:
        lines.append("none: every series kept one level within its noise")
    for s in report.analysis.sizes:
        measured = sum(r.phase == "measure" for r in s.requests)
        if required is not None and measured > required:
            lines.append("")
            lines.append(
                f"{_size_label(s, report.calibration)}: re-measured {measured - required} "
                f"requests beyond the protocol's {required} (after a pause) to have "
                f"{len(s.baseline)} outside the episodes; the log keeps every request.")
    return lines


def _results_table(report: Report) -> list[str]:
    util, vram = _gpu_cells(report)
    headers = ("prompt", "n (baseline)", "TTFT p50 / p95 (client)", "E2E p50",
               "prefill tok/s (server)", "decode tok/s (server)", "load (warm-up)", "GPU util %",
               "VRAM (tool)", "notes")
    rows = []
    for s in report.analysis.sizes:
        t, e = s.summaries["ttft_ms"], s.summaries["e2e_ms"]
        p95 = _num(t.p95) if t.p95 is not None else (t.p95_note or "n/a")
        rows.append((
            _size_label(s, report.calibration), len(s.baseline), f"{_num(t.median)} / {p95} ms",
            f"{_num(e.median)} ms", _num(s.summaries["server_prefill_tps"].median),
            _num(s.summaries["server_decode_tps"].median), _warmup_load(s, report.analysis),
            util, vram, _notes(s),
        ))
    return md_table(headers, rows)


def _stats_table(s: SizeAnalysis) -> list[str]:
    """One row per metric, then the machine's own series (canary, readings) beside them."""
    headers = ("metric", "unit", "n", "median", "min", "max", "p95", "first 5 → last 5", "drift",
               "series")
    rows = []
    machine = [m for m in CANARY_METRICS + READINGS if s.summaries[m[0]].n]
    for key, label, unit, _better in METRICS + tuple(machine):
        m, d = s.summaries[key], s.drifts[key]
        p95 = _num(m.p95, 2) if m.p95 is not None else (m.p95_note or "n/a")
        if d.change_pct is None:
            change, trend = "n/a", d.note or "n/a"
        else:
            change = f"{d.change_pct:+.1f} %" + (" ⚠" if d.worse else "")
            if d.beyond_threshold and not d.worse:
                change += " (not counted: within spread or floor)"
            trend = f"{_num(d.first_median, 2)} → {_num(d.last_median, 2)}"
        rows.append((label, unit, m.n, _num(m.median, 2), _num(m.min, 2), _num(m.max, 2), p95,
                     trend, change, _series_cell(s.series.get(key, []))))
    return md_table(headers, rows)


def _measured(f: FindingRecord) -> str:
    if f.value is None:
        return ""
    threshold = ""
    if f.threshold is not None:
        threshold = f" vs threshold {f.threshold} {f.unit}"
    return f" (measured {f.value} {f.unit}{threshold})"


def _markdown_machine(report: Report) -> list[str]:
    """Preflight findings and, per prompt size, who likely slowed the slow requests."""
    lines = ["", "## Was the machine quiet?", ""]
    pf = report.preflight
    if pf is None:
        lines.append("No preflight check was recorded.")
    else:
        body = pf.body
        lines.append(f"Preflight ({body.get('duration_s')} s, {body.get('samples')} samples): "
                     f"**{pf.verdict}**, background CPU "
                     f"{_num(body.get('background_cpu_median'))} % of the machine (median).")
        for f in pf.findings:
            lines.append(f"- {f.level.upper()} {f.code}: "
                         f"{f.message}{_measured(f)} — {f.remedy}")
    held = preflight_held(report)
    if held is not None:
        lines.append("")
        lines.append(held["sentence"])
    noisy, total = report.noisy
    lines.append("")
    lines.append(f"During the requests: {noisy} of {total} probe samples found the machine NOISY.")
    for s in report.analysis.sizes:
        att = report.attributions.get(size_key(s))
        if att is not None:
            who = f"likely culprit **{att.culprit}**: " if att.culprit else ""
            lines.append(f"- {_size_label(s, report.calibration)}: {who}{att.evidence}")
    return lines


def _j(value: float | None, unit: str = "J") -> str:
    """An energy figure with 3 significant digits and its unit, or "n/a"."""
    return "n/a" if value is None else f"{value:.3g} {unit}"


ENERGY_NOTE = (
    "J / output token per request: decode joules (first token → last chunk) / output tokens; "
    "J / prompt token: prefill joules (send → first token) / prompt tokens; the run's figure: "
    "the measured requests' joules (send → last chunk, summed) / all their output tokens. "
    "Above idle: less the idle power measured in preflight's window × the window's seconds."
)


def markdown_energy(energy: EnergySummary | None) -> list[str]:
    """The "Energy" section: the sources line, then per source the per-request medians
    (total and above idle) and the run's all-in figure; n/a with the reason otherwise."""
    lines = ["", "## Energy", ""]
    if energy is None or not energy.available:
        line = energy.line if energy is not None else "energy: n/a"
        return [*lines, line]
    lines += [energy.line, ""]
    headers = ("source (covers)", "idle power", "n", "energy / request p50",
               "prefill / decode p50", "J / output token p50", "J / prompt token p50",
               "above idle: J / output token p50", "run: J / output token (all-in)", "notes")
    rows = []
    for s in energy.sources:
        p = {k: v.median for k, v in s.per_request.items()}
        n = s.per_request["output_j_per_token"].n
        run = s.run
        run_cell = "n/a" if run is None else (
            f"{_j(run.output_j_per_token)} ({_j(run.energy_j)} over {_num(run.duration_s, 2)} s, "
            f"{_j(run.mean_power_w, 'W')}"
            + (f"; above idle {_j(run.output_above_idle_j_per_token)}"
               if run.output_above_idle_j_per_token is not None else "") + ")")
        notes = [x for x in (s.note, "integrated from power samples" if s.integrated else None,
                             "coarse" if run is not None and run.coarse else None) if x]
        rows.append((f"{s.source} ({s.covers})", _j(s.idle_power_w, "W"), n,
                     _j(p["energy_j"]), f"{_j(p['prefill_j'])} / {_j(p['decode_j'])}",
                     _j(p["output_j_per_token"]), _j(p["prompt_j_per_token"]),
                     _j(p["output_above_idle_j_per_token"]), run_cell,
                     "; ".join(notes) or "—"))
    lines += md_table(headers, rows)
    lines += ["", ENERGY_NOTE]
    return lines


def preflight_held(report: Report) -> dict[str, Any] | None:
    """Did the machine keep what preflight said (issue 25, item 5)? None without a preflight;
    else {"preflight": its verdict, "episodes": slow episodes that followed, "changed": a
    QUIET preflight followed by episodes, "sentence": the report's line}."""
    pf = report.preflight
    if pf is None:
        return None
    count = sum(len(s.episodes.episodes) for s in report.analysis.sizes)
    changed = pf.quiet and count > 0
    if changed:
        sentence = (f"Preflight said {pf.verdict}, and {count} slow episode"
                    f"{'s' if count != 1 else ''} followed: the machine changed its mind "
                    "during the run.")
    else:
        follow = (f"{count} slow episode{'s' if count != 1 else ''} followed" if count
                  else "no slow episode followed")
        sentence = f"Preflight said {pf.verdict}; {follow}."
    return {"preflight": pf.verdict, "episodes": count, "changed": changed, "sentence": sentence}


def _warm_row(label: str, status: str, rec: RequestRecord) -> tuple[str, ...]:
    m = rec.metrics
    return (label, status, _num(m.ttft_ms), _num(m.load_ms), _num(m.prompt_eval_ms),
            _num(m.server_decode_tps))


def _markdown_requests(a: Analysis) -> list[str]:
    lines = ["", "## Warm-up requests (kept, not in the statistics)", ""]
    warm = [_warm_row("first request", rec.status, rec) for rec in a.load_requests]
    warm += [_warm_row(f"{r.prompt_tokens_target} tok #{r.index + 1}", r.status, r.record)
             for s in a.sizes for r in s.warmups]
    if warm:
        lines += md_table(("request", "status", "TTFT ms", "load ms", "prefill ms",
                           "decode tok/s (server)"), warm)
    else:
        lines.append("none")
    lines += ["", "## Excluded requests", ""]
    excluded = [(r.prompt_tokens_target, r.index + 1, r.status, r.reason)
                for s in a.sizes for r in s.excluded]
    if excluded:
        lines += md_table(("prompt", "#", "status", "reason"), excluded)
    else:
        lines.append("none: every measured request was ok")
    if a.timing_warnings:
        lines += ["", "## Server timings that do not add up", ""]
        for r in a.timing_warnings:
            lines.append(f"- request {r.index + 1} ({r.prompt_tokens_target} tok): "
                         f"{r.timing_gap_share:.0%} of total_duration is neither load, prompt "
                         "eval nor eval; its derived rates are estimates")
    return lines


def _markdown_calibration(report: Report) -> list[str]:
    c = report.calibration
    lines = ["", "## Calibration", ""]
    if not c:
        return lines + ["none (not a bench run)"]
    how = "Measured for this run."
    if c.from_cache:
        how = "From the cache (one target re-checked)."
    lines += [f"Chat template's own cost: {c.template_tokens} tokens. {how}", ""]
    return lines + md_table(("words", "prompt_eval_count"), c.probes)


def _markdown_environment(report: Report) -> list[str]:
    h = report.log.header
    m = h.machine_environment
    md = h.model_details or {}
    loaded = report.loaded
    gpu = m.get("gpu") or {}
    devices = gpu.get("devices") or []
    gpus = ", ".join(f"{d.get('name')} ({_bytes(d.get('memory_total'))})" for d in devices)
    said = gpu_absent(gpu.get("reason"))
    gpus = gpus or ("none" if said == "none" else f"none ({said})")
    note = f" — {loaded['note']}" if loaded.get("note") else ""
    rows = [
        ("llmtop", h.llmtop_version),
        ("engine", f"{h.engine} {h.engine_version or ''} at {h.host}"
                   + (f" through the proxy {h.proxy} (it adds its hop to every TTFT)"
                      if h.proxy else "")),
        *([("engine configuration", described)]
          if (described := describe_config(h.engine_config)) else []),
        ("model", (f"{h.model} · {md.get('family')} · {md.get('parameter_size')} · "
                   f"{md.get('quantization')}")),
        ("loaded (/api/ps)",
         f"size {_bytes(loaded.get('size'))}, size_vram {_bytes(loaded.get('size_vram'))}{note}"),
        ("options", json.dumps(h.options)),
        ("OS", m.get("os")),
        ("CPU", _cpu_line(m)),
        ("RAM", _bytes(m.get("ram_bytes"))),
        ("GPU", gpus + (f" · driver {d}" if (d := gpu.get("driver_version")) else "")),
        ("power", m.get("power", "unknown")),
        *([("container", c["description"])] if isinstance(c := m.get("container"), dict)
          and c.get("description") else []),
        ("Python", m.get("python")),
        ("started", h.started_at),
        ("ended", report.log.ended_at or "n/a (log not closed)"),
    ]
    return ["", "## Environment", "", *md_table(("item", "value"), rows)]


# ---------------------------------------------------------------------- CSV and JSON

CSV_METRICS = ("ttft_ms", "e2e_ms", "prompt_eval_ms", "server_prefill_tps", "client_decode_tps",
               "server_decode_tps", "tpot_ms", "overhead_ms", "load_ms")
CSV_COLUMNS = ("prompt_tokens_target", "index", "phase", "status", "reason", *CSV_METRICS,
               "prompt_eval_count", "eval_count", "prompt_words", "started_at", "episode")


CSV_ENERGY = ("energy_j", "prefill_j", "decode_j", "output_j_per_token", "prompt_j_per_token",
              "energy_above_idle_j", "output_above_idle_j_per_token", "coarse")


def _csv_row(rec: RequestRecord, index: int, phase: str | None, status: str, reason: str,
             energy: dict[int, dict[str, EnergyRecord]],
             episode: int | None = None) -> dict[str, Any]:
    return {
        "prompt_tokens_target": rec.prompt_tokens_target, "index": index, "phase": phase,
        "status": status, "reason": reason,
        **{k: getattr(rec.metrics, k) for k in CSV_METRICS},
        "prompt_eval_count": rec.stats.prompt_eval_count if rec.stats else None,
        "eval_count": rec.stats.eval_count if rec.stats else None,
        "prompt_words": rec.prompt_words, "started_at": rec.started_at, "episode": episode,
        **{f"{f}[{src}]": getattr(e, f) for src, e in energy.get(rec.id, {}).items()
           for f in CSV_ENERGY},
    }


def csv_text(report: Report) -> str:
    """Every request of the run as one CSV row: the sizes' (with their bench status), then
    the cache pairs' and the conversation's (with the stream's status); with energy sources,
    their figures per request in columns named "FIELD[SOURCE]" (J, J/token; CSV_ENERGY),
    empty where n/a."""
    energy = _energy_by_request(report.log)
    sources = list(dict.fromkeys(src for per in energy.values() for src in per))
    extra = [f"{f}[{src}]" for src in sources for f in CSV_ENERGY]
    fields = [*CSV_COLUMNS, *extra]
    rows = [_csv_row(r.record, r.index + 1, r.phase, r.status, r.reason, energy, r.episode)
            for s in report.analysis.sizes for r in s.requests]
    rows += [_csv_row(rec, (rec.index or 0) + 1, rec.phase, rec.status, "", energy)
             for rec in report.log.requests if rec.phase in CONTEXT_PHASES]
    out = io.StringIO()
    writer = CsvWriter(out, lineterminator="\n")  # no cell from a log starts a formula
    writer.writerow(fields)
    writer.writerows([row.get(f) for f in fields] for row in rows)
    return out.getvalue()


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
        **context_json(report.sweep, report.pairs, report.turns, report.cold_turns),
        "warnings": list(report.log.warnings),
    }


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
        "requests": [
            {"index": r.index + 1, "number": r.number, "episode": r.episode,
             "phase": r.phase, "status": r.status, "reason": r.reason,
             "timing_gap_share": r.timing_gap_share, "metrics": r.record.metrics.to_dict(),
             "stats": r.record.stats.to_dict() if r.record.stats else None}
            for r in s.requests
        ],
    }


# ---------------------------------------------------------------------- --runs


def repeat_markdown(spreads: Sequence[SizeSpread], logs: Sequence[str]) -> list[str]:
    """`bench --runs K`'s section: per prompt size and metric, each run's baseline median,
    their range, the 95 % interval of the mean and the runs that disagree
    (analysis/repeat.py)."""
    lines = ["", f"## Repeatability across {len(logs)} runs", ""]
    rows = []
    for size in spreads:
        for sp in size.spreads:
            ci = "n/a" if sp.ci is None else f"{_num(sp.ci[0], 2)} – {_num(sp.ci[1], 2)}"
            odd = ", ".join(f"run {i}" for i in sp.disagree) or "none"
            rows.append((f"{size.target} tok", f"{sp.label} {sp.unit}",
                         " / ".join(_num(m, 2) for m in sp.medians), _num(sp.centre, 2),
                         "n/a" if sp.range_pct is None else f"{sp.range_pct:.1f} %", ci, odd))
    lines += md_table(("prompt", "metric", "baseline median per run", "median of runs",
                       "range", "95 % CI of the mean", "disagrees"), rows)
    lines += ["", "Logs: " + ", ".join(f"run {i} `{p}`" for i, p in enumerate(logs, start=1))]
    return lines
