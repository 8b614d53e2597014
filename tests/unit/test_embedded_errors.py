"""Error paths of the embedded engine's HTTP layer that a real model cannot be made to hit.

The backend is replaced by a scripted one (a test double for an exact case only: the real
backend is exercised by tests/integration)."""

from __future__ import annotations

import json

import httpx
import pytest

from llmtop.servers.embedded.app import EmbeddedEngine, create_app
from llmtop.servers.embedded.llama_backend import GenerationError, GenerationResult
from llmtop.servers.embedded.model_files import ModelDescription

DESC = ModelDescription(
    name="m:1",
    path="/nonexistent.gguf",
    size=1,
    digest="d",
    modified_at="t",
    family="f",
    parameter_count=1,
    parameter_size="1",
    quantization_level="Q",
    context_length=512,
)


class ScriptedBackend:
    vocab_loaded = True

    def __init__(self, fail_after: int | None = None, fail_load: bool = False):
        self.fail_after, self.fail_load, self.loaded = fail_after, fail_load, None

    def ensure_loaded(self, settings):
        if self.fail_load:
            raise GenerationError("cannot load /nonexistent.gguf: bad magic")
        self.loaded = settings
        return 5

    def unload(self):
        self.loaded = None

    def close(self):
        self.loaded = None

    def n_vocab(self):
        return 1000

    def chat_prompt(self, messages):
        return "p", ()

    def tokenize(self, text):
        return [1, 2, 3]

    def generate(self, tokens, sampling, emit, cancel):
        for i, piece in enumerate(["one", " two", " three"]):
            if self.fail_after is not None and i == self.fail_after:
                raise RuntimeError("GGML_ASSERT failed")
            emit(piece)
        return GenerationResult(
            prompt_eval_count=3, prompt_eval_duration=1000, eval_count=3, eval_duration=2000
        )


def client_for(backend) -> httpx.AsyncClient:
    engine = EmbeddedEngine(DESC)
    engine.backend = backend
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(engine)), base_url="http://127.0.0.1:11434")


BODY = {"model": "m:1", "messages": [{"role": "user", "content": "hi"}]}


async def test_failure_after_streaming_began_is_a_final_error_line():
    async with client_for(ScriptedBackend(fail_after=2)) as c:
        r = await c.post("/api/chat", json=BODY)
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
    assert [x["message"]["content"] for x in lines[:2]] == ["one", " two"]
    assert lines[-1] == {
        "error": "an error was encountered while running the model: GGML_ASSERT failed"
    }


async def test_failure_before_any_text_is_an_http_error():
    async with client_for(ScriptedBackend(fail_load=True)) as c:
        r = await c.post("/api/chat", json=BODY)
    assert r.status_code == 500 and r.json() == {
        "error": "cannot load /nonexistent.gguf: bad magic"
    }


async def test_zero_stats_are_omitted_and_durations_are_ns():
    async with client_for(ScriptedBackend()) as c:
        r = await c.post("/api/chat", json={**BODY, "stream": False})
    reply = r.json()
    assert reply["message"]["content"] == "one two three" and reply["done"] is True
    assert (
        reply["prompt_eval_duration"] == 1000
        and reply["eval_duration"] == 2000
        and reply["eval_count"] == 3
    )
    assert reply["load_duration"] >= 5 and reply["total_duration"] >= reply["load_duration"]


@pytest.mark.parametrize("keep_alive, reason", [(None, "load"), (0, "unload")])
async def test_load_and_unload(keep_alive, reason):
    backend = ScriptedBackend()
    async with client_for(backend) as c:
        body = {"model": "m:1"} | ({"keep_alive": keep_alive} if keep_alive is not None else {})
        r = await c.post("/api/generate", json=body)
    assert r.json()["done_reason"] == reason
    assert (backend.loaded is None) == (reason == "unload")


class Clock:
    """perf_counter_ns for the engine: moves only when told."""

    def __init__(self) -> None:
        self.now = 10**12

    def __call__(self) -> int:
        return self.now


class VocabStillLoading(ScriptedBackend):
    """The first request arrives while the prep thread still loads the vocabulary: its
    rendering waits 600 ms (the engine's virtual clock) for it."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock, self.vocab_loaded = clock, False

    def chat_prompt(self, messages):
        if not self.vocab_loaded:
            self.clock.now += 600_000_000
            self.vocab_loaded = True
        return super().chat_prompt(messages)


async def test_the_wait_for_the_vocabulary_is_load_time_not_overhead(monkeypatch):
    # finding P: a `run` sent as the engine started showed 0.6 s of "overhead (TTFT − load −
    # prompt eval)": the request waited for the vocabulary's load before taking the slot
    clock = Clock()
    monkeypatch.setattr("llmtop.servers.embedded.app.perf_counter_ns", clock)
    async with client_for(VocabStillLoading(clock)) as c:
        first = (await c.post("/api/chat", json={**BODY, "stream": False})).json()
        again = (await c.post("/api/chat", json={**BODY, "stream": False})).json()
    # parsing 0 ns (the clock did not move) + the vocabulary's 600 ms + ensure_loaded's 5 ns
    assert first["load_duration"] == 600_000_005
    # the second: the vocabulary is there, the model loaded (ensure_loaded says 5 again)
    assert again["load_duration"] == 5
