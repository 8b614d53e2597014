"""`llmtop watch --json` as a real child process in front of the real embedded engine, with
the official `ollama` client: the answer arrives whole, the line says the same, and a client
that leaves mid-stream is recorded as cancelled and stops the engine's generation (its own
`/llmtop/jobs` record says so)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import ollama
import pytest

from llmtop.servers.child import free_port
from tests.conftest import MODEL

pytestmark = pytest.mark.integration

OPTIONS = {"temperature": 0.0, "seed": 42, "num_predict": 16, "num_ctx": 2048}


@pytest.fixture
def watch(engine_url, tmp_path):
    """A watch child process in front of the shared embedded engine: (url, process)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtop", "watch", "--json", "--no-probes", "--log-bodies",
         "--listen", f"127.0.0.1:{port}", "--upstream", engine_url,
         "--log", str(tmp_path / "w.jsonl")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/api/version", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    try:
        yield url, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)


def test_the_answer_passes_whole_and_the_line_agrees(watch):
    url, proc = watch
    t0 = time.perf_counter_ns()
    first = None
    parts = []
    for part in ollama.Client(host=url).chat(
            model=MODEL, messages=[{"role": "user", "content": "Name three colours."}],
            options=OPTIONS, stream=True):
        if first is None and part.message.content:
            first = time.perf_counter_ns()
        parts.append(part)
    text = "".join(p.message.content for p in parts)
    assert text.strip() and parts[-1].done
    line = json.loads(proc.stdout.readline())
    assert line["status"] == "ok" and line["model"] == MODEL
    assert line["content"] == text  # every byte of the answer the client got, read as it passed
    assert line["output_tokens"] == parts[-1].eval_count
    assert line["stats"]["prompt_eval_count"] == parts[-1].prompt_eval_count
    # the watch stamps nearer the engine than the client: its TTFT cannot be longer
    assert line["ttft_ms"] <= (first - t0) / 1e6


def test_a_client_that_leaves_is_recorded_as_cancelled_and_stops_the_engine(watch,
                                                                            engine_url):
    url, proc = watch
    before = httpx.get(engine_url + "/llmtop/jobs").json()["jobs"]
    with httpx.stream("POST", url + "/api/chat", timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": "Count to a thousand."}],
            "options": {**OPTIONS, "num_predict": 2000}}) as resp:
        for raw in resp.iter_lines():
            if raw and json.loads(raw)["message"]["content"]:
                break  # the first text, then leave
    line = json.loads(proc.stdout.readline())
    assert line["status"] == "cancelled"
    assert line["ttft_ms"] is not None
    # The engine records each job once it ended (newest last): poll, no fixed sleep, until
    # this one is there; nothing else uses the engine meanwhile.
    deadline = time.monotonic() + 30
    jobs = before
    while jobs == before and time.monotonic() < deadline:
        time.sleep(0.05)
        jobs = httpx.get(engine_url + "/llmtop/jobs").json()["jobs"]
    assert jobs != before, "the engine never ended the job the client left"
    job = jobs[-1]
    print("the engine's job after the client left the watch:", job)
    # one token read, then the close went client → watch → engine, which checks between
    # tokens: a handful more at most, far from 2000
    assert job["cancelled"] and job["endpoint"] == "/api/chat", job
    assert job["eval_count"] < 50, job
