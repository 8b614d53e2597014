"""HTML reports: one self-contained page with the tables and the plotly figures; the plots
carry the marks the issue asks for (warm-ups, excluded, NOISY shading, the app's CPU)."""

from __future__ import annotations

import random
import re

import pytest

from llmtop import cli
from llmtop.sessions.analysis.series import chunk_gaps_ms, run_series
from llmtop.sessions.records.log import read_log
from llmtop.sessions.reports.html import load_curve_section, report_html
from llmtop.sessions.reports.plots import (
    LoadPoint,
    TimeAxis,
    compare_figure,
    load_curve_figure,
    series_figure,
)
from llmtop.sessions.reports.run import build
from tests.unit.compare_logs import lognormal, write_log

APPS = [{"app": "chromium", "category": "browser", "cpu_percent": 38.0},
        {"app": "llmtop", "category": "llmtop", "cpu_percent": 90.0}]


def _log(tmp_path):
    probes = [{"request_id": 3, "wall_time": "2026-11-30T10:00:03.5+00:00",
               "processes": {"apps": APPS}, "verdict": {"quiet": False}},
              {"request_id": 4, "wall_time": "2026-11-30T10:00:04.5+00:00",
               "processes": {"apps": APPS[1:]}, "verdict": {"quiet": True}}]
    path = write_log(tmp_path / "run.jsonl", lognormal(random.Random(1), 400, 12), probes=probes,
                     model="<script>alert(1)</script>")
    return read_log(path)


def _plot_ids(page: str) -> list[str]:
    """The ids of the plotly figures' divs, in page order."""
    return re.findall(r'<div id="([^"]+)" class="plotly-graph-div"', page)


def test_the_page_is_self_contained_and_escapes_the_log(tmp_path):
    page = report_html(build(_log(tmp_path)))
    assert page.startswith("<!DOCTYPE html>") and "<table>" in page
    assert not re.search(r'<script[^>]+src=|<link[^>]+href="http', page)  # nothing to fetch
    assert page.count("<script>alert(1)</script>") == 0  # the model name is text, not code
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert _plot_ids(page) == ["series-1", "itl"]
    assert page.count("data-plot=") == 2 and page.count("id=\"plotly-js\"") == 1


def test_series_marks_warmups_shades_noisy_requests_and_draws_the_apps_cpu(tmp_path):
    log = _log(tmp_path)
    size = build(log).analysis.sizes[0]
    fig = series_figure(size, "t", log.probes, TimeAxis.of(log.requests), None)
    names = {t.name for t in fig.data}
    assert {"ok", "warmup", "other app: chromium, CPU (the busiest)"} <= names
    cpu = next(t for t in fig.data if t.name.startswith("other app: chromium"))
    # request 1 (the warm-up) started at 10:00:00; the samples at +3.5 s and +4.5 s; chromium
    # is absent from the second one: 0 % (the log keeps the busiest apps)
    assert list(cpu.x) == [3.5, 4.5] and list(cpu.y) == [38.0, 0.0]
    # only request id 3 (started at +2 s) overlapped a NOISY sample: one band in each panel
    e2e_ms = next(r.record.metrics.e2e_ms for r in size.requests if r.record.id == 3)
    assert [(s.x0, s.x1) for s in fig.layout.shapes] == [(2.0, 2.0 + e2e_ms / 1000)] * 3


def test_itl_is_the_gaps_between_chunks(tmp_path):
    log = _log(tmp_path)
    assert chunk_gaps_ms(log.requests[1]) == [10.0, 10.0, 10.0, 10.0]  # chunks 10 ms apart
    (series,) = run_series(build(log).analysis)
    assert len(series.gaps) == 12 * 4 and len(series.points["warmup"]) == 1


def test_load_curve_from_plain_points():
    points = [LoadPoint("c=1", 1.0, 300.0), LoadPoint("c=2", 1.9, 350.0, 500.0),
              LoadPoint("c=4", 2.1, 900.0, 1400.0)]
    fig = load_curve_figure(points, slo_ms=1000.0)
    assert list(fig.data[0].x) == [1.0, 1.9, 2.1] and list(fig.data[1].y) == [500.0, 1400.0]
    assert fig.layout.shapes[0].y0 == 1000.0  # the SLO line
    assert 'id="load-curve"' in load_curve_section(points, 1000.0)


def test_report_and_compare_write_html_files(tmp_path):
    log = _log(tmp_path)
    out = tmp_path / "r.html"
    assert cli.main(["report", str(tmp_path / "run.jsonl"), "--format", "html", "--out",
                     str(out)]) == 0
    assert _plot_ids(out.read_text()) == ["series-1", "itl"]
    other = write_log(tmp_path / "b.jsonl", lognormal(random.Random(2), 400, 12),
                      model=log.header.model)
    out = tmp_path / "c.html"
    assert cli.main(["compare", str(tmp_path / "run.jsonl"), str(other), "--format", "html",
                     "--out", str(out)]) == 1  # distrusted: the exit says so too
    page = out.read_text()
    # the baseline met a NOISY machine in 1 of its 2 probe samples (_log): no claim is made
    assert _plot_ids(page) == ["compare-1"]
    assert "NOT ATTRIBUTABLE: " in page and ": A was NOISY in 1 of 2 probe samples; " in page


def test_compare_figure_has_a_box_per_run_and_metric():
    fig = compare_figure("t", [("ttft_ms", "TTFT (ms)"), ("e2e_ms", "E2E (ms)")],
                         {"ttft_ms": [1.0, 2.0], "e2e_ms": [3.0]}, {"ttft_ms": [4.0]})
    assert [(t.name, list(t.y)) for t in fig.data] == [
        ("A", [1.0, 2.0]), ("B", [4.0]), ("A", [3.0]), ("B", [])]


def test_series_shades_each_slow_episode(tmp_path):
    from llmtop.sessions.records.log import SessionLog
    from tests.unit.test_analysis_report import contaminated_json

    path = tmp_path / "bench.jsonl"
    log = SessionLog(path, {"kind": "bench", "engine": "e", "model": "m"})
    for r in contaminated_json():  # the seed's run: episodes at measured requests 8–13, 20–25
        log.write_raw(r)
    log.close()
    run = read_log(path)
    size = build(run).analysis.sizes[0]
    fig = series_figure(size, "t", run.probes, TimeAxis.of(run.requests), None)
    # no wall stamps: x is the request id, the warm-up is id 1, so measured request n is id
    # n + 1 and each request spans ±0.4; one band per episode in each panel with data (TTFT,
    # decode: this log has no probe samples for the CPU panel)
    bands = sorted({(s.x0, s.x1) for s in fig.layout.shapes})
    assert bands == [(9 - 0.4, 14 + 0.4), (21 - 0.4, 26 + 0.4)]
    assert len(fig.layout.shapes) == 4
    assert {a.text for a in fig.layout.annotations} >= {"episode 8–13", "episode 20–25"}


def test_the_load_curve_starts_at_zero_and_another_app_is_named_as_one(tmp_path):
    # two levels 9 % apart: from zero the step reads as 9 %, not as the plot's whole height
    fig = load_curve_figure([LoadPoint("1 user", 0.108, 300.0), LoadPoint("2 users", 0.118, 310.0)])
    assert fig.layout.xaxis.rangemode == "tozero" and fig.layout.yaxis.rangemode == "tozero"


def test_a_series_of_fewer_than_3_values_is_no_sparkline():
    from llmtop.sessions.reports.run_markdown import _series_cell

    assert _series_cell([400.0]) == "—" and _series_cell([400.0, None, 410.0]) == "—"
    assert _series_cell([400.0, 405.0, 410.0]).startswith("`")


def test_a_cancelled_request_is_as_wide_as_its_chunks(tmp_path):
    from llmtop.sessions.records.request import RequestRecord
    from tests.unit.compare_logs import request

    rec = request(1, 400.0, 20.0)  # started at +1 s; chunks at 400-440 ms after the send
    rec.update(status="cancelled", metrics={**rec["metrics"], "e2e_ms": None})
    record = RequestRecord.from_json(rec)
    axis = TimeAxis.of([record])
    x0, x1 = axis.span(record)
    assert x1 - x0 == pytest.approx(0.440)  # the last chunk's offset, 440 ms


def test_plotly_is_carried_packed_and_unpacks_to_plotlys_own_bundle(tmp_path):
    """Row 9 of issue 32: each report was 4.8 MB, plotly.js inline. It is gzipped and in
    base64 now; what the page's loader unpacks is byte for byte plotly's offline bundle."""
    import base64
    import gzip

    from plotly.offline import get_plotlyjs

    from llmtop.sessions.reports.html import page

    report = report_html(build(_log(tmp_path)))
    packed = re.search(r'<script type="application/octet-stream" id="plotly-js">([^<]+)</script>',
                       report)
    assert packed is not None
    assert gzip.decompress(base64.b64decode(packed.group(1))).decode() == get_plotlyjs()
    # the bundle is the page's bulk: packed, under half of what it was inline
    assert len(report) < len(get_plotlyjs()) / 2
    # the figures' JSON has no "<" a log could use to end its block (the model name above)
    for block in re.findall(r'data-plot="[^"]+" data-config=\'[^\']+\'>(.*?)</script>', report,
                            flags=re.DOTALL):
        assert "<" not in block
    # a page without figures carries no plotly.js at all
    assert "plotly-js" not in page("t", ["<p>text</p>"])


def test_a_compare_plot_names_the_logs_by_their_file_names():
    # new-user pass D30: two full paths in a plot's title ran off its right edge (plotly
    # never wraps a title)
    from llmtop.sessions.reports.html import short_names

    assert short_names("/home/ana/llmtop/sessions/bench-1.jsonl", "/tmp/bench-2.jsonl") == (
        "bench-1.jsonl", "bench-2.jsonl")
    assert short_names("/runs/old/run.jsonl", "/runs/new/run.jsonl") == (
        "old/run.jsonl", "new/run.jsonl")
