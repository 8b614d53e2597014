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
