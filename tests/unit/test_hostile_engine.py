"""Hostile and broken input against the embedded engine's HTTP layer (docs/hostile-input.md).

The model is replaced by `CountingBackend`, a test double for exact cases (one token per
prompt character, three tokens out, an optional gate that holds the generation slot); the
validation, the queue and the HTTP layer are the real ones. The real llama.cpp backend's
share (memory sizes, vocab-only tokenizing) is in tests/integration/test_hostile_real.py.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import threading
import time

import httpx
import psutil
import pytest

from llmtop.servers.embedded.app import QUEUED_AND_GONE, EmbeddedEngine, create_app
from llmtop.servers.embedded.llama_backend import GenerationResult, context_memory
from llmtop.servers.embedded.model_files import ModelDescription
from llmtop.servers.embedded.requests import parse_request
from llmtop.testing.scripted import ServeInThread

GEMMA3_INFO = {  # the bundled Gemma 3 270M's GGUF metadata, as model_files.describe reads it
    "general.architecture": "gemma3", "gemma3.block_count": 18, "gemma3.attention.head_count": 4,
    "gemma3.attention.head_count_kv": 1, "gemma3.attention.key_length": 256,
    "gemma3.attention.value_length": 256, "gemma3.embedding_length": 640,
}
DESC = ModelDescription(name="m:1", path="/nonexistent.gguf", size=1, digest="d", modified_at="t",
                        family="gemma3", parameter_count=1, parameter_size="1",
                        quantization_level="Q", context_length=32768, model_info=GEMMA3_INFO)
LOCAL = "http://127.0.0.1:11434"


class CountingBackend:
    """One token per prompt character; each generation emits "x" three times unless
    cancelled; `gate` (when given) holds the generation until it is set."""

    def __init__(self, n_vocab: int = 1000, gate: threading.Event | None = None) -> None:
        self.loaded = None
        self.vocab_size = n_vocab
        self.gate = gate
        self.started = threading.Event()
        self.generations = 0

    def ensure_loaded(self, settings):
        self.loaded = settings
        return 1

    def unload(self):
        self.loaded = None

    close = unload
    vocab_loaded = True

    def n_vocab(self):
        return self.vocab_size

    def chat_prompt(self, messages):
        return "".join(m["content"] for m in messages), ()

    def tokenize(self, text):
        return list(range(len(text)))

    def generate(self, tokens, sampling, emit, cancel):
        self.generations += 1
        self.started.set()
        if self.gate is not None:
            self.gate.wait(30)
        n = 0
        while n < 3 and not cancel.is_set():
            emit("x")
            n += 1
        return GenerationResult(prompt_eval_count=len(tokens), prompt_eval_duration=1,
                                eval_count=n, eval_duration=1, cancelled=cancel.is_set())


def engine_with(backend) -> EmbeddedEngine:
    engine = EmbeddedEngine(DESC)
    engine.backend = backend
    return engine


def client(engine: EmbeddedEngine) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(engine)),
                             base_url=LOCAL)


def chat(content: str = "hi", **extra) -> dict:
    return {"model": "m:1", "messages": [{"role": "user", "content": content}], **extra}


async def post(body, path="/api/chat", backend=None, **kw) -> httpx.Response:
    async with client(engine_with(backend or CountingBackend())) as c:
        if isinstance(body, bytes):
            return await c.post(
                path, content=body, headers={"Content-Type": "application/json"}, **kw
            )
        return await c.post(path, json=body, **kw)


CORES = os.cpu_count() or 1

# (what was sent, HTTP status, a fragment the error must contain). One row per kind in
# docs/hostile-input.md; each status and message is the policy written there.
REFUSED = [
    (
        chat(options={"num_thread": CORES + 1}),
        400,
        f"more than this machine's {CORES} logical cores",
    ),
    (chat(options={"num_thread": 100_000}), 400, "option 'num_thread' is 100000"),
    (chat(keep_alive=1e300), 400, "keep_alive 1e+300 is out of range"),
    (chat(keep_alive="9999999999h"), 400, "out of range"),
    (chat(options={"seed": 2**63}), 400, "option 'seed' must be from"),
    (chat(options={"num_ctx": 2**31}), 400, "option 'num_ctx' must be from 16 to 2147483647"),
    (chat(options={"top_k": 2**40}), 400, "option 'top_k' must be from"),
    (
        b'{"model": "m:1", "messages": [], "options": {"temperature": NaN}}',
        400,
        "NaN is not valid JSON",
    ),
    (
        b'{"model": "m:1", "messages": [], "options": {"temperature": Infinity}}',
        400,
        "Infinity is not valid JSON",
    ),
    (
        b'{"model": "m:1", "messages": [], "options": {"temperature": 1e400}}',
        400,
        "options.temperature is not a finite number",
    ),
    ({"model": 42, "messages": []}, 400, "model must be a string, got 42 (a number)"),
    ({"model": ["m:1"], "messages": []}, 400, "model must be a string, got ['m:1'] (a list)"),
    (chat(stream="yes"), 400, "stream must be true or false, got 'yes' (a string)"),
    ({"model": "m:1", "messages": {"role": "user"}}, 400, "messages must be a list"),
    (chat(options=[1]), 400, "options must be a JSON object, got [1] (a list)"),
    (
        b'{"model": "m:1", "messages": [{"role": "user", "content": "\\ud800"}]}',
        400,
        "messages[0].content has a lone surrogate ('\\ud800')",
    ),
    (b'{"model": "m:1", "\\udfff": 1}', 400, "a key in the body has a lone surrogate"),
    (
        {"model": "m:1", "messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]},
        400,
        "does not support images (messages[0].images)",
    ),
    (chat(format="json"), 400, 'does not support structured output (field "format")'),
    (chat(format={"type": "object"}), 400, 'field "format"'),
    (chat(tools=[{"type": "function"}]), 400, "does not support tools"),
    (b"[" * 100 + b"]" * 100, 400, "JSON nested deeper than 32 levels"),
    (b"[" * 100_000, 400, "JSON nested deeper than 32 levels"),  # RecursionError in json
    (b'{"model": "m:1", "messages": ' + b"[" * 40 + b"]" * 40 + b"}", 400, "nested deeper"),
    (b"\xff\xfe{", 400, "request body is not UTF-8 text"),
    (b"{bad", 400, "invalid JSON in request body"),
    (b"[]", 400, "the request body must be a JSON object, got [] (a list)"),
]


@pytest.mark.parametrize("body, status, fragment", REFUSED)
async def test_refused_before_any_work(body, status, fragment):
    backend = CountingBackend()
    r = await post(body, backend=backend)
    assert (r.status_code, fragment in r.json()["error"]) == (status, True), r.text
    assert backend.loaded is None and backend.generations == 0  # nothing was loaded or run


@pytest.mark.parametrize(
    "body, fragment",
    [
        (
            {"model": "m:1", "prompt": "hi", "images": ["aGk="]},
            'does not support images (field "images")',
        ),
        ({"model": "m:1", "prompt": "hi", "format": "json"}, 'field "format"'),
        ({"model": 7, "prompt": "hi"}, "model must be a string, got 7 (a number)"),
        ({"model": "m:1", "prompt": 7}, "prompt must be a string, got 7 (a number)"),
        ({"model": "m:1", "prompt": "hi", "raw": 1}, "raw must be true or false, got 1 (a number)"),
    ],
)
async def test_generate_refusals_name_the_field(body, fragment):
    r = await post(body, path="/api/generate")
    assert r.status_code == 400 and fragment in r.json()["error"], r.text


async def test_show_names_the_type_of_model():
    r = await post({"model": 42}, path="/api/show")
    assert r.status_code == 400 and r.json()["error"] == "model must be a string, got 42 (a number)"


async def test_body_over_the_limit_is_413_before_parsing():
    body = json.dumps(chat("a" * (1 << 20))).encode()  # the prompt alone is the whole 1 MiB limit
    r = await post(body)
    assert r.status_code == 413
    assert r.json()["error"] == ("request body too large: the limit is 1048576 bytes "
                                 "($LLMTOP_MAX_BODY_BYTES to change it)")


async def test_prompt_longer_than_the_context_is_400_before_the_slot():
    # CountingBackend: one token per character; num_ctx 64 → 65 characters is one too many
    backend = CountingBackend()
    r = await post(chat("a" * 65, options={"num_ctx": 64}), backend=backend)
    assert r.status_code == 400
    assert r.json()["error"] == ("the prompt is 65 tokens, longer than the context (num_ctx 64): "
                                 "shorten it or raise num_ctx")
    assert backend.loaded is None  # refused before the model was loaded, i.e. before the slot
    ok = await post(chat("a" * 64, options={"num_ctx": 64}), backend=backend)
    assert ok.status_code == 200


def test_context_memory_of_gemma3_270m():
    # Independently: KV = 18 layers × 1 KV head × (256 + 256) × 2 bytes = 18,432 B per token;
    # logits = 262,144 vocabulary × 4 bytes = 1 MiB per token (n_batch = n_ctx).
    kv, logits = context_memory(4096, GEMMA3_INFO, 262_144)
    assert kv == 4096 * 18 * 1 * 512 * 2 == 75_497_472
    assert logits == 4096 * 262_144 * 4 == 4 * 2**30


async def test_context_that_memory_cannot_hold_is_400_naming_num_ctx():
    # A vocabulary so large that 1000 tokens of logits (1000 × n_vocab × 4 B) exceed RAM + swap.
    ceiling = psutil.virtual_memory().total + psutil.swap_memory().total
    n_vocab = math.ceil(ceiling / 4000) + 1
    backend = CountingBackend(n_vocab=n_vocab)
    r = await post(chat(options={"num_ctx": 1000}), backend=backend)
    assert r.status_code == 400 and backend.loaded is None
    assert r.json()["error"].startswith("option 'num_ctx' 1000 needs about")
    assert "use a num_ctx of at most about 999" in r.json()["error"]  # ⌊ceiling / (n_vocab × 4)⌋


def _raw_request(url: str, body: dict) -> socket.socket:
    """Send a POST over a plain socket and return it unread (the client then 'leaves')."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_a_client_gone_while_queued_is_dropped_unstarted():
    gate = threading.Event()
    backend = CountingBackend(gate=gate)
    engine = engine_with(backend)
    with ServeInThread(create_app(engine)) as url:
        first: list[httpx.Response] = []
        holder = threading.Thread(target=lambda: first.append(
            httpx.post(url + "/api/chat", json=chat(stream=False), timeout=30)))
        holder.start()
        _until(backend.started.is_set)  # the first request holds the slot
        waiters = [_raw_request(url, chat("left")) for _ in range(3)]
        _until(lambda: engine.waiting == 3)
        for sock in waiters:
            sock.close()  # the clients leave while their requests wait
        gate.set()
        holder.join(30)
        _until(lambda: len(engine.history) == 4)
        jobs = httpx.get(url + "/llmtop/jobs").json()
    assert first[0].status_code == 200 and first[0].json()["message"]["content"] == "xxx"
    assert backend.generations == 1  # none of the three that left was run
    assert jobs["waiting"] == 0
    assert (
        jobs["jobs"][1:]
        == [
            {
                "endpoint": "/api/chat",
                "done_reason": "cancelled",
                "eval_count": 0,
                "cancelled": True,
                "error": QUEUED_AND_GONE,
            }
        ]
        * 3
    )


async def test_close_stops_the_running_generation():
    class Endless(CountingBackend):
        def generate(self, tokens, sampling, emit, cancel):
            self.started.set()
            cancel.wait(30)  # like a token loop: runs until its cancel flag is set
            return GenerationResult(cancelled=True)

    backend = Endless()
    engine = engine_with(backend)
    chunks = engine.run(engine_request(), "/api/chat", time.perf_counter_ns())
    pending = asyncio.ensure_future(anext(chunks))
    await asyncio.to_thread(backend.started.wait, 10)
    assert engine.close(wait_s=5.0) is True  # the flag was set, the thread finished
    pending.cancel()


def engine_request():
    return parse_request(chat(), chat=True, model_name="m:1")
