"""Session log: versioned, flushed, crash-proof (docs/architecture.md, "Versioned files")."""

import json

import pytest

from llmtop.engines.events import ServerStats, StreamEvent
from llmtop.sessions.log import FORMAT_VERSION, LogError, SessionLog, read_log
from llmtop.sessions.request import RequestCollector

MS = 1_000_000


def finished_request():
    c = RequestCollector(prompt="Why?", options={"temperature": 0.0, "seed": 42}, model="m", request_id=1)
    c.sent_ns = 10_000 * MS
    c.add(StreamEvent(c.sent_ns + 500 * MS, content="Be"))
    c.add(StreamEvent(c.sent_ns + 520 * MS, content="cause"))
    stats = ServerStats(eval_count=2, eval_duration=20 * MS, prompt_eval_count=5, prompt_eval_duration=400 * MS,
                        load_duration=2 * MS, done_reason="stop")
    c.add(StreamEvent(c.sent_ns + 520 * MS, done=True, stats=stats))
    return c.finish()


def test_round_trip(tmp_path):
    path = tmp_path / "s.jsonl"
    log = SessionLog(path, {"engine": "embedded", "model": "m"})
    log.write_request(finished_request())
    log.write_probe({"t_ns": 1, "cpu": 3.5}, request_id=1)
    log.close()
    loaded = read_log(path)
    assert loaded.header["format"] == FORMAT_VERSION and loaded.header["engine"] == "embedded"
    (req,) = loaded.of_type("request")
    assert req["prompt"] == "Why?" and req["status"] == "ok" and req["content"] == "Because"
    # chunk offsets are ns from the send: 500 ms and 520 ms
    assert req["chunks"] == [[500 * MS, "Be", ""], [520 * MS, "cause", ""]]
    assert req["stats"]["eval_count"] == 2 and req["stats"]["total_duration"] is None
    assert req["metrics"]["ttft_ms"] == 500.0 and req["metrics"]["tpot_ms"] == 20.0
    assert req["metrics"]["overhead_ms"] == pytest.approx(500 - 2 - 400)
    (probe,) = loaded.of_type("probe")
    assert probe["request_id"] == 1 and probe["cpu"] == 3.5
    assert [r["type"] for r in loaded.records] == ["request", "probe", "end"]


def test_each_record_is_on_disk_before_close(tmp_path):
    path = tmp_path / "s.jsonl"
    log = SessionLog(path, {"engine": "e"})
    log.write_request(finished_request())
    # read through another handle without closing the writer: as after a crash
    lines = path.read_text().splitlines()
    assert [json.loads(x)["type"] for x in lines] == ["header", "request"]
    log.close()


def test_torn_last_line_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "s.jsonl"
    log = SessionLog(path, {"engine": "e"})
    log.write_request(finished_request())
    log._fh.write('{"type": "probe", "t_n')  # a crash mid-write
    log._fh.flush()
    loaded = read_log(path)
    assert len(list(loaded.of_type("request"))) == 1
    assert loaded.warnings == ["line 3: unreadable (torn write?), skipped"]


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
