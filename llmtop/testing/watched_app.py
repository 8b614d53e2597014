"""A scripted app's traffic recorded by a real `llmtop watch --log-bodies`: the watch log a
`llmtop load --replay` test or benchmark replays.

The app sends APP_REQUESTS streamed `/v1/chat/completions` through the watch (a child
process, as a user runs it) at irregular arrival gaps (GAPS_MS), each from its own thread so
that a slow answer never delays the next arrival (open loop, as an app with several users
sends). Each prompt differs (so no request is served from another's prompt cache) and asks
for few tokens, so the 12 requests stay within seconds on 2 cores.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import httpx

from llmtop.servers.child import free_port

# irregular arrival gaps (ms) between the app's 12 requests: 11 gaps, 1,000 ms in all
GAPS_MS = (40, 5, 120, 80, 15, 200, 60, 10, 250, 150, 70)
APP_REQUESTS = len(GAPS_MS) + 1
TOPICS = ("rivers", "bridges", "owls", "clocks", "bread", "glaciers", "kites", "copper",
          "tides", "maps", "bees", "lanterns")
LINE_TIMEOUT_S = 120.0  # one request's NDJSON line; each takes seconds at most here
START_TIMEOUT_S = 60.0  # the watch's start (an interpreter and its imports on a busy machine)


def prompt(k: int) -> str:
    """The app's k-th prompt (k from 0): a question on its own topic."""
    return f"In two short sentences, say something true about {TOPICS[k % len(TOPICS)]}."


def _send(url: str, k: int, max_tokens: int, errors: list[str]) -> None:
    body = {"model": "app", "messages": [{"role": "user", "content": prompt(k)}],
            "stream": True, "max_tokens": max_tokens, "temperature": 0.0, "seed": 7 + k}
    try:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body,
                          timeout=LINE_TIMEOUT_S) as resp:
            for _ in resp.iter_lines():
                pass
            if resp.status_code != 200:
                errors.append(f"request {k}: HTTP {resp.status_code}")
    except httpx.HTTPError as exc:
        errors.append(f"request {k}: {exc!r}")


def _wait_ready(url: str, proc: subprocess.Popen[str], err: IO[str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    err.seek(0)
    said = err.read().strip()[-400:]
    raise RuntimeError(f"the watch on {url} did not answer /health within "
                       f"{START_TIMEOUT_S:.0f} s (exit {proc.poll()}): {said}")


def _read_lines(stream: Any, lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)


def record_app(upstream: str, log: Path, max_tokens: int = 8) -> list[dict[str, Any]]:
    """Run the app through `llmtop watch --json --no-probes --log-bodies` in front of
    `upstream` (an OpenAI-API server's base URL), the watch logging to `log`; returns the
    watch's APP_REQUESTS NDJSON lines. Raises RuntimeError when the watch does not start
    (with what it said) or a request fails, queue.Empty when a line does not come within
    LINE_TIMEOUT_S."""
    with tempfile.TemporaryFile("w+") as err:  # what the watch says, for the error
        return _record(upstream, log, max_tokens, err)


def _record(upstream: str, log: Path, max_tokens: int, err: IO[str]) -> list[dict[str, Any]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtop", "watch", "--json", "--no-probes", "--log-bodies",
         "--listen", f"127.0.0.1:{port}", "--upstream", upstream, "--log", str(log)],
        stdout=subprocess.PIPE, stderr=err, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        _wait_ready(url, proc, err)
        errors: list[str] = []
        threads = []
        t0 = time.perf_counter()
        offsets = [sum(GAPS_MS[:k]) / 1e3 for k in range(APP_REQUESTS)]
        for k, offset in enumerate(offsets):
            time.sleep(max(0.0, t0 + offset - time.perf_counter()))
            thread = threading.Thread(target=_send, args=(url, k, max_tokens, errors))
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join(LINE_TIMEOUT_S)
        if errors:
            raise RuntimeError("the app's requests failed: " + "; ".join(errors))
        return [json.loads(lines.get(timeout=LINE_TIMEOUT_S)) for _ in range(APP_REQUESTS)]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)  # its stdout is the reading thread's
