"""Repeatability across bench runs (analysis/repeat.py, `bench --runs K`)."""

from __future__ import annotations

import pytest

from llmtop.commands.bench import run_log
from llmtop.sessions.analysis.repeat import repeatability, spread
from llmtop.sessions.analysis.run import analyze
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import Repeatability, build
from llmtop.sessions.reports.run_markdown import repeat_markdown
from tests.unit.test_analysis_report import bench_log as bench_log_fixture
from tests.unit.test_analysis_report import record

bench_log = bench_log_fixture  # the contaminated run's log, read back


def flat_run(decode: float):
    return analyze([record(i, decode) for i in range(25)], {200: 198}, required=25)


def test_three_runs_one_disagrees():
    spreads = repeatability([flat_run(21.9), flat_run(22.0), flat_run(25.0)])
    (size,) = spreads
    assert size.target == 200
    decode = next(s for s in size.spreads if s.key == "server_decode_tps")
    assert decode.medians == (21.9, 22.0, 25.0)
    # centre 22.0; MAD median(0.1, 0, 3.0) = 0.1 → 2 × 1.4826 × 0.1 = 0.30, under 5 % of 22.0
    # = 1.1: the limit is 1.1, and only run 3 (3.0 away) is beyond it
    assert decode.centre == 22.0 and decode.disagree == (3,)
    assert decode.range_pct == pytest.approx((25.0 - 21.9) / 22.0 * 100)
    # mean 22.967, s = 1.7616, s / √3 = 1.0171, t(0.975, 2) = 4.3027 → ± 4.376
    assert decode.ci == pytest.approx((18.590, 27.343), abs=0.005)
    ttft = next(s for s in size.spreads if s.key == "ttft_ms")
    assert ttft.medians == (813.9,) * 3 and ttft.disagree == () and ttft.ci == (813.9, 813.9)
    md = "\n".join(repeat_markdown(spreads, ["a.jsonl", "b.jsonl", "c.jsonl"]))
    assert "## Repeatability across 3 runs" in md and "| run 3 |" in md


def test_agreeing_runs_and_odd_input():
    s = spread("x", "x", "ms", [100.0, 102.0, 99.0, None], 5.0)
    assert s.disagree == () and s.centre == 100.0
    assert spread("x", "x", "ms", [None, None], 5.0).centre is None
    with pytest.raises(ValueError, match="at least one run"):
        repeatability([])


def test_each_run_has_its_own_log():
    assert run_log("b.jsonl", 0, 1) == "b.jsonl"
    assert run_log("out/b.jsonl", 1, 3) == "out/b-run2.jsonl"
    assert run_log(None, 2, 3) is None


def test_the_report_carries_the_runs_repeatability(bench_log):
    """The runs' spread is a field of the report: the markdown's last section, the JSON's
    last key, a section of the HTML page; the rest of the report is as for one run."""
    import json

    spreads = repeatability([flat_run(21.9), flat_run(22.0)])
    one = build(bench_log)
    runs = build(bench_log, one.analysis, Repeatability(spreads, ["a", "b"]))
    data = json.loads(render(runs, "json"))
    assert list(data)[-1] == "repeatability" and data["repeatability"]["logs"] == ["a", "b"]
    assert data["repeatability"]["sizes"][0]["spreads"][1]["medians"] == [21.9, 22.0]
    assert {k: v for k, v in data.items() if k != "repeatability"} == json.loads(
        render(one, "json"))
    section = "\n".join(repeat_markdown(spreads, ["a", "b"])) + "\n"
    assert render(runs, "md") == render(one, "md") + section
    assert "## Repeatability across 2 runs" in section
    assert "Repeatability across 2 runs" in render(runs, "html")


def canary_run(ttft: float, cpu_ms: float, mem_ms: float = 2.5):
    from llmtop.sessions.records.schema import CanaryRecord

    recs = [record(i, 21.9, ttft=ttft) for i in range(25)]
    canaries = [CanaryRecord.from_json({"type": "canary", "cpu_ms": cpu_ms, "mem_ms": mem_ms,
                                        "simd_ms": 4.2, "before_request": r.id, "repeats": 3,
                                        "threads": 2, "t_ns": 0}) for r in recs]
    return analyze(recs, {200: 198}, canaries=canaries, required=25)


def test_a_spread_that_follows_the_canary_is_the_machines():
    from llmtop.sessions.analysis.repeat import MIN_TRACK_RUNS, tracking

    # 6 runs: TTFT 800, 810, …, 850 ms while the canary's CPU loop took 10, 11, …, 15 ms:
    # the same order, Spearman ρ = +1 (p = 0: a perfect rank agreement)
    runs = [canary_run(800.0 + 10 * k, 10.0 + k) for k in range(6)]
    (size,) = repeatability(runs)
    ttft = next(s for s in size.spreads if s.key == "ttft_ms")
    assert ttft.machine is not None
    assert ttft.machine.part == "the canary's CPU loop"
    assert ttft.machine.medians == (10.0, 11.0, 12.0, 13.0, 14.0, 15.0)
    assert ttft.machine.rho == pytest.approx(1.0) and ttft.machine.p < 0.001
    decode = next(s for s in size.spreads if s.key == "server_decode_tps")
    assert decode.machine is None  # the same 21.9 in every run: nothing to follow
    md = "\n".join(repeat_markdown([size], [f"r{k}" for k in range(6)]))
    assert ("- 200 tok, TTFT: the runs' spread follows the machine: the canary's CPU loop "
            "(10.00–15.00 ms over the runs) moved with it (Spearman ρ +1.00, p < 0.001)") in md
    # a faster canary beside slower runs is no explanation (ρ = −1 for a time), and a rate
    # needs ρ < 0 (a slower machine lowers it)
    assert tracking([1, 2, 3, 4, 5], [5, 4, 3, 2, 1], higher_is_better=False) is None
    rho, _p = tracking([5, 4, 3, 2, 1], [1, 2, 3, 4, 5], higher_is_better=True)
    assert rho == pytest.approx(-1.0)
    # fewer runs than MIN_TRACK_RUNS (5) with both figures: not judged
    assert MIN_TRACK_RUNS == 5
    assert tracking([1, 2, 3, 4, None], [1, 2, 3, 4, 5], higher_is_better=False) is None
