"""Session log: versioned, flushed, crash-proof (docs/architecture.md, "Versioned files")."""

import json

import pytest

from llmtop.engines.events import ServerStats, Status, StreamEvent
from llmtop.sessions.measure.request import RequestCollector, RequestResult
from llmtop.sessions.records.log import FORMAT_VERSION, LogError, SessionLog, read_log
from llmtop.sessions.records.request import RequestRecord

MS = 1_000_000


def finished_request():
    c = RequestCollector(
        prompt="Why?", options={"temperature": 0.0, "seed": 42}, model="m", request_id=1
    )
    c.sent_ns = 10_000 * MS
    c.add(StreamEvent(c.sent_ns + 500 * MS, content="Be"))
    c.add(StreamEvent(c.sent_ns + 520 * MS, content="cause"))
    stats = ServerStats(
        eval_count=2,
        eval_duration=20 * MS,
        prompt_eval_count=5,
        prompt_eval_duration=400 * MS,
        load_duration=2 * MS,
        done_reason="stop",
    )
    c.add(StreamEvent(c.sent_ns + 520 * MS, done=True, stats=stats))
    return c.finish()


def write_request(log: SessionLog, result: RequestResult) -> None:
    """Append a finished request as the recorder does (without the bench fields)."""
    log.write(RequestRecord.of(result))


def test_round_trip(tmp_path):
    path = tmp_path / "s.jsonl"
    log = SessionLog(path, {"engine": "embedded", "model": "m"})
    write_request(log, finished_request())
    log.write_probe({"t_ns": 1, "cpu": 3.5}, request_id=1)  # "cpu": not a typed field, ignored
    log.close()
    loaded = read_log(path)
    assert loaded.header.format == FORMAT_VERSION and loaded.header.engine == "embedded"
    (req,) = loaded.requests
    assert req.prompt == "Why?" and req.status == Status.OK and req.content == "Because"
    # chunk offsets are ns from the send: 500 ms and 520 ms
    assert req.chunks == ((500 * MS, "Be", ""), (520 * MS, "cause", ""))
    assert req.stats is not None and req.stats.eval_count == 2 and req.stats.total_duration is None
    assert req.metrics.ttft_ms == 500.0 and req.metrics.tpot_ms == 20.0
    assert req.metrics.overhead_ms == pytest.approx(500 - 2 - 400)
    assert req.options == {"temperature": 0.0, "seed": 42} and req.phase is None
    (probe,) = loaded.probes
    assert probe.request_id == 1 and probe.t_ns == 1 and probe.cost_ms is None
    assert [r.TYPE for r in loaded.records] == ["end"] and loaded.warnings == ()


def test_each_record_is_on_disk_before_close(tmp_path):
    path = tmp_path / "s.jsonl"
    log = SessionLog(path, {"engine": "e"})
    write_request(log, finished_request())
    # read through another handle without closing the writer: as after a crash
    lines = path.read_text().splitlines()
    assert [json.loads(x)["type"] for x in lines] == ["header", "request"]
    log.close()


def test_torn_last_line_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "s.jsonl"
    log = SessionLog(path, {"engine": "e"})
    write_request(log, finished_request())
    log._fh.write('{"type": "probe", "t_n')  # a crash mid-write
    log._fh.flush()
    loaded = read_log(path)
    assert len(loaded.requests) == 1
    assert loaded.warnings == ("line 3: unreadable (torn write?), skipped",)


def test_newer_format_names_the_version_it_needs(tmp_path):
    path = tmp_path / "future.jsonl"
    path.write_text(json.dumps({"type": "header", "format": 99, "llmtop_version": "9.0"}) + "\n")
    with pytest.raises(LogError, match=r"format 99, written by llmtop 9.0.*upgrade llmtop"):
        read_log(path)


def test_not_a_log(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("hello\n")
    with pytest.raises(LogError, match="does not start with an llmtop header"):
        read_log(path)
    with pytest.raises(LogError, match="cannot read"):
        read_log(tmp_path / "missing.jsonl")


def test_unwritable_log_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(LogError, match="cannot write the session log"):
        SessionLog(blocker / "sub" / "s.jsonl", {})


def test_a_record_with_a_wrong_field_type_is_skipped_naming_line_and_field(tmp_path):
    path = tmp_path / "s.jsonl"
    log = SessionLog(path, {"engine": "e"})
    good = RequestRecord.of(finished_request()).to_json()
    log.write_raw(good)  # line 2
    log.write_raw({**good, "id": 2, "metrics": {**good["metrics"], "ttft_ms": "fast"}})  # line 3
    log.write_raw({**good, "id": "3"})  # line 4
    log.write_raw({**good, "id": 4, "status": "exploded"})  # line 5
    log.write_raw({"type": "probe", "request_id": 1, "processes": {"apps": [{"app": 7}]}})  # line 6
    log.write_raw({"type": "probe", "request_id": 1, "verdict": {"quiet": False}})  # line 7
    log.write_raw(["not", "an", "object"])  # line 8
    log.close()
    loaded = read_log(path)
    assert [r.id for r in loaded.requests] == [1]
    assert [p.noisy for p in loaded.probes] == [True]
    assert loaded.warnings == (
        ("line 3: request record: field metrics.ttft_ms: Input should be a valid number, "
         'got "fast"; skipped'),
        'line 4: request record: field id: Input should be a valid integer, got "3"; skipped',
        ("line 5: request record: field status: Input should be 'ok', 'error', 'truncated', "
         "'no-generation' or 'cancelled', got \"exploded\"; skipped"),
        ("line 6: probe record: field processes.apps.0.app: Input should be a valid string, "
         "got 7; skipped"),
        "line 8: not a JSON object, skipped",
    )


def test_a_header_with_a_wrong_field_type_is_a_clear_error(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"type": "header", "format": 1, "model": 42}) + "\n")
    with pytest.raises(LogError, match=r"line 1: header record: field model: Input should be a "
                                       r"valid string, got 42"):
        read_log(path)


# A version-1 log as llmtop wrote it before the relay and the shared environment record: a
# bench header with `machine`, no `via`/`upstream`, request records without `path`/`pair`,
# and a probe without `cost_ms` or `gpu` (lines trimmed to the fields that matter here).
OLD_LOG = [
    {"type": "header", "format": 1, "llmtop_version": "0.1.0", "kind": "bench",
     "started_at": "2026-11-01T10:00:00+00:00", "engine": "ollama", "host": "http://h:11434",
     "model": "gemma3:270m", "options": {"temperature": 0.0, "seed": 42},
     "environment": {"os": "Linux 6.1", "cpu_model": "Ryzen"},
     "machine": {"gpu": {"available": False, "reason": "no NVIDIA driver"}, "power": "mains"},
     "bench": {"requests": 2, "drift_threshold_pct": 7.5}},
    {"type": "request", "id": 1, "started_at": "2026-11-01T10:00:01+00:00", "model": "gemma3:270m",
     "prompt": "Hello", "options": {"num_predict": 2}, "status": "ok", "error": None,
     "stats": {"eval_count": 2, "eval_duration": 40000000, "load_duration": 900000000,
               "prompt_eval_count": 9, "prompt_eval_duration": 30000000, "total_duration": None,
               "done_reason": "length"},
     "metrics": {"ttft_ms": 950.0, "e2e_ms": 990.0, "itl_ms": [40.0], "output_tokens": 2,
                 "tokens_basis": "eval_count", "text_chunks": 2, "load_ms": 900.0},
     "content": "Hi!", "thinking": "", "chunks": [[950000000, "Hi", ""], [990000000, "!", ""]],
     "phase": "load", "index": 0, "prompt_tokens_target": None, "prompt_words": 1},
    {"type": "probe", "request_id": 1, "t_ns": 5, "wall_time": "2026-11-01T10:00:01+00:00",
     "processes": {"warming_up": True, "apps": []}, "verdict": {"quiet": True, "findings": []}},
    {"type": "end", "ended_at": "2026-11-01T10:00:02+00:00"},
]


def test_an_old_format_log_still_reads(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in OLD_LOG))
    loaded = read_log(path)
    assert loaded.warnings == ()
    h = loaded.header
    assert (h.kind, h.model, h.via, h.upstream, h.drift_threshold_pct) == (
        "bench", "gemma3:270m", None, None, 7.5)
    # the machine record is found where the old bench header kept it
    assert h.machine_environment["gpu"]["reason"] == "no NVIDIA driver"
    assert h.machine_environment["os"] == "Linux 6.1"
    (req,) = loaded.requests
    assert isinstance(req, RequestRecord) and req.phase == "load" and req.path is None
    assert req.metrics.ttft_ms == 950.0 and req.metrics.itl_ms == (40.0,)
    assert req.metrics.ttft_content_ms is None and req.metrics.tpot_ms is None  # not in the line
    assert req.stats is not None and req.stats.load_duration == 900_000_000
    (probe,) = loaded.probes
    assert probe.processes is not None and probe.processes.warming_up and probe.gpu is None
    assert loaded.ended_at == "2026-11-01T10:00:02+00:00" and not loaded.interrupted


def test_typed_records_are_read_through_their_own_lists(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in OLD_LOG))
    log = read_log(path)
    assert list(log.of_type(RequestRecord)) == []  # requests are `log.requests`
    assert len(log.requests) >= 1


def test_a_report_reader_can_leave_the_chunks_out_and_nothing_else(tmp_path):
    from llmtop.sessions.records.request import without_chunks

    # the array ends at the first unescaped `], "phase": `: a chunk's text holding that very
    # text is escaped in JSON (`], \"phase\": `), so it is kept inside the array and cut
    # with it; a line whose cut would hold a key is left whole
    line = ('{"type": "request", "chunks": [[1, "a], \\"phase\\": x", ""], [2, "b", ""]], '
            '"phase": "measure"}')
    assert without_chunks(line) == '{"type": "request", "chunks": [], "phase": "measure"}'
    keyed = '{"type": "request", "chunks": [], "metrics": {"x": [1]}, "phase": "measure"}'
    assert without_chunks(keyed) == keyed
    log = SessionLog(tmp_path / "s.jsonl", {"engine": "e"})
    write_request(log, finished_request())
    log.close()
    full, lean = read_log(tmp_path / "s.jsonl"), read_log(tmp_path / "s.jsonl", chunks=False)
    (f,), (n,) = full.requests, lean.requests
    assert len(f.chunks) == 2 and n.chunks == ()
    assert f.metrics == n.metrics and f.stats == n.stats and f.content == n.content
