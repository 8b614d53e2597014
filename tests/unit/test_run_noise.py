"""`llmtop run` never hides noise (newcomer row 3): what the probes saw during the request,
read back from its log, in the text and the JSON."""

from __future__ import annotations

from llmtop.commands.run import noise_lines, request_noise
from llmtop.sessions.records.log import SessionLog
from tests.unit.compare_logs import HEADER

FAIL = {"code": "background-cpu", "level": "fail", "message": "other programs are using 71 % "
        "of the machine's CPU", "remedy": "close the busiest applications before measuring "
        "(hog 200 % of one core)"}
WARN = {"code": "background-cpu", "level": "warn", "message": "other programs are using 30 %",
        "remedy": "close them"}
SWAP = {"code": "swap", "level": "warn", "message": "the machine is swapping", "remedy": "free"}


def test_the_requests_noisy_samples_and_their_findings(tmp_path):
    path = tmp_path / "run.jsonl"
    log = SessionLog(path, {**HEADER, "kind": "session"})
    samples = [
        (None, {"quiet": False, "findings": [SWAP]}),  # between requests: not counted
        (1, {"quiet": False, "findings": [WARN]}),
        (1, {"quiet": False, "findings": [FAIL, SWAP]}),
        (1, {"quiet": True, "findings": []}),
        (2, {"quiet": False, "findings": [SWAP]}),  # another request
    ]
    for request_id, verdict in samples:
        log.write_raw({"type": "probe", "request_id": request_id, "verdict": verdict})
    log.close()
    noisy, total, findings = request_noise(str(path), 1)
    # request 1: 3 samples, 2 NOISY; background-cpu once at its worst (FAIL), then swap
    assert (noisy, total) == (2, 3)
    assert [(f.code, f.level) for f in findings] == [("background-cpu", "fail"), ("swap", "warn")]
    lines = noise_lines(noisy, total, findings)
    assert lines[0].startswith("⚠ machine NOISY during this request (2 of 3 probe samples)")
    assert lines[1] == ("  FAIL other programs are using 71 % of the machine's CPU — close the "
                        "busiest applications before measuring (hog 200 % of one core)")


def test_a_quiet_request_says_nothing_more(tmp_path):
    path = tmp_path / "run.jsonl"
    log = SessionLog(path, {**HEADER, "kind": "session"})
    log.write_raw({"type": "probe", "request_id": 1, "verdict": {"quiet": True, "findings": []}})
    log.close()
    assert request_noise(str(path), 1) == (0, 1, [])
    assert noise_lines(0, 1, []) == []


def test_a_run_stopped_by_ctrl_c_says_what_arrived():
    # new-user pass N29: Ctrl+C printed the text so far and "stopped by SIGINT", no figure
    from llmtop.commands.run import cancelled_line
    from llmtop.engines.events import StreamEvent
    from llmtop.sessions.measure.request import RequestCollector

    ms = 1_000_000
    c = RequestCollector(prompt="p", options={}, model="m", sent_ns=1000 * ms)
    for t in (85, 185, 285, 385, 485):  # 5 chunks, 100 ms apart, the first at 85 ms
        c.add(StreamEvent(1000 * ms + t * ms, "w"))
    # (5 − 1) chunks / 0.4 s = 10.0 chunk/s
    assert cancelled_line(c.finish(cancelled=True)) == (
        "cancelled after 5 chunks: TTFT 85.0 ms · 10.0 chunk/s over 0.4 s (the client's "
        "chunks; no server counts)")
    empty = RequestCollector(prompt="p", options={}, model="m", sent_ns=0)
    assert cancelled_line(empty.finish(cancelled=True)) == (
        "cancelled before the first chunk: no figure")
