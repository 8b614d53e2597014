"""A sweep's one verdict (analysis/load_verdict.py): the same word and the same knee in the
markdown and JSON reports, the TUI's finished lines and the sessions list; `llmtop load`
exits 1 on it (tests/integration/test_load_embedded.py)."""

from __future__ import annotations

import json
from pathlib import Path

from llmtop.sessions.analysis.catalog import entry
from llmtop.sessions.measure.slo import Slo
from llmtop.sessions.reports.formats import render as render_load
from llmtop.tui.state.load_view import finished_text
from tests.unit.test_load_analysis import analyze_records, header, level_records, request


def probe(level: int, *codes: str) -> dict:
    """A probe sample inside `level`: QUIET without codes, else NOISY with a WARN per code."""
    findings = [{"code": c, "level": "warn"} for c in codes]
    return {"type": "probe", "level": level, "verdict": {"quiet": not codes,
                                                         "findings": findings}}


def sweep(probes_0: list[dict], probes_1: list[dict]) -> list[dict]:
    """Two levels (1 and 2 users) whose 4 requests all meet TTFT ≤ 100 ms: the knee is 2
    users (the highest level with a goodput share ≥ 90 %)."""
    one = [request(0, i, 50, 150) for i in range(4)]
    two = [request(1, i, 60, 160) for i in range(4)]
    return [*level_records(0, 1, 0.6, one), *probes_0, *level_records(1, 2, 0.5, two),
            *probes_1]


SLO = Slo(ttft_ms=100)


def test_a_noisy_level_makes_the_sweep_contaminated_and_its_knee_untrusted():
    a = analyze_records(header(slo=SLO), sweep([probe(0)], [probe(1), probe(1, "cpu-steal")]))
    assert a.knee.level is a.levels[1]  # the knee is still found: the figures are kept
    v = a.verdict
    assert v.contaminated and v.reasons == ("2 users: NOISY: cpu-steal",)
    md = render_load(a, "md")
    assert "**Verdict:** CONTAMINATED — 2 users: NOISY: cpu-steal" in md
    assert ("**Knee (not trusted: a level ran NOISY; re-run on a quiet machine):** this "
            "engine serves 2 concurrent users within TTFT ≤ 100 ms.") in md
    doc = json.loads(render_load(a, "json"))
    assert doc["verdict"] == {"word": "contaminated", "reasons": ["2 users: NOISY: cpu-steal"]}
    assert doc["knee"]["trusted"] is False and doc["knee"]["value"] == 2
    lines = finished_text(a, "/x/load.jsonl").plain.splitlines()
    knee = ("Knee (not trusted: a level ran NOISY; re-run on a quiet machine): this engine "
            "serves 2 concurrent users within TTFT ≤ 100 ms.")
    assert lines == ["Verdict: CONTAMINATED — 2 users: NOISY: cpu-steal", knee,
                     "log /x/load.jsonl"]


def test_quiet_levels_are_clean_and_a_sweep_without_samples_inconclusive():
    clean = analyze_records(header(slo=SLO), sweep([probe(0)], []))  # level 2: no sample
    assert clean.verdict.label == "CLEAN" and not clean.verdict.reasons
    assert "**Verdict:** CLEAN\n" in render_load(clean, "md")
    assert "**Knee:** this engine serves 2 concurrent users" in render_load(clean, "md")
    unsampled = analyze_records(header(slo=SLO), sweep([], []))
    assert unsampled.verdict.label == "INCONCLUSIVE"
    assert "no probe sample in any level" in unsampled.verdict.reasons[0]
    assert json.loads(render_load(unsampled, "json"))["knee"]["trusted"] is True


def test_the_sessions_list_gives_the_sweeps_verdict(tmp_path: Path):
    # bench's rules read a sweep's 8 requests as a clean run (no drift, no episode); the
    # list must say what the sweep's own report says
    path = tmp_path / "load.jsonl"
    records = [header(slo=SLO), *sweep([probe(0, "background-cpu")], [probe(1, "app-busy")])]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    e = entry(path)
    assert e.verdict == "contaminated: 1 user, 2 users NOISY"
    # the level-tagged samples are counted: 2, both NOISY (second pass P5 read [0, 0])
    assert e.noisy is True and e.probe_samples == (2, 2)
    assert e.requests_text == "8: 8 ok"
    assert e.cells()[5] == "contaminated: 1 user, 2 users NOISY"
