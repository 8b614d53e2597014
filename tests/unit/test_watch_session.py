"""`llmtop watch`'s session (sessions/runners/watch.py) and the command as a real child
process: measured like llmtop's own requests, logged as kind "watch", one NDJSON line per
finished request, the Prometheus textfile; an OpenAI-style client (llmtop's own OpenAIEngine,
httpx + httpx-sse) through it."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import ollama
import pytest

from llmtop.engines.openai import OpenAIEngine
from llmtop.servers.child import free_port
from llmtop.servers.watch.proxy import WatchProxy
from llmtop.sessions.measure.config import WatchPair
from llmtop.sessions.records.log import read_log
from llmtop.sessions.runners.watch.serving import pairs_of, split_listen
from llmtop.sessions.runners.watch.session import WatchSession, line_fields
from llmtop.testing.scripted import ScriptedUpstream, Timing
from llmtop.testing.scripted_openai import ScriptedOpenAI
from llmtop.testing.watch import WatchInThread

HI = [{"role": "user", "content": "hi"}]


def served(session, upstream):
    port = free_port()
    app = WatchProxy(upstream, ("127.0.0.1", port), session)
    return WatchInThread(app)


def wait_for(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert predicate()


def test_session_logs_kind_watch_and_prints_one_line_per_request(tmp_path):
    out = io.StringIO()
    log = tmp_path / "w.jsonl"
    prom = tmp_path / "w.prom"
    timing = Timing(first_s=0.03, chunks=4, gap_s=0.005)
    with ScriptedUpstream(timing) as up:
        session = WatchSession([("127.0.0.1:1", up.url)], log_path=str(log), out=out,
                               prometheus=prom)
        with served(session, up.url) as url:
            client = ollama.Client(host=url)
            list(client.chat(model="timed", messages=HI, stream=True))
            list(client.generate(model="thinking", prompt="why?", stream=True))
            wait_for(lambda: len(session.finished_list) == 2)
        session.close()
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["model"] for x in lines] == ["timed", "thinking"]
    first, second = lines
    assert first["status"] == "ok" and first["endpoint"] == "/api/chat"
    assert first["output_tokens"] == 4 and first["answer_chunks"] == 4  # eval_count = chunks
    assert first["prompt_tokens"] == 11  # scripted STATS prompt_eval_count
    # the "thinking" scenario: two thinking chunks, one answer chunk, through /api/generate
    assert (second["thinking_chunks"], second["answer_chunks"]) == (2, 1)
    assert "prompt" not in first  # no bodies unless asked
    run = read_log(log)
    assert run.header.kind == "watch"
    assert run.header.watch.pairs == (WatchPair("127.0.0.1:1", up.url),)
    assert [r.watch.endpoint for r in run.requests] == ["/api/chat", "/api/generate"]
    assert all(r.prompt == "" and r.content == "" for r in run.requests)
    assert run.requests[0].metrics.ttft_ms == pytest.approx(first["ttft_ms"])
    text = prom.read_text()
    assert 'llmtop_watch_requests_total{caller="unknown",model="timed",status="ok"} 1.0' in text
    assert 'llmtop_watch_output_tokens_total{caller="unknown",model="timed"} 4.0' in text


def test_bodies_are_logged_only_when_asked(tmp_path):
    out = io.StringIO()
    with ScriptedUpstream() as up:
        session = WatchSession([("x", up.url)], log_path=str(tmp_path / "w.jsonl"), out=out,
                               bodies=True)
        with served(session, up.url) as url:
            list(ollama.Client(host=url).chat(model="ok", messages=HI, stream=True))
            wait_for(lambda: len(session.finished_list) == 1)
        session.close()
    line = json.loads(out.getvalue())
    assert (line["prompt"], line["content"]) == ("hi", "Hello!")
    assert read_log(tmp_path / "w.jsonl").requests[0].content == "Hello!"


def test_an_openai_client_through_the_watch_gets_its_answer_and_the_cache_is_read(tmp_path):
    out = io.StringIO()
    with ScriptedOpenAI("llama-server") as up:
        session = WatchSession([("x", up.url)], log_path=str(tmp_path / "w.jsonl"), out=out)
        with served(session, up.url) as url:
            async def stream():
                engine = OpenAIEngine(url + "/v1")
                try:
                    return [e async for e in engine.stream_chat("llama-server", HI)]
                finally:
                    await engine.aclose()

            events = asyncio.run(stream())
            wait_for(lambda: len(session.finished_list) == 1)
        session.close()
    assert "".join(e.content for e in events) == "Hello!"
    line = json.loads(out.getvalue())
    # scripted_openai's llama-server: usage(11, 3, cached=2) → 2/11 = 18.2 %
    assert (line["prompt_tokens"], line["cached_prompt_tokens"], line["cached_pct"]) == (
        11, 2, 18.2)
    assert line["status"] == "ok" and line["endpoint"] == "/v1/chat/completions"


def test_verdict_is_the_worst_sample_during_the_request(tmp_path):
    from types import SimpleNamespace

    from llmtop.probes.verdict import Finding, Level, Verdict

    session = WatchSession([("x", "http://u")], log_path=str(tmp_path / "w.jsonl"))
    busy = Finding("browser-busy", Level.WARN, 30.0, 10.0, "% CPU", "m", "r")
    for t, verdict in ((5, Verdict.of([])), (15, Verdict.of([busy])), (25, Verdict.of([]))):
        session._samples.append(SimpleNamespace(t_ns=t, verdict=verdict))
    assert session.verdict_during(10, 20) == ("NOISY", ("browser-busy",))
    assert session.verdict_during(20, 30) == ("QUIET", ())
    assert session.verdict_during(6, 7) == ("QUIET", ())  # none during: the one before
    assert session.verdict_during(0, 1) == (None, ())
    session.close()


def test_listen_addresses_pair_with_upstreams():
    pairs = pairs_of(["127.0.0.1:12000"], ["http://127.0.0.1:11434", "http://127.0.0.1:8080"])
    assert [(p.listen, p.upstream) for p in pairs] == [
        ("127.0.0.1:12000", "http://127.0.0.1:11434"), ("127.0.0.1:12001", "http://127.0.0.1:8080")]
    assert split_listen("[::1]:11435") == ("::1", 11435)
    with pytest.raises(ValueError, match="HOST:PORT"):
        split_listen("localhost")
    with pytest.raises(ValueError, match="own --listen"):
        pairs_of(["127.0.0.1:11434"], ["http://127.0.0.1:11434"])
    # the same place by another name or from an every-address listener (a new-user pass: the
    # watch forwarded to itself until it ran out of files); another port is another place
    for listen, upstream in (("127.0.0.1:11434", "http://localhost:11434"),
                             ("0.0.0.0:11434", "http://127.0.0.1:11434")):
        with pytest.raises(ValueError, match="own --listen"):
            pairs_of([listen], [upstream])
    assert pairs_of(["127.0.0.1:11435"], ["http://localhost:11434"])[0].port == 11435
    # a scheme the watch cannot speak names the flag it came from
    with pytest.raises(Exception, match="--upstream"):
        pairs_of([], ["ftp://127.0.0.1:11434"])


def run_cli(*args, timeout=30):
    return subprocess.run([sys.executable, "-m", "llmtop", "watch", *args],
                          check=False, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})


def test_cli_refuses_an_open_address_without_a_token():
    done = run_cli("--json", "--listen", "0.0.0.0:18999", "--upstream", "http://127.0.0.1:1")
    assert done.returncode == 2
    assert "without --token-file" in done.stderr and "Traceback" not in done.stderr


def test_cli_json_lines_are_flushed_per_request_and_sigterm_closes_the_log(tmp_path):
    log = tmp_path / "w.jsonl"
    port = free_port()
    with ScriptedUpstream(Timing(first_s=0.02, chunks=3, gap_s=0.005)) as up:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmtop", "watch", "--json", "--no-probes", "--listen",
             f"127.0.0.1:{port}", "--upstream", up.url, "--log", str(log)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()})
        try:
            url = f"http://127.0.0.1:{port}"
            wait_for(lambda: _answers(url), timeout_s=30)
            parts = list(ollama.Client(host=url).chat(model="timed", messages=HI, stream=True))
            assert "".join(p.message.content for p in parts) == "t0 t1 t2"
            line = json.loads(proc.stdout.readline())  # flushed: readable while it runs
            assert (line["model"], line["status"], line["output_tokens"]) == ("timed", "ok", 3)
            assert line["caller"] is not None  # this test's own process, named
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    # one request: singular; the caller pool shut down cleanly (a pool left running printed
    # CPython's "Exception ignored ... Bad file descriptor" at exit, 1 stop in 8)
    assert "stopped; 1 request logged to" in err
    assert "Traceback" not in err and "Exception ignored" not in err
    run = read_log(log)
    assert run.header.kind == "watch" and len(run.requests) == 1
    assert any(r.TYPE == "end" for r in run.records)


def _answers(url):
    try:
        return httpx.get(url + "/api/version", timeout=0.5).status_code == 200
    except httpx.HTTPError:
        return False


def test_line_fields_are_n_a_for_a_request_without_answer(tmp_path):
    from llmtop.engines.events import Failure, FailureKind, StreamEvent
    from llmtop.servers.watch.proxy import Exchange

    session = WatchSession([("x", "http://u")], log_path=str(tmp_path / "w.jsonl"))
    ex = Exchange("http://u", "l", "ollama", "chat", "/api/chat", b"{\"model\": \"m\"}", None, 100)
    ex.failed.append(StreamEvent(200, done=True, failure=Failure(FailureKind.UNREACHABLE, "x")))
    ex.end_ns = 200
    line = line_fields(session.measure(ex))
    assert line["status"] == "error" and line["ttft_ms"] is None and line["cached_pct"] is None


def test_two_upstreams_in_one_watch_each_on_its_own_port(tmp_path):
    log = tmp_path / "w.jsonl"
    port, port2 = free_port(), free_port()
    with ScriptedUpstream() as ollama_up, ScriptedOpenAI("vllm") as openai_up:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmtop", "watch", "--json", "--no-probes",
             "--listen", f"127.0.0.1:{port}", "--listen", f"127.0.0.1:{port2}",
             "--upstream", ollama_up.url, "--upstream", openai_up.url, "--log", str(log)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()})
        try:
            first, second = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port2}"
            wait_for(lambda: _answers(first), timeout_s=30)
            list(ollama.Client(host=first).chat(model="ok", messages=HI, stream=True))
            reply = httpx.post(second + "/v1/chat/completions", timeout=10, json={
                "model": "vllm", "messages": HI, "stream": True})
            assert reply.status_code == 200 and b"[DONE]" in reply.content
            lines = [json.loads(proc.stdout.readline()) for _ in range(2)]
        finally:
            proc.send_signal(signal.SIGINT)  # Ctrl+C
            _, err = proc.communicate(timeout=15)
    assert "stopped; 2 requests logged to" in err and "Exception ignored" not in err
    assert {(x["listen"], x["upstream"], x["model"]) for x in lines} == {
        (f"127.0.0.1:{port}", ollama_up.url, "ok"),
        (f"127.0.0.1:{port2}", openai_up.url, "vllm")}
    assert read_log(log).header.watch.pairs[1].listen == f"127.0.0.1:{port2}"
