"""A watch log's report and comparison, grouped by caller and model (analysis/watch.py,
reports/watch.py, analysis/compare/logs.py), on a log written record by record with known
figures."""

from __future__ import annotations

import json

from llmtop.sessions.analysis.compare.logs import compare_logs
from llmtop.sessions.analysis.watch import analyze_watch
from llmtop.sessions.records.log import SessionLog, read_log
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.reports.formats import render


def write_log(path, requests):
    log = SessionLog(path, {"kind": "watch", "watch": {"pairs": [
        {"listen": "127.0.0.1:11435", "upstream": "http://127.0.0.1:11434"}]}})
    for i, (caller, model, ttft, cached, prompt, status) in enumerate(requests, 1):
        log.write(RequestRecord.from_json({
            "id": i, "status": status, "model": model, "caller": caller,
            "endpoint": "/v1/chat/completions",
            "stats": {"prompt_eval_count": prompt, "prompt_cached_count": cached,
                      "eval_count": 10},
            "metrics": {"ttft_ms": ttft, "e2e_ms": ttft + 100.0,
                        "client_decode_tps": 50.0},
            "probe_verdict": "NOISY" if i == 1 else "QUIET"}))
    log.close()
    return read_log(path)


REQUESTS = [("Open WebUI", "qwen3", 100.0, 300, 1000, "ok"),
            ("Open WebUI", "qwen3", 200.0, 700, 1000, "ok"),
            ("Open WebUI", "qwen3", 300.0, None, 1000, "ok"),
            ("VS Code", "qwen3", 50.0, 0, 400, "ok"),
            ("VS Code", "qwen3", 0.0, None, 400, "cancelled")]


def test_groups_by_caller_and_model_with_hand_computed_figures(tmp_path):
    a = analyze_watch(write_log(tmp_path / "a.jsonl", REQUESTS))
    webui, code = a.groups  # ordered by request count, most first
    assert (webui.caller, webui.requests, code.caller, code.requests) == (
        "Open WebUI", 3, "VS Code", 2)
    assert webui.ttft.median == 200.0  # median of 100, 200, 300
    # cached share over the requests that report it: (300 + 700) / (1000 + 1000) = 50 %
    assert webui.cached_pct == 50.0
    assert webui.noisy == 1
    assert code.statuses == {"ok": 1, "cancelled": 1} and code.ttft.median == 50.0
    assert code.cached_pct == 0.0  # 0 / 400 (the cancelled request has no cached count)
    md = render(a, "md")
    assert "| Open WebUI | qwen3 | 3 | 3 | 200.0 |" in md
    data = json.loads(render(a, "json"))
    assert [g["caller"] for g in data["groups"]] == ["Open WebUI", "VS Code"]
    assert render(a, "csv").splitlines()[0].startswith("caller,model,requests")


def test_html_page_has_the_table_and_a_figure(tmp_path):
    page = render(analyze_watch(write_log(tmp_path / "a.jsonl", REQUESTS)), "html")
    assert "Open WebUI" in page and "watch-ttft" in page


def test_compare_pairs_the_callers_both_logs_saw(tmp_path):
    a = write_log(tmp_path / "a.jsonl", [("App", "m", 100.0 + i, None, 10, "ok")
                                         for i in range(6)] + [("Old", "m", 5.0, None, 1, "ok")])
    b = write_log(tmp_path / "b.jsonl", [("App", "m", 200.0 + i, None, 10, "ok")
                                         for i in range(6)])
    result = compare_logs(a, b, ("a", "b"), ["ttft"])
    assert not result.refused
    assert [r.group for r in result.rows] == ["App · m"]
    assert any("left out A: Old · m" in w for w in result.checks.warnings)
    # medians 102.5 and 202.5: B/A = 1.976
    row = result.rows[0]
    assert round(row.test.ratio, 3) == round(202.5 / 102.5, 3)
    assert row.regression  # twice as slow, well past the threshold


def test_a_request_that_loaded_the_model_is_a_cold_start_out_of_the_figures(tmp_path):
    # second new-user pass P12: curl's two requests, the first paying a 457 ms load (TTFT
    # 482.09), the second warm (54.74): the group's TTFT p50 was 268.4, their mean, no mark
    log = SessionLog(tmp_path / "w.jsonl", {"kind": "watch", "watch": {"pairs": [
        {"listen": "127.0.0.1:11498", "upstream": "http://127.0.0.1:11437"}]}})
    for i, (ttft, load_ms) in enumerate([(482.09, 457.46), (54.74, 0.21)], 1):
        log.write(RequestRecord.from_json({
            "id": i, "status": "ok", "model": "gemma3:270m", "caller": "curl",
            "stats": {"load_duration": round(load_ms * 1e6), "eval_count": 10},
            "metrics": {"ttft_ms": ttft, "e2e_ms": ttft + 100.0}}))
    log.close()
    (g,) = analyze_watch(read_log(tmp_path / "w.jsonl")).groups
    # 457.46 ms: over 50 ms and over 10 × the other's 0.21 (run.cold_starts)
    assert g.statuses == {"cold-start": 1, "ok": 1}
    assert g.ttft.median == 54.74 and g.ttft.n == 1
