"""engines/ollama.py makes each server behaviour a specific result (docs/protocols.md, "Errors")."""

import pytest

from llmtop.engines.events import FailureKind, Status
from llmtop.engines.hosts import resolve_host
from llmtop.engines.ollama import OllamaEngine
from llmtop.servers.child import free_port
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request
from llmtop.testing.scripted import ScriptedUpstream


@pytest.fixture(scope="module")
def server():
    with ScriptedUpstream() as upstream:
        yield upstream.url


async def stream(host, model, **kw):
    engine = OllamaEngine(host, **kw)
    collector = RequestCollector(prompt="hi", options={}, model=model)
    try:
        return await run_request(lambda: engine.stream_chat(model, chat_messages("hi")), collector)
    finally:
        await engine.aclose()


async def test_ok_stream_carries_text_stats_and_stamps(server):
    r = await stream(server, "ok")
    assert r.status == Status.OK and r.content == "Hello!"
    assert (
        r.stats.eval_count == 3
        and r.stats.prompt_eval_count == 11
        and r.stats.done_reason == "stop"
    )
    stamps = [e.t_ns for e in r.events]
    assert stamps == sorted(stamps) and stamps[0] > r.sent_ns
    # scripted STATS: 11 prompt tokens in 2.75489 ms = 3992.90 tok/s (durations that fit the
    # reply's own 20 ms: a figure past llmtop's clock would be set aside)
    assert r.metrics.impossible is None
    assert r.metrics.server_prefill_tps == pytest.approx(3992.90, abs=0.005)


async def test_absent_stats_stay_absent(server):
    r = await stream(server, "sparse")
    assert r.status == Status.OK
    assert r.stats.load_duration is None and r.stats.prompt_eval_count is None
    assert (
        r.metrics.load_ms is None
        and r.metrics.server_prefill_tps is None
        and r.metrics.overhead_ms is None
    )
    assert r.metrics.server_decode_tps is not None  # 2 tokens over 10 ms


async def test_thinking_is_kept_apart_and_starts_ttft(server):
    r = await stream(server, "thinking")
    assert r.thinking == "Let me think" and r.content == "Yes"
    # the answer's chunk comes after the thinking one; both arrived in one read share its
    # stamp (docs/method.md, "Chunk stamps"), so its time is later or equal
    first_text = next(e for e in r.events if e.has_text)
    assert first_text.thinking and not first_text.content
    assert r.metrics.ttft_ms <= r.metrics.ttft_content_ms


async def test_midstream_error_keeps_partial_text(server):
    r = await stream(server, "midstream-error")
    assert r.status == Status.ERROR and r.content == "partial"
    assert r.failure.kind == FailureKind.SERVER_ERROR
    assert "unexpectedly stopped" in r.failure.message


async def test_stream_without_done_is_truncated(server):
    r = await stream(server, "truncated")
    assert r.status == Status.TRUNCATED and r.content == "cut off"
    assert r.failure.kind == FailureKind.TRUNCATED


async def test_load_only_reply_is_not_a_sample(server):
    r = await stream(server, "load")
    assert r.status == Status.NO_GENERATION and r.metrics.ttft_ms is None


async def test_unknown_model_lists_installed_ones(server):
    r = await stream(server, "llama9:70b")
    assert r.status == Status.ERROR and r.failure.kind == FailureKind.MODEL_NOT_FOUND
    assert (
        "llama9:70b" in r.failure.message
        and "installed: ok, timed, thinking, slow" in r.failure.message
    )
    assert "ollama pull llama9:70b" in r.failure.remedy


async def test_connection_refused_names_host_and_ollama_serve():
    port = free_port()  # nothing listens here
    r = await stream(f"127.0.0.1:{port}", "ok")
    assert r.status == Status.ERROR and r.failure.kind == FailureKind.UNREACHABLE
    assert f"127.0.0.1:{port}" in r.failure.message and "ollama serve" in r.failure.remedy


async def test_read_timeout_ends_the_request(server):
    r = await stream(server, "hang", read_timeout_s=0.5)
    assert r.status == Status.ERROR and r.failure.kind == FailureKind.TIMEOUT
    assert r.content == "x"


@pytest.mark.parametrize(
    "given, env, expected",
    [
        (None, None, "http://127.0.0.1:11434"),
        (None, "0.0.0.0", "http://127.0.0.1:11434"),
        ("localhost:8080", None, "http://localhost:8080"),
        ("http://example.internal", None, "http://example.internal:80"),
        ("https://example.internal", None, "https://example.internal:443"),
        (None, "http://10.0.0.5:11434/", "http://10.0.0.5:11434"),
    ],
)
def test_resolve_host_follows_ollama_rules(monkeypatch, given, expected, env):
    if env is None:
        monkeypatch.delenv("OLLAMA_HOST", raising=False)
    else:
        monkeypatch.setenv("OLLAMA_HOST", env)
    assert resolve_host(given) == expected


@pytest.mark.parametrize(("template", "chat"), [
    ("{{ .Prompt }}", False), ("{{.Prompt}}", False), ("", False), (None, None),
    ("{{- range .Messages }}<|im_start|>{{ .Role }}{{ end }}", True),
])
def test_a_template_that_is_the_prompt_alone_is_no_chat_template(template, chat):
    from llmtop.engines.ollama import _has_chat_template

    assert _has_chat_template(template) is chat
