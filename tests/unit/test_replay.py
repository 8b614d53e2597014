"""`llmtop load --replay WATCH_LOG`: a watch log's requests sent again at their recorded
arrival gaps (or back to back) to the slotted server, each compared with its original."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta

import pytest

from llmtop.cli import main
from llmtop.exitcodes import ExitCode
from llmtop.sessions.analysis.catalog import entry
from llmtop.sessions.analysis.replay import ReplayError, read_trace
from llmtop.sessions.records.log import SessionLog, read_log
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.runners.replay import replay_options
from llmtop.testing.slotted import TEMPLATE_TOKENS, Service, SlottedUpstream

# irregular arrival gaps (ms) between 12 requests: 11 gaps, 1,000 ms in all
GAPS_MS = [40, 5, 120, 80, 15, 200, 60, 10, 250, 150, 70]
START = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def watch_log(path, bodies: bool = True) -> list[dict]:
    """A watch log of 12 ok /api/chat requests at START + the running sum of GAPS_MS, the
    k-th with a prompt of k + 3 words (the server counted words + 10) and 4 output tokens;
    one more request that failed (not replayed)."""
    log = SessionLog(path, {"kind": "watch", "via": "watch",
                            "watch": {"pairs": [], "bodies_logged": bodies}})
    rows, t = [], START
    for k in range(12):
        if k:
            t += timedelta(milliseconds=GAPS_MS[k - 1])
        prompt = "tell me " + "more " * (5 * k + 10)
        row = {"id": k + 1, "status": "ok", "prompt": prompt if bodies else "",
               "started_at": t.isoformat(), "endpoint": "/api/chat",
               "options": {"temperature": 0.5},
               "stats": {"prompt_eval_count": len(prompt.split()) + TEMPLATE_TOKENS,
                         "eval_count": 4, "prompt_eval_duration": 2_000_000,
                         "eval_duration": 9_000_000, "total_duration": 12_000_000},
               "metrics": {"ttft_ms": 50.0 + k, "e2e_ms": 80.0 + k,
                           "server_decode_tps": 300.0}}
        rows.append(row)
        log.write(RequestRecord.from_json(row))
    log.write(RequestRecord.from_json({"id": 13, "status": "error", "started_at": t.isoformat(),
                                       "endpoint": "/api/chat"}))
    log.close()
    return rows


def test_the_trace_keeps_the_ok_requests_and_their_gaps(tmp_path):
    watch_log(tmp_path / "w.jsonl")
    trace = read_trace(str(tmp_path / "w.jsonl"))
    assert [r.id for r in trace.originals] == list(range(1, 13))
    assert trace.left_out == 1 and trace.bodies
    gaps = [round((b - a) * 1000, 3) for a, b in itertools.pairwise(trace.offsets_s)]
    assert gaps == GAPS_MS  # started_at is µs: the gaps come back exact
    assert replay_options(trace.originals[0]) == {"temperature": 0.5, "num_predict": 4}


def test_a_log_that_is_not_a_watch_log_is_refused(tmp_path):
    log = SessionLog(tmp_path / "b.jsonl", {"kind": "bench"})
    log.close()
    with pytest.raises(ReplayError, match="needs a `llmtop watch` log"):
        read_trace(str(tmp_path / "b.jsonl"))


def openai_options():
    rec = RequestRecord.from_json({"id": 1, "status": "ok", "endpoint": "/v1/chat/completions",
                                   "options": {"max_tokens": 64, "temperature": 0.1, "n": 1}})
    return replay_options(rec)


def test_openai_fields_become_ollama_options():
    assert openai_options() == {"num_predict": 64, "temperature": 0.1}


@pytest.fixture(scope="module")
def slotted():
    with SlottedUpstream(Service(slots=4, prefill_s=0.002, tokens=6, gap_s=0.003)) as up:
        yield up


def replay(url: str, watch, log, *flags: str) -> int:
    return main(["load", "--engine", "ollama", "--host", url, "--model", "slotted",
                 "--replay", str(watch), "--log", str(log), "--json", *flags])


def test_open_loop_replay_reproduces_the_gaps_and_pairs_each_request(slotted, tmp_path,
                                                                       capsys):
    rows = watch_log(tmp_path / "w.jsonl")
    rc = replay(slotted.url, tmp_path / "w.jsonl", tmp_path / "r.jsonl", "--speed", "2")
    report = json.loads(capsys.readouterr().out)
    assert rc == ExitCode.OK
    assert [p["original"]["id"] for p in report["pairs"]] == list(range(1, 13))
    for pair, row in zip(report["pairs"], rows, strict=True):
        # the same prompt: the server counts the same words + template
        assert pair["replay"]["prompt_tokens"] == row["stats"]["prompt_eval_count"]
        assert pair["replay"]["output_tokens"] == 4  # num_predict = the original's 4
    run = read_log(tmp_path / "r.jsonl")
    measured = [r for r in run.requests if r.phase == "measure"]
    assert sorted(r.load.replay_of for r in measured) == list(range(1, 13))
    assert all(r.prompt == rows[r.load.replay_of - 1]["prompt"] for r in measured)
    assert run.header.load.replay["requests"] == 12
    # at speed 2 the recorded gaps are halved: the timetable is exact to the ns (each send is
    # held to it); how late each send left is measured (lag_ms, the report's arrival errors),
    # not asserted: on a busy shared machine a send can leave milliseconds late
    by_id = {r.load.replay_of: r for r in measured}
    scheduled = [by_id[k].load.scheduled_offset_ns for k in range(1, 13)]
    halves = [g * 1_000_000 // 2 for g in GAPS_MS]  # ns
    gaps = [b - a for a, b in itertools.pairwise(scheduled)]
    assert [abs(g - h) <= 1 for g, h in zip(gaps, halves, strict=True)] == [True] * 11
    errors = report["arrival_errors_ms"]
    sent = [by_id[k].load.sent_offset_ns for k in range(1, 13)]
    recorded = [sum(GAPS_MS[:k]) / 2 for k in range(12)]
    pairs = zip(sent, recorded, strict=True)
    assert errors == [round((s - sent[0]) / 1e6 - r, 4) for s, r in pairs]
    assert report["arrivals_over_limit"] == sum(abs(e) > 1.0 for e in errors)
    assert [m["metric"] for m in report["metrics"]] == ["ttft", "decode", "e2e"]


def test_back_to_back_without_bodies_sizes_prompts_to_the_counts(slotted, tmp_path, capsys):
    rows = watch_log(tmp_path / "w.jsonl", bodies=False)
    rc = replay(slotted.url, tmp_path / "w.jsonl", tmp_path / "r.jsonl", "--back-to-back")
    report = json.loads(capsys.readouterr().out)
    assert rc == ExitCode.OK
    assert report["max_arrival_error_ms"] is None and not report["trace"]["bodies"]
    assert report["arrivals_over_limit"] is None
    for pair, row in zip(report["pairs"], rows, strict=True):
        # one word a token (the slotted server): a calibrated prompt lands within a word
        assert abs(pair["replay"]["prompt_tokens"] - row["stats"]["prompt_eval_count"]) <= 1
    run = read_log(tmp_path / "r.jsonl")
    measured = sorted((r for r in run.requests if r.phase == "measure"), key=lambda r: r.id)
    for a, b in itertools.pairwise(measured):  # one at a time: each after the last ended
        assert b.load.sent_offset_ns >= a.load.sent_offset_ns + a.metrics.e2e_ms * 1e6 * 0.99


def test_report_on_a_replay_log_shows_each_request_against_its_original(slotted, tmp_path,
                                                                        capsys):
    rows = watch_log(tmp_path / "w.jsonl")
    assert replay(slotted.url, tmp_path / "w.jsonl", tmp_path / "r.jsonl") == ExitCode.OK
    live = json.loads(capsys.readouterr().out)
    assert main(["report", str(tmp_path / "r.jsonl"), "--format", "json"]) == ExitCode.OK
    again = json.loads(capsys.readouterr().out)
    # the same pairs as the replay printed: read back from the replay's log and the watch log
    assert again["replay"]["pairs"] == live["pairs"]
    assert [p["original"]["id"] for p in again["replay"]["pairs"]] == [r["id"] for r in rows]
    assert again["sweep"]["levels"][0]["ok"] == 12  # the one level: the 12 replayed requests
    assert main(["report", str(tmp_path / "r.jsonl")]) == ExitCode.OK
    text = capsys.readouterr().out
    assert f"## Replay of {tmp_path / 'w.jsonl'}" in text and "TTFT ms A → B" in text
    # described as the replay it was: 12 requests over GAPS_MS's 1,000 ms, 11 gaps → a
    # recorded mean of 11 req/s; each capped at its original's 4 output tokens; no knee
    assert (f"replay of the watch log {tmp_path / 'w.jsonl'}: its 12 ok requests (1 others "
            "not), sent once at the recorded arrival gaps / 1 (open loop, latencies from the "
            "scheduled send; the recorded mean rate 11 req/s; achieved: the req/s column); "
            "prompts their recorded text; each request's output capped at its original's "
            "output token count") in text
    assert "poisson" not in text and "max 100 output tokens" not in text
    assert "Knee" not in text and "sweep higher" not in text and again["sweep"]["knee"] is None
    assert "| replay (recorded gaps / 1) | 12/0 |" in text and "11 req/s |" not in text
    assert "\n\n## Replay of" in text  # the comparison's section set apart from the table
    listed = entry(tmp_path / "r.jsonl")  # the session list names the replayed log
    assert listed.traffic == "replay of w.jsonl" and listed.cells()[3] == "load · replay of w.jsonl"
    assert main(["report", str(tmp_path / "r.jsonl"), "--format", "html",
                 "--out", str(tmp_path / "r.html")]) == ExitCode.OK
    assert "Replay of" in (tmp_path / "r.html").read_text()
    (tmp_path / "w.jsonl").unlink()  # the watch log gone: said, naming it
    assert main(["report", str(tmp_path / "r.jsonl")]) == ExitCode.USAGE
    assert "the replayed watch log cannot be read" in capsys.readouterr().err


def test_the_replay_prints_its_comparison_from_the_first_line(slotted, tmp_path, capsys):
    watch_log(tmp_path / "w.jsonl")
    rc = main(["load", "--engine", "ollama", "--host", slotted.url, "--model", "slotted",
               "--replay", str(tmp_path / "w.jsonl"), "--log", str(tmp_path / "r.jsonl"),
               "--back-to-back"])
    out, err = capsys.readouterr()
    assert rc == ExitCode.OK
    assert out.startswith(f"## Replay of {tmp_path / 'w.jsonl'}\n")
    # the level named by its pace, as the report names it; not "1 user"
    assert "llmtop load: replay (back to back): 12 requests" in err
    assert "llmtop load: replay (back to back): ok/failed 12/0" in err and "1 user" not in err


@pytest.mark.parametrize(("flags", "named"), [
    (["--concurrency", "2"], "--concurrency"),
    (["--rate", "3"], "--rate"),
    (["--requests", "5", "--slo", "ttft=1s"], "--requests, --slo"),
    (["--arrivals", "constant", "--search"], "--arrivals, --search"),
    (["--temperature", "0.7", "--num-ctx", "4096"], "--temperature, --num-ctx"),
])
def test_sweep_flags_a_replay_cannot_honour_are_refused(tmp_path, capsys, flags, named):
    watch_log(tmp_path / "w.jsonl")
    rc = main(["load", "--replay", str(tmp_path / "w.jsonl"), *flags])
    assert rc == ExitCode.USAGE  # refused before any engine is looked for
    err = capsys.readouterr().err
    assert f": {named} cannot apply to it" in err


def test_the_report_counts_the_sends_off_by_more_than_a_millisecond(tmp_path):
    # errors of 0.2, -1.5 and 3.0 ms after the first send's 0: two are over 1 ms, the largest
    # |error| is 3.0
    from llmtop.sessions.analysis.replay import ReplayComparison
    from llmtop.sessions.reports.replay import as_json, markdown
    watch_log(tmp_path / "w.jsonl")
    trace = read_trace(str(tmp_path / "w.jsonl"))
    late = ReplayComparison(trace, (), (), (0.0, 0.2, -1.5, 3.0))
    text = markdown(late)
    assert "within 3.000 ms" in text and "2 of 4 sends more than 1 ms off" in text
    assert "lag_ms says which" in text
    assert as_json(late)["arrivals_over_limit"] == 2
    near = ReplayComparison(trace, (), (), (0.0, 0.2, -0.9))
    assert "0 of 3 sends more than 1 ms off." in markdown(near)
    assert "lag_ms" not in markdown(near)
