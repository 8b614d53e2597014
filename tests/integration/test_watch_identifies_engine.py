"""`llmtop watch` (a real child process, probes on) identifies the engine behind its
`--upstream` by the socket listening on that port, in front of a user's `llmtop engine`
(the console script), the embedded engine llmtop starts (`python -m llmtop engine`) and
llama-server: it says so when it starts, and its logged probe samples count the engine's
processes as the engine (category "measured engine"), never as another llmtop or background."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmtop.probes.catalogue import Category
from llmtop.servers.child import EmbeddedProcess, free_port
from llmtop.sessions.records.log import read_log
from llmtop.testing.llama_server import LlamaServerProcess, missing
from tests.conftest import MODEL

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
WAIT_S = 60.0


def _wait_until(what: str, predicate, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")


def _up(url: str, path: str) -> bool:
    try:
        return httpx.get(url + path, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def console_engine() -> Iterator[tuple[str, int]]:
    """A user's `llmtop engine` started as the console script: (url, pid)."""
    script = Path(sys.executable).with_name("llmtop")
    port = free_port()
    proc = subprocess.Popen([str(script), "engine", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until("llmtop engine answering", lambda: _up(url, "/api/version"))
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def _watch_and_check(tmp_path: Path, upstream: str, engine_pid: int,
                     openai: bool = False) -> list[dict]:
    """Run the watch in front of the engine, one generation through it; checks that the
    watch named the engine, and returns the engine's apps as the logged samples list them."""
    port = free_port()
    log = tmp_path / f"w{port}.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtop", "watch", "--json", "--listen", f"127.0.0.1:{port}",
         "--upstream", upstream, "--log", str(log)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert proc.stderr is not None
        said = [proc.stderr.readline() for _ in range(3)]  # → pair, log, engine
        (line,) = [s for s in said if "engine:" in s]
        assert f"{upstream}: engine: " in line and str(engine_pid) in line, said
        assert "identified by the owner of the listening socket" in line

        _wait_until("the first probe sample logged", lambda: _samples(log, 1))
        _generate(f"http://127.0.0.1:{port}", openai)  # the engine busy for a few samples
        done = len(_samples(log, 1))
        probes = _wait_until("a probe sample after the request",
                             lambda: _samples(log, done + 1))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)
    assert read_log(log).header.kind == "watch"
    # the first sample primes the CPU readings; an idle engine may be left out of a logged
    # sample's busiest apps, so each sample is judged by the apps it lists
    apps = [a for p in probes for a in (p.get("processes") or {}).get("apps", [])]
    return [a for a in apps if engine_pid in a.get("pids", [])]


def assert_booked_to_the_engine(engine_apps: list[dict]) -> None:
    """The engine's processes are the measured engine (never background), read working."""
    engine = Category.ENGINE.value  # "measured engine"
    assert engine_apps and all(a["category"] == engine for a in engine_apps), engine_apps
    assert any((a.get("cpu_percent") or 0) > 0 for a in engine_apps)  # it was read working


def _generate(url: str, openai: bool) -> None:
    """One short generation through the watch (32 tokens: about a second on 2 cores)."""
    messages = [{"role": "user", "content": "Count from one to forty in words."}]
    if openai:
        body = {"model": "m", "messages": messages, "max_tokens": 32, "temperature": 0}
        resp = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
    else:
        body = {"model": MODEL, "messages": messages, "stream": False,
                "options": {"num_predict": 32, "temperature": 0}}
        resp = httpx.post(url + "/api/chat", json=body, timeout=120)
    assert resp.status_code == 200, resp.text[:300]


def _samples(log: Path, n: int) -> list[dict]:
    """The log's probe records as written (each app with its pids), once there are n."""
    try:
        lines = log.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    probes = []
    for raw in lines:
        with contextlib.suppress(ValueError):
            record = json.loads(raw)
            if isinstance(record, dict) and record.get("type") == "probe":
                probes.append(record)
    return probes if len(probes) >= n else []


def test_in_front_of_a_users_llmtop_engine(tmp_path, console_engine):
    url, pid = console_engine
    engine_apps = _watch_and_check(tmp_path, url, pid)
    assert engine_apps, "the watch's probes named none of the engine's processes"
    assert_booked_to_the_engine(engine_apps)


def test_in_front_of_the_embedded_engine(tmp_path):
    child = EmbeddedProcess()
    asyncio.run(child.start())
    try:
        assert child.pid is not None
        assert_booked_to_the_engine(_watch_and_check(tmp_path, child.host, child.pid))
    finally:
        child.stop()


@pytest.mark.skipif(missing() is not None, reason=missing() or "")
def test_in_front_of_llama_server(tmp_path):
    server = LlamaServerProcess(parallel=1, ctx_size=2048)
    asyncio.run(server.start())
    try:
        assert server.pid is not None
        assert_booked_to_the_engine(
            _watch_and_check(tmp_path, server.host, server.pid, openai=True))
    finally:
        server.stop()
