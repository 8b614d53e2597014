"""The markdown report of a run (`markdown`), with `bench --runs`' repeatability section.

The markdown follows the source's form (docs/method.md, "Result table"): the verdict and
its warnings, a row per prompt size with every cell filled from measurements (or saying why
it cannot be), each size's statistics with its sparkline series, the slow episodes and
their causes (analysis/episode_causes.py), the context sections (context.py), the relay
overhead, "Was the machine quiet?" (preflight and attribution), then the machine's sections
(run_environment.py: energy, environment), the warm-up and excluded requests and the
calibration. Every markdown table goes through `md_table` (text.py), which escapes the
cells. The `Report` it renders is run.py's.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from llmtop.sessions.analysis.attribution import noisy_busiest
from llmtop.sessions.analysis.machine import (
    CANARY_METRICS,
    READINGS,
    noisy_findings,
    throttle_sentences,
)
from llmtop.sessions.analysis.repeat import SizeSpread
from llmtop.sessions.analysis.run import (
    BENCH_METRICS,
    Analysis,
    SizeAnalysis,
    size_key,
    warmup_load_ms,
)
from llmtop.sessions.measure.dataset import describe
from llmtop.sessions.measure.metrics import E2E, SERVER_DECODE, SERVER_PREFILL, TTFT
from llmtop.sessions.measure.stats import DRIFT_ALPHA, DRIFT_FLOOR_MS
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import CalibrationRecord, FindingRecord
from llmtop.sessions.reports.context import (
    depth_markdown,
    pairs_markdown,
    sweep_markdown,
    turns_markdown,
)
from llmtop.sessions.reports.run import Report
from llmtop.sessions.reports.run_environment import (
    environment_markdown,
    gpu_cells,
    markdown_energy,
    preflight_held,
)
from llmtop.sessions.reports.text import md_table, sparkline
from llmtop.sessions.reports.text import num as _num

# A series of fewer values shows no shape, only a block whose height means nothing.
MIN_SERIES = 3
SPARK_CELLS = 200  # the most cells a sparkline has in the markdown


def _series_cell(values: Sequence[float | None]) -> str:
    """The series column: the sparkline in backticks, "—" below MIN_SERIES values. Past
    SPARK_CELLS values each cell is the median of a run of b = ⌈n / SPARK_CELLS⌉ requests
    (a blank where none of them has a value), and the cell says so: a line of 100,000 blocks
    shows no shape a reader can see."""
    if sum(v is not None for v in values) < MIN_SERIES:
        return "—"
    if len(values) <= SPARK_CELLS:
        return f"`{sparkline(values)}`"
    b = -(-len(values) // SPARK_CELLS)
    binned = []
    for i in range(0, len(values), b):
        known = [v for v in values[i:i + b] if v is not None]
        binned.append(statistics.median(known) if known else None)
    return f"`{sparkline(binned)}` (medians of {b} requests a cell)"


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



def _warmup_load(size: SizeAnalysis, analysis: Analysis) -> str:
    load = warmup_load_ms(size, analysis)
    return "n/a (no warm-up)" if load is None else f"{_num(load)} ms"


def _notes(size: SizeAnalysis) -> str:
    notes = []
    worse = [f"{m.shown} {d.change_pct:+.1f} %" for m in BENCH_METRICS
             if m.key in size.drifted and (d := size.drifts[m.key]).change_pct is not None]
    shown = [f"{m.shown} {d.change_pct:+.1f} % (does not decide)" for m in BENCH_METRICS
             if m.key not in size.drifted and (d := size.drifts[m.key]).worse
             and d.change_pct is not None]
    judged = any(size.drifts[m.key].change_pct is not None for m in BENCH_METRICS
                 if m.key in size.drifts)
    if worse:
        notes.append("drifted: " + ", ".join(worse))
    else:  # "drift clean" only where drift was judged
        notes.append("drift clean" if judged else "drift not judged (too few ok requests)")
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


def markdown(report: Report) -> str:
    """The markdown report (the source's form: docs/method.md, "Result table"), with
    `bench --runs`' repeatability section last when the report has one."""
    a = report.analysis
    method = (
        "*How the verdict is made:* slow episodes are change points in the ordered TTFT, "
        "prefill, decode and E2E series, beyond their own noise; drift is judged at "
        f"±{a.drift_threshold_pct:g} %, either way, between the medians of the first and last "
        f"5 baseline requests, counted when over {DRIFT_FLOOR_MS:g} ms for times and the two "
        f"groups differ by a one-sided rank test at p < {DRIFT_ALPHA:g}.")
    lines = _markdown_head(report)
    lines += ["", "## Results", "", *_results_table(report), "", method]
    for s in a.sizes:
        title = f"## Statistics — {_size_label(s, report.calibration)}"
        lines += ["", title, "", *_stats_table(s)]
    lines += _markdown_episodes(report)
    lines += depth_markdown(report.depths)
    lines += sweep_markdown(report.sweep) + pairs_markdown(report.pairs)
    lines += turns_markdown(report.turns, report.cold_turns)
    lines += _markdown_relay(report)
    lines += _markdown_machine(report)
    if report.engine_own is not None:  # the engine panel (F4) was open in this session
        lines += report.engine_own.markdown()
    lines += markdown_energy(report.energy)
    if report.offload is not None:  # the engine's GPU claim and the machine disagreed
        f = report.offload
        lines += ["", "## The engine's GPU claim", "",
                  f"**{f.level.upper()}** {f.message} — {f.remedy}."]
    if report.soc:  # a system on chip's heat, or a neighbour on its one memory
        lines += ["", "## Heat and memory contention", ""]
        lines += [f"- **{f.level.upper()}** {f.code}: {f.message} — {f.remedy}."
                  for f in report.soc]
    if report.bandwidth is not None:  # bench measured this machine's memory bandwidth
        lines += ["", "## Decode and memory bandwidth", "", report.bandwidth.sentence + "."]
    lines += _markdown_requests(a) + _markdown_calibration(report) + environment_markdown(report)
    if report.repeatability is not None:
        lines += repeat_markdown(report.repeatability.sizes, report.repeatability.logs)
    return "\n".join(lines) + "\n"


def _markdown_head(report: Report) -> list[str]:
    """The title, what was sent (a dataset's requests), the verdict in one line, then what
    to know before reading the numbers: a NOISY machine, buffered streams, log problems, an
    interruption, each size's cause."""
    h, a = report.log.header, report.analysis
    lines = [f"# llmtop {h.kind} report — {h.model} on {h.engine}", ""]
    # the user's requests, not calibrated prompts
    if h.bench is not None and h.bench.dataset is not None:
        used = len({r.plan.dataset_line for r in report.log.requests
                    if r.plan.dataset_line is not None})
        cache = ("as sent: a prefix cache may serve them"
                 if h.bench.measure_cache else "each cache-busted")
        said = (f"Requests from the dataset {describe(h.bench.dataset, used)} ({cache}); prompt "
                "sizes are the server's counts; the statistics mix the file's sizes.")
        lines += [said, ""]
    j = a.judgement
    why = {"inconclusive": " — too few ok requests to judge drift (it needs 10 per prompt size)"}
    reasons = "" if j.word == "inconclusive" or not j.reasons else " — " + "; ".join(j.reasons)
    # the verdict in one line; how it is reached under the results table (once,
    # every verdict carried the method's paragraph)
    lines.append(
        f"**Verdict: {j.label}**{why.get(a.verdict, '')}{reasons}. "
        f"{(n := sum(len(s.baseline) for s in a.sizes))} {'request' if n == 1 else 'requests'} "
        "in the statistics."
    )
    noisy, total = report.noisy
    if noisy:
        lines.append(f"**The machine was NOISY** in {noisy} of {total} probe samples taken during "
                     "requests: see \"Was the machine quiet?\" before trusting these numbers.")
    lines += _buffered(report.log.requests)
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
    return lines


def _buffered(requests: Sequence[RequestRecord]) -> list[str]:
    """The line on buffered streams, when any request was one."""
    buffered = [r for r in requests if r.metrics.buffered]
    if not buffered:
        return []
    return [(
        f"**{len(buffered)} request{'s were' if len(buffered) != 1 else ' was a'} buffered "
        f"stream{'s' if len(buffered) != 1 else ''}** (e.g. request {buffered[0].id}: "
        f"{buffered[0].metrics.buffered}): their client TPOT, decode rate and overhead are "
        "n/a and left out of the statistics; their TTFT includes the wait while the text "
        "was held back (for the whole answer, or for the first block).")]


def _markdown_episodes(report: Report) -> list[str]:
    """Every slow episode, its size, its cost and cause; what was re-measured."""
    lines = ["", "## Slow episodes", ""]
    labels = {m.key: m.shown for m in BENCH_METRICS}
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
    lines += _markdown_outliers(report, labels)
    for s in report.analysis.sizes:
        measured = sum(r.phase == "measure" for r in s.requests)
        if required is not None and measured > required:
            label, more = _size_label(s, report.calibration), measured - required
            lines.append("")
            if report.episodes.get(size_key(s)):
                lines.append(
                    f"{label}: re-measured {more} requests beyond the protocol's {required} "
                    f"(after a pause) to have {len(s.baseline)} outside the episodes; the "
                    "log keeps every request.")
            else:  # the episode seen mid-run is within the noise of the longer run
                lines.append(
                    f"{label}: re-measured {more} requests beyond the protocol's {required} "
                    "(after a pause) for an episode seen part way; with them every series "
                    "keeps one level, so none is left. The log keeps every request.")
    return lines


def _markdown_outliers(report: Report, labels: dict[str, str]) -> list[str]:
    """Per size, the requests a series found off its level alone or in twos: isolated
    spikes, not an episode, kept in the statistics (analysis/episodes.py, "Episodes and
    outliers")."""
    lines = []
    for s in report.analysis.sizes:
        found = s.episodes.outliers
        if found:
            said = "; ".join(f"{labels.get(k, k)} {', '.join(map(str, v))}"
                             for k, v in found.items())
            label = _size_label(s, report.calibration)
            lines += ["", (f"{label}: outliers, off the level alone or in twos, not an episode "
                           f"(kept in the statistics): {said}.")]
    return lines


def _results_table(report: Report) -> list[str]:
    util, vram = gpu_cells(report)
    headers = ("prompt", "n (baseline)", "TTFT p50 / p95 (client)", "E2E p50",
               "prefill tok/s (server)", "decode tok/s (server)", "load (warm-up)", "GPU util %",
               "VRAM (tool)", "notes")
    rows = []
    for s in report.analysis.sizes:
        t, e = s.summaries[TTFT.key], s.summaries[E2E.key]
        p95 = _num(t.p95) if t.p95 is not None else (t.p95_note or "n/a")
        rows.append((
            _size_label(s, report.calibration), len(s.baseline), f"{_num(t.median)} / {p95} ms",
            f"{_num(e.median)} ms", _num(s.summaries[SERVER_PREFILL.key].median),
            _num(s.summaries[SERVER_DECODE.key].median), _warmup_load(s, report.analysis),
            util, vram, _notes(s),
        ))
    return md_table(headers, rows)


def _stats_table(s: SizeAnalysis) -> list[str]:
    """One row per metric, then the machine's own series (canary, readings) beside them."""
    headers = ("metric", "unit", "n", "median", "min", "max", "p95", "first 5 → last 5", "drift",
               "series")
    rows = []
    shown = [(m.key, m.shown, m.unit) for m in BENCH_METRICS]
    shown += [(k, label, unit) for k, label, unit, _b in CANARY_METRICS + READINGS
              if s.summaries[k].n]
    for key, label, unit in shown:
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
    during = f"During the requests: {noisy} of {total} probe samples found the machine NOISY"
    in_requests = [p for p in report.log.probes if p.request_id is not None]
    busiest = noisy_busiest(in_requests)
    lines.append(f"{during}; {busiest.sentence()}." if noisy and busiest else f"{during}.")
    for nf in noisy_findings(in_requests):  # why: the findings, counted in samples
        split = f" ({nf.fail} FAIL, {nf.warn} WARN)" if nf.fail and nf.warn else ""
        lines.append(f"- {nf.level.upper()} {nf.code} in {nf.samples} of them{split}: "
                     f"{nf.message}")
    for s in report.analysis.sizes:
        att = report.attributions.get(size_key(s))
        if att is not None:
            who = f"likely culprit **{att.culprit}**: " if att.culprit else ""
            lines.append(f"- {_size_label(s, report.calibration)}: {who}{att.evidence}")
        # power caps and thermal limits seen at the measured requests' edges
        lines += [f"- {_size_label(s, report.calibration)}: {t}" for t in throttle_sentences(
            (r.number, r.record) for r in s.ok if r.number is not None)]
    return lines


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
    tracked = [(size, sp) for size in spreads for sp in size.spreads if sp.machine is not None]
    if tracked:
        lines.append("")
    for size, sp in tracked:
        m = sp.machine
        assert m is not None
        known = [x for x in m.medians if x is not None]
        p = "p < 0.001" if m.p < 0.001 else f"p = {m.p:.3f}"
        lines.append(
            f"- {size.target} tok, {sp.label}: the runs' spread follows the machine: "
            f"{m.part} ({_num(min(known), 2)}–{_num(max(known), 2)} ms over the runs) moved "
            f"with it (Spearman ρ {m.rho:+.2f}, {p}): the machine's speed changed between "
            "runs, which no run could take out; the interval above is the figure to quote")
    lines += ["", "Logs: " + ", ".join(f"run {i} `{p}`" for i, p in enumerate(logs, start=1))]
    return lines
