"""Engine findings from Ollama's /api/ps, on fake replies with exact values."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import ollama

from llmtop.probes.engine_state import (
    CouldNotCheck,
    LoadedModel,
    engine_findings,
    local_engine_pids,
    parse_ps,
    same_model,
)
from llmtop.probes.verdict import Level

HOST = "http://127.0.0.1:11434"


class FakeEngine:
    """An engine whose `/api/ps` answer is scripted (`EngineLike`)."""

    host = HOST

    def __init__(
        self, reply: Any = None, error: Exception | None = None, delay_s: float = 0.0
    ) -> None:
        self.reply, self.error, self.delay_s = reply, error, delay_s

    async def ps(self) -> Any:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.error is not None:
            raise self.error
        return self.reply


def engine(reply: Any = None, **kw: Any) -> FakeEngine:
    return FakeEngine(reply, **kw)


def ps(*models: tuple[str, int, int]) -> dict[str, Any]:
    """The plain JSON shape of /api/ps."""
    return {"models": [{"name": n, "model": n, "size": s, "size_vram": v} for n, s, v in models]}


def run(eng: Any, model: str | None, **kw: Any) -> Any:
    return asyncio.run(engine_findings(eng, model, **kw))


def test_measured_model_alone_fully_in_vram_is_info_only() -> None:
    found = run(engine(ps(("qwen2.5:7b", 5_000_000_000, 5_000_000_000))), "qwen2.5:7b")
    assert [(f.code, f.level, f.value, f.unit) for f in found] == [
        ("model-loaded", Level.INFO, 100.0, "% in VRAM")
    ]
    assert found[0].message == "loaded: qwen2.5:7b (5.0 GB, 100 % in VRAM) (from /api/ps)"


def test_other_models_loaded_warn_with_their_sizes() -> None:
    reply = ps(
        ("qwen2.5:7b", 5_000_000_000, 5_000_000_000),
        ("llama3:8b", 4_900_000_000, 4_900_000_000),
        ("nomic-embed-text:latest", 300_000_000, 0),
    )
    found = run(engine(reply), "qwen2.5:7b")
    other = found[0]
    assert (other.code, other.level, other.threshold, other.unit) == (
        "other-models-loaded", Level.WARN, 0.0, "GB loaded"
    )
    assert other.value == 5.2  # (4.9e9 + 0.3e9) / 1e9
    assert other.message == (
        "2 models are loaded besides qwen2.5:7b: llama3:8b (4.9 GB, 100 % in VRAM), "
        "nomic-embed-text:latest (0.3 GB, 0 % in VRAM) (from /api/ps); "
        "they hold memory and may compete with the measured model"
    )
    assert other.remedy == "unload them (`ollama stop MODEL`) or set OLLAMA_MAX_LOADED_MODELS=1"
    assert [f.code for f in found] == ["other-models-loaded", "model-loaded"]


def test_partial_offload_reports_the_share_on_cpu() -> None:
    # 5.0 GB model, 3.8 GB in VRAM: 1.2 GB = 24 % of it on the CPU
    found = run(engine(ps(("qwen2.5:7b", 5_000_000_000, 3_800_000_000))), "qwen2.5:7b")
    assert len(found) == 1
    f = found[0]
    assert (f.code, f.level, f.value, f.threshold, f.unit) == (
        "partial-offload", Level.WARN, 24.0, 0.0, "% of model on CPU"
    )
    # `ollama ps` rounds the CPU share and gives the GPU the rest: 24 %/76 %
    assert f.message == ("qwen2.5:7b is 24 % on the CPU: 1.2 of 5.0 GB outside VRAM, "
                         "24 %/76 % CPU/GPU as `ollama ps` says (from /api/ps)")


def test_cpu_only_warns_only_when_a_gpu_is_present() -> None:
    reply = ps(("gemma3:270m", 300_000_000, 0))
    with_gpu = run(engine(reply), "gemma3:270m", gpu_present=True)[0]
    assert (with_gpu.code, with_gpu.level, with_gpu.value, with_gpu.threshold) == (
        "cpu-only", Level.WARN, 100.0, 0.0
    )
    assert (
        with_gpu.message
        == "gemma3:270m runs entirely on the CPU: 0 of 0.3 GB in VRAM (from /api/ps)"
    )
    unknown = run(engine(reply), "gemma3:270m")[0]
    assert (unknown.code, unknown.level, unknown.threshold) == ("cpu-only", Level.INFO, None)
    no_gpu = run(engine(reply), "gemma3:270m", gpu_present=False)[0]
    assert no_gpu.level is Level.INFO and no_gpu.message.endswith("; no usable GPU was found")


def test_measured_model_not_loaded_is_info() -> None:
    found = run(engine(ps()), "qwen2.5:7b")
    assert [(f.code, f.level) for f in found] == [("model-not-loaded", Level.INFO)]
    assert (
        found[0].message
        == "qwen2.5:7b is not loaded yet (from /api/ps): the first request will load it"
    )


def test_latest_tag_is_implied() -> None:
    assert same_model("llama3", "llama3:latest") and same_model("llama3:latest", "llama3")
    assert not same_model("llama3:8b", "llama3")
    assert same_model("registry.local:5000/ns/m", "registry.local:5000/ns/m:latest")
    found = run(engine(ps(("llama3:latest", 10, 10))), "llama3")
    assert [f.code for f in found] == ["model-loaded"]


def test_no_model_named() -> None:
    one = run(engine(ps(("a:1", 10, 10))), None)
    assert [(f.code, f.level) for f in one] == [("model-loaded", Level.INFO)]
    two = run(engine(ps(("a:1", 1_000_000_000, 1_000_000_000), ("b:1", 2_000_000_000, 0))), None)
    assert [(f.code, f.level, f.value) for f in two] == [("other-models-loaded", Level.WARN, 3.0)]
    assert two[0].message.startswith(
        "2 models are loaded at once: a:1 (1.0 GB, 100 % in VRAM), b:1 "
    )
    assert run(engine(ps()), None) == []


def test_the_ollama_client_reply_object_is_parsed() -> None:
    reply = ollama.ProcessResponse(
        models=[ollama.ProcessResponse.Model(model="m:1", name="m:1", size=100, size_vram=75)]
    )
    assert parse_ps(reply) == [LoadedModel("m:1", 100, 75)]
    assert LoadedModel("m:1", 100, 75).cpu_percent == 25.0
    assert LoadedModel("m:1", None, 75).cpu_percent is None


def test_unreachable_engine_is_could_not_check_not_a_finding() -> None:
    got = run(engine(error=httpx.ConnectError("All connection attempts failed")), "m")
    assert got == CouldNotCheck(
        HOST, f"cannot read /api/ps at {HOST} (ConnectError: All connection attempts failed)"
    )


def test_hung_engine_times_out() -> None:
    got = run(engine(ps(), delay_s=5.0), "m", timeout_s=0.05)
    assert isinstance(got, CouldNotCheck)
    assert got.reason == f"cannot read /api/ps at {HOST} (TimeoutError)"


def test_reply_without_models_list_is_could_not_check() -> None:
    got = run(engine({"error": "nope"}), "m")
    assert isinstance(got, CouldNotCheck)
    assert (
        got.reason
        == f"cannot read /api/ps at {HOST} (TypeError: /api/ps reply has no 'models' list)"
    )


def test_local_engine_pids_only_for_loopback() -> None:
    assert local_engine_pids("http://example.com:11434") == set()
    assert isinstance(local_engine_pids("http://127.0.0.1:1"), set)


def test_the_split_reads_as_ollama_ps_prints_it() -> None:
    # ollama's PROCESSOR column: size_vram 0 → CPU, == size → GPU, else rounded CPU share
    assert LoadedModel("a", 5_000_000_000, 0).processor == "100 % CPU"
    assert LoadedModel("a", 5_000_000_000, 5_000_000_000).processor == "100 % GPU"
    # 2.1 of 5.0 GB outside VRAM = 42 %, so 58 % on the GPU
    assert LoadedModel("a", 5_000_000_000, 2_900_000_000).processor == "42 %/58 % CPU/GPU"
    assert LoadedModel("a", 5_000_000_000, 6_000_000_000).processor == "unknown"
    assert LoadedModel("a", None, 1).processor == "unknown"
    assert LoadedModel("a", 4, 4).to_dict()["processor"] == "100 % GPU"
