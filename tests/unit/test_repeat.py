"""Repeatability across bench runs (analysis/repeat.py, `bench --runs K`)."""

from __future__ import annotations

import pytest

from llmtop.commands.bench import run_log
from llmtop.sessions.analysis.repeat import repeatability, spread
from llmtop.sessions.analysis.run import analyze
from llmtop.sessions.reports.run_markdown import repeat_markdown
from tests.unit.test_analysis_report import record


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


def test_the_report_gets_the_runs_section_or_key():
    import json

    from llmtop.commands.bench import with_repeatability

    spreads = repeatability([flat_run(21.9), flat_run(22.0)])
    data = json.loads(with_repeatability('{"verdict": "clean"}', "json", spreads, ["a", "b"]))
    assert data["verdict"] == "clean" and data["repeatability"]["logs"] == ["a", "b"]
    assert data["repeatability"]["sizes"][0]["spreads"][1]["medians"] == [21.9, 22.0]
    md = with_repeatability("# report\n", "md", spreads, ["a", "b"])
    assert md.startswith("# report\n") and "## Repeatability across 2 runs" in md
