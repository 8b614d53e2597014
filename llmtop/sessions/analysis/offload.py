""""It says 100 % GPU, so why is it slow?": the engine's claim of where the model runs set
against what the machine showed while a request ran.

Ollama's `/api/ps` says how much of a loaded model is in GPU memory (`size_vram` of `size`;
`ollama ps` prints it as "100% GPU" or "42%/58% CPU/GPU"). When it says all of it, decode runs
on the GPU and the engine's own processes need little CPU: one thread feeds the GPU. The
finding `offload-mismatch` is raised, from the probe samples taken during the request, when

* no GPU is visible at all (neither NVML nor the kernel's DRM files show one): the claim
  cannot be checked, and the engine may be a CPU-only build;
* the engine's processes used more than RUNNER_CORES cores (a median over the samples):
  layers or the KV cache run on the CPU (ollama/ollama #12586, #9704: "100% GPU" with a
  busy CPU and an idle GPU);
* the GPU stayed near idle (median busy under GPU_IDLE_PERCENT) while tokens streamed.

The remedy names the causes in the engine's own terms. Absent readings stay absent: a
finding is raised only on a figure that was read.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from llmtop.sessions.records.schema import FindingRecord, ProbeRecord

ALL_ON_GPU = 0.99  # size_vram / size at or above it: "100% GPU", as `ollama ps` rounds it
RUNNER_CORES = 1.2  # one feeding thread, plus the margin of a sample's window
RUNNER_FAIL_CORES = 2.0  # two cores or more: the model's layers are computed on the CPU
GPU_IDLE_PERCENT = 10.0
ENGINE_CATEGORY = "measured engine"  # probes.catalogue.Category.ENGINE's value

REMEDIES = {
    "ollama": ("likely causes: a context larger than the GPU's memory (the KV cache spills to "
               "the CPU: lower num_ctx or OLLAMA_CONTEXT_LENGTH), num_gpu set too low for "
               "this model (remove it or raise it), or a CPU-only runner (the server log says "
               "how many layers were offloaded: look for 'offloaded N/M layers to GPU')"),
    "llama-server": ("likely causes: --n-gpu-layers (-ngl) too low, a context larger than the "
                     "GPU's memory (--ctx-size), or a CPU-only build (its log says 'offloaded "
                     "N/M layers to GPU')"),
}


def gpu_share(size: int | None, size_vram: int | None) -> float | None:
    """The share of a loaded model in GPU memory (size_vram / size), None when not said."""
    if not size or size <= 0 or size_vram is None or size_vram < 0:
        return None
    return min(1.0, size_vram / size)


def _engine_cores(probe: ProbeRecord) -> float | None:
    if probe.processes is None or probe.processes.warming_up:
        return None
    figures = [a.cpu_percent for a in probe.processes.apps
               if a.category == ENGINE_CATEGORY and a.cpu_percent is not None]
    return sum(figures) / 100.0 if figures else None


def _gpu_busy(probe: ProbeRecord) -> float | None:
    if probe.gpu is None:
        return None
    busy = [d.util_percent for d in probe.gpu.devices if d.util_percent is not None]
    return max(busy) if busy else None


def _no_gpu(probes: Sequence[ProbeRecord]) -> bool:
    read = [p.gpu for p in probes if p.gpu is not None]
    return bool(read) and all(not g.devices for g in read)


def offload_finding(share: float | None, probes: Sequence[ProbeRecord],
                    decode_tps: float | None, engine: str = "ollama") -> FindingRecord | None:
    """The `offload-mismatch` finding for a request whose engine claimed `share` of the model
    in GPU memory, from the probe samples taken while it ran (`probes`) and its decode rate
    (tokens/s, named in the message); None when the claim is not "all on the GPU" or the
    machine agreed. engine: "ollama" or "llama-server", for the remedy's terms."""
    if share is None or share < ALL_ON_GPU or not probes:
        return None
    remedy = REMEDIES.get(engine, REMEDIES["ollama"])
    rate = f", decode {decode_tps:.1f} tok/s" if decode_tps else ""
    cores = [c for p in probes if (c := _engine_cores(p)) is not None]
    busy = [b for p in probes if (b := _gpu_busy(p)) is not None]
    runner = statistics.median(cores) if cores else None
    gpu = statistics.median(busy) if busy else None
    if _no_gpu(probes):
        used = f"; its processes used {runner:.1f} cores of CPU" if runner is not None else ""
        return FindingRecord("offload-mismatch", "fail", "the engine says the model is 100 % "
                             f"on the GPU, but no GPU is visible on this machine{used}{rate}",
                             remedy, None if runner is None else round(runner, 2), None,
                             "cores")
    gpu_text = f", GPU busy {gpu:.0f} %" if gpu is not None else ""
    if runner is not None and runner > RUNNER_CORES:
        level = "fail" if runner >= RUNNER_FAIL_CORES else "warn"
        return FindingRecord("offload-mismatch", level, "the engine says the model is 100 % on "
                             f"the GPU, but its processes used {runner:.1f} cores of CPU "
                             f"during the request{gpu_text}{rate}", remedy,
                             round(runner, 2), RUNNER_CORES, "cores")
    if gpu is not None and gpu < GPU_IDLE_PERCENT:
        return FindingRecord("offload-mismatch", "warn", "the engine says the model is 100 % "
                             f"on the GPU, but the GPU was {gpu:.0f} % busy while tokens "
                             f"streamed{rate}", remedy, round(gpu, 1), GPU_IDLE_PERCENT,
                             "% GPU busy")
    return None


__all__ = ["ALL_ON_GPU", "RUNNER_CORES", "gpu_share", "offload_finding"]
