"""Hostile input against the real embedded engine (llama.cpp, the bundled Gemma 3 270M):
the parts the unit tests' test double cannot show (docs/hostile-input.md)."""

from __future__ import annotations

import json
import signal
import threading
from time import perf_counter

import httpx
import psutil
import pytest

from llmtop.servers.embedded.llama_backend import context_memory
from tests.conftest import MODEL

pytestmark = pytest.mark.integration

GEMMA3_VOCAB = 262_144
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "stream": False,
        "options": {"temperature": 0, "seed": 1, "num_predict": 8, "num_ctx": 2048}}


def test_refusals_leave_the_engine_serving(engine_url):
    thread = httpx.post(engine_url + "/api/chat", timeout=60,
                        json={**CHAT, "options": {**CHAT["options"], "num_thread": 100_000}})
    assert thread.status_code == 400 and "option 'num_thread' is 100000" in thread.json()["error"]
    words = " ".join(["word"] * 400)  # far more than 64 tokens
    long = httpx.post(engine_url + "/api/chat", timeout=60, json={
        **CHAT, "messages": [{"role": "user", "content": words}],
        "options": {**CHAT["options"], "num_ctx": 64}})
    assert (
        long.status_code == 400 and "longer than the context (num_ctx 64)" in long.json()["error"]
    )
    ok = httpx.post(engine_url + "/api/chat", json=CHAT, timeout=60)
    assert ok.status_code == 200 and ok.json()["done"] is True


def test_a_context_memory_cannot_hold_is_400_naming_num_ctx(engine_url):
    # Gemma 3 270M's 32768-token context: 32 GiB of logits buffer (n_batch = n_ctx rows of
    # 262,144 float32), which the machine must be able to address (RAM + swap).
    _, logits = context_memory(32768, {}, GEMMA3_VOCAB)
    if logits <= psutil.virtual_memory().total + psutil.swap_memory().total:
        pytest.skip("this machine could hold a 32k context")
    r = httpx.post(engine_url + "/api/chat", timeout=60,
                   json={**CHAT, "options": {**CHAT["options"], "num_ctx": 10**9}})
    assert r.status_code == 400 and r.json()["error"].startswith("option 'num_ctx' 32768 needs")
    assert httpx.post(engine_url + "/api/chat", json=CHAT, timeout=60).status_code == 200


def test_sigterm_mid_generation_stops_within_a_second(fresh_engine):
    first_line = threading.Event()

    def generate() -> None:
        body = {**CHAT, "stream": True, "options": {**CHAT["options"], "num_predict": 4000}}
        try:
            with httpx.stream("POST", fresh_engine.host + "/api/chat", json=body, timeout=120) as r:
                for line in r.iter_lines():
                    if line and "message" in json.loads(line):
                        first_line.set()
        except httpx.HTTPError:
            pass

    threading.Thread(target=generate, daemon=True).start()
    assert first_line.wait(120)  # generating now
    t0 = perf_counter()
    fresh_engine.proc.send_signal(signal.SIGTERM)
    assert fresh_engine.proc.wait(10) == 0
    # The requirement is 1 s: measured 0.4-0.9 s here (0.9 s with a load average of 24 on the
    # 2 cores); the slack keeps a loaded test machine from failing it.
    assert perf_counter() - t0 < 2.0
