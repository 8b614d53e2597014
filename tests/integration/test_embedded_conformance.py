"""The embedded engine speaks Ollama's API: driven with the official `ollama` client."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import UTC, datetime

import httpx
import ollama
import pytest

from tests.conftest import MODEL

pytestmark = pytest.mark.integration
OPTS = {"temperature": 0, "seed": 42, "num_predict": 12}
MSGS = [{"role": "user", "content": "Name three colors."}]


def test_sync_chat_non_stream(engine_url):
    r = ollama.Client(engine_url).chat(MODEL, MSGS, options=OPTS)
    assert r.done and r.done_reason == "length" and r.message.role == "assistant"
    assert r.message.content.strip()
    # the base model sees the text alone (no chat template): <bos> Name three colors . = 5
    assert r.eval_count == 12 and r.prompt_eval_count == 5
    assert r.eval_duration > 0 and r.prompt_eval_duration > 0 and r.total_duration > r.eval_duration


def test_sync_chat_stream_matches_non_stream(engine_url):
    client = ollama.Client(engine_url)
    whole = client.chat(MODEL, MSGS, options=OPTS).message.content
    parts = list(client.chat(MODEL, MSGS, options=OPTS, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content for p in parts) == whole  # temperature 0, same seed
    assert parts[-1].eval_count == 12


def test_generate_stream_and_non_stream(engine_url):
    client = ollama.Client(engine_url)
    r = client.generate(MODEL, "Name three colors.", options=OPTS)
    assert (
        r.response.strip()
        and r.done
        and r.context
        and len(r.context) == r.prompt_eval_count + r.eval_count
    )
    parts = list(client.generate(MODEL, "Name three colors.", options=OPTS, stream=True))
    assert "".join(p.response for p in parts) == r.response


async def test_async_client_stream(engine_url):
    client = ollama.AsyncClient(engine_url)
    text, last = "", None
    async for part in await client.chat(MODEL, MSGS, options=OPTS, stream=True):
        text += part.message.content
        last = part
    assert text.strip() and last.done and last.eval_count == 12
    r = await client.generate(MODEL, "Hello", options=OPTS)
    assert r.done and r.eval_count == 12


def test_list_show_ps(engine_url):
    client = ollama.Client(engine_url)
    client.chat(MODEL, MSGS, options={**OPTS, "num_ctx": 2048})
    (m,) = client.list().models
    assert m.model == MODEL and m.size > 200_000_000 and m.details.quantization_level == "Q4_K_M"
    shown = client.show(MODEL)
    d = shown.details
    assert (d.family, d.parameter_size, d.quantization_level, d.format) == (
        "gemma3",
        "268.10M",
        "Q4_K_M",
        "gguf",
    )
    assert shown.modelinfo["general.architecture"] == "gemma3"
    assert shown.modelinfo["general.parameter_count"] == 268_098_176
    (p,) = client.ps().models
    assert p.model == MODEL and p.size_vram == 0 and p.size == m.size
    assert p.context_length == 2048
    assert p.expires_at > datetime.now(UTC)


def test_errors_as_ollama_gives_them(engine_url):
    client = ollama.Client(engine_url)
    with pytest.raises(ollama.ResponseError) as info:
        client.chat("llama3:8b", MSGS)
    assert info.value.status_code == 404 and info.value.error == "model 'llama3:8b' not found"
    with pytest.raises(ollama.ResponseError) as info:
        list(client.chat("llama3:8b", MSGS, stream=True))
    assert info.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(MODEL, MSGS, think=True)
    assert info.value.status_code == 400 and "does not support thinking" in info.value.error
    bad = httpx.post(f"{engine_url}/api/chat", content=b"{not json")
    assert bad.status_code == 400 and bad.json()["error"].startswith("invalid JSON")
    bad = httpx.post(f"{engine_url}/api/generate", json={"model": MODEL, "prompt": 5})
    assert bad.status_code == 400 and bad.json() == {
        "error": "prompt must be a string, got 5 (a number)"
    }


def test_liveness_and_version(engine_url):
    assert httpx.get(engine_url).text == "Ollama is running"
    assert httpx.get(f"{engine_url}/api/version").json()["engine"] == "llmtop-embedded"


def test_load_only_request(engine_url):
    r = ollama.Client(engine_url).generate(MODEL)
    assert r.done and r.done_reason == "load" and not r.response and r.eval_count is None


def test_stop_option_cuts_the_text(engine_url):
    client = ollama.Client(engine_url)
    opts = {**OPTS, "num_predict": 24}
    full = client.generate(MODEL, "Name three colors.", options=opts).response
    words = full.split()
    stop = words[len(words) // 2]
    cut = client.generate(MODEL, "Name three colors.", options={**opts, "stop": [stop]})
    assert cut.done_reason == "stop" and cut.response == full[: full.index(stop)]


def test_non_ascii_text_arrives_whole(engine_url):
    parts = list(
        ollama.Client(engine_url).generate(
            MODEL, "하늘은 왜 파란가요? 🌤️", options={**OPTS, "num_predict": 30}, stream=True
        )
    )
    text = "".join(p.response for p in parts)
    assert text and "\ufffd" not in text


async def test_concurrent_requests_queue_and_never_interleave(engine_url):
    client = ollama.AsyncClient(engine_url)
    alone = (await client.chat(MODEL, MSGS, options=OPTS)).message.content

    async def one():
        spans, text = [], ""
        loop = asyncio.get_running_loop()
        async for part in await client.chat(MODEL, MSGS, options=OPTS, stream=True):
            spans.append(loop.time())
            text += part.message.content
        return spans[0], spans[-1], text

    results = sorted(await asyncio.gather(one(), one(), one()))
    assert [r[2] for r in results] == [alone] * 3  # a shared context would corrupt the text
    for (_, end_a, _), (start_b, _, _) in itertools.pairwise(results):
        assert start_b >= end_a  # one generation at a time


def test_client_disconnect_stops_generation(engine_url):
    body = {
        "model": MODEL,
        "prompt": "Tell me a long story.",
        "options": {"num_predict": 2000, "temperature": 0},
    }
    with httpx.stream("POST", f"{engine_url}/api/generate", json=body) as r:
        lines = r.iter_lines()
        for _ in range(3):
            json.loads(next(lines))
    # the next request waits for the slot: once it is answered the cancelled job has ended
    ollama.Client(engine_url).generate(MODEL, "Hi", options=OPTS)
    jobs = httpx.get(f"{engine_url}/llmtop/jobs").json()["jobs"]
    cancelled = [j for j in jobs if j["cancelled"]]
    assert cancelled, jobs
    # 3 lines were read; at most a token or two more may have been in flight at the close
    print("cancelled job:", cancelled[-1])
    assert cancelled[-1]["eval_count"] <= 3 + 2


def test_client_leaving_a_non_streaming_request_stops_generation(engine_url):
    body = {"model": MODEL, "prompt": "Tell me a long story.", "stream": False,
            "options": {"num_predict": 3000, "temperature": 0}}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{engine_url}/api/generate", json=body, timeout=1.0)  # we leave after 1 s
    ollama.Client(engine_url).generate(MODEL, "Hi", options=OPTS)  # queues behind it
    jobs = httpx.get(f"{engine_url}/llmtop/jobs").json()["jobs"]
    left = [j for j in jobs if j["cancelled"] and j["endpoint"] == "/api/generate"]
    assert left, jobs
    # ~1 s of decoding at tens of tokens/s plus the poll interval: far below 3000
    assert left[-1]["eval_count"] < 500


def test_the_base_model_is_served_as_ollama_serves_a_template_less_model(engine_url):
    # Ollama's default template is `{{ .Prompt }}`: the model sees the text alone, and a base
    # model continues it as prose instead of echoing it inside a chat template it never saw
    from llmtop.engines.ollama import OllamaEngine

    async def details():
        engine = OllamaEngine(engine_url)
        try:
            return await engine.model_info(MODEL)
        finally:
            await engine.aclose()

    assert asyncio.run(details()).chat_template is False
    prompt = "Explain in detail why the sky is blue"
    reply = ollama.Client(host=engine_url).chat(
        model=MODEL, messages=[{"role": "user", "content": prompt}],
        options={"temperature": 0, "seed": 42, "num_predict": 40},
    )
    text = reply.message.content
    assert prompt.lower() not in text.lower()  # no echo
    assert len(text.split()) >= 10 and "sky" in text.lower()  # prose about the prompt
