"""A TUI session's report sums up the engine's own figures its engine panel logged
(analysis/engine_own.py): the most requests the engine ran and queued, its KV cache's use
from least to most, and its own decode rate beside llmtop's, judged by the panel's rule."""

from __future__ import annotations

import json

from llmtop.sessions.records.log import SessionLog, read_log
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import EngineStateRecord
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build

URL = "http://127.0.0.1:8080"
# (processing, waiting, kv_pct, decode_tok_s) of four readings
READINGS = [(0, 0, 0.9, None), (2, 1, 9.6, 50.0), (4, 1, 24.5, 40.0), (1, 0, 12.0, 60.0)]


def session(path, client_tps: list[float]) -> None:
    log = SessionLog(path, {"kind": "session", "via": "direct"})
    for k, tps in enumerate(client_tps, start=1):
        log.write(RequestRecord.from_json({
            "id": k, "status": "ok", "prompt": "p", "started_at": "2026-12-06T18:00:00+00:00",
            "metrics": {"ttft_ms": 100.0, "e2e_ms": 500.0, "tpot_ms": 1000.0 / tps,
                        "client_decode_tps": tps}}))
    for t, (running, queued, kv, decode) in enumerate(READINGS):
        log.write(EngineStateRecord.of({
            "kind": "llama-server", "url": URL, "t_ns": t, "processing": running,
            "waiting": queued, "kv_pct": kv, "decode_tok_s": decode, "request_id": None}))
    log.close()


def test_the_report_has_the_engines_own_view_and_the_two_decode_rates(tmp_path):
    session(tmp_path / "s.jsonl", [48.0, 52.0, 30.0])
    view = build(read_log(tmp_path / "s.jsonl")).engine_own
    assert view is not None and view.readings == 4
    assert (view.processing_max, view.waiting_max, view.kv_pct) == (4, 1, (0.9, 24.5))
    # medians: the engine's of 50, 40, 60 is 50; llmtop's of 48, 52, 30 is 48: -4 %, agree
    assert (view.engine_decode, view.client_decode, view.disagreement) == (50.0, 48.0, None)
    text = render(build(read_log(tmp_path / "s.jsonl")), "md")
    assert "## The engine's own view" in text and "0.9 → 24.5 %" in text
    assert "the engine's own 50 tok/s, llmtop's 48 tok/s — they agree" in text
    data = json.loads(render(build(read_log(tmp_path / "s.jsonl")), "json"))
    assert data["engine_own"]["kv_pct"] == [0.9, 24.5]


def test_a_decode_rate_apart_by_more_than_15_percent_is_said(tmp_path):
    # llmtop's median 30 against the engine's 50: -40 %, past the panel's 15 %
    session(tmp_path / "s.jsonl", [30.0, 28.0, 35.0])
    view = build(read_log(tmp_path / "s.jsonl")).engine_own
    assert view is not None and view.disagreement is not None and "-40 %" in view.disagreement


def test_a_session_without_the_panel_has_no_section(tmp_path):
    log = SessionLog(tmp_path / "s.jsonl", {"kind": "session", "via": "direct"})
    log.close()
    report = build(read_log(tmp_path / "s.jsonl"))
    assert report.engine_own is None
    assert "engine's own view" not in render(report, "md")
