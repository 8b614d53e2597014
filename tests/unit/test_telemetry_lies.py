"""Telemetry that lies: a server's own figures that llmtop's clock, or the text that arrived,
contradicts (sessions/measure/telemetry.py, timeline.impossible_counts); server
descriptions without the figures llmtop reads (a llama-server router, a `/metrics` without
the slot gauges); a model that runs elsewhere (an Ollama cloud model); an error body inside
an error body. Each case is exact: hand-made events, or a test double of a few lines served
in a thread and read through the real engines.

Every expected figure is worked out by hand in the comment beside it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from llmtop.engines.events import FailureKind, ServerStats, Status, StreamEvent
from llmtop.engines.http import CONTEXT_REMEDY, Peer, failure_for_http, failure_in_stream
from llmtop.engines.llama_props import describe
from llmtop.engines.ollama import OllamaEngine, cloud_host
from llmtop.engines.openai import OpenAIEngine
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request
from llmtop.sessions.measure.timeline import compute_metrics
from llmtop.sessions.reports.load import _server_line
from llmtop.sessions.runners.load.server_metrics import ServerWatch, summarize
from llmtop.testing.scripted import ServeInThread, chunk
from llmtop.testing.scripted_openai import ScriptedOpenAI

MS = 1_000_000
SENT = 10**12
SET_ASIDE = ": the server's durations, and the rates and overhead made of them, are not used " \
            "(llmtop's clock is)"


def stream(first_ms: float, gap_ms: float, n: int, done_ms: float, stats: ServerStats,
           text: str = "tok ") -> list[StreamEvent]:
    """n text chunks from first_ms, gap_ms apart, then the done event at done_ms (ms from
    the send)."""
    events = [StreamEvent(SENT + round((first_ms + i * gap_ms) * MS), content=text)
              for i in range(n)]
    return [*events, StreamEvent(SENT + round(done_ms * MS), done=True, stats=stats)]


# ---------------------------------------------------------------- decode booked as prompt


def test_decode_time_booked_as_prompt_time_is_set_aside_with_the_reason() -> None:
    # llama.cpp's server once booked the decode as prompt time: prompt_ms 4075, predicted_ms 1
    # for 111 tokens. llmtop saw the first text at 221.5 ms and 111 chunks 35 ms apart, so
    # the text arrived over 110 × 35 = 3850 ms; the done event 10 ms after the last chunk:
    # E2E = 221.5 + 3850 + 10 = 4081.5 ms.
    stats = ServerStats(prompt_eval_count=20, prompt_eval_duration=4_075 * MS, eval_count=111,
                        eval_duration=1 * MS, source="usage + llama.cpp timings")
    m = compute_metrics(SENT, stream(221.5, 35.0, 111, 4_081.5, stats), stats)
    # prompt eval 4075 > TTFT 221.5 + 5 (an overhead of 221.5 − 4075 = −3853.5 ms); decode
    # 1 ms < 3850 / 4 and 3850 − 1 > 50 (111 / 0.001 s = 111000 tok/s); the phases add up
    # to 4076 ms, within E2E 4081.5 + 5: no E2E reason
    assert m.impossible == (
        "the server's prompt eval (4075.0 ms) is longer than the TTFT llmtop measured "
        "(221.5 ms), though it comes before the first token (an overhead of -3853.5 ms); "
        "the server says it generated 111 tokens in 1.0 ms, 111000 tok/s, but llmtop saw "
        "their text arrive over 3850.0 ms" + SET_ASIDE)
    # none of the server's durations is reported as a measurement
    assert (m.server_decode_tps, m.server_prefill_tps, m.overhead_ms) == (None, None, None)
    assert (m.prompt_eval_ms, m.eval_ms, m.load_ms, m.total_ms) == (None, None, None, None)
    # its count is kept; llmtop's own figures stand: TPOT (4081.5 − 221.5) / 110 = 35.09 ms
    assert (m.output_tokens, m.tokens_basis) == (111, "eval_count")
    assert m.ttft_ms == 221.5 and m.tpot_ms == pytest.approx(3_860.0 / 110)


def test_the_same_stream_with_true_durations_is_believed() -> None:
    # the same arrivals with the durations a true server reports: 200 ms of prompt (inside
    # TTFT 221.5) and 3800 ms of decode (the text arrived over 3850 ms)
    stats = ServerStats(prompt_eval_count=20, prompt_eval_duration=200 * MS, eval_count=111,
                        eval_duration=3_800 * MS, source="usage + llama.cpp timings")
    m = compute_metrics(SENT, stream(221.5, 35.0, 111, 4_081.5, stats), stats)
    assert m.impossible is None
    assert m.overhead_ms == pytest.approx(21.5)  # 221.5 − 200 (no load: an OpenAI server)
    assert m.server_decode_tps == pytest.approx(111 / 3.8)  # 29.21 tok/s
    assert m.server_prefill_tps == pytest.approx(20 / 0.2)  # 100 tok/s


def test_a_negative_overhead_within_the_clocks_slack_is_na_not_negative() -> None:
    # load 1 + prompt 222 = 223 ms against TTFT 221.5: −1.5 ms, within the 5 ms slack of the
    # clocks (telemetry.CLOCK_SLACK_MS): not a lie, and no negative overhead either
    stats = ServerStats(load_duration=1 * MS, prompt_eval_count=20,
                        prompt_eval_duration=222 * MS, eval_count=3, eval_duration=70 * MS)
    m = compute_metrics(SENT, stream(221.5, 35.0, 3, 300.0, stats), stats)
    assert m.impossible is None and m.overhead_ms is None
    assert m.prompt_eval_ms == 222.0 and m.load_ms == 1.0


def test_no_yardstick_no_verdict() -> None:
    # a send stamp from another clock than the chunks' (only a test double makes one): TTFT
    # and E2E come out negative, and there is nothing to hold the server's durations to
    stats = ServerStats(load_duration=10 * MS, prompt_eval_duration=100 * MS, eval_count=3,
                        eval_duration=40 * MS, total_duration=200 * MS)
    events = stream(123.4, 20.0, 3, 200.0, stats)
    m = compute_metrics(SENT + 10_000 * MS, events, stats)
    assert m.ttft_ms is not None and m.ttft_ms < 0 and m.impossible is None


async def test_decode_booked_as_prompt_through_the_openai_engine() -> None:
    # a llama-server-shaped stream: 20 chunks 10 ms apart after 20 ms (the text arrives over
    # about 190 ms), with the lying timings: 4075 ms of prompt and 1 ms of decode
    async def lying_chat(_: Request) -> Response:
        async def frames() -> AsyncIterator[bytes]:
            for i in range(20):
                await asyncio.sleep(0.02 if i == 0 else 0.01)
                yield sse({"choices": [{"index": 0, "delta": {"content": f" t{i}"}}]})
            yield sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 11, "completion_tokens": 20},
                       "timings": {"prompt_n": 11, "prompt_ms": 4075.0, "predicted_n": 20,
                                   "predicted_ms": 1.0}}) + b"data: [DONE]\n\n"
        return StreamingResponse(frames(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", lying_chat, methods=["POST"])])
    with ServeInThread(app) as url:
        result = await measure_openai(url)
    m = result.metrics
    assert result.status == Status.OK and m.output_tokens == 20
    # the 4076 ms of prompt and decode exceed E2E (~220 ms), the 4075 ms of prompt exceed
    # TTFT (~20 ms), and 1 ms of decode is under a quarter of the ~190 ms span
    assert m.impossible is not None and m.impossible.startswith(
        "the server's load, prompt eval and eval durations add up to 4076.0 ms, more than the ")
    assert "the server's prompt eval (4075.0 ms) is longer than the TTFT" in m.impossible
    assert "the server says it generated 20 tokens in 1.0 ms, 20000 tok/s" in m.impossible
    assert (m.server_decode_tps, m.overhead_ms, m.prompt_eval_ms) == (None, None, None)


def sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def measure_openai(url: str):
    engine = OpenAIEngine(url)
    try:
        return await run_request(lambda: engine.stream_chat("m", chat_messages("hi")),
                                 RequestCollector("hi", {}, "m"))
    finally:
        await engine.aclose()


# ---------------------------------------------------------------- counts of 0


def test_zero_tokens_for_a_thousand_characters_falls_back_to_the_chunks() -> None:
    # 200 chunks of "word " = 1000 characters, and a done chunk that says eval_count 0
    stats = ServerStats(eval_count=0, eval_duration=0, prompt_eval_count=11)
    m = compute_metrics(SENT, stream(20.0, 5.0, 200, 1_020.0, stats, "word "), stats)
    assert m.impossible == ("the server counts 0 tokens for 1000 characters of text; its "
                            "counts and rates are not used (the tokens are counted as chunks)")
    assert (m.output_tokens, m.tokens_basis, m.server_decode_tps) == (200, "chunks", None)
    # TPOT from the chunks: (1020 − 20) / 199 = 5.025 ms
    assert m.tpot_ms == pytest.approx(1_000.0 / 199)


def test_zero_tokens_with_no_text_is_no_lie() -> None:
    stats = ServerStats(eval_count=0, eval_duration=0, done_reason="stop")
    m = compute_metrics(SENT, [StreamEvent(SENT + 30 * MS, done=True, stats=stats)], stats)
    assert m.impossible is None and (m.output_tokens, m.tokens_basis) == (0, "eval_count")


def ollama_app(done: dict[str, object], n: int = 10) -> Starlette:
    """An Ollama `/api/chat` that streams n chunks of "word ", the first after 20 ms and the
    rest 1 ms apart, then `done`'s figures 1 ms later."""
    async def chat(_: Request) -> Response:
        async def lines() -> AsyncIterator[bytes]:
            for i in range(n):
                await asyncio.sleep(0.02 if i == 0 else 0.001)
                yield json.dumps(chunk("word ")).encode() + b"\n"
            await asyncio.sleep(0.001)
            yield json.dumps(chunk("", done=True, done_reason="stop", **done)).encode() + b"\n"
        return StreamingResponse(lines(), media_type="application/x-ndjson")
    return Starlette(routes=[Route("/api/chat", chat, methods=["POST"])])


async def measure_ollama(url: str, model: str = "m"):
    engine = OllamaEngine(url)
    try:
        return await run_request(lambda: engine.stream_chat(model, chat_messages("hi")),
                                 RequestCollector("hi", {}, model))
    finally:
        await engine.aclose()


async def test_zero_tokens_through_the_ollama_engine() -> None:
    with ServeInThread(ollama_app({"eval_count": 0, "eval_duration": 0}, n=200)) as url:
        result = await measure_ollama(url)
    m = result.metrics
    assert result.status == Status.OK
    assert m.impossible is not None and m.impossible.startswith(
        "the server counts 0 tokens for 1000 characters of text")  # 200 × len("word ")
    assert (m.output_tokens, m.tokens_basis) == (200, "chunks")


# ---------------------------------------------------------------- beyond the wall time


def test_durations_far_beyond_the_wall_time_are_not_measurements() -> None:
    # 10 chunks from 10 ms, 10 ms apart, done at 110 ms; the server says it took an hour
    stats = ServerStats(total_duration=3_600_000 * MS, eval_duration=3_000_000 * MS,
                        load_duration=100_000 * MS, eval_count=10)
    m = compute_metrics(SENT, stream(10.0, 10.0, 10, 110.0, stats), stats)
    # total 3600000 ms > E2E 110 + 5; load 100000 ms > TTFT 10 + 5 (10 − 100000 = −99990);
    # the decode (3000000 ms) is longer than the 90 ms span, not shorter: no decode reason
    assert m.impossible == (
        "the server reports total_duration 3600000.0 ms for a request that took 110.0 ms by "
        "llmtop's clock; the server's load (100000.0 ms) is longer than the TTFT llmtop "
        "measured (10.0 ms), though it comes before the first token (an overhead of "
        "-99990.0 ms)" + SET_ASIDE)
    assert (m.load_ms, m.total_ms, m.eval_ms, m.server_decode_tps) == (None, None, None, None)
    assert (m.output_tokens, m.tokens_basis) == (10, "eval_count")  # the count stands
    assert m.buffered is None  # an hour of "decode" is not evidence of a burst


async def test_durations_beyond_the_wall_time_through_the_ollama_engine() -> None:
    done = {"total_duration": 3_600 * 10**9, "eval_duration": 3_000 * 10**9,
            "load_duration": 100 * 10**9, "eval_count": 10, "prompt_eval_count": 11}
    with ServeInThread(ollama_app(done)) as url:
        result = await measure_ollama(url)
    m = result.metrics
    assert result.status == Status.OK
    assert m.impossible is not None and m.impossible.startswith(
        "the server reports total_duration 3600000.0 ms for a request that took ")
    assert (m.load_ms, m.total_ms, m.server_decode_tps, m.output_tokens) == (None, None, None, 10)
    assert result.stats is not None and result.stats.load_duration == 100 * 10**9  # as sent


# ---------------------------------------------------------------- llama-server router mode


async def server_config(kind: str, model: str) -> dict[str, object] | None:
    with ScriptedOpenAI(kind) as up:
        engine = OpenAIEngine(up.url)
        try:
            await engine.version()
            await engine.model_info(model)  # connect() asks this first: the measured model
            return await engine.server_config()
        finally:
            await engine.aclose()


async def test_a_router_is_read_through_its_model_never_its_placeholders() -> None:
    # scripted_openai ROUTER_PROPS: model_path "none", n_ctx 0 (the router's placeholders);
    # ROUTED_PROPS of the loaded model: 2 slots × 2048 ctx
    config = await server_config("llama-server-router", "llama-server")
    assert config == {
        "server": "llama-server", "build_info": "b2-scripted",
        "model_path": "/models/llama-server.gguf", "total_slots": 2, "n_ctx_per_slot": 2048,
        "slots": [{"id": i, "n_ctx": 2048, "speculative": False, "is_processing": False}
                  for i in (0, 1)],
        "speculative": False, "mode": "router", "router_max_instances": 4}
    assert describe(config) == "llama-server b2-scripted: 2 slots × 2048 ctx, router mode"


async def test_a_router_whose_model_is_not_loaded_says_unknown_not_zero() -> None:
    config = await server_config("llama-server-router", "vllm")  # listed, not loaded
    assert config is not None
    assert "model_path" not in config and "n_ctx_per_slot" not in config
    assert "total_slots" not in config and config["mode"] == "router"
    assert config["router_note"] == (
        "a router (model 'vllm'): the model's own /props did not answer (not loaded yet?), "
        "so its slots and context are unknown")
    assert describe(config) == ("llama-server b2-scripted: router mode (the model's own "
                                "/props not read: slots unknown)")


# ---------------------------------------------------------------- /metrics without gauges


async def test_metrics_without_the_slot_gauges_are_absent_not_zero() -> None:
    # a /metrics with llama.cpp's token counters but neither requests_processing nor
    # requests_deferred (another server's exporter): two scrapes, 100 then 160 prompt tokens
    scrapes: list[float] = []
    second = asyncio.Event()

    async def read() -> dict[str, float] | None:
        scrapes.append(100.0 if not scrapes else 160.0)
        if len(scrapes) >= 2:
            second.set()
        return {"prompt_tokens_total": scrapes[-1]}

    watch = ServerWatch(read, interval_s=0.01)
    watch.start()
    await second.wait()  # the level's first scrape and a later one
    summary = await watch.stop()
    assert summary is not None
    assert summary["max_requests_processing"] is None
    assert summary["max_requests_deferred"] is None
    assert summary["prompt_tokens"] == 60.0  # 160 − 100
    line = _server_line(SimpleNamespace(server=summary, mode="concurrency", level=0,
                                        value=2.0))  # type: ignore[arg-type]
    assert line == ("Level 1 (2 users), llama-server /metrics: slots busy not reported (no "
                    "requests_processing), requests waiting not reported (no "
                    "requests_deferred); 60 prompt tokens, n/a predicted.")


def test_a_gauge_seen_in_one_scrape_keeps_its_peak() -> None:
    # the peak of 3, 1 is 3; requests_deferred never reported: None
    summary = summarize({"requests_processing": 3.0}, {"requests_processing": 1.0},
                        {"requests_processing": 3.0}, 2)
    assert summary["max_requests_processing"] == 3.0
    assert summary["max_requests_deferred"] is None


# ---------------------------------------------------------------- an Ollama cloud model


@pytest.mark.parametrize(("model", "remote_host", "where"), [
    ("gpt-oss:120b-cloud", None, "ollama.com"),  # Ollama's cloud names: the tag ends -cloud
    ("minimax-m2:cloud", None, "ollama.com"),  # or is "cloud"
    ("GPT-OSS:20B-CLOUD", None, "ollama.com"),
    ("llama3:8b", None, None),
    ("my-cloud", None, None),  # no tag: "my-cloud:latest", a local model
    ("x:latest", "https://ollama.com:443", "ollama.com"),  # /api/show's remote_host wins
])
def test_cloud_host(model: str, remote_host: str | None, where: str | None) -> None:
    assert cloud_host(model, remote_host) == where


# ---------------------------------------------------------------- an error inside an error

PEER = Peer("http://127.0.0.1:9", "an Ollama server", "start it")
# Ollama passes its runner's error body on inside its own error string
DOUBLE = json.dumps({"error": json.dumps({"error": "the input length exceeds the context "
                                                   "length"})})


@pytest.mark.parametrize(("status", "body"), [
    (400, DOUBLE),
    (500, DOUBLE),
    # the ollama client takes the outer "error" out itself and hands over the inner body
    (400, json.dumps({"error": "the input length exceeds the context length"})),
])
def test_an_error_body_inside_an_error_is_opened_and_the_remedy_is_a_larger_context(
        status: int, body: str) -> None:
    failure = failure_for_http(status, body, peer=PEER, model="m")
    assert failure.kind == FailureKind.BAD_REQUEST
    assert failure.message == (f"http://127.0.0.1:9 rejected the request (HTTP {status}): the "
                               "input length exceeds the context length")
    assert failure.remedy == CONTEXT_REMEDY
    assert "--num-ctx" in CONTEXT_REMEDY and "OLLAMA_CONTEXT_LENGTH" in CONTEXT_REMEDY


def test_an_error_body_after_a_prefix_is_opened() -> None:
    text = 'llama runner: {"error":"the input length exceeds the context length"}'
    failure = failure_in_stream(text, peer=PEER)
    assert failure.message == ("http://127.0.0.1:9 reported an error mid-stream: llama runner: "
                               "the input length exceeds the context length")
    assert failure.remedy == CONTEXT_REMEDY


def test_llama_servers_context_error_gets_the_same_remedy() -> None:
    body = {"error": {"code": 400, "type": "exceed_context_size_error", "message":
                      "request (6027 tokens) exceeds the available context size (512 tokens), "
                      "try increasing it"}}
    failure = failure_for_http(400, json.dumps(body["error"]["message"]), peer=PEER)
    assert failure.remedy == CONTEXT_REMEDY


async def test_a_doubly_encoded_error_through_the_ollama_engine() -> None:
    async def chat(_: Request) -> Response:
        return Response(DOUBLE, status_code=400, media_type="application/json")

    app = Starlette(routes=[Route("/api/chat", chat, methods=["POST"]),
                            Route("/api/tags", lambda _r: JSONResponse({"models": []}))])
    with ServeInThread(app) as url:
        result = await measure_ollama(url)
    assert result.failure is not None and result.failure.kind == FailureKind.BAD_REQUEST
    assert result.failure.message.endswith(
        "rejected the request (HTTP 400): the input length exceeds the context length")
    assert result.failure.remedy == CONTEXT_REMEDY
