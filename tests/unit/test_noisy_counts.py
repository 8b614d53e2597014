"""The report's "Was the machine quiet?" counts samples, not findings, and labels each
finding by its level (analysis/machine.py, `noisy_findings`)."""

from __future__ import annotations

from llmtop.sessions.analysis.machine import NoisyFinding, noisy_findings
from llmtop.sessions.records.log import read_log
from llmtop.sessions.records.schema import ProbeRecord
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from tests.unit.compare_logs import write_log

APP_WARN = {"code": "app-busy", "level": "warn", "message": "(a neighbour's script) is using 32 %"}
APP_WARN2 = {"code": "app-busy", "level": "warn", "message": "chromium is using 41 %"}
APP_FAIL = {"code": "app-busy", "level": "fail", "message": "chromium is using 130 %"}
BG_WARN = {"code": "background-cpu", "level": "warn", "message": "other programs: 33 %"}
BG_FAIL = {"code": "background-cpu", "level": "fail", "message": "other programs: 62 %"}


def sample(rid: int, findings: list[dict], quiet: bool = False) -> dict:
    return {"request_id": rid, "verdict": {"quiet": quiet, "findings": findings},
            "processes": {"warming_up": False, "apps": []}}


SAMPLES = [
    sample(1, [APP_WARN, APP_WARN2, BG_WARN]),  # two busy apps in one sample: counts once
    sample(2, [APP_WARN, APP_WARN2]),
    sample(3, [APP_WARN, APP_FAIL, BG_FAIL]),  # app-busy at FAIL here
    sample(4, [BG_WARN]),
    sample(5, [APP_WARN], quiet=True),  # a QUIET sample's findings do not count
]


def test_findings_are_counted_in_samples_and_split_by_level():
    found = noisy_findings(ProbeRecord.from_json({"type": "probe", **s}) for s in SAMPLES)
    # app-busy: samples 1, 2, 3 (five findings) = 3 of the 4 NOISY, FAIL in 3, WARN in 1, 2;
    # background-cpu: samples 1, 3, 4 = 3, FAIL in 3; the message is the worst level's
    assert found == [
        NoisyFinding("app-busy", "fail", "chromium is using 130 %", 3, 1, 2),
        NoisyFinding("background-cpu", "fail", "other programs: 62 %", 3, 1, 2),
    ]
    warn_only = noisy_findings(ProbeRecord.from_json({"type": "probe", **s})
                               for s in SAMPLES[:2])
    # samples 1 and 2 only: app-busy a warn in both (its latest message: sample 2's second)
    assert warn_only == [
        NoisyFinding("app-busy", "warn", "chromium is using 41 %", 2, 0, 2),
        NoisyFinding("background-cpu", "warn", "other programs: 33 %", 1, 0, 1),
    ]


def test_the_report_never_counts_more_than_the_noisy_samples(tmp_path):
    log = write_log(tmp_path / "b.jsonl", [100.0] * 5, probes=SAMPLES)
    md = render(build(read_log(log)), "md")
    assert "During the requests: 4 of 5 probe samples found the machine NOISY" in md
    assert "- FAIL app-busy in 3 of them (1 FAIL, 2 WARN): chromium is using 130 %" in md
    assert "- FAIL background-cpu in 3 of them (1 FAIL, 2 WARN): other programs: 62 %" in md
    only_warns = write_log(tmp_path / "w.jsonl", [100.0] * 5, probes=SAMPLES[:2])
    md = render(build(read_log(only_warns)), "md")
    assert "- WARN app-busy in 2 of them: chromium is using 41 %" in md
