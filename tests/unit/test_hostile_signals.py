"""SIGTERM and SIGHUP (docs/hostile-input.md, "Signals"): `llmtop run` and the TUI end as on
Ctrl+C (the request in flight logged as cancelled, child servers stopped, one line, exit
128 + signal); `llmtop relay` stops within about a second, mid-stream too.

Real processes against the scripted upstream (in this process), whose recorder says when a
stream has started, so each signal is sent while a request is in flight.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from time import perf_counter

import httpx
import psutil
import pytest

from llmtop.commands.stopping import run_stoppable
from llmtop.servers.child import free_port
from llmtop.testing.scripted import ScriptedUpstream

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def upstream():
    with ScriptedUpstream() as server:
        yield server


def llmtop(*argv: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "llmtop", *argv],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        **kw,
    )


def requests_in(log: Path) -> list[dict]:
    return [r for r in map(json.loads, log.read_text().splitlines()) if r.get("type") == "request"]


def children_of(pid: int) -> list[psutil.Process]:
    """Child servers started for `pid` (they carry `--parent-pid PID`), still running."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "--parent-pid" in cmd and cmd[cmd.index("--parent-pid") + 1:][:1] == [str(pid)]:
            found.append(p)
    return found


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_run_ends_as_on_ctrl_c(upstream, tmp_path, sig, code):
    upstream.recorder.reset()
    log = tmp_path / "session.jsonl"
    proc = llmtop("run", "--engine", "ollama", "--host", upstream.url, "--model", "slow",
                  "--via", "relay", "--prompt", "hi", "--log", str(log))
    assert upstream.recorder.started.wait(TIMEOUT_S)  # streaming, through a child relay
    relays = children_of(proc.pid)
    assert len(relays) == 1
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == code
    assert err.decode().strip().splitlines()[-1] == f"llmtop run: stopped by {sig.name}"
    assert [r["status"] for r in requests_in(log)] == ["cancelled"]
    assert not relays[0].is_running() or relays[0].status() == psutil.STATUS_ZOMBIE


def test_bench_ends_as_on_ctrl_c(upstream, tmp_path):
    upstream.recorder.reset()
    log = tmp_path / "bench.jsonl"
    proc = llmtop("bench", "--engine", "ollama", "--host", upstream.url, "--model", "slow",
                  "--preflight-duration", "0", "--requests", "1", "--warmup", "0",
                  "--prompt-tokens", "50", "--max-tokens", "2", "--no-cache", "--log", str(log))
    assert upstream.recorder.started.wait(TIMEOUT_S)  # its first request is streaming
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 143
    assert err.decode().strip().splitlines()[-1] == "llmtop bench: stopped by SIGTERM"
    types = [json.loads(line)["type"] for line in log.read_text().splitlines()]
    assert types[0] == "header" and types[-1] == "end"  # the log was closed properly


def test_run_stoppable_returns_the_coroutines_code_without_a_signal():
    async def ok() -> int:
        return 5

    assert run_stoppable(ok(), "t") == 5


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_relay_stops_within_a_second_mid_stream(upstream, sig):
    upstream.recorder.reset()
    port = free_port()
    proc = llmtop("relay", "--port", str(port), "--upstream", upstream.url)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):  # wait until it answers (each try is a real request, not a sleep)
        try:
            httpx.get(url + "/api/relay", timeout=0.5)
            break
        except httpx.TransportError:
            if proc.poll() is not None:
                pytest.fail(proc.stderr.read().decode())
    stream = threading.Thread(target=lambda: _read_quietly(url), daemon=True)
    stream.start()
    assert upstream.recorder.started.wait(TIMEOUT_S)  # the "hang" model: one token, then silence
    t0 = perf_counter()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=TIMEOUT_S)
    elapsed = perf_counter() - t0
    assert proc.returncode == 0 and f"llmtop relay: stopped ({sig.name})" in err.decode()
    # The requirement is 1 s; measured 0.4 s on an idle 2-core machine (0.1 s uvicorn's tick,
    # 0.2 s grace for open streams, the exit). The slack is for a loaded test machine.
    assert elapsed < 2.0, elapsed


def _read_quietly(url: str) -> None:
    try:
        httpx.post(url + "/api/stream", json={"model": "hang", "prompt": "x"}, timeout=TIMEOUT_S)
    except httpx.HTTPError:
        pass


def tui_in_pty(url: str, log: Path, **popen: object) -> tuple[int, subprocess.Popen]:
    """The TUI on the scripted upstream's "slow" model in a 120x40 pty: (master fd, process).
    Textual draws on stderr, so all three streams are the pty."""
    main, sub = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtop", "--engine", "ollama", "--host", url,
         "--model", "slow", "--log", str(log)],
        env={**ENV, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"},
        stdin=sub, stdout=sub, stderr=sub, close_fds=True, **popen)  # type: ignore[call-overload]
    os.close(sub)
    return main, proc


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_tui_ends_as_on_quit(upstream, tmp_path, sig, code):
    upstream.recorder.reset()
    log = tmp_path / "tui.jsonl"
    main, proc = tui_in_pty(upstream.url, log)
    try:
        # The app is running once it has drawn its first screen (thousands of bytes).
        assert len(_drain(main, until=lambda seen: len(seen) > 4000)) > 4000
        os.write(main, b"hi\r")  # a prompt, sent: the app streams it
        _drain(main, until=lambda _: upstream.recorder.started.is_set())
        assert upstream.recorder.started.is_set()
        proc.send_signal(sig)
        tail = _drain(main, until=lambda _: proc.poll() is not None)  # keep it drained
        proc.wait(TIMEOUT_S)
        tail += _drain(main, until=lambda seen: b"\n" in seen, timeout_s=2)
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code
    assert f"llmtop: stopped by {sig.name}" in tail.decode(errors="replace")
    assert [r["status"] for r in requests_in(log)] == ["cancelled"]


def _drain(fd: int, until, timeout_s: float = TIMEOUT_S) -> bytes:
    """Read a pty until `until(bytes so far)` holds, it closes, or timeout_s passes."""
    seen = b""
    deadline = perf_counter() + timeout_s
    while not until(seen) and perf_counter() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                break
    return seen


def test_tui_leaves_when_its_terminal_goes_away_without_a_signal(upstream, tmp_path):
    """The pty's master closed and no SIGHUP sent (tmux kill-server reaches only the pane's
    session leader): the app exits as on SIGHUP instead of spinning on EOF. Found with a TUI
    left behind at 90 % of a core for 37 minutes."""
    upstream.recorder.reset()
    log = tmp_path / "tui.jsonl"
    main, proc = tui_in_pty(upstream.url, log, start_new_session=True)
    try:
        assert len(_drain(main, until=lambda seen: len(seen) > 4000)) > 4000
        os.close(main)  # the terminal is gone; the app never gets a signal
        proc.wait(TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 129  # ExitCode.HANGUP, as for SIGHUP


def patched_llmtop(patch: str, *argv: str) -> subprocess.CompletedProcess:
    """`llmtop ARGV` in a child Python that first runs `patch` (a test double that puts the
    signal at an exact point), then the real `cli.main`."""
    script = f"import os, signal, sys, asyncio\n{patch}\nfrom llmtop import cli\n" \
             f"raise SystemExit(cli.main({list(argv)!r}))\n"
    return subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=TIMEOUT_S, check=False)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stop_before_the_command_handles_signals_still_ends_as_on_ctrl_c(sig, code):
    # the signal arrives as main() starts, before any command installed its handlers (a
    # service manager's stop 0.3 s after start): not the signal's default action (rc -15)
    patch = (f"from llmtop import safetext\n"
             f"safetext.install = lambda: os.kill(os.getpid(), {int(sig)})")
    done = patched_llmtop(patch, "run", "--prompt", "hi")
    assert done.returncode == code
    assert done.stderr.decode().strip().splitlines()[-1] == f"llmtop run: stopped by {sig.name}"


def test_a_stop_during_the_warm_up_still_closes_the_log(upstream, tmp_path):
    # the warm-up of an engine this run started (loading the model) is where a stop 2 s in
    # lands: the log must still end with its `end` record
    log = tmp_path / "warm.jsonl"
    patch = ("import llmtop.sessions.runners.warmup as w\n"
             "async def warm_up(conn, options):\n"
             "    os.kill(os.getpid(), signal.SIGTERM)\n"
             "    await asyncio.sleep(30)\n"
             "w.warm_up = warm_up\nw.started_engine = lambda conn: True")
    done = patched_llmtop(patch, "--engine", "ollama", "--host", upstream.url, "--model",
                          "timed", "run", "--prompt", "hi", "--log", str(log))
    assert done.returncode == 143, done.stderr.decode()
    types = [json.loads(line)["type"] for line in log.read_text().splitlines()]
    assert types[0] == "header" and types[-1] == "end" and "request" not in types
