"""The OpenAI engine wired in: `connect()` with --engine openai / auto, calibration through
a server whose streams carry no usage, the bench's statuses for such a server, the CLI flags
and the probe catalogue's llama-cpp-python row."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmtop.cli import build_parser
from llmtop.connect import connect
from llmtop.engines.base import EngineError
from llmtop.engines.events import FailureKind
from llmtop.probes.catalogue import Category, classify
from llmtop.sessions.analysis.run import BenchStatus, first_pass_status
from llmtop.sessions.measure.timeline import RequestMetrics
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.runners.calibration import CalibrationPoint, calibrate
from llmtop.testing.scripted import ScriptedUpstream
from llmtop.testing.scripted_openai import ScriptedOpenAI


@pytest.fixture(scope="module")
def server():
    with ScriptedOpenAI("llama-server") as up:
        yield up


async def test_engine_openai_connects_and_names_what_answered(server):
    conn = await connect("openai", f"{server.url}/v1", model="vllm")
    try:
        assert conn.engine.name == "openai: llama-server"
        assert conn.engine.host == f"{server.url}/v1"
        assert conn.version == "llama-server b1-scripted"
        assert conn.model == "vllm" and conn.info is not None and conn.info.name == "vllm"
    finally:
        await conn.close()


async def test_auto_finds_an_openai_server_when_no_ollama_answers(server):
    conn = await connect("auto", server.url)  # no /v1 given: api_base adds it
    try:
        assert conn.engine.name == "auto → openai: llama-server"
        assert conn.model == "llama-server"  # the first listed (no bundled model there)
    finally:
        await conn.close()


async def test_auto_prefers_ollama_native_api():
    with ScriptedUpstream() as ollama:
        conn = await connect("auto", ollama.url)
        try:
            assert conn.engine.name == "ollama"
        finally:
            await conn.close()


async def test_openai_engine_through_a_running_relay(server):
    from llmtop.servers.relay.server import create_app
    from llmtop.sessions.measure.request import chat_messages
    from llmtop.testing.scripted import ServeInThread

    with ServeInThread(create_app(server.url, api="openai")) as relay_url:
        conn = await connect("openai", server.url, model="vllm", via="relay",
                             relay_url=relay_url)
        try:
            assert conn.via_relay and conn.engine.name == "openai: llama-server via relay"
            assert await conn.engine.version() == "llama-server b1-scripted"
            events = [e async for e in conn.engine.stream_chat("vllm", chat_messages("hi"))]
            assert "".join(e.content for e in events) == "Hello!"
            assert events[-1].stats.eval_count == 3 and events[-1].stats.source == "usage"
        finally:
            await conn.close()


async def test_engine_openai_with_nothing_there_is_unreachable():
    from llmtop.servers.child import free_port
    with pytest.raises(EngineError) as err:
        await connect("openai", f"http://127.0.0.1:{free_port()}/v1")
    assert err.value.failure.kind == FailureKind.UNREACHABLE


async def test_engine_openai_at_an_ollama_api_engine_says_which_answered():
    # new-user pass N30: exit 5 "the request started but did not complete" (none had), with
    # nothing said of the Ollama-API engine that answered there
    from llmtop.engines.events import exit_code_for
    from llmtop.exitcodes import ExitCode

    with ScriptedUpstream() as ollama, pytest.raises(EngineError) as err:
        await connect("openai", ollama.url)
    failure = err.value.failure
    assert failure.kind == FailureKind.BAD_REQUEST and exit_code_for(failure.kind) == (
        ExitCode.USAGE)
    assert failure.message.startswith(f"an Ollama-API engine answers at {ollama.url}")
    assert failure.remedy == "drop --engine openai (auto finds it), or pass --engine ollama"


async def test_unknown_model_lists_the_served_ones(server):
    with pytest.raises(EngineError) as err:
        await connect("openai", server.url, model="nope")
    assert err.value.failure.kind == FailureKind.MODEL_NOT_FOUND
    assert "llama-server, vllm, no-usage, ollama-v1" in err.value.failure.message
    assert "ollama pull" not in err.value.failure.remedy


def test_relay_flags_and_child_args_for_an_openai_upstream():
    from llmtop.servers.relay.process import RelayProcess

    args = build_parser().parse_args(["relay", "--upstream", "http://127.0.0.1:8080/v1",
                                      "--upstream-api", "openai"])
    assert (args.upstream, args.upstream_api) == ("http://127.0.0.1:8080/v1", "openai")
    child = RelayProcess("http://127.0.0.1:8080/v1", port=9999, api="openai")
    assert child.args()[-4:] == ["--upstream", "http://127.0.0.1:8080/v1", "--upstream-api",
                                 "openai"]
    assert "--upstream-api" not in RelayProcess("http://127.0.0.1:11434", port=9999).args()


async def test_calibration_counts_with_the_servers_usage_when_streams_carry_none(server, tmp_path):
    from llmtop.engines.openai import OpenAIEngine
    engine = OpenAIEngine(server.url)
    try:
        cal = await calibrate(engine, "no-usage", [50, 100], {"num_ctx": 4096}, seed=1)
    finally:
        await engine.aclose()
    # The scripted count is 7 + the words of the message; a calibration prompt is `w` random
    # words, a separator and the 7-word INSTRUCTION: tokens = w + 14, one token per word.
    assert cal.template_tokens == 14
    assert cal.targets == {50: CalibrationPoint(36, 50), 100: CalibrationPoint(86, 100)}
    assert cal.probes[:2] == ((1, 15), (50, 64))


def _record(stats, output_tokens):
    record = RequestRecord.from_json({"id": 1, "status": "ok", "stats": stats})
    return replace(record, metrics=replace(RequestMetrics(), output_tokens=output_tokens))


@pytest.mark.parametrize(("stats", "tokens", "status"), [
    # llama-cpp-python: no server figures at all → the chunk count decides, durations n/a
    ({"done_reason": "stop", "source": "none"}, 20, BenchStatus.OK),
    ({"done_reason": "stop", "source": "none"}, 1, BenchStatus.DEGENERATE),
    # vLLM: usage only
    ({"prompt_eval_count": 60, "eval_count": 20, "source": "usage"}, 20, BenchStatus.OK),
    # llama-server with a zero prompt time is still a cache hit
    ({"prompt_eval_count": 60, "eval_count": 20, "eval_duration": 5, "prompt_eval_duration": 0,
      "source": "usage + llama.cpp timings"}, 20, BenchStatus.CACHED),
    # Ollama (no source): an absent duration still means 0, as before
    ({"prompt_eval_count": 60, "eval_count": 20, "eval_duration": 5}, 20, BenchStatus.CACHED),
])
def test_bench_status_of_openai_requests(stats, tokens, status):
    assert first_pass_status(_record(stats, tokens), 60)[0] == status


def test_cli_takes_engine_openai_and_api_key():
    args = build_parser().parse_args(["--engine", "openai", "--api-key", "k", "run",
                                      "--prompt", "x"])
    assert (args.engine, args.api_key) == ("openai", "k")
    args = build_parser().parse_args(["run", "--engine", "openai", "--prompt", "x"])
    assert args.engine == "openai"


def test_llama_cpp_python_server_is_an_inference_engine():
    rule = classify("python3", "/usr/bin/python3",
                    ["python3", "-m", "llama_cpp.server", "--model", "m.gguf"])
    assert rule is not None and (rule.app, rule.category) == ("llama-cpp-python",
                                                              Category.INFERENCE)
