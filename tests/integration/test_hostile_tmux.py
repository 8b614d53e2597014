"""A model answer full of terminal control sequences, shown by `llmtop run` and by the TUI in
a real terminal (tmux): the window title stays, the screen is not cleared, the clipboard is
not written, and the sequences are shown as text (docs/hostile-input.md, "Text from
outside"). The scripted "escapes" model streams them (llmtop/testing/scripted.py, ESCAPES).

tmux is the terminal: it keeps the pane's title (set by OSC 0/2), and with `set-clipboard on`
an OSC 52 becomes a paste buffer, so each effect is read back with `display -p` and
`list-buffers`. Each test uses its own tmux server (`-L`), killed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from llmtop.testing.scripted import ESCAPES, ScriptedUpstream

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 40

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture(scope="module")
def upstream():
    with ScriptedUpstream(also_installed=("escapes", "escapes-error")) as server:
        yield server


class Tmux:
    """One private tmux server with one 120x40 window running `command`."""

    def __init__(self, command: str) -> None:
        self.name = f"llmtop-test-{uuid.uuid4().hex[:8]}"
        self.tmux("-f", "/dev/null", "new-session", "-d", "-x", "120", "-y", "40", "-s", "t",
                  command)
        self.tmux("set", "-g", "set-clipboard", "on")
        self.tmux("set", "-g", "allow-rename", "on")
        self.tmux("set", "-g", "remain-on-exit", "on")

    def tmux(self, *argv: str) -> str:
        return subprocess.run(["tmux", "-L", self.name, *argv], capture_output=True, text=True,
                              timeout=10, check=False).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", "t")

    def title(self) -> str:
        return self.tmux("display", "-p", "-t", "t", "#{pane_title}").strip()

    def wait_for(self, text: str) -> str:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never shown; the screen:\n{self.screen()}")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.name, "kill-server"], capture_output=True, timeout=10,
                       check=False)


def shell(*argv: str, before: str) -> str:
    env = f"PYTHONPATH={ROOT} TERM=xterm-256color"
    return (f"printf '%s\\n' {before}; env {env} {sys.executable} -m llmtop "
            + " ".join(argv) + "; printf 'rc=%s\\n' $?; sleep 60")


def test_run_shows_the_escapes_and_obeys_none(upstream, tmp_path):
    log = tmp_path / "run.jsonl"
    term = Tmux(shell("run", "--engine", "ollama", "--host", upstream.url, "--model", "escapes",
                      "--prompt", "hi", "--log", str(log), before="MARKER-BEFORE"))
    try:
        title = term.title()
        screen = term.wait_for("rc=")
        assert "rc=0" in screen
        assert "MARKER-BEFORE" in screen  # ESC [2J ESC [H did not clear the screen
        assert "\\x1b]0;PWNED\\x07" in screen  # shown as text
        assert "\\x1b]52;c;cHduZWQ=" in screen and "\\u009b31m" in screen and "\\u202e" in screen
        assert "PWNED" not in term.title() and term.title() == title
        assert term.tmux("list-buffers") == ""  # no OSC 52 clipboard write
    finally:
        term.kill()
    request = next(r for r in map(json.loads, log.read_text().splitlines())
                   if r["type"] == "request")
    # the raw answer kept in the log; the lone surrogate as U+FFFD (safetext.without_surrogates)
    assert request["content"] == "".join(ESCAPES).replace("\ud800", "\ufffd")


def test_tui_shows_the_escapes_and_obeys_none(upstream, tmp_path):
    log = tmp_path / "tui.jsonl"
    term = Tmux(shell("--engine", "ollama", "--host", upstream.url, "--model", "escapes",
                      "--log", str(log), before="MARKER-BEFORE"))
    try:
        title = term.title()
        term.wait_for("ready — type a prompt")
        term.tmux("send-keys", "-t", "t", "hi", "Enter")
        screen = term.wait_for("PWNED")
        assert "\\x1b]0;PWNED" in screen
        deadline = time.monotonic() + TIMEOUT_S
        while '"type": "request"' not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "the request was never logged"
            time.sleep(0.2)
        screen = term.screen()
        assert "\\x1b[2J" in screen and "\\u202e" in screen
        assert "PWNED" not in term.title() and term.title() == title
        assert term.tmux("list-buffers") == ""
        term.tmux("send-keys", "-t", "t", "C-q")
        screen = term.wait_for("rc=")
        assert "MARKER-BEFORE" in screen  # the TUI's own screen was its alternate screen
    finally:
        term.kill()
    assert os.path.getsize(log) > 0
