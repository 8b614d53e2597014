"""Limits that fit the machine, signals that always work (docs/hostile-input.md, "Limits and
signals"): `load`'s levels and durations are range-checked with the limit said, and SIGINT,
SIGTERM and SIGHUP, however often they come, end a command the way the first one does, the
request in flight logged.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmtop.sessions.runners.load import config as load_config
from llmtop.sessions.runners.load.config import parse_level_duration, parse_levels
from llmtop.testing.scripted import ScriptedUpstream

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
TIMEOUT_S = 30


def test_concurrency_beyond_the_machine_is_refused_with_the_limit(monkeypatch):
    assert parse_levels("1,1024", True) == (1, 1024)
    for text in ("100000", "1e9"):
        with pytest.raises(ValueError) as err:
            parse_levels(text, True)
        assert str(err.value).startswith(f"level {text!r} is more users than this machine can "
                                         "run: at most ")
    # an open-file limit of 264: (264 - 64) // 2 = 100 users
    monkeypatch.setattr(resource, "getrlimit", lambda _: (264, 4096))
    assert load_config.max_users() == 100
    with pytest.raises(ValueError, match="at most 100 "):
        parse_levels("101", True)
    with pytest.raises(ValueError, match="more than 1000 requests/s"):
        parse_levels("1e6", False)


def test_a_duration_too_long_is_too_long_not_unreadable():
    assert parse_level_duration("2h") == 7200.0
    with pytest.raises(ValueError) as err:
        parse_level_duration("99999999h")
    assert str(err.value) == "'99999999h' is too long: a level lasts at most 24h (86400 s)"
    with pytest.raises(ValueError, match="is not a duration"):
        parse_level_duration("forever")


def test_load_says_the_limit_and_sends_nothing():
    with ScriptedUpstream() as up:
        done = subprocess.run(
            [sys.executable, "-m", "llmtop", "load", "--engine", "ollama", "--host", up.url,
             "--model", "ok", "--concurrency", "100000"],
            env=ENV, capture_output=True, text=True, timeout=60, check=False)
        assert up.recorder.requests == []
    assert done.returncode == 2
    assert "argument --concurrency: level '100000' is more users than this machine" in done.stderr


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_repeated_signals_never_lose_the_request_in_flight(tmp_path, sig, code):
    log = tmp_path / "run.jsonl"
    with ScriptedUpstream() as up:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmtop", "run", "--engine", "ollama", "--host", up.url,
             "--model", "slow", "--prompt", "hi", "--log", str(log)],
            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert up.recorder.started.wait(TIMEOUT_S)
        for _ in range(4):  # four, 50 ms apart: the first stops, the rest come mid-cleanup
            proc.send_signal(sig)
            time.sleep(0.05)
        _, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == code  # -2 (killed by SIGINT) before
    assert err.decode().strip().splitlines()[-1] == f"llmtop run: stopped by {sig.name}"
    # what arrived is said before it (new-user pass N29), here nothing: "slow" sends no text
    assert "cancelled before the first chunk: no figure" in err.decode()
    requests = [r for r in map(json.loads, log.read_text().splitlines())
                if r["type"] == "request"]
    assert [r["status"] for r in requests] == ["cancelled"]
