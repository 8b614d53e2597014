"""A tool call is the model's output (engines/events.py, `tool_call_text`): its first piece
starts TTFT, its chunks are text chunks, its tokens are counted. The wire shapes: Ollama's
`message.tool_calls` (arguments an object) in a `done: false` chunk with empty content, or only
in the `done: true` one; OpenAI's `delta.tool_calls[].function` (name, then the arguments'
JSON in fragments) beside `"content": ""`, and the older `delta.function_call`."""

from __future__ import annotations

import json
from typing import Any

import ollama

from llmtop.engines.events import ServerStats, StreamEvent, tool_call_text
from llmtop.engines.ollama import OllamaEngine, chat_texts
from llmtop.engines.openai import OpenAIEngine
from llmtop.engines.openai_stream import ChunkReader
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request
from llmtop.sessions.measure.timeline import compute_metrics
from llmtop.testing.paced import LineServer, WireReply

MS = 1_000_000
SENT = 10**12
CALL = {"function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}
CALL_TEXT = 'get_weather{"city": "Tokyo"}'  # the name, then the arguments as JSON
# the server's figures, inside the 305 ms the client saw: load 1 + prompt 50 + decode 240 ms
STATS = {"total_duration": 295 * MS, "load_duration": 1 * MS, "prompt_eval_count": 40,
         "prompt_eval_duration": 50 * MS, "eval_count": 12, "eval_duration": 240 * MS}
# over the wire the call leaves after 30 ms: figures that fit in it (1 + 5 + 12 = 18 ms)
WIRE_STATS = {**STATS, "total_duration": 20 * MS, "prompt_eval_duration": 5 * MS,
              "eval_duration": 12 * MS}


def ollama_line(content: str = "", done: bool = False, calls: list[Any] | None = None,
                **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls is not None:
        message["tool_calls"] = calls
    return {"model": "qwen3", "created_at": "2026-01-01T00:00:00Z", "message": message,
            "done": done, **extra}


def openai_delta(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


OPENAI_FRAMES = [
    openai_delta({"role": "assistant", "content": "", "tool_calls": [
        {"index": 0, "id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": ""}}]}),
    openai_delta({"content": "", "tool_calls": [{"index": 0,
                                                 "function": {"arguments": '{"city":'}}]}),
    openai_delta({"content": "", "tool_calls": [{"index": 0,
                                                 "function": {"arguments": '"Tokyo"}'}}]}),
    openai_delta({}, "tool_calls"),
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
     "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}},
]


def test_tool_call_text_of_both_shapes() -> None:
    assert tool_call_text([CALL]) == CALL_TEXT
    # OpenAI: a string of arguments is the model's text as it came; id and type are not
    assert tool_call_text([{"id": "call_1", "type": "function",
                            "function": {"name": "f", "arguments": '{"a"'}}]) == 'f{"a"'
    assert tool_call_text([CALL, {"function": {"name": "g", "arguments": {}}}]) == (
        CALL_TEXT + "g{}")
    for nothing in (None, [], "x", [{"id": "call_1"}], [{"function": None}], {"function": 1}):
        assert tool_call_text(nothing) == ""


def test_an_ollama_tool_call_chunk_is_text() -> None:
    # the ollama client's own parse of the wire line, as the engine reads it
    part = ollama.ChatResponse.model_validate(ollama_line("", calls=[CALL]))
    assert chat_texts(part) == ("", "", CALL_TEXT)
    assert chat_texts(ollama.ChatResponse.model_validate(ollama_line("hi"))) == ("hi", "", "")


def test_ollama_metrics_with_the_call_in_a_done_false_chunk() -> None:
    # the call at 300 ms (empty content), the done line at 305 ms: the call is the output
    stats = ServerStats.from_mapping(STATS)
    events = [StreamEvent(SENT + 300 * MS, tool_calls=CALL_TEXT),
              StreamEvent(SENT + 305 * MS, done=True, stats=stats)]
    m = compute_metrics(SENT, events)
    assert m.ttft_ms == 300.0 and m.e2e_ms == 305.0
    assert (m.output_tokens, m.tokens_basis, m.text_chunks) == (12, "eval_count", 1)
    assert m.ttft_content_ms is None  # no answer text: the call is all there is
    # 12 tokens in one chunk: Ollama sends a call whole, once parsed, so the time to it holds
    # its generation, and a TPOT from one chunk would be made up: buffered says so
    assert m.buffered is not None and m.buffered.startswith("1 text chunk for 12 tokens")
    assert m.tpot_ms is None and m.server_decode_tps == 50.0  # 12 / 0.24 s
    assert m.impossible is None  # 12 tokens for the call's 28 characters can be true


def test_ollama_call_only_in_the_done_frame() -> None:
    # no chunk before done: the done frame carries the call (a proxy that gathers it there)
    stats = ServerStats.from_mapping({**STATS, "eval_count": 5, "eval_duration": 100 * MS})
    m = compute_metrics(SENT, [StreamEvent(SENT + 280 * MS, done=True, stats=stats,
                                           tool_calls=CALL_TEXT)])
    assert m.ttft_ms == 280.0 and m.e2e_ms == 280.0 and m.output_tokens == 5
    # E2E = TTFT: no time for the other 4 tokens, so no TPOT (never 0 ms/token)
    assert m.tpot_ms is None and m.client_decode_tps is None


def test_openai_tool_call_deltas_are_text() -> None:
    reader = ChunkReader()
    texts = []
    for frame in OPENAI_FRAMES:
        content, thinking = reader.read(frame)
        texts.append((content, thinking, reader.tool_calls))
    assert texts == [("", "", "get_weather"), ("", "", '{"city":'), ("", "", '"Tokyo"}'),
                     ("", "", ""), ("", "", "")]
    assert reader.finish_reason == "tool_calls" and reader.stats().eval_count == 12
    legacy = ChunkReader()
    legacy.read(openai_delta({"function_call": {"name": "f", "arguments": "{}"}}))
    assert legacy.tool_calls == "f{}"


def test_openai_metrics_from_tool_call_deltas() -> None:
    # the three pieces at 120, 140, 160 ms, the finish at 161 ms: TTFT at the first piece (the
    # name), TPOT (161 − 120) / (12 − 1) = 3.727 ms from the server's 12 tokens
    stats = ServerStats(eval_count=12, prompt_eval_count=40, source="usage")
    events = [StreamEvent(SENT + 120 * MS, tool_calls="get_weather"),
              StreamEvent(SENT + 140 * MS, tool_calls='{"city":'),
              StreamEvent(SENT + 160 * MS, tool_calls='"Tokyo"}'),
              StreamEvent(SENT + 161 * MS, done=True, stats=stats)]
    m = compute_metrics(SENT, events)
    assert m.ttft_ms == 120.0 and m.text_chunks == 3 and m.output_tokens == 12
    assert m.tpot_ms == (161.0 - 120.0) / 11 and m.itl_ms == (20.0, 20.0)


def sse(frames: list[Any]) -> WireReply:
    pieces = [(0.03 if i == 0 else 0.01, b"data: " + json.dumps(f).encode() + b"\n\n")
              for i, f in enumerate(frames)]
    return WireReply((*pieces, (0.0, b"data: [DONE]\n\n")), "text/event-stream")


async def measured(engine: Any, server: LineServer) -> Any:
    try:
        collector = RequestCollector("weather?", {}, "m")
        return await run_request(lambda: engine.stream_chat("m", chat_messages("weather?")),
                                 collector)
    finally:
        await engine.aclose()
        await server.stop()


async def test_run_request_measures_an_ollama_tool_call_over_the_wire() -> None:
    lines = [ollama_line("", calls=[CALL]), ollama_line("", done=True, done_reason="stop",
                                                        **WIRE_STATS)]
    server = LineServer(WireReply(tuple((0.03, json.dumps(x).encode() + b"\n")
                                        for x in lines)))
    result = await measured(OllamaEngine(f"http://127.0.0.1:{await server.start()}"), server)
    assert result.status == "ok" and result.tool_calls == CALL_TEXT
    m = result.metrics
    first = next(e for e in result.events if e.tool_calls)
    assert m.ttft_ms == (first.t_ns - result.sent_ns) / MS and m.ttft_ms >= 29.0  # sent ≥ 30 ms
    assert (m.output_tokens, m.text_chunks) == (12, 1)


async def test_run_request_measures_an_ollama_call_only_in_the_done_frame() -> None:
    line = ollama_line("", done=True, calls=[CALL], done_reason="stop", **WIRE_STATS)
    server = LineServer(WireReply(((0.03, json.dumps(line).encode() + b"\n"),)))
    result = await measured(OllamaEngine(f"http://127.0.0.1:{await server.start()}"), server)
    assert result.status == "ok" and result.tool_calls == CALL_TEXT
    assert result.metrics.ttft_ms == result.metrics.e2e_ms and result.metrics.ttft_ms >= 29.0
    assert result.metrics.output_tokens == 12


async def test_run_request_measures_openai_tool_call_deltas_over_the_wire() -> None:
    server = LineServer(sse(OPENAI_FRAMES))
    engine = OpenAIEngine(f"http://127.0.0.1:{await server.start()}")
    result = await measured(engine, server)
    assert result.status == "ok" and result.tool_calls == 'get_weather{"city":"Tokyo"}'
    m = result.metrics
    texts = [e for e in result.events if e.has_text]
    assert [e.tool_calls for e in texts] == ["get_weather", '{"city":', '"Tokyo"}']
    assert m.ttft_ms == (texts[0].t_ns - result.sent_ns) / MS and m.ttft_ms >= 29.0
    assert (m.output_tokens, m.tokens_basis, m.text_chunks) == (12, "eval_count", 3)
    assert m.tpot_ms is not None  # three pieces over ≥ 20 ms: a real TPOT of 12 tokens
