"""`llmtop sessions`: the saved logs with their verdicts; an older or foreign log is listed
with the reason it cannot be read."""

from __future__ import annotations

import json
import os
import random

from llmtop import cli
from llmtop.sessions.analysis.catalog import catalogue, entry
from tests.unit.compare_logs import write_log


def _logs(tmp_path):
    ok = write_log(tmp_path / "bench-1.jsonl", [400.0] * 12)
    old = tmp_path / "bench-0.jsonl"
    old.write_text('{"type": "header", "format": 99, "llmtop_version": "9.0"}\n')
    os.utime(old, (1, 1))  # older than the other: listed last
    (tmp_path / "notes.txt").write_text("not a log")
    return ok, old


def test_entries_with_their_verdict_newest_first(tmp_path):
    ok, old = _logs(tmp_path)
    first, second = catalogue([tmp_path])
    assert (first.path, first.kind, first.engine, first.model) == (
        str(ok), "bench", "embedded", "gemma3:270m")
    assert (first.requests, first.ok, first.verdict) == (13, 12, "clean")  # 1 warm-up + 12
    assert first.requests_text == "13: 12 ok, 1 warm-up"
    assert second.path == str(old) and second.verdict == "unreadable"
    assert "session-log format 99, written by llmtop 9.0" in second.problem


def test_a_missing_file_is_an_unreadable_entry(tmp_path):
    assert entry(tmp_path / "gone.jsonl").problem.startswith("cannot read")


def test_the_command_prints_a_table_or_json(tmp_path, capsys):
    ok, _old = _logs(tmp_path)
    assert cli.main(["sessions", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| date | engine | model | kind | requests | verdict | log |")
    assert "| embedded | gemma3:270m | bench | 13: 12 ok, 1 warm-up | clean |" in lines[2]
    assert "unreadable: " in lines[3]
    assert cli.main(["sessions", "--json", str(ok)]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert item["verdict"] == "clean"
    assert cli.main(["sessions", str(tmp_path / "nowhere")]) == 2


def test_an_interactive_session_is_numbered_as_the_tui_numbered_it(tmp_path):
    """The TUI shows its requests as #1, #2, #3 (their ids); the report and CSV must say the
    same numbers (newcomer row 6: they said #2-#4)."""
    import csv
    import io
    import json

    from llmtop.sessions.records.log import SessionLog, read_log
    from llmtop.sessions.reports.formats import render
    from llmtop.sessions.reports.run import build
    from tests.unit.compare_logs import HEADER
    from tests.unit.test_analysis_report import record_json

    path = tmp_path / "tui.jsonl"
    log = SessionLog(path, {**HEADER, "kind": "session"})
    for i in range(3):
        rec = record_json(i)
        for bench_only in ("index", "phase", "prompt_tokens_target", "prompt_words"):
            rec.pop(bench_only)
        log.write_raw(rec)  # ids 1, 2, 3, as the TUI's recorder gives them
    log.close()
    report = build(read_log(path))
    rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
    assert [r["index"] for r in rows] == ["1", "2", "3"]
    doc = json.loads(render(report, "json"))
    assert [r["index"] for s in doc["sizes"] for r in s["requests"]] == [1, 2, 3]


def test_listed_by_start_time_not_file_time_and_one_request_is_not_judged(tmp_path):
    from llmtop.sessions.records.log import SessionLog
    from tests.unit.compare_logs import HEADER, request

    write_log(tmp_path / "early.jsonl", [400.0] * 3, started_at="2026-11-30T18:07:00+00:00")
    late = write_log(tmp_path / "late.jsonl", [400.0] * 3, started_at="2026-11-30T18:15:00+00:00")
    os.utime(late, (10, 10))  # the later run's file is older (copied, touched): start decides
    single = SessionLog(tmp_path / "run.jsonl", {**HEADER, "kind": "session",
                                                  "started_at": "2026-11-30T17:00:00+00:00"})
    single.write_raw({k: v for k, v in request(0, 500.0, 20.0).items()
                      if k not in ("index", "phase", "prompt_tokens_target", "prompt_words")})
    single.close()
    listed = catalogue([tmp_path])
    assert [os.path.basename(e.path) for e in listed] == ["late.jsonl", "early.jsonl", "run.jsonl"]
    assert listed[2].verdict is None and listed[2].requests == 1
    assert listed[2].cells()[5] == "— (no probe sample)"  # this log has none


def test_one_request_on_a_noisy_machine_says_so(tmp_path):
    # issue 32, finding N: a `run` whose request the probes called NOISY was listed as "—"
    from llmtop.sessions.records.log import SessionLog
    from tests.unit.compare_logs import HEADER, request

    def one(name: str, quiet: bool | None) -> None:
        log = SessionLog(tmp_path / name, {**HEADER, "kind": "session"})
        rec = request(0, 500.0, 20.0)
        log.write_raw({k: v for k, v in rec.items()
                       if k not in ("index", "phase", "prompt_tokens_target", "prompt_words")})
        if quiet is not None:
            log.write_raw({"type": "probe", "request_id": rec["id"],
                           "verdict": {"quiet": quiet}})
        log.close()

    one("noisy.jsonl", quiet=False)
    one("quiet.jsonl", quiet=True)
    one("unseen.jsonl", quiet=None)  # no probe sample during the request
    cells = {os.path.basename(e.path): e.cells()[5] for e in catalogue([tmp_path])}
    assert cells == {"noisy.jsonl": "— NOISY during the request", "quiet.jsonl": "—",
                     "unseen.jsonl": "— (no probe sample)"}  # new-user pass N24
    noisy = entry(tmp_path / "noisy.jsonl").to_dict()  # --json: no verdict word, the flag
    assert noisy["verdict"] is None and noisy["noisy"] is True
    assert noisy["probe_samples"] == (1, 1)
    # no sample: unknown, null as `run --json` has it (second pass, P6), not false
    assert entry(tmp_path / "unseen.jsonl").to_dict()["noisy"] is None


def test_noisy_is_said_for_every_kind_of_log(tmp_path):
    # new-user pass N17: a bench CONTAMINATED by NOISY requests listed "noisy": false
    from tests.unit.compare_logs import lognormal, write_log

    rng = random.Random(5)
    path = write_log(tmp_path / "b.jsonl", lognormal(rng, 500, 20),
                     probes=[{"request_id": i, "verdict": {"quiet": i >= 6}} for i in range(2, 22)])
    e = entry(path)
    # samples tagged 2-21 (the measured requests' ids): 2-5 NOISY, 4 of 20
    assert e.noisy is True and e.probe_samples == (4, 20)
    assert e.verdict == "contaminated"  # 4 of 20 requests NOISY: more than a tenth


def test_columns_line_up_under_their_headers():
    from llmtop.commands.sessions import columns

    lines = columns([("2026-11-30 18:15:00", "ollama", "qwen3:8b", "bench", "26: 25 ok, 1 warm-up",
                      "clean", "a.jsonl"),
                     ("2026-11-30 18:07:00", "embedded", "gemma3:270m", "session", "1: 1 ok", "—",
                      "b.jsonl")])
    assert lines[0].startswith("DATE                  ENGINE     MODEL         KIND      ")
    starts = [lines[0].index(h) for h in ("ENGINE", "MODEL", "KIND", "REQUESTS", "VERDICT", "LOG")]
    for line in lines[1:]:  # every cell starts under its header
        assert all(line[s - 1] == " " and line[s] != " " for s in starts), line


def test_the_cache_pairs_and_turns_are_counted(tmp_path):
    # new-user pass N42: "35: 20 ok, 2 warm-up, 1 model load" left 12 requests uncounted
    from llmtop.sessions.records.log import SessionLog
    from tests.unit.compare_logs import HEADER, request

    log = SessionLog(tmp_path / "b.jsonl", HEADER)
    log.write_raw({**request(0, 900.0, 20.0), "phase": "warmup"})
    for i in range(1, 4):
        log.write_raw(request(i, 400.0, 20.0))
    n = 4
    for phase in ("cache-cold", "cache-warm", "cache-cold", "cache-warm", "turn", "turn"):
        log.write_raw({**request(n, 400.0, 20.0), "phase": phase})
        n += 1
    log.close()
    e = entry(tmp_path / "b.jsonl")
    # 1 warm-up + 3 measured + 4 cache-pair requests + 2 turns = 10
    assert e.requests == 10
    assert e.requests_text == "10: 3 ok, 4 cache-pair, 2 conversation, 1 warm-up"


def test_a_watch_log_is_judged_by_its_requests_verdicts(tmp_path):
    # a watch's probe records are the machine's, tied to no request; each request carries
    # the verdict of the samples around it: 1 of 3 NOISY here, one not judged
    from llmtop.sessions.records.log import SessionLog
    from tests.unit.compare_logs import HEADER, request

    log = SessionLog(tmp_path / "w.jsonl", {**HEADER, "kind": "watch"})
    for i, verdict in enumerate(("QUIET", "NOISY", None, "QUIET")):
        rec = {k: v for k, v in request(i, 500.0, 20.0).items()
               if k not in ("index", "phase", "prompt_tokens_target", "prompt_words")}
        log.write_raw({**rec, "probe_verdict": verdict})
        log.write_raw({"type": "probe", "request_id": None, "verdict": {"quiet": False}})
    log.close()
    e = entry(tmp_path / "w.jsonl")
    assert (e.noisy, e.probe_samples) == (True, (1, 3))
    assert e.cells()[5] == "— NOISY during the request"
