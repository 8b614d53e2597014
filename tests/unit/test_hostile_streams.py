"""Streams that say something else than they mean (docs/hostile-input.md, "Streams that say
something else"): llama-server's SSE `error:` field, a usage chunk claiming far more tokens
than arrived, a prompt-cache hit, a redirect to another host, a Locust level cut short, and a
machine that does not say its physical cores. A test double of a few routes (a Starlette app
in a thread) makes each exact, read through the real engines.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from llmtop.engines.events import FailureKind, Status
from llmtop.engines.ollama import OllamaEngine
from llmtop.engines.openai import OpenAIEngine
from llmtop.sessions.analysis.load import analyze_sweep
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request
from llmtop.sessions.measure.timeline import prompt_cache_hit
from llmtop.sessions.records.log import SessionLog, read_log
from llmtop.sessions.reports.run_environment import cpu_line
from llmtop.testing.scripted import ServeInThread
from llmtop.testing.scripted_openai import chunk, data


def sse(*frames: bytes) -> Response:
    async def body() -> AsyncIterator[bytes]:
        for frame in frames:
            yield frame
    return StreamingResponse(body(), media_type="text/event-stream")


FINISH = chunk(finish="stop")
STREAMS = {
    # an older llama-server: the error as its own field, then [DONE]
    "error-field": (data(chunk("par")), b'error: {"code": 500, "message": "the slot crashed"}\n\n',
                    b"data: [DONE]\n\n"),
    "usage-claim": (data(chunk("ab")), data(chunk("ab")), data(chunk("ab")), data(FINISH),
                    data({**chunk(), "choices": [], "usage": {
                        "prompt_tokens": 5, "completion_tokens": 5000, "total_tokens": 5005}}),
                    b"data: [DONE]\n\n"),
    "cache-hit": (data(chunk("x")), data(chunk("y")), data({**FINISH, "timings": {
        "cache_n": 500, "prompt_n": 1, "prompt_ms": 21.47, "predicted_n": 2,
        "predicted_ms": 20.0}}), b"data: [DONE]\n\n"),
}


async def _chat(request: Request) -> Response:
    return sse(*STREAMS[(await request.json())["model"]])


async def _redirect(_: Request) -> Response:
    return RedirectResponse("http://127.0.0.1:9/api/chat", status_code=307)


APP = Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"]),
                        Route("/api/chat", _redirect, methods=["POST"])])


@pytest.fixture(scope="module")
def url():
    with ServeInThread(APP) as base:
        yield base


def measure(engine, model: str):
    async def go():
        collector = RequestCollector("hi", {"num_predict": 50}, model)
        try:
            return await run_request(
                lambda: engine.stream_chat(model, chat_messages("hi")), collector)
        finally:
            await engine.aclose()
    return asyncio.run(go())


def test_an_sse_error_field_is_the_servers_error_not_a_truncation(url):
    result = measure(OpenAIEngine(url), "error-field")
    assert result.content == "par"
    assert result.failure.kind == FailureKind.SERVER_ERROR  # "truncated, … crashed" before
    assert "the slot crashed" in result.failure.message


def test_a_usage_claim_beyond_what_arrived_is_impossible_not_buffered(url):
    m = measure(OpenAIEngine(url), "usage-claim").metrics
    # 3 chunks of 2 characters: 5000 > 8 × 6 + 64 = 112
    assert m.impossible is not None and m.impossible.startswith("the server counts 5000 tokens")
    assert m.buffered is None and m.output_tokens == 3


def test_a_prompt_cache_hit_is_cached_not_a_prefill_rate(url):
    result = measure(OpenAIEngine(url), "cache-hit")
    assert result.status == Status.OK
    assert (result.stats.prompt_eval_count, result.stats.prompt_cached_count) == (501, 500)
    assert prompt_cache_hit(result.stats)
    assert result.metrics.server_prefill_tps is None  # 501 / 21.47 ms = 23,335 tok/s before


def test_a_redirect_to_another_host_is_named_as_one(url):
    result = measure(OllamaEngine(url), "m")
    assert result.failure.kind == FailureKind.PROTOCOL  # "HTTP 404" (of the other host) before
    assert result.failure.message == (
        f"{url} answered with a redirect (HTTP 307) to http://127.0.0.1:9/api/chat: llmtop does "
        "not follow a redirect to another server (it would measure that one)")


def test_a_level_cut_short_says_so(tmp_path):
    log = SessionLog(tmp_path / "l.jsonl", {"kind": "load", "load": {"mode": "concurrency"}})
    log.write_raw({"type": "level", "phase": "start", "level": 0, "value": 10, "requests": 10})
    log.write_raw({"type": "request", "id": 1, "status": "ok", "model": "m", "prompt": "p",
                   "level": 0, "phase": "measure", "metrics": {"ttft_ms": 5.0, "e2e_ms": 9.0}})
    log.write_raw({"type": "interrupted", "at": "2026-01-01T00:00:00+00:00"})
    log.close()
    analysis = analyze_sweep(read_log(log.path))
    assert ("level 1 (10): 1 of the 10 planned requests were recorded: the run was cut short "
            "(a time limit, a stop, a crash); its figures are from those 1 only"
            ) in analysis.warnings


def test_unknown_physical_cores_are_unknown_not_none():
    assert cpu_line({"cpu_model": "x86", "cpu_cores_physical": None, "cpu_cores_logical": 4}
                    ) == "x86 · cores unknown / 4 threads"
    assert cpu_line({}) == "CPU model unknown · cores unknown / threads unknown"
