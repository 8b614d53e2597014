"""Bench analysis and reports from log records alone, with the source's numbers."""

import csv
import io
import json
from dataclasses import replace

import pytest

from llmtop.engines.events import Status
from llmtop.sessions.analysis.run import BenchStatus, analyze, analyze_run, first_pass_status
from llmtop.sessions.records.log import SessionLog, read_log
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import Report, build
from llmtop.sessions.reports.text import md_table
from tests.unit.test_stats import CONTAMINATED

MS = 1_000_000


def record_json(
    index,
    decode_tps=21.9,
    phase="measure",
    ttft=813.9,
    load_ms=1.0,
    prompt_eval_count=195,
    prompt_eval_ms=796.1,
    eval_count=100,
    status="ok",
):
    eval_duration = round(eval_count / decode_tps * 1e9)
    stats = {
        "load_duration": round(load_ms * MS),
        "prompt_eval_count": prompt_eval_count,
        "prompt_eval_duration": round(prompt_eval_ms * MS),
        "eval_count": eval_count,
        "eval_duration": eval_duration,
        "total_duration": round(load_ms * MS) + round(prompt_eval_ms * MS) + eval_duration + 2 * MS,
    }
    metrics = {
        "ttft_ms": ttft,
        "e2e_ms": ttft + eval_duration / MS,
        "prompt_eval_ms": prompt_eval_ms,
        "server_prefill_tps": prompt_eval_count / prompt_eval_ms * 1000,
        "client_decode_tps": decode_tps,
        "server_decode_tps": decode_tps,
        "tpot_ms": 1000 / decode_tps,
        "overhead_ms": ttft - load_ms - prompt_eval_ms,
        "load_ms": load_ms,
    }
    return {
        "type": "request",
        "id": index + 1,
        "index": index,
        "phase": phase,
        "prompt_tokens_target": 200,
        "prompt_words": 105,
        "status": status,
        "error": None if status == "ok" else "boom",
        "stats": stats,
        "metrics": metrics,
    }


def record(index, decode_tps=21.9, **kwargs):
    return RequestRecord.from_json(record_json(index, decode_tps, **kwargs))


def contaminated_json():
    warm = record_json(0, phase="warmup", load_ms=2100.0, ttft=2950.0)
    return [warm] + [record_json(i + 1, tps) for i, tps in enumerate(CONTAMINATED)]


def contaminated_run():
    return [RequestRecord.from_json(r) for r in contaminated_json()]


def test_source_contaminated_run_is_flagged():
    a = analyze(contaminated_run(), {200: 198})
    (size,) = a.sizes
    assert len(size.ok) == 25 and len(size.warmups) == 1
    # fast, slow, fast, slow: two episodes (requests 8–13 and 20–25), not a drift
    assert [(e.first, e.last) for e in size.episodes.episodes] == [(8, 13), (20, 25)]
    assert len(size.baseline) == 13 and not size.episodes.trends
    # the baseline's first 5 (21.9 21.9 22.0 22.0 22.0) → median 22.0, its last 5 (21.9 20.3
    # 21.5 19.8 21.4) → 21.4: −2.7 %, within the threshold
    d = size.drifts["server_decode_tps"]
    assert d.first_median == pytest.approx(22.0) and d.last_median == pytest.approx(21.4)
    assert not d.worse and not d.improved
    # not re-measured: 13 of the 25 outside the episodes is short of a baseline
    assert a.contaminated
    # "(in episodes: …)": new-user pass N44 read "(requests 1–3)" as the ones outside
    short = ("200 tok: only 13 of the 25 requests are outside the episodes (in episodes: "
             "requests 8–13, requests 20–25): the re-measuring budget ran out, or re-measuring "
             "was off")
    assert a.judgement.reasons == (short,)
    assert not size.drifts["ttft_ms"].worse  # constant TTFT
    assert size.summaries["ttft_ms"].p95 is None  # the baseline's n = 13 < 20


def test_flat_run_is_clean():
    a = analyze([record(i) for i in range(25)], {200: 198})
    assert not a.contaminated and a.ok_count == 25


def test_statuses():
    assert first_pass_status(record(1, prompt_eval_count=120), 198)[0] == BenchStatus.PROMPT_CUT
    assert "raise num_ctx" in first_pass_status(record(1, prompt_eval_count=120), 198)[1]
    assert first_pass_status(record(1, eval_count=1), 198)[0] == BenchStatus.DEGENERATE
    assert first_pass_status(record(1, status="error"), 198)[0] == BenchStatus.ERROR
    assert (
        first_pass_status(replace(record(1), status=Status.NO_GENERATION), 198)[0]
        == BenchStatus.NO_GENERATION
    )


def test_prompt_cut_is_written_as_such_and_the_old_value_still_reads():
    assert str(BenchStatus.PROMPT_CUT) == "prompt-cut"
    assert BenchStatus("truncated") is BenchStatus.PROMPT_CUT  # reports written before the rename


def test_cache_hit_and_cold_start_are_excluded_with_reasons():
    recs = [record(i) for i in range(10)]
    recs[3] = record(3, prompt_eval_ms=40.0)  # 195 tokens in 40 ms: 5 % of the usual time per token
    recs[6] = record(6, load_ms=2500.0)
    (size,) = analyze(recs, {200: 198}).sizes
    statuses = {r.index: r.status for r in size.excluded}
    assert statuses == {3: BenchStatus.CACHED, 6: BenchStatus.COLD_START}
    assert len(size.ok) == 8


def test_p95_is_not_the_max_below_20():
    (size,) = analyze([record(i, tps) for i, tps in enumerate(CONTAMINATED[:12])]).sizes
    s = size.summaries["server_decode_tps"]
    assert s.p95 is None and s.p95_note == "n/a (n < 20)"


@pytest.fixture
def bench_log(tmp_path):
    path = tmp_path / "bench.jsonl"
    log = SessionLog(
        path,
        {
            "kind": "bench",
            "engine": "embedded",
            "model": "gemma3:270m",
            "host": "h",
            "bench": {"drift_threshold_pct": 5.0},
            "options": {"temperature": 0},
        },
    )
    log.write_raw(
        {
            "type": "calibration",
            "template_tokens": 26,
            "targets": {"200": {"words": 105, "tokens": 198}},
            "probes": [[1, 27], [50, 120], [105, 198]],
            "from_cache": False,
        }
    )
    for r in contaminated_json():
        log.write_raw(r)
    log.close()
    return read_log(path)


def test_markdown_report_has_every_section(bench_log):
    md = render(build(bench_log), "md")
    assert "**Verdict: CONTAMINATED**" in md
    assert "| 200 tok (105 words → 198) | 13 | 813.9 / n/a (n < 20) ms |" in md
    # the episodes' sizes: 8–13 median 17.25 vs the baseline's 21.7 → −20.5 %; 20–25, 15.4
    # → −29.0 %
    assert "| 200 tok (105 words → 198) | 8–13 | decode (server) -21 %, E2E +22 %" in md
    assert "| 20–25 | decode (server) -29 %, E2E +35 %" in md
    assert "| words | prompt_eval_count |" in md and "| 105 | 198 |" in md
    assert "## Warm-up requests" in md and "2,100.0" in md
    assert "none: every measured request was ok" in md


def test_csv_has_one_row_per_request_including_warmups(bench_log):
    rows = list(csv.DictReader(io.StringIO(render(build(bench_log), "csv"))))
    assert len(rows) == 26 and rows[0]["phase"] == "warmup" and rows[0]["status"] == "ok"
    assert float(rows[-1]["server_decode_tps"]) == pytest.approx(15.6)


def test_json_report(bench_log):
    data = json.loads(render(build(bench_log), "json"))
    assert data["verdict"] == "contaminated"
    # the baseline's drift: 22.0 → 21.4, (21.4 − 22.0) / 22.0 = −2.7 %
    assert data["sizes"][0]["drift"]["server_decode_tps"]["change_pct"] == pytest.approx(
        -2.73, abs=0.01
    )
    episodes = data["episodes"]["200"]
    assert [(e["first"], e["last"]) for e in episodes] == [(8, 13), (20, 25)]
    # (17.25 − 21.7) / 21.7 = −20.51 %; a rate that fell to 79.5 %: 1 / 0.795 − 1 = 25.8 % slower
    assert episodes[0]["changes_pct"]["server_decode_tps"] == pytest.approx(-20.51, abs=0.01)
    assert episodes[0]["slower_pct"] == pytest.approx(25.8, abs=0.05)


def test_unknown_format():
    with pytest.raises(ValueError, match="use one of md, csv, json, html"):
        render(object.__new__(Report), "pdf")


def test_report_names_the_browser_that_slowed_the_slow_requests(tmp_path):
    path = tmp_path / "bench.jsonl"
    log = SessionLog(
        path,
        {
            "kind": "bench",
            "engine": "embedded",
            "model": "m",
            "bench": {"drift_threshold_pct": 5.0},
        },
    )
    for r in contaminated_json():
        log.write_raw(r)
        # decode drifted from a first-5 median of 22.0: slow = below 22.0 × 0.95 = 20.9 tok/s,
        # i.e. 14 of the 25 (16.9 … 20.3, 19.8, 16.7 … 15.6); chromium burns 38 % during those
        slow = r["phase"] == "measure" and r["metrics"]["server_decode_tps"] < 20.9
        apps = [{"app": "chromium", "category": "browser", "cpu_percent": 38.0 if slow else 1.0},
                {"app": "llmtop", "category": "llmtop", "cpu_percent": 50.0}]
        log.write_raw(
            {
                "type": "probe",
                "request_id": r["id"],
                "processes": {"apps": apps, "warming_up": False},
                "verdict": {"quiet": not slow},
            }
        )
    log.close()
    report = build(read_log(path))
    # the size's attribution is its costliest episode's, requests 20–25 (decode 41 % slower):
    # chromium 38 % during those 6; the 13 baseline requests include 20.3 and 19.8 tok/s
    # (below 20.9: 38 %) and 11 at 1 %: (2 × 38 + 11 × 1) / 13 = 6.7 → "7 %"
    att = report.attributions[200]
    assert att.culprit == "chromium"
    assert (
        att.evidence
        == "chromium: 38 % CPU during the 6 slow requests, 7 % during the 13 fast ones"
    )
    first, last = report.episodes[200]
    # 8–13 at 17.25 tok/s vs the baseline's 21.7: 21.7 / 17.25 − 1 = 25.8 % slower in time
    assert first.sentence == ("chromium was busy during requests 8–13; decode (server) ran "
                              "26 % slower then")
    assert last.sentence.startswith("chromium was busy during requests 20–25")
    md = render(report, "md")
    assert "likely culprit **chromium**" in md
    assert ("During the requests: 14 of 26 probe samples found the machine NOISY; busiest other "
            "app in those samples: **chromium** (median 38 % of one core in 14 of them).") in md


def test_report_without_a_suspect_says_so(bench_log):
    att = build(bench_log).attributions[200]
    assert att.culprit is None and att.evidence


def test_md_table_escapes_pipes_and_line_breaks():
    lines = md_table(
        ("status", "reason"), [("error", "exit 1 | last lines: a | b\nc"), ("ok", None)]
    )
    assert lines == [
        "| status | reason |",
        "|---|---|",
        "| error | exit 1 \\| last lines: a \\| b c |",
        "| ok | n/a |",
    ]
    with pytest.raises(ValueError, match="a row of 1 cells under 2 headers"):
        md_table(("a", "b"), [("only one",)])


def test_a_failure_reason_with_a_pipe_stays_in_its_row(tmp_path):
    path = tmp_path / "bench.jsonl"
    log = SessionLog(path, {"kind": "bench", "engine": "embedded", "model": "m"})
    for i in range(3):
        log.write_raw(record_json(i))
    log.write_raw({**record_json(3, status="error"), "error": "engine exited | llama: bad magic"})
    log.close()
    md = render(build(read_log(path)), "md")
    assert "| 200 | 4 | error | engine exited \\| llama: bad magic |" in md


def test_a_cancelled_request_is_cancelled_in_the_report_not_an_error():
    from llmtop.sessions.analysis.run import BenchStatus, first_pass_status

    rec = record_json(3)
    rec.update(status="cancelled", error="request cancelled")
    assert first_pass_status(RequestRecord.from_json(rec), 200) == (
        BenchStatus.CANCELLED, "cancelled by the user")
    rec.update(status="error", error="boom")
    assert first_pass_status(RequestRecord.from_json(rec), 200) == (BenchStatus.ERROR, "boom")
def test_the_report_says_whether_preflight_held(tmp_path):
    # a QUIET preflight, then the seed's run with its two episodes (8–13, 20–25)
    path = tmp_path / "bench.jsonl"
    log = SessionLog(path, {"kind": "bench", "engine": "e", "model": "m"})
    log.write_raw({"type": "preflight", "verdict": "QUIET", "quiet": True, "findings": []})
    for r in contaminated_json():
        log.write_raw(r)
    log.close()
    report = build(read_log(path))
    md = render(report, "md")
    assert ("Preflight said QUIET, and 2 slow episodes followed: the machine changed its mind "
            "during the run.") in md
    held = json.loads(render(report, "json"))["preflight_held"]
    assert held["preflight"] == "QUIET" and held["episodes"] == 2 and held["changed"]


def test_a_quiet_preflight_is_not_a_reassurance_beside_a_noisy_run(tmp_path):
    # new-user pass D9: "Preflight said QUIET; no slow episode followed." beside CONTAMINATED
    path = tmp_path / "bench.jsonl"
    log = SessionLog(path, {"kind": "bench", "engine": "e", "model": "m"})
    log.write_raw({"type": "preflight", "verdict": "QUIET", "quiet": True, "findings": []})
    for i in range(3):
        log.write_raw(record_json(i))
    for rid, quiet in ((1, False), (2, False), (3, True)):
        log.write_raw({"type": "probe", "request_id": rid, "verdict": {"quiet": quiet}})
    log.close()
    held = json.loads(render(build(read_log(path)), "json"))["preflight_held"]
    # 2 of the 3 samples taken during requests were NOISY; no episode in 3 requests
    assert held["sentence"] == ("Preflight said QUIET, but the probes found the machine NOISY in "
                                "2 of 3 samples during the requests; no slow episode followed.")


def test_drift_is_clean_only_where_it_was_judged(tmp_path):
    # new-user pass N4: "Verdict: INCONCLUSIVE — too few ok requests to judge drift" and
    # "drift n/a" for each metric, yet the Results row's notes said "drift clean"
    from tests.unit.compare_logs import write_log

    few = render(build(read_log(write_log(tmp_path / "few.jsonl", [400.0] * 3))), "md")
    assert "drift not judged (too few ok requests)" in few and "drift clean" not in few
    # 20 steady requests: first 5 and last 5 medians equal, judged and clean
    many = render(build(read_log(write_log(tmp_path / "many.jsonl", [400.0] * 20))), "md")
    assert "drift clean" in many and "drift not judged" not in many


def test_a_cold_long_prompt_among_short_ones_is_not_called_cached(tmp_path):
    # new-user pass P2: 12 prompts of 7 tokens (60 ms prefill: 8.6 ms/token, mostly fixed
    # cost), then a 400-token prompt seen for the first time (820 ms: 2.05 ms/token). Against
    # the session's median per token it read "cached" and left the statistics; like prompts
    # only are compared now. Sent again, its 24.8 ms (0.062 ms/token) is a cache hit.
    log = SessionLog(tmp_path / "s.jsonl", {"kind": "session", "model": "m", "engine": "ollama"})
    short = [{**record_json(i, prompt_eval_count=7, prompt_eval_ms=60.0, ttft=70.0),
              "prompt": f"prompt number {i}"} for i in range(12)]
    long_prompt = "word " * 400
    cold = {**record_json(12, prompt_eval_count=400, prompt_eval_ms=820.0, ttft=830.0),
            "prompt": long_prompt}
    again = {**record_json(13, prompt_eval_count=400, prompt_eval_ms=24.8, ttft=35.0),
             "prompt": long_prompt}
    for r in [*short, cold, again]:
        log.write_raw({k: v for k, v in r.items()
                       if k not in ("index", "phase", "prompt_tokens_target")})
    log.close()
    analysis = analyze_run(read_log(tmp_path / "s.jsonl"))
    statuses = [r.status for s in analysis.sizes for r in s.requests]
    # 0.062 / 2.05 = 3 % of the same prompt's first time: cached; the rest ok
    assert statuses == [BenchStatus.OK] * 13 + [BenchStatus.CACHED]
    (reason,) = [r.reason for s in analysis.sizes for r in s.requests if r.reason]
    assert reason == ("prefill took 0.062 ms/token, under 25% of the same prompt's first time "
                      "(2.050 ms/token): most of the prompt came from the cache")


def test_an_interactive_session_of_unlike_prompts_judges_no_episode(tmp_path):
    # second new-user pass P10: 7-token prompts then 500-word ones, and the report called
    # requests 1–3 "faster than the baseline" and listed them among slow episodes
    log = SessionLog(tmp_path / "s.jsonl", {"kind": "session", "model": "m", "engine": "ollama"})
    for i in range(12):
        long = i >= 3
        rec = record_json(i, prompt_eval_count=700 if long else 7,
                          prompt_eval_ms=1400.0 if long else 60.0,
                          ttft=1410.0 if long else 70.0)
        log.write_raw({**{k: v for k, v in rec.items()
                          if k not in ("index", "phase", "prompt_tokens_target")},
                       "prompt": f"prompt {i}"})
    log.close()
    analysis = analyze_run(read_log(tmp_path / "s.jsonl"))
    (size,) = analysis.sizes
    assert not size.episodes.episodes
    assert analysis.judgement.word == "inconclusive"
    why = ("interactive: 12 prompts of 7 to 700 tokens, so no episode, trend or drift is "
           "judged (a bench measures one prompt size)")
    assert analysis.judgement.reasons == (why,)
    md = render(build(read_log(tmp_path / "s.jsonl")), "md")
    assert "1–3 (faster)" not in md and "in slow episodes" not in md
    # the drift column says why, not "needs at least 10 values, has 0" (third pass)
    assert "has 0" not in md and "not judged: the session's prompts differ in length" in md
