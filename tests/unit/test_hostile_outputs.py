"""Files (docs/hostile-input.md, "Files"): an output never replaces a file the command
reads, nor someone's file without --force; an input that is not a regular file is refused at
once; a line nested too deep, a record without a type, a reused log and a format that is not
a number are each said, never a traceback. Real `llmtop` processes on hand-made logs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmtop.engines.hosts import HostError, parse_address
from llmtop.files import output_problem, readable_by_others
from llmtop.sessions.records.log import LogError, SessionLog, read_log
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from llmtop.testing.scripted import ScriptedUpstream

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def llmtop(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmtop", *argv], env=ENV, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)


def session_log(path: Path) -> Path:
    log = SessionLog(path, {"kind": "session", "model": "m", "engine": "ollama"})
    log.write_raw({"type": "request", "id": 1, "status": "ok", "model": "m", "prompt": "p",
                   "metrics": {"ttft_ms": 5.0}})
    log.close()
    return path


def test_report_never_writes_over_the_log_it_reads(tmp_path):
    log = session_log(tmp_path / "v.jsonl")
    before = log.read_bytes()
    link = tmp_path / "link.md"
    link.symlink_to(log)
    for out in (log, link):
        done = llmtop("report", str(log), "--out", str(out), "--force")
        assert done.returncode == 2
        assert done.stderr.strip() == (f"llmtop report: {out} is {log}, which this command reads: "
                                       "the report would replace it; write it to another file")
    assert log.read_bytes() == before  # exit 0 and a replaced log before


def test_report_replaces_someones_file_only_with_force(tmp_path):
    log = session_log(tmp_path / "v.jsonl")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    done = llmtop("report", str(log), "--out", str(notes))
    assert done.returncode == 2
    assert done.stderr.strip() == (f"llmtop report: {notes} exists and is not an llmtop report: "
                                   "writing the report would replace it; choose another --out, "
                                   "or add --force to replace it")
    assert notes.read_text() == "my notes\n"
    assert llmtop("report", str(log), "--out", str(notes), "--force").returncode == 0
    assert notes.read_text().startswith("# llmtop session report")
    # llmtop's own earlier report is replaced without a word: md here, every format below
    again = llmtop("report", str(log), "--out", str(notes))
    # the report says where it went, as compare and bench do (new-user pass D29)
    assert again.returncode == 0 and again.stderr.strip() == f"llmtop report: written to {notes}"
    report = build(read_log(log))
    for fmt in ("md", "csv", "json", "html"):
        out = tmp_path / f"r.{fmt}"
        out.write_text(render(report, fmt))
        assert output_problem(out, [log]) is None, fmt


def test_another_session_log_is_a_measurement_not_replaced(tmp_path):
    log = session_log(tmp_path / "v.jsonl")
    other = session_log(tmp_path / "w.jsonl")
    assert output_problem(other, [log]) == (
        f"{other} exists and is an llmtop session log (a measurement): writing the report "
        "would replace it; choose another --out, or add --force to replace it")
    done = llmtop("compare", str(log), str(other), "--out", str(other), "--force")
    assert done.returncode == 2 and "which this command reads" in done.stderr


def test_bench_refuses_an_out_that_is_its_log_before_measuring(tmp_path):
    log = session_log(tmp_path / "b.jsonl")
    with ScriptedUpstream() as up:
        done = llmtop("bench", "--engine", "ollama", "--host", up.url, "--model", "timed",
                      "--log", str(log), "--out", str(log), "--preflight-duration", "0")
        assert up.recorder.requests == []  # refused before any request
    assert done.returncode == 2 and "which this command reads" in done.stderr


def test_a_log_is_never_appended_to_someones_file(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me\n")
    with pytest.raises(LogError, match="exists and is not an llmtop session log"):
        SessionLog(notes, {"kind": "session"})
    assert notes.read_text() == "keep me\n"


def test_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    for argv in (["report", str(fifo)], ["compare", str(fifo), str(fifo)]):
        done = llmtop(*argv)  # hung silently before (the timeout would fire)
        assert done.returncode == 2
        assert f"{fifo} is a FIFO (named pipe), not a file" in done.stderr
    done = llmtop("report", str(tmp_path))
    assert done.returncode == 2 and "is a folder, not a file" in done.stderr


def test_deep_nesting_and_typeless_lines_are_skipped_with_a_word(tmp_path):
    log = session_log(tmp_path / "v.jsonl")
    with log.open("a") as fh:
        fh.write("[" * 100_000 + "]" * 100_000 + "\n")
        fh.write('{"a": ' * 100_000 + "1" + "}" * 100_000 + "\n")
        fh.write("{}\n" + json.dumps({"type": 5}) + "\n")
    read = read_log(log)
    assert [r.id for r in read.requests] == [1]
    lines = len(log.read_text().splitlines())
    assert list(read.warnings) == [
        f"line {lines - 3}: JSON nested too deep to be a record, skipped",
        f"line {lines - 2}: JSON nested too deep to be a record, skipped",
        (f"line {lines - 1}: a JSON object with no type (every record names its type as a "
         "string), skipped"),
        (f"line {lines}: a JSON object with type 5 (every record names its type as a string), "
         "skipped"),
    ]
    for argv in (["report", str(log)], ["sessions", str(tmp_path)]):
        done = llmtop(*argv)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "v.jsonl" in llmtop("sessions", str(tmp_path)).stdout  # listed, not lost


def test_a_reused_log_is_refused_and_a_joined_one_says_it_holds_two(tmp_path):
    log = session_log(tmp_path / "v.jsonl")
    before = log.read_bytes()
    # new-user pass N26: a second run with the same --log appended to it, silently
    with pytest.raises(LogError) as err:
        session_log(log)
    assert str(err.value) == (f"{log} already holds a session log: a second session in it "
                              "would be read by no report; choose a new file for --log (or "
                              "remove that one)")
    assert log.read_bytes() == before  # untouched
    # two logs joined by hand (cat a b > c): the reader still says what it reads
    log.write_bytes(before + session_log(tmp_path / "w.jsonl").read_bytes())
    read = read_log(log)
    assert [r.id for r in read.requests] == [1]
    assert list(read.warnings) == [
        ("line 4: a second session starts here (the log was reused with --log); this reads the "
         "first session only: give each run its own --log")]


def test_a_format_that_is_a_string_is_not_an_upgrade(tmp_path):
    log = tmp_path / "s.jsonl"
    log.write_text(json.dumps({"type": "header", "format": "1", "kind": "session"}) + "\n")
    with pytest.raises(LogError) as err:
        read_log(log)
    assert str(err.value) == (f'{log}: its header\'s format is "1", not a whole number: not a '
                              'log llmtop wrote (llmtop writes "format": 1)')


def test_a_token_file_others_can_read_is_warned_of(tmp_path):
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123\n")
    token.chmod(0o644)
    assert readable_by_others(token) == (
        f"the token file {token} can be read by every user (mode 644): anyone who reads it can "
        f"read this machine's probes; `chmod 600 {token}`")
    token.chmod(0o640)
    assert "can be read by its group (mode 640)" in readable_by_others(token)
    token.chmod(0o600)
    assert readable_by_others(token) is None


def test_a_host_name_longer_than_dns_allows_is_refused():
    with pytest.raises(HostError) as err:
        parse_address("a" * 300)
    assert "the host name is 300 characters: a DNS name is at most 253 (RFC 1035)" in str(
        err.value)
    with pytest.raises(HostError, match="a part of the host name between dots is 64 characters: "
                       "at most 63"):
        parse_address("b" * 64 + ".example:11434")
    assert parse_address("a" * 63 + ".example").url == f"http://{'a' * 63}.example:11434"
