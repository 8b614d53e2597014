"""OpenAIEngine (llmtop/engines/openai.py) against the scripted OpenAI server: every stream
shape and SSE detail of docs/protocols.md, "OpenAI-compatible servers", gives exact text,
stats and failure kinds.

Expected values are read off the scripted bodies in llmtop/testing/scripted_openai.py by hand
(e.g. llama-server: usage.prompt_tokens 11 = timings prompt_n 9 + cache_n 2; prompt_ms 30.5 →
30_500_000 ns), not computed by the code under test.
"""

from __future__ import annotations

import pytest

from llmtop.engines.base import EngineError
from llmtop.engines.events import FailureKind, ServerStats, Status
from llmtop.engines.openai import OpenAIEngine, api_base
from llmtop.engines.openai_options import request_body
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request
from llmtop.testing.scripted_openai import ScriptedOpenAI


@pytest.fixture(scope="module")
def server():
    with ScriptedOpenAI("llama-server") as up:
        yield up


async def stream(url, model, **kw):
    engine = OpenAIEngine(url)
    try:
        return [e async for e in engine.stream_chat(model, chat_messages("hi"), **kw)]
    finally:
        await engine.aclose()


def texts(events):
    return "".join(e.content for e in events), "".join(e.thinking for e in events)


@pytest.mark.parametrize(("model", "stats"), [
    ("llama-server", ServerStats(prompt_eval_count=11, prompt_eval_duration=30_500_000,
                                 eval_count=3, eval_duration=20_250_000, done_reason="length",
                                 prompt_cached_count=2, source="usage + llama.cpp timings")),
    ("vllm", ServerStats(prompt_eval_count=12, eval_count=3, done_reason="stop",
                         source="usage")),
    ("vllm-continuous", ServerStats(prompt_eval_count=12, eval_count=3, done_reason="stop",
                                    source="usage")),
    ("lm-studio", ServerStats(prompt_eval_count=13, prompt_eval_duration=125_000_000,
                              eval_count=3, eval_duration=20_000_000, done_reason="stop",
                              source="usage + LM Studio stats")),
    ("no-usage", ServerStats(done_reason="stop", source="none")),
    ("comments", ServerStats(done_reason="stop", source="none")),
    ("crlf", ServerStats(done_reason="stop", source="none")),
    ("no-space", ServerStats(done_reason="stop", source="none")),
    ("no-done", ServerStats(done_reason="stop", source="none")),
])
async def test_stream_shapes_give_exact_text_and_stats(server, model, stats):
    events = await stream(server.url, model)
    text = "lo!" if model == "no-usage" else "Hello!"  # no-usage opens with a role-only chunk
    assert texts(events) == (text, "")
    assert [e.done for e in events] == [False] * (2 if model == "no-usage" else 3) + [True]
    assert events[-1].failure is None
    assert events[-1].stats == stats
    assert [e.t_ns for e in events] == sorted(e.t_ns for e in events)


@pytest.mark.parametrize(("model", "thinking", "content"), [
    ("ollama-v1", "Let me think", "Yes"), ("reasoning-content", "Hm", "Ok")])
async def test_reasoning_starts_the_clock_and_answer_time_is_kept(server, model, thinking, content):
    collector = RequestCollector("hi", {}, model)
    engine = OpenAIEngine(server.url)
    try:
        result = await run_request(lambda: engine.stream_chat(model, chat_messages("hi")),
                                   collector)
    finally:
        await engine.aclose()
    assert (result.content, result.thinking) == (content, thinking)
    first_text = next(e for e in result.events if e.has_text)
    first_answer = next(e for e in result.events if e.content)
    assert first_text.thinking and not first_text.content  # thinking came first
    assert result.metrics.ttft_ms == (first_text.t_ns - result.sent_ns) / 1e6
    assert result.metrics.ttft_content_ms == (first_answer.t_ns - result.sent_ns) / 1e6
    # later, or equal when both chunks arrived in one read (they then share its arrival stamp:
    # docs/method.md, "Chunk stamps")
    assert result.metrics.ttft_content_ms >= result.metrics.ttft_ms


async def test_role_only_and_empty_deltas_never_start_the_clock(server):
    collector = RequestCollector("hi", {}, "no-usage")
    engine = OpenAIEngine(server.url)
    try:
        result = await run_request(lambda: engine.stream_chat("no-usage", chat_messages("hi")),
                                   collector)
    finally:
        await engine.aclose()
    # the stream is: role-only, "" , "lo", "!", finish, [DONE]: only "lo" and "!" are text
    assert [e.content for e in result.events] == ["lo", "!", ""]
    assert result.metrics.ttft_ms == (result.events[0].t_ns - result.sent_ns) / 1e6
    assert result.metrics.tokens_basis == "chunks" and result.metrics.output_tokens == 2
    assert result.status == Status.OK


async def test_usage_counts_tokens_and_length_is_not_an_error(server):
    collector = RequestCollector("hi", {}, "llama-server")
    engine = OpenAIEngine(server.url)
    try:
        result = await run_request(
            lambda: engine.stream_chat("llama-server", chat_messages("hi")), collector)
    finally:
        await engine.aclose()
    assert result.status == Status.OK
    assert result.metrics.tokens_basis == "eval_count" and result.metrics.output_tokens == 3
    # server decode rate: predicted_n / predicted_ms = 3 / 20.25 ms = 148.148… tok/s
    assert result.metrics.server_decode_tps == pytest.approx(3 / 0.02025)
    # server prefill rate: the tokens it evaluated, prompt_n = 11 prompt tokens − 2 cached
    # (cache_n), over prompt_ms: 9 / 30.5 ms = 295.08… tok/s (the cached two took no time)
    assert result.metrics.server_prefill_tps == pytest.approx(9 / 0.0305)


@pytest.mark.parametrize(("model", "kind", "kept"), [
    ("error-object", FailureKind.SERVER_ERROR, "Hello"),
    ("event-error", FailureKind.SERVER_ERROR, "Hello"),
    ("done-early", FailureKind.TRUNCATED, "Hello"),
    ("cut-off", FailureKind.TRUNCATED, "Hello"),
    ("garbage", FailureKind.PROTOCOL, "Hel"),
    ("http-400", FailureKind.BAD_REQUEST, ""),
    ("http-500", FailureKind.SERVER_ERROR, ""),
    ("unknown-model", FailureKind.MODEL_NOT_FOUND, ""),
])
async def test_failures_end_the_stream_with_a_failure(server, model, kind, kept):
    events = await stream(server.url, model)
    assert texts(events)[0] == kept
    assert events[-1].done and events[-1].failure is not None
    assert events[-1].failure.kind == kind
    assert sum(e.done for e in events) == 1


async def test_error_messages_quote_the_server(server):
    events = await stream(server.url, "http-400")
    assert "exceeds the available context size (512 tokens)" in events[-1].failure.message
    events = await stream(server.url, "event-error")
    assert "out of memory" in events[-1].failure.message
    events = await stream(server.url, "error-object")
    assert "slot crashed" in events[-1].failure.message


async def test_a_server_refusing_stream_options_is_asked_again_without(server):
    server.recorder.reset()
    engine = OpenAIEngine(server.url)
    try:
        first = [e async for e in engine.stream_chat("refuses-usage", chat_messages("hi"))]
        second = [e async for e in engine.stream_chat("refuses-usage", chat_messages("hi"))]
    finally:
        await engine.aclose()
    assert texts(first)[0] == texts(second)[0] == "lo!"
    assert first[-1].failure is None and second[-1].failure is None
    sent = [("stream_options" in body) for _, body in server.recorder.requests]
    assert sent == [True, False, False]  # refused once, then never sent again
    assert any("stream_options" in note for note in engine.notes)


async def test_request_body_maps_options_and_says_what_it_cannot_send(server):
    server.recorder.reset()
    opts = {"temperature": 0.0, "seed": 42, "num_ctx": 8192, "num_predict": 20, "top_p": 0.9,
            "stop": ["\n"]}
    engine = OpenAIEngine(server.url)
    try:
        _ = [e async for e in engine.stream_chat("vllm", chat_messages("hi"), options=opts,
                                                 think=False, keep_alive="5m")]
    finally:
        await engine.aclose()
    _, body = server.recorder.requests[-1]
    assert body == {"model": "vllm", "messages": [{"role": "user", "content": "hi"}],
                    "stream": True, "temperature": 0.0, "seed": 42, "max_tokens": 20,
                    "top_p": 0.9, "stop": ["\n"], "stream_options": {"include_usage": True}}
    assert [n.split(" ", 2)[:2] for n in engine.notes] == [
        ["option", "num_ctx=8192"], ["think=False", "not"], ["keep_alive='5m'", "not"]]


def test_request_body_skips_none_and_notes_unknown_options():
    body, notes = request_body("m", [], {"num_predict": None, "repeat_penalty": 1.1})
    assert body == {"model": "m", "messages": [], "stream": True}
    assert notes == ["option repeat_penalty=1.1 not sent: the OpenAI API has no such field"]


async def test_metadata_lists_models_and_identifies_the_server(server):
    engine = OpenAIEngine(server.url)
    try:
        assert await engine.list_models() == ["llama-server", "vllm", "no-usage", "ollama-v1"]
        info = await engine.model_info("llama-server")
        assert (info.context_length, info.size, info.parameter_size) == (4096, 253231104,
                                                                          "268.10M")
        assert await engine.version() == "llama-server b1-scripted"
        with pytest.raises(EngineError) as err:
            await engine.model_info("nope")
        assert err.value.failure.kind == FailureKind.MODEL_NOT_FOUND
        # llama-server counts by /apply-template + /tokenize: the scripted template around
        # "one two three" splits on whitespace into "<start_of_turn>user", "one", "two",
        # "three<end_of_turn>", "<start_of_turn>model" = 5 pieces, plus BOS (add_special) = 6
        assert await engine.count_prompt_tokens("vllm", chat_messages("one two three")) == 6
        assert all(body.get("stream") for _, body in server.recorder.requests)  # no generation
    finally:
        await engine.aclose()


async def test_other_servers_count_with_non_streamed_usage():
    with ScriptedOpenAI("llama-cpp-python") as up:
        engine = OpenAIEngine(up.url)
        try:
            await engine.version()
            # the scripted usage.prompt_tokens: PROMPT_BASE_TOKENS 7 + 3 words
            assert await engine.count_prompt_tokens("m", chat_messages("one two three")) == 10
            assert up.recorder.requests[-1][1]["stream"] is False
            assert up.recorder.requests[-1][1]["max_tokens"] == 1
        finally:
            await engine.aclose()


@pytest.mark.parametrize("kind", ["vllm", "lm-studio", "llama-cpp-python", "something"])
async def test_identify_each_kind(kind):
    with ScriptedOpenAI(kind) as up:
        engine = OpenAIEngine(up.url)
        try:
            found = await engine.version()
        finally:
            await engine.aclose()
    expected = {"vllm": "vllm 0.0.0-scripted", "lm-studio": "lm-studio",
                "llama-cpp-python": "llama-cpp-python 0.0.0", "something": "openai-compatible"}
    assert found == expected[kind]


async def test_api_key_is_sent_as_bearer(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    engine = OpenAIEngine(server.url)
    explicit = OpenAIEngine(server.url, api_key="given")
    try:
        assert engine._client.headers["Authorization"] == "Bearer from-env"
        assert explicit._client.headers["Authorization"] == "Bearer given"
    finally:
        await engine.aclose()
        await explicit.aclose()


@pytest.mark.parametrize(("given", "base"), [
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1"),
    ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
    ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1"),
    ("localhost:1234/api/v0", "http://localhost:1234/api/v0"),
])
def test_api_base(given, base):
    assert api_base(given) == base


async def test_unreachable_server_is_a_failure():
    from llmtop.servers.child import free_port
    events = await stream(f"http://127.0.0.1:{free_port()}/v1", "m")
    assert events[-1].failure.kind == FailureKind.UNREACHABLE


async def test_vllm_metrics_add_the_durations_of_each_request():
    with ScriptedOpenAI("vllm") as up:
        engine = OpenAIEngine(up.url)
        try:
            await engine.version()  # identifies vLLM and takes the /metrics baseline
            for _ in range(2):
                events = [e async for e in engine.stream_chat("vllm", chat_messages("hi"))]
                # VLLM_SECONDS: prefill 0.0305 s, decode 0.02025 s, e2e 0.0625 s per request
                assert events[-1].stats == ServerStats(
                    prompt_eval_count=12, eval_count=3, done_reason="stop",
                    prompt_eval_duration=30_500_000, eval_duration=20_250_000,
                    total_duration=62_500_000, source="usage + vLLM /metrics")
        finally:
            await engine.aclose()


def test_metrics_of_two_requests_are_not_attributed():
    from llmtop.engines.openai_metrics import parse_metrics, request_durations
    text = ("# TYPE vllm:request_prefill_time_seconds histogram\n"
            'vllm:request_prefill_time_seconds_sum{{model_name="a"}} {s}\n'
            'vllm:request_prefill_time_seconds_count{{model_name="a"}} {n}\n')
    one, three = (parse_metrics(text.format(s=s, n=n)) for s, n in ((0.5, 1), (0.9, 3)))
    assert request_durations(one, three) == {}  # two requests finished: n/a, never a mix
    two = parse_metrics(text.format(s=0.75, n=2))
    assert request_durations(one, two) == {"prompt_eval_duration": 250_000_000}
