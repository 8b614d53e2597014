"""`llmtop sessions`: the saved logs with their verdicts; an older or foreign log is listed
with the reason it cannot be read."""

from __future__ import annotations

import json
import os

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
    assert second.path == str(old) and second.verdict == "unreadable"
    assert "session-log format 99, written by llmtop 9.0" in second.problem


def test_a_missing_file_is_an_unreadable_entry(tmp_path):
    assert entry(tmp_path / "gone.jsonl").problem.startswith("cannot read")


def test_the_command_prints_a_table_or_json(tmp_path, capsys):
    ok, _old = _logs(tmp_path)
    assert cli.main(["sessions", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| date | engine | model | kind | requests (ok) | verdict | log |")
    assert "| embedded | gemma3:270m | bench | 13 (12) | clean |" in lines[2]
    assert "unreadable: " in lines[3]
    assert cli.main(["sessions", "--json", str(ok)]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert item["verdict"] == "clean"
    assert cli.main(["sessions", str(tmp_path / "nowhere")]) == 2
