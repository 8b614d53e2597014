"""What the engine itself says is loaded (Ollama's `GET /api/ps`) → findings.

Every figure here comes from `/api/ps` (`SOURCE`), which reports per loaded model its `size`
(bytes it holds) and `size_vram` (bytes in VRAM); docs/method.md, "GPU and memory figures", asks to
say which tool each memory figure came from, so every message ends with "(from /api/ps)".

Findings:
* "other-models-loaded" WARN: models besides the measured one hold memory (and, on the GPU,
  memory bandwidth) and may be scheduled alongside it. With no measured model named, WARN
  only when more than one model is loaded (any of them could be the one measured).
* "partial-offload" WARN: the measured model is split, `0 < size_vram < size`; value = % of
  its bytes outside VRAM. Layers on the CPU run at memory-bandwidth speed, not the GPU's.
* "cpu-only": `size_vram == 0`. WARN when the machine has a GPU (`gpu_present=True`), INFO
  when it has none or that is unknown (a CPU-only machine has no other choice).
* "model-not-loaded" INFO: the first request will include loading (the warm-up covers it).
* "model-loaded" INFO: the measured model, fully in VRAM (or its placement), for the record.

An engine that does not answer `/api/ps` is not a finding: `engine_findings` returns
`CouldNotCheck` so `llmtop preflight` can exit 2 ("could not check").
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from llmtop.probes.engine_identity import identify_engine
from llmtop.probes.verdict import Finding, Level

SOURCE = "/api/ps"
PS_TIMEOUT_S = 2.0  # /api/ps is answered from the scheduler's memory: milliseconds locally
GB = 1e9  # Ollama's own `ollama ps` prints decimal GB


@runtime_checkable
class EngineLike(Protocol):
    """What `engine_findings` needs of an engine client (`OllamaEngine` fits): its base URL
    and its `GET /api/ps` answer (any object or dict with a `models` list)."""

    host: str

    async def ps(self) -> Any:
        """The engine's `/api/ps` answer. May raise anything: that is "could not check"."""
        ...


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """One entry of `/api/ps`: name, `size` and `size_vram` in bytes (None when absent)."""

    name: str
    size: int | None
    size_vram: int | None

    @property
    def cpu_percent(self) -> float | None:
        """% of the model's bytes outside VRAM, 0–100; None when a size is unknown or 0."""
        if not self.size or self.size_vram is None:
            return None
        return 100.0 * max(0, self.size - self.size_vram) / self.size

    @property
    def processor(self) -> str:
        """Where the model runs as `ollama ps` says it (its PROCESSOR column, from the same
        two figures): "100 % CPU" (size_vram 0), "100 % GPU" (size_vram == size),
        "42 %/58 % CPU/GPU" (the shares of the bytes, rounded), "unknown" (a size missing,
        0, or more VRAM than the whole)."""
        size, vram = self.size, self.size_vram
        if vram == 0:
            return "100 % CPU"
        if size is None or vram is None or size <= 0 or vram > size:
            return "unknown"
        if vram == size:
            return "100 % GPU"
        cpu = round(100 * (size - vram) / size)
        return f"{cpu} %/{100 - cpu} % CPU/GPU"

    def describe(self) -> str:
        """"llama3:8b (4.9 GB, 100 % in VRAM)"."""
        size = f"{self.size / GB:.1f} GB" if self.size is not None else "size unknown"
        cpu = self.cpu_percent
        where = "placement unknown" if cpu is None else f"{100 - cpu:.0f} % in VRAM"
        return f"{self.name} ({size}, {where})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, with the source of the figures."""
        return {"name": self.name, "size": self.size, "size_vram": self.size_vram,
                "processor": self.processor, "source": SOURCE}


@dataclass(frozen=True, slots=True)
class CouldNotCheck:
    """The engine's state could not be read: `reason` says why (for exit code 2)."""

    host: str
    reason: str


def parse_ps(payload: Any) -> list[LoadedModel]:
    """`/api/ps` reply (the ollama client's `ProcessResponse`, or the plain JSON dict) →
    loaded models. Raises TypeError when it has no `models` list."""
    models = _get(payload, "models")
    if not isinstance(models, list | tuple):
        raise TypeError(f"{SOURCE} reply has no 'models' list")
    out = []
    for m in models:
        name = _get(m, "model") or _get(m, "name") or "(unnamed)"
        out.append(LoadedModel(str(name), _int(_get(m, "size")), _int(_get(m, "size_vram"))))
    return out


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def same_model(a: str, b: str) -> bool:
    """Tags name the same model when equal, ":latest" being implied when no tag is given."""

    def norm(tag: str) -> str:
        return tag if ":" in tag.rsplit("/", 1)[-1] else f"{tag}:latest"

    return norm(a) == norm(b)


async def engine_findings(
    engine: EngineLike,
    model: str | None,
    *,
    gpu_present: bool | None = None,
    timeout_s: float = PS_TIMEOUT_S,
) -> list[Finding] | CouldNotCheck:
    """Findings about the engine's loaded models (`GET /api/ps` through `engine.ps()`).

    model: the tag that will be measured (None: not named). gpu_present: whether the machine
    has a GPU the engine could use (None: unknown). Returns `CouldNotCheck` — never raises —
    when `/api/ps` does not answer within `timeout_s` or its reply cannot be read.
    """
    try:
        payload = await asyncio.wait_for(engine.ps(), timeout_s)
        loaded = parse_ps(payload)
    except Exception as exc:  # noqa: BLE001 - any failure means "could not check"
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return CouldNotCheck(engine.host, f"cannot read {SOURCE} at {engine.host} ({detail})")
    return findings_from_loaded(loaded, model, gpu_present=gpu_present)


def findings_from_loaded(
    loaded: list[LoadedModel], model: str | None, *, gpu_present: bool | None = None
) -> list[Finding]:
    """Pure: the findings for a parsed `/api/ps` list (see the module docstring)."""
    if model is None:
        return _unnamed(loaded)
    mine = [m for m in loaded if same_model(m.name, model)]
    others = [m for m in loaded if not same_model(m.name, model)]
    out: list[Finding] = []
    if others:
        out.append(_others(others, f"besides {model}"))
    if not mine:
        out.append(
            Finding(
                "model-not-loaded",
                Level.INFO,
                None,
                None,
                "",
                f"{model} is not loaded yet (from {SOURCE}): the first request will load it",
                "nothing to do: the warm-up request absorbs the load time",
            )
        )
        return out
    out.append(_placement(mine[0], gpu_present))
    return out


def _unnamed(loaded: list[LoadedModel]) -> list[Finding]:
    if len(loaded) > 1:
        return [_others(loaded, "at once")]
    return [
        Finding(
            "model-loaded",
            Level.INFO,
            None,
            None,
            "",
            f"loaded: {m.describe()} (from {SOURCE})",
            "nothing to do",
        )
        for m in loaded
    ]


def _others(others: list[LoadedModel], context: str) -> Finding:
    listing = ", ".join(m.describe() for m in others)
    total = sum(m.size or 0 for m in others)
    n = len(others)
    noun = "model is" if n == 1 else "models are"
    return Finding(
        "other-models-loaded",
        Level.WARN,
        round(total / GB, 2),
        0.0,
        "GB loaded",
        f"{n} {noun} loaded {context}: {listing} (from {SOURCE}); "
        "they hold memory and may compete with the measured model",
        "unload them (`ollama stop MODEL`) or set OLLAMA_MAX_LOADED_MODELS=1",
    )


def _placement(m: LoadedModel, gpu_present: bool | None) -> Finding:
    cpu = m.cpu_percent
    if m.size_vram == 0 and m.size:
        has_gpu = gpu_present is True
        return Finding(
            "cpu-only",
            Level.WARN if has_gpu else Level.INFO,
            100.0,
            0.0 if has_gpu else None,
            "% of model on CPU",
            f"{m.name} runs entirely on the CPU: 0 of {m.size / GB:.1f} GB in VRAM (from {SOURCE})"
            + ("" if has_gpu else "; no usable GPU was found" if gpu_present is False else ""),
            "check that the engine sees the GPU (driver, CUDA/ROCm build, OLLAMA_* settings)"
            if has_gpu
            else "nothing to do on a CPU-only machine; expect CPU speeds",
        )
    if cpu is not None and cpu > 0:
        on_cpu = (m.size or 0) - (m.size_vram or 0)
        return Finding(
            "partial-offload",
            Level.WARN,
            round(cpu, 1),
            0.0,
            "% of model on CPU",
            f"{m.name} is {cpu:.0f} % on the CPU: {on_cpu / GB:.1f} of {(m.size or 0) / GB:.1f} GB"
            f" outside VRAM, {m.processor} as `ollama ps` says (from {SOURCE})",
            "free GPU memory (other models, other programs), use a smaller quantization "
            "or a smaller num_ctx so the whole model fits",
        )
    return Finding(
        "model-loaded",
        Level.INFO,
        None if cpu is None else round(100.0 - cpu, 1),
        None,
        "" if cpu is None else "% in VRAM",
        f"loaded: {m.describe()} (from {SOURCE})",
        "nothing to do",
    )


def local_engine_pids(host: str, override: Collection[int] | None = None) -> set[int]:
    """Best effort: pids of the measured engine's local processes (children included), so the
    probes count them as the engine rather than background load. `override`: pids the user
    named (`--engine-pid`, `[engine] pids`); see `engine_identity.identify_engine` for the
    ways tried without privileges. Empty for a remote host or when nothing identifies it."""
    return set(identify_engine(host, override).pids)
