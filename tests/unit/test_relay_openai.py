"""The SSE relay in front of an OpenAI-compatible upstream (relay --upstream-api openai): the
same events, text, stats and failure kinds as `OpenAIEngine` talking to it directly."""

from __future__ import annotations

import contextlib

import pytest

from llmtop.engines.events import FailureKind
from llmtop.engines.openai import OpenAIEngine
from llmtop.engines.relay import RelayEngine
from llmtop.servers.relay.request import parse_stream_request
from llmtop.servers.relay.server import create_app
from llmtop.sessions.measure.request import RequestCollector, chat_messages
from llmtop.testing.scripted import ServeInThread
from llmtop.testing.scripted_openai import SCENARIOS, ScriptedOpenAI


@pytest.fixture(scope="module")
def upstream():
    with ScriptedOpenAI("llama-server") as up:
        yield up


@pytest.fixture(scope="module")
def relay(upstream):
    with ServeInThread(create_app(f"{upstream.url}/v1", api="openai")) as url:
        yield url


async def outcome(engine, model):
    """What a measured request makes of the stream: text, status, stats, failure kind and
    the number of text chunks (everything but the stamps and the failure's wording)."""
    async with contextlib.aclosing(engine.stream_chat(model, chat_messages("hi"))) as stream:
        events = [e async for e in stream]
    await engine.aclose()
    collector = RequestCollector("hi", {}, model, events=events)
    result = collector.finish()
    kind = result.failure.kind if result.failure else None
    return (result.content, result.thinking, result.status, result.stats, kind,
            result.metrics.text_chunks, sum(e.done for e in events))


@pytest.mark.parametrize("model", [*SCENARIOS, "http-400", "http-500", "unknown-model"])
async def test_relayed_openai_requests_match_direct_ones(upstream, relay, model):
    direct = await outcome(OpenAIEngine(upstream.url), model)
    relayed = await outcome(RelayEngine(relay, upstream=f"{upstream.url}/v1"), model)
    assert relayed == direct
    assert relayed[-1] == 1  # exactly one done event


async def test_relay_sends_the_openai_body_and_keeps_its_stats(upstream, relay):
    upstream.recorder.reset()
    engine = RelayEngine(relay)
    options = {"num_predict": 5, "num_ctx": 4096}
    events = [e async for e in engine.stream_chat("llama-server", [], options=options)]
    await engine.aclose()
    assert events[-1].stats.source == "usage + llama.cpp timings"
    assert events[-1].stats.prompt_eval_duration == 30_500_000
    path, body = upstream.recorder.requests[-1]
    assert path == "/v1/chat/completions"
    assert body["max_tokens"] == 5 and "num_ctx" not in body
    assert body["stream_options"] == {"include_usage": True}


def test_an_openai_job_says_what_it_could_not_send_and_refuses_prompt():
    job = parse_stream_request({"model": "m", "messages": [], "options": {"num_ctx": 2048}},
                               api="openai")
    assert job.path == "/chat/completions" and len(job.notes) == 1
    assert job.notes[0].startswith("option num_ctx=2048 not sent")
    from llmtop.engines.http import BadRequest
    with pytest.raises(BadRequest, match="'prompt' needs an Ollama-API upstream"):
        parse_stream_request({"model": "m", "prompt": "x"}, api="openai")


async def test_a_refused_stream_options_is_an_error_through_the_relay(relay):
    assert (await outcome(RelayEngine(relay), "refuses-usage"))[4] == FailureKind.BAD_REQUEST


async def test_calibration_through_the_relay_counts_with_the_upstream(upstream, relay):
    from llmtop.sessions.runners.calibration import CalibrationPoint, calibrate

    direct = OpenAIEngine(upstream.url)
    engine = RelayEngine(relay, metadata=direct)
    try:
        cal = await calibrate(engine, "no-usage", [50], {}, seed=3)
    finally:
        await engine.aclose()
        await direct.aclose()
    # tokens = words + 14 for the scripted server (see test_openai_wiring's calibration test)
    assert cal.targets == {50: CalibrationPoint(36, 50)}
    assert not hasattr(RelayEngine(relay), "count_prompt_tokens")  # an Ollama upstream: none
