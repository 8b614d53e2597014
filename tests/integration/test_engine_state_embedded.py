"""The engine panel's Ollama path against the real embedded engine (llama.cpp + the bundled
Gemma 3 270M, its Ollama-compatible `/api/ps`): a model loaded with keep_alive 5m is listed
with its size, CPU placement, context and a keep-alive counting down from 5:00."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from llmtop.engines.live_state import StateReader
from llmtop.tui.state.engine_view import model_line
from tests.conftest import MODEL

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def test_the_loaded_model_and_its_keep_alive(engine_url):
    async with httpx.AsyncClient() as client:
        resp = await client.post(f"{engine_url}/api/generate", timeout=120, json={
            "model": MODEL, "prompt": "hi", "stream": False, "keep_alive": "5m",
            "options": {"num_predict": 2}})
        assert resp.status_code == 200
    reader = StateReader("ollama", engine_url)
    state = await reader.read()
    await reader.aclose()
    assert state.notes == () and state.models is not None
    (model,) = state.models
    # the embedded engine runs on the CPU only: size_vram 0, as `ollama ps` says "100% CPU"
    assert model.name == MODEL and model.size_vram == 0 and model.processor() == "100% CPU"
    assert model.size is not None and model.size > 200_000_000  # the 247 MB GGUF
    assert model.context is not None and model.context > 0
    left = model.expires_in_s(datetime.now(UTC))
    assert left is not None and 0 < left <= 300  # keep_alive 5m, counting down
    line = model_line(model, datetime.now(UTC))
    assert line.startswith(f"{MODEL}  0.3 GB  100% CPU  ctx ") and "unloads in 4:" in line
