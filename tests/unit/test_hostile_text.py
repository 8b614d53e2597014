"""Text from outside is data (docs/hostile-input.md, "Text from outside", "Encodings"): a
model's answer, a server's error, a process name or a log's model name is shown with its
control characters as escapes in every output, never obeyed; a stdout that cannot encode a
character, or a lone UTF-16 surrogate, never ends a command in a traceback or loses a record.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.text import Text

from llmtop.probes.processes import ProcessProbe
from llmtop.safetext import SafeStream, json_line, one_line, visible, without_surrogates
from llmtop.sessions.records.log import SessionLog, read_log
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from llmtop.testing.scripted import ESCAPES, ScriptedUpstream
from llmtop.tui.state.wrap import visible_text
from llmtop.tui.widgets.apps_view import apps_text

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
# what a terminal obeys: C0 but tab and newline, DEL, C1, bidi controls; and lone surrogates
OBEYED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
HOSTILE_NAME = "<script>alert(1)</script>\x1b]0;PWNED\x07\x1b[2J"


@pytest.fixture(scope="module")
def upstream():
    with ScriptedUpstream(also_installed=("escapes", "escapes-error")) as server:
        yield server


def llmtop(*argv: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "llmtop", *argv], env={**ENV, **env},
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL, check=False)


def test_visible_shows_every_control_character_as_its_escape() -> None:
    assert visible("a\x1b]0;t\x07b") == "a\\x1b]0;t\\x07b"
    assert visible("\x9b2J") == "\\u009b2J"  # C1 CSI, one character
    assert visible("x\u202ey") == "x\\u202ey"  # right-to-left override
    assert visible("half \ud800") == "half \\ud800"
    assert visible("two\nlines\tand a tab, é, 日本, 🙂") == "two\nlines\tand a tab, é, 日本, 🙂"
    assert visible("dos\r\nline\rback") == "dos\nline\\x0dback"
    assert one_line("a\nb\tc" + "x" * 300, limit=20) == "a\\x0ab\\x09c" + "x" * 8 + "…"


def test_no_control_character_survives_a_seeded_fuzz() -> None:
    rng = random.Random(27)
    pool = [chr(c) for c in (*range(0x20), *range(0x7f, 0xa0), 0x202e, 0x2066, 0xd800,
                             0xdfff)] + list("ab é日🙂\\[];")
    for _ in range(2000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 40)))
        shown = visible(text)
        assert not OBEYED.search(shown), repr(text)
        assert not OBEYED.search(one_line(text)) and "\n" not in one_line(text)
        shown.encode("utf-8")  # no lone surrogate left


def test_a_safe_stream_never_raises_on_an_encoding_that_lacks_a_character() -> None:
    raw = io.TextIOWrapper(io.BytesIO(), encoding="cp1252")
    out = SafeStream(raw)
    out.write("≈ 5 ms · ok\x1b[2J\ud800\n")
    out.flush()
    written = raw.buffer.getvalue()  # type: ignore[attr-defined]
    assert written == b"? 5 ms \xb7 ok\\x1b[2J\\ud800\n"  # "≈" is not in cp1252; "·" is 0xb7


def test_a_lone_surrogate_is_kept_as_u_fffd_and_the_log_line_is_valid_utf8(tmp_path) -> None:
    assert without_surrogates({"a\udfff": ["x\ud800"]}) == {"a\ufffd": ["x\ufffd"]}
    assert json_line({"t": "x\ud800"}) == '{"t": "x\\ud800"}'
    log = SessionLog(tmp_path / "s.jsonl", {"kind": "session", "model": "m\ud800"})
    log.close()
    assert read_log(log.path).header.model == "m\ufffd"


def test_a_probe_panel_section_shows_a_process_name_as_text() -> None:
    section = Text("top apps\n", style="bold")
    section.append("evil\x1b]0;PWNED\x07\x9b2J", style="red")
    shown = visible_text(section)
    assert shown.plain == "top apps\nevil\\x1b]0;PWNED\\u009b2J"  # Rich drops the BEL itself
    assert not OBEYED.search(shown.plain)
    assert any(str(s.style) == "red" for s in shown.spans)


def _hostile_log(path: Path) -> Path:
    log = SessionLog(path, {"kind": "session", "model": HOSTILE_NAME, "engine": HOSTILE_NAME})
    log.write_raw({"type": "request", "id": 1, "status": "error", "model": HOSTILE_NAME,
                   "prompt": "p", "error": "boom\x1b]52;c;eA==\x07", "content": "\x1b[2Jx",
                   "metrics": {"ttft_ms": 5.0}})
    log.close()
    return path


@pytest.mark.parametrize("fmt", ["md", "csv", "html"])
def test_reports_show_a_hostile_model_name_as_text(tmp_path, fmt) -> None:
    text = render(build(read_log(_hostile_log(tmp_path / "h.jsonl"))), fmt)
    assert "\x1b" not in text
    assert "<script>alert(1)" not in text  # md: "&lt;script>", html: escaped
    assert "\\x1b]52;c;eA==\\x07" in text  # the request's error, shown as text
    if fmt == "md":
        assert "# llmtop session report — &lt;script>alert(1)&lt;/script>\\x1b]0;PWNED" in text


def test_report_sessions_and_compare_messages_show_escapes(tmp_path) -> None:
    log = _hostile_log(tmp_path / "h.jsonl")
    for argv in (["report", str(log)], ["sessions", str(tmp_path)],
                 ["compare", str(log), str(log)]):
        done = llmtop(*argv)
        assert b"Traceback" not in done.stderr, argv
        assert b"\x1b" not in done.stdout + done.stderr, argv


def test_run_on_cp1252_stdout_keeps_the_record(upstream, tmp_path) -> None:
    for extra in ([], ["--json"]):
        log = tmp_path / f"run{len(extra)}.jsonl"
        done = llmtop("run", "--engine", "ollama", "--host", upstream.url, "--model", "escapes",
                      "--prompt", "hi", "--log", str(log), *extra, PYTHONIOENCODING="cp1252")
        assert done.returncode == 0, done.stderr.decode("cp1252")
        assert b"Traceback" not in done.stderr and b"\x1b" not in done.stdout + done.stderr
        records = [json.loads(line) for line in log.read_text().splitlines()]
        (request,) = [r for r in records if r["type"] == "request"]
        assert request["content"] == "".join(ESCAPES).replace("\ud800", "\ufffd")


def test_a_servers_error_text_is_shown_as_text_on_stderr(upstream, tmp_path) -> None:
    done = llmtop("run", "--engine", "ollama", "--host", upstream.url, "--model", "escapes-error",
                  "--prompt", "hi", "--log", str(tmp_path / "e.jsonl"))
    assert b"\x1b" not in done.stderr and b"\\x1b]0;PWNED\\x07" in done.stderr


def test_a_real_process_named_with_an_escape_is_shown_as_text(tmp_path) -> None:
    # any local user can name a process: here by the name of the program's link
    name = "\x1b]0;PWN\x07ev"
    link = tmp_path / name
    link.symlink_to(os.path.realpath(sys.executable))
    child = subprocess.Popen([str(link), "-c", "while True: pass"], stdin=subprocess.DEVNULL)
    try:
        probe = ProcessProbe()
        probe.sample()
        time.sleep(0.5)  # a CPU reading needs two samples; this one burns a core
        sample = probe.sample()
        app = next(a for a in sample.apps if child.pid in a.pids)
        assert "\x1b" in app.app  # the raw name, as the probe (and the log) keep it
        shown = visible_text(apps_text(sample, 1.0)).plain
        assert "\x1b" not in shown and "\\x1b]0;PWN" in shown
    finally:
        child.kill()
        child.wait(timeout=10)


def test_the_watch_screen_shows_names_and_text_from_outside_as_data() -> None:
    # a local process may name itself with an escape (any user can), and a client's model
    # name and the answer are an app's text: the watch screen's cells and detail show the
    # ESC as the four characters \x1b, never the byte itself
    from llmtop.tui.state.watch_view import cells, detail_lines

    row = {"id": 1, "caller": "evil\x1b]0;pwned\x07", "model": "m\x1b[2J", "status": "ok",
           "prompt": "hi", "content": "answer \x1b]52;c;aGk=\x07 done"}
    shown = " ".join(cells(row)) + "\n".join(detail_lines(row, show_text=True))
    assert "\x1b" not in shown and "\x07" not in shown
    assert "evil\\x1b]0;pwned\\x07" in shown and "m\\x1b[2J" in shown
    assert "answer \\x1b]52;c;aGk=\\x07 done" in shown


def test_json_through_the_safe_stream_stays_json() -> None:
    # `--json` output (preflight, sessions, watch, reports: json.dumps with ensure_ascii
    # False, which escapes C0 itself) goes through SafeStream's `visible`: every character
    # it changes must become an escape JSON reads, so the line still parses to the same data
    import json

    pool = [chr(c) for c in (*range(0x20), *range(0x7f, 0xa0), 0x061c, 0x200e, 0x2028,
                             0x202e, 0x2066, 0xd800, 0xdfff)]
    for ch in pool:
        line = json.dumps({"name": f"a{ch}b"}, ensure_ascii=False)
        assert json.loads(visible(line)) == {"name": f"a{ch}b"}, repr(ch)


FORMULA = '=HYPERLINK("http://evil.example","x")'


def test_a_csv_cell_from_outside_never_starts_a_formula(tmp_path) -> None:
    import csv as csv_module

    from llmtop.sessions.reports.csvcells import cell

    # the OWASP rule, by hand: a leading = + - @ tab CR gets "'"; a plain number stays
    assert [cell(v) for v in ("=1+1", "+cmd", "-2+3", "@SUM(A1)", "\t=x", "\r=x")] == [
        "'=1+1", "'+cmd", "'-2+3", "'@SUM(A1)", "'\t=x", "'\r=x"]
    assert [cell(v) for v in ("-3.5", "+2", "-1e-05", ".5", -3.5, None, "qwen3", "a=b")] == [
        "-3.5", "+2", "-1e-05", ".5", -3.5, None, "qwen3", "a=b"]
    log = SessionLog(tmp_path / "w.jsonl", {"kind": "watch", "watch": {"pairs": []}})
    log.write_raw({"type": "request", "id": 1, "status": "ok", "model": FORMULA,
                   "caller": "@SUM(1+1)", "endpoint": "/api/chat",
                   "metrics": {"ttft_ms": 3.5, "e2e_ms": 10.0}})
    log.close()
    done = llmtop("report", str(tmp_path / "w.jsonl"), "--format", "csv")
    assert done.returncode == 0, done.stderr
    rows = list(csv_module.reader(done.stdout.decode().splitlines()))
    assert rows[0][:2] == ["caller", "model"]
    assert rows[1][:2] == ["'@SUM(1+1)", "'" + FORMULA]  # read back as text, quotes and all
    # TTFT p50 ms of the one request: a number, as it was (a negative TTFT is no
    # measurement, and the reader skips its record: the "-3.5" cell rule is checked above)
    assert rows[1][4] == "3.5"
    assert "'=HYPERLINK(\"\"http://evil.example\"\",\"\"x\"\")" in done.stdout.decode()


def test_a_session_reports_csv_keeps_negative_numbers_as_numbers(tmp_path) -> None:
    import csv as csv_module

    log = SessionLog(tmp_path / "s.jsonl", {"kind": "session", "model": FORMULA})
    log.write_raw({"type": "request", "id": 1, "status": "ok", "model": FORMULA, "prompt": "p",
                   "phase": "measure", "index": 0, "prompt_tokens_target": 50,
                   "metrics": {"ttft_ms": 5.0, "overhead_ms": -3.5}})
    log.close()
    done = llmtop("report", str(tmp_path / "s.jsonl"), "--format", "csv")
    assert done.returncode == 0, done.stderr
    header, row = list(csv_module.reader(done.stdout.decode().splitlines()))[:2]
    assert row[header.index("overhead_ms")] == "-3.5"  # no apostrophe: still a number
    assert row[header.index("ttft_ms")] == "5.0"
