"""The per-level analysis of a load log, on hand-written records with known answers."""

from __future__ import annotations

import pytest

from llmtop.sessions.analysis.load import (
    LoadAnalysis,
    Percentiles,
    analyze_sweep,
    min_samples,
    probe_verdict,
)
from llmtop.sessions.measure.slo import Slo
from llmtop.sessions.records.schema import ProbeRecord, RunLog
from llmtop.sessions.reports.formats import render as render_load


def analyze_records(header: dict, records: list[dict]) -> LoadAnalysis:
    """The analysis of a log made of these JSON records, read through the schema."""
    log = RunLog.from_json(header, records)
    assert not log.warnings
    return analyze_sweep(log)

MS = 1_000_000


def request(
    level: int,
    index: int,
    ttft: float,
    e2e: float,
    tokens: int = 11,
    lag: float | None = None,
    status: str = "ok",
    queue_ms: float = 0.0,
) -> dict:
    tpot = (e2e - ttft) / (tokens - 1)
    record = {
        "type": "request",
        "id": 100 * level + index + 1,
        "phase": "measure",
        "level": level,
        "index": index,
        "status": status,
        "stats": {
            "prompt_eval_count": 30,
            "prompt_eval_duration": 20 * MS,
            "eval_count": tokens,
            "eval_duration": 80 * MS,
            "load_duration": 0,
            "total_duration": round((100 + queue_ms) * MS),
        },
        "metrics": {
            "ttft_ms": ttft,
            "e2e_ms": e2e,
            "tpot_ms": tpot,
            "output_tokens": tokens,
            "itl_ms": [tpot] * (tokens - 1),
        },
    }
    if lag is not None:
        record["lag_ms"] = lag
    return record


def level_records(level: int, value: float, wall_s: float, requests: list[dict]) -> list[dict]:
    return [
        {"type": "level", "phase": "start", "level": level, "value": value},
        *requests,
        {
            "type": "level",
            "phase": "end",
            "level": level,
            "value": value,
            "wall_ns": round(wall_s * 1e9),
            "generator_cpu_ns": round(wall_s * 0.1e9),
            "max_in_flight": int(value),
        },
    ]


def header(mode: str = "concurrency", slo: Slo | None = None) -> dict:
    return {
        "type": "header",
        "format": 1,
        "kind": "load",
        "model": "m",
        "engine": "e",
        "host": "h",
        "load": {
            "mode": mode,
            "slo": (slo or Slo()).to_dict(),
            "prompt_tokens": 30,
            "requests": 4,
            "max_tokens": 11,
        },
    }


def test_percentiles_follow_the_sample_size_rule():
    assert [min_samples(q) for q in (50, 90, 95, 99)] == [1, 10, 20, 100]
    nine = Percentiles.of(range(1, 10))
    assert (nine.n, nine.p50, nine.p90, nine.p95) == (9, 5.0, None, None)
    ten = Percentiles.of(range(1, 11))
    assert ten.p90 == pytest.approx(9.1)  # linear interpolation: rank 0.9 × 9 = 8.1 → 9 + 0.1
    assert Percentiles.of([None]).n == 0


def test_levels_throughput_goodput_and_knee():
    slo = Slo(ttft_ms=100)
    one = [request(0, i, 50, 150) for i in range(4)]  # all meet TTFT ≤ 100
    two = [request(1, i, 50 if i < 3 else 150, 250) for i in range(4)]  # 3 of 4 meet
    failed = request(1, 4, 0, 0, status="error")
    records = [*level_records(0, 1, 0.6, one), *level_records(1, 2, 0.5, [*two, failed])]
    a = analyze_records(header(slo=slo), records)
    first, second = a.levels
    assert (first.requests, first.ok, first.failed) == (4, 4, 0)
    assert first.req_per_s == pytest.approx(4 / 0.6)
    assert first.tok_per_s == pytest.approx(44 / 0.6)  # 4 × 11 output tokens
    assert first.goodput_share == 1.0 and first.goodput_per_s == pytest.approx(4 / 0.6)
    assert second.statuses == {"ok": 4, "error": 1}
    assert second.goodput_share == pytest.approx(3 / 5)  # a failed request never meets it
    assert second.tpot.p50 == pytest.approx(20.0)  # (250 − 50) / 10
    assert first.generator_cpu_share == pytest.approx(0.1)
    assert a.knee.level is first
    assert a.knee.sentence == "this engine serves 1 concurrent user within TTFT ≤ 100 ms"
    assert any("1 of 5 requests failed" in w for w in a.warnings)


def test_knee_without_slo_is_where_throughput_stops_rising():
    recs = []
    for level, (value, wall) in enumerate(((1, 1.0), (2, 0.5), (4, 0.48))):  # 4, 8, 8.3 req/s
        recs += level_records(level, value, wall, [request(level, i, 50, 150) for i in range(4)])
    a = analyze_records(header(), recs)
    assert a.knee.level is a.levels[1]  # 8 → 8.3 req/s is under +10 %
    assert a.knee.sentence.startswith("throughput stops rising at 2 concurrent users (8.00 req/s)")


def test_open_loop_judges_the_slo_from_the_scheduled_send_and_warns_of_lag():
    slo = Slo(ttft_ms=100)
    reqs = [request(0, i, 60, 160, lag=lag) for i, lag in enumerate((0.5, 30.0, 50.0, 80.0))]
    a = analyze_records(header("rate", slo), level_records(0, 2.0, 2.0, reqs))
    (lv,) = a.levels
    assert lv.ttft.p50 == 60
    assert lv.ttft_scheduled.p50 == pytest.approx(60 + 40)  # median lag (30 + 50) / 2
    assert lv.goodput_share == 0.5  # 60.5 and 90 meet ≤ 100; 110 and 140 do not
    assert any("lagged their schedule by 40.0 ms" in w for w in a.warnings)
    assert a.knee.sentence.startswith("no level met TTFT ≤ 100 ms for 90% of its requests")


def test_queueing_from_the_servers_durations():
    reqs = [request(0, i, 50, 150, queue_ms=q) for i, q in enumerate((0, 100, 100, 200))]
    (lv,) = analyze_records(header(), level_records(0, 4, 1.0, reqs)).levels
    assert lv.queue_ms.p50 == pytest.approx(100.0)


def test_probe_verdict_names_the_findings():
    quiet = ProbeRecord.of({"verdict": {"quiet": True, "findings": []}})
    noisy = ProbeRecord.of({
        "verdict": {
            "quiet": False,
            "findings": [{"code": "app-busy", "level": "warn"}, {"code": "x", "level": "info"}],
        }
    })
    assert probe_verdict([]) == "no samples"
    assert probe_verdict([quiet]) == "QUIET"
    assert probe_verdict([quiet, noisy, noisy]) == "NOISY: app-busy"


def test_renderings_carry_the_table_and_the_knee():
    slo = Slo(ttft_ms=100)
    a = analyze_records(
        header(slo=slo), level_records(0, 1, 0.6, [request(0, i, 50, 150) for i in range(4)])
    )
    md = render_load(a, "md")
    assert "**Knee:** this engine serves 1 concurrent user within TTFT ≤ 100 ms." in md
    assert "| 1 user | 4/0 | 50.0 / n/a / n/a |" in md
    csv_text = render_load(a, "csv")
    assert csv_text.splitlines()[1].startswith("0,concurrency,1.0,4,4,0,0.6,")
    assert '"sentence": "this engine serves 1 concurrent user within TTFT' in render_load(a, "json")
    page = render_load(a, "html")  # the report and the throughput–latency curve, one page
    assert page.startswith("<!DOCTYPE html>") and "this engine serves 1 concurrent user" in page
    assert 'id="load-curve"' in page
    # the curve right after the levels' table, before the sections below it (new-user pass
    # N37: at the page's end, under the energy, it went unseen)
    assert page.index("1 user") < page.index('id="load-curve"') < page.index("<h2")
    with pytest.raises(ValueError):
        render_load(a, "xml")
