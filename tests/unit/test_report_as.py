"""`llmtop report LOG --as TOOL`: one scripted request with known chunk times, recomputed in
each tool's definitions (analysis/peers.py), every expected value worked out by hand.

The request (ms from the send): a role-only chunk at 40 (no text, as llama-cpp-python and
vLLM send first), text chunks "a" 50, "b" 60, "c" 80, "d" 90, the done chunk at 95, with the
server's count n = 4 output tokens and its own figures prompt eval 30 ms, eval 36 ms.
"""

from __future__ import annotations

import json

import pytest

from llmtop.cli import main
from llmtop.engines.events import ServerStats, StreamEvent
from llmtop.exitcodes import ExitCode
from llmtop.sessions.analysis.peers import as_aiperf, as_guidellm, as_llama_server, as_vllm
from llmtop.sessions.measure.request import RequestCollector
from llmtop.sessions.records.log import SessionLog
from llmtop.sessions.records.request import RequestRecord

MS = 1_000_000
SENT = 1_000 * MS  # any clock origin: offsets are what count


def scripted_record() -> RequestRecord:
    collector = RequestCollector(prompt="p", options={}, model="m", sent_ns=SENT)
    stats = ServerStats(prompt_eval_count=12, prompt_eval_duration=30 * MS, eval_count=4,
                        eval_duration=36 * MS, done_reason="stop", total_duration=70 * MS)
    for t_ms, text in ((40, ""), (50, "a"), (60, "b"), (80, "c"), (90, "d")):
        collector.add(StreamEvent(SENT + t_ms * MS, text))
    collector.add(StreamEvent(SENT + 95 * MS, done=True, stats=stats))
    return RequestRecord.of(collector.finish(), phase="measure", index=0)


def test_llmtop_own_figures_are_the_baseline():
    m = scripted_record().metrics
    # TTFT: first text chunk 50; E2E: done 95; TPOT (95 − 50) / (4 − 1) = 15; ITL gaps
    # between text chunks 10, 20, 10.
    assert (m.ttft_ms, m.e2e_ms, m.tpot_ms) == (50.0, 95.0, 15.0)
    assert m.itl_ms == (10.0, 20.0, 10.0)


def test_each_tool_recomputed_by_hand():
    r = scripted_record()
    # vLLM: TTFT at the first chunk with choices, the role-only one: 40; ITL over all chunk
    # gaps 10, 10, 20, 10 → mean 12.5; latency to the last chunk 90; TPOT (90 − 40) / 3.
    v = as_vllm(r)
    assert (v.ttft_ms, v.itl_ms, v.e2e_ms) == (40.0, 12.5, 90.0)
    assert v.tpot_ms == pytest.approx(50 / 3)
    # AIPerf: TTFT at the first content 50; latency to the final response 95; ITL (its TPOT)
    # (95 − 50) / 3 = 15.
    a = as_aiperf(r)
    assert (a.ttft_ms, a.itl_ms, a.tpot_ms, a.e2e_ms) == (50.0, 15.0, 15.0, 95.0)
    # GuideLLM 0.8: first token 50, last 90: TPOT from the send, 90 / 4 = 22.5 (TTFT
    # included), ITL (90 − 50) / 3 = 13.33.
    g = as_guidellm(r)
    assert (g.ttft_ms, g.tpot_ms, g.e2e_ms) == (50.0, 22.5, 95.0)
    assert g.itl_ms == pytest.approx(40 / 3)
    # llama-server timings: prompt_ms 30; predicted_ms / predicted_n = 36 / 4 = 9.
    s = as_llama_server(r)
    assert (s.ttft_ms, s.tpot_ms, s.e2e_ms) == (30.0, 9.0, 66.0)


def _log(tmp_path):
    path = tmp_path / "run.jsonl"
    log = SessionLog(str(path), {"kind": "bench", "engine": "scripted", "model": "m"})
    log.write(scripted_record())
    log.close()
    return path


def test_report_as_vllm_markdown_and_json(tmp_path, capsys):
    path = _log(tmp_path)
    assert main(["report", str(path), "--as", "vllm"]) == ExitCode.OK
    md = capsys.readouterr().out
    assert f"# {path} as vllm would report it" in md
    # TTFT 40 against llmtop's 50: −10 ms (−20 %)
    assert ("| TTFT | 40.00 | 40.00 | 50.00 | -10.00 (-20.0%) | send → first chunk with "
            "`choices` (the role-only chunk counts) |") in md
    assert main(["report", str(path), "--as", "guidellm", "--format", "json"]) == ExitCode.OK
    data = json.loads(capsys.readouterr().out)
    assert (data["n"], data["as"]["median"]["tpot_ms"], data["llmtop"]["median"]["tpot_ms"]) \
        == (1, 22.5, 15.0)


def test_report_as_refuses_csv_with_a_clear_error(tmp_path, capsys):
    path = _log(tmp_path)
    assert main(["report", str(path), "--as", "aiperf", "--format", "csv"]) == ExitCode.USAGE
    assert "--as renders md or json, not csv" in capsys.readouterr().err


def test_report_as_carries_the_runs_verdict_and_noise(tmp_path, capsys):
    # new-user pass N16: a CONTAMINATED run's --as guidellm output had no word of its noise,
    # nor the CSV a column for it
    import csv
    import io
    import random

    from tests.unit.compare_logs import lognormal, write_log

    rng = random.Random(3)
    # measured requests have ids 2-21 (compare_logs.write_log): 2-9 NOISY, 8 of 20 samples
    probes = [{"request_id": i, "verdict": {"quiet": i >= 10}} for i in range(2, 22)]
    path = write_log(tmp_path / "b.jsonl", lognormal(rng, 500, 20), probes=probes)
    assert main(["report", str(path), "--as", "guidellm"]) == ExitCode.OK
    md = capsys.readouterr().out
    assert ("**Verdict: CONTAMINATED** — the probes found the machine NOISY during 8 of the 20 "
            "measured requests; NOISY in 8 of 20 probe samples during its requests") in md
    assert main(["report", str(path), "--as", "vllm", "--format", "json"]) == ExitCode.OK
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert (verdict["word"], verdict["noisy_samples"], verdict["samples"]) == (
        "contaminated", 8, 20)
    assert main(["report", str(path), "--format", "csv"]) == ExitCode.OK
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    measured = [r for r in rows if r["phase"] == "measure"]
    assert [r["noisy"] for r in measured] == ["True"] * 8 + ["False"] * 12


def test_report_as_gives_each_prompt_size_its_own_table(tmp_path, capsys):
    # second new-user pass P3: two sizes pooled into one p50 (417 ms, a value neither size
    # has: 213 ms at 100 tokens, 621 ms at 300)
    from llmtop.sessions.records.log import SessionLog
    from tests.unit.compare_logs import HEADER, request

    log = SessionLog(tmp_path / "b.jsonl", HEADER)
    for i, (ttft, target) in enumerate([(210.0, 100), (213.0, 100), (216.0, 100),
                                        (618.0, 300), (621.0, 300), (624.0, 300)], start=1):
        log.write_raw(request(i, ttft, 20.0, target))
    log.close()
    assert main(["report", str(tmp_path / "b.jsonl"), "--as", "guidellm"]) == ExitCode.OK
    md = capsys.readouterr().out
    assert "## 100 tok (3 ok)" in md and "## 300 tok (3 ok)" in md
    # llmtop's TTFT p50 per size: the middle of each three (213.00, 621.00)
    small, large = md.split("## 300 tok")
    assert "| TTFT |" in small and "213.00" in small.split("| TTFT |")[1].split("\n")[0]
    assert "621.00" in large.split("| TTFT |")[1].split("\n")[0]
    assert main(["report", str(tmp_path / "b.jsonl"), "--as", "vllm", "--format", "json"]) == (
        ExitCode.OK)
    sizes = json.loads(capsys.readouterr().out)["sizes"]
    assert [(s["prompt_tokens_target"], s["n"], s["llmtop"]["median"]["ttft_ms"])
            for s in sizes] == [(100, 3, 213.0), (300, 3, 621.0)]


def test_report_as_counts_the_requests_the_report_counts(tmp_path, capsys):
    # second new-user pass P3: --as counted a "cached" request the report leaves out
    from llmtop.sessions.records.log import SessionLog
    from tests.unit.compare_logs import HEADER, request

    log = SessionLog(tmp_path / "b.jsonl", HEADER)
    for i in range(1, 5):
        rec = request(i, 800.0, 20.0, 200)
        if i == 4:  # prefill 10 ms for 195 tokens against 796.1: under 25 %: cached
            rec["stats"]["prompt_eval_duration"] = 10 * 1_000_000
        log.write_raw(rec)
    log.close()
    assert main(["report", str(tmp_path / "b.jsonl"), "--as", "aiperf", "--format",
                 "json"]) == ExitCode.OK
    assert json.loads(capsys.readouterr().out)["n"] == 3
