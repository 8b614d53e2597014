"""Reports as one self-contained HTML file: the markdown report's tables plus plotly figures.

The page carries plotly.js inline (plotly's offline bundle, once per page, gzipped and in
base64: 1.7 of its 4.6 MB; the browser unpacks it, `LOADER`) and loads nothing else, so it
opens with no network. The text part is the markdown report (run_markdown.py,
compare.py) turned into HTML by markdown-it-py with raw HTML disabled: text from a log
(prompts, error messages, app names) is escaped, never run.

`page(title, sections)` is the one way a page is built; `report_html` (a run),
`compare_html` (`llmtop compare`) and `load_curve_section` (a load run's curve, from plain
per-level points) feed it.
"""

from __future__ import annotations

import base64
import functools
import gzip
import html
import itertools
from collections.abc import Iterable, Sequence
from pathlib import PurePath

from markdown_it import MarkdownIt

from llmtop.safetext import visible
from llmtop.sessions.analysis.compare.groups import groups
from llmtop.sessions.analysis.engine_set import SetAnalysis
from llmtop.sessions.analysis.load import LoadAnalysis
from llmtop.sessions.analysis.run import analyze_run, size_key
from llmtop.sessions.analysis.series import chunk_gaps_ms, size_label
from llmtop.sessions.analysis.watch import WatchAnalysis, group_key
from llmtop.sessions.reports import engine_set as engine_set_report
from llmtop.sessions.reports import load as load_report
from llmtop.sessions.reports import replay as replay_report
from llmtop.sessions.reports import watch as watch_report
from llmtop.sessions.reports.compare import Comparisons
from llmtop.sessions.reports.compare import markdown as compare_markdown
from llmtop.sessions.reports.plots import (
    LoadPoint,
    TimeAxis,
    cache_pairs_figure,
    compare_figure,
    engines_figure,
    figure_html,
    itl_figure,
    load_curve_figure,
    prefill_curve_figure,
    series_figure,
    turns_figure,
    watch_figure,
)
from llmtop.sessions.reports.run import Report
from llmtop.sessions.reports.run_markdown import markdown as run_markdown

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em;
       color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
code { font-size: 0.85em; }
.plot { margin: 1em 0 2em; }
"""


def markdown_html(text: str) -> str:
    """Markdown (CommonMark plus tables) as HTML, raw HTML in the text escaped and control
    characters shown as escapes (safetext.visible)."""
    return str(MarkdownIt("commonmark", {"html": False}).enable("table").render(visible(text)))


# Unpacks plotly.js (gzip, base64, in #plotly-js) with the browser's DecompressionStream,
# runs it in the global scope, then draws every figure block (plots.figure_html). A browser
# without DecompressionStream (Chrome < 80, Firefox < 113, Safari < 16.4) gets a line saying
# so in each plot's place; the tables never need it.
LOADER = """
(async () => {
  const figures = document.querySelectorAll('script[type="application/json"][data-plot]');
  const say = (text) => figures.forEach((f) => {
    const div = document.getElementById(f.dataset.plot);
    if (div) { div.style.height = 'auto'; div.textContent = text; }
  });
  if (!figures.length) return;
  if (typeof DecompressionStream === 'undefined') {
    say('This browser cannot unpack the plots (it has no DecompressionStream); ' +
        'open the report in Chrome 80+, Firefox 113+ or Safari 16.4+.');
    return;
  }
  try {
    const packed = Uint8Array.from(atob(document.getElementById('plotly-js').textContent),
                                   (c) => c.charCodeAt(0));
    const stream = new Blob([packed]).stream().pipeThrough(new DecompressionStream('gzip'));
    (0, eval)(await new Response(stream).text());
    for (const f of figures) {
      const spec = JSON.parse(f.textContent);
      await Plotly.newPlot(f.dataset.plot, spec.data, spec.layout, JSON.parse(f.dataset.config));
    }
  } catch (err) {
    say('The plots could not be drawn: ' + err);
    throw err;
  }
})();
"""


@functools.cache
def packed_plotlyjs() -> str:
    """plotly.js (plotly's offline bundle, 4.6 MB) gzipped and in base64: 1.7 MB, so a report
    carries its charts in well under half the size (4.8 MB per report before).
    gzip's mtime is fixed at 0, so the same plotly gives the same bytes."""
    from plotly.offline import get_plotlyjs

    raw = get_plotlyjs().encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def page(title: str, sections: Iterable[str]) -> str:
    """A whole HTML document: the sections (HTML fragments: `markdown_html`, `figure_html`) in
    order, then plotly.js packed (`packed_plotlyjs`) and the loader that draws the figures;
    a page without figures carries no plotly.js."""
    parts = list(sections)
    plots = any('data-plot="' in part for part in parts)
    packed = f'<script type="application/octet-stream" id="plotly-js">{packed_plotlyjs()}</script>'
    tail = [packed, f"<script>{LOADER}</script>"] if plots else []
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(visible(title))}</title>", f"<style>{STYLE}</style>",
        "</head><body>", *parts, *tail, "</body></html>", ""])


def _plot(fig_html: str) -> str:
    return f'<div class="plot">{fig_html}</div>'


def run_plots(report: Report) -> list[str]:
    """The plots of a run: per prompt size its series (with the culprit's CPU), the
    inter-token latency distributions of the ok requests, then the prefill curve, the cache
    pairs and the conversation when the run had them."""
    log, counter = report.log, itertools.count(1)
    axis = TimeAxis.of(log.requests)
    out = ["<h2>Plots</h2>"]
    for size in report.analysis.sizes:
        label = size_label(size)
        att = report.attributions.get(size_key(size))
        fig = series_figure(size, f"Requests in order — {label}", log.probes, axis,
                            att.culprit if att else None)
        out.append(_plot(figure_html(fig, f"series-{next(counter)}")))
    itl = {size_label(s): [g for r in s.ok for g in chunk_gaps_ms(r.record)]
           for s in report.analysis.sizes}
    if any(itl.values()):
        out.append(_plot(figure_html(itl_figure(itl), "itl")))
    if report.sweep is not None and report.sweep.prefill is not None:
        out.append(_plot(figure_html(prefill_curve_figure(report.sweep), "prefill-curve")))
    if report.pairs:
        out.append(_plot(figure_html(cache_pairs_figure(report.pairs), "cache-pairs")))
    if report.turns:
        out.append(_plot(figure_html(turns_figure(report.turns, report.cold_turns), "turns")))
    return out


def report_html(report: Report) -> str:
    """A run's report as a page: the verdict and result table, the plots, then the rest of
    the markdown report (statistics, machine, requests, calibration, environment)."""
    text = run_markdown(report)
    head, mark, rest = text.partition("\n## Statistics")
    h = report.log.header
    return page(f"llmtop {h.kind} report — {h.model}",
                [markdown_html(head), *run_plots(report), markdown_html(mark + rest)])


def load_curve_section(points: Sequence[LoadPoint], slo_ms: float | None = None,
                       throughput_unit: str = "req/s", latency: str = "TTFT") -> str:
    """The throughput–latency curve of a load run as a page section (plots.LoadPoint per
    level, in order; slo_ms draws the SLO line). For a load report's `page`."""
    fig = load_curve_figure(points, slo_ms, throughput_unit, latency)
    return _plot(figure_html(fig, "load-curve"))


def load_html(analysis: LoadAnalysis) -> str:
    """A sweep as one page: the markdown report with TTFT p50/p95 against request throughput
    per level right after the levels' table, before the energy and the rest (levels without
    a throughput or a TTFT median are left out). At the page's end, below the energy, the
    curve went unseen."""
    points = [LoadPoint(lv.label, lv.req_per_s, lv.ttft.p50, lv.ttft.p95)
              for lv in analysis.levels if lv.req_per_s is not None and lv.ttft.p50 is not None]
    head, mark, rest = load_report.markdown(analysis).partition("\n## ")
    sections = [markdown_html(head)]
    if points:
        sections.append(load_curve_section(points, analysis.slo.ttft_ms))
    if mark:
        sections.append(markdown_html("## " + rest))
    return page("llmtop load", sections)


def replay_html(r: replay_report.ReplayReport) -> str:
    """A replay's log as one page: its level's report, then each replayed request against its
    original and the verdicts (the markdown report's sections)."""
    text = load_report.markdown(r.sweep) + "\n" + replay_report.markdown(r.comparison)
    return page("llmtop replay report", [markdown_html(text)])


def watch_html(analysis: WatchAnalysis) -> str:
    """A watch log as one page: the markdown report (per caller and model), then the ok
    requests' TTFT per group."""
    series: dict[str, list[float]] = {}
    for r in analysis.log.requests:
        if str(r.status) == "ok" and r.metrics.ttft_ms is not None:
            caller, model = group_key(r)
            series.setdefault(f"{caller} · {model}", []).append(r.metrics.ttft_ms)
    sections = [markdown_html(watch_report.markdown(analysis))]
    if series:
        sections.append(_plot(figure_html(watch_figure(series), "watch-ttft")))
    return page("llmtop watch report", sections)


def short_names(a: str, b: str) -> tuple[str, str]:
    """The two logs' names for a plot's title, which plotly never wraps (else
    two full paths ran off the plot's right edge): the file names, or the last folder and
    the file name where the file names are the same."""
    pa, pb = PurePath(a), PurePath(b)
    if pa.name != pb.name:
        return pa.name, pb.name
    return (str(PurePath(pa.parent.name, pa.name)), str(PurePath(pb.parent.name, pb.name)))


def compare_html(subject: Comparisons) -> str:
    """`llmtop compare` as a page: the markdown tables, then per comparison and prompt size
    the per-request values of A and B side by side."""
    comparisons, logs = subject.comparisons, subject.logs
    sections = [markdown_html(compare_markdown(comparisons, subject.energy, logs))]
    counter = itertools.count(1)
    for c, log_b in zip(comparisons, logs[1:], strict=True):
        if c.refused:
            continue
        specs = list(dict.fromkeys(r.metric for r in c.rows))
        keys = [s.key for s in specs]
        ga, gb = groups(analyze_run(logs[0]), keys), groups(analyze_run(log_b), keys)
        sections.append(f"<h2>Every request: {html.escape(c.name_b)} against "
                        f"{html.escape(c.name_a)}</h2>")
        for x, y in zip(ga, gb, strict=False):
            a_name, b_name = short_names(c.name_a, c.name_b)
            fig = compare_figure(f"{x.label}: A = {a_name}, B = {b_name}",
                                 [(s.key, f"{s.label} ({s.unit})") for s in specs],
                                 x.values, y.values)
            sections.append(_plot(figure_html(fig, f"compare-{next(counter)}")))
    return page("llmtop compare", sections)


def engine_set_html(s: SetAnalysis) -> str:
    """`bench --engines` as a page: the set's markdown (engines, model match, rounds, tables,
    each pair's verdict), then per metric and prompt size each engine's median with its
    95 % interval."""
    sections = [markdown_html(engine_set_report.markdown(s))]
    for k, t in enumerate(s.tables, start=1):
        rows = [(r.label, r.median, r.low, r.high) for r in t.rows if r.median is not None]
        if rows:
            fig = engines_figure(f"{t.metric.label}, {t.group}", t.metric.unit, rows)
            sections.append(_plot(figure_html(fig, f"engines-{k}")))
    return page("llmtop bench --engines", sections)
