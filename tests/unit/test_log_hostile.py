"""Session logs that cannot be read or written as they should: bounded reading of hostile
files, bad lines counted and skipped, and a log that fills the disk mid-run."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from llmtop.exitcodes import ExitCode
from llmtop.sessions.records import log as session_log
from llmtop.sessions.records.log import LogError, SessionLog, read_log
from llmtop.testing.scripted import ScriptedUpstream

HEADER = json.dumps({"type": "header", "format": 1, "kind": "session"})
GOOD = json.dumps({"type": "request", "id": 1, "status": "ok", "metrics": {"ttft_ms": 5.0}})


def test_an_endless_file_is_refused_in_bounded_memory(monkeypatch, tmp_path) -> None:
    # a first line that never ends: the reader gives up after MAX_LINE_BYTES, not at OOM;
    # /dev/zero itself is refused before reading: a device, not a file (files.not_regular)
    monkeypatch.setattr(session_log, "MAX_LINE_BYTES", 1 << 20)
    zeros = tmp_path / "zeros.jsonl"
    zeros.write_bytes(b"\0" * (3 << 20))
    with pytest.raises(LogError) as err:
        read_log(zeros)
    assert str(err.value) == (f"{zeros} does not start with an llmtop header record (its "
                              "first line is over 1 MiB)")
    with pytest.raises(LogError) as err:
        read_log("/dev/zero")
    assert str(err.value) == ("/dev/zero is a device, not a file: give the path of a session "
                              "log (a .jsonl file)")


def test_json_that_is_not_a_record_is_counted_and_skipped(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(session_log, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(session_log, "MAX_SKIP_BYTES", 5000)
    bad_type = json.dumps({"type": "request", "id": "one", "status": "ok"})
    lines = [HEADER, "[1,2]", "null", GOOD, bad_type, "x" * 1500, "{torn"]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    log = read_log(path)
    assert [r.id for r in log.requests] == [1]
    assert [w.split(":")[0] for w in log.warnings] == [
        "line 2", "line 3", "line 5", "line 6", "line 7"]
    assert log.warnings[0] == "line 2: not a JSON object, skipped"
    assert log.warnings[3] == "line 6: longer than 0 MiB (not a record), skipped"


def test_an_unended_line_after_the_header_stops_reading(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(session_log, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(session_log, "MAX_SKIP_BYTES", 4000)
    path = tmp_path / "s.jsonl"
    path.write_text(HEADER + "\n" + GOOD + "\n" + "y" * 10_000)  # no newline at the end
    log = read_log(path)
    assert [r.id for r in log.requests] == [1]
    assert log.warnings[0].startswith("line 3: no end of line within")
    assert log.warnings[0].endswith("the rest of the file was not read")


def test_report_names_ten_bad_lines_and_counts_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join([HEADER, *["[0]"] * 25, GOOD]) + "\n")
    p = subprocess.run([sys.executable, "-m", "llmtop", "report", str(path)],
                       capture_output=True, text=True, check=False, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 11
    assert lines[-1] == f"llmtop report: {path}: … 15 more bad lines skipped (25 in all)"


def test_a_write_that_fails_stops_the_log_without_raising(tmp_path: Path) -> None:
    log = SessionLog(tmp_path / "s.jsonl", {"kind": "session"})
    log._fh = open(os.devnull, "w")  # noqa: SIM115 - swapped below for a failing one
    log._fh.close()
    log._fh = open("/dev/full", "w")  # noqa: SIM115 - every flush fails with ENOSPC
    assert log.write_raw({"type": "request", "id": 1}) is False
    assert log.write_raw({"type": "probe"}) is False
    assert log.incomplete is not None
    assert log.incomplete.startswith("No space left on device: the session log ")
    assert "stops after its first 1 records (intact); record 2 (request)" in log.incomplete
    assert (log.written, log.lost) == (1, 2)
    log.close()  # never raises


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="no file size limit here")
def test_run_prints_its_result_and_says_where_a_full_log_stops(tmp_path: Path) -> None:
    def run(log_path: Path, max_bytes: int | None = None) -> subprocess.CompletedProcess[str]:
        def limit() -> None:  # in the child: a file size limit gives EFBIG, not a signal
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

        return subprocess.run(
            [sys.executable, "-m", "llmtop", "--host", engine.url, "run", "--model", "ok",
             "--prompt", "hi", "--log", str(log_path)], capture_output=True, text=True,
            check=False, timeout=60, preexec_fn=limit if max_bytes else None)

    log_path = tmp_path / "s.jsonl"
    with ScriptedUpstream() as engine:
        # the header's size depends on this machine: measure it, then allow just that much
        assert run(tmp_path / "full.jsonl").returncode == 0
        header_bytes = (tmp_path / "full.jsonl").read_bytes().index(b"\n") + 1
        p = run(log_path, header_bytes + 10)
    assert p.returncode == ExitCode.LOG_INCOMPLETE, p.stderr
    assert "Hello!" in p.stdout and "TTFT" in p.stdout  # the result is still printed
    errors = [line for line in p.stderr.splitlines() if line.startswith("llmtop:")]
    assert len(errors) == 1 and "stops after its first" in errors[0], p.stderr
    assert "Traceback" not in p.stderr
    assert read_log(log_path).header.kind == "session"  # what was written still reads
