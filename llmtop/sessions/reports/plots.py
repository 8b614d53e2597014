"""Plotly figures of a run, drawn from its log records alone (html.py puts them in a page).

* `series_figure`: one prompt size's requests in the order they ran, on a time axis (seconds
  since the run's first request): TTFT, the server's decode rate, and the CPU of the app that
  attribution names (else the busiest other app) from the probe samples on the same axis.
  Warm-ups and excluded requests are marked; requests that overlapped a NOISY probe sample
  are shaded red, slow episodes (analysis/episodes.py) purple with their request numbers.
* `itl_figure`: inter-token latency distributions (gaps between streamed chunks).
* `load_curve_figure`: throughput against latency per load level, with the SLO line.
* `compare_figure`: the per-request values of A and B side by side for each metric.
* `engines_figure`: several engines' medians of one metric with their 95 % intervals
  (`bench --engines`).
* `prefill_curve_figure`, `turns_figure`, `cache_pairs_figure`: a sweep's prefill curve with
  its residuals, a conversation's turns, the prefix cache's cold and warm requests.

Text from a log (app names, reasons) is HTML-escaped before plotly.js shows it.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from llmtop.sessions.analysis.attribution import EXCLUDED_CATEGORIES
from llmtop.sessions.analysis.context import CachePair, PrefillSweep, Turn
from llmtop.sessions.analysis.run import RequestVerdict, SizeAnalysis
from llmtop.sessions.analysis.series import kind_of
from llmtop.sessions.measure.metrics import PROMPT_EVAL, SERVER_DECODE, TTFT
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import ProbeRecord

NOISY_FILL = "rgba(214, 39, 40, 0.12)"
EPISODE_FILL = "rgba(148, 103, 189, 0.18)"  # a slow episode (purple: neither ok nor NOISY)
MARKERS = {"ok": ("circle", "#1f77b4"), "warmup": ("diamond-open", "#7f7f7f"),
           "excluded": ("x", "#d62728")}


def _stamp(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class TimeAxis:
    """Where requests and probe samples sit on a run's x axis: seconds since the first
    request's start (wall clock, from `started_at` and `wall_time`), or, when a record lacks
    its stamp, the request number. `request_x[id]`; `probe_x(probe)` is None when a sample
    cannot be placed."""

    title: str
    request_x: dict[int, float]
    starts: dict[str, datetime] | None = None
    t0: datetime | None = None

    @classmethod
    def of(cls, requests: Sequence[RequestRecord]) -> TimeAxis:
        """The axis of a run's requests (every request, warm-ups included)."""
        stamps = {r.id: _stamp(r.started_at) for r in requests}
        if not stamps or any(s is None for s in stamps.values()):
            return cls("request #", {r.id: float(r.id) for r in requests})
        try:
            t0 = min(s for s in stamps.values() if s is not None)
            xs = {i: (s - t0).total_seconds() for i, s in stamps.items() if s is not None}
        except TypeError:  # stamps with and without a time zone
            return cls("request #", {r.id: float(r.id) for r in requests})
        return cls("seconds since the first request", xs, t0=t0)

    def probe_x(self, probe: ProbeRecord) -> float | None:
        """A probe sample's x: its wall time on a time axis, its request's x otherwise."""
        if self.t0 is not None:
            stamp = _stamp(probe.wall_time)
            try:
                return None if stamp is None else (stamp - self.t0).total_seconds()
            except TypeError:
                return None
        return None if probe.request_id is None else self.request_x.get(probe.request_id)

    def covers(self, probe: ProbeRecord, requests: Sequence[RequestVerdict]) -> bool:
        """True when a sample belongs on the plot of these requests: on a time axis, it fell
        between the first one's start and the last one's end (± 1 s); otherwise it
        overlapped one of them."""
        if self.t0 is None:
            return probe.request_id in {r.record.id for r in requests}
        x = self.probe_x(probe)
        spans = [self.span(r.record) for r in requests]
        return x is not None and min(s[0] for s in spans) - 1 <= x <= max(s[1] for s in spans) + 1

    def span(self, record: RequestRecord) -> tuple[float, float]:
        """The x range a request covers (its E2E on a time axis; to its last chunk when it has
        no E2E, as a cancelled request has not; ±0.4 around its number)."""
        x = self.request_x[record.id]
        if self.t0 is None:
            return x - 0.4, x + 0.4
        if record.metrics.e2e_ms:
            return x, x + record.metrics.e2e_ms / 1000
        return x, x + (record.chunks[-1][0] / 1e9 if record.chunks else 0.0)


def app_cpu(probes: Sequence[ProbeRecord], app: str) -> list[tuple[ProbeRecord, float]]:
    """The samples that read `app`'s CPU (% of one core); an app absent from a sample that
    listed others counts 0 % (the log keeps the busiest 20: attribution's rule)."""
    out = []
    for p in probes:
        if p.processes is None or p.processes.warming_up:
            continue
        cpu = next((a.cpu_percent for a in p.processes.apps if a.app == app), 0.0)
        if cpu is not None:
            out.append((p, cpu))
    return out


def busiest_app(probes: Sequence[ProbeRecord]) -> str | None:
    """The app with the highest mean CPU over the samples, llmtop and the engine left out."""
    totals: dict[str, float] = {}
    for p in probes:
        for a in p.processes.apps if p.processes else ():
            if a.cpu_percent is not None and (a.category or "") not in EXCLUDED_CATEGORIES:
                totals[a.app] = totals.get(a.app, 0.0) + a.cpu_percent
    return max(totals, key=lambda k: totals[k]) if totals else None


def _series_traces(fig: go.Figure, size: SizeAnalysis, axis: TimeAxis) -> None:
    for row, (key, label) in enumerate(((TTFT.key, TTFT.heading),
                                        (SERVER_DECODE.key, "decode tok/s")), start=1):
        for kind, (symbol, colour) in MARKERS.items():
            picked = [r for r in size.requests if kind_of(r) == kind]
            if not picked:
                continue
            fig.add_trace(go.Scatter(
                x=[axis.request_x[r.record.id] for r in picked],
                y=[r.record.metric(key) for r in picked],
                mode="lines+markers" if kind == "ok" else "markers",
                name=kind, legendgroup=kind, showlegend=row == 1,
                marker={"symbol": symbol, "color": colour, "size": 8},
                text=[html.escape(f"#{r.index + 1} {r.status}: {r.reason or 'ok'}")
                      for r in picked],
                hovertemplate="%{text}<br>" + label + " %{y:.2f}<extra></extra>",
            ), row=row, col=1)
        fig.update_yaxes(title_text=label, row=row, col=1)


def series_figure(size: SizeAnalysis, title: str, probes: Sequence[ProbeRecord],
                  axis: TimeAxis, culprit: str | None) -> go.Figure:
    """One prompt size: TTFT and decode rate per request, and `culprit`'s CPU (else the
    busiest other app's) over the same x axis; NOISY requests shaded (see module doc)."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        row_heights=[0.4, 0.4, 0.2])
    _series_traces(fig, size, axis)
    ids = {r.record.id for r in size.requests}
    mine = [p for p in probes if axis.covers(p, size.requests)]
    app = culprit or busiest_app(mine)
    if app is not None:
        points = [(x, cpu) for p, cpu in app_cpu(mine, app) if (x := axis.probe_x(p)) is not None]
        # named as another program, never read as llmtop's own CPU (a second llmtop is one)
        who = "likely culprit" if culprit else "the busiest"
        fig.add_trace(go.Scatter(x=[x for x, _ in points], y=[c for _, c in points],
                                 mode="lines+markers",
                                 name=html.escape(f"other app: {app}, CPU ({who})"),
                                 marker={"color": "#ff7f0e", "size": 5}), row=3, col=1)
    fig.update_yaxes(title_text="CPU % of a core", row=3, col=1)
    noisy = {p.request_id for p in probes if p.noisy and p.request_id in ids}
    for r in size.requests:
        if r.record.id in noisy:
            x0, x1 = axis.span(r.record)
            fig.add_vrect(x0=x0, x1=x1, fillcolor=NOISY_FILL, line_width=0, layer="below")
    for e in size.episodes.episodes:  # a slow episode: from its first request to its last
        spans = [axis.span(r.record) for r in size.ok if r.number in e.numbers]
        fig.add_vrect(x0=min(a for a, _ in spans), x1=max(b for _, b in spans),
                      fillcolor=EPISODE_FILL, line_width=0, layer="below",
                      annotation_text=html.escape(f"episode {e.requests}"),
                      annotation_position="top left")
    notes = ["shaded red: a NOISY probe sample overlapped the request"] if noisy else []
    if size.episodes.episodes:
        notes.append("shaded purple: a slow episode (outside the baseline)")
    if notes:
        fig.add_annotation(text="; ".join(notes),
                           xref="paper", yref="paper", x=0, y=1.06, showarrow=False)
    fig.update_xaxes(title_text=axis.title, row=3, col=1)
    fig.update_layout(title=html.escape(title), height=620, margin={"t": 70})
    return fig


def itl_figure(series: Mapping[str, Sequence[float]]) -> go.Figure:
    """Histograms of inter-token latency (ms), one per label (a prompt size, or a run)."""
    fig = go.Figure()
    for label, gaps in series.items():
        fig.add_trace(go.Histogram(x=list(gaps), name=html.escape(label), opacity=0.6,
                                   nbinsx=60))
    fig.update_layout(title="Inter-token latency (client, gaps between chunks)",
                      barmode="overlay", xaxis_title="ms", yaxis_title="chunks", height=380)
    return fig


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One load level as the throughput–latency curve needs it: label ("c=4", "2 req/s"),
    throughput (req/s or tok/s, one unit for the whole curve), latency p50 and p95 (ms;
    p95 None when the level had too few requests for it)."""

    label: str
    throughput: float
    latency_p50_ms: float
    latency_p95_ms: float | None = None


def load_curve_figure(points: Sequence[LoadPoint], slo_ms: float | None = None,
                      throughput_unit: str = "req/s", latency: str = "TTFT") -> go.Figure:
    """Latency against throughput, one marker per level in order, p50 and p95, with the SLO
    (ms) as a horizontal line when given. Plain data in: load runs' analysis feeds it."""
    fig = go.Figure()
    labels = [html.escape(p.label) for p in points]
    fig.add_trace(go.Scatter(x=[p.throughput for p in points], y=[p.latency_p50_ms for p in points],
                             mode="lines+markers+text", text=labels, textposition="top left",
                             name=f"{latency} p50"))
    p95 = [(p.throughput, p.latency_p95_ms) for p in points if p.latency_p95_ms is not None]
    if p95:
        fig.add_trace(go.Scatter(x=[x for x, _ in p95], y=[y for _, y in p95],
                                 mode="lines+markers", name=f"{latency} p95",
                                 line={"dash": "dot"}))
    if slo_ms is not None:
        fig.add_hline(y=slo_ms, line_dash="dash", line_color="#d62728",
                      annotation_text=f"SLO {slo_ms:g} ms")
    fig.update_layout(title="Throughput against latency, per load level",
                      xaxis_title=f"throughput ({throughput_unit})",
                      yaxis_title=f"{latency} ms", height=420)
    # from zero: a +9 % step between levels must not look like a cliff
    fig.update_xaxes(rangemode="tozero")
    fig.update_yaxes(rangemode="tozero")
    return fig


def compare_figure(title: str, metrics: Sequence[tuple[str, str]],
                   a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]],
                   names: tuple[str, str] = ("A", "B")) -> go.Figure:
    """Box plots with every request shown, A beside B, one panel per metric.
    metrics: (field, "label unit") pairs; a / b: field → values."""
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[m[1] for m in metrics])
    for col, (key, _label) in enumerate(metrics, start=1):
        for side, values, colour in ((names[0], a, "#1f77b4"), (names[1], b, "#ff7f0e")):
            fig.add_trace(go.Box(y=list(values.get(key, ())), name=html.escape(side),
                                 boxpoints="all", jitter=0.4, marker_color=colour,
                                 showlegend=False), row=1, col=col)
    fig.update_layout(title=html.escape(title), height=400)
    return fig


def engines_figure(title: str, unit: str,
                   rows: Sequence[tuple[str, float, float | None, float | None]]) -> go.Figure:
    """Each engine's median of one metric with its 95 % interval as an error bar (none when
    the interval is n/a). rows: (engine, median, low, high), in the set's order; unit: the
    metric's, on the axis."""
    fig = go.Figure(go.Scatter(
        x=[html.escape(r[0]) for r in rows], y=[r[1] for r in rows], mode="markers",
        marker={"size": 10, "color": "#1f77b4"},
        error_y={"type": "data", "symmetric": False,
                 "array": [0 if r[3] is None else r[3] - r[1] for r in rows],
                 "arrayminus": [0 if r[2] is None else r[1] - r[2] for r in rows]}))
    fig.update_layout(title=html.escape(title), height=360, yaxis_title=unit,
                      yaxis_rangemode="tozero")
    return fig


def prefill_curve_figure(sweep: PrefillSweep) -> go.Figure:
    """The sweep's prefill per request against the server's token count with the fitted
    curve (and the TTFT curve) above, the residuals (measured − curve, ms) below."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.7, 0.3],
                        vertical_spacing=0.06, subplot_titles=("prefill and TTFT (ms)",
                                                               "prefill residual (ms)"))
    curve = sweep.prefill
    fig.add_trace(go.Scatter(x=[r.tokens for r in sweep.rows],
                             y=[r.prefill_ms for r in sweep.rows], mode="markers",
                             name="prefill (median per size)"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[r.tokens for r in sweep.rows], y=[r.ttft_ms for r in sweep.rows],
                             mode="markers", marker_symbol="diamond-open",
                             name="TTFT (median per size)"), row=1, col=1)
    if curve is not None:
        xs = [curve.t_min + (curve.t_max - curve.t_min) * i / 50 for i in range(51)]
        fig.add_trace(go.Scatter(x=xs, y=[curve.predict(x) for x in xs], mode="lines",
                                 name=html.escape(curve.formula())), row=1, col=1)
        if sweep.ttft is not None:
            fig.add_trace(go.Scatter(x=xs, y=[sweep.ttft.predict(x) for x in xs], mode="lines",
                                     line={"dash": "dot"}, name=html.escape(sweep.ttft.formula())),
                          row=1, col=1)
        fig.add_trace(go.Scatter(
            x=[r.tokens for r in sweep.rows],
            y=[None if r.prefill_ms is None or r.prefill_predicted_ms is None
               else r.prefill_ms - r.prefill_predicted_ms for r in sweep.rows],
            mode="markers", name="residual", showlegend=False), row=2, col=1)
        fig.add_hline(y=0, line_color="#7f7f7f", row=2, col=1)
    fig.update_xaxes(title_text="prompt tokens (the server's count)", row=2, col=1)
    fig.update_layout(title="Prefill curve", height=560)
    return fig


def turns_figure(turns: Sequence[Turn], cold: Sequence[Turn] = ()) -> go.Figure:
    """A conversation: TTFT and prefill per turn against the context the server counted, the
    curve's cold prefill and (`cold`) the replay's TTFT with the cache defeated beside them,
    turns where the context was full marked."""
    fig = go.Figure()
    x = [t.context_tokens for t in turns]
    text = [f"turn {t.turn}" + (" (context full)" if t.full else "") for t in turns]
    fig.add_trace(go.Scatter(x=x, y=[t.record.metrics.ttft_ms for t in turns], text=text,
                             mode="lines+markers", name="TTFT"))
    fig.add_trace(go.Scatter(x=x, y=[t.record.metrics.prompt_eval_ms for t in turns], text=text,
                             mode="lines+markers", name="prefill (server)"))
    if cold:
        fig.add_trace(go.Scatter(x=[t.context_tokens for t in cold],
                                 y=[t.record.metrics.ttft_ms for t in cold],
                                 text=[f"turn {t.turn}, cache defeated" for t in cold],
                                 mode="lines+markers", name="TTFT, cache defeated"))
    if any(t.predicted_ms is not None for t in turns):
        fig.add_trace(go.Scatter(x=x, y=[t.predicted_ms for t in turns], mode="lines",
                                 line={"dash": "dot"}, name="the curve: cold prefill"))
    full = [t for t in turns if t.full]
    if full:
        fig.add_trace(go.Scatter(x=[t.context_tokens for t in full],
                                 y=[t.record.metrics.ttft_ms for t in full], mode="markers",
                                 marker={"symbol": "x", "size": 12, "color": "#d62728"},
                                 name="context full"))
    fig.update_layout(title="Conversation: per turn", xaxis_title="context tokens (server)",
                      yaxis_title="ms", height=420)
    return fig


def cache_pairs_figure(pairs: Sequence[CachePair]) -> go.Figure:
    """Cold against warm prefill and TTFT, one group of bars per pair."""
    fig = go.Figure()
    names = [f"pair {p.pair + 1}" for p in pairs]
    for label, side, key in (("prefill cold", "cold", PROMPT_EVAL.key),
                             ("prefill warm", "warm", PROMPT_EVAL.key),
                             ("TTFT cold", "cold", TTFT.key), ("TTFT warm", "warm", TTFT.key)):
        values = [getattr(p, side).metric(key) for p in pairs]
        fig.add_trace(go.Bar(x=names, y=values, name=label))
    fig.update_layout(title="Prefix cache: cold against warm", barmode="group",
                      yaxis_title="ms", height=380)
    return fig


def watch_figure(series: Mapping[str, Sequence[float]]) -> go.Figure:
    """TTFT (ms) of each watched request, one box (with its points) per "caller · model"."""
    fig = go.Figure()
    for label, values in series.items():
        fig.add_trace(go.Box(y=list(values), name=html.escape(label), boxpoints="all",
                             jitter=0.3))
    fig.update_layout(title="TTFT by caller and model (ok requests)", yaxis_title="ms",
                      height=420, showlegend=False)
    return fig


FIGURE_CONFIG = {"displaylogo": False, "responsive": True}


def figure_html(fig: go.Figure, div_id: str) -> str:
    """A figure for a page that loads plotly.js once (html.page): its <div> and its spec as a
    `<script type="application/json" data-plot="ID">` block, which the page's loader draws
    with Plotly.newPlot once plotly.js is unpacked. Every "<" of the JSON is written \\u003c,
    so no text from a log (a title, an app's name) can end the block or start a tag."""
    spec = fig.to_json().replace("<", "\\u003c")
    config = json.dumps(FIGURE_CONFIG)
    height = fig.layout.height or 450
    return (f'<div id="{html.escape(div_id)}" class="plotly-graph-div" '
            f'style="height:{int(height)}px; width:100%;"></div>\n'
            f'<script type="application/json" data-plot="{html.escape(div_id)}" '
            f"data-config='{config}'>{spec}</script>")
