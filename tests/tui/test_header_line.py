"""The header's identity at every width (issue 32, finding H: it was cut mid-word at 80)."""

from __future__ import annotations

from llmtop.tui.widgets.header_line import LOG_ROOM, fit_parts

# the embedded engine's header as identity_parts ranks it (0: always kept)
PARTS = [
    (0, "llmtop"), (0, "embedded"), (5, "http://127.0.0.1:41234"), (0, "gemma3:270m"),
    (2, "Q8_0"), (3, "268.10M"), (6, "v0.3.36"), (4, "llama.cpp repack on"),
]
WHOLE = ("llmtop · embedded · http://127.0.0.1:41234 · gemma3:270m · Q8_0 · 268.10M · v0.3.36"
         " · llama.cpp repack on")


def test_a_wide_header_keeps_every_part() -> None:
    assert len(WHOLE) == 105  # 120 columns less the log's 13 hold it
    assert fit_parts(PARTS, 120 - LOG_ROOM) == WHOLE


def test_a_narrow_header_drops_whole_parts_version_first() -> None:
    # 100 columns: 87 cells; without " · v0.3.36" (10) 95, without the host's 25 cells 70
    assert fit_parts(PARTS, 100 - LOG_ROOM) == (
        "llmtop · embedded · gemma3:270m · Q8_0 · 268.10M · llama.cpp repack on"
    )
    # 80 columns: 67 cells; the configuration's " · llama.cpp repack on" (22) goes too: 48
    assert fit_parts(PARTS, 80 - LOG_ROOM) == "llmtop · embedded · gemma3:270m · Q8_0 · 268.10M"


def test_the_parts_that_stay_are_cut_only_when_nothing_else_can_go() -> None:
    # "llmtop · embedded · gemma3:270m" is 31 cells: in 30 it ends with "…"
    assert fit_parts(PARTS, 30) == "llmtop · embedded · gemma3:27…"
    assert fit_parts(PARTS, 0) == ""


def test_a_models_path_is_named_by_its_base_name() -> None:
    from llmtop.tui.widgets.header_line import model_label

    # llama-server's /v1/models id for `--model /root/.cache/llmtop/models/…gguf`
    assert model_label("/root/.cache/llmtop/models/gemma-3-270m-q4_k_m.gguf") == (
        "gemma-3-270m-q4_k_m.gguf")
    assert model_label("C:\\models\\qwen3-8b.gguf") == "qwen3-8b.gguf"
    assert model_label("models/tiny.GGUF") == "tiny.GGUF"
    for name in ("gemma3:270m", "hf.co/unsloth/Qwen3-8B-GGUF:Q4_K_M",
                 "Qwen/Qwen2.5-0.5B-Instruct"):
        assert model_label(name) == name  # names, not paths


def test_llama_servers_configuration_in_the_header() -> None:
    from llmtop.tui.widgets.header_line import llama_server_parts

    config = {"server": "llama-server", "total_slots": 4, "n_ctx_per_slot": 1024,
              "flags": {"threads": "2", "parallel": "4", "cache_type_k": "q8_0",
                        "source": "command line of pid 9"}}
    assert llama_server_parts(config) == [
        (2, "4 slots × 1024 ctx"), (3, "2 threads"), (4, "flash-attn auto · KV q8_0/f16")]
    # the command line not read: only what /props says
    unread = {**config, "flags": {"source": "not read: remote"}}
    assert llama_server_parts(unread) == [(2, "4 slots × 1024 ctx")]
    assert llama_server_parts({"use_extra_bufts": True}) is None  # the embedded engine's


def test_a_version_that_is_no_number_is_not_prefixed_with_v() -> None:
    from types import SimpleNamespace

    from llmtop.tui.widgets.header_line import identity_parts

    def parts(version: str) -> list[str]:
        conn = SimpleNamespace(info=None, engine=SimpleNamespace(name="e", host="h"),
                               model="m", version=version, engine_config=None,
                               engine_config_short=None)
        return [text for _, text in identity_parts(conn)]  # type: ignore[arg-type]

    assert parts("0.9.0")[-1] == "v0.9.0"
    assert parts("llama-server b6500-0c1e570")[-1] == "llama-server b6500-0c1e570"
