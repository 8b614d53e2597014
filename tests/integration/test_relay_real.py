"""The relay as a real child process in front of the real embedded engine."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time

import httpx
import pytest

from llmtop.engines.events import FailureKind
from llmtop.engines.ollama import OllamaEngine
from llmtop.engines.relay import RelayEngine
from llmtop.exitcodes import ExitCode
from llmtop.servers.child import free_port
from llmtop.sessions.measure.request import chat_messages
from tests.conftest import MODEL

pytestmark = pytest.mark.integration

OPTIONS = {"temperature": 0.0, "seed": 42, "num_predict": 24, "num_ctx": 2048}


async def collect(engine, prompt, options=OPTIONS):
    try:
        return [e async for e in engine.stream_chat(MODEL, chat_messages(prompt), options=options)]
    finally:
        await engine.aclose()


async def test_relayed_stream_from_the_real_engine_has_text_and_stats(relay):
    assert relay.pid is not None and relay.startup_ms is not None
    events = await collect(RelayEngine(relay.url), "Name three colours.")
    final = events[-1]
    assert final.done and final.failure is None, final.failure
    text = "".join(e.content for e in events)
    assert text.strip()
    stats = final.stats
    assert stats.eval_count and stats.eval_count > 0 and stats.eval_duration > 0
    assert stats.prompt_eval_count and stats.prompt_eval_count > 0
    assert stats.done_reason in ("stop", "length")
    assert sum(1 for e in events if e.has_text) >= 2  # streamed, not one lump


async def test_relayed_and_direct_requests_report_the_same_kind_of_stats(relay, engine_url):
    # The bundled model is a base model and llama.cpp reuses its KV cache between requests,
    # so the text itself is not compared; what the relay must not change is the stats' shape.
    prompt = "Say hello in French, one word."
    direct = await collect(OllamaEngine(engine_url), prompt)
    relayed = await collect(RelayEngine(relay.url), prompt)
    for events in (direct, relayed):
        assert events[-1].failure is None and "".join(e.content for e in events)

    def present(stats):
        return {k for k, v in stats.to_dict().items() if v is not None}

    assert present(relayed[-1].stats) == present(direct[-1].stats)


async def test_metadata_through_the_relay_engine(relay, engine_url):
    engine = RelayEngine(relay.url)
    try:
        assert await engine.upstream_url() == engine_url
        assert MODEL in await engine.list_models()
        assert (await engine.model_info(MODEL)).parameter_size
    finally:
        await engine.aclose()


async def test_unknown_model_through_the_relay(relay):
    engine = RelayEngine(relay.url)
    try:
        events = [e async for e in engine.stream_chat("no-such-model:1b", chat_messages("hi"))]
    finally:
        await engine.aclose()
    assert events[-1].failure.kind == FailureKind.MODEL_NOT_FOUND
    assert MODEL in events[-1].failure.message  # the installed list


async def test_leaving_mid_stream_stops_the_engine_generating(relay, engine_url):
    engine = RelayEngine(relay.url)
    stream = engine.stream_chat(
        MODEL, chat_messages("Count from one to five hundred in words."),
        options={**OPTIONS, "num_predict": 2000},
    )
    async with contextlib.aclosing(stream):
        got = [await anext(stream) for _ in range(3)]
    await engine.aclose()
    assert not any(e.done for e in got)
    # The engine records each job; the relayed one must end cancelled, long before 2000 tokens.
    deadline = time.monotonic() + 5
    async with httpx.AsyncClient(base_url=engine_url) as client:
        while time.monotonic() < deadline:
            jobs = (await client.get("/llmtop/jobs")).json()["jobs"]
            if jobs and jobs[-1]["cancelled"]:
                break
            await asyncio.sleep(0.1)
    assert jobs[-1]["cancelled"] and jobs[-1]["eval_count"] < 2000, jobs[-1]


def test_binding_beyond_loopback_warns(engine_url):
    port = free_port("0.0.0.0")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llmtop",
            "relay",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
            "--upstream",
            engine_url,
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/api/relay").status_code == 200:
                    break
            time.sleep(0.1)
    finally:
        p.terminate()
        _, err = p.communicate(timeout=10)
    assert "WARNING" in err and "0.0.0.0" in err
    assert p.returncode == 0


def test_port_in_use_is_a_usage_error(relay, engine_url):
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmtop",
            "relay",
            "--port",
            str(relay.port),
            "--upstream",
            engine_url,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert p.returncode == ExitCode.USAGE
    assert str(relay.port) in p.stderr and "--port" in p.stderr


def test_relay_exits_when_its_parent_is_gone(engine_url):
    port = free_port()
    # a parent that exits at once: the relay must notice and stop by itself
    parent = subprocess.Popen([sys.executable, "-c", "pass"])
    parent.wait()
    p = subprocess.Popen(
        [sys.executable, "-m", "llmtop", "relay", "--port", str(port), "--upstream", engine_url,
         "--parent-pid", str(parent.pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        assert p.wait(timeout=20) == 0
    finally:
        if p.poll() is None:
            p.kill()
