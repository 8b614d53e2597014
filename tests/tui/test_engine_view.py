"""What the engine panel says for each kind of engine (tui/state/engine_view.py), from
readings built by hand: vLLM's queue, KV and prefix hits; Ollama's models as `ollama ps`
prints them, counting down; many slots summed; the decode line either side of 15 %."""

from __future__ import annotations

from datetime import UTC, datetime

from llmtop.engines.discovery import FoundEngine
from llmtop.engines.live_state import EngineState, LoadedModel, SlotState
from llmtop.tui.state.engine_view import MAX_SLOT_LINES, panel_text

NOW = datetime(2026, 12, 6, 14, 0, 0, tzinfo=UTC)


def test_vllm_queue_kv_and_prefix_hits() -> None:
    state = EngineState("vllm", "http://127.0.0.1:8000", processing=3.0, waiting=2.0,
                        kv_pct=12.5, kv_source="/metrics kv_cache_usage_perc",
                        tokens_per_s=250.0, prefix_hit_pct=75.0)
    lines = panel_text(state, NOW).plain.splitlines()
    # 12.5 % of a 10-cell bar rounds to 1 cell
    assert lines[0] == ("3 running · 2 waiting · KV █·········  12.5 % · 250.0 tok/s · "
                        "prefix hits 75 %")
    assert lines[1] == "KV from /metrics kv_cache_usage_perc"


def test_ollama_models_count_down_and_absent_is_not_zero() -> None:
    models = (LoadedModel("qwen3:8b", 5_200_000_000, 2_600_000_000, 8192,
                          "2026-12-06T14:04:32Z"),
              LoadedModel("gemma3:270m", 253_113_024, 0, None, "2026-12-06T13:59:00Z"),
              LoadedModel("keep", 10, 10, None, "2318-03-15T00:00:00Z"))
    text = panel_text(EngineState("ollama", "u", models=models), NOW).plain
    assert text.splitlines() == [
        "qwen3:8b  5.2 GB  50%/50% CPU/GPU  ctx 8192  unloads in 4:32",
        "gemma3:270m  0.3 GB  100% CPU  expired",
        "keep  0.0 GB  100% GPU  kept loaded",
    ]
    assert panel_text(EngineState("ollama", "u", models=()), NOW).plain == (
        "no model loaded (/api/ps)")
    head = panel_text(EngineState("llama-server", "u"), NOW).plain.splitlines()[0]
    assert head == "n/a processing · n/a deferred · KV n/a"  # nothing read: n/a, never 0


def test_many_slots_are_summed_and_the_decode_line() -> None:
    slots = tuple(SlotState(i, i % 2 == 0, 512, 100 if i % 2 == 0 else None)
                  for i in range(12))
    state = EngineState("llama-server", "u", processing=6.0, waiting=0.0, slots=slots)
    lines = panel_text(state, NOW, client_decode=42.0, server_decode=50.0).plain.splitlines()
    assert sum(line.startswith("slot ") for line in lines) == MAX_SLOT_LINES
    assert "+4 slots: 2 busy" in lines  # slots 8-11: 8 and 10 busy
    # 42 against 50: -16 %, past 15 %
    assert lines[-1] == "⚠ engine says 50.0 tok/s decode, llmtop measured 42.0 (-16 %, over 15 %)"
    agree = panel_text(state, NOW, client_decode=48.0, server_decode=50.0).plain
    assert agree.splitlines()[-1] == "decode: engine 50.0 tok/s, llmtop 48.0 — agree"


def test_unsupported_engines_and_the_others() -> None:
    others = [FoundEngine("vllm", "http://127.0.0.1:8000"),
              FoundEngine("lm-studio", "http://127.0.0.1:1234")]
    text = panel_text(None, NOW, unsupported="lm-studio publishes no live figures",
                      others=others).plain
    assert text == ("lm-studio publishes no live figures\nalso answering: vllm at "
                    "http://127.0.0.1:8000, lm-studio at http://127.0.0.1:1234 — F5 picks one")
    assert panel_text(None, NOW).plain == "reading the engine's own figures (every 1 s)…"
